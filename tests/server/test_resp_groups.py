"""Redis Streams consumer groups on logspool logs (docs/RESP.md, "Consumer groups"), driven by the
real Redis clients (redis-py 8 and redis-cli) against a real ``logspool serve --resp`` process
on 127.0.0.1. It proves that a group hands each entry to one consumer, keeps what is delivered
and not acknowledged in a pending entries list that XPENDING, XCLAIM and XAUTOCLAIM see and
change, that a kill -9 and restart of the daemon keeps the group's position and its pending
entries, that the group is the log's durable subscriber at its lowest unacknowledged entry (so
retention ``consumed`` waits for it), that XTRIM and XADD's MAXLEN/MINID with ``~`` remove whole
segments through retention while exact trims are refused, that XADD takes the explicit ids it
can honour and refuses the others with Redis's errors, that a blocked XREADGROUP holds no thread
and wakes on an append by another process, and that bad names and ids are errors on a
connection that stays, and that replies and the files held open stay within their bounds
(large entries, a full XINFO STREAM FULL, groups on many streams). Last, in-process through the
I/O seam (tests/crash/faultfs.py), a power cut at each write of a run of group changes: the
group is as the last change that returned left it (or the one under way), and its checkpoint is
never above what it still needs; nor is a group ever durable past its log's end (a '>' read of
an XADD not yet fsynced), nor, without "always", a checkpoint before the op it rests on. Waits
are bounded polls on a condition, never sleeps as proof."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

import logspool
from logspool import Durability
from logspool._fs import REAL
from logspool._subscribers import Checkpoints
from logspool.server._resp_group_commands import _position
from logspool.server._resp_groups import READERS_KEPT_MAX, Groups, GroupStore
from logspool.server._server import Stores
from tests.crash.faultfs import FaultFS, PowerLoss, materialize
from tests.server.conftest import Daemon

pytestmark = pytest.mark.skipif(shutil.which("redis-cli") is None, reason="redis-tools is not installed")


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    # 4 pool threads: more blocked XREADGROUPs than threads must still leave the daemon serving
    d = Daemon(tmp_path_factory.mktemp("groups") / "data", "--threads", "4", resp=True).start()
    yield d
    d.kill()


def client(port: int | None, **options: object) -> redis.Redis:
    """One connection (so that its id shows it stayed open), never resending a command."""
    return redis.Redis(
        port=port, socket_timeout=30, single_connection_client=True, retry=Retry(NoBackoff(), 0), **options
    )  # type: ignore[arg-type]


@pytest.fixture
def r(daemon: Daemon) -> Iterator[redis.Redis]:
    c = client(daemon.resp_port)
    yield c
    c.close()


def wait_for(condition: Callable[[], object], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def ids_of(reply: list[list[object]]) -> list[bytes]:
    """The entry ids of a one-stream XREADGROUP reply."""
    return [eid for eid, _ in reply[0][1]] if reply else []  # type: ignore[misc,union-attr]


def lsn(eid: bytes) -> int:
    return int(eid.split(b"-")[1])


def raw_command(port: int | None, *args: bytes) -> bytes:
    """The reply's bytes as the daemon sent them (to see a nil that redis-py reads as {})."""
    with socket.create_connection(("127.0.0.1", port or 0), timeout=10) as sock:
        sock.sendall(b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args))
        data = b""
        for _ in range(100):  # bounded: the reply is small; it ends with the last entry's nil
            data += sock.recv(65536)
            if data.endswith(b"*-1\r\n") or data.startswith(b"-"):
                break
        return data


def cli(port: int | None, *args: str) -> str:
    out = subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True, timeout=30)
    return out.stdout.decode()


# --- delivery, acknowledgement, the pending entries list ---------------------------------------------
def test_a_group_hands_each_entry_to_one_consumer(r: redis.Redis) -> None:
    assert r.xgroup_create("orders", "billing", id="0", mkstream=True)
    ids = [r.xadd("orders", {"payload": f"order {i}"}) for i in range(6)]
    alice = r.xreadgroup("billing", "alice", {"orders": ">"}, count=2)
    bob = r.xreadgroup("billing", "bob", {"orders": ">"}, count=2)
    assert ids_of(alice) == ids[:2] and ids_of(bob) == ids[2:4]
    assert alice[0][1][0][1] == {b"payload": b"order 0"}
    assert r.xpending("orders", "billing") == {
        "pending": 4, "min": ids[0], "max": ids[3],
        "consumers": [{"name": b"alice", "pending": 2}, {"name": b"bob", "pending": 2}],
    }  # fmt: skip
    # XACK: each pending id once; an id twice, or one not pending, counts nothing
    assert r.xack("orders", "billing", ids[0], ids[0], "1-999") == 1
    rows = r.xpending_range("orders", "billing", "-", "+", 10)
    assert [row["message_id"] for row in rows] == ids[1:4]
    assert [row["consumer"] for row in rows] == [b"alice", b"bob", b"bob"]
    assert [row["times_delivered"] for row in rows] == [1, 1, 1]
    # a consumer's own history (an id instead of '>'): what it holds, counted as delivered again
    assert ids_of(r.xreadgroup("billing", "bob", {"orders": "0"})) == ids[2:4]
    bob_rows = r.xpending_range("orders", "billing", "-", "+", 10, consumername="bob")
    assert [row["times_delivered"] for row in bob_rows] == [2, 2]
    assert ids_of(r.xreadgroup("billing", "bob", {"orders": ids[2]})) == ids[3:4]  # after that id
    # the rest goes to whoever asks next; then nothing is left
    assert ids_of(r.xreadgroup("billing", "alice", {"orders": ">"})) == ids[4:]
    assert r.xreadgroup("billing", "alice", {"orders": ">"}) == []
    # another group reads the same entries on its own
    assert r.xgroup_create("orders", "audit", id="0")
    assert ids_of(r.xreadgroup("audit", "x", {"orders": ">"})) == ids
    groups = {g["name"]: g for g in r.xinfo_groups("orders")}
    assert groups[b"billing"]["pending"] == 5 and groups[b"billing"]["last-delivered-id"] == ids[-1]
    assert groups[b"billing"]["lag"] == 0 and groups[b"billing"]["entries-read"] == lsn(ids[-1]) + 1
    consumers = {c["name"]: c for c in r.xinfo_consumers("orders", "billing")}
    assert consumers[b"alice"]["pending"] == 3 and consumers[b"bob"]["pending"] == 2
    full = r.xinfo_stream("orders", full=True)
    billing = next(g for g in full["groups"] if g["name"] == b"billing")
    assert full["length"] == 6 and billing["pel-count"] == 5 and len(billing["consumers"]) == 2
    assert [p[0] for p in billing["pending"]] == ids[1:]
    # NOACK: delivered, not pending
    r.xadd("orders", {"payload": "no ack"})
    assert len(ids_of(r.xreadgroup("billing", "carol", {"orders": ">"}, noack=True))) == 1
    assert r.xpending("orders", "billing")["pending"] == 5


