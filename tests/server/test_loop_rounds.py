"""Where the daemon's commit rounds run (``Committer.gather``, ``_resp_commit.py``): on the event
loop, every batch of writes of a turn of the loop in one round, as Redis runs its
``appendfsync always``; on the committer's thread while fsyncs are slow (``LOOP_SYNC_MAX_S``),
and back on the loop once they are fast again; for a store another process may write, on the
loop while its writer lock is free (taken there without a wait), on the thread while another
process holds it (the loop must not wait for it). The file system's fsync is the test's through
the I/O seam: a no-op (so that a loaded machine's disk cannot decide where rounds run) or a
sleep of 20 ms (always slower than the bound, 5 ms). What a round does with its fsync is tested
elsewhere (the power-loss and kill tests of tests/server/)."""

from __future__ import annotations

import errno
import mmap
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

import logspool
from logspool import _format as fmt
from logspool import _wire as p
from logspool import client, kv
from logspool._fs import FileSystem
from logspool.server import RespOptions
from tests.server.conftest import Running
from tests.server.test_native import connect_raw, read_frames, request
from tests.server.test_resp import _raw_conns


class _Fsyncs(FileSystem):
    """fsync and fdatasync: nothing at all, or a 20 ms sleep while ``slow`` is set."""

    def __init__(self) -> None:
        self.slow = threading.Event()

    def _sync(self) -> None:
        if self.slow.is_set():
            time.sleep(0.02)  # (the simulated disk's cost, not a wait for anything)

    def fsync(self, fd: int) -> None:
        self._sync()

    def fdatasync(self, fd: int) -> None:
        self._sync()


def _turns(socks: list[socket.socket], turns: int, tag: str) -> None:
    """``turns`` times: every connection sends one kv.SET, then every reply is read (each +ok)."""
    for turn in range(turns):
        for i, sock in enumerate(socks):
            sock.sendall(request(p.KV_SET, turn, name="loop", key=f"{tag}{i}", value=b"%d" % turn))
        for sock in socks:
            [reply] = read_frames(sock, 1)
            assert not reply.flags & p.FLAG_ERROR and reply.body == {"ok": True}, reply.body


def test_the_writes_of_a_turn_of_the_loop_share_a_round_on_the_loop(tmp_path: Path) -> None:
    """16 connections send a SET each before any reads its reply: their batches share rounds
    (fewer rounds than batches), those rounds run on the event loop, and every value lands."""
    r = Running(tmp_path / "data", fs=_Fsyncs(), own_kv=True)
    try:
        with client.connect(r.address) as c:
            c.kv("loop").set("warm", 0)  # (the store opened: SETs take the round's fast path)
        before = r.server.commit_counters()
        socks = [connect_raw(r.address) for _ in range(16)]
        try:
            _turns(socks, 30, "k")
        finally:
            for sock in socks:
                sock.close()
        after = r.server.commit_counters()
        batches = after["batches"] - before["batches"]
        rounds = after["rounds"] - before["rounds"]
        assert batches == 16 * 30
        assert rounds < batches, "no round held two batches"
        assert after["rounds_here"] > before["rounds_here"], "no round ran on the loop"
        with client.connect(r.address) as c:
            s = c.kv("loop")
            assert all(s.get(f"k{i}") == b"29" for i in range(16))
    finally:
        r.stop()


def test_slow_fsyncs_move_the_rounds_to_the_thread_and_fast_ones_back(tmp_path: Path) -> None:
    """While every fsync takes 20 ms, rounds soon run on the committer's thread only (the loop
    goes on reading meanwhile); once fsyncs are fast again, rounds come back to the loop. Every
    SET is answered and lands either way."""
    fs = _Fsyncs()
    r = Running(tmp_path / "data", fs=fs, own_kv=True)
    try:
        with client.connect(r.address) as c:
            s = c.kv("loop")
            s.set("warm", 0)
            fs.slow.set()
            for i in range(10):  # (the mean of the fsyncs passes the bound within a few rounds)
                s.set(f"slow{i}", i)
            before = r.server.commit_counters()
            for i in range(10, 30):
                s.set(f"slow{i}", i)
            after = r.server.commit_counters()
            assert after["rounds"] - before["rounds"] == 20
            assert after["rounds_here"] == before["rounds_here"], "a round with slow fsyncs ran on the loop"
            fs.slow.clear()
            back = False
            for i in range(500):  # bounded: the mean falls by an eighth of itself a round
                s.set(f"fast{i}", i)
                if r.server.commit_counters()["rounds_here"] > after["rounds_here"]:
                    back = True
                    break
            assert back, "rounds never came back to the loop once fsyncs were fast"
            assert all(s.get(f"slow{i}") == i for i in range(30))
            assert s.get("fast0") == 0
    finally:
        r.stop()


_HOLD = """
import sys
import logspool
log = logspool.open(sys.argv[1], single_writer=True)  # its writer lock, until stdin closes
print("held", flush=True)
sys.stdin.read()
log.close()
"""


