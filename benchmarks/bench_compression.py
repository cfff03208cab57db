"""Benchmark of per-log zstd compression on compressible and incompressible payloads.

Run: .venv/bin/python benchmarks/bench_compression.py [--quick] [--out benchmarks/out/compression.json]

For each kind of payload, in the same run: an uncompressed log (the baseline), compressed logs at
levels 1, 3 and 9, and zstd alone on the same payloads (the codec's own ceiling, without the log).
Reported: append_many rate (durability "os"), sequential read rate, and bytes on disk per record.
Every rate is the median of several runs.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable

import zstandard

import logspool


def payloads(kind: str, n: int) -> list[bytes]:
    rng = random.Random(42)
    if kind == "json-events-200B":
        pages = ["/home", "/cart", "/search?q=shoes", "/item/18342", "/checkout"]
        out = []
        for i in range(n):
            event = rng.choice(["view", "click"])
            page = rng.choice(pages)
            text = (
                f'{{"ts":{1795000000000 + i},"user":{rng.randrange(10**6)},"event":"{event}",'
                f'"page":"{page}","latency_ms":{rng.randrange(900)},"ok":true}}'
            )
            out.append(text.encode() + b" " * rng.randrange(60, 80))
        return out
    if kind == "log-lines-2KiB":
        words = b"error warning request user session timeout retry backend cache database".split()
        return [b" ".join(rng.choice(words) for _ in range(260))[:2048] for _ in range(n)]
    if kind == "random-1KiB":
        return [rng.randbytes(1024) for _ in range(n)]
    raise ValueError(kind)


def timed(fn: Callable[[], object], runs: int) -> float:
    """Median seconds of ``fn`` over ``runs``."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def one_case(items: list[bytes], level: int | None, runs: int) -> dict[str, float]:
    options: dict[str, object] = {} if level is None else {"compression": "zstd", "compression_level": level}
    n = len(items)
    holder: dict[str, object] = {}

    def write() -> None:
        d = tempfile.mkdtemp(prefix="logspool-bench-", dir=os.environ.get("BENCH_DIR"))
        holder.setdefault("dirs", []).append(d)  # type: ignore[union-attr]
        with logspool.open(d + "/log", durability="os", **options) as log:  # type: ignore[arg-type]
            for i in range(0, n, 1000):
                log.append_many(items[i : i + 1000])
        holder["last"] = d + "/log"

    write_s = timed(write, runs)
    path = str(holder["last"])
    size = sum(s.size for s in logspool.open(path, readonly=True).info().segments)

    def read() -> None:
        with logspool.open(path, readonly=True) as log:
            count = sum(1 for _ in log.read())
        assert count == n

    read_s = timed(read, runs)
    for d in holder["dirs"]:  # type: ignore[attr-defined]
        shutil.rmtree(d)
    return {"append_per_s": n / write_s, "read_per_s": n / read_s, "bytes_per_record": size / n}


def codec_alone(items: list[bytes], level: int, runs: int) -> dict[str, float]:
    c = zstandard.ZstdCompressor(level=level, write_checksum=False)
    d = zstandard.ZstdDecompressor()
    frames = [c.compress(p) for p in items]
    comp_s = timed(lambda: [c.compress(p) for p in items], runs)
    decomp_s = timed(lambda: [d.decompress(f) for f in frames], runs)
    return {
        "compress_per_s": len(items) / comp_s,
        "decompress_per_s": len(items) / decomp_s,
        "frame_bytes": sum(map(len, frames)) / len(items),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default="benchmarks/out/compression.json")
    args = parser.parse_args()
    n, runs = (20_000, 2) if args.quick else (100_000, 3)
    results: dict[str, object] = {"records": n, "runs": runs}
    for kind in ("json-events-200B", "log-lines-2KiB", "random-1KiB"):
        items = payloads(kind, n)
        raw = sum(map(len, items)) / n
        row: dict[str, object] = {"payload_bytes": raw}
        for level in (None, 1, 3, 9):
            name = "none" if level is None else f"zstd-{level}"
            row[name] = one_case(items, level, runs)
            r = row[name]
            print(
                f"{kind:18} {name:8} append {r['append_per_s']:>10,.0f}/s  read {r['read_per_s']:>10,.0f}/s  "  # type: ignore[index]
                f"{r['bytes_per_record']:7.1f} B/record (payload {raw:.0f} B)",  # type: ignore[index]
                flush=True,
            )
        row["zstd-3 alone"] = alone = codec_alone(items, 3, runs)
        print(
            f"{kind:18} zstd-3 alone: compress {alone['compress_per_s']:,.0f}/s, "
            f"decompress {alone['decompress_per_s']:,.0f}/s, frame {alone['frame_bytes']:.1f} B",
            flush=True,
        )
        results[kind] = row
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
