"""What a background snapshot of the key-value store costs the writes that go on meanwhile.

Run: .venv/bin/python benchmarks/bench_kv_snapshot.py [--keys 100000 1000000] [--runs 3] [--dir /dev/shm]

A store of N keys of 100 bytes opened as the daemon opens it (``single_writer``,
``compact_in_background``); a snapshot starts in a thread while this thread sets keys one by one
until it is done: the slowest set (the time a write waited for the snapshot) and the snapshot's
own time. Two ways in turns, in the same run: the snapshot written by a forked child (the mutex
held for the fork), and the baseline, the same store on an I/O seam that keeps it in this process
(a copy of every entry made under the store's mutex, then encoded in a thread).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import threading
import time
from typing import Any

from logspool import kv
from logspool._fs import FileSystem


class InThisProcess(FileSystem):
    """The real file system, said not to be shared with a child: snapshots in a thread."""


def one_run(store: Any, keys: int) -> tuple[float, float, int]:
    """(the slowest set while a snapshot ran, the snapshot's seconds, sets made meanwhile)."""
    done = threading.Event()
    took: list[float] = []

    def snapshot() -> None:
        t0 = time.perf_counter()
        store.snapshot()
        took.append(time.perf_counter() - t0)
        done.set()

    thread = threading.Thread(target=snapshot)
    slowest, count = 0.0, 0
    thread.start()
    while not done.is_set():
        t0 = time.perf_counter()
        store.set(f"key:{count % keys:012d}", b"w" * 100)
        slowest = max(slowest, time.perf_counter() - t0)
        count += 1
    thread.join()
    return slowest, took[0], count


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keys", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where the stores live (default: the temp dir)")
    args = parser.parse_args()
    print(
        "| keys | snapshot by | slowest set while it ran, ms (median; range) | snapshot, s | sets meanwhile |"
    )
    print("|---|---|---|---|---|")
    for keys in args.keys:
        work = tempfile.mkdtemp(prefix="logspool-bench-snap-", dir=args.dir)
        try:
            stores = {}
            for how, fs in (("forked child", None), ("thread (copy under the mutex)", InThisProcess())):
                s = kv.open(os.path.join(work, how.split()[0]), durability="os", single_writer=True,
                            compact_in_background=True, snapshot_ops_min=10**9, fs=fs)  # fmt: skip
                for i in range(keys):
                    s.set(f"key:{i:012d}", b"v" * 100)
                stores[how] = s
            results: dict[str, list[tuple[float, float, int]]] = {how: [] for how in stores}
            for _ in range(args.runs):  # in turns
                for how, s in stores.items():
                    results[how].append(one_run(s, keys))
            for how, runs in results.items():
                slow = [r[0] * 1e3 for r in runs]
                took = statistics.median(r[1] for r in runs)
                sets = statistics.median(r[2] for r in runs)
                spread = f"{statistics.median(slow):.1f} ({min(slow):.1f}-{max(slow):.1f})"
                print(f"| {keys:,} | {how} | {spread} | {took:.2f} | {sets:,.0f} |")
            for s in stores.values():
                s.close()
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
