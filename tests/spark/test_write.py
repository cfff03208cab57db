"""df.write / writeStream .format("logspool"): staged by tasks, published by the driver.

The tests that run Spark run twice: with the Python writer (``format("logspool-py")``, as
``write(df, jvm=False)`` picks it) and with ``format("logspool")``, which in this session (the jar
loaded, ``register`` called: conftest) runs the tasks on the JVM and the same commit.

A batch write appends every row's payload, in partition order; a job that fails in a task
leaves nothing in the log and no staged file; a streaming sink writes each batch once, also when
Spark replays a batch after a failure (the replay is driven here by calling the sink's commit
again, as Spark does, with real staged files), and when the driver died part-way through
appending a batch.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.types import StringType, StructField, StructType

import logspool
from logspool.spark import _jvm_write, _source


@pytest.fixture(params=["python", "by-name"])
def name(request: pytest.FixtureRequest, spark: Any) -> str:
    """The format name of a write: the Python writer's, or "logspool" (JVM tasks here)."""
    return _jvm_write.python_writer(spark) if request.param == "python" else "logspool"


def payloads(path: Path) -> list[bytes]:
    with logspool.open(path, readonly=True) as log:
        return [r.payload for r in log.read()]


def test_batch_write_appends_every_row_in_partition_order(spark: Any, tmp_path: Path, name: str) -> None:
    path = tmp_path / "log"
    df = spark.createDataFrame([(f"row-{i:04d}",) for i in range(1000)], "payload string").repartition(
        3, "payload"
    )
    expected = [r.payload.encode() for p in df.rdd.glom().collect() for r in p]
    df.write.format(name).mode("append").save(str(path))
    assert payloads(path) == expected
    binary = spark.createDataFrame(
        [(bytearray(b"\x00\xff%d" % i), i) for i in range(10)], "payload binary, n int"
    )
    binary.write.format(name).mode("append").save(str(path))
    assert payloads(path)[1000:] == [b"\x00\xff%d" % i for i in range(10)]
    assert not any((path / _source.STAGING_DIR).iterdir())


def test_writes_need_a_payload_column_and_append_mode(spark: Any, tmp_path: Path, name: str) -> None:
    df = spark.createDataFrame([(1,)], "n int")
    with pytest.raises(Exception, match=r"needs a column named payload .* the columns are \['n'\]"):
        df.write.format(name).mode("append").save(str(tmp_path / "log"))
    bad = spark.createDataFrame([(1,)], "payload int")
    with pytest.raises(Exception, match="column payload must be binary or string, not int"):
        bad.write.format(name).mode("append").save(str(tmp_path / "log"))
    ok = spark.createDataFrame([("x",)], "payload string")
    with pytest.raises(Exception, match="append-only"):
        ok.write.format(name).mode("overwrite").save(str(tmp_path / "log"))


def test_a_streaming_sink_copies_a_log_once_across_restarts(spark: Any, tmp_path: Path, name: str) -> None:
    source, sink = tmp_path / "source", tmp_path / "sink"
    with logspool.open(source) as log:
        log.append_many([b"s-%04d" % i for i in range(700)])

    def run() -> None:
        query = (
            spark.readStream.format("logspool")
            .option("startingPosition", "earliest")
            .option("maxRecordsPerTrigger", "250")
            .load(str(source))
            .select("payload")
            .writeStream.format(name)
            .option("checkpointLocation", str(tmp_path / "cp"))
            .trigger(availableNow=True)
            .start(str(sink))
        )
        query.awaitTermination(120)

    run()
    with logspool.open(source) as log:
        log.append_many([b"s-%04d" % i for i in range(700, 900)])
    run()
    assert payloads(sink) == [b"s-%04d" % i for i in range(900)]
    state = os.listdir(sink / _source.SINKS_DIR)  # named by the query's id, kept in its checkpoint
    query_id = json.loads((tmp_path / "cp" / "metadata").read_text().splitlines()[0])["id"]
    assert state == [hashlib.sha256(f"query:{query_id}".encode()).hexdigest()[:32]]


