"""Both doors write the same key-value store and the same log at once, each door in commit rounds
of its own: a RESP round takes the store's decision, then the stream's writer lock (SET, then
XADD); a native round takes them in its requests' order (log.APPEND, then kv.SET). Two such
rounds running at once would each hold what the other waits for; one round at a time in the
process (``_resp_commit._ROUNDS``) rules it out.

How: a daemon in a thread with both doors; RESP clients (redis-py) pipeline SET + XADD, native
connections pipeline log.APPEND + kv.SET (raw frames, so that both arrive in one read and run
in one round), for a fixed number of batches each, within a time bound; then every write
acknowledged is there.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import redis

from logspool import _wire as p
from logspool import client
from logspool.server import RespOptions
from tests.server.conftest import Running
from tests.server.test_native import connect_raw, read_frames, request

BATCHES = 150


def _four_of_each(
    resp_writer: Callable[[int], None], native_writer: Callable[[int], None], stuck: str
) -> None:
    """Four threads of each writer, at once (each given its number); fails if one is still
    running after 120 s (``stuck``) or raised."""
    failures: list[BaseException] = []

    def run(writer: Callable[[int], None], i: int) -> None:
        try:
            writer(i)
        except BaseException as err:  # (reported below)
            failures.append(err)

    threads = [
        threading.Thread(target=run, args=(w, i)) for w in (resp_writer, native_writer) for i in range(4)
    ]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 120
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), stuck
    assert not failures, failures


def test_rounds_of_both_doors_writing_the_same_store_and_log_never_wait_on_each_other(tmp_path: Path) -> None:
    running = Running(tmp_path / "data", resp=RespOptions(port=0))
    try:
        port = running.server.resp.options.port  # type: ignore[union-attr]

        def resp_writer(i: int) -> None:
            r = redis.Redis(port=port, socket_timeout=60)
            for n in range(BATCHES):
                pipe = r.pipeline(transaction=False)  # (one write: one batch, one round)
                pipe.set(f"r{i}", n)
                pipe.xadd("both", {"payload": b"r%d-%d" % (i, n)})
                pipe.execute()
            r.close()

        def native_writer(i: int) -> None:
            sock = connect_raw(running.address)
            for n in range(BATCHES):
                sock.sendall(
                    request(p.LOG_APPEND, 2 * n, name="both", records=[b"n%d-%d" % (i, n)])
                    + request(p.KV_SET, 2 * n + 1, name="default", key=f"n{i}", value=n)
                )
                replies = read_frames(sock, 2, deadline_s=60)
                assert not any(f.flags & p.FLAG_ERROR for f in replies), [f.body for f in replies]
            sock.close()

        _four_of_each(resp_writer, native_writer, "a writer is stuck: the rounds wait on each other")
        r = redis.Redis(port=port)
        assert r.xlen("both") == 8 * BATCHES
        assert [r.get(f"r{i}") for i in range(4)] == [str(BATCHES - 1).encode()] * 4
        r.close()
        with client.connect(running.address) as c:
            assert [c.kv("default").get(f"n{i}") for i in range(4)] == [BATCHES - 1] * 4
    finally:
        running.stop()


def test_each_doors_waits_wake_on_the_other_doors_writes(tmp_path: Path) -> None:
    """A RESP XREAD BLOCK answers a native log.APPEND, and a native LISTEN a RESP XADD: both
    doors wait on the daemon's one ``Tails``, which each door's commit rounds wake at once (two
    of them, one a door, heard each other's appends only through an inotify event)."""
    running = Running(tmp_path / "data", resp=RespOptions(port=0))
    try:
        server = running.server
        assert server.resp is not None and server.resp.tails is server.tails is not None
        port = server.resp.options.port
        with client.connect(running.address) as c:
            c.log("shared").append(b"first")  # (the log exists: its waits have a watch)
            got: list[object] = []

            def blocked_read() -> None:
                r = redis.Redis(port=port, socket_timeout=60)
                got.append(r.xread({"shared": "$"}, block=0, count=1))
                r.close()

            reader = threading.Thread(target=blocked_read)
            reader.start()
            deadline = time.monotonic() + 60
            while not server.tails._waiters.get("logs/shared") and time.monotonic() < deadline:
                time.sleep(0.01)  # (until the XREAD waits: an append before it would be missed by "$")
            assert server.tails._waiters.get("logs/shared"), "the XREAD never waited"
            c.log("shared").append(b"from the native door")
            reader.join(60)
            assert not reader.is_alive()
            [[stream, [(_, fields)]]] = got[0]  # type: ignore[misc]
            assert stream == b"shared" and fields == {b"payload": b"from the native door"}

            events = c.subscribe("shared", start="latest")
            r = redis.Redis(port=port)
            for _ in range(600):  # bounded: until the LISTEN is past its first look
                if server.tails._waiters.get("logs/shared"):
                    break
                time.sleep(0.05)
            r.xadd("shared", {"payload": b"from the RESP door"})
            event = events.next(timeout=60)
            assert event is not None
            assert [rec[2] for rec in event["records"]] == [b"from the RESP door"]
            r.close()
    finally:
        running.stop()


def test_plain_sets_of_both_doors_on_one_store_are_written_alone_side_by_side(tmp_path: Path) -> None:
    """Both doors' rounds of plain SETs of the same store, at once, each written alone
    (``RespFront.plain_round``, ``NativeFront.plain_round``): one round at a time in the
    process, the store's mutex and its writer lock between them. Every acknowledged value is
    the key's last, before and after a restart, and the op log verifies."""
    import logspool

    running = Running(tmp_path / "data", resp=RespOptions(port=0))
    try:
        port = running.server.resp.options.port  # type: ignore[union-attr]
        with client.connect(running.address) as c:
            c.kv("default").set("warm", 0)  # (the store open for the native door's fast path)
        resp_before = redis.Redis(port=port).info("stats")["logspool_commit_rounds_alone"]
        native_before = running.server.commit_counters()["rounds_alone"]

        def resp_writer(i: int) -> None:
            r = redis.Redis(port=port, socket_timeout=60)
            for n in range(BATCHES):
                assert r.set(f"r{i}:{n % 10}", n)
            r.close()

        def native_writer(i: int) -> None:
            sock = connect_raw(running.address)
            for n in range(BATCHES):
                sock.sendall(request(p.KV_SET, n, name="default", key=f"n{i}:{n % 10}", value=b"%d" % n))
                replies = read_frames(sock, 1, deadline_s=60)
                assert not any(f.flags & p.FLAG_ERROR for f in replies), [f.body for f in replies]
            sock.close()

        _four_of_each(resp_writer, native_writer, "a writer is stuck")
        r = redis.Redis(port=port)
        assert r.info("stats")["logspool_commit_rounds_alone"] > resp_before
        assert running.server.commit_counters()["rounds_alone"] > native_before
        expected = {
            f"{d}{i}:{k}": b"%d" % (BATCHES - 10 + k) for d in "rn" for i in range(4) for k in range(10)
        }
        assert dict(zip(expected, r.mget(list(expected)), strict=True)) == expected
        r.close()
    finally:
        running.stop()
    running = Running(tmp_path / "data", resp=RespOptions(port=0))
    try:
        r = redis.Redis(port=running.server.resp.options.port)  # type: ignore[union-attr]
        assert dict(zip(expected, r.mget(list(expected)), strict=True)) == expected
        r.close()
    finally:
        running.stop()
    report = logspool.verify(tmp_path / "data" / "kv" / "default" / "ops")
    assert report.ok, report
