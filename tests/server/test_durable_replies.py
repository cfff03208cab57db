"""No reply, on either door, shows a write whose fsync has not returned (durability "always"):
a crash could still take it back, and Redis's ``appendfsync always`` answers after its fsync
too. The writes here are the ones that do not go through a commit round's fsync before their
locks are let go, and the reads that could see them meanwhile: a RESP batch holding a write and
a slow read, a job put, a forwarded append, and the events of a native LISTEN. Each write's
fsync is held at a gate (the file system of the test, through the I/O seam); a read of another
connection, sent meanwhile, gets no reply until the gate opens, then the new data. (A reply
that would go at once goes within the half second the test waits; on a machine too loaded to
send it by then, the check holds anyway, and the read's reply after the gate is still checked.)
"""

from __future__ import annotations

import errno
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from logspool import _wire as p
from logspool import client
from logspool._fs import FileSystem
from logspool.server import RespOptions
from tests.server.conftest import Running
from tests.server.test_loop_rounds import _GatedFsyncs, _resp_running, _stats
from tests.server.test_native import connect_raw, read_frames, request


class _LogGatedFsyncs(_GatedFsyncs):
    """``_GatedFsyncs``, and while ``only`` is set, only the fsyncs of files whose path holds it
    wait at the gate (a forward's own table, a key-value store beside the log, is fsynced at
    once: its append comes after)."""

    def __init__(self) -> None:
        super().__init__()
        self.only: str | None = None

    def _gated(self, fd: int) -> None:
        if self.only is not None and self.only not in os.readlink(f"/proc/self/fd/{fd}"):
            return
        self._sync()

    def fsync(self, fd: int) -> None:
        self._gated(fd)

    def fdatasync(self, fd: int) -> None:
        self._gated(fd)


def _forwarding(r: Running) -> tuple[Any, socket.socket]:
    """The log ``s`` (one record), and a native connection that has forwarded one record into
    it (the forward's own table beside the log opened: later forwards append at once)."""
    with client.connect(r.address) as c:
        c.log("s").append(b"old")
    log = r.server.stores.opened("logs", "s")
    sock = connect_raw(r.address)
    sock.sendall(request(p.LOG_FORWARD, 1, name="s", producer="p", first=0, records=[b"warm"]))
    assert read_frames(sock, 1)[0].body["appended"] == 1
    return log, sock


def _until(cond: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 30
    while not cond():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.001)


