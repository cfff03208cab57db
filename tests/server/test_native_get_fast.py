"""A read of the client's gets only (kv.GET with ``value_only``, pipelined) is answered on the
event loop without the frame loop (server/_native.py ``_gets_now``, ``_wire.value_only_gets``),
with the same replies, errors, bounds and durability as the frame loop's.

What it proves, on real sockets on 127.0.0.1 against a daemon in a thread:
- each read of gets only (``p.value_only_gets`` takes it: the path under test) is answered byte
  for byte as the frame loop answers the same frames behind a PING (which that path declines),
  and as PROTOCOL.md says: values held as bytes, keys missing, expired, empty-valued or not
  ASCII; the reads it hands on (another type, a touch TTL, a store not open, a key the store
  refuses, two stores) are answered as before, and a touch TTL read so is extended;
- frames cut across two reads, a body over ``frame_size_max``, and gets before HELLO when a
  token is required are answered as the frame loop answers them (and the last two close);
- its gets are counted in STATS;
- a read of gets only sent while a SET of its key is decided but not yet fsynced (the fsync
  held at a gate through the ``_fs`` seam) gets no reply until that fsync returns, then shows
  the new value.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Any

from logspool import _wire as p
from logspool import client, limits
from logspool.server import Limits
from tests.server.conftest import Running
from tests.server.test_loop_rounds import _GatedFsyncs
from tests.server.test_native import connect_raw, read_frames, request


def gets(name: str, keys: list[str], first_id: int = 1) -> bytes:
    """The client's gets of ``keys``, request ids from ``first_id``, as one read."""
    return b"".join(
        request(p.KV_GET, first_id + i, name=name, key=key, value_only=True) for i, key in enumerate(keys)
    )


def answered(sock: socket.socket, data: bytes, count: int) -> dict[int, tuple[int, dict[str, Any]]]:
    """Send ``data`` in one write; ``count`` replies by request id, each (flags, body)."""
    sock.sendall(data)
    return {f.request_id: (f.flags, f.body) for f in read_frames(sock, count)}


def _fill(address: str) -> None:
    with client.connect(address) as c:
        s = c.kv("a")
        s.set("hit", b"v" * 100)
        s.set("empty", b"")
        s.set("clé", b"\xff\x00")
        s.set("str", "text")
        s.set("int", 7)
        s.set("touched", b"t", touch=60)
        s.set("expired", b"x", ttl=0.05)
        c.kv("b").set("hit", b"B")
    time.sleep(0.2)  # ("expired" expires; nothing removes it yet but a later round)


def test_a_read_of_gets_only_answers_as_the_frame_loop_does(running: Running) -> None:
    _fill(running.address)
    found: dict[str, Any] = {"hit": b"v" * 100, "empty": b"", "clé": b"\xff\x00", "str": "text", "int": 7,
                             "touched": b"t", "b:hit": b"B"}  # fmt: skip
    long_key = "k" * (limits.KV_KEY_SIZE_MAX + 1)
    reads: list[tuple[str, list[str], bool]] = [  # (store, keys, taken by value_only_gets)
        ("a", ["hit", "missing", "clé", "empty", "hit", "expired"] * 3, True),
        ("a", ["hit"], True),
        ("a", ["hit", "str", "int"], True),  # (another type: the frame loop encodes it)
        ("a", ["hit", "touched"], True),  # (a touch TTL: the pool extends it)
        ("a", ["missing", ""], True),  # (a key the store refuses: its error)
        ("a", ["hit", long_key], True),
        ("never", ["hit", "hit"], True),  # (a store not open: the pool opens it)
    ]
    fast, loop = connect_raw(running.address), connect_raw(running.address)
    try:
        for name, keys, taken in reads:
            data = gets(name, keys)
            assert (p.value_only_gets(data, running.server.limits.frame_size_max) is not None) is taken
            got = answered(fast, data, len(keys))
            behind_ping = answered(loop, request(p.PING, 0) + data, len(keys) + 1)
            del behind_ping[0]
            assert got == behind_ping, (name, keys)
            for i, key in enumerate(keys, 1):
                flags, body = got[i]
                if key in ("", long_key):
                    assert flags & p.FLAG_ERROR and body["error"] == "ValueError", (key, body)
                    continue
                assert not flags, (key, body)
                where = key if name == "a" else f"{name}:{key}"
                assert body == (
                    {"found": True, "value": found[where]} if where in found else {"found": False}
                )
        mixed = gets("a", ["hit"]) + gets("b", ["hit"], 2)  # (two stores: the frame loop's)
        assert p.value_only_gets(mixed, 1 << 20) is None
        assert answered(fast, mixed, 2) == {1: (0, {"found": True, "value": b"v" * 100}),
                                            2: (0, {"found": True, "value": b"B"})}  # fmt: skip
    finally:
        fast.close()
        loop.close()


def test_a_read_of_gets_only_extends_a_touch_ttl(running: Running) -> None:
    with client.connect(running.address) as c:
        s = c.kv("a")
        s.set("touched", b"t", touch=5)
        before = s.entry("touched", touch=False)
        assert before is not None and before.expire_at is not None
        sock = connect_raw(running.address)
        deadline = time.monotonic() + 4  # (an extension is recorded once it moves the expiry 50 ms)
        extended = False
        while not extended and time.monotonic() < deadline:
            got = answered(sock, gets("a", ["touched"] * 4), 4)
            assert all(reply == (0, {"found": True, "value": b"t"}) for reply in got.values())
            after = s.entry("touched", touch=False)
            extended = (
                after is not None and after.expire_at is not None and after.expire_at > before.expire_at
            )
            time.sleep(0.01)
        sock.close()
        assert extended