class _LockHolder:
    """Another process holding the writer lock of the log at ``path`` (a handle opened with
    ``single_writer``; or what ``script`` holds: ``_sync_holder``) until ``release()``;
    ``close()`` kills it if it still runs."""

    def __init__(self, path: Path, script: str = _HOLD) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", script, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        assert self.proc.stdout is not None and self.proc.stdout.readline() == b"held\n"

    def holding(self) -> bool:
        return self.proc.poll() is None

    def release(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        assert self.proc.wait(30) == 0

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def test_a_store_another_process_holds_keeps_its_rounds_off_the_loop(tmp_path: Path) -> None:
    """A store the daemon does not own (``own_kv=False``, ``--shared-kv``): while another process
    holds its writer lock, a SET to it waits in its round, on the committer's thread; the loop
    goes on serving, so a PING on another connection is answered meanwhile. Once the lock is
    given back, the SET lands."""
    r = Running(tmp_path / "data", fs=_Fsyncs(), own_kv=False)
    holder: _LockHolder | None = None
    try:
        with client.connect(r.address) as c:
            c.kv("shared").set("warm", 0)
        holder = _LockHolder(tmp_path / "data" / "kv" / "shared" / "ops")
        writer, pinger = connect_raw(r.address), connect_raw(r.address)
        try:
            writer.sendall(request(p.KV_SET, 1, name="shared", key="a", value=b"1"))
            pinger.sendall(request(p.PING, 2))
            [pong] = read_frames(pinger, 1)  # (within its deadline, while the lock is held)
            assert not pong.flags & p.FLAG_ERROR
            assert holder.holding(), "the lock was given back before the PING was answered"
            holder.release()
            [done] = read_frames(writer, 1)
            assert not done.flags & p.FLAG_ERROR and done.body == {"ok": True}, done.body
        finally:
            writer.close()
            pinger.close()
        with client.connect(r.address) as c:
            assert c.kv("shared").get("a") == b"1"
    finally:
        if holder is not None:
            holder.close()
        r.stop()


def test_a_shared_stores_rounds_run_on_the_loop_beside_another_writer(tmp_path: Path) -> None:
    """A store the daemon does not own (``own_kv=False``, ``--shared-kv``), written by an embedded
    handle too (another open of it: its own writer lock, as another process's): while its
    writer lock is free, the daemon's rounds run on the loop (the lock taken there without a
    wait), each catching up with the other writer's ops first; every increment of both lands,
    and each sees the other's."""
    r = Running(tmp_path / "data", fs=_Fsyncs(), own_kv=False)
    try:
        with client.connect(r.address) as c:
            c.kv("shared").set("n", 0)
        before = r.server.commit_counters()
        socks = [connect_raw(r.address) for _ in range(8)]
        with kv.open(tmp_path / "data" / "kv" / "shared", fs=_Fsyncs()) as embedded:
            try:
                for turn in range(20):
                    for i, sock in enumerate(socks):
                        sock.sendall(request(p.KV_ADD, turn * 8 + i, name="shared", key="n", amount=1))
                    embedded.add("n", 100)
                    for sock in socks:
                        [reply] = read_frames(sock, 1)
                        assert not reply.flags & p.FLAG_ERROR, reply.body
            finally:
                for sock in socks:
                    sock.close()
            assert embedded["n"] == 20 * 8 + 20 * 100
        after = r.server.commit_counters()
        assert after["rounds_here"] > before["rounds_here"], "no round of the shared store ran on the loop"
        with client.connect(r.address) as c:
            assert c.kv("shared").get("n") == 20 * 8 + 20 * 100
    finally:
        r.stop()


def test_a_round_whose_store_is_busy_goes_to_the_thread(tmp_path: Path) -> None:
    """An owned store's mutex held elsewhere (as a snapshot's fork or a long read in the pool
    holds it) when its round would run on the loop: the round is handed to the committer's
    thread, which waits for the mutex, and the loop goes on serving meanwhile (a PING on
    another connection is answered); the SET lands once the mutex is free."""
    r = Running(tmp_path / "data", fs=_Fsyncs(), own_kv=True)
    try:
        with client.connect(r.address) as c:
            c.kv("loop").set("warm", 0)
        store = r.server.stores.opened("kv", "loop")
        writer, pinger = connect_raw(r.address), connect_raw(r.address)
        try:
            before = r.server.commit_counters()
            with store._mutex:
                writer.sendall(request(p.KV_SET, 1, name="loop", key="a", value=b"1"))
                deadline = time.monotonic() + 30
                while r.server.commit_counters()["rounds"] == before["rounds"]:  # (the thread took it)
                    assert time.monotonic() < deadline, "the SET's round never started"
                    time.sleep(0.001)
                pinger.sendall(request(p.PING, 2))
                [pong] = read_frames(pinger, 1)  # (the loop is not waiting for the mutex)
                assert not pong.flags & p.FLAG_ERROR
            [done] = read_frames(writer, 1)
            assert not done.flags & p.FLAG_ERROR and done.body == {"ok": True}, done.body
            after = r.server.commit_counters()
            assert after["rounds"] - before["rounds"] == 1
            assert after["rounds_here"] == before["rounds_here"], "the round ran on the loop"
        finally:
            writer.close()
            pinger.close()
        with client.connect(r.address) as c:
            assert c.kv("loop").get("a") == b"1"
    finally:
        r.stop()


def _resp_running(tmp_path: Path, fs: FileSystem, *, shared_kv: bool = False) -> tuple[Running, int]:
    """``shared_kv``: the native door's key-value stores shared with other processes (the RESP
    door's store stays owned)."""
    r = Running(tmp_path / "data", fs=fs, resp=RespOptions(host="127.0.0.1", port=0),
                own_kv=False if shared_kv else None)  # fmt: skip
    assert r.server.resp is not None
    return r, r.server.resp.options.port


def _stats(port: int) -> dict[str, int]:
    c = redis.Redis(port=port, socket_timeout=30)
    try:
        info = c.info("stats")
    finally:
        c.close()
    return {k: int(v) for k, v in info.items() if k.startswith("logspool_commit")}


def _held_stream(tmp_path: Path, port: int) -> _LockHolder:
    """The stream ``held``, one entry in it, its log's writer lock held by another process."""
    setup = redis.Redis(port=port, socket_timeout=30)
    setup.xadd("held", {"f": "warm"})
    setup.close()
    return _LockHolder(tmp_path / "data" / "logs" / "held")


def _ids_grow(entries: list[tuple[bytes, object]]) -> bool:
    """Whether the ids of XRANGE's entries grow, each above the one before."""
    ids = [tuple(map(int, eid.split(b"-"))) for eid, _ in entries]
    return ids == sorted(set(ids))


def test_xadds_of_a_turn_of_the_loop_share_a_round_on_the_loop(tmp_path: Path) -> None:
    """16 connections send an XADD each before any reads its reply: their rounds run on the
    loop (each stream's writer lock taken there without a wait), share rounds, and every entry
    is in its stream once, its id above the one before."""
    r, port = _resp_running(tmp_path, _Fsyncs())
    try:
        setup = redis.Redis(port=port, socket_timeout=30)
        for name in ("s0", "s1"):
            setup.xadd(name, {"f": "warm"})  # (the streams' logs open: XADD takes the loop's path)
        setup.close()
        before = _stats(port)
        socks = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(16)]
        readers = [sock.makefile("rb") for sock in socks]
        try:
            for turn in range(30):
                for i, sock in enumerate(socks):
                    args = [b"XADD", b"s%d" % (i % 2), b"*", b"f", b"%d-%d" % (i, turn)]
                    sock.sendall(b"*5\r\n" + b"".join(b"$%d\r\n%b\r\n" % (len(a), a) for a in args))
                for reader in readers:
                    line = reader.readline()
                    assert line.startswith(b"$"), line
                    reader.readline()
        finally:
            for f in readers:
                f.close()
            for sock in socks:
                sock.close()
        after = _stats(port)
        assert after["logspool_commit_batches"] - before["logspool_commit_batches"] == 16 * 30
        assert after["logspool_commit_rounds"] - before["logspool_commit_rounds"] < 16 * 30
        assert after["logspool_commit_rounds_on_loop"] > before["logspool_commit_rounds_on_loop"]
        check = redis.Redis(port=port, socket_timeout=30)
        try:
            for k in range(2):
                entries = check.xrange(f"s{k}")
                values = [fields[b"f"] for _, fields in entries[1:]]
                assert sorted(values) == sorted(b"%d-%d" % (i, t) for i in range(k, 16, 2) for t in range(30))
                assert _ids_grow(entries)
        finally:
            check.close()
    finally:
        r.stop()