class _Read:
    """``fn`` in a thread; ``held()``: no result within half a second, or not ``new`` yet."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.got: list[Any] = []
        self.thread = threading.Thread(target=lambda: self.got.append(fn()), daemon=True)
        self.thread.start()

    def waited(self, shows_new: Callable[[Any], bool]) -> bool:
        self.thread.join(0.5)
        return self.thread.is_alive() or not shows_new(self.got[0])

    def result(self) -> Any:
        self.thread.join(60)
        assert not self.thread.is_alive(), "the read never answered once the gate opened"
        return self.got[0]


def test_a_batch_of_a_write_and_a_slow_read_shows_nothing_before_its_fsync(tmp_path: Path) -> None:
    """One read holding ``SET k new`` then ``KEYS *`` (a redis-py pipeline sends such batches;
    KEYS runs in the pool): the SET runs in a commit round, whose fsync comes first; a GET of
    another connection meanwhile waits for it, over RESP and over the native door."""
    fs = _GatedFsyncs()
    r, port = _resp_running(tmp_path, fs)
    try:
        other = redis.Redis(port=port, socket_timeout=60)
        other.set("k", b"old")
        store = r.server.stores.opened("kv", "default")
        sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        fs.gate.clear()
        sock.sendall(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$3\r\nnew\r\n*2\r\n$4\r\nKEYS\r\n$1\r\n*\r\n")
        _until(lambda: (e := store._state.values.get("k")) is not None and e.value == b"new", "SET decided")
        resp_get = _Read(lambda: other.get("k"))

        def native_get() -> Any:
            with client.connect(r.address) as c:
                return c.kv("default").get("k")

        native = _Read(native_get)
        assert resp_get.waited(lambda v: v == b"new"), "a RESP GET showed a SET before its fsync"
        assert native.waited(lambda v: v == b"new"), "a native GET showed a SET before its fsync"
        fs.gate.set()
        assert resp_get.result() == b"new" and native.result() == b"new"
        got = b""
        while got.count(b"\r\n") < 3:  # +OK, then KEYS's array of one key
            got += sock.recv(4096)
        assert got == b"+OK\r\n*1\r\n$1\r\nk\r\n"
        sock.close()
        other.close()
    finally:
        fs.gate.set()
        r.stop()


def test_a_job_put_is_not_counted_or_shown_before_its_fsync(tmp_path: Path) -> None:
    """An ADDJOB, in the pool, fsyncs after it lets go of the journal: QLEN and QPEEK over RESP
    and jobs.STATS over the native door, sent meanwhile, wait for that fsync."""
    fs = _GatedFsyncs()
    r, port = _resp_running(tmp_path, fs)
    try:
        a = redis.Redis(port=port, socket_timeout=60)
        b = redis.Redis(port=port, socket_timeout=60)
        a.execute_command("ADDJOB", "q", "first", 0)
        journal = r.server.stores.opened("jobs", "q")
        before = journal._log.next_lsn
        fs.gate.clear()
        put = _Read(lambda: a.execute_command("ADDJOB", "q", "second", 0))
        _until(lambda: journal._log.next_lsn > before, "the put written")
        qlen = _Read(lambda: b.execute_command("QLEN", "q"))
        qpeek = _Read(lambda: b.execute_command("QPEEK", "q", 10))

        def stats() -> Any:
            with client.connect(r.address) as c:
                return c.jobs("q").stats()

        native = _Read(stats)
        assert qlen.waited(lambda n: n == 2), "QLEN counted a job before its fsync"
        assert qpeek.waited(lambda jobs: len(jobs) == 2), "QPEEK showed a job before its fsync"
        assert native.waited(lambda s: s["pending"] == 2 if isinstance(s, dict) else s.pending == 2)
        fs.gate.set()
        assert put.result()
        assert qlen.result() == 2 and len(qpeek.result()) == 2
        a.close()
        b.close()
    finally:
        fs.gate.set()
        r.stop()


def test_a_forwarded_record_is_not_read_before_its_fsync(tmp_path: Path) -> None:
    """A log.FORWARD appends in the pool and fsyncs after it lets go of the log: an XRANGE over
    RESP and a log.READ over the native door, sent meanwhile, wait for that fsync."""
    fs = _LogGatedFsyncs()
    fs.only = f"{os.sep}logs{os.sep}s{os.sep}"
    r, port = _resp_running(tmp_path, fs)
    try:
        log, sock = _forwarding(r)
        before = log.next_lsn
        fs.gate.clear()
        sock.sendall(request(p.LOG_FORWARD, 2, name="s", producer="p", first=1, records=[b"forwarded"]))
        _until(lambda: log.next_lsn > before, "the forwarded record written")
        rc = redis.Redis(port=port, socket_timeout=60)
        xrange = _Read(lambda: [fields[b"payload"] for _, fields in rc.xrange("s")])

        def native_read() -> list[bytes]:
            s2 = connect_raw(r.address)
            s2.sendall(request(p.LOG_READ, 3, name="s", start=0))
            records = [rec[2] for rec in read_frames(s2, 1)[0].body["records"]]
            s2.close()
            return records

        native = _Read(native_read)
        assert xrange.waited(lambda got: b"forwarded" in got), "XRANGE showed a record before its fsync"
        assert native.waited(lambda got: b"forwarded" in got), "log.READ showed a record before its fsync"
        fs.gate.set()
        assert xrange.result()[-1] == b"forwarded" and native.result()[-1] == b"forwarded"
        assert read_frames(sock, 1)[0].body["appended"] == 1
        sock.close()
        rc.close()
    finally:
        fs.gate.set()
        r.stop()


def test_a_listen_event_waits_for_the_fsync_of_what_it_shows(tmp_path: Path) -> None:
    """A native LISTEN of a log: the event of a record forwarded into it is sent once the
    record's fsync has returned, not when the record is written (its look runs on a change in
    the log's directory, which comes before the fsync)."""
    fs = _LogGatedFsyncs()
    fs.only = f"{os.sep}logs{os.sep}s{os.sep}"
    r = Running(tmp_path / "data", fs=fs)
    try:
        with client.connect(r.address) as c:
            c.log("s").append(b"old")
        log = r.server.stores.opened("logs", "s")
        listener = connect_raw(r.address)
        listener.sendall(request(p.LISTEN, 7, kind="log", name="s", start="latest"))
        [ok] = read_frames(listener, 1)
        assert ok.body == {"ok": True}
        writer = connect_raw(r.address)
        before = log.next_lsn
        fs.gate.clear()
        writer.sendall(request(p.LOG_FORWARD, 1, name="s", producer="p", first=0, records=[b"new"]))
        _until(lambda: log.next_lsn > before, "the forwarded record written")
        event = _Read(lambda: read_frames(listener, 1)[0].body)
        assert event.waited(lambda body: bool(body.get("records"))), (
            "an event showed a record before its fsync"
        )
        fs.gate.set()
        assert [rec[2] for rec in event.result()["records"]] == [b"new"]
        listener.close()
        writer.close()
    finally:
        fs.gate.set()
        r.stop()


