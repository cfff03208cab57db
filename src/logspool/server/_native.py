"""The native protocol's connection (docs/PROTOCOL.md), served by the same engine as the RESP door.

Longer than 600 lines: a request's path (frames cut, placed, run on the loop, handed to a round
or to the pool, answered) crosses the connection and the read views, which share its bounds and
its durability rule; the commit rounds' members are ``_native_rounds.py``'s; next to move out
when it grows: LISTEN's event loops.

How a connection is served (one ``asyncio.Protocol`` each, ``NativeConnection``):
- Frames are cut and decoded on the event loop as bytes arrive; every complete frame of a read
  is taken at once (``_take_frames``), each header checked against ``frame_size_max`` before
  its body is buffered; a read that is one plain kv.SET or log.APPEND, nothing in flight, goes
  straight to the commit rounds (``_lone_write``: each of 16 or 50 clients waits for its
  reply); a read that is whole value_only kv.GETs of one open store, nothing buffered before
  it, is answered at once
  (``_gets_now``: each frame read at its fixed offsets, each reply packed at once, the reads of
  ``_Views.value`` written out in one loop), else the frame loop takes it.
- Where a request runs (``_dispatch``):
  * kv.GET of an open store whose mutex is free, and PING, HELLO, UNLISTEN, run on the event
    loop at once (no thread hop); a read batch's value_only GETs read one view of each store
    (``_Views``: its mutex taken without waiting, one catch-up with its op log);
  * writes of key-value stores and log appends (``WRITES``) go, every write of one read together,
    to the commit rounds of a ``Committer`` (``_resp_commit.py``, the RESP door's class; the
    native door has one of its own, whose members are ``_native_rounds.py``'s): a round runs
    the batches queued by every connection one after another, in one decision of each kv store
    and one hold of each log's writer lock
    (``_RoundStores``), then fsyncs each store written once, before any reply of the round is
    sent (group commit); a round runs on the loop itself, as Redis's do, the batches of a turn
    of the loop together (``Committer.gather``), when its writes are of kv stores the daemon
    owns (``own_kv``) or appends to open logs whose locks are free (``_loop_ready``,
    ``NativeFront.hold_streams``), else on the committer's thread;
  * the rest (scans, log reads, job calls, which sync themselves, forwarding, opening a store)
    in the server's thread pool, as before; a LISTEN and a jobs.TAKE with ``wait`` look there
    with no wait, and wait between looks on the event loop (``_changed``, ``_take_waiting``:
    the server's ``Tails``), holding no thread.
- Replies carry their request's id and may come in any order (the protocol has always allowed
  it: requests of a connection run concurrently); the replies of one batch go out in one write.
- Durability: a write's reply is sent only after its round's fsync (``_Writes.take_writes``
  tells the round it wrote; ``_RoundStores.sync`` fsyncs every store the round wrote). A read
  that ran while a round was decided but not yet durable (``Committer.settled``, of this door's
  committer and the RESP door's) keeps its reply until that round is: no reply shows a write
  that a crash could take back.
- Bounds: at most ``in_flight_max`` requests of a connection being served (then its reading
  pauses); no request is taken while the socket's send buffer is over ``OUTPUT_HIGH_SIZE``
  (a client that never reads stops being read); a frame that breaks the protocol gets a
  ProtocolError reply and closes its connection only.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import struct
import time
from collections.abc import Callable
from typing import Any, cast

from .. import _wire as p
from .. import errors, limits
from ..kv import _ops as kv_ops
from ._native_rounds import _REPLY_HEADER, KEY_CHARS_SAFE, KV_WRITES, WRITES, _Request, _Writes, error_frame
from ._resp_commit import Committer
from ._server import (  # (_server imports this module only in Server.start)
    READ_LIMIT_MAX,
    WAIT_S_MAX,
    Server,
    _get,
    _name,
    _need,
    _position,
    _Tail,
    _Watched,
    error_body,
    hello_body,
    raw_id,
    value_to_wire,
)

_logger = logging.getLogger("logspool.server")
# A LISTEN looks again this often when nothing woke it (a change its directory's watch missed,
# or no inotify here): as often as its reader used to wait in a pool thread.
LISTEN_POLL_S = 0.5


def _waits(body: dict[str, Any]) -> bool:
    """Whether a jobs.TAKE or TAKE_MANY asks to wait (a number above 0; a bad one is the
    handler's error)."""
    wait = body.get("wait")
    return isinstance(wait, int | float) and not isinstance(wait, bool) and wait > 0


OUTPUT_HIGH_SIZE = 1024 * 1024  # no request is taken while more than this waits to be sent
_HEADER_AT = p.HEADER.unpack_from
_ID_AND_SIZE_AT = struct.Struct(">II").unpack_from  # a header's request id and body size
assert p.HEADER.format.endswith("II") and len(p.SET_REQUEST_HEAD) + 8 == p.HEADER_SIZE
# The writes a read of one frame hands to the commit rounds at once (``_lone_write``), by their
# header's fixed bytes: the command, the kind of store it writes and its plain body's decoder.
_LONE_WRITES: dict[bytes, tuple[int, str, Callable[[bytes], dict[str, Any] | None]]] = {
    p.SET_REQUEST_HEAD: (p.KV_SET, "kv", p.decode_set_plain),
    p.APPEND_REQUEST_HEAD: (p.LOG_APPEND, "logs", p.decode_append_plain),
}
assert len(p.APPEND_REQUEST_HEAD) == len(p.SET_REQUEST_HEAD)
# value_only kv.GET replies, encoded once (PROTOCOL.md, kv.GET): {found: false}, {found: true}
# (a probe), and the head of {found: true, value: ...}.
_NOT_FOUND = p.encode_frame(p.REPLY, p.KV_GET, 0, {"found": False})[p.HEADER_SIZE :]
_FOUND_PROBE = p.encode_frame(p.REPLY, p.KV_GET, 0, {"found": True})[p.HEADER_SIZE :]
_FOUND_VALUE = b"\x08\x00\x00\x00\x02\x00\x05found\x06\x00\x05value"
assert p.decode_body(_FOUND_VALUE + b"\x00") == {"found": True, "value": None}
# The same replies as frames, for a read of gets only (``_Views.replies``): the reply header up
# to its request id, then {found: false}'s body size and body; or, packed in one call, the header
# up to the request id, the request id, the body size, the head of {found: true, value: BYTES}
# and the size of the value's bytes, which follow.
_REPLY_HEAD = p.HEADER.pack(p.MAGIC, p.VERSION, p.REPLY, p.KV_GET, 0, 0, 0)[:8]
_NOT_FOUND_TAIL = len(_NOT_FOUND).to_bytes(4, "big") + _NOT_FOUND
_FOUND_BYTES = _FOUND_VALUE + bytes([p.BYTES])
_FOUND_BYTES_SIZE = len(_FOUND_BYTES) + 4  # its body's size but the value's bytes
_FOUND_BYTES_FRAME = struct.Struct(f">{len(_REPLY_HEAD)}s4sI{len(_FOUND_BYTES)}sI").pack
# (checked at import: the replies to request id 7, as ``encode_frame`` encodes them)
assert p.encode_frame(p.REPLY, p.KV_GET, 7, {"found": False}) == _REPLY_HEAD + b"\0\0\0\7" + _NOT_FOUND_TAIL
assert p.encode_frame(p.REPLY, p.KV_GET, 7, {"found": True, "value": b"v"}) == (
    _FOUND_BYTES_FRAME(_REPLY_HEAD, b"\0\0\0\7", _FOUND_BYTES_SIZE + 1, _FOUND_BYTES, 1) + b"v"
)


class _Views:
    """The key-value stores read on the loop by one batch of frames, each as of one moment: its
    mutex held (taken without waiting) and caught up with its op log once for the batch, as
    the RESP door's read batches (its commands arrived together: reading them all as of the
    batch's start is a moment the client cannot tell from their arriving at once). ``release``
    at the batch's end. Reads ``kv.Store`` internals as the RESP door's ``View`` does: a public
    "read many keys as of one catch-up" is what the store lacks."""

    def __init__(self) -> None:
        self.used = False  # a read ran (its replies wait for any round it may have seen)
        self._held: dict[int, tuple[Any, Any, int]] = {}  # id(store): (mutex, state, now)

    def value(self, store: Any, key: str, data: bool, touch: bool) -> bytes | None:
        """A value_only kv.GET's reply body (encoded), or None if it cannot run here (the store
        busy, a key the store would refuse, a touch TTL to extend: the pool runs those)."""
        if not key or (len(key) > KEY_CHARS_SAFE and len(key.encode("utf-8")) > limits.KV_KEY_SIZE_MAX):
            return None  # (the pool's kv.GET answers the store's error)
        held = self._hold(store)
        if held is None:
            return None
        _, state, now = held
        entry = state.live(key, now)
        self.used = True
        if entry is None:
            return _NOT_FOUND
        if touch and entry.touch_ns:
            return None
        state.used(entry, now)
        if not data:
            return _FOUND_PROBE
        if entry.vtype == kv_ops.BYTES:  # (the common value, its encoding written out: §2)
            raw = store._bytes(entry)
            return b"".join((_FOUND_VALUE, p.BYTES_HEAD(len(raw)), raw))
        parts = [_FOUND_VALUE]
        p.encode_value(kv_ops.decode_value(entry.vtype, store._bytes(entry), store.path), parts, 1)
        return b"".join(parts)

    def replies(self, store: Any, gets: list[tuple[bytes, bytes]]) -> list[bytes] | None:
        """The reply frames of a read of the client's gets only of ``store`` (``(request id,
        key)``, raw: ``p.value_only_gets``), in its order; None if one of them cannot run here
        (as ``value``: the read goes the frame loop's way, whose ``value`` answers the ones it
        can). ``value``'s reads written out in one loop, for the values held in memory as bytes
        and the keys with none (a pipelined get's cost on the loop: no call a get, no field
        decoded but its key, its reply packed at once)."""
        held = self._hold(store)
        if held is None:
            return None
        _, state, now = held
        values, lru = state.values, state._lru
        self.used = True
        out: list[bytes] = []
        for request_id, raw in gets:
            # ``State.live`` and ``State.used`` written out, as the RESP door's ``Session.gets_of``
            # writes them (no call a get)
            entry = values.get(raw.decode("utf-8"))
            if entry is None or (entry.expire_ns and entry.expire_ns <= now):
                if not raw or len(raw) > limits.KV_KEY_SIZE_MAX:  # (its UTF-8 is its size; a
                    return None  # key the store holds is one it takes: only a miss can be wrong)
                out += (_REPLY_HEAD, request_id, _NOT_FOUND_TAIL)
                continue
            value = entry.value
            if value is None or entry.touch_ns or entry.vtype != kv_ops.BYTES:
                return None  # (on disk or lost, a touch TTL to extend, another type: as ``value``)
            entry.accessed_ns = now
            if lru and entry.key in lru:
                lru.move_to_end(entry.key)
            size = len(value)
            head = _FOUND_BYTES_FRAME(_REPLY_HEAD, request_id, _FOUND_BYTES_SIZE + size, _FOUND_BYTES, size)
            out += (head, value)
        return out

    def _hold(self, store: Any) -> tuple[Any, Any, int] | None:
        """(mutex, state, now) of ``store`` for this batch: its mutex taken without waiting
        (None if it is busy) and its state caught up, the first time the batch reads it."""
        held = self._held.get(id(store))
        if held is None:
            mutex = store._mutex
            if not mutex.acquire(blocking=False):
                return None
            try:
                state = store._current()
            except BaseException:
                mutex.release()
                raise
            held = self._held[id(store)] = (mutex, state, store._clock())
        return held

    def release(self) -> None:
        for mutex, _, _ in self._held.values():
            mutex.release()
        self._held.clear()


def _decode_fast(command: int, raw: bytes) -> dict[str, Any] | None:
    """The body of the client's value_only kv.GET, plain kv.SET or plain log.APPEND, by its fixed
    bytes; None for any other (``p.decode_body`` decodes it, and names what is wrong)."""
    if command == p.KV_GET:
        return p.decode_get_value_only(raw)
    if command == p.KV_SET:
        return p.decode_set_plain(raw)
    if command == p.LOG_APPEND:
        return p.decode_append_plain(raw)
    return None


class NativeConnection(asyncio.Protocol):
    """One client of the native protocol (see the module docstring)."""

    def __init__(self, server: Server, committer: Committer) -> None:
        self.server = server
        self.committer = committer
        self._committer_any = cast(Any, committer)  # (its types name RESP's sessions)
        self.loop = asyncio.get_running_loop()
        self.peer = "?"
        self.transport: asyncio.Transport | None = None
        self.authed = server._token is None
        self.done = asyncio.Event()
        self.listens: dict[int, asyncio.Task[None]] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self._buffer = bytearray()
        self._wanted = p.HEADER_SIZE  # bytes the buffer needs before a frame is complete
        self._in_flight = 0  # requests taken and not yet answered (pool, rounds, waits)
        self._reading = True  # False once no more requests are taken (QUIT, refusal, stop)
        self._paused = False
        self._writable = asyncio.Event()
        self._writable.set()
        self._lost = False
        self._closed = False

    # --- asyncio.Protocol -------------------------------------------------------------------------
    def connection_made(self, base: asyncio.BaseTransport) -> None:
        self.transport = transport = cast(asyncio.Transport, base)  # (uvloop's is not a subclass)
        self.peer = str(transport.get_extra_info("peername"))
        server = self.server
        if server.connection_count() >= server.limits.connections_max:
            server.counters.refused += 1
            body = {"error": "TooManyConnections", "message": f"at most {server.limits.connections_max}",
                    "args": []}  # fmt: skip
            transport.write(p.encode_frame(p.REPLY, p.NOP, 0, body, p.FLAG_ERROR))
            transport.close()
            self._closed = True
            self.done.set()
            return
        server._connections.add(self)
        server.counters.connections = server.connection_count()
        server.counters.connections_total += 1
        transport.set_write_buffer_limits(high=OUTPUT_HIGH_SIZE)

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._reading = False
        self._closed = True
        for task in self.listens.values():
            task.cancel()
        self._writable.set()  # (an event loop waiting to send gives up: _send sees _lost)
        server = self.server
        if self in server._connections:
            server._connections.discard(self)
            server.counters.connections = server.connection_count()
        self._maybe_done()

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()
        if self._buffer and self._reading:
            self._take_frames()

    def data_received(self, data: bytes) -> None:
        if not self._reading:
            return
        self.server.counters.bytes_in += len(data)
        if not self._buffer and (
            self._gets_now(data) if data.startswith(p.GET_REQUEST_HEAD) else self._lone_write(data)
        ):
            return
        self._buffer += data
        if len(self._buffer) >= self._wanted:  # (a large frame arriving: not parsed again each read)
            self._take_frames()

    def eof_received(self) -> bool | None:
        self._reading = False
        self._maybe_close()
        return True  # (the replies in flight still go out; we close when they have)

    # --- taking frames ----------------------------------------------------------------------------
    def _take_frames(self) -> None:
        """Decode every complete frame buffered and run it (up to the bounds of the module
        docstring); the writes among them go to one commit round together."""
        chunk = bytes(self._buffer)  # (one copy; the frames are sliced from it)
        limits = self.server.limits
        size_max = limits.frame_size_max
        end_all = len(chunk)
        at = 0
        writes: list[_Request] = []
        replies: list[bytes] = []
        views = _Views()
        gets = 0
        self._wanted = p.HEADER_SIZE
        try:
            while self._reading and end_all - at >= p.HEADER_SIZE:
                if self._in_flight >= limits.in_flight_max or not self._writable.is_set():
                    self._pause()
                    break
                magic, version, kind, command, flags, request_id, size = _HEADER_AT(chunk, at)
                if (
                    magic != p.MAGIC
                    or version != p.VERSION
                    or kind != p.REQUEST
                    or flags & ~p.FLAGS_KNOWN
                    or size > size_max
                ):
                    raw = chunk[at : at + p.HEADER_SIZE]
                    try:
                        p.decode_header(raw, size_max)  # (names what is wrong)
                        message = f"a client sends requests, not {p.KINDS[kind]} frames"
                    except p.ProtocolError as err:
                        message = str(err)
                    self._refuse(replies, _raw_id(raw), "ProtocolError", message)
                    break
                end = at + p.HEADER_SIZE + size
                if end > end_all:
                    self._wanted = end - at
                    break
                raw_body = chunk[at + p.HEADER_SIZE : end]
                if command == p.KV_GET and self.authed:
                    # The client's get by its fixed bytes (``get_value_only_fields``): no body's
                    # dict, no field checks; else, or if it cannot run here, as below.
                    fields = p.get_value_only_fields(raw_body)
                    payload = None if fields is None else self._value_now(fields, views)
                    if payload is not None:
                        at = end
                        replies.append(
                            _REPLY_HEADER(p.MAGIC, p.VERSION, p.REPLY, p.KV_GET, 0, request_id, len(payload))
                            + payload
                        )
                        gets += 1
                        continue
                try:
                    body = _decode_fast(command, raw_body) or p.decode_body(raw_body)
                except p.ProtocolError as err:
                    self._refuse(replies, request_id, "ProtocolError", str(err))
                    break
                at = end
                if command == p.KV_GET and self.authed:  # (the common read, without the dispatch)
                    try:
                        if self._get_now(request_id, body, replies, views):
                            gets += 1
                            continue
                    except Exception:
                        pass  # (the dispatch runs it again and answers its error)
                self._dispatch(command, request_id, body, writes, replies, views)
        finally:
            views.release()
            if gets:
                counts = self.server.counters.requests
                counts["kv.get"] = counts.get("kv.get", 0) + gets
            if at:
                del self._buffer[:at]
            if writes:
                self._commit(writes)
            if replies:
                # What the reads saw is durable before their replies go out: a round decided
                # but not yet fsynced (its store's mutex was free) holds them until it is.
                settling = self._settling() if views.used else None
                if settling is None:
                    self._write(b"".join(replies))
                else:
                    self._in_flight += 1
                    settling.add_done_callback(lambda _: self._answered([b"".join(replies)], 1))
            if not self._reading:
                self._buffer.clear()
                self._maybe_close()
            elif self._paused and self._in_flight < limits.in_flight_max and self._writable.is_set():
                self._resume()

    def _lone_write(self, data: bytes) -> bool:
        """A read that is one whole plain kv.SET frame (``p.decode_set_plain``) of an open store,
        or one plain log.APPEND frame (``p.decode_append_plain``) of an open log, nothing
        buffered before it and nothing in flight (SET x16, x50, x1, APPEND x16: each client waits
        for its reply), handed to the commit rounds as ``_take_frames`` would hand it, without
        its loop, views and dispatch (APPEND x16, same run: the server's CPU an append 93-100
        -> 63-78 us, the RESP door's XADD 80-92; more appends share each round's fsync, 13 a
        round against 10). False, having done nothing, for anything else: ``_take_frames``
        takes it."""
        lone = _LONE_WRITES.get(data[: len(p.SET_REQUEST_HEAD)])  # (the magic, the command, no flag)
        if (
            lone is None
            or len(data) < p.HEADER_SIZE
            or self._in_flight
            or self._paused
            or not self.authed
            or not self._writable.is_set()
        ):
            return False
        server = self.server
        request_id, size = _ID_AND_SIZE_AT(data, len(p.SET_REQUEST_HEAD))
        if len(data) != p.HEADER_SIZE + size or size > server.limits.frame_size_max:
            return False
        command, kind, decode = lone
        body = decode(data[p.HEADER_SIZE :])
        if body is None or server.stores.opened(kind, body["name"]) is None:
            return False
        counts = server.counters.requests
        name = p.COMMANDS[command]
        counts[name] = counts.get(name, 0) + 1
        self._commit([(command, request_id, body)], ready=True)
        return True

    def _gets_now(self, data: bytes) -> bool:
        """A read that is whole value_only kv.GETs only (``p.value_only_gets``: the client's get
        pipelined), nothing buffered before it, answered as ``_take_frames`` answers it, without
        its frame loop (``_Views.replies``; kv.GET -P16, same run: the server's CPU a get 9.0 ->
        5.3 us, the RESP door's 5.8). False, having
        answered nothing, if one of them cannot run here or the connection takes no request
        now: ``_take_frames`` takes the read (and reads again what this one read: an access
        time later)."""
        server = self.server
        if (
            not self.authed
            or self._paused
            or self._in_flight >= server.limits.in_flight_max
            or not self._writable.is_set()
        ):
            return False
        found = p.value_only_gets(data, server.limits.frame_size_max)
        if found is None:
            return False
        name, gets = found
        views = _Views()
        try:
            store = server.stores.opened("kv", name.decode("utf-8"))
            replies = None if store is None else views.replies(store, gets)
        except Exception:
            replies = None  # (a store's error, or a name or key not UTF-8: the frame loop answers it)
        finally:
            views.release()
        if replies is None:
            return False
        counts = server.counters.requests
        counts["kv.get"] = counts.get("kv.get", 0) + len(gets)
        # What the reads saw is durable before their replies go out (as ``_take_frames``).
        settling = self._settling()
        if settling is None:
            self._write(b"".join(replies))
        else:
            self._in_flight += 1
            settling.add_done_callback(lambda _: self._answered([b"".join(replies)], 1))
        return True

    def _pause(self) -> None:
        if not self._paused and self.transport is not None:
            self.transport.pause_reading()
            self._paused = True

    def _resume(self) -> None:
        if self._paused and self.transport is not None and not self._closed:
            self._paused = False
            self.transport.resume_reading()

    def _refuse(self, replies: list[bytes], request_id: int, kind: str, message: str) -> None:
        """An error reply, then the connection closes (a protocol error, a failed HELLO)."""
        self.server.counters.protocol_errors += 1
        _logger.warning("%s: closing the connection: %s: %s", self.peer, kind, message)
        body = {"error": kind, "message": message, "args": []}
        replies.append(p.encode_frame(p.REPLY, p.NOP, request_id, body, p.FLAG_ERROR))
        self._reading = False

    def _dispatch(
        self,
        command: int,
        request_id: int,
        body: dict[str, Any],
        writes: list[_Request],
        replies: list[bytes],
        views: _Views,
    ) -> None:
        """Run one request where it belongs (the module docstring); its reply goes to
        ``replies`` if it is answered at once."""
        server = self.server
        if command == p.QUIT:
            replies.append(p.encode_frame(p.REPLY, p.QUIT, request_id, {}))
            self._reading = False
            return
        if not self.authed:
            if command == p.HELLO and server.check_token(body.get("token")):
                self.authed = True
                replies.append(self._frame(p.HELLO, request_id, _hello(server)))
                return
            self._refuse(replies, request_id, "AuthError", "a valid token is needed (HELLO first)")
            return
        name = p.COMMANDS.get(command, str(command))
        counts = server.counters.requests
        counts[name] = counts.get(name, 0) + 1
        try:
            if command in WRITES:
                store = server.stores.opened("logs" if command == p.LOG_APPEND else "kv", body.get("name"))
                if store is not None:  # (else the pool checks the name and opens the store)
                    writes.append((command, request_id, body))
                    return
            elif command == p.KV_GET:
                if self._get_now(request_id, body, replies, views):
                    return
            elif command == p.PING:
                replies.append(self._frame(command, request_id, {"time": time.time()}))
                return
            elif command == p.HELLO:
                replies.append(self._frame(command, request_id, _hello(server)))
                return
            elif command == p.UNLISTEN:
                task = self.listens.pop(_need(body, "id", int), None)
                if task is not None:
                    task.cancel()
                replies.append(self._frame(command, request_id, {"ok": task is not None}))
                return
            elif command not in server._handlers and command != p.LISTEN:
                raise ValueError(f"unknown command {command}")
        except Exception as err:
            server.counters.errors += 1
            replies.append(error_frame(command, request_id, err))
            return
        self._start(self._pooled(command, request_id, body))

    def _frame(self, command: int, request_id: int, body: dict[str, Any]) -> bytes:
        try:
            return p.encode_frame(p.REPLY, command, request_id, body)
        except (TypeError, ValueError) as err:  # (a server bug: say so rather than hang the client)
            return error_frame(command, request_id, err)

    def _value_now(self, fields: tuple[str, str], views: _Views) -> bytes | None:
        """The reply body of the client's get of (name, key) (``value_only``, data and touch by
        default), read on the loop as ``_get_now`` reads it; None if it cannot run here (the
        dispatch runs it, and answers any error)."""
        store = self.server.stores.opened("kv", fields[0])
        if store is None:
            return None
        try:
            return views.value(store, fields[1], True, True)
        except Exception:
            return None

    def _get_now(self, request_id: int, body: dict[str, Any], replies: list[bytes], views: _Views) -> bool:
        """A kv.GET on the loop, if its store is open and its mutex free (never wait on the
        loop: a decision or a snapshot holds it) and the read needs no write (a touch TTL's
        extension is a write: the pool does it). False (nothing done) if it cannot run here,
        or if a field is wrong (the dispatch answers the error). With ``value_only``, from the
        batch's one view of the store (``_Views``)."""
        name, key = body.get("name"), body.get("key")
        if type(name) is not str or type(key) is not str:
            return False
        store = self.server.stores.opened("kv", name)  # (only names checked when opened are there)
        if store is None:
            return False
        data, touch, value_only = body.get("data"), body.get("touch"), body.get("value_only")
        data = True if data is None else data
        touch = True if touch is None else touch
        if type(data) is not bool or type(touch) is not bool:
            return False
        if value_only is True:
            payload = views.value(store, key, data, touch)
            if payload is None:
                return False
            replies.append(
                _REPLY_HEADER(p.MAGIC, p.VERSION, p.REPLY, p.KV_GET, 0, request_id, len(payload)) + payload
            )
            return True
        if value_only not in (None, False):
            return False
        mutex = store._mutex
        if not mutex.acquire(blocking=False):
            return False
        try:
            got = store.entry(key, data=data, touch=False)
        finally:
            mutex.release()
        if got is not None and touch and got.touch:
            return False
        views.used = True
        replies.append(
            self._frame(p.KV_GET, request_id, {"value": None if got is None else value_to_wire(got)})
        )
        return True

    def _settling(self) -> asyncio.Future[Any] | None:
        """After a read: a future done once every commit round started so far, the native
        door's and the RESP door's (a native read may read the RESP door's store), is durable
        and answered; None if they all are."""
        return self.server.settled()

    # --- the commit rounds ------------------------------------------------------------------------
    def _commit(self, writes: list[_Request], ready: bool = False) -> None:
        """Hand a read's writes to the next commit round; ``_Writes._landed`` answers them.
        ``ready``: the caller found them ``_loop_ready``."""
        self._in_flight += len(writes)
        batch = _Writes(self, writes)
        committer = self._committer_any
        if not ((ready or self._loop_ready(writes)) and committer.gather(batch, writes, batch)):
            committer.submit(batch, writes, batch)

    def _loop_ready(self, writes: list[_Request]) -> bool:
        """Whether every write is a decision of an open key-value store, or an append to an open
        log: then its round may run on the loop (``Committer.gather``), which waits for no other
        process (the writer lock of a log or of a store shared with other processes, which
        another process may hold, is taken there only if it is free: ``hold_streams``; else the
        round runs on the committer's thread, which may wait)."""
        stores = self.server.stores
        for command, _, body in writes:
            name = body.get("name", "")
            if command == p.LOG_APPEND:
                if stores.opened("logs", name) is None:
                    return False
                continue
            if command not in KV_WRITES:
                return False
            if stores.opened("kv", name) is None:
                return False
        return True

    def _answered(self, frames: list[bytes], count: int | None = None) -> None:
        """Send replies (``count`` requests answered: one a frame unless said)."""
        self._in_flight -= len(frames) if count is None else count
        self._write(b"".join(frames))
        self._after_reply()

    def _after_reply(self) -> None:
        if self._reading:
            if self._paused and self._in_flight < self.server.limits.in_flight_max:
                self._resume()
                if self._buffer:
                    self._take_frames()
        else:
            self._maybe_close()

    # --- the pool and the tasks -------------------------------------------------------------------
    def _start(self, coro: Any) -> None:
        self._in_flight += 1
        task = self.loop.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        self._in_flight -= 1
        self._after_reply()

    async def _pooled(self, command: int, request_id: int, body: dict[str, Any]) -> None:
        server = self.server
        try:
            if command == p.LISTEN:
                reply = await self.listen(request_id, body)
            elif command in (p.JOB_TAKE, p.JOB_TAKE_MANY) and _waits(body):
                reply = await self._take_waiting(command, body)
            elif command in WRITES:  # its store is not open yet: open it off the loop, then commit
                kind = "logs" if command == p.LOG_APPEND else "kv"
                await server.call(lambda: server.stores.get(kind, _name(body)))
                self._commit([(command, request_id, body)])
                return
            else:
                handler = server._handlers[command]
                reply = await server.read(lambda: handler(body))  # (no reply before it is durable)
            self._write(self._frame(command, request_id, reply))
        except Exception as err:
            server.counters.errors += 1
            if not isinstance(err, errors.LogspoolError | ValueError | TypeError | KeyError):
                _logger.exception("%s: %s failed", self.peer, p.COMMANDS.get(command, str(command)))
            self._write(error_frame(command, request_id, err))

    # --- sending and closing ----------------------------------------------------------------------
    def _write(self, data: bytes) -> None:
        if self._closed or self.transport is None or not data:
            return
        if self.server.failure is not None:  # (a store's fsync failed: no reply from now on)
            self._lost = True
            self.transport.abort()
            return
        self.server.counters.bytes_out += len(data)
        self.transport.write(data)

    async def send(
        self, kind: int, command: int, request_id: int, body: dict[str, Any], flags: int = 0
    ) -> None:
        """An event (LISTEN), after the socket's send buffer drains below its bound."""
        try:
            frame = p.encode_frame(kind, command, request_id, body, flags)
        except (TypeError, ValueError) as err:
            frame = p.encode_frame(kind, command, request_id, _error_body(err), p.FLAG_ERROR)
        for _ in range(1_000_000):  # bounded: each turn the buffer drained or the peer went away
            if self._writable.is_set() or self._lost:
                break
            await self._writable.wait()
        self._write(frame)

    def stop_reading(self) -> None:
        """No more requests (shutdown): those in flight finish and reply, then the connection
        closes."""
        self._reading = False
        for task in self.listens.values():
            task.cancel()
        self._maybe_close()

    def _maybe_close(self) -> None:
        if self._in_flight == 0 and not self.tasks and not self._closed:
            self._closed = True
            if self.transport is not None:
                self.transport.close()
        self._maybe_done()

    def _maybe_done(self) -> None:
        if self._closed and self._in_flight <= 0 and not self.tasks:
            self.done.set()

    async def _take_waiting(self, command: int, body: dict[str, Any]) -> dict[str, Any]:
        """A jobs.TAKE or jobs.TAKE_MANY with ``wait``: it looks in the pool with no wait, and
        between looks waits on the event loop (until the journal's op log changes, by this
        daemon or any process, a delayed job's time comes, or the wait ends), holding no thread.
        (It held one for its whole wait: 32 waiting workers stopped every other store call.)"""
        server = self.server
        tails = server.tails
        assert tails is not None  # (set when the native door starts)
        handler = server._handlers[command]
        deadline = time.monotonic() + min(float(body["wait"]), WAIT_S_MAX)
        look = {**body, "wait": 0}
        watch = [f"jobs/{_name(body)}/ops"]
        for _ in range(1 << 30):  # bounded by the deadline: each turn waits or returns
            fut = tails.register(watch)  # before the look: a change after it wakes this wait
            try:
                reply: dict[str, Any] = await server.read(functools.partial(handler, look))
                look = {**look, "ack": []}  # (the first look acked them, all or none)
                left = deadline - time.monotonic()
                if reply.get("job") is not None or reply.get("jobs") or left <= 0:
                    return reply
                next_at = reply.get("next_at")
                if isinstance(next_at, int | float):  # a delayed job: no write will say so
                    left = min(left, max(0.0, next_at - time.time()))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(fut), left)
            finally:
                tails.unregister(watch, fut)
        raise AssertionError("a jobs.TAKE waited past its deadline")

    # --- LISTEN -----------------------------------------------------------------------------------
    async def listen(self, request_id: int, body: dict[str, Any]) -> dict[str, Any]:
        """Start a subscription: events carry this request's id until UNLISTEN or disconnection."""
        kind = _need(body, "kind", str)
        if request_id in self.listens:
            raise ValueError(f"request id {request_id} is already listening")
        server = self.server
        if kind == "log":
            log = await server.call(lambda: server.stores.log(body))
            reader = log.reader(_position(body.get("start", "latest")))  # (errors are the reply)
            batch = min(_get(body, "batch", int, 1000), READ_LIMIT_MAX)
            loop = self._log_events(request_id, _Tail(reader), batch, f"logs/{_name(body)}")
        elif kind == "kv":
            store = await server.call(lambda: server.stores.kv(body))
            keys = _need(body, "keys", list)
            if not keys or not all(isinstance(k, str) for k in keys):
                raise TypeError("field 'keys' must be a non-empty list of strings")
            watched = _Watched(store, keys)
            await server.call(watched.changed)  # the versions now, before the reply
            loop = self._kv_events(request_id, watched, f"kv/{_name(body)}/ops")
        else:
            raise ValueError(f"kind must be 'log' or 'kv', not {kind!r}")
        if self._reading:
            task = self.listens[request_id] = self.loop.create_task(loop)
            server.listen_tasks.add(task)  # (until it ends: an UNLISTEN or a lost connection)
            task.add_done_callback(server.listen_tasks.discard)
        else:
            loop.close()
        return {"ok": True}

    async def _changed(self, directory: str, look: Any) -> Any:
        """What ``look`` (a call in the pool) finds, once it finds anything: between looks, a
        wait on the event loop for a change in ``directory`` (under the data directory) by this
        daemon or any process, holding no thread (a LISTEN held one while it waited: 32 of them
        stopped every other store call), or LISTEN_POLL_S at most (a change the watch missed)."""
        tails = self.server.tails
        assert tails is not None  # (set when the native door starts)
        for _ in iter(int, 1):  # until something is found, or the LISTEN is cancelled
            fut = tails.register([directory])  # before the look: a change after it wakes us
            try:
                found = await self.server.read(look)  # (no event before what it shows is durable)
                if found:
                    return found
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(fut), LISTEN_POLL_S)
            finally:
                tails.unregister([directory], fut)

    async def _log_events(self, request_id: int, reader: Any, batch: int, directory: str) -> None:
        server = self.server
        try:
            for _ in iter(int, 1):  # until UNLISTEN, disconnection or shutdown cancels it
                records = await self._changed(directory, lambda: reader.batch(batch))
                await self.send(p.EVENT, p.LISTEN, request_id, {"records": records})
        except asyncio.CancelledError:
            await self.send(p.EVENT, p.LISTEN, request_id, {}, p.FLAG_END)
        except Exception as err:
            await self.send(p.EVENT, p.LISTEN, request_id, _error_body(err), p.FLAG_END | p.FLAG_ERROR)
        finally:
            await server.call(reader.close)  # (after a batch still running in its thread)

    async def _kv_events(self, request_id: int, watched: Any, directory: str) -> None:
        try:
            for _ in iter(int, 1):  # until UNLISTEN, disconnection or shutdown cancels it
                for key, version in await self._changed(directory, watched.changed):
                    await self.send(p.EVENT, p.LISTEN, request_id, {"key": key, "version": version})
        except asyncio.CancelledError:
            await self.send(p.EVENT, p.LISTEN, request_id, {}, p.FLAG_END)


def _error_body(err: BaseException) -> dict[str, Any]:
    return error_body(err)


def _hello(server: Server) -> dict[str, Any]:
    return hello_body(server)


def _raw_id(raw: bytes) -> int:
    return raw_id(raw)
