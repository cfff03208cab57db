"""The daemon's ops/s against redis-server measured with redis-benchmark, in the same run.

Run: apt-get install redis-server   (benchmark-only reference; not a dependency)
     .venv/bin/python benchmarks/bench_server.py [--quick]

Cases, SET and GET of a 100-byte value, each the median of 3 runs (min and max beside it):
- 1 client, one request at a time (a round trip per op);
- 16 clients at once (16 connections; for logspool's native door, spread over ``--procs`` load
  processes, each one selector loop: 2 by default, which keep the generator below half a core
  (its CPU is printed); 8 cost the 2-core machine's server more in wake-ups than they
  gave: native SET x16 9,455-10,061/s against 11,112-11,178 with 2, benchmarks/RESULTS.md);
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
``--floor`` runs ``resp_floor.py`` in the same turns: a Python server on uvloop with none of
logspool's code, answering with constant replies after redis-server's own fsync work (what Python
and uvloop alone reach on this machine: the issue's targets set against it).
``--chart PNG`` draws the RESP cases: each server's rate as a fraction of redis-server's, the
issue's target marked (matplotlib, the bench extra).
``--part memory``: the RSS of each server after 1,000,000 SETs of 100-byte values.
"""

from __future__ import annotations

import argparse
import csv
import io
import multiprocessing
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from logspool import _wire as p

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


# --- the native protocol: a load generator of several processes, pipelined -------------------------
# (short name, label, command, connections, requests in flight a connection, requests per run,
# with --quick, the RESP_CASES short name whose redis-server figure it is held against)
NATIVE_CASES = [
    ("set16", "kv.SET, 16 connections, durable", p.KV_SET, 16, 1, 20_000, 6_000, "set16"),
    ("set50", "kv.SET, 50 connections, durable", p.KV_SET, 50, 1, 20_000, 6_000, "set50"),
    ("getp16", "kv.GET, 16 connections, pipelined x16", p.KV_GET, 16, 16, 1_000_000, 300_000, "getp16"),
    ("get1", "kv.GET, 1 connection", p.KV_GET, 1, 1, 20_000, 5_000, "get1"),
    ("set1", "kv.SET, 1 connection, durable", p.KV_SET, 1, 1, 5_000, 2_000, "set1"),
    ("append16", "log.APPEND of 1 record, 16 connections, durable", p.LOG_APPEND, 16, 1, 20_000, 6_000,
     "xadd16"),
]  # fmt: skip
KEYS = 100_000  # the keys SET writes and GET reads (redis-benchmark -r 100000)
FRAMES_PER_CONNECTION = 512  # requests encoded before the clock starts, sent round and round


def _request_frames(command: int, seed: int) -> list[bytes]:
    """Requests with keys drawn as redis-benchmark's ``-r`` draws them, encoded once."""
    frames = []
    for i in range(FRAMES_PER_CONNECTION):
        key = f"key:{(seed * 7919 + i * 104729) % KEYS:012d}"
        if command == p.KV_SET:
            body: dict[str, Any] = {"name": "bench", "key": key, "value": VALUE}
        elif command == p.KV_GET:
            body = {"name": "bench", "key": key, "value_only": True}  # (as the client's get)
        else:
            body = {"name": "bench", "records": [VALUE]}
        frames.append(p.encode_frame(p.REQUEST, command, i, body))
    return frames


