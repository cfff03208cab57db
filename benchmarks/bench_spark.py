"""Benchmark of the Spark data source: batch read and write rows/s beside Parquet, same run.

Run: .venv/bin/python benchmarks/bench_spark.py [--rows 1000000] [--quick] [--master local[2]]
     [--daemon | --write | --stream]

One local SparkSession. The same rows (lsn, timestamp, a 100-byte payload) are in a log and in a
Parquet directory written by Spark. Each read is a full scan that Spark cannot skip: the sum of
the payload lengths and of the lsns, so every row crosses from the source into Spark. Reported:
rows/s of the median of several runs, and the ratio to Parquet (the target is at least 1.0x for
the JVM reader), for the Python data source (``format("logspool")``) and the JVM reader
(``logspool.spark.load``). Also ``count()`` (no column read: Parquet reads no page, the JVM
reader walks record headers) and a scan of the last tenth (``WHERE lsn >= 0.9 * rows``: Parquet
skips by its statistics, the JVM reader by the filter pushed to the index), each against Parquet.
Streams: the catch-up of the whole log as a backlog, an ``availableNow`` query from the earliest
record that hands every record's payload length and lsn to Spark's ``noop`` sink, timed from
``start()`` to its end (Spark's fixed costs of a query included), as rows/s against Parquet's
scan rate, for the JVM stream (``logspool.spark.load_stream``) and the Python stream; beside
them, Spark's fixed cost of any such query with no code of ours (its ``rate-micro-batch``
source, one row), which bounds the ratio any source can reach at this row count. ``--stream``
runs only the JVM stream's catch-up, Parquet's scan and Spark's one-row query, and adds Spark's
own file stream over the same Parquet files (the same ``availableNow`` catch-up with none of our
code: what the target, Parquet's *scan* rate, asks of a stream beside what Spark's own stream of
Parquet reaches), Parquet's rows as a batch into the same ``noop`` sink (the per-row cost of a
sink, which the scan's aggregate does not pay) and the catch-up cut in ranges of 32 MiB (the
plan before the driver cut a read as Spark cuts files: seven tasks where it plans three); with
``--rows 10000000`` it shows the rate once Spark's fixed cost of a query no longer dominates.
The reads take turns run after run (one run of each, then the next round), so that a drift of
the machine's speed falls on all of them alike. The load average is printed before and after.

A third baseline shows the ceiling of any Python data source here: one that parses nothing and
yields the same prebuilt Arrow batches (same columns, same batch size) for the same row count.
Writes: the Python writer (``format("logspool-py")``: in this session, with the jar loaded and
``register`` called, ``format("logspool")`` runs the tasks on the JVM) of the same rows, against
df.write.parquet; ``--write`` runs only the writes, and adds the JVM writer, ``format("logspool")``
itself and the streaming sinks.

Through the daemon (``--daemon`` runs only this case; a full run adds it): the same rows in a
log that a ``logspool serve`` process serves, read with ``.option("server", ...)`` (each task
reads its lsn span over TCP), taking turns with the local-file Python read, the JVM read and
Parquet in the same run, all as the full scan above; and one write of the rows through the
daemon (``log.FORWARD`` from each task) against Parquet's write.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import logspool


def timed(fn: Callable[[], Any], runs: int) -> float:
    """The median seconds of ``runs`` calls (after one warm-up)."""
    fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def taking_turns(cases: dict[str, Callable[[], Any]], runs: int) -> dict[str, float]:
    """The median seconds of each case over ``runs`` rounds of one call each (after one warm-up
    round): a drift of the machine's speed falls on every case alike."""
    for fn in cases.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(runs):
        for name, fn in cases.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t) for name, t in times.items()}


def prebuilt_source(rows: int, batch_rows: int) -> Any:
    """A Python data source that yields prebuilt Arrow batches: the cost of the Python Data Source
    handoff alone, with no parsing (two partitions, as the log's read has with two cores)."""
    import pyarrow as pa
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class Reader(DataSourceReader):
        def partitions(self) -> list[InputPartition]:
            return [InputPartition(0), InputPartition(1)]

        def read(self, partition: Any) -> Any:
            n = rows // 2
            numbers = pa.array(range(batch_rows), pa.int64())
            batch = pa.RecordBatch.from_arrays(
                [
                    numbers,
                    numbers.cast(pa.timestamp("us", tz="UTC")),
                    pa.array([b"%010d" % i + b"x" * 90 for i in range(batch_rows)], pa.binary()),
                    pa.repeat(pa.scalar(0, pa.int64()), batch_rows),
                    numbers,
                ],
                names=["lsn", "timestamp", "payload", "segment", "offset"],
            )
            for done in range(0, n, batch_rows):
                yield batch.slice(0, min(batch_rows, n - done))

    class Prebuilt(DataSource):
        @classmethod
        def name(cls) -> str:
            return "prebuilt"

        def schema(self) -> str:
            return "lsn long, timestamp timestamp, payload binary, segment long, offset long"

        def reader(self, schema: Any) -> DataSourceReader:
            return Reader()

    return Prebuilt


