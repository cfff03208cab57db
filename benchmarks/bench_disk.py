"""What this disk allows a log format: fsync-per-record loops and framed-write loops, one run.

Run: .venv/bin/python benchmarks/bench_disk.py [--records 2000] [--runs 5] [--quick] [--dir DIR]

No logspool code: these are the baselines a change of the write path would be measured against.

* Durable loops (``--records`` each, 136-byte records: a 100-byte payload framed as FORMAT.md
  §4.2): appending with fsync or fdatasync (the file grows, so every flush also journals the new
  size); appending into space reserved with ``fallocate(FALLOC_FL_KEEP_SIZE)`` (the size still
  grows); and writing in place (``pwrite``) into space made part of the file first, by
  ``posix_fallocate`` or by writing zeros (all of it first, or 128 KiB ahead of the records as a
  durable logspool writer does), then fsync or fdatasync (the size does not change); and the
  same in groups of 13 and 33 records a write (a group commit of 16 and of 50 clients).
* Framed loops (200,000 records, no fsync): header + payload + CRC encoded in Python, then one
  ``os.write`` per record to an O_APPEND file, or a copy into a shared mapping of a file sized
  beforehand (no system call per record).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import os
import shutil
import statistics
import struct
import sys
import tempfile
import time
import zlib
from collections.abc import Callable

HEADER = struct.Struct("<IIQQQ")
CRC = struct.Struct("<I")
PAYLOAD = b"x" * 100
RECORD = HEADER.pack(100, 0, 0, 0, 0) + PAYLOAD + b"\0" * 4
FALLOC_FL_KEEP_SIZE = 1


def _libc_fallocate() -> Callable[[int, int, int, int], int] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.fallocate
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
    return fn  # type: ignore[no-any-return]


ZERO_AHEAD = 128 * 1024  # (logspool's limits.ZERO_AHEAD_SIZE)


def durable_loop(path: str, n: int, setup: str, flush: Callable[[int], None], group: int = 1) -> float:
    """Records per second: ``n`` records written ``group`` at a time (one write, a group
    commit's), each write flushed before the next. Setup ``zero_ahead``: in place into
    ``posix_fallocate``'d space, over which zeros are written ZERO_AHEAD bytes ahead of the
    records each time less than half of that is left (what a logspool writer with durability
    "always" does)."""
    size = n * len(RECORD) + ZERO_AHEAD + 4096
    if setup == "append":
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND)
    elif setup == "keep_size":
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND)
        fallocate = _libc_fallocate()
        if fallocate is None or fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, size) != 0:
            os.close(fd)
            return float("nan")
    else:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
        if setup in ("posix_fallocate", "zero_ahead"):
            os.posix_fallocate(fd, 0, size)
        else:  # zeros
            os.write(fd, bytes(size))
    os.fsync(fd)
    try:
        offset = 0
        t0 = time.perf_counter()
        if setup in ("append", "keep_size"):
            for _ in range(n):
                os.write(fd, RECORD)
                flush(fd)
        else:
            data, zeros, zeroed = RECORD * group, bytes(ZERO_AHEAD), 0
            for _ in range(n // group):
                os.pwrite(fd, data, offset)
                offset += len(data)
                if setup == "zero_ahead" and offset + ZERO_AHEAD // 2 > zeroed:
                    zeroed = max(zeroed, offset)
                    os.pwrite(fd, zeros, zeroed)
                    zeroed += ZERO_AHEAD
                flush(fd)
        return n // group * group / (time.perf_counter() - t0)
    finally:
        os.close(fd)
        os.unlink(path)


def framed_loop(path: str, n: int, how: str) -> float:
    """Records per second: ``n`` records framed in Python and written, no fsync."""
    pack, crc_pack, crc32 = HEADER.pack, CRC.pack, zlib.crc32
    if how == "write":
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND)
        t0 = time.perf_counter()
        for i in range(n):
            body = pack(100, 0, i, i, 0) + PAYLOAD
            os.write(fd, body + crc_pack(crc32(body)))
        rate = n / (time.perf_counter() - t0)
        os.close(fd)
    else:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
        os.ftruncate(fd, n * len(RECORD))
        m = mmap.mmap(fd, n * len(RECORD))
        at = 0
        t0 = time.perf_counter()
        for i in range(n):
            body = pack(100, 0, i, i, 0) + PAYLOAD
            end = at + len(RECORD)
            m[at:end] = body + crc_pack(crc32(body))
            at = end
        rate = n / (time.perf_counter() - t0)
        m.close()
        os.close(fd)
    os.unlink(path)
    return rate


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="500 records, 3 runs")
    parser.add_argument("--dir", default=os.environ.get("BENCH_DIR"), help="on the disk to measure")
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args()
    if args.quick:
        args.records, args.runs = 500, 3
    work = tempfile.mkdtemp(prefix="logspool-bench-disk-", dir=args.dir)
    path = os.path.join(work, "f")
    cases: list[tuple[str, Callable[[], float]]] = [
        ("append + fsync (the fsync loop)", lambda: durable_loop(path, args.records, "append", os.fsync)),
        ("append + fdatasync", lambda: durable_loop(path, args.records, "append", os.fdatasync)),
        (
            "append into fallocate(KEEP_SIZE) + fdatasync",
            lambda: durable_loop(path, args.records, "keep_size", os.fdatasync),
        ),
        (
            "pwrite in place (posix_fallocate) + fsync",
            lambda: durable_loop(path, args.records, "posix_fallocate", os.fsync),
        ),
        (
            "pwrite in place (posix_fallocate) + fdatasync",
            lambda: durable_loop(path, args.records, "posix_fallocate", os.fdatasync),
        ),
        (
            "pwrite in place (zeros written) + fdatasync",
            lambda: durable_loop(path, args.records, "zeros", os.fdatasync),
        ),
        (
            "pwrite in place (zeros written 128 KiB ahead) + fdatasync",
            lambda: durable_loop(path, args.records, "zero_ahead", os.fdatasync),
        ),
    ]
    for group in (13, 33):  # (a group commit of 16 and 50 clients: their rounds' sizes, ~2 and ~4.5 KB)
        cases += [
            (
                f"groups of {group}, pwrite in place (posix_fallocate) + fdatasync",
                lambda g=group: durable_loop(path, args.records * 4, "posix_fallocate", os.fdatasync, g),
            ),
            (
                f"groups of {group}, pwrite in place (zeros written 128 KiB ahead) + fdatasync",
                lambda g=group: durable_loop(path, args.records * 4, "zero_ahead", os.fdatasync, g),
            ),
            (
                f"groups of {group}, pwrite in place (zeros written) + fdatasync",
                lambda g=group: durable_loop(path, args.records * 4, "zeros", os.fdatasync, g),
            ),
        ]
    cases += [
        ("framed records, one os.write each", lambda: framed_loop(path, 200_000, "write")),
        ("framed records, copied into a mapping", lambda: framed_loop(path, 200_000, "mmap")),
    ]
    runs: dict[str, list[float]] = {name: [] for name, _fn in cases}
    try:
        for _ in range(args.runs):  # interleaved: a slow spell of the disk hits every case alike
            for name, fn in cases:
                runs[name].append(fn())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    base = statistics.median(runs[cases[0][0]])
    results = {}
    for name, values in runs.items():
        median = statistics.median(values)
        results[name] = {"median": median, "min": min(values), "max": max(values), "runs": values}
        ratio = "" if "framed" in name or "groups" in name else f"{median / base:5.2f}x the fsync loop"
        print(f"{name:72} {median:>12,.0f}/s  ({min(values):,.0f} .. {max(values):,.0f})  {ratio}")
    if args.out:
        os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
