"""The native door on the daemon's engine (server/_native.py): frames decoded on the event loop,
reads answered there, writes of every connection in shared commit rounds.

What it proves, each on real sockets on 127.0.0.1 (raw frames where the test needs a whole batch
to arrive in one read) and, for the crash, a real ``logspool serve`` killed with SIGKILL:
- kv.GET's ``value_only`` replies are the documented bytes (PROTOCOL.md's ``wire`` blocks) and
  answer what ``get``, ``store[key]`` and ``in`` need, for every value type, a probe and a touch
  TTL (which the pool extends); the client also reads an older daemon's whole-map reply;
- a batch of writes that holds a failing request answers each request on its own;
- a connection bounded to 2 requests in flight still gets every reply of 200 pipelined ones;
- a protocol error after pipelined writes answers those writes, then closes;
- pipelined SETs and appends of 8 connections killed mid-way with SIGKILL: every one that got
  its reply is there after a restart;
- a power cut right after the replies (the disk holding only what was fsynced, through the
  ``_fs`` seam): every answered SET and append is there (a reply follows its round's fsync).
"""

from __future__ import annotations

import random
import re
import socket
import time
from pathlib import Path

import pytest

import logspool
from logspool import _remote, client, errors, kv, limits
from logspool import _wire as p
from logspool.server import Limits
from tests.crash.faultfs import FaultFS, materialize
from tests.server.conftest import Daemon, Running

ROOT = Path(__file__).resolve().parents[2]


def wire_blocks() -> dict[str, bytes]:
    text = (ROOT / "docs" / "PROTOCOL.md").read_text()
    return {
        name: bytes.fromhex(block.replace("\n", " "))
        for name, block in re.findall(r"```wire ([a-z-]+)\n(.*?)```", text, re.S)
    }


def test_the_value_only_vectors_of_protocol_md() -> None:
    expected = {
        "get-value-only": p.Frame(p.REQUEST, p.KV_GET, 0, 5, {"name": "cfg", "key": "n", "value_only": True}),
        "get-value-only-reply": p.Frame(p.REPLY, p.KV_GET, 0, 5, {"found": True, "value": 42}),
        "get-value-only-missing": p.Frame(p.REPLY, p.KV_GET, 0, 6, {"found": False}),
    }
    found = wire_blocks()
    assert sorted(found) == sorted(expected)
    for name, frame in expected.items():
        assert list(p.decode_frames(found[name], 1 << 20)) == [frame], name
        encoded = p.encode_frame(frame.kind, frame.command, frame.request_id, frame.body, frame.flags)
        assert encoded == found[name], name