def _load_process(
    address: str, command: int, connections: int, window: int, per_connection: int, seed: int,
    go: Any, out: Any,
) -> None:  # fmt: skip
    """One process of the load generator: ``connections`` sockets, each sending ``window``
    requests at once and the next ``window`` when all their replies came (redis-benchmark -P),
    ``per_connection`` requests each. Replies are counted by their headers only (an error flag
    fails the run). Puts (requests, started, ended, CPU seconds) on ``out``."""
    import selectors

    host, port = address.rsplit(":", 1)
    sel = selectors.DefaultSelector()
    states = []
    for c in range(connections):
        sock = socket.create_connection((host, int(port)))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
        frames = _request_frames(command, seed * 1000 + c)
        windows = [b"".join(frames[i : i + window]) for i in range(0, len(frames), window)]
        state = {"sock": sock, "windows": windows, "next": 0, "sent": 0, "got": 0, "buf": b""}
        states.append(state)
        sel.register(sock, selectors.EVENT_READ, state)
    go.wait()
    cpu_before = sum(os.times()[:2])
    started = time.perf_counter()
    if len(states) == 1:  # one connection: blocking calls, no selector (a shorter round trip)
        _one_connection(states[0], window, per_connection)
        ended = time.perf_counter()
        cpu = sum(os.times()[:2]) - cpu_before
        states[0]["sock"].close()
        out.put((states[0]["got"], started, ended, cpu))
        return
    for state in states:
        state["sock"].sendall(state["windows"][0])
        state["next"], state["sent"] = 1, window
    done = 0
    while done < len(states):
        for key, _ in sel.select(60):
            state = key.data
            # (64 KiB, not more: ``recv(n)`` allocates n bytes each call; at 1 MiB the generator
            # kept 0.6 of a core busy on SET x16, at 64 KiB 0.25, on a 2-core machine it shares)
            data = state["sock"].recv(1 << 16)
            if not data:
                raise RuntimeError("the server closed a connection")
            buf = state["buf"] + data
            at, got = _replies(buf)
            state["buf"] = buf[at:]
            state["got"] += got
            if state["got"] == state["sent"]:
                if state["sent"] >= per_connection:
                    sel.unregister(state["sock"])
                    done += 1
                    continue
                windows = state["windows"]
                state["sock"].sendall(windows[state["next"] % len(windows)])
                state["next"] += 1
                state["sent"] += window
    ended = time.perf_counter()
    cpu = sum(os.times()[:2]) - cpu_before
    for state in states:
        state["sock"].close()
    out.put((sum(s["got"] for s in states), started, ended, cpu))


def _replies(buf: bytes) -> tuple[int, int]:
    """The complete reply frames at the start of ``buf``: (bytes they take, how many). Counted by
    their headers alone (the load generator must not be the bottleneck); an error reply raises."""
    at = got = 0
    while len(buf) - at >= 16:
        size = int.from_bytes(buf[at + 12 : at + 16], "big")
        if len(buf) - at < 16 + size:
            break
        if buf[at + 7] & p.FLAG_ERROR:
            raise RuntimeError(f"an error reply: {p.decode_body(buf[at + 16 : at + 16 + size])}")
        at += 16 + size
        got += 1
    return at, got


