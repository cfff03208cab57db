"""The JVM writer (logspool.spark.write / write_stream): tasks stage rows on the JVM, the Python
commit publishes them.

Everything runs in a real local Spark with the jar loaded (conftest). A batch write leaves the
same log, byte for byte, as the Python writer given the same rows (across blocks, rows of every
size including empty ones and one larger than a block); it refuses what the Python writer
refuses, with the same messages; a failed job leaves nothing; a task on a machine that does not
see the log says so. The streaming sink copies a log once across restarts, sharing its state
with the Python sink (a query may switch); and a query with a random column, whose driver is
killed (the whole process group: its Python and its JVM) after the sink's intent for a batch and
before the batch is done, leaves exactly one copy of every row when restarted. The kill is
placed by watching the sink's state file, not by a sleep.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.types import StringType

import logspool
from logspool.spark import _source, write, write_stream
from tests.spark.conftest import batches_of_250, mixed_rows


def payloads(path: Path) -> list[bytes]:
    with logspool.open(path, readonly=True) as log:
        return [r.payload for r in log.read()]


def segments(path: Path) -> dict[str, bytes]:
    """The log's segment and index files (the sink's state and staging directories aside)."""
    return {p.name: p.read_bytes() for p in sorted(path.iterdir()) if p.suffix in (".seg", ".idx")}


def records(path: Path) -> list[tuple[int, bytes]]:
    with logspool.open(path, readonly=True) as log:
        return [(r.lsn, r.payload) for r in log.read()]


def test_a_jvm_batch_write_leaves_the_log_the_python_writer_leaves(spark: Any, tmp_path: Path) -> None:
    """Rows of mixed sizes (empty ones, one larger than a staged block's 4 MiB) in 3 partitions
    of more than one block each: read back in partition order, the same records as the Python
    writer's and segments of the same sizes (their bytes differ in the records' timestamps), a
    log that verifies, and no staged file left."""
    df, expected = mixed_rows(spark, 25_000, 12_345)
    jvm_log, py_log = tmp_path / "jvm", tmp_path / "python"
    write(df, jvm=True).save(str(jvm_log))
    write(df, jvm=False).save(str(py_log))
    assert payloads(jvm_log) == expected
    assert records(jvm_log) == records(py_log)
    assert {k: len(v) for k, v in segments(jvm_log).items()} == {
        k: len(v) for k, v in segments(py_log).items()
    }
    assert logspool.verify(jvm_log).ok
    assert not any((jvm_log / _source.STAGING_DIR).iterdir())
    binary = spark.createDataFrame(
        [(bytearray(b"\x00\xff%d" % i), i) for i in range(10)], "payload binary, n int"
    )
    write(binary, jvm=True).save(str(jvm_log))
    assert payloads(jvm_log)[len(expected) :] == [b"\x00\xff%d" % i for i in range(10)]


def test_jvm_false_writes_through_the_python_source(spark: Any, tmp_path: Path) -> None:
    """write(df, jvm=False) is the Python writer (format("logspool-py") here, where the jar has
    "logspool"), which (unlike the JVM writer) takes a served log's options and tries the daemon."""
    df = spark.createDataFrame([("a",), ("b",)], "payload string").coalesce(1)
    write(df, jvm=False).save(str(tmp_path / "log"))
    assert payloads(tmp_path / "log") == [b"a", b"b"]
    with pytest.raises(Exception) as refused:
        write(df, jvm=False).option("server", "127.0.0.1:1").option("log", "x").save()
    assert "local log directories only" not in str(refused.value)


def test_jvm_writes_refuse_what_the_python_writer_refuses(spark: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "log")
    with pytest.raises(Exception, match=r"needs a column named payload .* the columns are \['n'\]"):
        write(spark.createDataFrame([(1,)], "n int"), jvm=True).save(path)
    with pytest.raises(Exception, match="column payload must be binary or string, not int"):
        write(spark.createDataFrame([(1,)], "payload int"), jvm=True).save(path)
    ok = spark.createDataFrame([("x",)], "payload string")
    with pytest.raises(Exception, match="append-only"):
        write(ok, jvm=True).mode("overwrite").save(path)
    with pytest.raises(Exception, match="unknown option 'startingposition' for a batch write"):
        write(ok, jvm=True).option("startingPosition", "0").save(path)
    with pytest.raises(Exception, match="local log directories only"):
        write(ok, jvm=True).option("server", "127.0.0.1:1").save(path)
    nulls = spark.createDataFrame([("a",), ("b",), (None,)], "payload string").coalesce(1)
    with pytest.raises(Exception, match="row 2 of partition 0: payload is null"):
        write(nulls, jvm=True).save(path)
    assert payloads(Path(path)) == []
    with pytest.raises(Exception, match=r"to write, logspool.spark.write\(df\)"):
        ok.write.format("logspool-jvm").mode("append").save(path)


