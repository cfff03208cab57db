"""``logspool serve`` as a real process under load: kill -9 at a random moment (three rounds) and
SIGTERM. The oracle: every request the daemon acknowledged is there after a restart (log records,
counter increments, jobs), nothing unacknowledged appears twice, and the counter is between what
was acknowledged and what was sent."""

from __future__ import annotations

import asyncio
import random
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import logspool
from logspool import client, kv
from logspool.errors import LockedError, RemoteError
from tests.server.conftest import Daemon


@dataclass
class Load:
    acked_records: set[bytes] = field(default_factory=set)
    acked_adds: int = 0
    sent_adds: int = 0
    acked_jobs: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)


def producer(address: str, n: int, load: Load, round_: int) -> None:
    try:
        c = client.connect(address, timeout=10, reconnect=False)
    except (OSError, RemoteError):
        return
    try:
        for i in range(1 << 30):
            if load.stop.is_set():
                return
            payload = b"r%d-t%d-%d" % (round_, n, i)
            c.log("events").append(payload)
            with load.lock:
                load.acked_records.add(payload)
                load.sent_adds += 1
            c.kv("counts").add("n")
            with load.lock:
                load.acked_adds += 1
            key = f"job-{round_}-{n}-{i}"
            c.jobs("work").put(key, b"x")
            with load.lock:
                load.acked_jobs.add(key)
    except (RemoteError, OSError):
        return  # the daemon died: what was in flight is not acknowledged
    finally:
        c.close()


def run_load(d: Daemon, load: Load, round_: int, seconds: float) -> list[threading.Thread]:
    threads = [threading.Thread(target=producer, args=(d.address, n, load, round_)) for n in range(4)]
    for t in threads:
        t.start()
    time.sleep(seconds)
    return threads


def check(d: Daemon, load: Load) -> None:
    with client.connect(d.address, timeout=30) as c:
        records, payloads = [], []
        start: int | str = "earliest"
        for _ in range(10_000):
            page, nxt = c.log("events").read_page(start, limit=5000)
            records += page
            if not page:
                break
            start = nxt
        payloads = [r.payload for r in records]
        assert len(payloads) == len(set(payloads)), "a record appears twice"
        missing = load.acked_records - set(payloads)
        assert not missing, f"{len(missing)} acknowledged records are missing, e.g. {sorted(missing)[:3]}"
        value = c.kv("counts").get("n", 0)
        assert load.acked_adds <= value <= load.sent_adds, (load.acked_adds, value, load.sent_adds)
        for key in random.Random(1).sample(sorted(load.acked_jobs), min(200, len(load.acked_jobs))):
            assert c.jobs("work").get(key), f"acknowledged job {key} is missing"


def test_kill_9_under_load_loses_nothing_acknowledged(tmp_path: Path) -> None:
    d = Daemon(tmp_path / "data")
    load = Load()
    rng = random.Random(7)
    try:
        for round_ in range(3):
            d.start()
            threads = run_load(d, load, round_, rng.uniform(0.5, 1.5))
            d.kill()
            for t in threads:
                t.join(30)
            d.start()
            check(d, load)
            d.kill()
        assert len(load.acked_records) > 100
    finally:
        d.kill()
    report = logspool.verify(tmp_path / "data" / "logs" / "events")  # an ordinary log after all that
    assert report.ok, report


def test_sigterm_replies_to_what_is_in_flight_and_stops_cleanly(tmp_path: Path) -> None:
    d = Daemon(tmp_path / "data")
    load = Load()
    try:
        d.start()
        threads = run_load(d, load, 0, 1.0)
        assert d.signal(signal.SIGTERM) == 0
        for t in threads:
            t.join(30)
        assert "stopped" in d.output()
        d.start()
        check(d, load)
    finally:
        d.kill()


def test_both_clients_reconnect_after_the_daemon_restarts(tmp_path: Path) -> None:
    d = Daemon(tmp_path / "data").start()
    try:
        sync = client.connect(d.address, timeout=10)
        sync.kv("k").set("a", 1)

        async def go() -> None:
            ac = await client.connect_async(d.address, timeout=10)
            await ac.kv("k").set("b", 2)
            d.kill()
            await asyncio.sleep(0.3)  # the client sees the connection close
            d.start()
            assert await ac.kv("k").add("b") == 3  # a new connection for this call
            await ac.close()

        asyncio.run(go())
        assert sync.kv("k").add("a") == 2  # the sync client too
        sync.close()
    finally:
        d.kill()


@pytest.mark.parametrize("flags", [(), ("--own-kv",)], ids=["default", "own-kv"])
def test_serve_owns_the_key_value_stores_it_serves_until_it_stops(
    tmp_path: Path, flags: tuple[str, ...]
) -> None:
    """``logspool serve`` (``--own-kv`` says the default): the daemon holds the writer lock of
    every key-value store it serves (an embedded ``kv.open`` in another process waits, then
    gives up); after SIGTERM the store opens and holds every acknowledged write."""
    d = Daemon(tmp_path / "data", *flags).start()
    try:
        with client.connect(d.address, timeout=10) as c:
            store = c.kv("owned")
            for i in range(50):
                store.set(f"k{i}", i)
        with pytest.raises(LockedError):
            kv.open(d.data / "kv" / "owned", lock_timeout_s=0.5)
        assert d.signal(signal.SIGTERM) == 0
    finally:
        d.kill()
    with kv.open(d.data / "kv" / "owned") as opened:
        assert dict(opened.items()) == {f"k{i}": i for i in range(50)}


