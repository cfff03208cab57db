"""The frame decoder against anything: random bytes, mutated valid frames, and round trips.
Whatever arrives, decoding yields frames or raises ProtocolError, never another exception and
never a hang; every value the client can send comes back as it was; the daemon's fast path for
the client's kv.GET decodes as the decoder does, or declines."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from logspool import _wire as p

SIZE_MAX = 1 << 16

leaves: st.SearchStrategy[Any] = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.binary(max_size=64)
    | st.text(max_size=32)
)
leaves = leaves | st.floats(allow_nan=False)


def _nested(kids: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(kids, max_size=5) | st.dictionaries(st.text(max_size=8), kids, max_size=5)


values = st.recursive(leaves, _nested, max_leaves=20)
bodies = st.dictionaries(st.text(max_size=12), values, max_size=6)


def decode_all(buf: bytes) -> list[p.Frame]:
    try:
        return list(p.decode_frames(buf, SIZE_MAX))
    except p.ProtocolError:
        return []


@settings(max_examples=300, deadline=None)
@given(bodies, st.integers(0, 2**32 - 1), st.sampled_from(sorted(p.COMMANDS)))
def test_every_body_round_trips(body: dict[str, Any], request_id: int, command: int) -> None:
    frame = p.encode_frame(p.REQUEST, command, request_id, body)
    [got] = p.decode_frames(frame, SIZE_MAX)
    assert got == p.Frame(p.REQUEST, command, 0, request_id, body)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=256))
def test_random_bytes_never_break_the_decoder(data: bytes) -> None:
    decode_all(data)
    decode_all(p.encode_frame(p.REQUEST, p.PING, 1, {})[:4] + data)


@settings(max_examples=500, deadline=None)
@given(bodies, st.data())
def test_mutated_frames_decode_or_fail_cleanly(body: dict[str, Any], data: st.DataObject) -> None:
    frame = bytearray(p.encode_frame(p.REQUEST, p.KV_SET, 9, body))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(frame) - 1))
        frame[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(frame)))
    for frames in (decode_all(bytes(frame)), decode_all(bytes(frame[:cut]))):
        for f in frames:  # whatever decoded is a well-formed frame with a map body
            assert isinstance(f.body, dict) and f.kind in p.KINDS


def _agrees_or_declines(fast_path: Callable[[bytes], object], body: bytes, data: st.DataObject) -> None:
    """``body`` mutated in a few bytes, cut, and with a byte after it: the fast path decodes each
    as ``decode_body`` does, or declines it (None)."""
    mutated = bytearray(body)
    for _ in range(data.draw(st.integers(1, 3))):
        mutated[data.draw(st.integers(0, len(mutated) - 1))] = data.draw(st.integers(0, 255))
    for candidate in (bytes(mutated), body[: data.draw(st.integers(0, len(body)))], body + b"\x00"):
        fast = fast_path(candidate)
        if fast is not None:
            assert fast == p.decode_body(candidate)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40), st.text(max_size=40), st.data())
def test_the_get_fast_path_decodes_as_the_decoder_or_declines(
    name: str, key: str, data: st.DataObject
) -> None:
    """``decode_get_value_only`` (over ``get_value_only_fields``, the daemon's kv.GET path) gives
    what ``decode_body`` gives for the client's get body, and for that body mutated or cut it
    gives the same or None."""
    body = p.encode_frame(p.REQUEST, p.KV_GET, 1, {"name": name, "key": key, "value_only": True})[16:]
    assert (
        p.decode_get_value_only(body) == p.decode_body(body) == {"name": name, "key": key, "value_only": True}
    )
    _agrees_or_declines(p.decode_get_value_only, body, data)
    other = p.encode_frame(p.REQUEST, p.KV_GET, 1, {"key": key, "name": name, "value_only": True})[16:]
    assert p.decode_get_value_only(other) in (None, p.decode_body(other))


_VALUES = st.one_of(
    st.binary(max_size=300),
    st.text(max_size=40),
    st.integers(-(2**63), 2**63 - 1),
    st.none(),
    st.booleans(),
    st.lists(st.binary(max_size=8), max_size=3),
)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40), st.text(max_size=40), _VALUES, st.data())
def test_the_set_fast_path_decodes_as_the_decoder_or_declines(
    name: str, key: str, value: object, data: st.DataObject
) -> None:
    """``decode_set_plain`` (the daemon's plain kv.SET path) gives what ``decode_body`` gives for
    the client's plain set body of a bytes or string value and declines any other value; for
    that body mutated or cut it gives the same or None."""
    body = p.encode_frame(p.REQUEST, p.KV_SET, 1, {"name": name, "key": key, "value": value})[16:]
    fast = p.decode_set_plain(body)
    if isinstance(value, bytes | str):
        assert fast == p.decode_body(body) == {"name": name, "key": key, "value": value}
    else:
        assert fast is None
    _agrees_or_declines(p.decode_set_plain, body, data)
    with_option = {"name": name, "key": key, "value": b"v", "ttl": 5}
    assert p.decode_set_plain(p.encode_frame(p.REQUEST, p.KV_SET, 1, with_option)[16:]) is None


def _as_frame_loop_reads(buf: bytes, size_max: int) -> tuple[bytes, list[tuple[bytes, bytes]]] | None:
    """What the frame loop takes from ``buf`` as the daemon's read of gets only: its name and
    each (request id, key) as bytes if ``buf`` is whole frames, each a request of kv.GET with no
    flag whose body is exactly the client's value_only get, all of one store; else None."""
    try:
        frames = list(p.decode_frames(buf, size_max))
    except p.ProtocolError:
        return None
    names = {f.body.get("name") for f in frames}
    if not frames or len(names) != 1:
        return None
    out = []
    for f in frames:
        if (f.kind, f.command, f.flags) != (p.REQUEST, p.KV_GET, 0) or list(f.body) != [
            "name",
            "key",
            "value_only",
        ]:
            return None
        if not (isinstance(f.body["key"], str) and f.body["value_only"] is True):
            return None
        out.append((f.request_id.to_bytes(4, "big"), f.body["key"].encode("utf-8")))
    name = frames[0].body["name"]
    return (name.encode("utf-8"), out) if isinstance(name, str) else None


@settings(max_examples=300, deadline=None)
@given(
    st.text(max_size=40),
    st.lists(st.tuples(st.integers(0, 2**32 - 1), st.text(max_size=40)), min_size=1, max_size=20),
    st.data(),
)
def test_the_read_of_gets_only_is_what_the_frame_loop_takes_or_declined(
    name: str, requests: list[tuple[int, str]], data: st.DataObject
) -> None:
    """``value_only_gets`` (the daemon's read of pipelined gets, server/_native.py ``_gets_now``)
    gives for a read of the client's gets what the frame loop decodes from it; for that read
    mutated, cut, with a byte after it, or with one frame of another store or command, it gives
    the same or declines (None), or gives a name or key that is not UTF-8, which the daemon
    declines as it decodes it: it never takes a read the frame loop would read otherwise."""
    frames = [
        p.encode_frame(p.REQUEST, p.KV_GET, rid, {"name": name, "key": key, "value_only": True})
        for rid, key in requests
    ]
    read = b"".join(frames)
    expected = (name.encode(), [(rid.to_bytes(4, "big"), key.encode()) for rid, key in requests])
    assert p.value_only_gets(read, SIZE_MAX) == _as_frame_loop_reads(read, SIZE_MAX) == expected
    mutated = bytearray(read)
    for _ in range(data.draw(st.integers(1, 4))):
        mutated[data.draw(st.integers(0, len(mutated) - 1))] = data.draw(st.integers(0, 255))
    at = data.draw(st.integers(0, len(frames) - 1))
    other = data.draw(
        st.sampled_from(
            [
                {"name": name + "x", "key": "k", "value_only": True},
                {"name": name, "key": "k"},
                {"name": name, "key": "k", "value_only": False},
                {"key": "k", "name": name, "value_only": True},
            ]
        )
    )
    mixed = b"".join([*frames[:at], p.encode_frame(p.REQUEST, p.KV_GET, 1, other), *frames[at + 1 :]])
    small = data.draw(st.integers(1, SIZE_MAX))  # (a bound below some body: the frame loop refuses it)
    for candidate in (bytes(mutated), read[: data.draw(st.integers(0, len(read)))], read + b"\x00", mixed):
        for size_max in (SIZE_MAX, small):
            fast = p.value_only_gets(candidate, size_max)
            if fast is not None and _utf8(fast):  # (else the daemon declines it as it decodes)
                assert fast == _as_frame_loop_reads(candidate, size_max)


def _utf8(found: tuple[bytes, list[tuple[bytes, bytes]]]) -> bool:
    """Whether the name and every key ``value_only_gets`` found are UTF-8 (it leaves them to its
    caller, which declines the read if one is not: ``_gets_now``)."""
    try:
        for raw in (found[0], *(key for _, key in found[1])):
            raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40), st.lists(st.binary(max_size=300), max_size=8), st.data())
def test_the_append_fast_path_decodes_as_the_decoder_or_declines(
    name: str, records: list[bytes], data: st.DataObject
) -> None:
    """``decode_append_plain`` (the daemon's plain log.APPEND path) gives what ``decode_body``
    gives for the client's append body; for that body mutated or cut it gives the same or None;
    a body with another field, or a record not of bytes, it declines."""
    body = p.encode_frame(p.REQUEST, p.LOG_APPEND, 1, {"name": name, "records": records})[16:]
    assert p.decode_append_plain(body) == p.decode_body(body) == {"name": name, "records": records}
    _agrees_or_declines(p.decode_append_plain, body, data)
    for other in ({"records": records, "name": name}, {"name": name, "records": [*records, "text"]}):
        assert p.decode_append_plain(p.encode_frame(p.REQUEST, p.LOG_APPEND, 1, other)[16:]) is None