def _one_connection(state: dict[str, Any], window: int, per_connection: int) -> None:
    sock, windows = state["sock"], state["windows"]
    sock.setblocking(True)
    buf = b""
    for turn in range(per_connection // window):
        sock.sendall(windows[turn % len(windows)])
        got = 0
        while got < window:
            data = sock.recv(1 << 16)
            if not data:
                raise RuntimeError("the server closed the connection")
            buf += data
            at, complete = _replies(buf)
            got += complete
            buf = buf[at:]
        state["got"] += got
    state["sent"] = state["got"]


def native_rate(
    address: str, command: int, connections: int, window: int, n: int, procs: int
) -> tuple[float, float]:
    """Requests a second over all the load generator's processes, and their CPU (cores busy)."""
    procs = min(procs, connections)
    per_connection = max(window, n // connections // window * window)
    ctx = multiprocessing.get_context("fork")
    go, out = ctx.Event(), ctx.Queue()
    shares = [connections // procs + (1 if i < connections % procs else 0) for i in range(procs)]
    workers = [
        ctx.Process(target=_load_process, args=(address, command, share, window, per_connection, i, go, out))
        for i, share in enumerate(shares)
    ]
    for w in workers:
        w.start()
    time.sleep(0.5)  # (the connections are made before the clock starts)
    go.set()
    results = [out.get(timeout=900) for _ in workers]
    for w in workers:
        w.join(60)
        if w.exitcode != 0:
            raise RuntimeError(f"a load process failed ({w.exitcode})")
    total = sum(r[0] for r in results)
    elapsed = max(r[2] for r in results) - min(r[1] for r in results)
    return total / elapsed, sum(r[3] for r in results) / elapsed


def start_logspool_native(
    data: str, src: str | None = None, shared_kv: bool = False
) -> tuple[subprocess.Popen[bytes], str]:
    """``shared_kv``: the daemon shares the key-value stores it serves with other processes
    (``serve --shared-kv``: a catch-up with the op log a call) instead of owning them."""
    port = free_port()
    env = dict(os.environ, PYTHONPATH=src) if src else None
    cmd = [sys.executable, "-m", "logspool.cli", "serve", "--data", data, "--listen", f"127.0.0.1:{port}",
           "--durability", "always", *(["--shared-kv"] if shared_kv else [])]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    wait_port(port)
    return proc, f"127.0.0.1:{port}"


def native_main(
    quick: bool, runs: int, cases: list[str] | None, procs: int, versus: str | None, shared_kv: bool = False
) -> None:
    """The native protocol (``logspool serve --listen``) driven by ``procs`` load processes,
    the RESP door (``logspool serve --resp``) and redis-server (appendfsync always) driven by
    redis-benchmark, in turns: each case's median of ``runs``, its ratio to redis and to the
    RESP door, each server's CPU time an op, and the load generator's CPU (cores busy: below
    ``procs`` and well below the machine's cores, it waits for the server, not the reverse)."""
    rows = []
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-native-") as d:
        nat_proc, nat_address = start_logspool_native(os.path.join(d, "native"), shared_kv=shared_kv)
        vs_proc, vs_address = (
            start_logspool_native(os.path.join(d, "versus"), versus) if versus else (None, "")
        )
        ls_proc, ls_port = start_logspool_resp(os.path.join(d, "logspool"))
        os.makedirs(os.path.join(d, "redis"))
        rd_proc, rd_port = start_redis(os.path.join(d, "redis"), durable=True)
        try:
            for port in (ls_port, rd_port):  # the keys GET reads: every key SET may write
                benchmark_rate(port, ["-t", "set", "-c", "50", "-P", "64", "-r", str(KEYS)], 200_000)
            for address in (nat_address, vs_address):
                if address:
                    native_rate(address, p.KV_SET, 16, 64, 2 * KEYS, procs)
            resp_args = {c[0]: c[2] for c in RESP_CASES}
            for short, label, command, conns, window, n_full, n_quick, resp_short in NATIVE_CASES:
                if cases is not None and short not in cases:
                    continue
                n = n_quick if quick else n_full
                native, other, resp, redis = [], [], [], []
                gen_cpu, cpu_nat, cpu_other, cpu_resp, cpu_redis = [], [], [], [], []
                for _ in range(runs):  # in turns: all see the same machine
                    for address, proc, rates, cpu in ((nat_address, nat_proc, native, cpu_nat),
                                                      (vs_address, vs_proc, other, cpu_other)):  # fmt: skip
                        if proc is None:
                            continue
                        before = cpu_s(proc.pid)
                        rate, busy = native_rate(address, command, conns, window, n, procs)
                        rates.append(rate)
                        cpu.append((cpu_s(proc.pid) - before) / n * 1e6)
                        if proc is nat_proc:
                            gen_cpu.append(busy)
                    for port, proc, rates, cpu in ((ls_port, ls_proc, resp, cpu_resp),
                                                   (rd_port, rd_proc, redis, cpu_redis)):  # fmt: skip
                        before = cpu_s(proc.pid)
                        rates.append(benchmark_rate(port, resp_args[resp_short], n))
                        cpu.append((cpu_s(proc.pid) - before) / n * 1e6)
                m = statistics.median
                cpu_text = f"{_us(m(cpu_nat))} / {_us(m(cpu_resp))} / {_us(m(cpu_redis))}"
                row = (label, median(native), median(resp), median(redis), f"{m(native) / m(redis):.2f}x",
                       f"{m(native) / m(resp):.2f}x", cpu_text, f"{m(gen_cpu):.2f}")  # fmt: skip
                rows.append(row)
                print(row, flush=True)
                if other:
                    print(f"    versus {versus}: {median(other)}, {m(other) / m(redis):.2f}x redis, "
                          f"CPU {_us(m(cpu_other))} us an op", flush=True)  # fmt: skip
        finally:
            for proc in (nat_proc, vs_proc, ls_proc, rd_proc):
                if proc is not None:
                    proc.terminate()
                    proc.wait(30)
    print(f"\nload average (1, 5, 15 min): before {load_before}, after {os.getloadavg()}")
    owned = ", its kv stores shared" if shared_kv else ""
    print(f"\n| 100-byte values, median of {runs} | logspool native{owned} ({procs} load processes), ops/s | "
          "logspool RESP (redis-benchmark), ops/s | redis-server (appendfsync always), ops/s | "
          "native / redis | native / RESP | server CPU an op, us (native / RESP / redis) | "
          "load generator, cores busy |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


# --- redis ---------------------------------------------------------------------------------------
def start_redis(d: str, durable: bool) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    args = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", d, "--save", ""]
    args += ["--appendonly", "yes", "--appendfsync", "always"] if durable else ["--appendonly", "no"]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port)
    return proc, port


def _us(cpu: float) -> str:
    """CPU microseconds an op: a tenth under 20 (a GET's few us, where a whole one hides a
    change of a fifth), whole above."""
    return f"{cpu:.1f}" if cpu < 20 else f"{cpu:.0f}"


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
        # (redis-server answers 50,000 in a tenth of a second, where starting the 16 connections
        # weighs: 0.33-0.46x with 50,000 against 0.46-0.50x with 1,000,000 in one run)
        1_000_000,
        300_000,
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
    """The CPU time (user and system) a process has used, in seconds, with that of its children
    it has waited for (a snapshot's forked writer, logspool's or redis-server's)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / os.sysconf("SC_CLK_TCK")


def start_floor(d: str) -> tuple[subprocess.Popen[bytes], int]:
    """``resp_floor.py``: a Python server on uvloop with none of logspool's code (its floor)."""
    port = free_port()
    os.makedirs(d)
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "resp_floor.py")
    proc = subprocess.Popen([sys.executable, script, str(port), d], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    wait_port(port)
    return proc, port


# The target for each RESP case, as a fraction of redis-server's rate (the chart's marks).
RESP_TARGETS = {"set16": 1.0, "set50": 1.0, "getp16": 0.8, "get1": 0.9, "set1": 0.9, "xadd16": 1.0}


def resp_main(
    quick: bool,
    runs: int,
    cases: list[str] | None = None,
    versus: str | None = None,
    floor: bool = False,
    chart: str | None = None,
) -> None:
    """``cases``: the short names of RESP_CASES to run (None: all). ``versus``: the ``src`` of
    another logspool tree, run in the same turns (its ops/s as a fraction of redis's too).
    ``floor``: ``resp_floor.py`` too, in the same turns (what Python on uvloop reaches at all).
    ``chart``: a PNG of each server's rate as a fraction of redis-server's, case by case."""
    rows = []
    ratios: dict[str, dict[str, float]] = {}  # case -> server -> its median rate / redis's
    floor_rows: list[tuple[str, ...]] = []
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-resp-") as d:
        ls_proc, ls_port = start_logspool_resp(os.path.join(d, "logspool"))
        os.makedirs(os.path.join(d, "redis"))
        rd_proc, rd_port = start_redis(os.path.join(d, "redis"), durable=True)
        vs_proc, vs_port = start_logspool_resp(os.path.join(d, "versus"), versus) if versus else (None, 0)
        fl_proc, fl_port = start_floor(os.path.join(d, "floor")) if floor else (None, 0)
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
                floors: list[float] = []
                cpu_floor: list[float] = []
                servers = [(ls_port, ls_proc, ours, cpu_ours), (rd_port, rd_proc, theirs, cpu_theirs)]
                if vs_proc is not None:
                    servers.append((vs_port, vs_proc, other, cpu_other))
                if fl_proc is not None:
                    servers.append((fl_port, fl_proc, floors, cpu_floor))
                for _ in range(runs):  # in turns: both see the same machine
                    for port, proc, rates, cpu in servers:
                        before = cpu_s(proc.pid)
                        rates.append(benchmark_rate(port, case_args, n))
                        cpu.append((cpu_s(proc.pid) - before) / n * 1e6)
                ratio = statistics.median(ours) / statistics.median(theirs)
                ratios[short] = {"logspool": ratio}
                for name, rates in (("versus", other), ("floor", floors)):
                    if rates:
                        ratios[short][name] = statistics.median(rates) / statistics.median(theirs)
                cpu_text = f"{_us(statistics.median(cpu_ours))} / {_us(statistics.median(cpu_theirs))}"
                rows.append((label, median(ours), median(theirs), f"{ratio:.2f}x", cpu_text))
                print(rows[-1], flush=True)
                if other:
                    vs_ratio = statistics.median(other) / statistics.median(theirs)
                    print(f"    versus {versus}: {median(other)}, {vs_ratio:.2f}x redis, "
                          f"CPU {_us(statistics.median(cpu_other))} us an op", flush=True)  # fmt: skip
                if floors:
                    fl_ratio = statistics.median(floors) / statistics.median(theirs)
                    floor_rows.append((label, median(floors), f"{fl_ratio:.2f}x", f"{ratio / fl_ratio:.2f}x",
                                       _us(statistics.median(cpu_floor))))  # fmt: skip
                    print("    floor:", floor_rows[-1], flush=True)
        finally:
            for proc in (ls_proc, rd_proc, vs_proc, fl_proc):
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
    if floor_rows:
        print(
            "\n| the same cases | floor (resp_floor.py: Python on uvloop, no logspool), ops/s | floor / "
            "redis | logspool / floor | floor's CPU an op, us |"
        )
        print("|---|---|---|---|---|")
        for row in floor_rows:
            print("| " + " | ".join(row) + " |")
    if chart:
        resp_chart(ratios, versus, runs, chart)


def resp_chart(ratios: dict[str, dict[str, float]], versus: str | None, runs: int, path: str) -> None:
    """Each case's rate as a fraction of redis-server's (1.0: redis's), a bar a server, the
    issue's target marked (matplotlib: the bench extra)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = list(ratios)
    labels = {short: label for short, label, *_ in RESP_CASES}
    servers = [
        ("logspool", "logspool (this tree)", "#1c7ed6"),
        ("versus", f"logspool ({versus})", "#a5d8ff"),
        ("floor", "floor: Python on uvloop, no logspool", "#adb5bd"),
    ]
    servers = [s for s in servers if any(s[0] in ratios[c] for c in cases)]
    fig, ax = plt.subplots(figsize=(9, 3.8))
    width = 0.8 / len(servers)
    for k, (key, label, color) in enumerate(servers):
        xs = [i + (k - (len(servers) - 1) / 2) * width for i in range(len(cases))]
        values = [ratios[c].get(key, 0.0) for c in cases]
        bars = ax.bar(xs, values, width, label=label, color=color)
        ax.bar_label(bars, labels=[f"{v:.2f}" for v in values], fontsize=7)
    for i, c in enumerate(cases):
        target = RESP_TARGETS.get(c)
        if target is not None:
            ax.hlines(target, i - 0.45, i + 0.45, colors="#d9480f", linestyles="dashed")
    ax.axhline(1.0, color="#495057", linewidth=0.8)
    ax.set_xticks(range(len(cases)), [labels[c].replace(", ", "\n", 1) for c in cases], fontsize=7)
    ax.set_ylabel("ops/s / redis-server's")
    ax.set_title(f"redis-benchmark against each server, median of {runs} in turns (dashed: the target)",
                 fontsize=9)  # fmt: skip
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


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
    ap.add_argument(
        "--native-cases",
        help="native cases to run, comma-separated: "
        + ",".join(c[0] for c in NATIVE_CASES)
        + " (default: all)",
    )
    ap.add_argument("--shared-kv", action="store_true",
                    help="the native daemon shares its key-value stores (serve --shared-kv)")  # fmt: skip
    ap.add_argument("--procs", type=int, default=2, help="processes of the native load generator (default 2)")
    ap.add_argument("--versus", metavar="SRC", help="also run the logspool of this src directory (A/B)")
    ap.add_argument(
        "--floor", action="store_true", help="also run resp_floor.py (RESP cases): Python's own floor"
    )
    ap.add_argument("--chart", metavar="PNG", help="RESP cases: a chart of each server against redis-server")
    args = ap.parse_args()
    if args.part == "memory":
        memory_main(100_000 if args.quick else 1_000_000)
        return
    if args.part in ("all", "resp"):
        resp_main(
            args.quick,
            args.runs,
            args.cases.split(",") if args.cases else None,
            args.versus,
            args.floor,
            args.chart,
        )
    if args.part == "resp":
        return
    native_cases = args.native_cases.split(",") if args.native_cases else None
    native_main(args.quick, args.runs, native_cases, args.procs, args.versus, args.shared_kv)


if __name__ == "__main__":
    main()
