"""A read that is one plain kv.SET frame goes to the commit rounds without the frame loop
(server/_native.py ``_lone_write``: its header matched as a kv.SET request's fixed bytes, then its
request id and size; ``_wire.decode_set_plain``: its body read by each field's fixed head;
``_native_rounds._plain_set_op``: a value of bytes and a short key taken as ``encode_value`` gives
them; the reply packed in one call), answered as the frame loop answers the same frame.

What it proves, on real sockets on 127.0.0.1 against a daemon in a thread:
- a SET sent alone (the path under test) and the same SET behind a PING in one read (which
  ``_lone_write`` declines: the frame loop's way) get the same reply, byte for byte, the documented
  one ({ok: true}, request ids across their whole range), and store the same value: bytes, empty
  bytes, a string; keys of ASCII and of 2-, 3- and 4-byte characters up to the key limit; a key
  over it (ASCII, or 2- or 4-byte characters: the limit counts bytes, not characters) gets the
  store's error either way;
- frames that look like one and are not: a kv.SET frame of kind reply or of another protocol
  version, a string value that is not UTF-8 and a body with a byte after its map get a
  ProtocolError and close the connection, nothing set; a kv.DELETE whose body has a SET's fields
  deletes; a SET with a flag and a SET cut across two reads are answered as sets.
"""

from __future__ import annotations

import socket
import time
from typing import Any

from logspool import _wire as p
from logspool import client, limits
from tests.server.conftest import Running
from tests.server.test_native import connect_raw, read_frames, request


def raw_replies(sock: socket.socket, count: int) -> list[bytes]:
    """``count`` reply frames, each as its bytes."""
    buf = b""
    out: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(out) < count:
        assert time.monotonic() < deadline, f"got {len(out)} replies of {count}"
        data = sock.recv(1 << 20)
        assert data, f"closed after {len(out)} replies of {count}"
        buf += data
        while len(buf) >= p.HEADER_SIZE and len(buf) >= p.HEADER_SIZE + int.from_bytes(buf[12:16], "big"):
            end = p.HEADER_SIZE + int.from_bytes(buf[12:16], "big")
            out.append(buf[:end])
            buf = buf[end:]
    assert not buf
    return out


def both_ways(address: str, command: int, request_id: int, **body: Any) -> tuple[bytes, bytes]:
    """The reply to a request sent alone (a lone write's path), and to the same request sent
    behind a PING in one read (the frame loop's)."""
    frame = request(command, request_id, **body)
    lone, loop = connect_raw(address), connect_raw(address)
    try:
        lone.sendall(frame)
        (alone,) = raw_replies(lone, 1)
        loop.sendall(request(p.PING, 1) + frame)
        replies = raw_replies(loop, 2)
        behind = next(r for r in replies if r[4:6] == command.to_bytes(2, "big"))
        return alone, behind
    finally:
        lone.close()
        loop.close()


def _set_both_ways(address: str, name: str, key: str, value: object, request_id: int) -> tuple[bytes, bytes]:
    """The reply to a SET sent alone, and to the same SET sent behind a PING in one read."""
    return both_ways(address, p.KV_SET, request_id, name=name, key=key, value=value)


