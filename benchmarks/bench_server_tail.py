"""The daemon's slowest replies under sustained pipelined SETs, snapshots included.

Run: .venv/bin/python benchmarks/bench_server_tail.py [--keys 300000] [--ops 1500000]
     [--dir /dev/shm] [--versus [NAME=]OTHER_SRC ...] [--runs 1] [--chart PNG]

A ``logspool serve --resp`` on a fresh data directory is filled with ``redis-benchmark -t set -r
KEYS -n 2*KEYS -P 64 -c 4``, then driven with ``redis-benchmark -t set -r KEYS -n OPS -P 16 -c 16
-d 100`` (OPS past two snapshots at the default thresholds: one every 2 x KEYS ops); prints its
throughput and latency summary (p50, p99, max). ``--versus`` runs daemons of other trees (their
``src`` directories, each named NAME if given) in turns with this one; ``--chart`` draws each
tree's p99 and slowest reply (the median over the runs) into a PNG (matplotlib: the bench extra).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import statistics
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
    parser.add_argument("--versus", nargs="*", default=[], help="[NAME=]SRC of other trees, run in turns")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--chart", help="write a PNG of each tree's p99 and slowest reply here")
    args = parser.parse_args()
    trees = [("now", SRC)] + [(v.split("=", 1)[0], v.split("=", 1)[-1]) for v in args.versus]
    print("| tree | SET/s | p50, ms | p99, ms | max, ms |")
    print("|---|---|---|---|---|")
    results: dict[str, list[dict[str, float]]] = {name: [] for name, _ in trees}
    for _ in range(args.runs):
        for name, src in trees:
            r = one(src, args.keys, args.ops, args.dir)
            results[name].append(r)
            row = f"| {name} | {r['ops_per_s']:,.0f} | {r['p50']:.1f} | {r['p99']:.1f} | {r['max']:.1f} |"
            print(row, flush=True)
    if args.chart:
        chart(results, args.keys, args.chart)
    return 0


def chart(results: dict[str, list[dict[str, float]]], keys: int, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    fig, ax = plt.subplots(figsize=(7, 3.2))
    width = 0.38
    for k, (field, label, color) in enumerate(
        (("p99", "p99", "#868e96"), ("max", "slowest reply", "#d9480f"))
    ):
        values = [statistics.median(r[field] for r in results[name]) for name in names]
        bars = ax.bar(
            [i + (k - 0.5) * width for i in range(len(names))], values, width, label=label, color=color
        )
        ax.bar_label(bars, labels=[f"{v:,.0f}" for v in values], fontsize=8)
    ax.set_xticks(range(len(names)), names, fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("ms (log scale)")
    ax.set_title(f"SET -P 16 -c 16 over {keys:,} keys, two snapshots during the run", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    raise SystemExit(main())
