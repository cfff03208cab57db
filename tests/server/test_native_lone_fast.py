"""A read that is one plain log.APPEND frame goes to the commit rounds without the frame loop
(server/_native.py ``_lone_write``: its header matched as a log.APPEND request's fixed bytes;
``_wire.decode_append_plain``: its body read by each field's and each record's fixed head;
``_native_rounds._Writes._append``: the reply {first, count} packed in one call), answered as the
frame loop answers the same frame.

What it proves, on real sockets on 127.0.0.1 against a daemon in a thread:
- an APPEND sent alone (the path under test) and the same APPEND behind a PING in one read (which
  ``_lone_write`` declines: the frame loop's way) get the documented reply, byte for byte ({first,
  count}, {first: nil, count: 0} for no record; request ids across their whole range), append
  the same records in order (one, several, empty, large), and are counted as log.append requests;
- frames that look like one and are not: a record that is a string gets the TypeError either
  way, nothing appended; a log not open yet is opened and appended to (the pool's way); a name
  that is not UTF-8 and a body with a byte after its map get a ProtocolError and close the
  connection; an APPEND cut across two reads is answered as an append.
"""

from __future__ import annotations

import time

from logspool import _wire as p
from logspool import client
from tests.server.conftest import Running
from tests.server.test_native import connect_raw, read_frames, request
from tests.server.test_native_set_fast import both_ways, raw_replies


def _append_both_ways(address: str, name: str, records: list[bytes], request_id: int) -> tuple[bytes, bytes]:
    """The reply to an APPEND sent alone, and to the same APPEND sent behind a PING in one read."""
    return both_ways(address, p.LOG_APPEND, request_id, name=name, records=records)


def _payloads(address: str, name: str) -> list[bytes]:
    with client.connect(address) as c:
        page, _ = c.log(name).read_page("earliest", limit=1000)
    return [record.payload for record in page]


def test_a_lone_append_answers_and_appends_as_the_frame_loop_does(running: Running) -> None:
    with client.connect(running.address) as c:
        c.log("events").append(b"warm")  # (the log open: a lone APPEND of it takes the path)
    batches = [[b"one"], [b"a", b"bc", b"def"], [b""], [], [bytes(range(256)) * 300], [b"x"] * 50]
    ids = [0, 1, 255, 65_536, 2**24 + 3, 2**32 - 1]
    appended = [b"warm"]
    counted = running.server.request_counts().get("log.append", 0)
    for n, records in enumerate(batches):
        request_id = ids[n % len(ids)]
        alone, behind = _append_both_ways(running.address, "events", records, request_id)
        if records:
            first_alone = len(appended)
            first_behind = first_alone + len(records)
            assert alone == p.encode_frame(
                p.REPLY, p.LOG_APPEND, request_id, {"first": first_alone, "count": len(records)}
            )
            assert behind == p.encode_frame(
                p.REPLY, p.LOG_APPEND, request_id, {"first": first_behind, "count": len(records)}
            )
        else:
            nothing = p.encode_frame(p.REPLY, p.LOG_APPEND, request_id, {"first": None, "count": 0})
            assert alone == behind == nothing
        appended += records + records
    assert _payloads(running.address, "events") == appended
    assert running.server.request_counts()["log.append"] == counted + 2 * len(batches)


def test_frames_that_only_look_like_a_lone_append_are_the_frame_loops(running: Running) -> None:
    with client.connect(running.address) as c:
        c.log("events").append(b"warm")
    # a record that is a string: the handler's TypeError, alone or behind a PING, nothing appended
    text = request(p.LOG_APPEND, 4, name="events", records=[b"kept?", "text"])
    for data in (text, request(p.PING, 1) + text):
        sock = connect_raw(running.address)
        try:
            sock.sendall(data)
            frames = read_frames(sock, data.count(p.MAGIC + bytes([p.VERSION, p.REQUEST])))
        finally:
            sock.close()
        reply = frames[-1]
        assert reply.flags & p.FLAG_ERROR and reply.body["error"] == "TypeError", reply.body
    # protocol errors: the connection closed, nothing appended
    good = request(p.LOG_APPEND, 9, name="events", records=[b"nope"])
    size = int.from_bytes(good[12:16], "big")
    trailing = good[:12] + (size + 1).to_bytes(4, "big") + good[16:] + b"\x00"  # (a byte after the map)
    not_utf8 = request(p.LOG_APPEND, 9, name="evenü", records=[b"nope"]).replace("ü".encode(), b"\xff\xfe")
    for data, words in ((trailing, "after the body"), (not_utf8, "UTF-8")):
        sock = connect_raw(running.address)
        try:
            sock.sendall(data)
            frames = read_frames(sock, None)
        finally:
            sock.close()
        assert len(frames) == 1 and frames[0].body["error"] == "ProtocolError", frames
        assert words in str(frames[0].body["message"]), frames[0].body
    sock = connect_raw(running.address)
    try:
        # a log not open yet (the pool opens it), then an APPEND cut across two reads
        sock.sendall(request(p.LOG_APPEND, 2, name="fresh", records=[b"first"]))
        (reply,) = raw_replies(sock, 1)
        assert reply == p.encode_frame(p.REPLY, p.LOG_APPEND, 2, {"first": 0, "count": 1})
        cut = request(p.LOG_APPEND, 3, name="events", records=[b"c" * 300])
        sock.sendall(cut[:20])
        time.sleep(0.05)
        sock.sendall(cut[20:])
        (reply,) = raw_replies(sock, 1)
        assert reply == p.encode_frame(p.REPLY, p.LOG_APPEND, 3, {"first": 1, "count": 1})
    finally:
        sock.close()
    assert _payloads(running.address, "events") == [b"warm", b"c" * 300]
    assert _payloads(running.address, "fresh") == [b"first"]