def test_a_lone_set_answers_and_stores_as_the_frame_loop_does(running: Running) -> None:
    with client.connect(running.address) as c:
        c.kv("fast").set("warm", b"w")  # (the store open: a lone SET of it takes the path)
        c.kv("loop").set("warm", b"w")
    key_max = limits.KV_KEY_SIZE_MAX
    cases: list[tuple[str, object, bool]] = [  # key, value, set
        ("k", b"v" * 100, True),
        ("empty", b"", True),
        ("text", "une chaîne", True),
        ("clé-ü", b"\xff\x00", True),
        ("a" * key_max, b"ascii at the limit", True),
        ("é" * (key_max // 2), b"2-byte characters at the limit", True),
        ("€" * (key_max // 3), b"3-byte characters under the limit", True),
        ("😀" * (key_max // 4), b"4-byte characters at the limit", True),
        ("a" * (key_max + 1), b"ascii over the limit", False),
        ("😀" * (key_max // 4 + 1), b"4-byte characters over the limit", False),
        ("é" * (key_max // 2 + 1), b"2-byte characters over the limit", False),
    ]
    ids = [0, 1, 255, 256, 65_535, 65_536, 2**24 + 3, 2**31, 2**32 - 1]
    for n, (key, value, stored) in enumerate(cases):
        request_id = ids[n % len(ids)]
        alone, behind = _set_both_ways(running.address, "fast", key, value, request_id)
        _, again = _set_both_ways(running.address, "loop", key, value, request_id)
        assert alone == behind == again, (key[:8], alone, behind)
        if stored:
            assert alone == p.encode_frame(p.REPLY, p.KV_SET, request_id, {"ok": True})
        else:
            (reply,) = p.decode_frames(alone, 1 << 20)
            assert reply.flags & p.FLAG_ERROR and reply.body["error"] == "ValueError", reply.body
            assert reply.request_id == request_id
    with client.connect(running.address) as c:
        for key, value, stored in cases:
            for name in ("fast", "loop"):
                if stored:  # (a key over the limit: a get of it is refused as its SET was)
                    got = c.kv(name).get(key)
                    assert got == value and type(got) is type(value), (name, key[:8], got)


def _refused(address: str, data: bytes) -> dict[str, object]:
    """The body of the one reply to ``data`` (an error that closes the connection)."""
    sock = connect_raw(address)
    try:
        sock.sendall(data)
        frames = read_frames(sock, None)
    finally:
        sock.close()
    assert len(frames) == 1 and frames[0].flags & p.FLAG_ERROR, frames
    return frames[0].body


def test_frames_that_only_look_like_a_lone_set_are_the_frame_loops(running: Running) -> None:
    with client.connect(running.address) as c:
        c.kv("fast").set("warm", b"w")
    set_of = request(p.KV_SET, 9, name="fast", key="nope", value=b"x")
    as_reply = p.encode_frame(p.REPLY, p.KV_SET, 9, {"name": "fast", "key": "nope", "value": b"x"})
    other_version = set_of[:2] + bytes([p.VERSION + 1]) + set_of[3:]
    text = request(p.KV_SET, 9, name="fast", key="nope", value="x")
    not_utf8 = text[:-1] + b"\xff"  # (the string value's one byte)
    size = int.from_bytes(set_of[12:16], "big")
    trailing = set_of[:12] + (size + 1).to_bytes(4, "big") + set_of[16:] + b"\x00"  # (a byte after the map)
    for data, words in (
        (as_reply, "requests, not"),
        (other_version, "version"),
        (not_utf8, "UTF-8"),
        (trailing, "after the body"),
    ):
        body = _refused(running.address, data)
        assert body["error"] == "ProtocolError" and words in str(body["message"]), body
    sock = connect_raw(running.address)
    try:
        with client.connect(running.address) as c:
            c.kv("fast").set("gone", b"before")
        # a kv.DELETE with a SET's fields: the frame loop's delete (its "value" is not a SET's)
        sock.sendall(request(p.KV_DELETE, 1, name="fast", key="gone", value=b"after"))
        (deleted,) = read_frames(sock, 1)
        assert not deleted.flags & p.FLAG_ERROR, deleted.body
        # a SET with a flag (known: taken as a request), and a SET cut across two reads
        flagged = bytearray(request(p.KV_SET, 2, name="fast", key="flagged", value=b"f"))
        flagged[7] |= p.FLAG_END
        sock.sendall(bytes(flagged))
        (reply,) = raw_replies(sock, 1)
        assert reply == p.encode_frame(p.REPLY, p.KV_SET, 2, {"ok": True})
        cut = request(p.KV_SET, 3, name="fast", key="cut", value=b"c" * 300)
        sock.sendall(cut[:20])
        time.sleep(0.05)
        sock.sendall(cut[20:])
        (reply,) = raw_replies(sock, 1)
        assert reply == p.encode_frame(p.REPLY, p.KV_SET, 3, {"ok": True})
    finally:
        sock.close()
    with client.connect(running.address) as c:
        s = c.kv("fast")
        assert s.get("nope") is None and s.get("gone") is None
        assert s.get("flagged") == b"f" and s.get("cut") == b"c" * 300