class _FailingFsyncs(_GatedFsyncs):
    """``_GatedFsyncs``, and while ``failing`` is set, every fsync fails with EIO (a disk that
    refuses it)."""

    def __init__(self) -> None:
        super().__init__()
        self.failing = threading.Event()

    def _sync(self) -> None:
        super()._sync()
        if self.failing.is_set():
            raise OSError(errno.EIO, "injected: the disk refused the fsync")


def test_a_failed_fsync_stops_the_daemon_before_any_reply_can_show_its_write(tmp_path: Path) -> None:
    """A SET whose fsync fails: its value is in the store's memory, and maybe in the page cache,
    but nothing says it is on the disk (fsyncgate). As redis-server exits when an ``appendfsync
    always`` fsync fails, the daemon sends no reply from then on (the SET's connection and every
    other is closed: a GET could show the value) and stops. A restart recovers what the disk
    holds, the old value or the new one, and serves again."""
    fs = _FailingFsyncs()
    r, port = _resp_running(tmp_path, fs)
    try:
        reader = redis.Redis(port=port, socket_timeout=60, single_connection_client=True)
        reader.set("k", b"old")
        native = connect_raw(r.address)
        writer = redis.Redis(port=port, socket_timeout=60, single_connection_client=True)
        assert writer.ping()
        fs.failing.set()
        with pytest.raises(redis.ConnectionError):  # (no reply: not even the error's)
            writer.set("k", b"new")
        fs.failing.clear()
        with pytest.raises(redis.ConnectionError):
            reader.get("k")
        native.sendall(request(p.KV_GET, 1, name="default", key="k"))
        assert native.recv(4096) == b"", "the native connection answered after the failed fsync"
        r.thread.join(30)
        assert not r.thread.is_alive(), "the daemon went on serving after a failed fsync"
        assert r.server.failure is not None
        native.close()
    finally:
        fs.failing.clear()
        r.stop()
    again, port = _resp_running(tmp_path, _GatedFsyncs())
    try:
        client_again = redis.Redis(port=port, socket_timeout=60)
        assert client_again.get("k") in (b"old", b"new")
        assert client_again.set("k2", b"v") and client_again.get("k2") == b"v"
        client_again.close()
    finally:
        again.stop()