@pytest.mark.parametrize("jvm", [False, True], ids=["python", "jvm"])
def test_a_failed_job_leaves_nothing(spark: Any, tmp_path: Path, jvm: bool) -> None:
    """A task fails: the job fails, the log holds what it held, no staged file is left (the
    Python writer and the JVM writer alike)."""
    path = tmp_path / "log"
    with logspool.open(path) as log:
        log.append(b"before")

    def explode(x: int) -> str:
        if x == 777:
            raise ValueError("a task fails")
        return f"p{x}"

    spark.udf.register(f"explode_at_777_{jvm}", explode, StringType())
    df = spark.range(1000).selectExpr(f"explode_at_777_{jvm}(id) as payload")
    with pytest.raises(Exception, match="a task fails"):
        write(df, jvm=jvm).save(str(path))  # (jvm=False: df.write.format("logspool-py"))
    assert payloads(path) == [b"before"]
    staging = path / _source.STAGING_DIR
    assert not staging.exists() or not any(staging.iterdir())


def test_a_jvm_task_that_cannot_see_the_log_says_why(spark: Any, tmp_path: Path) -> None:
    """A task runs where the log directory is not mounted: here it is moved away while the
    task computes its rows (before the task creates its staged file), so the task finds neither
    the staging directory nor the log. The job fails saying so, not with a bare
    NoSuchFileException."""
    path = tmp_path / "log"
    away = str(tmp_path / "elsewhere")
    with logspool.open(path) as log:
        log.append(b"before")

    def hide(x: int) -> str:
        with contextlib.suppress(FileNotFoundError):  # moved already
            os.rename(str(path), away)  # at each task's first row, before its staged file
        return f"p{x}"

    spark.udf.register("hide_the_log", hide, StringType())
    df = spark.range(1000).repartition(2).selectExpr("hide_the_log(id) as payload")
    with pytest.raises(Exception, match=r"cannot see the log .* mount at the same path"):
        write(df, jvm=True).save(str(path))
    assert payloads(Path(away)) == [b"before"]


def test_a_jvm_sink_copies_a_log_once_across_restarts_and_sinks(spark: Any, tmp_path: Path) -> None:
    """Three runs of one query (one checkpoint): the JVM sink, the Python sink, the JVM sink
    again. The state is keyed by the query's id either way (one state file), so no batch is
    written twice or skipped."""
    source, sink = tmp_path / "source", tmp_path / "sink"
    rows = batches_of_250(spark, source)

    def run(jvm: bool) -> None:
        out = write_stream(rows, jvm=jvm)
        query = (
            out.option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start(str(sink))
        )
        query.awaitTermination(120)
        assert query.exception() is None

    run(jvm=True)
    for more, jvm in ((range(700, 900), False), (range(900, 1000), True)):
        with logspool.open(source) as log:
            log.append_many([b"s-%04d" % i for i in more])
        run(jvm)
    assert payloads(sink) == [b"s-%04d" % i for i in range(1000)]
    assert len(os.listdir(sink / _source.SINKS_DIR)) == 1
    # (no staged file left; the stream's own staging directory stays, empty, for its next batch)
    assert [p for p in (sink / _source.STAGING_DIR).rglob("*") if not p.is_dir()] == []


_KILLED_QUERY = """
import sys
from pyspark.sql import SparkSession
from logspool.spark import jar, write_stream
source, sink, cp = sys.argv[1:4]
spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.jars", jar()).getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
rows = (spark.readStream.format("logspool").option("startingPosition", "earliest")
        .option("maxRecordsPerTrigger", sys.argv[4]).load(source)
        .selectExpr("concat(cast(payload as string), ':', reflect('java.util.UUID', 'randomUUID'))"
                    " as payload"))
query = (write_stream(rows, jvm=True).option("checkpointLocation", cp)
         .trigger(availableNow=True).start(sink))
query.awaitTermination()
print("done", flush=True)
"""

