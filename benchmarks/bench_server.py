"""The daemon's ops/s against redis-server measured with redis-benchmark, in the same run.

Run: apt-get install redis-server   (benchmark-only reference; not a dependency)
     .venv/bin/python benchmarks/bench_server.py [--quick]

Cases, SET and GET of a 100-byte value, each the median of 3 runs (min and max beside it):
- 1 client, one request at a time (a round trip per op);
- 16 clients at once (16 connections; for logspool, 16 threads in 4 processes);
- 1 client pipelining 16 requests at a time (redis-benchmark -P 16; logspool's ``pipeline``).
Settings written beside the numbers: logspool with durability "always" (a SET returns after its
fsync; concurrent SETs share one) and "os" (page cache); redis with ``appendonly yes`` and
``appendfsync always`` (fsync per write batch) and with persistence off (its ceiling).
Correctness: logspool's GETs must return the value set; the SET count is checked at the end.
"""

from __future__ import annotations

import argparse
import csv
import io
import multiprocessing
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from logspool import client
from logspool.server import _protocol as p

VALUE = b"v" * 100


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


# --- logspool ------------------------------------------------------------------------------------
def _worker(address: str, op: str, n: int, threads: int, out: Any) -> None:
    c = client.connect(address)
    k = c.kv("bench")

    def run(t: int) -> None:
        for i in range(n):
            key = f"k{os.getpid()}-{t}-{i % 1000}"
            if op == "set":
                k.set(key, VALUE)
            else:
                got = k.get(f"k-{i % 1000}")
                assert got == VALUE

    ts = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    c.close()
    out.put(n * threads)


def logspool_rate(address: str, op: str, clients: int, pipeline: int, n: int) -> float:
    if pipeline > 1:
        c = client.connect(address)
        command = p.KV_SET if op == "set" else p.KV_GET
        started = time.perf_counter()
        for i in range(0, n, pipeline):
            bodies = [{"name": "bench", "key": f"k-{(i + j) % 1000}"} for j in range(pipeline)]
            if op == "set":
                for b in bodies:
                    b["value"] = VALUE
            replies = c.pipeline([(command, b) for b in bodies])
            assert all(not isinstance(r, Exception) for r in replies)
        elapsed = time.perf_counter() - started
        c.close()
        return n / elapsed
    procs = min(clients, 4)
    per_proc_threads = clients // procs
    per_thread = max(1, n // clients)
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    workers = [ctx.Process(target=_worker, args=(address, op, per_thread, per_proc_threads, out))
               for _ in range(procs)]  # fmt: skip
    started = time.perf_counter()
    for w in workers:
        w.start()
    done = sum(out.get(timeout=600) for _ in workers)
    elapsed = time.perf_counter() - started
    for w in workers:
        w.join()
    return done / elapsed


def start_logspool(data: str, durability: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "logspool.cli", "serve", "--data", data, "--listen",
                             f"127.0.0.1:{port}", "--durability", durability],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    wait_port(port)
    c = client.connect(f"127.0.0.1:{port}")
    for i in range(1000):
        c.kv("bench").set(f"k-{i}", VALUE)
    c.close()
    return proc, f"127.0.0.1:{port}"


# --- redis ---------------------------------------------------------------------------------------
def start_redis(d: str, durable: bool) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    args = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", d, "--save", ""]
    args += ["--appendonly", "yes", "--appendfsync", "always"] if durable else ["--appendonly", "no"]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port)
    return proc, port


def redis_rate(port: int, op: str, clients: int, pipeline: int, n: int) -> float:
    out = subprocess.run(["redis-benchmark", "-p", str(port), "-t", op, "-n", str(n), "-c", str(clients),
                          "-P", str(pipeline), "-d", str(len(VALUE)), "-r", "1000", "--csv", "-q"],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    rows = list(csv.reader(io.StringIO(out)))
    for row in rows:
        if row and row[0].upper() == op.upper():
            return float(row[1])
    raise RuntimeError(f"redis-benchmark said {out!r}")


def median(samples: list[float]) -> str:
    return f"{statistics.median(samples):,.0f} ({min(samples):,.0f}-{max(samples):,.0f})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    n = 2000 if args.quick else 6000
    runs = 3
    cases = [("1 client", 1, 1), ("16 clients", 16, 1), ("pipelined x16", 1, 16)]
    rows: list[tuple[str, str, str, str]] = []
    with tempfile.TemporaryDirectory(prefix="bench-server-") as d:
        for durability in ("always", "os"):
            data = os.path.join(d, f"ls-{durability}")
            proc, address = start_logspool(data, durability)
            try:
                for op in ("set", "get"):
                    for label, clients, pipeline in cases:
                        count = (
                            n if op == "get" or durability == "os" or clients > 1 or pipeline > 1 else n // 4
                        )
                        got = [logspool_rate(address, op, clients, pipeline, count) for _ in range(runs)]
                        rows.append(
                            (f"logspool serve (durability {durability})", op.upper(), label, median(got))
                        )
                        print(rows[-1], flush=True)
            finally:
                proc.terminate()
                proc.wait(30)
                shutil.rmtree(data, ignore_errors=True)
        for durable in (True, False):
            rd = os.path.join(d, f"redis-{durable}")
            os.makedirs(rd)
            proc2, port = start_redis(rd, durable)
            name = "redis-server (appendfsync always)" if durable else "redis-server (no persistence)"
            try:
                for op in ("set", "get"):
                    for label, clients, pipeline in cases:
                        got = [redis_rate(port, op, clients, pipeline, n * 2) for _ in range(runs)]
                        rows.append((name, op.upper(), label, median(got)))
                        print(rows[-1], flush=True)
            finally:
                proc2.terminate()
                proc2.wait(30)
    print("\n| server | op | clients | ops/s, median (min-max) |\n|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
