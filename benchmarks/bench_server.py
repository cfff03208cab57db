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

``--part resp`` (or ``all``, the default): the same redis-benchmark commands against logspool's
RESP port (``logspool serve --resp``, durability "always") and redis-server (``appendonly yes``,
``appendfsync always``), the two in turns (logspool, redis, logspool, redis...) so that both see
the same machine; 100-byte values; the median of 3 runs each, and logspool's median as a
fraction of redis's (issue 34's targets: SET x16 and x50 >= 1.0, GET -P 16 >= 0.8, GET and SET
with one client >= 0.9), and each server's CPU time an op (user and system, from /proc: steadier
than the rates on a shared machine). redis-benchmark's exit status and output are checked for
errors. ``--cases set16,getp16,...`` runs some of them, ``--runs N`` takes the median of N, and
``--versus SRC`` runs a third server, the logspool of another tree's ``src`` (``git archive
COMMIT src | tar -x -C DIR``), in the same turns: a change measured against the commit before it
on the same machine at the same time.
``--part memory``: the RSS of each server after 1,000,000 SETs of 100-byte values.
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

from logspool import _wire as p
from logspool import client

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


# --- the RESP front door against redis-server, same client -------------------------------------------
# (label, redis-benchmark arguments, requests per run, requests per run with --quick)
# (--cases picks some by the short name first)
RESP_CASES = [
    ("set16", "SET, 16 clients, durable", ["-t", "set", "-c", "16", "-r", "100000"], 20_000, 6_000),
    ("set50", "SET, 50 clients, durable", ["-t", "set", "-c", "50", "-r", "100000"], 20_000, 6_000),
    (
        "getp16",
        "GET, 16 clients, pipelined x16",
        ["-t", "get", "-c", "16", "-P", "16", "-r", "100000"],
        200_000,
        50_000,
    ),
    ("get1", "GET, 1 client", ["-t", "get", "-c", "1", "-r", "100000"], 20_000, 5_000),
    ("set1", "SET, 1 client, durable", ["-t", "set", "-c", "1", "-r", "100000"], 5_000, 2_000),
    (
        "xadd16",
        "XADD, 16 clients, durable",
        ["-c", "16", "XADD", "bench", "*", "payload", "__rand_int__"],
        20_000,
        6_000,
    ),
]