SCHEMA = StructType([StructField("payload", StringType())])


def staged_files_left(path: Path) -> list[Path]:
    """The files left under the log's staging directory (a stream's own directory stays there,
    empty, between its batches)."""
    root = path / _source.STAGING_DIR
    return [p for p in root.rglob("*") if not p.is_dir()] if root.exists() else []


def staged(sink: _source._StreamWriter, rows: list[str]) -> list[Any]:
    """A task's staging of ``rows``, handed over as Spark hands an Arrow writer its rows."""
    return [sink.write(iter([pa.record_batch([pa.array(rows, pa.string())], names=["payload"])]))]


def test_a_task_still_staging_when_its_write_ended_leaves_nothing(tmp_path: Path) -> None:
    """Spark fails a job when one task fails and cancels the others without waiting for them, so
    a task may still be staging when the driver's abort has removed the job's staging directory
    (a load-dependent leftover file, found by the suite in two workers). Such a task fails
    saying why, and leaves no file and no directory: the driver makes the directory, a task
    never does. A file staged before the end goes with the directory. A stream's directory stays
    for its next batch, emptied."""
    path = tmp_path / "log"
    writer = _source._BatchWriter({"path": str(path)}, SCHEMA)
    early = staged(writer, ["a", "b"])  # (a task that staged before the end)
    writer.abort(early)
    with pytest.raises(
        logspool.LogspoolError, match="staging directory of this write is gone: the write ended"
    ):
        staged(writer, ["late"])
    assert list((path / _source.STAGING_DIR).iterdir()) == [] and payloads(path) == []
    committed = _source._BatchWriter({"path": str(path)}, SCHEMA)
    committed.commit(staged(committed, ["c"]))
    with pytest.raises(logspool.LogspoolError, match="gone"):
        staged(committed, ["late"])  # (a speculative attempt still running after the commit)
    assert list((path / _source.STAGING_DIR).iterdir()) == [] and payloads(path) == [b"c"]
    sink = _source._StreamWriter({"path": str(path), "queryname": "q"}, SCHEMA)
    sink.abort(staged(sink, ["x"]), 0)
    late = staged(sink, ["late"])  # (a stream's directory stays: the next batch's commit takes it)
    assert staged_files_left(path) == [Path(late[0].path)]
    sink.commit(staged(sink, ["y"]), 0)
    assert not staged_files_left(path) and payloads(path) == [b"c", b"y"]
    # A directory renamed away that its removal left (on NFS, a file a late task held open):
    # the next write's driver removes it.
    kept = path / _source.STAGING_DIR / "batch-1.discarded-0f"
    kept.mkdir()
    (kept / ".nfs0001").write_bytes(b"late")
    _source._BatchWriter({"path": str(path)}, SCHEMA)
    assert not kept.exists()


def test_a_replayed_streaming_batch_is_not_written_twice(tmp_path: Path) -> None:
    path = str(tmp_path / "log")
    sink = _source._StreamWriter({"path": path, "queryname": "q"}, SCHEMA)
    sink.commit(staged(sink, ["a", "b"]), 0)
    sink.commit(staged(sink, ["c"]), 1)
    sink.commit(staged(sink, ["c"]), 1)  # Spark replays batch 1 after a failure
    sink.commit(staged(sink, ["a", "b"]), 0)  # and an older batch is never rewritten
    assert payloads(Path(path)) == [b"a", b"b", b"c"]