def fill(path: str, rows: int) -> float:
    """Rows of a 100-byte payload appended to the log at ``path``; the seconds it took."""
    t0 = time.perf_counter()
    with logspool.open(path, durability="os") as log:
        batch = 10_000
        for start in range(0, rows, batch):
            log.append_many([b"%010d" % i + b"x" * 90 for i in range(start, min(rows, start + batch))])
        log.sync()
    return time.perf_counter() - t0


def serve(data: str) -> tuple[subprocess.Popen[bytes], str]:
    """``logspool serve --data DATA`` on a free port of 127.0.0.1; (the process, its address)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "logspool.cli", "serve", "--data", data, "--listen", address]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # bounded: 30 s
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, address
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError("logspool serve exited") from None
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("logspool serve did not listen within 30 s")


def daemon_case(spark: Any, rows: int, runs: int, work: str, parquet_path: str | None) -> dict[str, Any]:
    """The read through the daemon against the local-file Python read, the JVM read and Parquet,
    taking turns in one run; one write through the daemon against Parquet's."""
    from pyspark.sql import functions as F

    from logspool.spark import load

    data = os.path.join(work, "daemon-data")
    local = os.path.join(data, "logs", "bench")  # the daemon's log, read in place by the others
    fill(local, rows)
    if parquet_path is None:
        parquet_path = os.path.join(work, "daemon-parquet")
        spark.read.format("logspool").load(local).write.mode("overwrite").parquet(parquet_path)
    proc, address = serve(data)
    try:

        def scan(df: Any) -> Callable[[], Any]:
            return lambda: df.agg(F.sum(F.length("payload")), F.sum("lsn")).collect()

        served = spark.read.format("logspool").option("server", address).load("bench")
        partitions = served.rdd.getNumPartitions()
        assert served.count() == rows
        load_before = os.getloadavg()
        turns = taking_turns(
            {
                "parquet": scan(spark.read.parquet(parquet_path)),
                "jvm": scan(load(spark, local, jvm=True)),
                "python_local": scan(spark.read.format("logspool").load(local)),
                "python_daemon": scan(served),
            },
            runs,
        )
        payloads = spark.read.parquet(parquet_path).select("payload").cache()
        payloads.count()

        def write_daemon() -> None:
            payloads.write.format("logspool").option("server", address).option("log", "written").mode(
                "append"
            ).save()

        def write_parquet() -> None:
            payloads.write.mode("overwrite").parquet(os.path.join(work, "daemon-wparquet"))

        write_parquet()  # warm-up; the daemon's write is timed once (each run adds the rows again)
        t0 = time.perf_counter()
        write_daemon()
        write_daemon_s = time.perf_counter() - t0
        write_parquet_s = timed(write_parquet, 1)
        from logspool import client

        with client.connect(address) as c:
            assert c.log("written").info()["next_lsn"] == rows
        load_after = os.getloadavg()
    finally:
        proc.terminate()
        proc.wait(60)
    p = turns["parquet"]
    return {
        "daemon_read_partitions": partitions,
        "daemon_read_parquet_rows_per_s": rows / p,
        "daemon_read_jvm_rows_per_s": rows / turns["jvm"],
        "daemon_read_python_local_rows_per_s": rows / turns["python_local"],
        "daemon_read_python_daemon_rows_per_s": rows / turns["python_daemon"],
        "daemon_read_daemon_ratio_to_python_local": turns["python_local"] / turns["python_daemon"],
        "daemon_read_daemon_ratio_to_jvm": turns["jvm"] / turns["python_daemon"],
        "daemon_read_daemon_ratio_to_parquet": p / turns["python_daemon"],
        "daemon_write_rows_per_s": rows / write_daemon_s,
        "daemon_write_parquet_rows_per_s": rows / write_parquet_s,
        "daemon_write_ratio_to_parquet": write_parquet_s / write_daemon_s,
        "daemon_load_average_1m_before": load_before[0],
        "daemon_load_average_1m_after": load_after[0],
    }