QUERY_ROWS = 500_000
BATCH_ROWS = 200_000


def _replay(spark: Any, source: Path, sink: Path, cp: Path) -> None:
    rows = (
        spark.readStream.format("logspool")
        .option("startingPosition", "earliest")
        .option("maxRecordsPerTrigger", str(BATCH_ROWS))
        .load(str(source))
        .selectExpr(
            "concat(cast(payload as string), ':', reflect('java.util.UUID', 'randomUUID')) as payload"
        )
    )
    query = (
        write_stream(rows, jvm=True)
        .option("checkpointLocation", str(cp))
        .trigger(availableNow=True)
        .start(str(sink))
    )
    query.awaitTermination(300)
    assert query.exception() is None


def test_a_random_column_is_written_once_after_the_driver_is_killed_in_a_jvm_sink_commit(
    spark: Any, tmp_path: Path
) -> None:
    """The issue's kill point: a query enriching each row with reflect('java.util.UUID',
    'randomUUID'), batches of 200,000 rows, the driver (its Python process and its JVM) killed
    once the sink's intent for batch 1 is on disk and before the batch is done. Restarted, Spark
    replays batch 1 with other uuids; the log ends with every id exactly once, batch 1's rows
    being the first attempt's (kept in its staged files) whether the kill came before or after
    the batch was published."""
    source = tmp_path / "source"
    with logspool.open(source) as log:
        for start in range(0, QUERY_ROWS, 100_000):
            log.append_many([b"id-%06d" % i for i in range(start, start + 100_000)])
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    for attempt in range(4):  # until the kill lands between the intent and the done mark
        sink, cp = tmp_path / f"sink{attempt}", tmp_path / f"cp{attempt}"
        child = subprocess.Popen(
            [sys.executable, "-c", _KILLED_QUERY, str(source), str(sink), str(cp), str(BATCH_ROWS)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # its JVM in its process group: killed with it
        )
        state: dict[str, Any] = {}
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and child.poll() is None:
            sinks = sink / _source.SINKS_DIR
            names = os.listdir(sinks) if sinks.is_dir() else []
            if names:
                try:
                    state = json.loads((sinks / names[0]).read_text())
                except (OSError, ValueError):
                    state = {}  # replaced while read
                if (state.get("batch") == 1 and not state.get("done")) or state.get("batch", 0) > 1:
                    break
            time.sleep(0.001)
        os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        state = json.loads(next((sink / _source.SINKS_DIR).iterdir()).read_text())
        if state.get("batch") == 1 and not state.get("done"):
            break
    assert state.get("batch") == 1 and not state.get("done"), "every kill missed the commit of batch 1"
    with logspool.open(sink, readonly=True) as log:  # readers: batch 0, and batch 1 whole or not at all
        assert log.next_lsn in (BATCH_ROWS, 2 * BATCH_ROWS), log.next_lsn
    _replay(spark, source, sink, cp)
    got = payloads(sink)
    ids = [p.split(b":")[0] for p in got]
    assert len(got) == QUERY_ROWS and sorted(ids) == [b"id-%06d" % i for i in range(QUERY_ROWS)]
    assert len({p.split(b":")[1] for p in got}) == QUERY_ROWS  # a uuid each: no row written twice


def test_a_failed_jvm_commit_leaves_nothing_and_no_staged_file(spark: Any, tmp_path: Path) -> None:
    """The commit itself fails (a row over the log's record_size_max): the job fails with the
    log's RecordTooLargeError, nothing is appended, and Spark's abort removes the staged files."""
    path = tmp_path / "log"
    with logspool.open(path, record_size_max=1000) as log:
        log.append(b"before")
    df = spark.createDataFrame([("a",), ("x" * 2000,), ("b",)], "payload string").coalesce(1)
    with pytest.raises(Exception, match="RecordTooLargeError: record of 2000 bytes exceeds record_size_max"):
        write(df, jvm=True).save(str(path))
    assert payloads(path) == [b"before"]
    assert logspool.verify(path).ok
    assert not any((path / _source.STAGING_DIR).iterdir())