def test_a_batch_whose_commit_was_cut_short_is_finished_on_replay(tmp_path: Path) -> None:
    path = tmp_path / "log"
    sink = _source._StreamWriter({"path": str(path), "queryname": "q"}, SCHEMA)
    sink.commit(staged(sink, ["x"]), 0)
    # The driver recorded its intent for batch 1 at lsn 1, appended two of four records, died.
    state = path / _source.SINKS_DIR / sink.sink
    state.write_text(json.dumps({"batch": 1, "start": 1}))
    with logspool.open(path) as log:
        log.append_many([b"r0", b"r1"])
        log.append(b"someone else")  # another writer appended after the cut
    sink.commit(staged(sink, ["r0", "r1", "r2", "r3"]), 1)
    assert payloads(path) == [b"x", b"r0", b"r1", b"someone else", b"r2", b"r3"]
    assert json.loads(state.read_text()) == {"batch": 1, "done": True, "query": "query-name:q"}
    assert not staged_files_left(path)


_KILLED_COMMIT = """
import os, sys
import pyarrow as pa
from pyspark.sql.types import StringType, StructField, StructType
from logspool.spark import _source
sink = _source._StreamWriter({"path": sys.argv[1], "checkpointlocation": sys.argv[2]},
                             StructType([StructField("payload", StringType())]))
rows = [os.urandom(48).hex() for _ in range(int(sys.argv[3]))]  # differ on replay
staged = [sink.write(iter([pa.record_batch([pa.array(rows[i::4])], names=["payload"])])) for i in range(4)]
print("staged", flush=True)
sink.commit(staged, 1)
print("done", flush=True)
"""