def test_a_transaction_does_not_show_a_job_put_or_a_forwarded_record_before_its_fsync(tmp_path: Path) -> None:
    """An EXEC runs in a commit round; what its queued reads read was written outside any round
    (a job's put, a forwarded append: in the pool, fsynced after they let go of their locks):
    its reply waits for their fsyncs too."""
    fs = _LogGatedFsyncs()
    r, port = _resp_running(tmp_path, fs)
    try:
        rc = redis.Redis(port=port, socket_timeout=60, single_connection_client=True)
        for name in ("QLEN", "XRANGE", "SET", "EXEC"):
            rc.set_response_callback(name, lambda reply, **_: reply)
        a = redis.Redis(port=port, socket_timeout=60)
        a.execute_command("ADDJOB", "q", "first", 0)
        journal = r.server.stores.opened("jobs", "q")
        assert rc.execute_command("MULTI") == b"OK"
        assert rc.execute_command("QLEN", "q") == b"QUEUED"
        assert rc.execute_command("SET", "y", "1") == b"QUEUED"
        before = journal._log.next_lsn
        fs.only = f"{os.sep}jobs{os.sep}q{os.sep}"
        fs.gate.clear()
        put = _Read(lambda: a.execute_command("ADDJOB", "q", "second", 0))
        _until(lambda: journal._log.next_lsn > before, "the put written")
        exec_ = _Read(lambda: rc.execute_command("EXEC"))
        assert exec_.waited(lambda reply: reply[0] == 2), "EXEC counted a job before its fsync"
        fs.gate.set()
        assert exec_.result() == [2, b"OK"] and put.result()

        log, sock = _forwarding(r)
        assert rc.execute_command("MULTI") == b"OK"
        assert rc.execute_command("XRANGE", "s", "-", "+") == b"QUEUED"
        assert rc.execute_command("SET", "x", "1") == b"QUEUED"
        before = log.next_lsn
        fs.only = f"{os.sep}logs{os.sep}s{os.sep}"
        fs.gate.clear()
        sock.sendall(request(p.LOG_FORWARD, 2, name="s", producer="p", first=1, records=[b"forwarded"]))
        _until(lambda: log.next_lsn > before, "the forwarded record written")
        exec_ = _Read(lambda: rc.execute_command("EXEC"))
        assert exec_.waited(lambda reply: reply[0][-1][1][-1] == b"forwarded"), (
            "EXEC showed a record before its fsync"
        )
        fs.gate.set()
        entries, ok = exec_.result()
        assert entries[-1][1][-1] == b"forwarded" and ok == b"OK"
        assert read_frames(sock, 1)[0].body["appended"] == 1
        sock.close()
        rc.close()
        a.close()
    finally:
        fs.gate.set()
        r.stop()


def test_an_error_reply_does_not_tell_of_a_write_before_its_fsync(tmp_path: Path) -> None:
    """A job acked by one connection, its fsync held: a second ack of it, by another, is told
    the job is gone only once the first ack is durable (an error's reply shows a write too)."""
    fs = _LogGatedFsyncs()
    r = Running(tmp_path / "data", fs=fs)
    try:
        with client.connect(r.address) as c:
            c.jobs("q").put("k", b"payload")
        taker = connect_raw(r.address)
        taker.sendall(request(p.JOB_TAKE, 1, name="q", lease=60.0))
        job = read_frames(taker, 1)[0].body["job"]
        journal = r.server.stores.opened("jobs", "q")
        before = journal._log.next_lsn
        fs.only = f"{os.sep}jobs{os.sep}q{os.sep}"
        fs.gate.clear()
        first, second = connect_raw(r.address), connect_raw(r.address)
        first.sendall(request(p.JOB_ACK, 2, name="q", id=job["id"], token=job["token"]))
        _until(lambda: journal._log.next_lsn > before, "the first ack written")
        second.sendall(request(p.JOB_ACK, 3, name="q", id=job["id"], token=job["token"]))
        again = _Read(lambda: read_frames(second, 1)[0])
        assert again.waited(lambda frame: bool(frame.flags & p.FLAG_ERROR)), (
            "an error told of an ack before its fsync"
        )
        fs.gate.set()
        assert again.result().flags & p.FLAG_ERROR
        assert not read_frames(first, 1)[0].flags & p.FLAG_ERROR
        for sock in (taker, first, second):
            sock.close()
    finally:
        fs.gate.set()
        r.stop()