def write_case(spark: Any, rows: int, runs: int, work: str) -> dict[str, float]:
    """``--write``: the Python writer (``format("logspool-py")``, the name ``write(df,
    jvm=False)`` takes where the jar is loaded) and its streaming sink (one ``availableNow`` batch
    of the rows from a Parquet directory) against df.write.parquet and a Parquet streaming sink,
    the same cached rows, taking turns; the same two through the JVM writer
    (``logspool.spark.write`` and ``write_stream``: tasks on the JVM, the Python commit) and
    through ``format("logspool")`` itself (``named``: the jar's name, whose writes take the JVM
    tasks once ``register`` registered the commit, as here), and
    Spark's ``noop`` write (no output: Spark's own cost of a write job). Also the seconds of the
    driver's commit alone (the rows staged as two Python tasks stage them, appended), and the
    median seconds of the JVM writer's commits (the Python commit its batch writes called, and
    its streaming batches)."""
    from logspool.spark import _jvm_write, _source, write, write_stream

    jvm_commits: list[float] = []
    jvm_sink_commits: list[float] = []
    committed = _jvm_write._COMMITTER.commit

    def timed_commit(job: str, messages: str, batch_id: int) -> None:
        t0 = time.perf_counter()
        committed(job, messages, batch_id)
        (jvm_commits if batch_id < 0 else jvm_sink_commits).append(time.perf_counter() - t0)

    _jvm_write._COMMITTER.commit = timed_commit  # type: ignore[method-assign]

    source = spark.range(rows).selectExpr(
        "cast(concat(lpad(cast(id as string), 12, '0'), repeat('x', 88)) as binary) as payload"
    )
    parquet_in = os.path.join(work, "in")
    source.write.mode("overwrite").parquet(parquet_in)
    data = spark.read.parquet(parquet_in).select("payload").cache()
    data.count()
    from pyspark.sql.types import BinaryType, StructField, StructType

    def commit_alone() -> float:
        """The driver's commit by itself: the rows staged as two tasks stage them, appended."""
        path = os.path.join(work, "clog")
        shutil.rmtree(path, ignore_errors=True)
        writer = _source._BatchWriter({"path": path}, StructType([StructField("payload", BinaryType())]))
        import pyarrow as pa

        messages = []
        for part in range(2):  # as two tasks stage them: Arrow batches of 10,000 rows
            count = rows // 2
            batches = (
                pa.record_batch(
                    [
                        pa.array(
                            [b"%012d" % i + b"x" * 88 for i in range(j, min(j + 10_000, (part + 1) * count))]
                        )
                    ],
                    names=["payload"],
                )
                for j in range(part * count, (part + 1) * count, 10_000)
            )
            messages.append(writer.w.write(batches))
        t0 = time.perf_counter()
        writer.commit(messages)
        return time.perf_counter() - t0

    n = [0]

    python_name = _jvm_write.python_writer(spark)

    def write_log() -> None:
        shutil.rmtree(os.path.join(work, "wlog"), ignore_errors=True)
        data.write.format(python_name).mode("append").save(os.path.join(work, "wlog"))

    def write_named() -> None:
        shutil.rmtree(os.path.join(work, "wlogn"), ignore_errors=True)
        data.write.format("logspool").mode("append").save(os.path.join(work, "wlogn"))

    def write_log_jvm() -> None:
        shutil.rmtree(os.path.join(work, "wlogj"), ignore_errors=True)
        write(data, jvm=True).save(os.path.join(work, "wlogj"))

    def write_parquet() -> None:
        data.write.mode("overwrite").parquet(os.path.join(work, "wparquet"))

    def write_noop() -> None:
        data.write.format("noop").mode("overwrite").save()

    def stream(fmt_name: str) -> Callable[[], None]:
        def run() -> None:
            n[0] += 1
            out = os.path.join(work, f"s{fmt_name}{n[0]}")
            rows_in = spark.readStream.schema("payload binary").parquet(parquet_in)
            if fmt_name == "logspool-jvm":
                to = write_stream(rows_in, jvm=True)
            else:
                to = rows_in.writeStream.format(fmt_name)
            query = to.option("checkpointLocation", out + ".cp").trigger(availableNow=True).start(out)
            query.awaitTermination()
            shutil.rmtree(out, ignore_errors=True)
            shutil.rmtree(out + ".cp", ignore_errors=True)

        return run

    load_before = os.getloadavg()
    turns = taking_turns(
        {
            "write_log": write_log,
            "write_log_jvm": write_log_jvm,
            "write_named": write_named,
            "write_parquet": write_parquet,
            "write_noop": write_noop,
            "stream_log": stream(python_name),
            "stream_log_jvm": stream("logspool-jvm"),
            "stream_named": stream("logspool"),
            "stream_parquet": stream("parquet"),
        },
        runs,
    )
    load_after = os.getloadavg()
    return {
        "write_logspool_rows_per_s": rows / turns["write_log"],
        "write_parquet_rows_per_s": rows / turns["write_parquet"],
        "write_ratio_to_parquet": turns["write_parquet"] / turns["write_log"],
        "write_logspool_commit_s_median": statistics.median(commit_alone() for _ in range(runs)),
        "write_logspool_s_median": turns["write_log"],
        "write_jvm_rows_per_s": rows / turns["write_log_jvm"],
        "write_jvm_ratio_to_parquet": turns["write_parquet"] / turns["write_log_jvm"],
        "write_jvm_s_median": turns["write_log_jvm"],
        "write_named_rows_per_s": rows / turns["write_named"],
        "write_named_ratio_to_parquet": turns["write_parquet"] / turns["write_named"],
        "write_named_s_median": turns["write_named"],
        "write_parquet_s_median": turns["write_parquet"],
        "write_noop_s_median": turns["write_noop"],
        "write_jvm_commit_s_median": statistics.median(jvm_commits),
        "sink_jvm_commit_s_median": statistics.median(jvm_sink_commits),
        "sink_jvm_s_median": turns["stream_log_jvm"],
        "sink_parquet_s_median": turns["stream_parquet"],
        "sink_jvm_rows_per_s": rows / turns["stream_log_jvm"],
        "sink_jvm_ratio_to_parquet": turns["stream_parquet"] / turns["stream_log_jvm"],
        "sink_named_s_median": turns["stream_named"],
        "sink_named_rows_per_s": rows / turns["stream_named"],
        "sink_named_ratio_to_parquet": turns["stream_parquet"] / turns["stream_named"],
        "sink_logspool_rows_per_s": rows / turns["stream_log"],
        "sink_parquet_rows_per_s": rows / turns["stream_parquet"],
        "sink_ratio_to_parquet": turns["stream_parquet"] / turns["stream_log"],
        "write_load_average_1m_before": load_before[0],
        "write_load_average_1m_after": load_after[0],
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="100,000 rows, 3 runs")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--out", help="write the results as JSON here")
    parser.add_argument(
        "--daemon", action="store_true", help="only the read through the daemon (and its write)"
    )
    parser.add_argument(
        "--write", action="store_true", help="only the writes (batch and streaming) against Parquet's"
    )
    parser.add_argument(
        "--stream",
        action="store_true",
        help="only the JVM stream's catch-up, against Parquet's scan and its rows into the same noop sink",
    )
    args = parser.parse_args()
    rows, runs = (100_000, 3) if args.quick else (args.rows, args.runs)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from logspool.spark import jar, load, load_stream, register
    from logspool.spark._partition import BATCH_ROWS

    spark = (
        SparkSession.builder.master(args.master)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "4g")
        .config("spark.jars", jar())
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    spark.dataSource.register(prebuilt_source(rows, BATCH_ROWS))
    work = tempfile.mkdtemp(prefix="logspool-bench-spark-")
    try:
        if args.daemon:
            results = {"rows": rows, "payload_bytes": 100, "master": args.master, "runs": runs}
            results.update(daemon_case(spark, rows, runs, work, None))
            report(results, args.out)
            return 0
        if args.write:
            results = {"rows": rows, "payload_bytes": 100, "master": args.master, "runs": runs}
            results.update(write_case(spark, rows, runs, work))
            report(results, args.out)
            return 0
        log_path, parquet_path = os.path.join(work, "log"), os.path.join(work, "parquet")
        fill_s = fill(log_path, rows)
        source = spark.read.format("logspool").load(log_path)
        source.write.mode("overwrite").parquet(parquet_path)

        def scan(df: Any) -> Callable[[], Any]:
            return lambda: df.agg(F.sum(F.length("payload")), F.sum("lsn")).collect()

        def count(df: Any) -> Callable[[], Any]:
            return lambda: df.count()

        def tail(df: Any) -> Callable[[], Any]:
            return scan(df.where(F.col("lsn") >= rows * 9 // 10))

        def drain(stream: Any, count: int) -> None:
            """An ``availableNow`` query of ``stream`` into Spark's ``noop`` sink, from a fresh
            checkpoint, to its end; every one of ``count`` rows seen."""
            checkpoint = tempfile.mkdtemp(prefix="cp-", dir=work)
            query = (
                stream.writeStream.format("noop")
                .option("checkpointLocation", checkpoint)
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination()
            assert sum(p["numInputRows"] for p in query.recentProgress) == count

        def catch_up(jvm: bool, **options: str) -> Callable[[], Any]:
            def run() -> None:
                stream = load_stream(spark, log_path, jvm=jvm, startingPosition="earliest", **options)
                drain(stream.selectExpr("length(payload) as size", "lsn"), rows)

            return run

        def parquet_stream() -> None:
            """Spark's own file stream over the same Parquet files, ``availableNow`` into the
            same ``noop`` sink: a catch-up with none of our code, Spark's fixed costs of a query
            and its Parquet reader's, against which the JVM stream's catch-up is a like for like."""
            stream = spark.readStream.schema(parquet.schema).parquet(parquet_path)
            drain(stream.selectExpr("length(payload) as size", "lsn"), rows)

        def one_row_stream() -> None:
            """Spark's own fixed cost of an ``availableNow`` query, with no code of ours: Spark's
            ``rate-micro-batch`` source, one batch of one row, into the same ``noop`` sink
            (starting the query, planning its batch, writing the offset and commit logs)."""
            drain(spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 1).load(), 1)

        load_before = os.getloadavg()
        parquet, jvm = spark.read.parquet(parquet_path), load(spark, log_path, jvm=True)
        if args.stream:
            turns = taking_turns(
                {
                    "parquet": scan(parquet),
                    "parquet_noop": lambda: (
                        parquet.selectExpr("length(payload) as size", "lsn")
                        .write.format("noop")
                        .mode("overwrite")
                        .save()
                    ),
                    "catch_up_jvm": catch_up(True),
                    # the plan before the session's shares: ranges of 32 MiB (seven tasks, not three)
                    "catch_up_jvm_32mib": catch_up(True, maxPartitionBytes=str(32 << 20)),
                    "one_row_stream": one_row_stream,
                    "parquet_stream": parquet_stream,
                },
                runs,
            )
            parquet_s, catch_up_s = turns["parquet"], turns["catch_up_jvm"]
            results = {
                "rows": rows,
                "payload_bytes": 100,
                "master": args.master,
                "runs": runs,
                "read_parquet_rows_per_s": rows / parquet_s,
                "stream_catch_up_jvm_rows_per_s": rows / catch_up_s,
                "stream_catch_up_jvm_ratio_to_parquet_scan": parquet_s / catch_up_s,
                "stream_catch_up_jvm_32mib_ratio_to_parquet_scan": parquet_s / turns["catch_up_jvm_32mib"],
                "stream_one_row_query_s_median": turns["one_row_stream"],
                "stream_catch_up_ceiling_ratio_to_parquet_scan": parquet_s / turns["one_row_stream"],
                # Spark's own Parquet file stream, the same catch-up with none of our code
                "parquet_stream_catch_up_rows_per_s": rows / turns["parquet_stream"],
                "parquet_stream_catch_up_ratio_to_parquet_scan": parquet_s / turns["parquet_stream"],
                "stream_catch_up_jvm_ratio_to_parquet_stream": turns["parquet_stream"] / catch_up_s,
                # the same rows and columns from Parquet into the same noop sink, as a batch
                "parquet_into_noop_rows_per_s": rows / turns["parquet_noop"],
                "stream_catch_up_jvm_ratio_to_parquet_into_noop": turns["parquet_noop"] / catch_up_s,
                "load_average_1m_before": load_before[0],
                "load_average_1m_after": os.getloadavg()[0],
            }
            report(results, args.out)
            return 0
        jvm_unchecked = load(spark, log_path, jvm=True, verifyChecksums=False)
        turns = taking_turns(
            {
                "parquet": scan(parquet),
                "jvm": scan(jvm),
                "jvm_unchecked": scan(jvm_unchecked),
                "count_parquet": count(parquet),
                "count_jvm": count(jvm),
                "tail_parquet": tail(parquet),
                "tail_jvm": tail(jvm),
                "catch_up_jvm": catch_up(True),
                "one_row_stream": one_row_stream,
            },
            runs,
        )
        parquet_s, jvm_s, jvm_unchecked_s = turns["parquet"], turns["jvm"], turns["jvm_unchecked"]
        log_s = timed(scan(spark.read.format("logspool").load(log_path)), runs)
        unchecked_s = timed(
            scan(spark.read.format("logspool").option("verifyChecksums", "false").load(log_path)), runs
        )
        prebuilt_s = timed(scan(spark.read.format("prebuilt").load()), runs)
        catch_up_python_s = timed(catch_up(False), 1)  # 0.1x: one run after the warm-up
        data = spark.read.parquet(parquet_path).select("payload").cache()
        data.count()
        write_runs = max(1, runs // 2)

        from logspool.spark import _jvm_write

        python_name = _jvm_write.python_writer(spark)  # the Python writer: the jar has "logspool"

        def write_log() -> None:
            shutil.rmtree(os.path.join(work, "wlog"), ignore_errors=True)
            data.write.format(python_name).mode("append").save(os.path.join(work, "wlog"))

        def write_parquet() -> None:
            data.write.mode("overwrite").parquet(os.path.join(work, "wparquet"))

        write_log_s = timed(write_log, write_runs)
        write_parquet_s = timed(write_parquet, write_runs)
        results = {
            "rows": rows,
            "payload_bytes": 100,
            "master": args.master,
            "log_fill_rows_per_s_python_append_many": rows / fill_s,
            "read_parquet_rows_per_s": rows / parquet_s,
            "read_logspool_rows_per_s": rows / log_s,
            "read_logspool_unchecked_rows_per_s": rows / unchecked_s,
            "read_ratio_to_parquet": parquet_s / log_s,
            "read_unchecked_ratio_to_parquet": parquet_s / unchecked_s,
            "read_jvm_rows_per_s": rows / jvm_s,
            "read_jvm_ratio_to_parquet": parquet_s / jvm_s,
            "read_jvm_unchecked_rows_per_s": rows / jvm_unchecked_s,
            "read_jvm_unchecked_ratio_to_parquet": parquet_s / jvm_unchecked_s,
            "count_parquet_rows_per_s": rows / turns["count_parquet"],
            "count_jvm_rows_per_s": rows / turns["count_jvm"],
            "count_jvm_ratio_to_parquet": turns["count_parquet"] / turns["count_jvm"],
            "tail_tenth_parquet_s": turns["tail_parquet"],
            "tail_tenth_jvm_s": turns["tail_jvm"],
            "tail_tenth_jvm_ratio_to_parquet": turns["tail_parquet"] / turns["tail_jvm"],
            "stream_catch_up_jvm_rows_per_s": rows / turns["catch_up_jvm"],
            "stream_catch_up_jvm_ratio_to_parquet_scan": parquet_s / turns["catch_up_jvm"],
            # Spark's fixed cost of any availableNow query (one row, Spark's own source): a source
            # that read its rows in no time at all would reach at most this ratio
            "stream_one_row_query_s_median": turns["one_row_stream"],
            "stream_catch_up_ceiling_ratio_to_parquet_scan": parquet_s / turns["one_row_stream"],
            "stream_catch_up_python_rows_per_s": rows / catch_up_python_s,
            "stream_catch_up_python_ratio_to_parquet_scan": parquet_s / catch_up_python_s,
            "python_source_ceiling_rows_per_s": rows / prebuilt_s,
            "python_source_ceiling_ratio_to_parquet": parquet_s / prebuilt_s,
            "write_parquet_rows_per_s": rows / write_parquet_s,
            "write_logspool_rows_per_s": rows / write_log_s,
            "write_ratio_to_parquet": write_parquet_s / write_log_s,
            "load_average_1m_before": load_before[0],
            "load_average_1m_after": os.getloadavg()[0],
        }
        results.update(daemon_case(spark, rows, runs, work, parquet_path))
        report(results, args.out)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


def report(results: dict[str, Any], out: str | None) -> None:
    for k, v in results.items():
        print(f"{k:45} {v:,.2f}" if isinstance(v, float) else f"{k:45} {v}")
    if out:
        os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
        with open(out, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    sys.exit(main())