def test_lone_xadds_take_the_parser_free_path_and_the_rounds_plain_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """XADD x16 as redis-benchmark sends it: each read one whole ``XADD key * field value`` on an
    idle connection goes to the round without the parser (``_lone_write``), and the round
    appends a run of them without the command's dispatch (``Session.plain_xadds``); their
    entries are the ones the common path would have made (one each, in the order of their ids,
    the replies those ids)."""
    from logspool.server import _resp

    taken = {"lone": 0, "plain": 0}
    lone_write, plain_xadds = _resp._Connection._lone_write, _resp.Session.plain_xadds

    def counted_lone(self: _resp._Connection, found: object, name: bytes) -> bool:
        took = lone_write(self, found, name)  # type: ignore[arg-type]
        taken["lone"] += took and name == b"XADD"
        return took

    def counted_plain(self: _resp.Session, *args: object) -> object:
        out = plain_xadds(self, *args)  # type: ignore[arg-type]
        taken["plain"] += len(out[0])
        return out

    monkeypatch.setattr(_resp._Connection, "_lone_write", counted_lone)
    monkeypatch.setattr(_resp.Session, "plain_xadds", counted_plain)
    r, port = _resp_running(tmp_path, _Fsyncs())
    try:
        setup = redis.Redis(port=port, socket_timeout=30)
        setup.xadd("lone", {"f": "warm"})  # (the log open: the round's plain path takes it)
        setup.close()
        socks = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(16)]
        readers = [sock.makefile("rb") for sock in socks]
        ids: dict[bytes, bytes] = {}
        try:
            for turn in range(20):
                for i, sock in enumerate(socks):
                    args = [b"XADD", b"lone", b"*", b"f", b"%d-%d" % (i, turn)]
                    sock.sendall(b"*5\r\n" + b"".join(b"$%d\r\n%b\r\n" % (len(a), a) for a in args))
                for i, reader in enumerate(readers):
                    assert reader.readline().startswith(b"$")
                    ids[reader.readline()[:-2]] = b"%d-%d" % (i, turn)
        finally:
            for f in readers:
                f.close()
            for sock in socks:
                sock.close()
        # (a connection's first read comes before its task idles: the parser's; the rest lone)
        assert taken["lone"] >= 16 * 19, taken
        assert taken["plain"] >= 16 * 19, taken
        check = redis.Redis(port=port, socket_timeout=30)
        try:
            entries = check.xrange("lone")[1:]
            assert {eid: fields[b"f"] for eid, fields in entries} == ids
            assert _ids_grow(entries)
        finally:
            check.close()
    finally:
        r.stop()


def test_an_xadd_to_a_log_another_process_holds_waits_off_the_loop(tmp_path: Path) -> None:
    """A stream's log whose writer lock another process holds (a handle opened with
    ``single_writer``): an XADD to it waits in a round on the committer's thread, not on the
    event loop, which goes on serving: a PING of the native door on the same daemon is answered
    meanwhile (a RESP read waits for the round, as every read waits for a round it may see).
    Once the lock is given back, the XADD lands."""
    r, port = _resp_running(tmp_path, _Fsyncs())
    holder: _LockHolder | None = None
    try:
        holder = _held_stream(tmp_path, port)
        resp = r.server.resp
        assert resp is not None and resp.committer is not None
        committer = resp.committer
        writer = redis.Redis(port=port, socket_timeout=60)
        added: list[bytes] = []
        adder = threading.Thread(target=lambda: added.append(writer.xadd("held", {"f": "late"})))
        pinger = connect_raw(r.address)
        try:
            base = committer.rounds
            adder.start()
            deadline = time.monotonic() + 30
            while committer.rounds == base:  # (its round began: it waits for the lock)
                assert time.monotonic() < deadline, "the XADD's round never started"
                assert adder.is_alive(), f"the XADD was answered while the lock was held: {added}"
                time.sleep(0.001)
            pinger.sendall(request(p.PING, 1))
            [pong] = read_frames(pinger, 1)  # (the loop is not waiting for the lock)
            assert not pong.flags & p.FLAG_ERROR
            assert adder.is_alive() and holder.holding()
            holder.release()
            adder.join(60)
            assert len(added) == 1
            check = redis.Redis(port=port, socket_timeout=30)
            assert [fields[b"f"] for _, fields in check.xrange("held")] == [b"warm", b"late"]
            check.close()
        finally:
            writer.close()
            pinger.close()
    finally:
        if holder is not None:
            holder.close()
        r.stop()


def test_native_appends_share_rounds_on_the_loop_and_a_held_log_waits_off_it(tmp_path: Path) -> None:
    """log.APPENDs of 16 connections at once run in rounds on the loop, each log's writer lock
    taken there without a wait, every record once; then, while another process holds one log's
    lock, an append to it waits in a round on the committer's thread, a PING is answered
    meanwhile, and the append lands once the lock is given back."""
    r = Running(tmp_path / "data", fs=_Fsyncs())
    holder: _LockHolder | None = None
    try:
        with client.connect(r.address) as c:
            for name in ("a0", "a1", "held"):
                c.log(name).append(b"warm")
        before = r.server.commit_counters()
        socks = [connect_raw(r.address) for _ in range(16)]
        try:
            for turn in range(20):
                for i, sock in enumerate(socks):
                    sock.sendall(
                        request(p.LOG_APPEND, turn, name=f"a{i % 2}", records=[b"%d-%d" % (i, turn)])
                    )
                for sock in socks:
                    [reply] = read_frames(sock, 1)
                    assert not reply.flags & p.FLAG_ERROR and reply.body["count"] == 1, reply.body
        finally:
            for sock in socks:
                sock.close()
        after = r.server.commit_counters()
        assert after["rounds_here"] > before["rounds_here"], "no round ran on the loop"
        assert after["rounds"] - before["rounds"] < 16 * 20
        with client.connect(r.address) as c:
            for k in range(2):
                got = [rec.payload for rec in c.log(f"a{k}").read_page(0, limit=1000)[0]]
                assert sorted(got[1:]) == sorted(
                    b"%d-%d" % (i, t) for i in range(k, 16, 2) for t in range(20)
                )
        holder = _LockHolder(tmp_path / "data" / "logs" / "held")
        writer, pinger = connect_raw(r.address), connect_raw(r.address)
        try:
            base = r.server.commit_counters()["rounds"]
            writer.sendall(request(p.LOG_APPEND, 1, name="held", records=[b"late"]))
            deadline = time.monotonic() + 30
            while r.server.commit_counters()["rounds"] == base:  # (its round began: it waits)
                assert time.monotonic() < deadline, "the append's round never started"
                time.sleep(0.001)
            pinger.sendall(request(p.PING, 2))
            [pong] = read_frames(pinger, 1)  # (the loop is not waiting for the lock)
            assert not pong.flags & p.FLAG_ERROR and holder.holding()
            holder.release()
            [done] = read_frames(writer, 1)
            assert not done.flags & p.FLAG_ERROR and done.body["count"] == 1, done.body
        finally:
            writer.close()
            pinger.close()
        with client.connect(r.address) as c:
            assert [rec.payload for rec in c.log("held").read_page(0, limit=10)[0]] == [b"warm", b"late"]
    finally:
        if holder is not None:
            holder.close()
        r.stop()