def connect_raw(address: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def read_frames(sock: socket.socket, count: int | None, deadline_s: float = 30.0) -> list[p.Frame]:
    """``count`` frames (or every frame until the server closes, if None), within the deadline."""
    buf = b""
    frames: list[p.Frame] = []
    deadline = time.monotonic() + deadline_s
    while count is None or len(frames) < count:
        assert time.monotonic() < deadline, f"got {len(frames)} frames of {count}"
        data = sock.recv(1 << 20)
        if not data:
            assert count is None, f"closed after {len(frames)} frames of {count}"
            break
        buf += data
        at = 0
        while len(buf) - at >= p.HEADER_SIZE:
            size = int.from_bytes(buf[at + 12 : at + 16], "big")
            if len(buf) - at < p.HEADER_SIZE + size:
                break
            frames += p.decode_frames(buf[at : at + p.HEADER_SIZE + size], 1 << 30)
            at += p.HEADER_SIZE + size
        buf = buf[at:]
    return frames


def request(command: int, request_id: int, **body: object) -> bytes:
    return p.encode_frame(p.REQUEST, command, request_id, dict(body))


def test_value_only_get_answers_get_getitem_and_in(running: Running) -> None:
    with client.connect(running.address) as c:
        s = c.kv("typed")
        values: dict[str, object] = {"b": b"\x00raw", "s": "text", "i": -7, "f": 2.5, "t": True, "n": None}
        for key, value in values.items():
            s.set(key, value)
        for key, value in values.items():
            assert s.get(key, "default") == value and s[key] == value and key in s
        assert s.get("missing", "default") == "default" and "missing" not in s
        with pytest.raises(KeyError):
            s["missing"]
        s.set("touched", b"x", touch=5)  # a touch TTL: a read extends it (in the pool)
        before = s.entry("touched", touch=False)
        assert before is not None and before.expire_at is not None
        deadline = time.monotonic() + 4  # (an extension is recorded once it moves the expiry 50 ms)
        extended = False
        while not extended and time.monotonic() < deadline:
            assert s.get("touched") == b"x"
            after = s.entry("touched", touch=False)
            extended = (
                after is not None and after.expire_at is not None and after.expire_at > before.expire_at
            )
            time.sleep(0.01)
        assert extended
    sock = connect_raw(running.address)
    sock.sendall(request(p.KV_GET, 1, name="typed", key="i", value_only=True, data=False)
                 + request(p.KV_GET, 2, name="typed", key="", value_only=True))  # fmt: skip
    replies = {f.request_id: f for f in read_frames(sock, 2)}
    assert replies[1].body == {"found": True} and not replies[1].flags
    assert replies[2].flags & p.FLAG_ERROR and replies[2].body["error"] == "ValueError"
    sock.close()


def test_the_client_reads_a_whole_map_reply_from_a_daemon_before_value_only() -> None:
    old_found = {"value": {"key": "k", "value": b"v"}}  # (the older daemon's reply, abridged)
    old_missing: dict[str, object] = {"value": None}
    assert _remote._found("d")(old_found) == b"v" and _remote._found("d")(old_missing) == "d"
    assert _remote._must("path", "k")(old_found) == b"v"
    with pytest.raises(errors.KeyNotFoundError):
        _remote._must("path", "k")(old_missing)
    assert _remote._present(old_found) and not _remote._present(old_missing)


def test_a_batch_of_writes_answers_each_request_on_its_own(running: Running) -> None:
    with client.connect(running.address) as c:
        c.kv("batch").set("warm", 1)  # (open: the batch goes to a round, not to the pool first)
    sock = connect_raw(running.address)
    sock.sendall(request(p.KV_SET, 1, name="batch", key="a", value=1)
                 + request(p.KV_NOT, 2, name="batch", key="missing")
                 + request(p.KV_ADD, 3, name="batch", key="a", amount=2)
                 + request(p.LOG_APPEND, 4, name="batch-log", records=[b"x", b"y"])
                 + request(p.LOG_APPEND, 5, name="batch-log", records=["not bytes"])
                 + request(p.KV_GET, 6, name="batch", key="warm", value_only=True))  # fmt: skip
    replies = {f.request_id: f for f in read_frames(sock, 6)}
    sock.close()
    assert replies[1].body == {"ok": True} and not replies[1].flags
    assert replies[2].flags & p.FLAG_ERROR and replies[2].body["error"] == "KeyNotFoundError"
    assert replies[3].body == {"value": 3}
    assert replies[4].body == {"first": 0, "count": 2}
    assert replies[5].flags & p.FLAG_ERROR and replies[5].body["error"] == "TypeError"
    assert replies[6].body == {"found": True, "value": 1}
    with client.connect(running.address) as c:
        assert c.kv("batch").get("a") == 3
        assert [r.payload for r in c.log("batch-log").read_page("earliest")[0]] == [b"x", b"y"]


def test_two_in_flight_at_most_and_every_reply_of_200_pipelined_requests(tmp_path: Path) -> None:
    r = Running(tmp_path / "data", limits=Limits(in_flight_max=2))
    try:
        sock = connect_raw(r.address)
        frames = b"".join(
            request(p.KV_SET, i, name="bounded", key=f"k{i % 10}", value=i)
            if i % 3
            else request(p.KV_GET, i, name="bounded", key="k1", value_only=True)
            for i in range(1, 201)
        )
        sock.sendall(frames)
        replies = read_frames(sock, 200, 60)
        sock.close()
        assert sorted(f.request_id for f in replies) == list(range(1, 201))
        assert not [f for f in replies if f.flags & p.FLAG_ERROR]
    finally:
        r.stop()


def test_a_protocol_error_after_pipelined_writes_answers_them_then_closes(running: Running) -> None:
    sock = connect_raw(running.address)
    writes = b"".join(request(p.KV_SET, i, name="cut", key=f"k{i}", value=i) for i in (1, 2, 3))
    sock.sendall(writes + b"XX" + bytes(14))
    replies = read_frames(sock, None)
    sock.close()
    assert {f.request_id: f.body for f in replies if not f.flags} == {1: {"ok": True}, 2: {"ok": True},
                                                                      3: {"ok": True}}  # fmt: skip
    [refusal] = [f for f in replies if f.flags & p.FLAG_ERROR]
    assert refusal.body["error"] == "ProtocolError"
    with client.connect(running.address) as c:  # the daemon serves on
        assert c.kv("cut").get("k3") == 3


def test_kill_9_under_pipelined_writes_of_8_connections_loses_nothing_acknowledged(tmp_path: Path) -> None:
    d = Daemon(tmp_path / "data").start()
    acked_keys: set[str] = set()
    acked_records: set[bytes] = set()
    try:
        with client.connect(d.address) as c:  # (open both stores: the writes go to rounds)
            c.kv("crash").set("warm", 0)
            c.log("crash-log").append(b"warm")
        socks = [connect_raw(d.address) for _ in range(8)]
        pending: dict[tuple[int, int], tuple[str, bytes]] = {}
        killed_after = 0
        for turn in range(200):  # bounded: 200 windows of 8 requests a connection
            for n, sock in enumerate(socks):
                window = []
                for j in range(8):
                    rid = turn * 8 + j
                    key, record = f"c{n}-{rid}", b"c%d-%d" % (n, rid)
                    if j % 2:
                        window.append(request(p.LOG_APPEND, rid, name="crash-log", records=[record]))
                    else:
                        window.append(request(p.KV_SET, rid, name="crash", key=key, value=rid))
                    pending[(n, rid)] = (key, record)
                sock.sendall(b"".join(window))
            if turn == 20:
                d.kill()  # mid-stream: windows sent, some answered, some not
                killed_after = turn
                break
            for n, sock in enumerate(socks):
                for frame in read_frames(sock, 8):
                    assert not frame.flags, frame
                    key, record = pending.pop((n, frame.request_id))
                    if frame.command == p.KV_SET:
                        acked_keys.add(key)
                    else:
                        acked_records.add(record)
        # Replies that were already in the sockets when the daemon died were acknowledged too.
        for n, sock in enumerate(socks):
            sock.settimeout(5)
            try:
                for frame in read_frames(sock, None, 10):
                    if not frame.flags and (n, frame.request_id) in pending:
                        key, record = pending.pop((n, frame.request_id))
                        if frame.command == p.KV_SET:
                            acked_keys.add(key)
                        else:
                            acked_records.add(record)
            except (ConnectionError, TimeoutError, OSError):
                pass
            sock.close()
        assert killed_after == 20 and len(acked_keys) >= 8 * 4 * 20
        with kv.open(tmp_path / "data" / "kv" / "crash") as store:
            missing = [k for k in acked_keys if store.get(k) is None]
        assert not missing, f"{len(missing)} acknowledged SETs are missing, e.g. {missing[:3]}"
        with logspool.open(tmp_path / "data" / "logs" / "crash-log") as log:
            payloads = [r.payload for r in log.read("earliest")]
        assert len(payloads) == len(set(payloads)), "a record appears twice"
        assert not acked_records - set(payloads)
    finally:
        d.kill()


def test_a_power_cut_after_the_replies_keeps_every_acknowledged_write(tmp_path: Path) -> None:
    """The disk as a power cut right after the replies may leave it (only what was fsynced,
    tests/crash/faultfs.py): every SET and append the daemon answered, written by pipelined
    requests of 4 connections in shared rounds, is there."""
    data = tmp_path / "data"
    data.mkdir()
    fs = FaultFS(str(data))
    r = Running(data, fs=fs)
    try:
        with client.connect(r.address) as c:  # (open both stores: the writes go to rounds)
            c.kv("power").set("warm", 0)
            c.log("power-log").append(b"warm")
        socks = [connect_raw(r.address) for _ in range(4)]
        for n, sock in enumerate(socks):
            sock.sendall(b"".join(
                request(p.KV_SET, i, name="power", key=f"c{n}-{i}", value=i) if i % 2
                else request(p.LOG_APPEND, i, name="power-log", records=[b"c%d-%d" % (n, i)])
                for i in range(40)
            ))  # fmt: skip
        for sock in socks:
            replies = read_frames(sock, 40)
            assert not [f for f in replies if f.flags], replies
            sock.close()
        state = next(fs.crash_states(random.Random(34), 1))  # the strict state: only what was fsynced
    finally:
        r.stop()
        fs.release()
    after = tmp_path / "after"
    materialize(state, str(after))
    with kv.open(after / "kv" / "power") as store:
        missing = [f"c{n}-{i}" for n in range(4) for i in range(1, 40, 2) if store.get(f"c{n}-{i}") != i]
    assert not missing, f"{len(missing)} acknowledged SETs are gone, e.g. {missing[:3]}"
    with logspool.open(after / "logs" / "power-log") as log:
        payloads = {rec.payload for rec in log.read("earliest")}
    assert {b"c%d-%d" % (n, i) for n in range(4) for i in range(0, 40, 2)} <= payloads


@pytest.mark.parametrize("own_kv", [None, True], ids=["default", "own_kv"])
def test_the_daemon_owns_its_key_value_stores_until_it_stops(tmp_path: Path, own_kv: bool | None) -> None:
    """``Server()`` (or ``own_kv=True``): the daemon holds each key-value store's writer lock
    from its first use to its stop (an embedded open gives up with LockedError), and serves it
    as before."""
    r = Running(tmp_path / "data", own_kv=own_kv)
    try:
        with client.connect(r.address) as c:
            s = c.kv("owned")
            s.set("a", b"1")
            s.add("n", 5)
            assert s.get("a") == b"1" and s["n"] == 5 and "a" in s
        with pytest.raises(errors.LockedError):
            kv.open(tmp_path / "data" / "kv" / "owned", lock_timeout_s=0.5)
    finally:
        r.stop()
    with kv.open(tmp_path / "data" / "kv" / "owned") as store:
        assert store.get("a") == b"1" and store.get("n") == 5


def test_plain_sets_of_many_connections_at_once_answer_each_as_alone(running: Running) -> None:
    """A commit round writes the plain kv.SETs of its connections with one write (``plain_sets``),
    each answered as ``Store.set`` alone would answer it: 16 raw connections send their SETs at
    once, turn after turn. A key locked by an owner is refused to every plain SET (they name no
    owner) and set by the SET that names the owner; a value keeps its type; an empty key, a key
    over the limit and a value of a type the store refuses get their own errors and take no one
    else's SET with them; a SET to another store and three SETs of one key in one read land too.
    What each key holds at the end is the last value its connection set."""
    with client.connect(running.address) as c:
        c.kv("round").lock("locked", "owner-7", 60)
        c.kv("round-other").set("warm", 0)
    socks = [connect_raw(running.address) for _ in range(16)]
    long_key = "k" * (limits.KV_KEY_SIZE_MAX + 1)
    try:
        for turn in range(40):  # each turn: every connection's SETs sent before any reply is read
            sent: dict[int, int] = {}
            for i, sock in enumerate(socks):
                rid = turn * 100 + i
                if i == 3:
                    frames = request(p.KV_SET, rid, name="round", key="int", value=turn * 10)
                elif i == 5:
                    frames = request(p.KV_SET, rid, name="round", key=("", long_key)[turn % 2], value=b"x")
                elif i == 6:
                    frames = request(p.KV_SET, rid, name="round", key="list", value=[turn])
                elif i == 7:
                    frames = request(p.KV_SET, rid, name="round", key="locked", value=b"by-7-%d" % turn,
                                     owner="owner-7")  # fmt: skip
                elif i == 9:
                    frames = request(p.KV_SET, rid, name="round", key="locked", value=b"by-9-%d" % turn)
                elif i == 11:
                    frames = request(p.KV_SET, rid, name="round-other", key="o", value=b"o-%d" % turn)
                elif i == 13:
                    frames = b"".join(
                        request(
                            p.KV_SET, rid + 10_000 * n, name="round", key="three", value=b"%d-%d" % (turn, n)
                        )
                        for n in range(3)
                    )
                else:
                    frames = request(p.KV_SET, rid, name="round", key=f"k{i}", value=b"v-%d-%d" % (i, turn))
                sock.sendall(frames)
                sent[i] = 3 if i == 13 else 1
            for i, sock in enumerate(socks):
                replies = read_frames(sock, sent[i])
                for reply in replies:
                    if i in (5, 6, 9):
                        assert reply.flags & p.FLAG_ERROR, (i, turn, reply.body)
                        expected = {5: "ValueError", 6: "TypeError", 9: "KeyLockedError"}[i]
                        assert reply.body["error"] == expected, (i, turn, reply.body)
                    else:
                        assert not reply.flags & p.FLAG_ERROR and reply.body == {"ok": True}, (
                            i,
                            turn,
                            reply.body,
                        )
                assert sorted(r.request_id for r in replies) == sorted(
                    turn * 100 + i + 10_000 * n for n in range(sent[i])
                )
    finally:
        for sock in socks:
            sock.close()
    with client.connect(running.address) as c:
        s = c.kv("round")
        assert s.get("locked") == b"by-7-39" and s.get("int") == 390 and s.get("three") == b"39-2"
        assert s.get("list") is None and s.get(long_key[:-1]) is None
        assert c.kv("round-other").get("o") == b"o-39"
        for i in set(range(16)) - {3, 5, 6, 7, 9, 11, 13}:
            assert s.get(f"k{i}") == b"v-%d-39" % i


@pytest.mark.parametrize("own_kv", [None, False], ids=["owned", "shared"])
def test_a_store_that_fails_its_decision_fails_only_its_own_sets(tmp_path: Path, own_kv: bool | None) -> None:
    """A store closed while the daemon serves it (as its eviction past ``stores_max`` closes one)
    fails the decision of every SET to it; the plain SETs of the same rounds to another store
    are each answered +ok and land: one store's error is its requests' alone, never the round's.
    Owned (rounds on the loop) and shared (a decision that fails to open on the loop)."""
    running = Running(tmp_path / "data", own_kv=own_kv)
    try:
        _fails_only_its_own_sets(running)
    finally:
        running.stop()


def _fails_only_its_own_sets(running: Running) -> None:
    with client.connect(running.address) as c:
        c.kv("good").set("warm", 0)
        c.kv("bad").set("warm", 0)
    running.server.stores.opened("kv", "bad").close()
    socks = [connect_raw(running.address) for _ in range(8)]
    try:
        for turn in range(30):
            for i, sock in enumerate(socks):
                sock.sendall(
                    request(p.KV_SET, i, name="bad" if i == 0 else "good", key=f"k{i}", value=b"%d" % turn)
                )
            for i, sock in enumerate(socks):
                [reply] = read_frames(sock, 1)
                if i == 0:
                    assert reply.flags & p.FLAG_ERROR and reply.body["error"] == "ClosedError", reply.body
                else:
                    assert not reply.flags & p.FLAG_ERROR and reply.body == {"ok": True}, (
                        turn,
                        i,
                        reply.body,
                    )
    finally:
        for sock in socks:
            sock.close()
    with client.connect(running.address) as c:
        assert all(c.kv("good").get(f"k{i}") == b"29" for i in range(1, 8))


def test_a_set_with_its_options_at_their_defaults_or_not(running: Running) -> None:
    """The round's plain-SET path takes a SET whose options are absent or their defaults (as
    clients before this daemon sent them); anything else, a wrong type included, takes the
    handler, which answers as before."""
    with client.connect(running.address) as c:
        c.kv("plain").set("warm", 0)
    sock = connect_raw(running.address)
    sock.sendall(request(p.KV_SET, 1, name="plain", key="a", value=1, overwrite=True, persist=True)
                 + request(p.KV_SET, 2, name="plain", key="a", value=2, overwrite=False)
                 + request(p.KV_SET, 3, name="plain", key="b", value=3, overwrite=1)
                 + request(p.KV_SET, 4, name="plain", key="c", value=4, persist=None))  # fmt: skip
    replies = {f.request_id: f for f in read_frames(sock, 4)}
    sock.close()
    assert replies[1].body == {"ok": True} and replies[2].body == {"ok": False}
    assert replies[3].flags & p.FLAG_ERROR and replies[3].body["error"] == "TypeError"
    assert replies[4].body == {"ok": True}
    with client.connect(running.address) as c:
        s = c.kv("plain")
        assert (s.get("a"), s.get("b"), s.get("c")) == (1, None, 4)
        assert s.set("a", 5, overwrite=False) is False and s.set("d", 6, persist=False) is True
        assert s.get("a") == 1 and s.get("d") == 6
