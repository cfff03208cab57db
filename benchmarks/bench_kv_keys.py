"""A new key's cost as the key-value store grows: the sorted key index (kv/_state.py).

Run: .venv/bin/python benchmarks/bench_kv_keys.py [--sizes 10000,100000,1000000]

For each size N: a store (durability "os": the CPU of a decision, not the disk's fsync) is
filled with N random keys, then 20,000 more new random keys are set, 16 a decision as the
daemon's commit rounds set them; the figure is the process CPU time a new key. Beside it, in the
same run, the two ways to keep N sorted keys that the index can use: a list kept with
``bisect.insort`` (the index before, O(n) a new key) and ``sortedcontainers.SortedList``
(O(log n)). The store's figure should stay flat as N grows.
"""

from __future__ import annotations

import argparse
import bisect
import random
import tempfile
import time

from sortedcontainers import SortedList

from logspool import kv
from logspool.server._resp_kv import RedisKV

VALUE = b"v" * 100
NEW = 20_000
ROUND = 16


def random_keys(n: int, rng: random.Random) -> list[str]:
    return [f"key:{rng.getrandbits(64):016x}" for _ in range(n)]


def store_cpu_us(size: int, rng: random.Random) -> float:
    with tempfile.TemporaryDirectory(prefix="bench-kv-keys-") as d:
        store = kv.open(d, durability="os", single_writer=True, snapshot_ops_min=10**9)
        try:
            redis = RedisKV(store)
            filler = random_keys(size, rng)
            for i in range(0, size, 1000):
                with redis.decide() as dd:
                    for key in filler[i : i + 1000]:
                        dd.set(key, VALUE)
            new = random_keys(NEW, rng)
            started = time.process_time()
            for i in range(0, NEW, ROUND):
                with redis.decide() as dd:
                    for key in new[i : i + ROUND]:
                        dd.set(key, VALUE)
            return (time.process_time() - started) / NEW * 1e6
        finally:
            store.close()


def index_us(size: int, rng: random.Random) -> tuple[float, float]:
    keys = sorted(random_keys(size, rng))
    new = random_keys(2_000, rng)
    started = time.perf_counter()
    for key in new:
        bisect.insort(keys, key)
    listed = (time.perf_counter() - started) / len(new) * 1e6
    tree = SortedList(keys)
    started = time.perf_counter()
    for key in new:
        tree.add(key)
    return listed, (time.perf_counter() - started) / len(new) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000,100000,1000000")
    args = ap.parse_args()
    rng = random.Random(34)
    print(
        "| keys in the store | store: CPU a new key, 16 a decision, us | list + insort, us | SortedList, us |"
    )
    print("|---:|---:|---:|---:|")
    for size in (int(s) for s in args.sizes.split(",")):
        listed, tree = index_us(size, rng)
        print(f"| {size:,} | {store_cpu_us(size, rng):.1f} | {listed:.1f} | {tree:.1f} |", flush=True)


if __name__ == "__main__":
    main()