@pytest.mark.parametrize("flag", ["--shared-kv", "--resp-shared-kv"])
def test_serve_shared_kv_shares_the_key_value_stores_with_embedded_processes(
    tmp_path: Path, flag: str
) -> None:
    """``logspool serve --shared-kv`` (or its older spelling): every key-value store served is
    shared: an embedded ``kv.open`` in another process reads and writes it while the daemon
    serves it, and each sees the other's writes."""
    d = Daemon(tmp_path / "data", flag, resp=True).start()
    try:
        with client.connect(d.address, timeout=10) as c:
            store = c.kv("shared")
            store.set("from-daemon", 1)
            with kv.open(d.data / "kv" / "shared", lock_timeout_s=30) as embedded:
                assert embedded.get("from-daemon") == 1
                embedded.set("from-embedded", 2)
            assert store.get("from-embedded") == 2
        with kv.open(d.data / "kv" / "default", lock_timeout_s=30) as embedded:  # (the RESP door's)
            embedded.set("beside", b"x")
    finally:
        d.kill()


def _shares(d: Daemon, name: str) -> bool:
    """Whether an embedded ``kv.open`` of the store ``name`` that ``d`` serves gets it (shared)
    or gives up (owned: LockedError)."""
    with client.connect(d.address, timeout=10) as c:
        c.kv(name).set("k", 1)
    try:
        with kv.open(d.data / "kv" / name, lock_timeout_s=0.5) as embedded:
            return bool(embedded.get("k") == 1)
    except LockedError:
        return False


@pytest.mark.parametrize(
    ("config", "flags", "native", "resp"),
    [
        ("", (), False, False),
        ("own_kv = true", (), False, False),
        ("own_kv = false", (), True, False),  # (what it said before ownership was the default)
        ("shared_kv = true", (), True, True),
        ("resp_shared_kv = true", (), True, True),
        ("shared_kv = true\nresp_shared_kv = false", (), True, True),  # (a false shares nothing)
        ("own_kv = false\nshared_kv = false", (), True, False),
        ("shared_kv = true", ("--own-kv",), False, False),  # (the command line says over the file)
        ("own_kv = true", ("--shared-kv",), True, True),
        ("own_kv = 1\nshared_kv = true", ("--own-kv",), False, False),  # (the file's keys unread)
    ],
)
def test_serve_config_says_whether_the_key_value_stores_are_shared(
    tmp_path: Path, config: str, flags: tuple[str, ...], native: bool, resp: bool
) -> None:
    """The ownership settings of ``serve --config`` (``own_kv``, ``shared_kv``, the older
    ``resp_shared_kv``) say what they say for the native door's stores and the RESP door's, and
    the command line's flags say over them."""
    conf = tmp_path / "serve.toml"
    conf.write_text(config + "\n")
    d = Daemon(tmp_path / "data", "--config", str(conf), *flags, resp=True).start()
    try:
        assert (_shares(d, "probe"), _shares(d, "default")) == (native, resp)
    finally:
        d.kill()


@pytest.mark.parametrize(
    ("config", "flags", "named"),
    [
        ('shared_kv = "no"', (), ["shared_kv", "true or false", "'no'"]),
        ("own_kv = true\nshared_kv = true", (), ["own_kv = true", "shared_kv = true"]),
        ("own_kv = true\nresp_shared_kv = true", (), ["own_kv = true", "resp_shared_kv = true"]),
        ("", ("--own-kv", "--resp-shared-kv"), ["--own-kv", "--resp-shared-kv", "command line"]),
    ],
)
def test_serve_refuses_ownership_settings_that_contradict_or_are_not_booleans(
    tmp_path: Path, config: str, flags: tuple[str, ...], named: list[str]
) -> None:
    import subprocess
    import sys

    conf = tmp_path / "serve.toml"
    conf.write_text(config + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "logspool.cli", "serve", "--data", str(tmp_path / "data"),
         "--config", str(conf), *flags],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode != 0
    assert all(word in done.stderr for word in named), done.stderr


def _soft_files_limit(pid: int) -> int:
    with open(f"/proc/{pid}/limits") as f:
        for line in f:
            if line.startswith("Max open files"):
                return int(line.split()[3])
    raise AssertionError("no Max open files line")


@pytest.mark.parametrize("hard", [None, 600])
def test_serve_raises_its_open_files_limit_or_says_what_to_change(tmp_path: Path, hard: int | None) -> None:
    """Started with a soft limit of 256 open files (a hard one of 600, or the machine's), the
    daemon raises its soft limit to what its bounds need (256 connections, 100 stores: about
    1,100 files), up to the hard limit; when the hard limit is lower, it says so on stderr with
    what to change, and serves anyway."""
    import resource
    import subprocess
    import sys

    machine_hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    limit_hard = machine_hard if hard is None else hard
    if limit_hard != resource.RLIM_INFINITY and limit_hard < 1200 and hard is None:
        pytest.skip(f"this machine's hard limit on open files is {limit_hard}")

    def lower() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, limit_hard))

    d = Daemon(tmp_path / "data")  # (its address; started here, with the limit lowered)
    cmd = [sys.executable, "-m", "logspool.cli", "serve", "--data", str(d.data), "--listen", d.address,
           "--stores-max", "100"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=lower)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None:  # bounded: up to 30 s
            try:
                socket.create_connection(("127.0.0.1", d.port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        with client.connect(d.address, timeout=10) as c:
            assert c.log("events").append(b"x") == 0
        soft = _soft_files_limit(proc.pid)
        wanted = 256 + 100 * 8 + 64
        assert soft == (wanted if hard is None else 600)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    warned = "at most 600 files open" in err.decode()
    assert warned == (hard is not None), err.decode()
