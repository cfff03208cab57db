"""Benchmark of the Spark data source: batch read and write rows/s beside Parquet, same run.

Run: .venv/bin/python benchmarks/bench_spark.py [--rows 1000000] [--quick] [--master local[2]]

One local SparkSession. The same rows (lsn, timestamp, a 100-byte payload) are in a log and in a
Parquet directory written by Spark. Each read is a full scan that Spark cannot skip: the sum of
the payload lengths and of the lsns, so every row crosses from the source into Spark. Reported:
rows/s of the median of several runs, and the ratio to Parquet (the target is at least 0.8x).
Writes: df.write.format("logspool") of the same rows, against df.write.parquet.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
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


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="100,000 rows, 3 runs")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args()
    rows, runs = (100_000, 3) if args.quick else (args.rows, args.runs)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from logspool.spark import register

    spark = (
        SparkSession.builder.master(args.master)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "4g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    work = tempfile.mkdtemp(prefix="logspool-bench-spark-")
    try:
        log_path, parquet_path = os.path.join(work, "log"), os.path.join(work, "parquet")
        t0 = time.perf_counter()
        with logspool.open(log_path, durability="os") as log:
            batch = 10_000
            for start in range(0, rows, batch):
                log.append_many([b"%010d" % i + b"x" * 90 for i in range(start, min(rows, start + batch))])
            log.sync()
        fill_s = time.perf_counter() - t0
        source = spark.read.format("logspool").load(log_path)
        source.write.mode("overwrite").parquet(parquet_path)

        def scan(df: Any) -> Callable[[], Any]:
            return lambda: df.agg(F.sum(F.length("payload")), F.sum("lsn")).collect()

        parquet_s = timed(scan(spark.read.parquet(parquet_path)), runs)
        log_s = timed(scan(spark.read.format("logspool").load(log_path)), runs)
        unchecked_s = timed(
            scan(spark.read.format("logspool").option("verifyChecksums", "false").load(log_path)), runs
        )
        data = spark.read.parquet(parquet_path).select("payload").cache()
        data.count()
        write_runs = max(1, runs // 2)

        def write_log() -> None:
            shutil.rmtree(os.path.join(work, "wlog"), ignore_errors=True)
            data.write.format("logspool").mode("append").save(os.path.join(work, "wlog"))

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
            "write_parquet_rows_per_s": rows / write_parquet_s,
            "write_logspool_rows_per_s": rows / write_log_s,
            "write_ratio_to_parquet": write_parquet_s / write_log_s,
        }
        for k, v in results.items():
            print(f"{k:45} {v:,.2f}" if isinstance(v, float) else f"{k:45} {v}")
        if args.out:
            os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
            with open(args.out, "w") as f:
                json.dump(results, f, indent=2)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
