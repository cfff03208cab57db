"""How soon a reader in another process sees an append (the tail's wake-up), against a pipe.

A child process tails a log (``reader.next``) and prints, for each record, the nanoseconds
between the append (the payload carries the time it was made) and its return. The baseline, in
the same run: a child that blocks in ``os.read`` on a pipe and prints the same delay for a
message written to it, the floor of any cross-process wake-up on this machine. Each append
comes after the reader has waited ``--gap-ms``, so it is really asleep. Median and 99th
percentile, with inotify and with polling (LOGSPOOL_NO_INOTIFY=1).

    .venv/bin/python benchmarks/bench_wake.py [--rounds 400] [--gap-ms 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import logspool

_READER = """
import sys, time, logspool
log = logspool.open(sys.argv[1], readonly=True)
reader = log.reader("latest")
print("ready", flush=True)
for _ in range(int(sys.argv[2])):
    rec = reader.next(timeout=3600)
    print(time.time_ns() - int(rec.payload), flush=True)
"""

_PIPE = """
import os, sys, time
fd = int(sys.argv[1])
print("ready", flush=True)
for _ in range(int(sys.argv[2])):
    sent = int(os.read(fd, 64))
    print(time.time_ns() - sent, flush=True)
"""


def _measure(
    argv: list[str],
    send: Callable[[bytes], object],
    rounds: int,
    gap_s: float,
    env: dict[str, str],
    **kw: Any,
) -> list[float]:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env, **kw)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    out = []
    for _ in range(rounds):
        time.sleep(gap_s)
        send(str(time.time_ns()).encode())
        out.append(int(proc.stdout.readline()) / 1e6)
    proc.wait(60)
    return out[rounds // 10 :]  # the first waits poll before the watch is set up: left out


def _row(name: str, ms: list[float]) -> str:
    p99 = sorted(ms)[int(len(ms) * 0.99) - 1]
    return f"| {name} | {statistics.median(ms):.3f} | {p99:.3f} |"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument(
        "--gap-ms", type=float, default=5.0, help="how long the reader waits before each append"
    )
    args = parser.parse_args()
    gap = args.gap_ms / 1000
    print(f"| wake-up of a process waiting for data ({args.rounds} rounds) | median ms | p99 ms |")
    print("|---|---|---|")
    read_fd, write_fd = os.pipe()
    ms = _measure(
        [sys.executable, "-c", _PIPE, str(read_fd), str(args.rounds)],
        lambda b: os.write(write_fd, b.ljust(64)),
        args.rounds,
        gap,
        dict(os.environ),
        pass_fds=(read_fd,),
    )
    print(_row("baseline: os.read on a pipe", ms))
    for inotify in (True, False):
        with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
            env = dict(os.environ)
            if not inotify:
                env["LOGSPOOL_NO_INOTIFY"] = "1"
            with logspool.open(os.path.join(tmp, "log"), durability="os") as log:
                ms = _measure(
                    [sys.executable, "-c", _READER, log.path, str(args.rounds)],
                    log.append,
                    args.rounds,
                    gap,
                    env,
                )
            print(_row(f"logspool reader.next, {'inotify' if inotify else 'polling'}", ms))
    return 0


if __name__ == "__main__":
    sys.exit(main())
