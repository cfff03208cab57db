"""Store and forward: a local log reaches the daemon's log exactly once, with the daemon down and
restarted, killed with -9 under the forwarder, with the forwarder itself killed, and through a
daemon crash between its append and its bookkeeping (the pending entry)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import logspool
from logspool import _wire as p
from logspool import client, kv
from logspool.forward import Forwarder
from logspool.server._server import _digest, forward_into
from tests.server.conftest import Daemon, Running


def target_payloads(address: str, name: str) -> list[bytes]:
    with client.connect(address, timeout=30) as c:
        out: list[bytes] = []
        start: int | str = "earliest"
        while True:
            page, nxt = c.log(name).read_page(start, limit=5000)
            if not page:
                return out
            out += [r.payload for r in page]
            start = nxt


def wait_for(predicate: object, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError("timed out")


def forwarder_process(source: Path, target: str) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable,
        "-m",
        "logspool.cli",
        "forward",
        "--from",
        str(source),
        "--to",
        target,
        "--batch",
        "50",
    ]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def test_records_wait_for_a_daemon_that_is_down_and_arrive_once_through_kill_9s(tmp_path: Path) -> None:
    source = tmp_path / "local"
    with logspool.open(source) as log:
        log.append_many([b"early-%d" % i for i in range(300)])
    d = Daemon(tmp_path / "data")
    fwd = forwarder_process(source, f"{d.address}/events")
    try:
        time.sleep(1.0)  # the daemon is down: the forwarder retries, the records wait locally
        assert fwd.poll() is None
        d.start()
        wait_for(lambda: len(target_payloads(d.address, "events")) == 300)
        stop = threading.Event()

        def produce() -> None:
            with logspool.open(source) as log:
                for i in range(600):
                    log.append(b"late-%d" % i)
                    if i % 50 == 0:
                        time.sleep(0.02)
            stop.set()

        writer = threading.Thread(target=produce)
        writer.start()
        for _ in range(2):  # the daemon dies under the forwarder, twice
            time.sleep(0.3)
            d.kill()
            time.sleep(0.3)
            d.start()
        writer.join()
        expected = [b"early-%d" % i for i in range(300)] + [b"late-%d" % i for i in range(600)]
        wait_for(lambda: len(target_payloads(d.address, "events")) >= len(expected))
        time.sleep(0.5)
        assert target_payloads(d.address, "events") == expected  # every record once, in order
    finally:
        fwd.send_signal(signal.SIGTERM)
        out = fwd.communicate(timeout=30)[0].decode()
        d.kill()
    stats = json.loads(out.strip().splitlines()[-1])
    # (a batch the daemon appended before it was killed, and so before its reply, is resent: skipped)
    assert stats["position"] == 900 and stats["sent"] + stats["skipped"] == 900


def test_a_forwarder_killed_again_and_again_sends_each_record_once(tmp_path: Path, running: Running) -> None:
    source = tmp_path / "local"
    with logspool.open(source) as log:
        log.append_many([b"r-%d" % i for i in range(2000)])
    target = f"{running.address}/events"
    for _ in range(6):
        fwd = forwarder_process(source, target)
        time.sleep(0.25 + 0.1 * _)
        fwd.kill()
        fwd.wait(30)
    fwd = forwarder_process(source, target)
    try:
        wait_for(lambda: len(target_payloads(running.address, "events")) >= 2000)
        time.sleep(0.3)
        assert target_payloads(running.address, "events") == [b"r-%d" % i for i in range(2000)]
    finally:
        fwd.kill()
        fwd.wait(30)


def test_a_local_append_wakes_the_forwarder_at_once(tmp_path: Path, running: Running) -> None:
    source = tmp_path / "local"
    logspool.open(source).close()
    fwd = Forwarder(source, running.address, "events")
    thread = threading.Thread(target=fwd.run)
    thread.start()
    try:
        time.sleep(0.3)
        with logspool.open(source) as log:
            started = time.monotonic()
            log.append(b"now")
        wait_for(lambda: target_payloads(running.address, "events") == [b"now"], timeout=10)
        assert time.monotonic() - started < 1.0
    finally:
        fwd.stop()
        thread.join(10)
        fwd.close()


def test_a_crash_between_the_append_and_its_bookkeeping_neither_loses_nor_doubles(tmp_path: Path) -> None:
    log = logspool.open(tmp_path / "log")
    table = kv.open(tmp_path / "table")
    lock = threading.Lock()
    batch = [b"a", b"b", b"c"]
    assert forward_into(log, table, lock, "p", 0, batch) == {"next": 3, "gap": 0, "appended": 3}
    assert forward_into(log, table, lock, "p", 0, batch)["appended"] == 0  # a resend: dropped
    # the daemon died after appending d, e (durably) but before recording them as done
    log.append_many([b"d", b"e"])
    table.set("p", json.dumps({"done": 3, "pending": [3, 2, 3, _digest([b"d", b"e"])]}))
    assert forward_into(log, table, lock, "p", 3, [b"d", b"e", b"f"]) == {"next": 6, "gap": 0, "appended": 1}
    # ... or died before its append landed (another writer's record is where it would have been)
    log.append(b"someone else")
    table.set("p", json.dumps({"done": 6, "pending": [6, 1, 7, _digest([b"g"])]}))
    assert forward_into(log, table, lock, "p", 6, [b"g"])["appended"] == 1
    assert [r.payload for r in log.read()] == [b"a", b"b", b"c", b"d", b"e", b"f", b"someone else", b"g"]
    # a source that lost records to its retention: the gap is reported, the rest appended
    assert forward_into(log, table, lock, "p", 10, [b"k"]) == {"next": 11, "gap": 3, "appended": 1}
    log.close()
    table.close()
    assert os.path.isdir(tmp_path / "table")


def test_a_forgotten_producer_is_gone_from_the_daemon_and_starts_again_from_nothing(tmp_path: Path) -> None:
    """log.FORGET removes what the daemon keeps for the producers named (their entry in
    DATA/forward/NAME, durably: a daemon restarted after it does not know them), counts only
    those it knew, leaves the others, and is refused with a bound or a bad name; a forgotten
    producer that sends again is appended again, as the protocol says."""
    d = Daemon(tmp_path / "data").start()
    try:
        with client.connect(d.address, timeout=30) as c:
            log = c.log("sink")
            for producer in ("a", "b"):
                reply = c._request(p.LOG_FORWARD, {"name": "sink", "producer": producer, "first": 0,
                                                   "records": [b"x1", b"x2"]}, lambda b: b)  # fmt: skip
                assert reply["appended"] == 2
            assert log.forget_producers(["a", "nobody"]) == 1
            with pytest.raises(ValueError, match="producers"):
                log.forget_producers([""])
            with pytest.raises(ValueError, match="at most"):
                log.forget_producers(["p"] * 10_001)
    finally:
        d.signal(signal.SIGTERM)
    with kv.open(tmp_path / "data" / "forward" / "sink") as table:
        assert sorted(table) == ["b"]  # "a" forgotten durably, "b" kept
    d = Daemon(tmp_path / "data").start()
    try:
        with client.connect(d.address, timeout=30) as c:
            again = {"name": "sink", "first": 0, "records": [b"x1", b"x2"]}
            assert c._request(p.LOG_FORWARD, {**again, "producer": "a"}, lambda b: b)["appended"] == 2
            assert c._request(p.LOG_FORWARD, {**again, "producer": "b"}, lambda b: b)["appended"] == 0
        assert len(target_payloads(d.address, "sink")) == 6
    finally:
        d.kill()
