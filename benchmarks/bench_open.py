"""Open time of a job journal and a key-value store against the work done in them (issue 29 item 7).

A store writes a snapshot once the work an open would redo since the last one (ops, or bytes of
ops in op units: limits.SNAPSHOT_OP_BYTES) passes limits.*_SNAPSHOT_OPS_MIN. Batched APIs put
thousands of jobs in one op, so counting records alone let 1,200,000 jobs pass with no snapshot
(14.1 s to open). This does N jobs with put_many(2000) / take_many(500, ack=previous), and N keys
set with set_many-like batches where the store has them, closes, and times a fresh open (median
of 3), for growing N: open time should stay flat. The baseline in the same run is opening an
empty journal.

    .venv/bin/python benchmarks/bench_open.py [--jobs 100000,300000,1200000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

from logspool import jobs


def _do_jobs(path: str, count: int) -> None:
    with jobs.open(path) as journal:
        done = 0
        batch: list[jobs.Job] = []
        n = 0
        while done < count:
            journal.put_many((f"k{n + i}", b"p" * 100) for i in range(2000))
            n += 2000
            for _ in range(4):
                batch = journal.take_many(500, ack=batch)
                done += len(batch)
        journal.ack_many(batch)


def _open_s(path: str) -> float:
    times = []
    for _ in range(3):
        start = time.perf_counter()
        journal = jobs.open(path)
        times.append(time.perf_counter() - start)
        journal.close()
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", default="100000,300000,1200000", help="job counts, comma-separated")
    args = parser.parse_args()
    counts = [int(c) for c in args.jobs.split(",")]
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        empty = os.path.join(tmp, "empty")
        jobs.open(empty).close()
        print("| jobs done | snapshots | op log MB | open s (median of 3) |")
        print("|---|---|---|---|")
        print(f"| 0 (empty journal, baseline) | 0 | 0.0 | {_open_s(empty):.3f} |")
        for count in counts:
            path = os.path.join(tmp, f"j{count}")
            _do_jobs(path, count)
            snaps = [n for n in os.listdir(path) if n.startswith("snapshot")]
            ops = os.path.join(path, "ops")
            size = sum(os.path.getsize(os.path.join(ops, n)) for n in os.listdir(ops) if n.endswith(".seg"))
            print(f"| {count:,} | {len(snaps)} | {size / 1e6:.1f} | {_open_s(path):.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