def start_logspool_resp(data: str, src: str | None = None) -> tuple[subprocess.Popen[bytes], int]:
    """``src``: run the logspool of another source tree (its ``src`` directory), for A/B runs."""
    port = free_port()
    env = dict(os.environ, PYTHONPATH=src) if src else None
    proc = subprocess.Popen([sys.executable, "-m", "logspool.cli", "serve", "--data", data, "--resp",
                             f"127.0.0.1:{port}", "--durability", "always"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)  # fmt: skip
    wait_port(port)
    return proc, port


def benchmark_rate(port: int, case_args: list[str], n: int) -> float:
    """redis-benchmark's requests/s for one case (its own test name, or the custom command's)."""
    cmd = ["redis-benchmark", "-p", str(port), "-n", str(n), "-d", str(len(VALUE)), "--csv", "-q", *case_args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    text = done.stdout + done.stderr
    if done.returncode != 0 or "error" in text.lower():
        raise RuntimeError(f"{' '.join(cmd)} failed: {text[-2000:]}")
    rows = [row for row in csv.reader(io.StringIO(done.stdout)) if row and row[0] != "test"]
    return float(rows[-1][1])


def cpu_s(pid: int) -> float:
    """The CPU time (user and system) a process has used, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def resp_main(quick: bool, runs: int, cases: list[str] | None = None, versus: str | None = None) -> None:
    """``cases``: the short names of RESP_CASES to run (None: all). ``versus``: the ``src`` of
    another logspool tree, run in the same turns (its ops/s as a fraction of redis's too)."""
    rows = []
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-resp-") as d:
        ls_proc, ls_port = start_logspool_resp(os.path.join(d, "logspool"))
        os.makedirs(os.path.join(d, "redis"))
        rd_proc, rd_port = start_redis(os.path.join(d, "redis"), durable=True)
        vs_proc, vs_port = start_logspool_resp(os.path.join(d, "versus"), versus) if versus else (None, 0)
        try:
            for port in (ls_port, rd_port, vs_port):  # the keys GET reads: every key SET may write
                if not port:
                    continue
                benchmark_rate(port, ["-t", "set", "-c", "50", "-P", "64", "-r", "100000"], 200_000)
            for short, label, case_args, n_full, n_quick in RESP_CASES:
                if cases is not None and short not in cases:
                    continue
                n = n_quick if quick else n_full
                ours, theirs, other = [], [], []
                cpu_ours, cpu_theirs, cpu_other = [], [], []  # each server's CPU time an op, in us
                servers = [(ls_port, ls_proc, ours, cpu_ours), (rd_port, rd_proc, theirs, cpu_theirs)]
                if vs_proc is not None:
                    servers.append((vs_port, vs_proc, other, cpu_other))
                for _ in range(runs):  # in turns: both see the same machine
                    for port, proc, rates, cpu in servers:
                        before = cpu_s(proc.pid)
                        rates.append(benchmark_rate(port, case_args, n))
                        cpu.append((cpu_s(proc.pid) - before) / n * 1e6)
                ratio = statistics.median(ours) / statistics.median(theirs)
                cpu_text = f"{statistics.median(cpu_ours):.0f} / {statistics.median(cpu_theirs):.0f}"
                rows.append((label, median(ours), median(theirs), f"{ratio:.2f}x", cpu_text))
                print(rows[-1], flush=True)
                if other:
                    vs_ratio = statistics.median(other) / statistics.median(theirs)
                    print(f"    versus {versus}: {median(other)}, {vs_ratio:.2f}x redis, "
                          f"CPU {statistics.median(cpu_other):.0f} us an op", flush=True)  # fmt: skip
        finally:
            for proc in (ls_proc, rd_proc, vs_proc):
                if proc is not None:
                    proc.terminate()
                    proc.wait(30)
    load_after = os.getloadavg()
    print(f"\nload average (1, 5, 15 min): before {load_before}, after {load_after}")
    print(
        f"\n| redis-benchmark, 100-byte values, median of {runs} | logspool serve --resp (durability "
        "always), ops/s | redis-server (appendfsync always), ops/s | logspool / redis | "
        "server CPU an op, us (logspool / redis) |"
    )
    print("|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def memory_main(keys: int) -> None:
    """RSS after ``keys`` SETs of 100-byte values (``redis-cli --pipe``), both servers durable."""
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as d:
        pipe = os.path.join(d, "sets.resp")
        with open(pipe, "wb") as f:
            for i in range(keys):
                key = b"key:%07d" % i
                f.write(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(key), key, len(VALUE), VALUE))
        ls_proc, ls_port = start_logspool_resp(os.path.join(d, "logspool"))
        os.makedirs(os.path.join(d, "redis"))
        rd_proc, rd_port = start_redis(os.path.join(d, "redis"), durable=True)
        try:
            print(f"\n| {keys:,} keys of 100 bytes (redis-cli --pipe, durable) | load, s | RSS after, MiB |")
            print("|---|---|---|")
            for name, proc, port in (
                ("logspool serve --resp", ls_proc, ls_port),
                ("redis-server", rd_proc, rd_port),
            ):
                started = time.perf_counter()
                with open(pipe, "rb") as f:
                    cmd = ["redis-cli", "-p", str(port), "--pipe"]
                    done = subprocess.run(cmd, stdin=f, capture_output=True, text=True, timeout=1800)
                if done.returncode != 0 or "errors: 0" not in done.stdout:
                    raise RuntimeError(f"redis-cli --pipe: {done.stdout} {done.stderr}")
                elapsed = time.perf_counter() - started
                print(f"| {name} | {elapsed:.1f} | {rss_kib(proc.pid) / 1024:,.0f} |", flush=True)
        finally:
            for proc in (ls_proc, rd_proc):
                proc.terminate()
                proc.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--part", choices=["all", "native", "resp", "memory"], default="all")
    ap.add_argument("--runs", type=int, default=3, help="runs of each case per server (median of them)")
    ap.add_argument(
        "--cases",
        help="RESP cases to run, comma-separated: " + ",".join(c[0] for c in RESP_CASES) + " (default: all)",
    )
    ap.add_argument("--versus", metavar="SRC", help="also run the logspool of this src directory (A/B)")
    args = ap.parse_args()
    if args.part == "memory":
        memory_main(100_000 if args.quick else 1_000_000)
        return
    if args.part in ("all", "resp"):
        resp_main(args.quick, args.runs, args.cases.split(",") if args.cases else None, args.versus)
    if args.part == "resp":
        return
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