class _GatedFsyncs(_Fsyncs):
    """``_Fsyncs``, and every fsync waits while ``gate`` is shut (at most 60 s)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.gate.set()

    def _sync(self) -> None:
        super()._sync()
        assert self.gate.wait(60), "the test never opened the gate"


@pytest.mark.parametrize("how", ["GET", "MULTI GET EXEC"])
def test_a_redis_read_waits_for_a_native_write_to_be_durable(tmp_path: Path, how: str) -> None:
    """A key of the RESP door's store written through the native door, in a round whose fsync
    has not returned yet: a GET over RESP does not show the new value before that fsync is done
    (it waits for every round of both doors, as a native read does). So too a GET inside
    MULTI/EXEC, whose EXEC runs in a round of the RESP door that writes nothing (no fsync of
    its own to wait for)."""
    fs = _GatedFsyncs()
    r, port = _resp_running(tmp_path, fs)
    try:
        with client.connect(r.address) as c:
            s = c.kv("default")
            s.set("k", b"old")
            fs.slow.set()
            for i in range(12):  # (slow fsyncs: the native door's rounds move to its thread)
                s.set(f"slow{i}", i)
        store = r.server.stores.opened("kv", "default")
        reader = redis.Redis(port=port, socket_timeout=60)
        assert reader.ping()  # (connected before the gate shuts: only the read below may wait)
        fs.gate.clear()

        def write_new() -> None:
            with client.connect(r.address) as c:
                c.kv("default").set("k", b"new")

        native = threading.Thread(target=write_new)
        native.start()
        deadline = time.monotonic() + 30
        while (entry := store._state.values.get("k")) is None or entry.value != b"new":  # (decided)
            assert time.monotonic() < deadline, "the native SET was never decided"
            time.sleep(0.001)
        got: list[bytes | None] = []

        def get() -> None:
            if how == "GET":
                got.append(reader.get("k"))
            else:
                [value] = reader.pipeline(transaction=True).get("k").execute()
                got.append(value)

        getter = threading.Thread(target=get)
        getter.start()
        getter.join(0.5)  # (a GET that answers at once answers within this)
        assert getter.is_alive() or got != [b"new"], "the GET showed a write whose fsync had not returned"
        fs.gate.set()
        getter.join(60)
        native.join(60)
        assert got == [b"new"]
        reader.close()
    finally:
        fs.gate.set()
        r.stop()


def test_a_redis_transaction_reading_a_stream_waits_for_a_native_append_to_be_durable(
    tmp_path: Path,
) -> None:
    """A log appended to through the native door, in a round whose fsync has not returned yet:
    an XRANGE of it inside MULTI/EXEC, whose EXEC runs in a round of the RESP door (that round
    fsyncs the key-value store, not the log), does not show the record before that fsync is
    done; once it is, it does."""
    fs = _GatedFsyncs()
    r, port = _resp_running(tmp_path, fs)
    try:
        with client.connect(r.address) as c:
            c.log("s").append(b"old")
            fs.slow.set()
            for i in range(12):  # (slow fsyncs: the native door's rounds move to its thread)
                c.log("s").append(b"slow%d" % i)
        log = r.server.stores.opened("logs", "s")
        assert log is not None
        reader = redis.Redis(port=port, socket_timeout=60, single_connection_client=True)
        # MULTI and XRANGE before the gate shuts, each answered (+OK, QUEUED): EXEC comes alone,
        # as redis-cli sends it, and runs in a commit round (a batch with the XRANGE in it would
        # run in the pool, and wait there as any read does)
        reader.set_response_callback("XRANGE", lambda reply, **_: reply)  # (QUEUED, then raw in EXEC)
        assert reader.execute_command("MULTI") == b"OK"
        assert reader.execute_command("XRANGE", "s", "-", "+") == b"QUEUED"
        fs.gate.clear()

        def append_new() -> None:
            with client.connect(r.address) as c:
                c.log("s").append(b"new")

        native = threading.Thread(target=append_new)
        native.start()
        deadline = time.monotonic() + 30
        while log.next_lsn < 14:  # (written, its fsync held at the gate)
            assert time.monotonic() < deadline, "the native append was never written"
            time.sleep(0.001)
        got: list[list[bytes]] = []

        def xrange() -> None:
            [entries] = reader.execute_command("EXEC")
            got.append([fields[1] for _, fields in entries])

        getter = threading.Thread(target=xrange)
        getter.start()
        getter.join(0.5)  # (a reply that goes at once goes within this)
        assert getter.is_alive() or not got or got[0][-1] != b"new", (
            "the transaction showed a record whose fsync had not returned"
        )
        fs.gate.set()
        getter.join(60)
        native.join(60)
        assert got and got[0][-1] == b"new"
        reader.close()
    finally:
        fs.gate.set()
        r.stop()


def test_an_xadd_to_a_log_a_pool_thread_holds_waits_off_the_loop(tmp_path: Path) -> None:
    """An XTRIM, in the pool, holds its log's lock in this process while it waits for another
    process's: an XADD to that stream meanwhile does not wait for it on the loop (its lock is
    taken there without any wait, the thread's lock included); its round goes to the committer's
    thread, a native PING is answered meanwhile, and both land once the other process lets go."""
    r, port = _resp_running(tmp_path, _Fsyncs())
    holder: _LockHolder | None = None
    try:
        holder = _held_stream(tmp_path, port)
        trimmer = redis.Redis(port=port, socket_timeout=120)
        trimmed: list[int] = []
        trim = threading.Thread(target=lambda: trimmed.append(trimmer.xtrim("held", maxlen=5)))
        trim.start()
        log = r.server.stores.opened("logs", "held")
        deadline = time.monotonic() + 30
        while not log._active.lock.locked():  # (the pool's XTRIM holds it, waiting for the flock)
            assert time.monotonic() < deadline, "the XTRIM never took its log's lock"
            time.sleep(0.001)
        resp = r.server.resp
        assert resp is not None and resp.committer is not None
        base = resp.committer.rounds
        writer = redis.Redis(port=port, socket_timeout=120)
        added: list[bytes] = []
        adder = threading.Thread(target=lambda: added.append(writer.xadd("held", {"f": "late"})))
        adder.start()
        while resp.committer.rounds == base:  # (its round began, on the thread: it waits)
            assert time.monotonic() < deadline + 30, "the XADD's round never started"
            time.sleep(0.001)
        _ping(r.address)  # (the loop is not waiting for any lock)
        assert holder.holding() and adder.is_alive() and trim.is_alive()
        holder.release()
        trim.join(120)
        adder.join(120)
        assert trimmed == [0] and len(added) == 1
        check = redis.Redis(port=port, socket_timeout=30)
        assert [fields[b"f"] for _, fields in check.xrange("held")] == [b"warm", b"late"]
        check.close()
        trimmer.close()
        writer.close()
    finally:
        if holder is not None:
            holder.close()
        r.stop()


class _OneLockFault(_Fsyncs):
    """``_Fsyncs``, and the next flock taken without waiting, once ``armed``, fails with ENOLCK
    (the kernel's "no locks available")."""

    armed = False

    def lock(self, fd: int, timeout_s: float, idle: Callable[[], bool] | None = None) -> bool:
        if self.armed and timeout_s == 0:
            self.armed = False
            raise OSError(errno.ENOLCK, "no locks available (injected)")
        return super().lock(fd, timeout_s, idle)


def test_a_lock_that_fails_on_the_loop_sends_the_round_to_the_thread(tmp_path: Path) -> None:
    """Taking a stream's lock on the loop fails with an OS error (ENOLCK through the I/O seam):
    the round goes to the committer's thread, which takes the lock again and lands the XADD;
    nothing is left held, and the writes after it are answered as before."""
    fs = _OneLockFault()
    r, port = _resp_running(tmp_path, fs)
    try:
        c = redis.Redis(port=port, socket_timeout=30)
        c.xadd("s", {"f": "warm"})
        fs.armed = True
        assert c.xadd("s", {"f": "one"})
        assert not fs.armed, "the loop never took the stream's lock"
        assert c.set("k", "v") and c.get("k") == b"v"
        assert [fields[b"f"] for _, fields in c.xrange("s")] == [b"warm", b"one"]
        c.close()
    finally:
        r.stop()


class _CountedGates(FileSystem):
    """fsyncs of 1 ms (above the cost at which a syncer leaves a gathering hint,
    ``limits.GATHER_FSYNC_S_MIN``), and a count of the gates taken: a syncer takes one only
    when it may wait to gather other writers' records (``Syncer.sync_segment_through``)."""

    def __init__(self) -> None:
        self.gates = 0

    def fsync(self, fd: int) -> None:
        time.sleep(0.001)  # (the simulated disk's cost, not a wait for anything)

    fdatasync = fsync

    def try_gate(self, fd: int, byte: int) -> bool:
        self.gates += 1
        return super().try_gate(fd, byte)


def _gather_target(log_dir: Path) -> int:
    """The gathering hint the last fsync of the log left: the lsn its next syncer waits for."""
    with open(log_dir / fmt.SYNC_NAME, "rb") as f:
        view = mmap.mmap(f.fileno(), fmt.SYNC_FILE_SIZE_TAIL, access=mmap.ACCESS_READ)
        try:
            return fmt.read_sync_gather(view)[1]
        finally:
            view.close()


def test_a_commit_round_never_waits_to_gather_records_only_it_could_write(tmp_path: Path) -> None:
    """A round that writes 16 records leaves, with its fsync, the hint that the next syncer of
    the log wait for 16 more (the writers it covered, appending again: other processes' way
    of sharing an fsync). The daemon's next round is smaller, and its records' writers are the
    clients waiting for its replies: it must fsync at once, never take the gathering gate. A
    library handle in the same place does wait for them (the count sees a gate)."""
    fs = _CountedGates()
    r, port = _resp_running(tmp_path, fs, shared_kv=True)
    try:
        c = redis.Redis(port=port, socket_timeout=30)
        native = connect_raw(r.address)
        hinted = {"logs/s": 0, "kv/k/ops": 0}  # (turns whose batch of 16 left a hint to ignore)
        turns = 0
        for turn in range(20):  # bounded: until each store had 3 such turns (a batch may be split)
            if min(hinted.values()) >= 3:
                break
            turns += 1
            pipe = c.pipeline(transaction=False)  # (one read, usually: one batch of 16 records)
            for i in range(16):
                pipe.xadd("s", {"f": f"{turn}.{i}"})
            pipe.execute()
            hinted["logs/s"] += _gather_target(tmp_path / "data" / "logs" / "s") > 0
            assert c.xadd("s", {"f": f"{turn}.lone"})  # (a smaller round: below the hint)
            # The native door's key-value store, shared with other processes (``shared_kv``):
            native.sendall(
                b"".join(request(p.KV_SET, i, name="k", key=f"{turn}.{i}", value=b"v") for i in range(16))
            )
            assert all(not f.flags & p.FLAG_ERROR for f in read_frames(native, 16))
            hinted["kv/k/ops"] += _gather_target(tmp_path / "data" / "kv" / "k" / "ops") > 0
            native.sendall(request(p.KV_SET, 99, name="k", key=f"{turn}.lone", value=b"v"))
            assert not read_frames(native, 1)[0].flags & p.FLAG_ERROR
        assert min(hinted.values()) >= 3, f"too few hints to ignore: {hinted}"
        assert fs.gates == 0, f"the daemon's rounds took the gathering gate {fs.gates} times"
        assert len(c.xrange("s")) == turns * 17
        native.close()
        c.close()
    finally:
        r.stop()
    control = _CountedGates()
    with logspool.open(tmp_path / "data" / "logs" / "s", durability="always", fs=control) as log:
        log.append_many([b"x"] * 16)
        assert _gather_target(tmp_path / "data" / "logs" / "s") > 0
        log.append(b"y")
    assert control.gates > 0, "the library's syncer did not gather: the count above proves nothing"


def test_a_touch_get_on_a_store_another_process_holds_does_not_stop_the_loop(tmp_path: Path) -> None:
    """The RESP door's store shared with other processes (``own_kv=False``): while another
    process holds its writer lock, a GET of a key with a touch TTL (a write: its extension)
    waits in the pool, not on the loop: once it is running there, a native PING (answered on
    the loop) and an XADD are answered meanwhile, and the GET once the lock is given back."""
    r = Running(tmp_path / "data", fs=_Fsyncs(), resp=RespOptions(host="127.0.0.1", port=0, own_kv=False))
    holder: _LockHolder | None = None
    try:
        assert r.server.resp is not None
        resp = r.server.resp
        with client.connect(r.address) as c:
            c.kv("default").set("sess", b"v", touch=30)
        reader = redis.Redis(port=resp.options.port, socket_timeout=60, single_connection_client=True)
        streams = redis.Redis(port=resp.options.port, socket_timeout=60, single_connection_client=True)
        assert reader.ping() and streams.xadd("s", {"f": "warm"})
        pinger = connect_raw(r.address)
        time.sleep(0.35)  # (a read records a touch once it moves the expiry by 1% of the TTL)
        holder = _LockHolder(tmp_path / "data" / "kv" / "default" / "ops")
        got: list[object] = []
        gets = resp.requests[b"GET"]
        t = threading.Thread(target=lambda: got.append(reader.get("sess")))
        t.start()
        deadline = time.monotonic() + 30
        while resp.requests[b"GET"] <= gets:  # bounded: until the GET runs (in the pool, waiting)
            assert time.monotonic() < deadline, "the GET never ran"
            time.sleep(0.005)
        pinger.sendall(request(p.PING, 1))
        assert not read_frames(pinger, 1)[0].flags & p.FLAG_ERROR
        assert streams.xadd("s", {"f": "while held"})
        assert holder.holding() and not got
        holder.release()
        t.join(60)
        assert got == [b"v"]
        reader.close()
        streams.close()
        pinger.close()
    finally:
        if holder is not None:
            holder.close()
        r.stop()


def test_an_xadd_does_not_wait_for_the_shared_stores_writer_lock(tmp_path: Path) -> None:
    """The RESP door's store shared with other processes, its writer lock held by another
    process: an XADD's round opens no decision of that store, so it is answered meanwhile."""
    r = Running(tmp_path / "data", fs=_Fsyncs(), resp=RespOptions(host="127.0.0.1", port=0, own_kv=False))
    holder: _LockHolder | None = None
    try:
        assert r.server.resp is not None
        c = redis.Redis(port=r.server.resp.options.port, socket_timeout=60)
        c.set("warm", 1)  # (the store open)
        c.xadd("s", {"f": "warm"})
        holder = _LockHolder(tmp_path / "data" / "kv" / "default" / "ops")
        assert c.xadd("s", {"f": "while held"})
        assert [fields[b"f"] for _, fields in c.xrange("s")] == [b"warm", b"while held"]
        assert holder.holding()
        holder.release()
        c.close()
    finally:
        if holder is not None:
            holder.close()
        r.stop()


_HOLD_SYNC = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.flock(fd, fcntl.LOCK_EX)  # as another process holds it through each of its fsyncs
print("held", flush=True)
sys.stdin.read()
os.close(fd)
"""


@pytest.mark.parametrize("door", ["resp", "native", "native kv"])
def test_a_round_whose_fsync_would_wait_for_another_process_is_finished_off_the_loop(
    tmp_path: Path, door: str
) -> None:
    """A log the daemon shares with other processes: each of them holds its sync file's lock
    (``DIR/sync``) through its own fsync. While another process holds it, a round on the loop
    that appended to the log (an XADD; a native log.APPEND; a native kv.SET to a store the
    daemon does not own, its op log shared) is handed to the committer's thread for its fsync:
    the loop goes on serving (a PING is answered; writes and reads wait for the round, as
    behind any round on the thread), the write is not answered until the lock is given back,
    then it is, and it is there; and writes go on after it."""
    r, port = _resp_running(tmp_path, _Fsyncs(), shared_kv=True)
    holder: _LockHolder | None = None
    try:
        resp = r.server.resp
        assert resp is not None and resp.committer is not None
        committer = resp.committer if door == "resp" else r.server._committer
        setup = redis.Redis(port=port, socket_timeout=30)
        setup.xadd("shared", {"f": "warm"})
        with client.connect(r.address) as c:
            c.log("shared").append(b"warm")
            c.kv("shared").set("warm", b"0")
        assert committer is not None
        handed = committer.handed
        where = ("kv", "shared", "ops") if door == "native kv" else ("logs", "shared")
        sync_file = tmp_path.joinpath("data", *where, fmt.SYNC_NAME)
        holder = _sync_holder(sync_file)
        writer = redis.Redis(port=port, socket_timeout=60)
        added: list[object] = []
        native = connect_raw(r.address)
        adder: threading.Thread | None = None
        try:
            if door == "resp":
                adder = threading.Thread(target=lambda: added.append(writer.xadd("shared", {"f": "late"})))
                adder.start()
            elif door == "native":
                native.sendall(request(p.LOG_APPEND, 1, name="shared", records=[b"late"]))
            else:
                native.sendall(request(p.KV_SET, 1, name="shared", key="late", value=b"1"))
            deadline = time.monotonic() + 30
            while committer.handed == handed:  # bounded: until the round is handed to the thread
                assert time.monotonic() < deadline, "the round was never handed to the thread"
                time.sleep(0.001)
            _ping(r.address)  # (the loop is not waiting for the lock)
            assert holder.holding() and not added, "the write was answered while the lock was held"
            native.setblocking(False)
            with pytest.raises(BlockingIOError):  # (nothing sent: its reply waits for the fsync)
                native.recv(1)
            native.settimeout(30)
            assert committer.delivered < committer.rounds, "the round was answered while the lock was held"
            holder.release()
            if adder is not None:
                adder.join(60)
                assert len(added) == 1
            else:
                [done] = read_frames(native, 1)
                assert not done.flags & p.FLAG_ERROR, done.body
                assert done.body == ({"ok": True} if door == "native kv" else {"first": 2, "count": 1}), (
                    done.body
                )
        finally:
            writer.close()
            native.close()
        if door == "resp":
            entries = setup.xrange("shared")  # (the native door's append: no stream entry's fields)
            assert len(entries) == 3 and entries[-1][1] == {b"f": b"late"}
        elif door == "native":
            with client.connect(r.address) as c:
                got = [rec.payload for rec in c.log("shared").read_page(0, limit=10)[0]]
                assert got[-1] == b"late" and len(got) == 3
        else:
            with client.connect(r.address) as c:
                assert c.kv("shared").get("late") == b"1"
        assert setup.set("other", "v") and setup.get("other") == b"v"
        setup.close()
    finally:
        if holder is not None:
            holder.close()
        r.stop()


def _sync_holder(path: Path) -> _LockHolder:
    """Another process holding the sync file's flock at ``path`` (as it does through each of its
    fsyncs) until ``release()``."""
    return _LockHolder(path, _HOLD_SYNC)


def _segments(path: Path) -> list[str]:
    return sorted(x.name for x in path.iterdir() if fmt.parse_segment_name(x.name) is not None)


def _ping(address: str) -> None:
    pinger = connect_raw(address)
    try:
        pinger.sendall(request(p.PING, 99))
        [pong] = read_frames(pinger, 1)
        assert not pong.flags & p.FLAG_ERROR
    finally:
        pinger.close()


@pytest.mark.parametrize("what", ["log", "kv"])
def test_a_round_that_may_rotate_a_shared_segment_runs_off_the_loop(tmp_path: Path, what: str) -> None:
    """A rotation fsyncs the segment it seals under the sync file's lock, which another process
    holds through each of its fsyncs: a round whose writes may not fit in the active segment of
    a shared log (a native log.APPEND) or of a shared store's op log (a kv.SET) runs on the
    committer's thread, never on the loop (``Tail.room``). Segments of 4 KiB; while another
    process holds the lock, the loop answers a PING, the write waits, and once the lock is
    given back it is answered, and the segment was rotated."""
    data = tmp_path / "data"
    if what == "log":
        (data / "logs").mkdir(parents=True)
        logspool.open(data / "logs" / "shared", segment_size_max=4096, record_size_max=2048).close()
        where = data / "logs" / "shared"
        writes = [request(p.LOG_APPEND, i, name="shared", records=[b"x" * 1500]) for i in range(3)]
    else:
        (data / "kv").mkdir(parents=True)
        kv.open(data / "kv" / "shared", segment_size_max=4096).close()
        where = data / "kv" / "shared" / "ops"
        writes = [request(p.KV_SET, i, name="shared", key=f"k{i}", value=b"x" * 1400) for i in range(3)]
    r = Running(data, fs=_Fsyncs(), own_kv=False)
    holder: _LockHolder | None = None
    native = connect_raw(r.address)
    try:
        committer = r.server._committer
        assert committer is not None
        for frame in writes[:2]:  # (the segment fills: the third write would rotate it)
            native.sendall(frame)
            [reply] = read_frames(native, 1)
            assert not reply.flags & p.FLAG_ERROR, reply.body
        before = _segments(where)
        holder = _sync_holder(where / fmt.SYNC_NAME)
        rounds, here = committer.rounds, committer.rounds_here
        native.sendall(writes[2])
        deadline = time.monotonic() + 30
        while committer.rounds == rounds:  # bounded: until its round has begun
            assert time.monotonic() < deadline, "the write's round never began"
            time.sleep(0.001)
        _ping(r.address)  # (the loop is not waiting for the lock)
        assert committer.rounds_here == here, "a round that rotates its segment ran on the loop"
        native.setblocking(False)
        with pytest.raises(BlockingIOError):  # (its fsync waits for the lock: no reply yet)
            native.recv(1)
        native.settimeout(30)
        holder.release()
        [reply] = read_frames(native, 1)
        assert not reply.flags & p.FLAG_ERROR, reply.body
        assert len(_segments(where)) > len(before), "the segment was not rotated"
    finally:
        native.close()
        if holder is not None:
            holder.close()
        r.stop()


def test_a_catch_up_across_another_writers_rotation_does_not_wait_on_the_loop(tmp_path: Path) -> None:
    """A shared store whose op log another writer rotated: the next decision of the daemon's
    handle crosses the seal and switches segments, closing the old one's files once no fsync
    of its other threads is under way (the RESP door's committer on the same store, a
    snapshot's sync), which may itself wait for another process. On the loop it does not wait:
    the round goes to the committer's thread. Here the store's sync role is held by a thread
    of the test, as such an fsync holds it: a PING is answered meanwhile, the SET once the role
    is given back, and both writers' keys are there."""
    data = tmp_path / "data"
    (data / "kv").mkdir(parents=True)
    kv.open(data / "kv" / "shared", segment_size_max=4096).close()
    r = Running(data, fs=_Fsyncs(), own_kv=False)
    native = connect_raw(r.address)
    try:
        native.sendall(request(p.KV_SET, 1, name="shared", key="a", value=b"1"))
        assert not read_frames(native, 1)[0].flags & p.FLAG_ERROR
        with kv.open(data / "kv" / "shared", fs=_Fsyncs()) as embedded:
            for i in range(4):  # (the other writer rotates the op log)
                embedded.set(f"big{i}", b"x" * 1400)
        store = r.server.stores.opened("kv", "shared")
        assert store is not None
        syncer = store._log._syncer
        committer = r.server._committer
        assert committer is not None
        syncer.take_role()  # (as another thread's fsync of the daemon's handle holds it)
        try:
            rounds = committer.rounds
            native.sendall(request(p.KV_SET, 2, name="shared", key="b", value=b"2"))
            deadline = time.monotonic() + 30
            while committer.rounds == rounds:  # bounded: until its round has begun
                assert time.monotonic() < deadline, "the SET's round never began (the loop waits?)"
                time.sleep(0.001)
            _ping(r.address)  # (the loop is not waiting for the role)
        finally:
            syncer.leave_role(0)
        [reply] = read_frames(native, 1)
        assert not reply.flags & p.FLAG_ERROR and reply.body == {"ok": True}, reply.body
        with client.connect(r.address) as c:
            s = c.kv("shared")
            assert s.get("a") == b"1" and s.get("b") == b"2" and s.get("big3") == b"x" * 1400
    finally:
        native.close()
        r.stop()


def test_a_shared_stores_expirations_that_may_rotate_its_segment_keep_the_round_off_the_loop(
    tmp_path: Path,
) -> None:
    """A decision of a key-value store first removes values that expired (EXPIRE ops, up to 64).
    On the loop, those ops count against the segment's room too, and are not made at all if
    the round goes to the thread (nothing is written on the loop that might rotate it). Another
    writer leaves 40 keys of 300 bytes that expire, and little room; once they expired, while
    another process holds the sync file's lock, a SET's round runs on the thread: a PING is
    answered meanwhile; then the SET is, and the expired keys are gone."""
    data = tmp_path / "data"
    (data / "kv").mkdir(parents=True)
    where = data / "kv" / "shared" / "ops"
    kv.open(data / "kv" / "shared", segment_size_max=65536).close()
    r = Running(data, fs=_Fsyncs(), own_kv=False)
    holder: _LockHolder | None = None
    native = connect_raw(r.address)
    try:
        native.sendall(request(p.KV_SET, 1, name="shared", key="a", value=b"1"))
        assert not read_frames(native, 1)[0].flags & p.FLAG_ERROR
        frozen = time.time_ns()  # (this writer's decisions never see them expire, however slow)
        with kv.open(data / "kv" / "shared", fs=_Fsyncs(), clock=lambda: frozen) as other:
            for i in range(40):  # (their EXPIRE ops: about 14 KB of records)
                other.set(f"{i:03d}" + "e" * 297, b"v", ttl=0.2)
            expired_at = frozen / 1e9 + 0.2
            tail = other._log._active
            left = tail.segment_size_max - fmt.RECORD_OVERHEAD - tail.end
            other.set("fill", b"x" * (left - 4000))  # (4 KB left: room for a SET, not for them)
        deadline = time.monotonic() + 30
        while time.time() <= expired_at + 0.01:  # bounded: until the keys have expired
            assert time.monotonic() < deadline
            time.sleep(0.01)
        committer = r.server._committer
        assert committer is not None
        holder = _sync_holder(where / fmt.SYNC_NAME)
        rounds, here = committer.rounds, committer.rounds_here
        native.sendall(request(p.KV_SET, 2, name="shared", key="b", value=b"2"))
        deadline = time.monotonic() + 30
        while committer.rounds == rounds:  # bounded: until its round has begun
            assert time.monotonic() < deadline, "the SET's round never began (the loop waits?)"
            time.sleep(0.001)
        _ping(r.address)  # (the loop is not waiting for the lock)
        assert committer.rounds_here == here, "a round whose expirations may rotate ran on the loop"
        holder.release()
        [reply] = read_frames(native, 1)
        assert not reply.flags & p.FLAG_ERROR and reply.body == {"ok": True}, reply.body
        with client.connect(r.address) as c:
            s = c.kv("shared")
            assert s.get("b") == b"2" and s.get("000" + "e" * 297) is None
        store = r.server.stores.opened("kv", "shared")
        assert store is not None and len(store) == 3  # (a, fill, b: the 40 expired ones removed)
    finally:
        native.close()
        if holder is not None:
            holder.close()
        r.stop()


def test_a_round_on_the_loop_does_not_wait_for_another_store_being_opened(tmp_path: Path) -> None:
    """A pool thread opening a store holds the daemon's table of stores through the open, and
    a log's open waits for its writer lock (another handle holds it here, ``single_writer``,
    for its life). A native kv.ADD to a store open already, in a round on the loop, finds its
    store without that table's lock: a PING is answered meanwhile, and the ADD; the read of the
    other log once its lock is given back."""
    data = tmp_path / "data"
    (data / "logs").mkdir(parents=True)
    r = Running(data, fs=_Fsyncs())
    holder: logspool.Log | None = None
    reader, writer = connect_raw(r.address), connect_raw(r.address)
    try:
        with client.connect(r.address) as c:
            c.kv("served").set("n", 0)  # (the store open)
        holder = logspool.open(data / "logs" / "x", single_writer=True)  # (its writer lock, held)
        reader.sendall(request(p.LOG_READ, 2, name="x"))  # (in the pool: opens x, waits for the lock)
        deadline = time.monotonic() + 30
        while not r.server.stores._lock.locked():  # bounded: until the open holds the table
            assert time.monotonic() < deadline, "the read never began opening the log"
            time.sleep(0.001)
        writer.sendall(request(p.KV_ADD, 3, name="served", key="n", amount=1))
        [added] = read_frames(writer, 1)  # (answered while the open waits)
        assert not added.flags & p.FLAG_ERROR, added.body
        _ping(r.address)
        assert r.server.stores._lock.locked(), "the open ended before the ADD was answered"
        holder.close()
        holder = None
        [read] = read_frames(reader, 1)
        assert not read.flags & p.FLAG_ERROR, read.body
        with client.connect(r.address) as c:
            assert c.kv("served").get("n") == 1
    finally:
        if holder is not None:
            holder.close()
        reader.close()
        writer.close()
        r.stop()


def test_rounds_of_plain_sets_are_written_alone_and_others_decide(tmp_path: Path) -> None:
    """On the store the daemon owns, a commit round of plain ``SET key value`` only is written
    without a decision (``RespFront.plain_round``; INFO's ``logspool_commit_rounds_alone``):
    each of a client's plain SETs is such a round, and so are the rounds 16 connections share.
    A round with anything else decides: a SET with an option, a SET of a key another owner
    locked (its -LOCKED error answered), a MULTI. Every value lands, and is there after the
    daemon restarts."""
    r, port = _resp_running(tmp_path, _Fsyncs())
    expected: dict[bytes, bytes] = {}
    try:
        c = redis.Redis(port=port, socket_timeout=30)
        try:
            c.set("warm", "0")
            before = _stats(port)
            for i in range(20):
                assert c.set(f"one:{i}", f"v{i}")
                expected[b"one:%d" % i] = b"v%d" % i
            after = _stats(port)
            assert after["logspool_commit_rounds_alone"] - before["logspool_commit_rounds_alone"] == 20
            assert after["logspool_commit_rounds"] - before["logspool_commit_rounds"] == 20
            assert c.execute_command("LS.LOCK", "held", "someone", "60")
            before = _stats(port)
            assert c.set("opt", "1", ex=100)
            with pytest.raises(redis.ResponseError, match="LOCKED"):
                c.set("held", "not mine")
            with c.pipeline(transaction=True) as tx:
                tx.set("in-multi", "1")
                tx.execute()
            after = _stats(port)
            assert after["logspool_commit_rounds_alone"] == before["logspool_commit_rounds_alone"]
            assert after["logspool_commit_rounds"] - before["logspool_commit_rounds"] >= 3
            expected.update({b"opt": b"1", b"in-multi": b"1"})
        finally:
            c.close()
        before = _stats(port)
        with _raw_conns(port, 16) as (socks, readers):
            for turn in range(30):
                for i, sock in enumerate(socks):
                    args = [b"SET", b"many:%d" % i, b"%d-%d" % (i, turn)]
                    sock.sendall(b"*3\r\n" + b"".join(b"$%d\r\n%b\r\n" % (len(a), a) for a in args))
                for reader in readers:
                    assert reader.readline() == b"+OK\r\n"
        expected.update({b"many:%d" % i: b"%d-29" % i for i in range(16)})
        after = _stats(port)
        rounds = after["logspool_commit_rounds"] - before["logspool_commit_rounds"]
        assert after["logspool_commit_rounds_alone"] - before["logspool_commit_rounds_alone"] == rounds
        assert after["logspool_commit_batches"] - before["logspool_commit_batches"] == 16 * 30
    finally:
        r.stop()
    r, port = _resp_running(tmp_path, _Fsyncs())
    try:
        c = redis.Redis(port=port, socket_timeout=30)
        try:
            assert dict(zip(expected, c.mget(list(expected)), strict=True)) == expected
            assert c.get("held") is None
        finally:
            c.close()
    finally:
        r.stop()


def test_native_rounds_of_plain_sets_of_one_store_are_written_alone(tmp_path: Path) -> None:
    """The native door's kv.SETs likewise (``NativeFront.plain_round``): 16 connections' plain
    SETs of one owned store share rounds, every one written alone; a batch that also sets a
    second store, or a SET with an option, decides. Every value lands, after a restart too."""
    r = Running(tmp_path / "data", fs=_Fsyncs(), own_kv=True)
    try:
        with client.connect(r.address) as c:
            c.kv("loop").set("warm", 0)
            c.kv("other").set("warm", 0)  # (both stores open: SETs take the round's fast paths)
        before = r.server.commit_counters()
        socks = [connect_raw(r.address) for _ in range(16)]
        try:
            _turns(socks, 30, "k")
            middle = r.server.commit_counters()
            rounds = middle["rounds"] - before["rounds"]
            assert middle["rounds_alone"] - before["rounds_alone"] == rounds
            socks[0].sendall(
                request(p.KV_SET, 1, name="loop", key="two", value=b"a")
                + request(p.KV_SET, 2, name="other", key="two", value=b"b")
            )
            socks[1].sendall(request(p.KV_SET, 3, name="loop", key="ttl", value=b"c", ttl=100.0))
            for sock, count in ((socks[0], 2), (socks[1], 1)):
                got = 0
                while got < count:  # (the two requests of socks[0] may come back in two reads)
                    for reply in read_frames(sock, 1):
                        assert not reply.flags & p.FLAG_ERROR and reply.body == {"ok": True}, reply.body
                        got += 1
        finally:
            for sock in socks:
                sock.close()
        after = r.server.commit_counters()
        assert after["rounds_alone"] == middle["rounds_alone"]
        assert after["rounds"] > middle["rounds"]
    finally:
        r.stop()
    r = Running(tmp_path / "data", fs=_Fsyncs(), own_kv=True)
    try:
        with client.connect(r.address) as c:
            s = c.kv("loop")
            assert all(s.get(f"k{i}") == b"29" for i in range(16))
            assert (s.get("two"), c.kv("other").get("two"), s.get("ttl")) == (b"a", b"b", b"c")
    finally:
        r.stop()