def test_concurrent_consumers_never_get_the_same_entry(daemon: Daemon) -> None:
    setup = client(daemon.resp_port)
    setup.xgroup_create("crowd", "g", id="$", mkstream=True)
    ids = {setup.xadd("crowd", {"payload": str(i)}) for i in range(200)}
    got: dict[str, list[bytes]] = {}

    def consume(name: str) -> None:
        c = client(daemon.resp_port)
        mine = got.setdefault(name, [])
        for _ in range(200):  # bounded: stops at the first empty read
            reply = c.xreadgroup("g", name, {"crowd": ">"}, count=7)
            if not reply:
                break
            mine += ids_of(reply)
        c.close()

    threads = [threading.Thread(target=consume, args=(f"c{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    delivered = [eid for mine in got.values() for eid in mine]
    assert sorted(delivered) == sorted(ids)  # every entry once, none twice
    assert setup.xpending("crowd", "g")["pending"] == 200
    setup.close()


def test_claiming_entries_left_idle(r: redis.Redis) -> None:
    r.xgroup_create("work", "g", id="0", mkstream=True)
    ids = [r.xadd("work", {"payload": f"task {i}"}) for i in range(3)]
    assert ids_of(r.xreadgroup("g", "bob", {"work": ">"})) == ids
    # just delivered: a claim that asks for a minute of idleness takes nothing
    assert r.xclaim("work", "g", "alice", 60_000, [ids[0]]) == []
    # once idle for 50 ms (polled: XPENDING's IDLE filter), alice can take it over
    wait_for(lambda: len(r.xpending_range("work", "g", "-", "+", 10, idle=50)) == 3)
    assert r.xclaim("work", "g", "alice", 50, [ids[0]]) == [(ids[0], {b"payload": b"task 0"})]
    [row] = r.xpending_range("work", "g", ids[0], ids[0], 1)
    assert row["consumer"] == b"alice" and row["times_delivered"] == 2
    assert row["time_since_delivered"] < 50  # the claim is a new delivery
    # XAUTOCLAIM: the idle ones from a start id, with a cursor
    nxt, claimed, deleted = r.xautoclaim("work", "g", "carol", 50, "0-0", count=1)
    assert nxt == ids[2] and [eid for eid, _ in claimed] == [ids[1]] and deleted == []
    nxt, claimed, deleted = r.xautoclaim("work", "g", "carol", 50, nxt)
    assert nxt == b"0-0" and [eid for eid, _ in claimed] == [ids[2]] and deleted == []
    # a COUNT past logspool's bound claims at most the bound (a cursor says where to go on)
    assert r.xautoclaim("work", "g", "carol", 60_000, "0-0", count=100_000, justid=True) == []
    # JUSTID: ids only, and no delivery counted; RETRYCOUNT sets the count; FORCE makes an entry pending
    assert r.xclaim("work", "g", "dave", 0, [ids[1]], justid=True) == [ids[1]]
    assert r.xpending_range("work", "g", ids[1], ids[1], 1)[0]["times_delivered"] == 2
    r.xclaim("work", "g", "dave", 0, [ids[1]], retrycount=7, justid=True)
    assert r.xpending_range("work", "g", ids[1], ids[1], 1)[0]["times_delivered"] == 7
    assert r.xack("work", "g", ids[0]) == 1
    assert r.xclaim("work", "g", "erin", 0, [ids[0]], justid=True) == []  # acked: not pending
    assert r.xclaim("work", "g", "erin", 0, [ids[0]], justid=True, force=True) == [ids[0]]
    owners = {row["message_id"]: row["consumer"] for row in r.xpending_range("work", "g", "-", "+", 10)}
    assert owners == {ids[0]: b"erin", ids[1]: b"dave", ids[2]: b"carol"}
    # DELCONSUMER drops a consumer's pending entries and says how many
    assert r.xgroup_delconsumer("work", "g", "dave") == 1
    assert r.xpending("work", "g")["pending"] == 2


# --- a restart ----------------------------------------------------------------------------------
def test_a_kill_and_restart_keeps_positions_and_pending_entries(tmp_path: Path) -> None:
    d = Daemon(tmp_path / "data", resp=True).start()
    try:
        r = client(d.resp_port)
        r.xgroup_create("events", "g", id="0", mkstream=True)
        ids = [r.xadd("events", {"payload": f"e{i}"}) for i in range(6)]
        assert ids_of(r.xreadgroup("g", "c1", {"events": ">"}, count=2)) == ids[:2]
        assert ids_of(r.xreadgroup("g", "c2", {"events": ">"}, count=2)) == ids[2:4]
        r.xreadgroup("g", "c2", {"events": "0"})  # delivered twice
        assert r.xack("events", "g", ids[0]) == 1
        before = r.xpending_range("events", "g", "-", "+", 10)
        r.close()
        d.kill()  # kill -9: what the replies promised must be on disk already
        d.start()
        r = client(d.resp_port)
        after = r.xpending_range("events", "g", "-", "+", 10)
        assert [(x["message_id"], x["consumer"], x["times_delivered"]) for x in after] == [
            (x["message_id"], x["consumer"], x["times_delivered"]) for x in before
        ]
        assert [x["message_id"] for x in after] == ids[1:4]
        # the group's position survived: '>' goes on after the last entry delivered
        assert ids_of(r.xreadgroup("g", "c3", {"events": ">"})) == ids[4:]
        [group] = r.xinfo_groups("events")
        assert group["last-delivered-id"] == ids[-1] and group["pending"] == 5
        # the group is the log's durable subscriber, at its lowest unacknowledged entry
        with logspool.Log(d.data / "logs" / "events") as log:
            assert {s.name: s.lsn for s in log.subscribers()} == {"g": lsn(ids[1])}
            assert r.xack("events", "g", *ids[1:]) == 5
            assert {s.name: s.lsn for s in log.subscribers()} == {"g": lsn(ids[-1]) + 1}
            # SETID back: the checkpoint goes down with it, before the reply
            assert r.xgroup_setid("events", "g", "0")
            assert {s.name: s.lsn for s in log.subscribers()} == {"g": 0}
            assert ids_of(r.xreadgroup("g", "c1", {"events": ">"}, count=1)) == ids[:1]
        r.close()
    finally:
        d.kill()


def test_a_kill_under_concurrent_consumers_loses_no_entry_and_delivers_none_twice(tmp_path: Path) -> None:
    """Four consumers read with '>' and ack every other entry, at once, until kill -9. After the
    restart: no entry whose XACK was answered is pending; every entry delivered and not acked
    is pending; and reading on with '>' gives exactly the entries never delivered: none is lost,
    none comes twice."""
    d = Daemon(tmp_path / "data", resp=True).start()
    try:
        setup = client(d.resp_port)
        setup.xgroup_create("k", "g", id="0", mkstream=True)
        pipe = setup.pipeline(transaction=False)
        for i in range(3_000):
            pipe.xadd("k", {"payload": b"%d" % i})
        every = set(pipe.execute())
        setup.close()
        delivered: list[bytes] = []  # each '>' reply received
        acked: set[bytes] = set()  # each XACK answered
        sent: set[bytes] = set()  # each XACK sent (answered or not)
        lock = threading.Lock()

        def consume(name: str) -> None:
            c = client(d.resp_port)
            with contextlib.suppress(redis.ConnectionError):
                for _ in range(10_000):  # bounded: the kill ends it long before
                    got = ids_of(c.xreadgroup("g", name, {"k": ">"}, count=5))
                    if not got:
                        break
                    with lock:
                        delivered.extend(got)
                        sent.update(got[::2])
                    c.xack("k", "g", *got[::2])
                    with lock:
                        acked.update(got[::2])
            c.close()

        threads = [threading.Thread(target=consume, args=(f"c{i}",)) for i in range(4)]
        for t in threads:
            t.start()
        wait_for(lambda: len(delivered) >= 600)
        d.kill()
        for t in threads:
            t.join(30)
        assert len(delivered) == len(set(delivered)) < len(every)  # (it was cut mid-way)
        d.start()
        r = client(d.resp_port)
        pending = {row["message_id"] for row in r.xpending_range("k", "g", "-", "+", 10_000)}
        assert not pending & acked
        assert set(delivered) - sent <= pending
        rest = ids_of(r.xreadgroup("g", "after", {"k": ">"}, count=10_000))
        assert not set(rest) & (set(delivered) | pending)  # none twice
        assert set(rest) | set(delivered) | pending == every  # none lost
        r.close()
    finally:
        d.kill()


def test_retention_consumed_waits_for_the_group(r: redis.Redis, daemon: Daemon) -> None:
    path = daemon.data / "logs" / "metered"
    with logspool.open(path, segment_size_max=4096) as log:  # small segments, so several of them
        log.set_retention(logspool.Retention(consumed=True))
    r.xgroup_create("metered", "g", id="0")
    ids = [r.xadd("metered", {"payload": b"x" * 100}) for _ in range(200)]
    assert len(ids_of(r.xreadgroup("g", "c", {"metered": ">"}))) == 200
    with logspool.Log(path) as log:
        assert len(log.info().segments) > 3
        assert log.enforce_retention().removed == ()  # all delivered, none acknowledged
        assert r.xack("metered", "g", *ids[:100]) == 100
        report = log.enforce_retention()
        first = log.info().first_lsn
        assert report.removed and 0 < first <= 100  # whole segments below the first unacked
    assert r.xrange("metered", count=1)[0][0] == ids[first]


# --- trimming -------------------------------------------------------------------------------------
def test_trimming_removes_whole_segments_and_exact_trims_are_refused(r: redis.Redis, daemon: Daemon) -> None:
    path = daemon.data / "logs" / "trimmed"
    logspool.open(path, segment_size_max=4096).close()
    r.xgroup_create("trimmed", "g", id="0")
    ids = [r.xadd("trimmed", {"payload": b"y" * 100}) for _ in range(200)]
    assert ids_of(r.xreadgroup("g", "c", {"trimmed": ">"}, count=3)) == ids[:3]  # pending, then trimmed
    for exact in (lambda: r.xtrim("trimmed", maxlen=50, approximate=False),
                  lambda: r.xtrim("trimmed", minid=ids[10], approximate=False),
                  lambda: r.xadd("trimmed", {"payload": "z"}, maxlen=50, approximate=False)):  # fmt: skip
        with pytest.raises(redis.ResponseError, match="whole segment"):
            exact()
    assert r.xlen("trimmed") == 200  # (the refused XADD appended nothing)
    # MINID ~ (redis-py's default is '~'): the segments whose every entry is below the id go
    removed = r.xtrim("trimmed", minid=ids[100])
    first = r.xrange("trimmed", count=1)[0][0]
    assert 0 < removed == lsn(first) <= 100 and r.xlen("trimmed") == 200 - removed
    # MAXLEN ~ n: whole segments, and at least n entries stay
    removed_more = r.xtrim("trimmed", maxlen=50)
    assert removed_more > 0 and r.xlen("trimmed") == 200 - removed - removed_more >= 50
    assert r.xrange("trimmed", count=1)[0][0] == ids[removed + removed_more]
    # LIMIT bounds the entries one trim removes
    assert r.xtrim("trimmed", maxlen=0, limit=1) == 0
    # XADD MAXLEN ~ n trims after appending, at least n entries stay
    before = r.xlen("trimmed")
    r.xadd("trimmed", {"payload": "last"}, maxlen=10)
    assert 10 <= r.xlen("trimmed") <= before + 1
    with logspool.Log(path) as log:
        assert len(log.info().segments) >= 1
    # entries trimmed while pending: XREADGROUP's history shows the id with no fields, as Redis,
    # and XAUTOCLAIM lists them as deleted and drops them from the PEL
    assert ids_of(r.xreadgroup("g", "c", {"trimmed": "0"})) == ids[:3]
    nil_fields = b"*2\r\n$%d\r\n%s\r\n*-1\r\n" % (len(ids[0]), ids[0])
    assert nil_fields in raw_command(
        daemon.resp_port, b"XREADGROUP", b"GROUP", b"g", b"c", b"STREAMS", b"trimmed", b"0"
    )
    assert r.xautoclaim("trimmed", "g", "c", 0, "0-0") == [b"0-0", [], ids[:3]]
    assert r.xpending("trimmed", "g")["pending"] == 0
    with pytest.raises(redis.ResponseError, match="append-only"):
        r.xdel("trimmed", ids[-1])


# --- explicit ids -----------------------------------------------------------------------------------
def test_xadd_takes_the_ids_the_log_would_give(r: redis.Redis, daemon: Daemon) -> None:
    # a new stream's first lsn is 0: another sequence is refused before the log is created
    with pytest.raises(redis.ResponseError, match="next lsn, 0"):
        r.xadd("explicit", {"payload": "a"}, id="5-3")
    assert not (daemon.data / "logs" / "explicit").exists()
    ahead = int(time.time() * 1000) + 60_000
    assert r.xadd("explicit", {"payload": "a"}, id=f"{ahead}-0") == f"{ahead}-0".encode()
    assert r.xadd("explicit", {"payload": "b"}, id=f"{ahead}-*") == f"{ahead}-1".encode()
    assert r.xadd("explicit", {"payload": "c"}, id=f"{ahead}-2") == f"{ahead}-2".encode()
    # a producer that sends the same id again is told, as Redis tells it (idempotent producers)
    with pytest.raises(redis.ResponseError, match="equal or smaller than the target stream top item"):
        r.xadd("explicit", {"payload": "c"}, id=f"{ahead}-2")
    with pytest.raises(redis.ResponseError, match="equal or smaller"):
        r.xadd("explicit", {"payload": "d"}, id=f"{ahead - 1}-*")
    with pytest.raises(redis.ResponseError, match="next lsn, 3"):
        r.xadd("explicit", {"payload": "d"}, id=f"{ahead}-7")
    with pytest.raises(redis.ResponseError, match="greater than 0-0"):
        r.xadd("explicit", {"payload": "d"}, id="0-0")
    # no entry can be stamped before the log's newest time (a new log's: its creation, now;
    # refused before the log is made)
    with pytest.raises(redis.ResponseError, match="before this log's creation"):
        r.xadd("explicit-past", {"payload": "old"}, id="5-0")
    assert r.type("explicit-past") == b"none"
    # timestamps never decrease: the next '*' id is not below the explicit time
    later = r.xadd("explicit", {"payload": "d"})
    assert later == f"{ahead}-3".encode()
    assert [eid for eid, _ in r.xrange("explicit", min=str(ahead))] == [
        f"{ahead}-{n}".encode() for n in (0, 1, 2, 3)
    ]
    assert r.xlen("explicit") == 4


# --- blocking -------------------------------------------------------------------------------------
def test_blocked_xreadgroups_hold_no_thread_and_wake_on_another_process_append(
    r: redis.Redis, daemon: Daemon
) -> None:
    r.xgroup_create("tail-g", "g", id="$", mkstream=True)
    waiters = 8  # twice the daemon's pool threads
    got: dict[int, list[bytes]] = {}

    def wait(i: int) -> None:
        c = client(daemon.resp_port)
        got[i] = ids_of(c.xreadgroup("g", f"w{i}", {"tail-g": ">"}, count=1, block=30_000))
        c.close()

    threads = [threading.Thread(target=wait, args=(i,)) for i in range(waiters)]
    for t in threads:
        t.start()
    # each has run once (its consumer exists) and found nothing: all are waiting now
    wait_for(lambda: len(r.xinfo_consumers("tail-g", "g")) == waiters)
    assert not got
    # with every pool thread free, the daemon still answers reads that run in the pool
    assert r.xrange("tail-g") == [] and r.xpending("tail-g", "g")["pending"] == 0
    with logspool.Log(daemon.data / "logs" / "tail-g") as log:  # another process appends
        for i in range(waiters):
            log.append(b"wake %d" % i)
    for t in threads:
        t.join(30)
    delivered = [eid for mine in got.values() for eid in mine]
    assert len(got) == waiters and sorted(delivered) == sorted(eid for eid, _ in r.xrange("tail-g"))
    assert len(set(delivered)) == waiters  # one entry each, none twice


def test_destroying_a_group_answers_its_blocked_readers(r: redis.Redis, daemon: Daemon) -> None:
    r.xgroup_create("doomed", "g", id="$", mkstream=True)
    errors: list[Exception] = []

    def wait() -> None:
        c = client(daemon.resp_port)
        try:
            c.xreadgroup("g", "w", {"doomed": ">"}, block=30_000)
        except redis.ResponseError as err:
            errors.append(err)
        c.close()

    t = threading.Thread(target=wait)
    t.start()
    wait_for(lambda: len(r.xinfo_consumers("doomed", "g")) == 1)
    assert r.xgroup_destroy("doomed", "g") == 1 and r.xgroup_destroy("doomed", "g") == 0
    t.join(30)
    assert errors and "NOGROUP" in str(errors[0])
    assert r.xinfo_groups("doomed") == []


# --- names, ids, errors -----------------------------------------------------------------------------
def test_bad_names_and_ids_are_errors_and_the_connection_stays(r: redis.Redis, daemon: Daemon) -> None:
    connection = r.client_id()
    assert r.xgroup_create("named", "ok", id="$", mkstream=True)
    r.xadd("named", {"payload": "x"})
    cases: list[tuple[Callable[[], object], str]] = [
        (lambda: r.xgroup_create("../escape", "g", mkstream=True), "log names"),
        (lambda: r.xgroup_create("a/b", "g", mkstream=True), "log names"),
        (lambda: r.xgroup_create("named", "~transient"), "durable subscriber names"),
        (lambda: r.xgroup_create("named", "n" * 1025), "durable subscriber names"),
        (lambda: r.execute_command("XGROUP", "CREATE", "named", b"\xff", "$"), "durable subscriber names"),
        (lambda: r.xgroup_create("named", "ok"), "BUSYGROUP"),
        (lambda: r.xgroup_create("nostream", "g"), "requires the key to exist"),
        (lambda: r.xgroup_create("named", "g2", id="12-x"), "Invalid stream ID"),
        (lambda: r.xgroup_create("nostream", "g", id="x", mkstream=True), "Invalid stream ID"),
        (
            lambda: r.xgroup_setid("named", "missing", "0"),
            "^NOGROUP No such consumer group 'missing' for key name 'named'$",
        ),
        (lambda: r.xreadgroup("ok", "c", {"../up": ">"}), "log names"),
        (lambda: r.xreadgroup("missing", "c", {"named": ">"}), "NOGROUP"),
        (lambda: r.xreadgroup("ok", "c", {"nostream": ">"}), "NOGROUP"),
        (lambda: r.xreadgroup("ok", "c", {"named": "$"}), "meaningless"),
        (lambda: r.xreadgroup("ok", "c", {"named": "not-an-id"}), "Invalid stream ID"),
        (lambda: r.xreadgroup("ok", "c" * 2000, {"named": ">"}), "consumer names"),
        (lambda: r.xack("named", "ok", "1-1", "nope"), "Invalid stream ID"),
        (lambda: r.xpending_range("named", "ok", "bad", "+", 10), "Invalid stream ID"),
        (lambda: r.xpending("named", "missing"), "NOGROUP"),
        (lambda: r.xclaim("named", "ok", "c", 0, ["1-x"]), "Unrecognized XCLAIM option"),
        (lambda: r.xclaim("named", "missing", "c", 0, ["1-1"]), "NOGROUP"),
        (lambda: r.xautoclaim("named", "ok", "c", 0, "x"), "Invalid stream ID"),
        (lambda: r.xinfo_groups("nostream"), "no such key"),
        (lambda: r.xinfo_consumers("named", "missing"), "NOGROUP"),
        (lambda: r.xadd("named", {"payload": "v"}, id="1-2-3"), "Invalid stream ID"),
        (lambda: r.xtrim("named", maxlen=-1), "must be >= 0"),
        (lambda: r.execute_command("XGROUP", "FROB", "named", "ok"), "XGROUP HELP"),
    ]
    for call, message in cases:
        with pytest.raises(redis.ResponseError, match=message):
            call()
    assert r.client_id() == connection and r.ping()  # one connection throughout
    # nothing was created for the bad names, nothing outside the data directory
    assert sorted(os.listdir(daemon.data / "groups")) == sorted(
        n for n in os.listdir(daemon.data / "logs") if (daemon.data / "groups" / n).exists()
    )
    assert not (daemon.data / "logs" / "nostream").exists()
    assert not (daemon.data / "groups" / "nostream").exists()
    assert not (daemon.data.parent / "escape").exists() and not (daemon.data.parent / "up").exists()
    assert [g["name"] for g in r.xinfo_groups("named")] == [b"ok"]
    # a native durable subscriber's name is not taken over by a group
    with logspool.Log(daemon.data / "logs" / "named") as log:
        log.add_subscriber("native")
    with pytest.raises(redis.ResponseError, match=r"BUSYGROUP.*durable subscriber"):
        r.xgroup_create("named", "native")


# --- other clients and protocols -----------------------------------------------------------------
def test_redis_cli_and_resp3(daemon: Daemon) -> None:
    port = daemon.resp_port
    assert cli(port, "XGROUP", "CREATE", "clis", "g", "$", "MKSTREAM") == "OK\n"
    eid = cli(port, "XADD", "clis", "*", "payload", "hi").strip()
    out = cli(port, "XREADGROUP", "GROUP", "g", "c", "COUNT", "10", "STREAMS", "clis", ">")
    assert out.split() == ["clis", eid, "payload", "hi"]
    assert cli(port, "XPENDING", "clis", "g").split() == ["1", eid, eid, "c", "1"]
    assert cli(port, "XACK", "clis", "g", eid) == "1\n"
    assert "last-delivered-id" in cli(port, "XINFO", "GROUPS", "clis")
    assert cli(port, "XGROUP", "CREATE", "clis", "~bad", "$").startswith("ERR logspool consumer group names")
    r3 = client(port, protocol=3)
    r3.xadd("clis", {"payload": "three"})
    reply = r3.xreadgroup("g", "c3", {"clis": ">"})
    [[(eid3, fields)]] = reply[b"clis"]  # (RESP3: a map of streams)
    assert fields == {b"payload": b"three"}
    assert r3.xinfo_stream("clis")["groups"] == 1 and lsn(eid3) == 1
    r3.close()


# --- bounds ---------------------------------------------------------------------------------------
def test_an_xread_over_several_streams_is_bounded_in_bytes_over_all_of_them(r: redis.Redis) -> None:
    """Three streams of two 15 MiB entries each: one XREAD of the three holds at most 32 MiB of
    payloads over all of them (one entry at least), not 32 MiB each (90 MiB in one reply, past
    the connection's 64 MiB output bound: the connection was closed); the client's next XREAD
    goes on from the ids it got."""
    blob = b"y" * (15 << 20)
    ids = {name: [r.xadd(name, {"payload": blob}) for _ in range(2)] for name in ("a", "b", "c")}
    connection = r.client_id()
    got: dict[bytes, list[bytes]] = {b"a": [], b"b": [], b"c": []}
    last = {"a": "0", "b": "0", "c": "0"}
    for _ in range(10):  # bounded: each XREAD returns at least one entry until all are read
        reply = r.xread(last, count=10)
        if not reply:
            break
        assert sum(len(f[b"payload"]) for _, entries in reply for _, f in entries) <= 45 << 20
        for name, entries in reply:
            got[name] += [eid for eid, _ in entries]
            last[name.decode()] = entries[-1][0].decode()
    assert got == {k.encode(): v for k, v in ids.items()}
    assert r.client_id() == connection  # one connection throughout


def test_group_replies_are_bounded_in_bytes(r: redis.Redis) -> None:
    """Entries of 15 MiB: a reply of XREADGROUP ('>' or history), XCLAIM, XAUTOCLAIM, XRANGE,
    XREVRANGE or XREAD holds at most 32 MiB of payloads (one entry at least), the rest left for
    the next call, so that it stays under the connection's 64 MiB output bound (past it the
    connection is closed, and entries read with '>' would stay pending for a consumer that
    never saw them)."""
    r.xgroup_create("big", "g", id="0", mkstream=True)
    blob = b"x" * (15 << 20)
    ids = [r.xadd("big", {"payload": blob}) for _ in range(5)]
    connection = r.client_id()
    assert ids_of(r.xreadgroup("g", "c", {"big": ">"}, count=10)) == ids[:2]
    assert ids_of(r.xreadgroup("g", "c", {"big": ">"}, count=10)) == ids[2:4]
    assert ids_of(r.xreadgroup("g", "c", {"big": ">"}, count=10)) == ids[4:]
    assert ids_of(r.xreadgroup("g", "c", {"big": "0"})) == ids[:2]  # its history, from the start
    assert ids_of(r.xreadgroup("g", "c", {"big": ids[1]})) == ids[2:4]  # and on from the last
    assert [eid for eid, _ in r.xclaim("big", "g", "d", 0, ids)] == ids[:2]
    assert r.xclaim("big", "g", "d", 0, ids[2:], justid=True) == ids[2:4]
    nxt, claimed, deleted = r.xautoclaim("big", "g", "e", 0, "0-0", count=10)
    assert [eid for eid, _ in claimed] == ids[:2] and nxt == ids[2] and deleted == []
    assert claimed[0][1] == {b"payload": blob}
    # the stream reads too: XRANGE, XREVRANGE (newest first), XREAD
    assert [eid for eid, _ in r.xrange("big", count=10)] == ids[:2]
    assert [eid for eid, _ in r.xrevrange("big", count=10)] == ids[:2:-1]
    assert [eid for eid, _ in r.xread({"big": "0"}, count=10)[0][1]] == ids[:2]
    assert r.client_id() == connection  # one connection throughout
    assert r.xpending("big", "g")["pending"] == 5


def test_xinfo_stream_full_lists_a_bounded_number_of_pending_entries(r: redis.Redis) -> None:
    """XINFO STREAM FULL COUNT 0 lists every PEL entry of every group and consumer in Redis:
    here at most 10,000 over the reply (100 groups of 100,000 would be 20,000,000 rows built in
    memory); the counts stay exact."""
    r.xgroup_create("full", "g1", id="0", mkstream=True)
    r.xgroup_create("full", "g2", id="0")
    pipe = r.pipeline(transaction=False)
    for i in range(6_000):
        pipe.xadd("full", {"payload": b"%d" % i})
    pipe.execute()
    for group in ("g1", "g2"):
        assert len(ids_of(r.xreadgroup(group, "c", {"full": ">"}, count=10_000))) == 6_000
    groups = r.execute_command("XINFO", "STREAM", "full", "FULL", "COUNT", "0")[b"groups"]
    rows = sum(len(g[b"pending"]) + sum(len(c[b"pending"]) for c in g[b"consumers"]) for g in groups)
    assert rows == 10_000 and [g[b"pel-count"] for g in groups] == [6_000, 6_000]
    assert len(groups[0][b"pending"]) == 6_000  # in order: the first group's first


def test_a_bound_met_on_a_later_stream_does_not_hide_what_the_first_delivered(r: redis.Redis) -> None:
    """XREADGROUP '>' on two streams, the second one's group at its bound of consumers: the
    entries of the first are pending for the consumer once read, so the reply holds them (an
    error would leave them pending for a consumer that never saw them); the next read, with
    nothing new on the first, answers the error."""
    r.xgroup_create("first", "g", id="0", mkstream=True)
    r.xgroup_create("crowded", "g", id="0", mkstream=True)
    pipe = r.pipeline(transaction=False)
    for i in range(1_000):
        pipe.xgroup_createconsumer("crowded", "g", f"c{i}")
    assert all(pipe.execute())
    eid = r.xadd("first", {"payload": "x"})
    reply = r.xreadgroup("g", "newcomer", {"first": ">", "crowded": ">"})
    assert [(name, ids_of([[name, entries]])) for name, entries in reply] == [(b"first", [eid])]
    with pytest.raises(redis.ResponseError, match="at most 1000 consumers"):
        r.xreadgroup("g", "newcomer", {"first": ">", "crowded": ">"})
    assert r.xpending("first", "g")["pending"] == 1


def test_readers_kept_for_groups_are_bounded_over_the_daemon(tmp_path: Path) -> None:
    """A '>' read keeps its group's reader open for the next one (each holds a file open). With
    a bound per stream, 1,024 streams of 100 groups would hold ~100,000 files, past the fd limit
    of the process; the bound is the daemon's: readers past it are closed, least recent first,
    and a group whose reader was closed reads on where it was."""
    data = tmp_path / "data"
    data.mkdir()
    groups = Groups(str(data), "os", Stores(str(data), "os", 10).make_dir)
    logs = [logspool.open(data / "logs" / f"s{i}", durability="os") for i in range(5)]
    try:
        for log in logs:
            log.append_many([b"a", b"b"])
        names = [f"g{j}" for j in range(64)]
        for i, log in enumerate(logs):
            store = groups.store(f"s{i}", log, create=True)
            assert store is not None
            for name in names:
                store.create(name, 0, (0, 0))
                assert len(store.deliver(log, name, f"s{i}", "c", 1, False, 1 << 20)) == 1
        assert len(groups.readers) == READERS_KEPT_MAX < 5 * 64
        # s0's readers were the first closed: its groups read on where they were
        store = groups.store("s0", logs[0], create=False)
        assert store is not None
        assert [n for n, _, _ in store.deliver(logs[0], "g0", "s0", "c", 5, False, 1 << 20)] == [1]
    finally:
        groups.close()
        for log in logs:
            log.close()
    assert len(groups.readers) == 0


# --- power loss -----------------------------------------------------------------------------------
def _summary(store: GroupStore) -> tuple[int, int, list[tuple[int, str, int]]] | None:
    """A group's position and PEL, without times (they differ from run to run)."""
    g = store.get("g")
    if g is None:
        return None
    return g.next_lsn, g.last[1], [(n, g.pel[n].consumer, g.pel[n].count) for n in g.order]


def _group_workload(data: Path, fs: FaultFS | None, done: list[object]) -> None:
    """Group changes on the stream ``s`` (80 records, segments of 4 KiB), each appended to
    ``done`` once it returned: what a client would have had a reply for."""
    log = logspool.open(data / "logs" / "s", fs=fs, segment_size_max=4096)
    store = GroupStore(str(data / "groups" / "s"), log, "always", fs=fs)
    first = [(rec.timestamp // 1_000_000, rec.lsn) for rec in log.read()]

    def ids(lo: int, hi: int) -> list[tuple[int, int]]:
        return first[lo:hi]

    steps: list[Callable[[], object]] = [
        lambda: store.create("g", 0, (0, 0)),
        lambda: store.deliver(log, "g", "s", "c1", 20, False, 1 << 20),  # 0-19
        lambda: store.ack("g", ids(0, 10)),
        lambda: store.deliver(log, "g", "s", "c2", 20, False, 1 << 20),  # 20-39
        lambda: store.ack("g", ids(10, 35)),  # the floor passes a segment's start
        lambda: store.set_id("g", "s", 5, first[4]),  # back: the floor goes down to 5
        lambda: store.claim(log, "g", "s", "c3", 0, ids(2, 3), delivered_ms=None, retry=None,
                            force=True, justid=False, last=None),  # an acked entry: down to 2
        lambda: store.ack("g", ids(2, 3) + ids(35, 40)),  # up to 5
        lambda: store.deliver(log, "g", "s", "c1", 50, False, 1 << 20),  # 5-54
        lambda: store.remove_consumer("g", "s", "c2"),
    ]  # fmt: skip
    try:
        done.append(_summary(store))
        for step in steps:
            step()
            done.append(_summary(store))
    finally:
        store.close()
        log.close()


def test_a_power_loss_at_any_write_keeps_replies_and_the_checkpoint_below_the_group(tmp_path: Path) -> None:
    """The workload is cut at each of its mutating I/O operations in turn; for the disk states a
    power failure may leave there (the strict one, and one with random unsynced leftovers): the
    group is as after the last change that returned, or the one under way, and the checkpoint
    retention would use (the lower slot) is never above the group's floor."""
    base = tmp_path / "base"
    with logspool.open(base / "logs" / "s", segment_size_max=4096) as log:
        for n in range(80):  # (one by one: a batch goes into one segment)
            log.append(b"r%03d" % n + b"." * 100)
        assert len(log.info().segments) >= 3
    (base / "groups").mkdir()  # (as ``Groups.store`` makes it, fsynced, before a store in it)
    model: list[object] = []
    _group_workload(_copy(base, tmp_path / "model"), None, model)
    rng = random.Random(34)
    crashes = 0
    for crash_at in range(1, 2_000):  # bounded: the workload has a few hundred operations
        data = _copy(base, tmp_path / "run")
        fs = FaultFS(str(data), crash_at=crash_at)
        done: list[object] = []
        with contextlib.suppress(PowerLoss):
            _group_workload(data, fs, done)
        fs.release()
        if not fs.crashed:
            assert done == model
            break
        crashes += 1
        for state in fs.crash_states(rng, 2):
            after = tmp_path / "after"
            materialize(state, str(after))
            if not (after / "logs" / "s").is_dir():
                continue
            with logspool.open(after / "logs" / "s", segment_size_max=4096) as log:
                with Checkpoints(str(after / "logs" / "s"), REAL, log.record_size_max) as cps:
                    floors = {cp.name: cp.lsn for cp in cps.all(floor=True)}
                store = GroupStore(str(after / "groups" / "s"), log, "always")
                try:
                    got = _summary(store)
                    g = store.get("g")
                finally:
                    store.close()
            k = len(done)
            assert got in model[max(k - 1, 0) : k + 1], (crash_at, got, k)
            if g is not None and "g" in floors:
                assert floors["g"] <= g.floor(), (crash_at, floors, g.floor())
    assert crashes > 50


def _stream_through_the_seam(
    tmp_path: Path, records: list[bytes], durability: Durability, **options: Any
) -> tuple[FaultFS, logspool.Log, GroupStore]:
    """The stream ``s`` of ``records`` (written and closed first), opened again with its groups
    through the I/O seam (``FaultFS``), which then knows what is durable."""
    data = tmp_path / "data"
    with logspool.open(data / "logs" / "s", **options) as log:
        for payload in records:  # (one by one: a batch goes into one segment)
            log.append(payload)
    (data / "groups").mkdir()
    fs = FaultFS(str(data))
    log = logspool.open(data / "logs" / "s", fs=fs, durability=durability, **options)
    return fs, log, GroupStore(str(data / "groups" / "s"), log, durability, fs=fs)


def test_a_power_loss_never_leaves_a_group_ahead_of_its_log(tmp_path: Path) -> None:
    """An XADD's record is in the page cache before its round's fsync, and a '>' read or an
    XGROUP CREATE '$' meanwhile sees it. The group's op must not be durable before the record:
    a power cut would leave the group past the log's end, and the entries appended after the
    restart under the lost lsns would never reach it. In the strict disk state (only what was
    fsynced), every position a group reached is within the log."""
    fs, log, store = _stream_through_the_seam(tmp_path, [b"e%d" % n for n in range(5)], "always")
    try:
        store.create("g", 0, (0, 0))
        assert len(store.deliver(log, "g", "s", "c", 10, False, 1 << 20)) == 5
        with log.exclusive(sync=False) as tail:  # as XADD appends, its fsync still to come
            tail.append_many([b"late"])
        assert [lsn for lsn, _, _ in store.deliver(log, "g", "s", "c", 10, False, 1 << 20)] == [5]
        assert store.create("h", *_position(log, None))  # XGROUP CREATE h '$'
        state = next(fs.crash_states(random.Random(34), 1))
    finally:
        store.close()
        log.close()
        fs.release()
    after = tmp_path / "after"
    materialize(state, str(after))
    with logspool.open(after / "logs" / "s") as log:
        end = log.info().next_lsn
        store = GroupStore(str(after / "groups" / "s"), log, "always")
        try:
            positions = {name: g.next_lsn for name, g in store.groups()}
        finally:
            store.close()
    assert positions.keys() == {"g", "h"} and all(p <= end for p in positions.values()), (positions, end)


def test_without_always_a_checkpoint_is_never_durable_before_its_group(tmp_path: Path) -> None:
    """With ``--durability os`` (or ``interval``) a group's ops are not fsynced before the
    reply, but a checkpoint raised past a segment's start is. It must not be durable before the
    op that allows it: else a power cut leaves a checkpoint above entries still pending
    (retention ``consumed`` could remove them before the store is opened again), or a durable
    subscriber with no group, whose name XGROUP CREATE then refuses. In the strict disk state
    the checkpoint belongs to a group and is not above its floor."""
    records = [b"r%03d" % n + b"." * 100 for n in range(80)]
    fs, log, store = _stream_through_the_seam(tmp_path, records, "os", segment_size_max=4096)
    try:
        assert len(log.info().segments) >= 3
        first = [(rec.timestamp // 1_000_000, rec.lsn) for rec in log.read()]
        store.create("g", 0, (0, 0))
        store.deliver(log, "g", "s", "c", 40, False, 1 << 20)
        store.ack("g", first[:35])  # the floor passes a segment's start: the checkpoint is fsynced
        state = next(fs.crash_states(random.Random(34), 1))
    finally:
        store.close()
        log.close()
        fs.release()
    after = tmp_path / "after"
    materialize(state, str(after))
    with logspool.open(after / "logs" / "s", segment_size_max=4096) as log:
        with Checkpoints(str(after / "logs" / "s"), REAL, log.record_size_max) as cps:
            floors = {cp.name: cp.lsn for cp in cps.all(floor=True)}
        store = GroupStore(str(after / "groups" / "s"), log, "os")
        try:
            g = store.get("g")
            floor = None if g is None else g.floor()
        finally:
            store.close()
    assert "g" not in floors or (floor is not None and floors["g"] <= floor), (floors, floor)


@pytest.mark.parametrize("appended_first", [False, True], ids=["store-opened-first", "appended-first"])
def test_without_always_a_group_past_its_log_after_a_power_cut_is_brought_back(
    tmp_path: Path, appended_first: bool
) -> None:
    """With ``--durability os`` (or ``interval``) a group's ops and the records it delivered
    are fsynced at different times: a power cut can keep the op that delivered records and lose
    the records. The entries appended after the restart take the lost lsns; '>' must deliver
    them (it did not: the group stayed past them), and the pending entries of lost records are
    dropped. Either order: the store opened before the first new append, or after some."""
    fs, log, store = _stream_through_the_seam(tmp_path, [b"kept%d" % n for n in range(5)], "os")
    try:
        store.create("g", 0, (0, 0))
        store.create("other", 3, (0, 2))
        for n in range(3):
            log.append(b"lost%d" % n)  # (os: never fsynced)
        assert [lsn for lsn, _, _ in store.deliver(log, "g", "s", "c", 100, False, 1 << 20)] == list(range(8))
        assert len(store.deliver(log, "other", "s", "c", 100, True, 1 << 20)) == 5  # (NOACK)
        last_ms = next(log.read(7)).timestamp // 1_000_000
        store._log.sync()  # the groups' interval fsync came first: their ops are durable
        state = next(fs.crash_states(random.Random(34), 1))  # (strict: only what was fsynced)
    finally:
        store.close()
        log.close()
        fs.release()
    after = tmp_path / "after"
    materialize(state, str(after))
    # (a restart takes far longer than a millisecond: the new records' times follow the lost ones')
    deadline = time.monotonic() + 10
    while time.time_ns() // 1_000_000 <= last_ms:  # bounded by the deadline
        assert time.monotonic() < deadline
    with logspool.open(after / "logs" / "s", durability="os") as log:
        assert log.info().next_lsn == 5  # the three records the group got were lost
        new = 2 if appended_first else 0
        for n in range(new):
            log.append(b"new%d" % n)
        store = GroupStore(str(after / "groups" / "s"), log, "os")
        try:
            for n in range(new, 3):
                log.append(b"new%d" % n)
            g = store.get("g")
            assert g is not None and g.next_lsn == 5 and sorted(g.pel) == [0, 1, 2, 3, 4]
            got = store.deliver(log, "g", "s", "c", 100, False, 1 << 20)
            assert [(lsn, payload) for lsn, _, payload in got] == [(5, b"new0"), (6, b"new1"), (7, b"new2")]
            other = store.deliver(log, "other", "s", "c", 100, True, 1 << 20)
            assert [lsn for lsn, _, _ in other] == [5, 6, 7]
        finally:
            store.close()
        with Checkpoints(str(after / "logs" / "s"), REAL, log.record_size_max) as cps:
            floors = {cp.name: cp.lsn for cp in cps.all(floor=True)}
        assert floors["g"] == 0 and floors["other"] <= 5, floors
    # A group that is not past its log is left as it is: opened again, nothing moves.
    with logspool.open(after / "logs" / "s", durability="os") as log:
        store = GroupStore(str(after / "groups" / "s"), log, "os")
        try:
            assert {name: g.next_lsn for name, g in store.groups()} == {"g": 8, "other": 8}
        finally:
            store.close()


def _copy(source: Path, target: Path) -> Path:
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target)
    return target


def test_a_snapshot_holds_the_groups_as_the_ops_do(tmp_path: Path) -> None:
    """The op log is compacted by snapshots (as the key-value store's): the groups read back from
    one are those the ops made, consumer names that are not UTF-8 included."""
    data = tmp_path / "data"
    (data / "groups").mkdir(parents=True)
    with logspool.open(data / "logs" / "s") as log:
        for n in range(30):
            log.append(b"e%d" % n)
        store = GroupStore(str(data / "groups" / "s"), log, "always")
        store.create("g", 0, (0, 0))
        store.create("h", 10, (0, 9))
        odd = b"\xff\xfebytes".decode("utf-8", "surrogateescape")
        store.deliver(log, "g", "s", odd, 5, False, 1 << 20)
        store.deliver(log, "g", "s", "c2", 5, False, 1 << 20)
        store.deliver(log, "h", "s", "c3", 3, False, 1 << 20)
        first = [(rec.timestamp // 1_000_000, rec.lsn) for rec in log.read()]
        store.ack("g", first[1:3])
        before = {name: (g.next_lsn, g.last, dict(g.pel), sorted(g.consumers)) for name, g in store.groups()}
        assert store.snapshot() is not None
        store.close()
        reopened = GroupStore(str(data / "groups" / "s"), log, "always")
        after = {
            name: (g.next_lsn, g.last, dict(g.pel), sorted(g.consumers)) for name, g in reopened.groups()
        }
        reopened.close()
    assert list((data / "groups" / "s").glob("snapshot.*")) and after == before
    assert before["g"][2][0].consumer == odd and len(before["g"][2]) == 8


def test_a_stopped_daemon_closes_its_consumer_groups_stores(tmp_path: Path) -> None:
    from logspool.server import RespOptions
    from tests.server.conftest import Running

    running = Running(tmp_path / "data", resp=RespOptions(port=0))
    port = running.server.resp.options.port  # type: ignore[union-attr]
    r = redis.Redis(port=port)
    r.xadd("s", {"payload": b"x"})
    r.xgroup_create("s", "g", id="0")
    assert r.xreadgroup("g", "c", {"s": ">"}, count=1)
    r.close()
    groups = str(tmp_path / "data" / "groups")

    def open_under_groups() -> list[str]:
        found = []
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/self/fd/{fd}")
                if target.startswith(groups):
                    found.append(target)
        return found

    assert open_under_groups(), "the group store was never opened"
    running.stop()
    assert open_under_groups() == []
