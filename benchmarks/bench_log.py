"""Benchmark of the log against baselines measured in the same run.

Run: .venv/bin/python benchmarks/bench_log.py [--quick] [--out benchmarks/RESULTS-log.json]

Baselines: a raw ``os.write`` loop of the same payloads (the pure-Python ceiling for an append),
and an ``os.write`` + ``os.fsync`` loop (the disk's limit for one durable record at a time).
Every figure is the median of several runs, with the min and max beside it.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import logspool

PAYLOAD = b"x" * 100


def measure(fn: Callable[[str], int | tuple[int, float]], runs: int) -> dict[str, float]:
    """Run ``fn(fresh_dir)`` ``runs`` times; it returns how many records it handled (timed
    whole), or that and the seconds of the part it timed itself."""
    rates = []
    for _ in range(runs):
        d = tempfile.mkdtemp(prefix="logspool-bench-", dir=os.environ.get("BENCH_DIR"))
        try:
            start = time.perf_counter()
            got = fn(d)
            elapsed = time.perf_counter() - start
            n, elapsed = got if isinstance(got, tuple) else (got, elapsed)
            rates.append(n / elapsed)
        finally:
            shutil.rmtree(d)
    return {"median": statistics.median(rates), "min": min(rates), "max": max(rates), "runs": runs}


def paired_ratio(
    fn: Callable[[str], int | tuple[int, float]], base: Callable[[str], int | tuple[int, float]], pairs: int
) -> dict[str, float]:
    """Median over ``pairs`` back-to-back runs of rate(fn) / rate(base)."""
    ratios = [measure(fn, 1)["median"] / measure(base, 1)["median"] for _ in range(pairs)]
    return {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios), "runs": pairs}


FRAMED = bytes(24) + PAYLOAD  # what an append writes: the 24-byte header, then the payload


def raw_loop(n: int, *, fsync: bool) -> Callable[[str], int]:
    """The baselines: os.write of each payload, and optionally os.fsync after each."""
    data = PAYLOAD

    def run(d: str) -> int:
        fd = os.open(os.path.join(d, "raw"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        for _ in range(n):
            os.write(fd, data)
            if fsync:
                os.fsync(fd)
        os.close(fd)
        return n

    return run


def append_one(n: int, durability: str, *, single_writer: bool = False) -> Callable[[str], int]:
    def run(d: str) -> int:
        with logspool.open(d + "/log", durability=durability, single_writer=single_writer) as log:
            append = log.append
            for _ in range(n):
                append(PAYLOAD)
        return n

    return run


def appends_only(n: int, *, single_writer: bool = False) -> Callable[[str], tuple[int, float]]:
    """``n`` appends with durability "os", timed alone: the log is created and opened before the
    clock starts and closed after it stops (creating a log fsyncs its files and its directory,
    a one-time cost the raw loop has no counterpart of)."""

    def run(d: str) -> tuple[int, float]:
        with logspool.open(d + "/log", durability="os", single_writer=single_writer) as log:
            append = log.append
            start = time.perf_counter()
            for _ in range(n):
                append(PAYLOAD)
            return n, time.perf_counter() - start

    return run


def raw_only(n: int) -> Callable[[str], tuple[int, float]]:
    """The framed os.write loop, timed alone (the file opened before, closed after)."""

    def run(d: str) -> tuple[int, float]:
        fd = os.open(os.path.join(d, "raw"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            start = time.perf_counter()
            for _ in range(n):
                os.write(fd, FRAMED)
            return n, time.perf_counter() - start
        finally:
            os.close(fd)

    return run


def append_many(n: int, batch: int) -> Callable[[str], int]:
    def run(d: str) -> int:
        items = [PAYLOAD] * batch
        with logspool.open(d + "/log", durability="os") as log:
            for _ in range(n // batch):
                log.append_many(items)
        return n // batch * batch

    return run


def threads_durable(
    n_each: int, threads: int, *, single_writer: bool = False, raw: bool = False
) -> Callable[[str], int]:
    """``threads`` threads of one handle appending durably; ``raw``: the baseline instead, each
    thread doing os.write + os.fsync on one shared file, no lock (the disk's and the kernel's
    own sharing of concurrent fsyncs, and nothing of ours)."""

    def run(d: str) -> int:
        fd = os.open(os.path.join(d, "raw"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            with logspool.open(d + "/log", durability="always", single_writer=single_writer) as log:

                def work() -> None:
                    for _ in range(n_each):
                        if raw:
                            os.write(fd, PAYLOAD)
                            os.fsync(fd)
                        else:
                            log.append(PAYLOAD)

                ts = [threading.Thread(target=work) for _ in range(threads)]
                for t in ts:
                    t.start()
                for t in ts:
                    t.join()
        finally:
            os.close(fd)
        return n_each * threads

    return run


def _proc_writer(path: str, n: int, durability: str, go: object) -> None:
    with logspool.open(path, durability=durability) as log:
        go.wait()  # type: ignore[attr-defined]
        for _ in range(n):
            log.append(PAYLOAD)


def _raw_proc_writer(path: str, n: int, durability: str, go: object) -> None:
    """The baseline for concurrent durable appends: os.write + os.fsync on one shared file, so
    the kernel's own batching of concurrent fsyncs (the ext4 journal) is all there is."""
    fd = os.open(os.path.join(path, "raw"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    go.wait()  # type: ignore[attr-defined]
    for _ in range(n):
        os.write(fd, PAYLOAD)
        os.fsync(fd)
    os.close(fd)


def run_together(ctx: Any, target: Callable[..., None], args: tuple[object, ...], procs: int) -> float:
    """Start ``procs`` processes of ``target(*args, go)``, let them open, then release them at once
    (``go.set()``); the seconds until the last one ends. Each must exit 0."""
    go = ctx.Event()
    ps = [ctx.Process(target=target, args=(*args, go)) for _ in range(procs)]
    for p in ps:
        p.start()
    time.sleep(0.3)  # all opened
    start = time.perf_counter()
    go.set()
    for p in ps:
        p.join()
        assert p.exitcode == 0, p.exitcode
    return time.perf_counter() - start


def processes(n_each: int, procs: int, durability: str, *, raw: bool = False) -> Callable[[str], int]:
    ctx = multiprocessing.get_context("fork")
    target = _raw_proc_writer if raw else _proc_writer

    def run(d: str) -> int:
        path = d + "/log"
        logspool.open(path).close()
        elapsed = run_together(ctx, target, (path, n_each, durability), procs)
        if not raw:
            with logspool.open(path, readonly=True) as log:
                assert log.info().next_lsn == n_each * procs
        # report the rate over the timed part only
        run.elapsed = elapsed  # type: ignore[attr-defined]
        return n_each * procs

    return run


def measure_procs(fn: Callable[[str], int], runs: int) -> dict[str, float]:
    rates = []
    for _ in range(runs):
        d = tempfile.mkdtemp(prefix="logspool-bench-", dir=os.environ.get("BENCH_DIR"))
        try:
            n = fn(d)
            rates.append(n / fn.elapsed)  # type: ignore[attr-defined]
        finally:
            shutil.rmtree(d)
    return {"median": statistics.median(rates), "min": min(rates), "max": max(rates), "runs": runs}


def read_rate(n: int, runs: int) -> tuple[dict[str, float], dict[str, int]]:
    d = tempfile.mkdtemp(prefix="logspool-bench-", dir=os.environ.get("BENCH_DIR"))
    try:
        path = d + "/log"
        peaks: dict[str, int] = {}
        with logspool.open(path, durability="os") as log:
            written = 0
            rates = []
            for size in (n // 10, n):
                log.append_many([PAYLOAD] * (size - written))
                written = size
                tracemalloc.start()
                count = sum(1 for _ in log.read())
                peaks[str(size)] = tracemalloc.get_traced_memory()[1]
                tracemalloc.stop()
                assert count == size
            for _ in range(runs):
                start = time.perf_counter()
                count = 0
                for _rec in log.read():
                    count += 1
                rates.append(count / (time.perf_counter() - start))
        stats = {"median": statistics.median(rates), "min": min(rates), "max": max(rates), "runs": runs}
        return stats, peaks
    finally:
        shutil.rmtree(d)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default="benchmarks/out/log.json")
    parser.add_argument(
        "--ratios-only",
        action="store_true",
        help="only issue 30's paired ratios of an append against the framed os.write loop",
    )
    args = parser.parse_args()
    runs = 3 if args.quick else 5
    n = 100_000 if args.quick else 300_000
    n_sync = 500 if args.quick else 2000
    results: dict[str, object] = {"python": sys.version.split()[0], "cpus": os.cpu_count()}
    cases: list[tuple[str, Callable[[], dict[str, float]]]] = [
        ("baseline: os.write loop", lambda: measure(raw_loop(n, fsync=False), runs)),
        ("logspool append, durability=os", lambda: measure(append_one(n, "os"), runs)),
        (
            "logspool append, os, single_writer",
            lambda: measure(append_one(n, "os", single_writer=True), runs),
        ),
        ("logspool append_many(1000), os", lambda: measure(append_many(n * 5, 1000), runs)),
        ("baseline: os.write+os.fsync loop", lambda: measure(raw_loop(n_sync, fsync=True), runs)),
        ("logspool append, always, 1 thread", lambda: measure(append_one(n_sync, "always"), runs)),
        (
            "logspool append, always, 1 thread, single_writer",
            lambda: measure(append_one(n_sync, "always", single_writer=True), runs),
        ),
        (
            "baseline: write+fsync, 8 threads",
            lambda: measure(threads_durable(n_sync, 8, raw=True), runs),
        ),
        ("logspool append, always, 8 threads", lambda: measure(threads_durable(n_sync, 8), runs)),
        (
            "logspool append, always, 8 threads, single_writer",
            lambda: measure(threads_durable(n_sync, 8, single_writer=True), runs),
        ),
        ("logspool append, os, 4 processes", lambda: measure_procs(processes(n // 4, 4, "os"), runs)),
        (
            "baseline: write+fsync, 8 processes",
            lambda: measure_procs(processes(n_sync, 8, "always", raw=True), runs),
        ),
        (
            "logspool append, always, 8 processes",
            lambda: measure_procs(processes(n_sync, 8, "always"), runs),
        ),
    ]
    for name, fn in [] if args.ratios_only else cases:
        results[name] = fn()
        r = results[name]
        print(f"{name:<40} {r['median']:>12,.0f}/s  (min {r['min']:,.0f}, max {r['max']:,.0f})", flush=True)  # type: ignore[index]
    # Issue 30's targets: a process-safe append ("os") >= 0.25x a raw os.write loop of the same
    # framed bytes, single_writer >= 0.4x; paired back-to-back runs, as the machine's speed drifts,
    # each timing its loop alone (not the log's creation, nor the opening of the raw file).
    for single, target in ((False, 0.25), (True, 0.4)):
        ratios = paired_ratio(appends_only(n, single_writer=single), raw_only(n), runs * 2)
        label = "single_writer" if single else "process-safe"
        results[f"append os, {label} / os.write loop of framed records, paired runs"] = ratios
        name = f"os {label} / framed os.write (paired)"
        print(f"{name:<40} {ratios['median']:>12.2f}x  (min {ratios['min']:.2f}, max {ratios['max']:.2f};"
              f" target >= {target}x)")  # fmt: skip
    if args.ratios_only:
        return 0
    # The disk's fsync rate drifts by 20% from minute to minute on this VM: compare "always" with
    # the fsync loop in alternating pairs, and report the median of the per-pair ratios.
    for single in (False, True):
        ratios = paired_ratio(
            append_one(n_sync, "always", single_writer=single), raw_loop(n_sync, fsync=True), runs * 2
        )
        label = ", single_writer" if single else ""
        results[f"always, 1 thread{label} / fsync loop, paired runs"] = ratios
        name = f"always 1 thread{label} / fsync loop (paired)"
        print(f"{name:<40} {ratios['median']:>12.2f}x  (min {ratios['min']:.2f}, max {ratios['max']:.2f})")
    read, peaks = read_rate(1_000_000 if not args.quick else 300_000, runs)
    results["logspool sequential read"] = read
    results["reader peak memory (bytes) by log size"] = peaks
    name = "logspool sequential read"
    print(f"{name:<40} {read['median']:>12,.0f}/s  (min {read['min']:,.0f}, max {read['max']:,.0f})")
    print(f"reader peak traced memory by records in log: {peaks}")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