def test_gets_cut_across_reads_are_answered_whole(running: Running) -> None:
    _fill(running.address)
    sock = connect_raw(running.address)
    try:
        data = gets("a", ["hit", "missing", "hit"])
        cut = len(data) // 2 + 3  # (inside the second frame)
        sock.sendall(data[:cut])
        time.sleep(0.1)  # (the first part arrives alone)
        got = answered(sock, data[cut:], 3)
        assert got == {1: (0, {"found": True, "value": b"v" * 100}), 2: (0, {"found": False}),
                       3: (0, {"found": True, "value": b"v" * 100})}  # fmt: skip
    finally:
        sock.close()


def test_a_get_over_the_frame_size_max_is_refused_after_those_before_it(tmp_path: Path) -> None:
    r = Running(tmp_path / "data", limits=Limits(frame_size_max=200))
    try:
        _fill(r.address)
        sock = connect_raw(r.address)
        data = gets("a", ["hit", "k" * 300, "hit"])
        assert p.value_only_gets(data, 1 << 20) is not None  # (taken, but for the bound)
        sock.sendall(data)
        replies = read_frames(sock, None)  # (until the daemon closes)
        assert [(f.request_id, f.flags) for f in replies] == [(1, 0), (2, p.FLAG_ERROR)]
        assert replies[0].body == {"found": True, "value": b"v" * 100}
        assert (
            replies[1].body["error"] == "ProtocolError"
            and "over the limit of 200" in replies[1].body["message"]
        )
        sock.close()
    finally:
        r.stop()


def test_gets_before_hello_are_refused_when_a_token_is_required(tmp_path: Path) -> None:
    r = Running(tmp_path / "data", token="s3cret")
    try:
        with client.connect(r.address, token="s3cret") as c:
            c.kv("a").set("hit", b"v")
        sock = connect_raw(r.address)
        sock.sendall(gets("a", ["hit", "hit"]))
        replies = read_frames(sock, None)  # (until the daemon closes)
        assert (
            len(replies) == 1 and replies[0].flags & p.FLAG_ERROR and replies[0].body["error"] == "AuthError"
        )
        sock.close()
        sock = connect_raw(r.address)  # after HELLO, the same read is answered
        sock.sendall(request(p.HELLO, 9, token="s3cret"))
        [hello] = read_frames(sock, 1)
        assert not hello.flags & p.FLAG_ERROR, hello.body
        got = answered(sock, gets("a", ["hit", "hit"]), 2)
        assert got == {1: (0, {"found": True, "value": b"v"}), 2: (0, {"found": True, "value": b"v"})}
        sock.close()
    finally:
        r.stop()


def test_the_gets_are_counted(running: Running) -> None:
    _fill(running.address)
    sock = connect_raw(running.address)
    try:
        before = answered(sock, request(p.STATS, 1), 1)[1][1]["requests"].get("kv.get", 0)
        answered(sock, gets("a", ["hit"] * 16, 2), 16)
        after = answered(sock, request(p.STATS, 1), 1)[1][1]["requests"].get("kv.get", 0)
        assert after - before == 16
    finally:
        sock.close()


def test_a_read_of_gets_only_waits_for_the_fsync_of_what_it_shows(tmp_path: Path) -> None:
    """A SET of ``k`` decided, its round's fsync held at the gate: 16 gets of ``k`` in one read
    of another connection get no reply before the gate opens, then the new value (a reply that
    would go at once goes within the half second the test waits)."""
    fs = _GatedFsyncs()
    r = Running(tmp_path / "data", fs=fs)
    try:
        with client.connect(r.address) as c:
            s = c.kv("a")
            s.set("k", b"old")
            fs.slow.set()
            for i in range(12):  # (slow fsyncs: the rounds move to the committer's thread)
                s.set(f"slow{i}", i)
        store = r.server.stores.opened("kv", "a")
        reader, writer = connect_raw(r.address), connect_raw(r.address)
        fs.gate.clear()
        writer.sendall(request(p.KV_SET, 1, name="a", key="k", value=b"new"))
        deadline = time.monotonic() + 30
        while (entry := store._state.values.get("k")) is None or entry.value != b"new":  # (decided)
            assert time.monotonic() < deadline, "the SET was never decided"
            time.sleep(0.001)
        got: list[dict[int, tuple[int, dict[str, Any]]]] = []
        getter = threading.Thread(target=lambda: got.append(answered(reader, gets("a", ["k"] * 16), 16)))
        getter.start()
        getter.join(0.5)
        assert getter.is_alive() or got[0][1][1] != {"found": True, "value": b"new"}, (
            "a read of gets only showed a SET whose fsync had not returned"
        )
        fs.gate.set()
        getter.join(60)
        assert not getter.is_alive() and len(got[0]) == 16
        assert all(reply == (0, {"found": True, "value": b"new"}) for reply in got[0].values())
        assert read_frames(writer, 1)[0].body == {"ok": True}
        reader.close()
        writer.close()
    finally:
        fs.gate.set()
        r.stop()
