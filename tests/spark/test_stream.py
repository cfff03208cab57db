"""spark.readStream.format("logspool"): offsets are lsns, on a real local Spark.

availableNow reads everything present and stops; admission control splits it into batches;
a restart from the checkpoint location resumes exactly (no record twice, none lost); a
processingTime query tails a log that another process is writing; failOnDataLoss and the
subscriber option meet retention.
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


def run_available_now(spark: Any, source: Path, out: Path, checkpoint: Path, **options: str) -> Any:
    reader = spark.readStream.format("logspool")
    for k, v in {"startingPosition": "earliest", **options}.items():
        reader = reader.option(k, v)
    query = (
        reader.load(str(source))
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
    spark: Any, tmp_path: Path
) -> None:
    source, out, cp = tmp_path / "log", tmp_path / "out", tmp_path / "cp"
    fill(source, 0, 1000, segment_size_max=8192)
    query = run_available_now(spark, source, out, cp, maxRecordsPerTrigger="300")
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sizes == [300, 300, 300, 100]  # availableNow honours the limit and still reads it all
    fill(source, 1000, 500)
    query = run_available_now(spark, source, out, cp, maxRecordsPerTrigger="300")
    rows = spark.read.parquet(str(out)).collect()
    assert sorted(r.lsn for r in rows) == list(range(1500))  # each once: none lost, none twice
    assert {r.text for r in rows} == {f"event-{i:06d}" for i in range(1500)}


def test_max_bytes_per_trigger_bounds_each_batch(spark: Any, tmp_path: Path) -> None:
    source = tmp_path / "log"
    fill(source, 0, 400)  # 12-byte payloads, 48 bytes a record on disk
    query = run_available_now(spark, source, tmp_path / "out", tmp_path / "cp", maxBytesPerTrigger="4800")
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


def test_a_processing_time_query_tails_a_log_being_written(spark: Any, tmp_path: Path) -> None:
    source = tmp_path / "log"
    fill(source, 0, 10)
    query = (
        spark.readStream.format("logspool")
        .option("startingPosition", "latest")
        .load(str(source))
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


def test_fail_on_data_loss_when_retention_removed_what_the_stream_needs(spark: Any, tmp_path: Path) -> None:
    source = tmp_path / "log"
    fill(source, 0, 600, segment_size_max=4096)
    with logspool.open(source) as log:
        log.cutover()
        report = log.enforce_retention(logspool.Retention(size_max=8192))
        first = log.info().first_lsn
    assert report.removed and first > 0
    with pytest.raises(Exception, match=f"lsns 0 to {first - 1} were removed by retention"):
        run_available_now(spark, source, tmp_path / "o1", tmp_path / "c1", startingPosition="0")
    run_available_now(
        spark, source, tmp_path / "o2", tmp_path / "c2", startingPosition="0", failOnDataLoss="false"
    )
    assert sorted(r.lsn for r in spark.read.parquet(str(tmp_path / "o2")).collect()) == list(
        range(first, 600)
    )


def test_the_subscriber_option_records_progress_for_retention(spark: Any, tmp_path: Path) -> None:
    source = tmp_path / "log"
    fill(source, 0, 500, segment_size_max=4096)
    run_available_now(
        spark, source, tmp_path / "out", tmp_path / "cp", subscriber="spark", maxRecordsPerTrigger="200"
    )
    with logspool.open(source) as log:
        subs = {s.name: s.lsn for s in log.subscribers()}
        # Spark commits a batch when it plans the next one: the last batch may not be committed.
        assert 400 <= subs["spark"] <= 500
        log.cutover()
        log.enforce_retention(logspool.Retention(consumed=True))
        assert log.info().first_lsn <= subs["spark"]  # what Spark has not committed is kept
    # A restarted query with the same subscriber and a new checkpoint starts at its position.
    run_available_now(spark, source, tmp_path / "out2", tmp_path / "cp2", subscriber="spark")
    assert sorted(r.lsn for r in spark.read.parquet(str(tmp_path / "out2")).collect()) == list(
        range(subs["spark"], 500)
    )