def test_a_failed_fsync_of_a_consumer_group_stops_the_daemon(tmp_path: Path) -> None:
    """A consumer group's store (beside its stream) is the daemon's too: an XREADGROUP whose
    group op's fsync fails stops the daemon as any store's does; no reply goes out after it."""
    fs = _FailingFsyncs()
    r, port = _resp_running(tmp_path, fs)
    try:
        rc = redis.Redis(port=port, socket_timeout=60, single_connection_client=True)
        other = redis.Redis(port=port, socket_timeout=60, single_connection_client=True)
        rc.set("k", "v")
        rc.xgroup_create("s", "g", id="0", mkstream=True)
        rc.xadd("s", {"f": "1"})
        assert other.ping()
        fs.failing.set()
        with pytest.raises(redis.ConnectionError):
            rc.xreadgroup("g", "c", {"s": ">"})
        fs.failing.clear()
        with pytest.raises(redis.ConnectionError):
            other.get("k")
        r.thread.join(30)
        assert not r.thread.is_alive(), "the daemon went on serving after a group's fsync failed"
    finally:
        fs.failing.clear()
        r.stop()


class _OneStoreFull(FileSystem):
    """Once ``armed``, the next write into a segment of a path holding ``full`` fails with
    ENOSPC (that store's disk space ran out: its write fails, the daemon goes on); every fsync
    is counted by path."""

    def __init__(self, full: str) -> None:
        self.full = full
        self.armed = False
        self.fsyncs: dict[str, int] = {}
        self._lock = threading.Lock()

    def synced(self, part: str) -> int:
        with self._lock:
            return sum(n for path, n in self.fsyncs.items() if part in path)

    def fdatasync(self, fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        with self._lock:
            self.fsyncs[path] = self.fsyncs.get(path, 0) + 1
        super().fdatasync(fd)

    fsync = fdatasync

    def pwrite(self, fd: int, data: bytes, offset: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        if self.armed and self.full in path and path.endswith(".seg"):
            self.armed = False
            raise OSError(errno.ENOSPC, "no space left on device (injected)")
        super().pwrite(fd, data, offset)


@pytest.mark.parametrize("own_kv", [True, False], ids=["round-on-the-loop", "round-on-the-thread"])
def test_a_round_whose_write_failed_makes_the_other_stores_writes_durable(
    tmp_path: Path, own_kv: bool
) -> None:
    """One batch sets a key in store ``a`` and one in store ``b``: one commit round, whose write
    to ``b`` fails (its disk full). ``a``'s op is written and applied all the same (each store's
    ops are written when its decision ends), so a read may show it: the round makes it durable
    before its error replies go, as before any read counts the round answered."""
    fs = _OneStoreFull("/kv/b/")
    r = Running(tmp_path / "data", fs=fs, own_kv=own_kv)
    try:
        with client.connect(r.address) as c:
            for name in ("a", "b"):
                c.kv(name).set("k", b"old")
        sock = connect_raw(r.address)
        before = fs.synced("/kv/a/")
        fs.armed = True
        sock.sendall(
            request(p.KV_SET, 1, name="a", key="k", value=b"new")
            + request(p.KV_SET, 2, name="b", key="k", value=b"new")
        )
        replies = read_frames(sock, 2)
        assert not fs.armed, "the write to b never failed"
        assert all(f.flags & p.FLAG_ERROR for f in replies), [f.body for f in replies]
        # (the store's advice about space, once: the SET's decision inside the round's)
        assert all(f.body["message"].count("a delete is an op too") == 1 for f in replies), replies[0].body
        assert fs.synced("/kv/a/") > before, "the error replies went with a's write not fsynced"
        with client.connect(r.address) as c:
            assert c.kv("a").get("k") == b"new"  # (applied: shown, and durable)
            assert c.kv("b").set("k2", b"after")  # (the store takes writes again)
        sock.close()
    finally:
        r.stop()


class _DataDirFsyncFails(FileSystem):
    """Once ``armed``, the next fsync of the directory ``path`` fails with EIO."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)
        self.armed = False

    def fsync_dir(self, path: str) -> None:
        if self.armed and os.path.realpath(path) == os.path.realpath(self.path):
            self.armed = False
            raise OSError(errno.EIO, "input/output error (injected)")
        super().fsync_dir(path)


def test_a_failed_fsync_of_the_data_directory_stops_the_daemon(tmp_path: Path) -> None:
    """The first key-value store makes DATA/kv; the fsync of DATA that makes it durable fails.
    The daemon stops with no reply (a store created in that directory could be lost whole by a
    power cut, and the next call would find the directory and not fsync it again); a restart
    serves the store."""
    fs = _DataDirFsyncFails(tmp_path / "data")
    r = Running(tmp_path / "data", fs=fs)
    try:
        sock = connect_raw(r.address)
        fs.armed = True
        sock.sendall(request(p.KV_SET, 1, name="first", key="k", value=b"v"))
        assert sock.recv(4096) == b"", "the daemon answered after the failed fsync"
        assert not fs.armed, "the data directory's fsync was never made"
        r.thread.join(30)
        assert not r.thread.is_alive(), "the daemon went on serving after a failed fsync"
        assert r.server.failure is not None
        sock.close()
    finally:
        fs.armed = False
        r.stop()
    again = Running(tmp_path / "data", fs=FileSystem())
    try:
        with client.connect(again.address) as c:
            assert c.kv("first").set("k", b"v") and c.kv("first").get("k") == b"v"
    finally:
        again.stop()


def test_a_failed_fsync_of_the_data_directory_for_consumer_groups_stops_the_daemon(tmp_path: Path) -> None:
    """The same for DATA/groups, made by the first XGROUP CREATE (through the I/O seam too)."""
    fs = _DataDirFsyncFails(tmp_path / "data")
    r, port = _resp_running(tmp_path, fs)
    try:
        c = redis.Redis(port=port, socket_timeout=60, single_connection_client=True)
        c.xadd("s", {"f": "v"})
        fs.armed = True
        with pytest.raises(redis.ConnectionError):  # (no reply: not even the error's)
            c.xgroup_create("s", "g", id="0")
        assert not fs.armed, "the data directory's fsync was never made"
        r.thread.join(30)
        assert not r.thread.is_alive(), "the daemon went on serving after a failed fsync"
        c.close()
    finally:
        fs.armed = False
        r.stop()


def _requests(r: Running, command: bytes) -> int:
    """How many ``command`` the RESP door has run (counted as each runs)."""
    assert r.server.resp is not None
    return r.server.resp.requests[command]


def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():  # bounded by the deadline
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


def test_a_get_that_extends_a_touch_ttl_answers_after_the_touch_is_durable(tmp_path: Path) -> None:
    """A GET of a key with a touch TTL writes its extension (a TOUCH op, as Redis's GETEX
    writes): it runs in the pool, never on the loop, and answers once that op is fsynced; the
    loop answers meanwhile (a native PING), and a PTTL of another connection, which would show
    the new expiry, waits for that fsync too (the store's mutex is held through it).
    A batch whose GET goes to the pool so runs each command before it once (MULTI's state)."""
    fs = _LogGatedFsyncs()
    r, port = _resp_running(tmp_path, fs)
    try:
        with client.connect(r.address) as c:
            c.kv("default").set("sess", b"v", touch=30)
        reader = redis.Redis(port=port, socket_timeout=60, single_connection_client=True)
        watcher = redis.Redis(port=port, socket_timeout=60, single_connection_client=True)
        assert watcher.ping()
        pinger = connect_raw(r.address)
        time.sleep(0.35)  # (a read records a touch once it moves the expiry by 1% of the TTL)
        expiry_before = time.time() * 1000 + reader.pttl("sess")
        fs.only = "kv/default"
        fs.gate.clear()
        got: list[object] = []
        gets = _requests(r, b"GET")
        t = threading.Thread(target=lambda: got.append(reader.get("sess")))
        t.start()
        _until(lambda: _requests(r, b"GET") > gets, "the GET never ran")  # (in the pool, at its fsync)
        pinger.sendall(request(p.PING, 1))
        assert (
            not read_frames(pinger, 1)[0].flags & p.FLAG_ERROR
        )  # (the loop is free: the touch waits in the pool)
        seen: list[object] = []
        w = threading.Thread(target=lambda: seen.append(watcher.pttl("sess")))
        w.start()
        t.join(0.5)
        w.join(0.01)
        assert not got, "the GET answered before its touch was fsynced"
        assert not seen, "a PTTL showed the touch before it was fsynced"
        fs.gate.set()
        t.join(30)
        w.join(30)
        assert got == [b"v"]
        assert time.time() * 1000 + reader.pttl("sess") > expiry_before + 200  # (moved by 350 ms or more)
        # MULTI, then in one read: a GET (queued), DISCARD, and a GET that writes its touch
        time.sleep(0.35)
        assert reader.execute_command("MULTI") == b"OK"
        pipe = reader.connection
        assert pipe is not None
        pipe.send_packed_command(
            [b"*2\r\n$3\r\nGET\r\n$1\r\na\r\n*1\r\n$7\r\nDISCARD\r\n*2\r\n$3\r\nGET\r\n$4\r\nsess\r\n"]
        )
        assert [pipe.read_response() for _ in range(3)] == [b"QUEUED", b"OK", b"v"]
        reader.close()
        pinger.close()
        watcher.close()
    finally:
        fs.gate.set()
        r.stop()


def test_a_round_alone_whose_write_fails_answers_each_client_an_error_and_changes_nothing(
    tmp_path: Path,
) -> None:
    """The disk full (ENOSPC through the ``_fs`` seam) for the write of a round of plain SETs
    written alone: each client of the round gets an error reply, no key changes, and the next
    round is written alone again; after a restart the keys hold what was acknowledged."""
    fs = _OneStoreFull("/kv/default/")
    r = Running(tmp_path / "data", fs=fs, resp=RespOptions(host="127.0.0.1", port=0))
    assert r.server.resp is not None
    port = r.server.resp.options.port
    try:
        c = redis.Redis(port=port, socket_timeout=30)
        try:
            assert c.set("k", "old")
            before = _stats(port)
            fs.armed = True
            with pytest.raises(redis.ResponseError, match=r"[Nn]o space left"):
                c.set("k", "new")
            assert not fs.armed, "the write never failed"
            assert c.get("k") == b"old"
            assert c.set("k", "after") and c.get("k") == b"after"
            after = _stats(port)
            assert after["logspool_commit_rounds_alone"] - before["logspool_commit_rounds_alone"] == 1
        finally:
            c.close()
    finally:
        r.stop()
    r = Running(tmp_path / "data", resp=RespOptions(host="127.0.0.1", port=0))
    assert r.server.resp is not None
    try:
        c = redis.Redis(port=r.server.resp.options.port, socket_timeout=30)
        try:
            assert c.get("k") == b"after"
        finally:
            c.close()
    finally:
        r.stop()
