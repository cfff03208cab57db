"""spark.readStream.format("logspool") and its JVM twin (logspool.spark.load_stream): offsets are
lsns, on a real local Spark.

availableNow reads everything present and stops; admission control splits it into batches;
a restart from the checkpoint location resumes exactly (no record twice, none lost); a
processingTime query tails a log that another process is writing; failOnDataLoss and the
subscriber option meet retention. Every test runs with the Python stream and with the JVM stream
(planned by the same Python code, read by the JVM reader); a checkpoint written by one is resumed
by the other.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import logspool


def fill(path: Path, start: int, count: int, **options: Any) -> None:
    with logspool.open(path, **options) as log:
        log.append_many([b"event-%06d" % i for i in range(start, start + count)])


@pytest.fixture(params=["python", "jvm"])
def stream(request: pytest.FixtureRequest, spark: Any) -> Any:
    """A streaming read of a log: the Python stream, or the JVM stream (load_stream)."""
    return streams(spark)[request.param]


def streams(spark: Any) -> dict[str, Any]:
    from logspool.spark import load_stream

    def python(path: Path, **options: str) -> Any:
        return spark.readStream.format("logspool").options(**options).load(str(path))

    def jvm(path: Path, **options: str) -> Any:
        return load_stream(spark, str(path), jvm=True, **options)

    return {"python": python, "jvm": jvm}


def run_available_now(stream: Any, source: Path, out: Path, checkpoint: Path, **options: str) -> Any:
    query = (
        stream(source, **{"startingPosition": "earliest", **options})
        .selectExpr("lsn", "cast(payload as string) as text")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    return query


def test_available_now_with_admission_control_then_a_restart_resumes_exactly(
    spark: Any, stream: Any, tmp_path: Path
) -> None:
    source, out, cp = tmp_path / "log", tmp_path / "out", tmp_path / "cp"
    fill(source, 0, 1000, segment_size_max=8192)
    query = run_available_now(stream, source, out, cp, maxRecordsPerTrigger="300")
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sizes == [300, 300, 300, 100]  # availableNow honours the limit and still reads it all
    fill(source, 1000, 500)
    query = run_available_now(stream, source, out, cp, maxRecordsPerTrigger="300")
    rows = spark.read.parquet(str(out)).collect()
    assert sorted(r.lsn for r in rows) == list(range(1500))  # each once: none lost, none twice
    assert {r.text for r in rows} == {f"event-{i:06d}" for i in range(1500)}


@pytest.mark.parametrize(("first", "then"), [("python", "jvm"), ("jvm", "python")])
def test_a_checkpoint_of_one_stream_is_resumed_by_the_other(
    spark: Any, tmp_path: Path, first: str, then: str
) -> None:
    """Both write offsets as {"lsn": N}, the same JSON text: a query can change reader."""
    source, out, cp = tmp_path / "log", tmp_path / "out", tmp_path / "cp"
    fill(source, 0, 700, segment_size_max=8192)
    run_available_now(streams(spark)[first], source, out, cp, maxRecordsPerTrigger="300")
    fill(source, 700, 500)
    query = run_available_now(streams(spark)[then], source, out, cp, maxRecordsPerTrigger="300")
    assert [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]] == [300, 200]
    assert sorted(r.lsn for r in spark.read.parquet(str(out)).collect()) == list(range(1200))


def test_a_filtered_stream_reads_the_records_of_its_filter(spark: Any, stream: Any, tmp_path: Path) -> None:
    """Spark may push a stream's filters to the JVM reader (cut ranges) or keep them: the rows
    are the filter's either way."""
    source = tmp_path / "log"
    fill(source, 0, 1000, segment_size_max=8192)
    query = (
        stream(source, startingPosition="earliest", maxRecordsPerTrigger="400")
        .where("lsn >= 390 AND lsn < 420 OR lsn = 999")
        .writeStream.format("memory")
        .queryName("filtered")
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert sorted(r.lsn for r in spark.sql("select lsn from filtered").collect()) == [*range(390, 420), 999]


def test_max_bytes_per_trigger_bounds_each_batch(stream: Any, tmp_path: Path) -> None:
    source = tmp_path / "log"
    fill(source, 0, 400)  # 12-byte payloads, 48 bytes a record on disk
    query = run_available_now(stream, source, tmp_path / "out", tmp_path / "cp", maxBytesPerTrigger="4800")
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sum(sizes) == 400 and max(sizes) == 100 and len(sizes) == 4


_WRITER = """
import sys, time, logspool
with logspool.open(sys.argv[1]) as log:
    for i in range(300):
        log.append(b"tail-%04d" % i)
        if i % 30 == 0:
            time.sleep(0.1)
"""


def test_a_processing_time_query_tails_a_log_being_written(spark: Any, stream: Any, tmp_path: Path) -> None:
    source = tmp_path / "log"
    fill(source, 0, 10)
    query = (
        stream(source, startingPosition="latest")
        .writeStream.format("memory")
        .queryName("tailing")
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        deadline = time.monotonic() + 60
        while not query.recentProgress and time.monotonic() < deadline:  # its start is now fixed
            time.sleep(0.1)
        writer = subprocess.Popen([sys.executable, "-c", _WRITER, str(source)])
        assert writer.wait(60) == 0
        deadline = time.monotonic() + 60
        count = 0
        while time.monotonic() < deadline:  # bounded by the deadline
            count = spark.sql("select count(*) as n from tailing").first().n
            if count >= 300:
                break
            time.sleep(0.2)
        lsns = sorted(r.lsn for r in spark.sql("select lsn from tailing").collect())
        assert lsns == list(range(10, 310))  # from "latest": the 300 appended while it ran
    finally:
        query.stop()


def test_fail_on_data_loss_when_retention_removed_what_the_stream_needs(
    spark: Any, stream: Any, tmp_path: Path
) -> None:
    source = tmp_path / "log"
    fill(source, 0, 600, segment_size_max=4096)
    with logspool.open(source) as log:
        log.cutover()
        report = log.enforce_retention(logspool.Retention(size_max=8192))
        first = log.info().first_lsn
    assert report.removed and first > 0
    with pytest.raises(Exception, match=f"lsns 0 to {first - 1} were removed by retention"):
        run_available_now(stream, source, tmp_path / "o1", tmp_path / "c1", startingPosition="0")
    run_available_now(
        stream, source, tmp_path / "o2", tmp_path / "c2", startingPosition="0", failOnDataLoss="false"
    )
    assert sorted(r.lsn for r in spark.read.parquet(str(tmp_path / "o2")).collect()) == list(
        range(first, 600)
    )


def test_the_subscriber_option_records_progress_for_retention(
    spark: Any, stream: Any, tmp_path: Path
) -> None:
    source = tmp_path / "log"
    fill(source, 0, 500, segment_size_max=4096)
    run_available_now(
        stream, source, tmp_path / "out", tmp_path / "cp", subscriber="spark", maxRecordsPerTrigger="200"
    )
    with logspool.open(source) as log:
        subs = {s.name: s.lsn for s in log.subscribers()}
        # Spark commits a batch when it plans the next one: the last batch may not be committed.
        assert 400 <= subs["spark"] <= 500
        log.cutover()
        log.enforce_retention(logspool.Retention(consumed=True))
        assert log.info().first_lsn <= subs["spark"]  # what Spark has not committed is kept
    # A restarted query with the same subscriber and a new checkpoint starts at its position.
    run_available_now(stream, source, tmp_path / "out2", tmp_path / "cp2", subscriber="spark")
    assert sorted(r.lsn for r in spark.read.parquet(str(tmp_path / "out2")).collect()) == list(
        range(subs["spark"], 500)
    )


def test_load_stream_checks_options_and_says_how_to_make_a_jvm_stream(spark: Any, tmp_path: Path) -> None:
    from logspool.spark import JvmError, OptionError, load_stream

    source = tmp_path / "log"
    fill(source, 0, 10)
    with pytest.raises(OptionError, match="unknown option 'endingposition' for a stream read"):
        load_stream(spark, str(source), endingPosition="5")
    with pytest.raises(JvmError, match="decode=json reads with jvm=False"):
        load_stream(spark, str(source), schema="lsn long", decode="json", jvm=True)
    python = load_stream(spark, str(source), jvm=False)
    assert python.isStreaming and "logspool-jvm" not in python._jdf.queryExecution().toString()
    direct = spark.readStream.format("logspool-jvm").option("recordSizeMax", "1024").load(str(source))
    query = direct.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "cp")).start()
    with pytest.raises(Exception, match=r"use logspool\.spark\.load_stream"):
        query.awaitTermination(60)
