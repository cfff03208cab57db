"""Reading back values that left memory: a key-value store with a memory bound.

Run: env -u PYTHONDONTWRITEBYTECODE .venv/bin/python benchmarks/bench_kv_cold.py [--values N]
     (PYTHONPATH=<another tree's src> before it measures that tree: a change before and after)

A store opened with ``memory_max=0`` keeps no value of 128 bytes or more in memory: each ``get``
reads its bytes back, from the op log (the op that set it) or from a snapshot (after one). In
the same run, the baselines: the same ``get`` on a store with no memory bound (the value in
memory), and a raw ``os.pread`` of 200 bytes at a random offset of a file of the same size (the
page cache's floor). Microseconds a read, the median of 5 passes over the values in random
order.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time

from logspool import kv

VALUE_SIZE = 200


def per_read(read: object, keys: list[str]) -> float:
    """Microseconds a call of ``read`` over ``keys``, the median of 5 passes."""
    passes = []
    for _ in range(5):
        started = time.perf_counter()
        for key in keys:
            read(key)  # type: ignore[operator]
        passes.append((time.perf_counter() - started) / len(keys) * 1e6)
    return statistics.median(passes)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--values", type=int, default=2000, help="values stored and read back (default 2000)")
    args = ap.parse_args()
    rng = random.Random(28)
    values = {f"k{i:06d}": rng.randbytes(VALUE_SIZE) for i in range(args.values)}
    keys = list(values)
    rng.shuffle(keys)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-kv-cold-") as d:
        path = os.path.join(d, "kv")
        with kv.open(path, snapshot_ops_min=10**9) as store:
            store.update(values)
        with kv.open(path, memory_max=0) as cold:
            assert all(cold.get(k) == values[k] for k in keys[:100])
            rows.append(("from the op log (memory_max=0)", per_read(cold.get, keys)))
            cold.snapshot()
            rows.append(("from a snapshot (memory_max=0, after snapshot())", per_read(cold.get, keys)))
        with kv.open(path) as warm:
            rows.append(("in memory (no memory bound)", per_read(warm.get, keys)))
        raw = os.path.join(d, "raw")
        with open(raw, "wb") as f:
            f.write(rng.randbytes(VALUE_SIZE * args.values))
        fd = os.open(raw, os.O_RDONLY)
        offsets = {k: VALUE_SIZE * i for i, k in enumerate(keys)}
        try:
            rows.append(("os.pread of 200 bytes (the page cache's floor)",
                         per_read(lambda k: os.pread(fd, VALUE_SIZE, offsets[k]), keys)))  # fmt: skip
        finally:
            os.close(fd)
    print(f"| {args.values:,} values of {VALUE_SIZE} bytes, read back in random order | us a read |")
    print("|---|---|")
    for label, us in rows:
        print(f"| {label} | {us:.1f} |")


if __name__ == "__main__":
    main()
