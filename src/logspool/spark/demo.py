"""The pipeline demo (the README's main job): producers, a log, Spark streaming and batch jobs.

1. Producer processes append card-payment events (JSON) to the log ``DIR/events``; half-way,
   when "day one" ends, the driver makes a cutover, and day two goes to the next segment.
2. A Structured Streaming job reads the log through the logspool source (as the durable
   subscriber ``aggregator``), totals the amounts per minute and merchant, and writes Parquet.
3. A batch job makes day one's extract from the cut-over segment (``endingPosition``), read by
   the JVM reader (``logspool.spark.load``), with the JSON parsed by Spark.
4. It checks that streaming totals, the extract and what the producers sent agree, prints a
   summary and draws the totals per merchant as ``DIR/aggregates.svg``.

``python -m logspool.spark.demo [--master local[2]] [--dir demo-output]``; with ``--master
spark://host:7077`` the same job runs on a cluster whose workers see DIR (docs/SPARK.md);
``--cluster`` starts a standalone cluster on this machine (``cluster.py``), runs on it, stops it.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from ..demo import DemoDirError, prepare_output_dir

MERCHANTS = ("bakery", "books", "cafe", "cinema", "fuel", "grocer", "pharmacy", "transit")
DAYS = (datetime(2026, 11, 20, 9, 0, tzinfo=UTC), datetime(2026, 11, 21, 9, 0, tzinfo=UTC))
EVENT_SCHEMA = "card string, merchant string, amount_cents long, at timestamp"
SCHEMA = "lsn long, " + EVENT_SCHEMA


def _produce(path: str, producer: int, day: int, count: int, out: Any) -> None:
    """Append ``count`` events of day ``day``; report (count, cents) per merchant."""
    import logspool

    rng = random.Random(producer * 100 + day)
    weights = (30, 8, 25, 4, 12, 18, 6, 20)  # some merchants are busier than others
    totals: dict[str, list[int]] = {m: [0, 0] for m in MERCHANTS}
    with logspool.open(path) as log:
        batch = []
        for i in range(count):
            n = producer * 1_000_003 + day * 7919 + i
            merchant = rng.choices(MERCHANTS, weights)[0]
            cents = int(rng.lognormvariate(7, 0.8)) + 50
            at = DAYS[day] + timedelta(seconds=i * 3 + producer)
            event = {
                "card": f"card-{n % 500:03d}",
                "merchant": merchant,
                "amount_cents": cents,
                "at": at.isoformat(),
            }
            batch.append(json.dumps(event).encode())
            totals[merchant][0] += 1
            totals[merchant][1] += cents
            if len(batch) == 100:
                log.append_many(batch)  # durable on return: one fsync for the hundred
                batch = []
        if batch:
            log.append_many(batch)
    out.put((day, totals))


def produce_day(path: str, day: int, producers: int, events: int) -> dict[str, list[int]]:
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_produce, args=(path, p, day, events, queue)) for p in range(producers)]
    for p in procs:
        p.start()
    totals: dict[str, list[int]] = {m: [0, 0] for m in MERCHANTS}
    for _ in procs:
        _day, part = queue.get(timeout=300)
        for m, (n, cents) in part.items():
            totals[m][0] += n
            totals[m][1] += cents
    for p in procs:
        p.join(60)
        if p.exitcode != 0:
            raise RuntimeError(f"producer exited with {p.exitcode}")
    return totals


def session(master: str) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers run this interpreter
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from . import JvmError, jar, register

    builder = (
        SparkSession.builder.master(master)
        .appName("logspool-demo")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
    )
    try:
        builder = builder.config("spark.jars", jar())  # the JVM batch reader (logspool.spark.load)
    except JvmError as err:
        print(f"demo: batch reads use the Python source: {err}")
    if master.startswith(("local", "spark://127.0.0.1:", "spark://localhost:")):
        builder = builder.config("spark.driver.host", "127.0.0.1").config(
            "spark.driver.bindAddress", "127.0.0.1"
        )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def stream_aggregates(spark: Any, events: str, out: str, checkpoint: str) -> int:
    """Run the streaming job over everything in the log now; returns the micro-batches run."""
    from pyspark.sql import functions as F

    def write_batch(df: Any, batch_id: int) -> None:
        # One directory per batch, overwritten on replay: the sink is idempotent.
        totals = df.groupBy(F.window("at", "1 minute").start.alias("minute"), "merchant").agg(
            F.count("*").alias("events"), F.sum("amount_cents").alias("cents")
        )
        totals.write.mode("overwrite").parquet(f"{out}/batch={batch_id}")

    query = (
        spark.readStream.format("logspool")
        .option("decode", "json")
        .option("subscriber", "aggregator")
        .option("startingPosition", "earliest")
        .option("maxRecordsPerTrigger", "5000")
        .schema(SCHEMA)
        .load(events)
        .writeStream.foreachBatch(write_batch)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return sum(1 for p in query.recentProgress if p["numInputRows"])


def svg_bars(values: dict[str, float], title: str) -> str:
    """A small bar chart as SVG text (no plotting library needed)."""
    width, bar, gap, left = 640, 26, 8, 90
    top = max(values.values()) or 1
    rows = []
    for i, (name, v) in enumerate(sorted(values.items(), key=lambda kv: -kv[1])):
        y = 40 + i * (bar + gap)
        w = (width - left - 80) * v / top
        rows.append(
            f'<text x="{left - 8}" y="{y + 18}" text-anchor="end">{name}</text>'
            f'<rect x="{left}" y="{y}" width="{w:.1f}" height="{bar}" fill="#4a7ab5"/>'
            f'<text x="{left + w + 6:.1f}" y="{y + 18}">{v:,.2f}</text>'
        )
    height = 40 + len(values) * (bar + gap) + 10
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="13"><text x="10" y="22" font-weight="bold">{title}</text>'
        + "".join(rows)
        + "</svg>\n"
    )


def run(
    directory: str, *, master: str, producers: int, events: int, spark: Any = None, force: bool = False
) -> int:
    """Run the whole demo; 0 if every total agrees. ``spark``: a session to use (and not stop)."""
    from pyspark.sql import functions as F

    import logspool

    from . import load

    prepare_output_dir(directory, force=force)
    log_path = os.path.join(directory, "events")
    started = time.monotonic()
    with logspool.open(log_path, segment_size_max=4 * 1024 * 1024):
        pass
    print(f"demo: {producers} producer processes x {events} events a day into {log_path}")
    sent = [produce_day(log_path, 0, producers, events)]
    with logspool.open(log_path) as log:
        cut = log.cutover()  # day one ends: its events are lsns below this, in sealed segments
    print(f"demo: day one written; cutover: day two starts at lsn {cut}")
    sent.append(produce_day(log_path, 1, producers, events))

    own = spark is None
    if own:
        spark = session(master)
    agg_dir = os.path.join(directory, "aggregates")
    batches = stream_aggregates(
        spark, log_path, agg_dir, os.path.join(directory, "checkpoints", "aggregates")
    )
    aggregates = spark.read.parquet(agg_dir)
    by_minute = aggregates.groupBy("minute", "merchant").sum("events", "cents").count()
    sums = aggregates.groupBy("merchant").agg(F.sum("events").alias("n"), F.sum("cents").alias("cents"))
    per_merchant = {r.merchant: (r.n, r.cents) for r in sums.collect()}

    extract_dir = os.path.join(directory, "extract", "day=2026-11-20")
    # The JVM reader (when the session has it) reads the sealed day; Spark parses the JSON.
    day_one = load(spark, log_path, endingPosition=cut).select(
        "lsn", F.from_json(F.col("payload").cast("string"), EVENT_SCHEMA).alias("e")
    )
    day_one = day_one.select("lsn", "e.*")
    day_one.write.mode("overwrite").parquet(extract_dir)
    extract = spark.read.parquet(extract_dir)
    extract_count = extract.count()
    extract_days = sorted({r.day for r in extract.selectExpr("cast(at as date) as day").distinct().collect()})

    expected = {m: (sent[0][m][0] + sent[1][m][0], sent[0][m][1] + sent[1][m][1]) for m in MERCHANTS}
    day_one_sent = sum(n for n, _ in sent[0].values())
    with logspool.open(log_path, readonly=True) as log:
        info = log.info()
        subscriber = {s.name: s for s in log.subscribers()}["aggregator"]
    ok = per_merchant == expected and extract_count == day_one_sent and len(extract_days) == 1
    chart = os.path.join(directory, "aggregates.svg")
    with open(chart, "w") as f:
        f.write(
            svg_bars(
                {m: c / 100 for m, (_n, c) in per_merchant.items()}, "Card payments per merchant (two days)"
            )
        )
    if own:
        spark.stop()

    total = sum(n for n, _ in expected.values())
    print(f"demo: log: {info.next_lsn} records in {len(info.segments)} segments, {info.size:,} bytes")
    print(f"demo: streaming job: {batches} micro-batches, {by_minute} minute x merchant totals -> {agg_dir}")
    print(
        f"demo: subscriber 'aggregator' is at lsn {subscriber.lsn}"
        f" ({subscriber.records_behind} records behind: Spark commits a batch when it plans the next)"
    )
    print(
        f"demo: daily extract of {extract_days[0]}: {extract_count} events from lsns 0..{cut - 1}"
        f" -> {extract_dir}"
    )
    for m in sorted(per_merchant, key=lambda m: -per_merchant[m][1]):
        n, cents = per_merchant[m]
        print(f"demo:   {m:<9} {n:>6} payments  {cents / 100:>12,.2f}")
    verdict = "agree" if ok else "DISAGREE"
    print(f"demo: streaming totals, the extract and the {total} events sent {verdict}; chart: {chart}")
    print(f"demo: done in {time.monotonic() - started:.1f} s")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m logspool.spark.demo", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--dir",
        default="demo-output",
        help="where the log and the outputs go: a new or empty directory, or one a demo made (replaced)",
    )
    parser.add_argument("--force", action="store_true", help="replace --dir even if a demo did not make it")
    parser.add_argument("--master", help="Spark master URL (default local[2])")
    parser.add_argument(
        "--cluster",
        action="store_true",
        help="start a Spark standalone cluster here (a master, two workers on 127.0.0.1), run on it, stop it",
    )
    parser.add_argument("--producers", type=int, default=3, help="producer processes")
    parser.add_argument("--events", type=int, default=4000, help="events per producer per day")
    args = parser.parse_args(argv)
    if args.cluster and args.master:
        parser.error("give --master URL or --cluster, not both")
    try:
        if args.cluster:
            from .cluster import StandaloneCluster

            with StandaloneCluster(workers=2) as master:
                print(f"demo: a standalone cluster at {master} (a master and two workers, 127.0.0.1)")
                return run(
                    args.dir, master=master, producers=args.producers, events=args.events, force=args.force
                )
        return run(
            args.dir, master=args.master or "local[2]", producers=args.producers, events=args.events,
            force=args.force,
        )  # fmt: skip
    except DemoDirError as err:
        parser.error(str(err))


if __name__ == "__main__":
    sys.exit(main())
