"""The daemon's slowest replies under sustained pipelined SETs, snapshots included.

Run: .venv/bin/python benchmarks/bench_server_tail.py [--keys 300000] [--ops 1500000]
     [--dir /dev/shm] [--versus OTHER_SRC] [--runs 1]

A ``logspool serve --resp`` on a fresh data directory is filled with ``redis-benchmark -t set -r
KEYS -n 2*KEYS -P 64 -c 4``, then driven with ``redis-benchmark -t set -r KEYS -n OPS -P 16 -c 16
-d 100`` (OPS past two snapshots at the default thresholds: one every 2 x KEYS ops); prints its
throughput and latency summary (p50, p99, max). ``--versus`` runs a daemon of another tree (its
``src`` directory) in turns with this one.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(HERE), "src")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def one(src: str, keys: int, ops: int, root: str | None) -> dict[str, float]:
    data = tempfile.mkdtemp(prefix="logspool-bench-tail-", dir=root)
    port, native = free_port(), free_port()
    env = dict(os.environ, PYTHONPATH=src)
    cmd = [sys.executable, "-m", "logspool.cli", "serve", "--data", data, "--listen", f"127.0.0.1:{native}",
           "--resp", f"127.0.0.1:{port}"]  # fmt: skip
    daemon = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:  # bounded: 30 s
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if daemon.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the daemon did not start") from None
                time.sleep(0.05)
        bench = ["redis-benchmark", "-p", str(port), "-t", "set", "-r", str(keys), "-d", "100"]
        subprocess.run(
            [*bench, "-n", str(2 * keys), "-P", "64", "-c", "4", "-q"], check=True, capture_output=True
        )
        drive = [*bench, "-n", str(ops), "-P", "16", "-c", "16"]
        out = subprocess.run(drive, check=True, capture_output=True, text=True).stdout.replace("\r", "\n")
        rate = float(re.search(r"throughput summary: ([\d.]+) requests per second", out).group(1))  # type: ignore[union-attr]
        lines = out[out.index("latency summary") :].splitlines()
        names, values = lines[1].split(), [float(v) for v in lines[2].split()]
        return {"ops_per_s": rate, **dict(zip(names, values, strict=True))}
    finally:
        daemon.terminate()
        daemon.wait(60)
        shutil.rmtree(data, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keys", type=int, default=300_000)
    parser.add_argument("--ops", type=int, default=1_500_000)
    parser.add_argument("--dir", default=None, help="where the data directories live (default: the temp dir)")
    parser.add_argument("--versus", help="the src directory of another tree, run in turns")
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    trees = [("now", SRC)] + ([(args.versus, args.versus)] if args.versus else [])
    print("| tree | SET/s | p50, ms | p99, ms | max, ms |")
    print("|---|---|---|---|---|")
    for _ in range(args.runs):
        for name, src in trees:
            r = one(src, args.keys, args.ops, args.dir)
            print(
                f"| {name} | {r['ops_per_s']:,.0f} | {r['p50']:.1f} | {r['p99']:.1f} | {r['max']:.1f} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