def test_a_query_whose_rows_differ_on_replay_is_written_once_after_the_driver_is_killed(
    tmp_path: Path,
) -> None:
    """The driver killed while appending a batch whose rows are random (a uuid column): the replay
    computes other rows, and the log ends with exactly one copy of the batch, the first
    attempt's (before, the replay kept the longest prefix equal to its own rows: none, so the
    first attempt's part stayed and the whole new batch followed it)."""
    import signal
    import subprocess
    import sys
    import time

    rows = 400_000  # ~40 MB of payloads: time to be killed while the batch is written
    for attempt_no in range(5):  # until the kill lands inside the commit (observed, not timed)
        path, cp = tmp_path / f"log{attempt_no}", tmp_path / f"cp{attempt_no}"
        cp.mkdir()
        (cp / "metadata").write_text(json.dumps({"id": f"6f1c7c0e-0000-4000-8000-{attempt_no:012d}"}) + "\n")
        options = {"path": str(path), "checkpointlocation": str(cp)}
        first = _source._StreamWriter(options, SCHEMA)
        first.commit(staged(first, ["batch-0"]), 0)
        child = subprocess.Popen(
            [sys.executable, "-c", _KILLED_COMMIT, str(path), str(cp), str(rows)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None and child.stdout.readline() == "staged\n"
        deadline = time.monotonic() + 120
        segment = path / "00000000000000000000.seg"
        head_at = 40 + 36 + len("batch-0")  # where the batch's first record goes
        while time.monotonic() < deadline and child.poll() is None:
            with open(segment, "rb") as f:  # until the commit has written part of the batch
                f.seek(head_at)
                if any(f.read(32)):
                    break
            time.sleep(0.001)
        child.send_signal(signal.SIGKILL)
        finished = "done" in child.communicate()[0]
        with logspool.open(path, readonly=True) as log:  # readers: all of the batch, or none
            written = log.next_lsn - 1
        assert written in (0, rows), written
        if not finished and written == 0:
            break
    assert not finished and written == 0, "every kill came after the batch was published"
    attempt = sorted(os.listdir(path / _source.STAGING_DIR / f"stream-{first.sink}"))
    assert attempt, "the first attempt's staged files are kept until the batch is done"
    replay = _source._StreamWriter(options, SCHEMA)  # Spark restarts the query: batch 1 again
    replay.commit(staged(replay, [f"replayed-{i}" for i in range(rows)]), 1)
    got = payloads(path)
    assert len(got) == 1 + rows, (written, len(got))
    assert not any(p.startswith(b"replayed-") for p in got)
    assert len(set(got[1:])) == rows  # the first attempt's rows, each once
    replay.commit(staged(replay, ["again"]), 1)  # and once done, a further replay writes nothing
    assert len(payloads(path)) == 1 + rows
    assert not staged_files_left(path)


def test_two_queries_with_the_same_checkpoint_text_have_their_own_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """checkpointLocation="checkpoint" typed by two queries started in different directories:
    two queries, two states, both batches written (before, the second was skipped as done)."""
    path = str(tmp_path / "log")
    sinks = []
    for where in ("a", "b"):
        (tmp_path / where / "checkpoint").mkdir(parents=True)
        monkeypatch.chdir(tmp_path / where)
        sinks.append(_source._StreamWriter({"path": path, "checkpointlocation": "checkpoint"}, SCHEMA))
    assert sinks[0].sink != sinks[1].sink
    sinks[0].commit(staged(sinks[0], ["from a"]), 0)
    sinks[1].commit(staged(sinks[1], ["from b"]), 0)
    assert payloads(Path(path)) == [b"from a", b"from b"]
    with pytest.raises(_source.OptionError, match="checkpointLocation"):
        _source._StreamWriter({"path": path}, SCHEMA)


def test_a_first_attempt_staged_by_a_release_before_the_blocks_is_finished_on_replay(tmp_path: Path) -> None:
    """A streaming batch whose intent names files staged by a release before Arrow blocks (a
    size and a row, again and again, no magic): the replay appends their rows, not its own."""
    path = tmp_path / "log"
    sink = _source._StreamWriter({"path": str(path), "queryname": "q"}, SCHEMA)
    sink.commit(staged(sink, ["x"]), 0)
    staging = path / _source.STAGING_DIR / f"stream-{sink.sink}"
    staging.mkdir(parents=True, exist_ok=True)
    old = staging / "00000000.0.old"
    old.write_bytes(b"".join(len(r).to_bytes(4, "little") + r for r in (b"first", b"", b"third")))
    state = path / _source.SINKS_DIR / sink.sink
    state.write_text(json.dumps({"batch": 1, "start": 1, "files": [f"stream-{sink.sink}/00000000.0.old"]}))
    sink.commit(staged(sink, ["replayed"]), 1)
    assert payloads(path) == [b"x", b"first", b"", b"third"]
    assert json.loads(state.read_text())["done"]


def test_a_task_stages_arrow_rows_of_every_shape(tmp_path: Path) -> None:
    """Binary, string and their large forms, empty rows, a batch sliced by Spark (an offset into
    its buffers), and a null payload refused naming its row."""
    path = tmp_path / "log"
    sink = _source._StreamWriter({"path": str(path), "queryname": "q"}, SCHEMA)
    rows = [b"", b"\x00\xff", b"abc", b""]
    batches = [
        pa.record_batch([pa.array(rows, pa.binary())], names=["payload"]),
        pa.record_batch([pa.array(rows, pa.large_binary())], names=["payload"]),
        pa.record_batch([pa.array(["é", "", "z"], pa.large_string())], names=["payload"]),
        pa.record_batch([pa.array([b"skip", b"kept", b"too"], pa.binary())], names=["payload"]).slice(1),
        pa.record_batch([pa.array([b"", b""], pa.binary())], names=["payload"]),
    ]
    sink.commit([sink.write(iter(batches))], 0)
    assert payloads(path) == [*rows, *rows, "é".encode(), b"", b"z", b"kept", b"too", b"", b""]
    with pytest.raises(_source.OptionError, match="row 2 of partition 0: payload is null"):
        sink.write(iter([pa.record_batch([pa.array([b"a", b"b", None])], names=["payload"])]))


def test_a_batch_larger_than_a_segment_may_hold_is_appended_in_parts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The limit of one published batch (4 GiB framed) lowered to 1,000 bytes: the rows go in
    parts of at most that, in order, none lost or doubled, rows of a block split between parts."""
    monkeypatch.setattr(_source, "_BATCH_SIZE_MAX", 1000)
    path = tmp_path / "log"
    writer = _source._BatchWriter({"path": str(path)}, SCHEMA)
    rows = [f"row-{i}-" + "." * (i % 50) for i in range(300)]
    messages = [
        writer.write(iter([pa.record_batch([pa.array(rows[j : j + 70])], names=["payload"])]))
        for j in range(0, 300, 70)
    ]
    writer.commit(messages)
    assert payloads(path) == [r.encode() for r in rows]
    assert logspool.verify(path).ok


def test_a_staged_file_of_the_wrong_size_fails_the_commit(tmp_path: Path) -> None:
    """A file a crash cut (a batch job's staged files are not fsynced): its task reported its
    size, and the commit refuses a file of another size before appending anything, even one cut
    at a block's end, which every block check would pass."""
    schema = StructType([StructField("payload", StringType())])
    writer = _source._BatchWriter({"path": str(tmp_path / "log")}, schema)
    blocks = [
        pa.record_batch([pa.array([f"b{j}-{i}" for i in range(100)])], names=["payload"]) for j in range(2)
    ]
    staged = writer.w.write(iter(blocks))
    assert staged.size == os.path.getsize(staged.path)
    with open(staged.path, "r+b") as f:  # the second block lost
        f.truncate(8 + 12 + 8 * 100 + sum(len(f"b0-{i}") for i in range(100)))
    with pytest.raises(logspool.LogspoolError, match=r"a staged file has .* bytes, its task wrote"):
        writer.commit([staged])
    assert payloads(tmp_path / "log") == []


def test_a_row_over_the_logs_record_size_max_fails_the_commit_with_nothing_published(tmp_path: Path) -> None:
    """A log made with record_size_max=1000 and a 2,000-byte row in the second staged block:
    RecordTooLargeError, as append_many raises, and the log as it was (before, the framed commit
    published the record, and every reader and verify took the log for damaged)."""
    path = tmp_path / "log"
    with logspool.open(path, record_size_max=1000) as log:
        log.append(b"before")
    writer = _source._BatchWriter({"path": str(path)}, SCHEMA)
    blocks = [
        pa.record_batch([pa.array(["a" * 900, "b"])], names=["payload"]),
        pa.record_batch([pa.array(["c", "d" * 2000])], names=["payload"]),
    ]
    with pytest.raises(logspool.RecordTooLargeError, match="2000 bytes exceeds record_size_max of 1000"):
        writer.commit([writer.w.write(iter(blocks))])
    assert payloads(path) == [b"before"]
    assert logspool.verify(path).ok


def test_a_streaming_batch_whose_commit_failed_after_its_intent_keeps_its_files(tmp_path: Path) -> None:
    """The commit of a streaming batch fails after its intent is recorded (here a row over the
    log's record_size_max) and Spark aborts the batch: the files the intent names stay, so the
    replay appends the first attempt's rows or fails for the same reason, never saying a staged
    file is missing; the attempt's other files go."""
    path = tmp_path / "log"
    with logspool.open(path, record_size_max=1000):
        pass
    sink = _source._StreamWriter({"path": str(path), "queryname": "q"}, SCHEMA)
    first = staged(sink, ["a", "x" * 2000])
    with pytest.raises(logspool.RecordTooLargeError):
        sink.commit(first, 0)
    stray = staged(sink, ["not named by the intent"])
    sink.abort([*first, *stray], 0)
    assert os.path.exists(first[0].path) and not os.path.exists(stray[0].path)
    replay = _source._StreamWriter({"path": str(path), "queryname": "q"}, SCHEMA)
    with pytest.raises(logspool.RecordTooLargeError):
        replay.commit(staged(replay, ["the replay's rows"]), 0)
    assert payloads(path) == []
