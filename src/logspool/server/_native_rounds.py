"""The native door's commit rounds (``_native.py`` is its connection): what the RESP door's
``Committer`` (``_resp_commit.py``) runs for it. A member of a round is a ``_Writes``, the writes
of one read of one connection; the round's "key-value store" is ``_RoundStores``, whose decision
spans the round and opens one decision of each store a batch writes and holds each log's writer
lock (``_Round``); ``NativeFront`` is what the Committer asks of its front (which locks a round on
the loop takes without waiting: ``_RoundStores.mutexes``, ``hold_streams``).

Durability: a write's reply is sent only after its round's fsync (``_Writes.take_writes`` tells the
round it wrote; ``_RoundStores.sync`` fsyncs every store the round wrote, once). A request's error
is its own reply; a failed write or fsync answers every request of the round with an error
(``_Writes._landed``).

What the Committer's interface gives the native door, and what it lacks. A member of a round
is a "session" (``name``, ``round``, ``run(cmds, sync=False)``, ``take_writes()``) whose outcome
goes to ``conn._landed``; its front gives ``kv`` (``decide()``, ``sync()``), ``server`` and
``tails``. Missing, and worked around here: (1) typed member and front interfaces (they are
RESP's ``Session`` and ``RespFront``: ``make_committer`` casts to Any); (2) a round decides its
front's one key-value store, so the native front's ``kv`` is ``_RoundStores``, whose "decision" spans
the round and opens one of each store a batch writes; (3) ``take_writes`` is asked after
``round`` is cleared, so a member must remember what it wrote itself; (4) a failed round
answers RESP bytes (``_Batch``), which ``_Writes._landed`` turns into error replies; (5) each
door has its own Committer, so a round of one never shares an fsync with the other's (one
Committer for both needs (2) in the Committer itself).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import struct
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, cast

from .. import _format as fmt
from .. import _wire as p
from .. import errors, limits
from ..kv import _ops as kv_ops
from ._resp_commit import Committer, _Batch
from ._resp_kv import Decision, RedisKV, View
from ._resp_streams import HeldTails
from ._server import Server, _name, error_body

if TYPE_CHECKING:
    from ._native import NativeConnection

_logger = logging.getLogger("logspool.server")
# Writes decided in the commit rounds (the rest run in the pool or on the loop).
KV_WRITES = frozenset(
    (p.KV_SET, p.KV_DELETE, p.KV_ADD, p.KV_NOT, p.KV_TRUNCATE, p.KV_LOCK, p.KV_UNLOCK, p.KV_RENAME)
)
WRITES = KV_WRITES | {p.LOG_APPEND}
_Request = tuple[int, int, dict[str, Any]]  # command, request id, body
_REPLY_HEADER = p.HEADER.pack
# kv.SET's replies, encoded once: {ok: true}, {ok: false}.
_OK_TRUE = p.encode_frame(p.REPLY, p.KV_SET, 0, {"ok": True})[p.HEADER_SIZE :]
_OK_FALSE = p.encode_frame(p.REPLY, p.KV_SET, 0, {"ok": False})[p.HEADER_SIZE :]
_OK_SIZE = len(_OK_TRUE)
assert len(_OK_FALSE) == _OK_SIZE
# A plain SET's reply frame, packed in one call: the reply header up to its request id, the
# request id, then the body's size and {ok: true} (a fifth of the header's packing and joining).
_SET_REPLY_HEAD = p.HEADER.pack(p.MAGIC, p.VERSION, p.REPLY, p.KV_SET, 0, 0, 0)[:8]
_OK_TRUE_TAIL = _OK_SIZE.to_bytes(4, "big") + _OK_TRUE
_OK_TRUE_FRAME = struct.Struct(f">{len(_SET_REPLY_HEAD)}sI{len(_OK_TRUE_TAIL)}s").pack
assert _OK_TRUE_FRAME(_SET_REPLY_HEAD, 7, _OK_TRUE_TAIL) == p.encode_frame(p.REPLY, p.KV_SET, 7, {"ok": True})
# log.APPEND's reply {first: lsn, count: n} (records appended), packed in one call likewise: the
# reply header up to its request id, the request id, the body's size, then the map's head and
# "first" with its integer tag, the lsn, "count" with its tag, the count.
_APPEND_REPLY_HEAD = p.HEADER.pack(p.MAGIC, p.VERSION, p.REPLY, p.LOG_APPEND, 0, 0, 0)[:8]
_FIRST_FIELD = b"\x08\x00\x00\x00\x02\x00\x05first" + bytes([p.INTEGER])
_COUNT_FIELD = b"\x00\x05count" + bytes([p.INTEGER])
_APPENDED_SIZE = len(_FIRST_FIELD) + 8 + len(_COUNT_FIELD) + 8
_APPENDED_FRAME = struct.Struct(
    f">{len(_APPEND_REPLY_HEAD)}sII{len(_FIRST_FIELD)}sq{len(_COUNT_FIELD)}sq"
).pack
assert _APPENDED_FRAME(_APPEND_REPLY_HEAD, 7, _APPENDED_SIZE, _FIRST_FIELD, 2**40, _COUNT_FIELD, 3) == (
    p.encode_frame(p.REPLY, p.LOG_APPEND, 7, {"first": 2**40, "count": 3})
)


KEY_CHARS_SAFE = limits.KV_KEY_SIZE_MAX // 4  # a key of at most this many characters fits in UTF-8
_ITEM = fmt.RECORD_OVERHEAD + 32  # (a bound's share for each item: a record's framing, an op's fields)


def _bound(body: dict[str, Any]) -> int:
    """At least the bytes of records a write request (its decoded body) makes: its strings and
    bytes (a str's UTF-8: 4 bytes a character at most), and for each item a record's framing
    and an op's own fields. (The flat shapes of kv.SET and log.APPEND first: 0.6 us, not 2.)"""
    size = 256
    for item in body.values():
        kind = type(item)
        if kind is bytes:
            size += len(item) + _ITEM
        elif kind is str:
            size += 4 * len(item) + _ITEM
        elif kind is list and len(item) == 1 and type(item[0]) is bytes:
            size += len(item[0]) + 2 * _ITEM
        else:
            size += _nested_bound(item)
    return size


def _nested_bound(item: object) -> int:
    """``_bound`` of one item of any shape (lists, dicts, strings, bytes; numbers count as items)."""
    size = 0
    items = [item]
    while items:  # bounded: each turn takes one item of the (finite, decoded) body
        x = items.pop()
        size += _ITEM
        if isinstance(x, bytes):
            size += len(x)
        elif isinstance(x, str):
            size += 4 * len(x)
        elif isinstance(x, list | tuple):
            items.extend(x)
        elif isinstance(x, dict):
            items.extend(x.keys())
            items.extend(x.values())
    return size


class _RoundStores:
    """The "key-value store" the native door's Committer decides (its front's ``kv``): a round's
    ``decide()`` spans the round, and opens a decision of each key-value store and holds the
    writer lock of each log that a batch of the round writes, when the first batch does
    (``_Round.kv``, ``_Round.log``); all are written when the round's block ends (one write a
    store a round), and ``sync`` fsyncs each of them once, before any reply of the round."""

    def __init__(self, stores: Any) -> None:
        self._stores = stores
        self._synced: list[Any] = []  # what the last round wrote (on the committer's thread)
        # Decisions opened for the next round on the loop (``prepare``), by store name: that
        # round's ``decide`` takes them (under ``_ROUNDS``, which the loop holds from ``prepare``).
        self._prepared: dict[str, tuple[Any, Decision, RedisKV]] = {}

    def mutexes(self, group: list[tuple[Any, list[_Request], Any]]) -> list[Any]:
        """The mutexes of the key-value stores a round of ``group`` writes, once each
        (``Committer._run_group`` takes them without waiting, on the loop; a store closed since
        has none: its batch finds out in the round)."""
        found: dict[int, Any] = {}
        for _, requests, _ in group:
            for command, _, body in requests:
                if command not in KV_WRITES:
                    continue
                store = self._stores.opened("kv", body.get("name", ""))
                if store is not None:
                    found[id(store)] = store._mutex
        return list(found.values())

    def prepare(self, group: list[tuple[Any, list[_Request], Any]]) -> bool:
        """For a commit round on the loop (``NativeFront.hold_streams``): open now, without
        waiting for its writer lock, the decision of every store the group writes that other
        processes may write too (a store the daemon owns never waits); False, none left open, if
        one's lock is held by another process (or opening it failed), or if the round might
        rotate its op log's segment (a rotation's fsync waits for the sync file's lock, which
        another process holds through its fsyncs: ``Tail.room``; a RENAME or a TRUNCATE writes
        ops as large as the values it moves or as many as the keys it drops): the round runs
        on the committer's thread, which may wait. The round's ``decide`` takes them."""
        stores = self._stores
        need: dict[str, int] = {}
        for _, requests, _ in group:
            for command, _, body in requests:
                if command in KV_WRITES:
                    name = body.get("name", "")
                    store = stores.opened("kv", name)
                    if store is None:  # (closed since the batch came: an open may wait)
                        return False
                    if store.single_writer:
                        continue
                    if command in (p.KV_RENAME, p.KV_TRUNCATE):
                        return False
                    need[name] = need.get(name, 0) + _bound(body)
        for name, size in need.items():
            store = stores.opened("kv", name)
            if store is None:  # (closed since: its batch finds out in the round, on the thread)
                self.unprepare()
                return False
            shared = RedisKV(store)
            # (no op made, nothing written, if the writer lock is taken or the records might
            # rotate the op log: LockedError)
            deciding = shared.decide(timeout_s=0, room=size)
            try:
                self._prepared[name] = (deciding, deciding.__enter__(), shared)
            except Exception:  # (LockedError; any other failure: the thread's round answers it)
                self.unprepare()
                return False
        return True

    def unprepare(self) -> None:
        """End the decisions ``prepare`` opened, unused (the round goes to the thread)."""
        prepared, self._prepared = self._prepared, {}
        for deciding, _, _ in reversed(prepared.values()):
            try:
                deciding.__exit__(None, None, None)
            except Exception:
                _logger.exception("ending a decision opened for a round on the loop failed")

    @contextlib.contextmanager
    def decide(self, owner: str | None = None) -> Iterator[_Round]:
        round_ = _Round()
        prepared, self._prepared = self._prepared, {}
        with round_.stack:
            for name, (deciding, d, shared) in prepared.items():
                round_.stack.push(deciding)  # (entered by ``prepare``: ended with the round)
                round_.kvs[name] = d
                round_.synced.append(shared)
            yield round_
        self._synced = round_.synced

    def written_alone(self, shared: RedisKV) -> None:
        """The last round wrote ``shared``'s store without a decision (``NativeFront.plain_round``):
        ``sync`` fsyncs it."""
        self._synced = [shared]

    def sync(self, *, gather: bool = False, wait: bool = True) -> bool:
        """fsync each store the last round wrote, once (``gather``, ``wait``: as ``Log.sync``'s).
        False only with ``wait=False``: the stores not yet durable are kept for the next call
        (the round's, on a thread that may wait: ``Committer._run_group``)."""
        synced = self._synced
        while synced:  # bounded: each turn syncs one store, or returns
            # (a log or a RedisKV: each fsyncs only if "always")
            if not synced[0].sync(gather=gather, wait=wait):
                return False
            synced.pop(0)
        return True


class _Round:
    """One commit round's open decisions (kv stores) and writer locks (logs), by name."""

    owner: str | None = None  # (set by the Committer; each request's own ``owner`` is checked)

    def __init__(self) -> None:
        self.stack = contextlib.ExitStack()
        self.tails: dict[str, Any] = {}
        self.kvs: dict[str, Decision] = {}
        self.synced: list[Any] = []

    def kv(self, name: str, store: Any) -> Decision:
        """The decision of ``store`` open for the rest of the round (opened by the first call):
        its public calls made on this thread join it (``kv.Store``: a call inside a decision of
        the same thread is part of it)."""
        d = self.kvs.get(name)
        if d is None:
            shared = RedisKV(store)
            d = self.kvs[name] = self.stack.enter_context(shared.decide())
            self.synced.append(shared)
        return d

    def log(self, name: str, log: Any, held: HeldTails | None = None) -> Any:
        """The ``Tail`` of ``log``, its writer lock held for the rest of the round: taken
        already if ``held`` holds it (a round on the loop takes its logs' locks before it runs,
        without a wait: ``NativeFront.hold_streams``), else taken now."""
        tail = self.tails.get(name)
        if tail is None:
            tail = held.tail_of(log) if held is not None else None
            if tail is None:
                tail = self.stack.enter_context(log.exclusive(sync=False))
            self.tails[name] = tail
            self.synced.append(log)
        return tail


class NativeFront:
    """What a Committer needs of its front (``kv``, ``server``, ``tails``, ``hold_streams``)."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.kv = _RoundStores(server.stores)
        # The server's waits (a LISTEN of a log): a round's appends wake them at once, as the
        # RESP door's wake its XREADs (an inotify event would too, a little later).
        self.tails = server.tails

    def decides_kv(self, round_: object) -> bool:
        """A round's decision (``_RoundStores.decide``) opens each store's when a batch first
        writes it: always entered."""
        return True

    def plain_round(self, round_: Sequence[tuple[Any, list[_Request], Any]]) -> list[list[bytes]] | None:
        """A commit round whose every request is a plain kv.SET (``_plain_set``) of one open store
        the daemon owns (kv.SET x1, x16): written without a decision, as the RESP door writes
        its own (``RespFront.plain_round``, ``RedisKV.alone``); each op ``Store.set``'s with its
        defaults (``_plain_set_op``). Its reply frames, one list a batch; or None, nothing
        written, for any other round, a request whose SET is not plain after all (``run``
        answers it), or a store that needs a decision for them: the round then runs as any
        round does. The round's fsync is the store's (``_RoundStores.sync``)."""
        name: str | None = None
        for _, requests, _ in round_:
            for command, _, body in requests:
                if command != p.KV_SET or not _plain_set(body):
                    return None
                if name is None:
                    name = body.get("name", "")
                elif body.get("name", "") != name:
                    return None
        store = self.server.stores.opened("kv", name) if name is not None else None
        if store is None or not store.single_writer or self.kv._prepared:
            return None
        shared = RedisKV(store)
        outcomes: list[list[bytes]] = []
        with shared.alone() as a:
            made: list[kv_ops.Set] = []
            for _, requests, _ in round_:
                frames: list[bytes] = []
                for _, request_id, body in requests:
                    op = _plain_set_op(a, body)
                    if op is None:
                        return None
                    made.append(op)
                    frames.append(_OK_TRUE_FRAME(_SET_REPLY_HEAD, request_id, _OK_TRUE_TAIL))
                outcomes.append(frames)
            try:
                if not a.write_many(made):
                    return None
            except errors.RecordTooLargeError:
                return None  # (checked before anything is written: ``run`` answers it)
        self.kv.written_alone(shared)
        return outcomes

    def committers(self) -> tuple[Committer | None, Committer | None]:
        """This door's committer and the RESP door's (None where a door has none)."""
        resp = self.server.resp
        return self.server._committer, resp.committer if resp is not None else None

    def hold_streams(self, group: list[tuple[Any, list[_Request], Any]]) -> HeldTails | None:
        """For a commit round on the loop (``Committer._run_group``): the writer lock of every
        log the group appends to, each taken only if it is free now, and the decision of every
        shared key-value store it writes, opened only if its writer lock is free now
        (``_RoundStores.prepare``); None, nothing held, if one is not (another process's handle
        holds it) or a log is not open (an open may wait): the round then runs on the thread,
        which may wait. ``_Round.log`` and ``_Round.kv`` use them."""
        held = HeldTails()
        stores = self.server.stores
        need: dict[str, int] = {}  # (each log's segment must have room for them all: take_now)
        for _, requests, _ in group:
            for command, _, body in requests:
                if command == p.LOG_APPEND:
                    name = body.get("name", "")
                    need[name] = need.get(name, 0) + _bound(body)
        for name, size in need.items():
            log = stores.opened("logs", name)
            if log is None or not held.take_now(log, size):
                held.close()
                return None
        if not self.kv.prepare(group):
            held.close()
            return None
        return held


class _Writes:
    """The writes of one read of one connection, a member of a commit round (a Committer
    "session"). ``run`` is called on the loop (``Committer.gather``) or on the committer's thread
    inside the round; it returns the encoded reply frames."""

    name: str | None = None  # (kv locks are checked against each request's own ``owner``)
    tails: HeldTails | None = None  # (set by the Committer: the logs' locks its round holds)

    def __init__(self, conn: NativeConnection, requests: list[_Request]) -> None:
        self.conn = conn
        self.requests = requests
        self.round: Any = None  # (set by the Committer while it runs this batch)
        self._wrote = False  # the round had written a store when this batch ended (take_writes)

    def run(self, cmds: list[_Request], *, sync: bool = False) -> list[bytes]:
        """Run the batch's writes in order inside the round (each store's ops written when the
        round ends, fsynced by it). Each request's error is its own reply."""
        round_ = self.round
        assert not sync and isinstance(round_, _Round)  # (always in a native round)
        server = self.conn.server
        stores = server.stores
        handlers = server._handlers
        counters = server.counters
        frames: list[bytes] = []
        for command, request_id, body in cmds:
            try:
                name = body.get("name", "")
                store = stores.opened("kv" if command != p.LOG_APPEND else "logs", name)
                if store is None:  # (closed since, or a name never checked: the long way)
                    name = _store_name(body)
                    store = stores.log(body) if command == p.LOG_APPEND else stores.kv(body)
                if command == p.LOG_APPEND:
                    frames.append(self._append(round_.log(name, store, self.tails), request_id, body))
                    continue
                if command == p.KV_SET and _plain_set(body):
                    # A plain SET (no option): the handler's call with its defaults, and its
                    # reply encoded once (a fifth of a SET's time in the round went to options).
                    round_.kv(name, store)
                    ok = store.set(body["key"], body["value"])
                    frames.append(_REPLY_HEADER(p.MAGIC, p.VERSION, p.REPLY, p.KV_SET, 0, request_id,
                                                _OK_SIZE) + (_OK_TRUE if ok else _OK_FALSE))  # fmt: skip
                    continue
                else:
                    round_.kv(name, store)
                    reply = handlers[command](body)
                frames.append(p.encode_frame(p.REPLY, command, request_id, reply))
            except Exception as err:
                counters.errors += 1
                if not isinstance(err, errors.LogspoolError | ValueError | TypeError | KeyError):
                    _logger.exception("%s: %s failed", self.conn.peer, p.COMMANDS.get(command))
                frames.append(error_frame(command, request_id, err))
        self._wrote = bool(round_.synced)
        return frames

    def plain_xadds(
        self, round_: Sequence[tuple[Any, list[Any], Any]], start: int, held: HeldTails
    ) -> tuple[list[list[bytes]], dict[str, Any]]:
        """The RESP door's plain XADDs (``Session.plain_xadds``): none here (a log.APPEND runs in
        ``run``, a plain one as cheaply)."""
        return [], {}

    def plain_sets(self, round_: Sequence[tuple[Any, list[Any], Any]], start: int) -> list[list[bytes]]:
        """In the committer's round (``round`` set, the round's batches in ``round_``): the
        batches from ``start`` on whose requests are all plain kv.SETs (``_plain_set``) of one
        open store, written here with one ``write_many`` for them all, as the RESP door's
        ``Session.plain_sets`` writes its own (SET x16: one call down the fold a round, not a
        ``Store.set`` a request). Their reply frames, one list a batch taken; none, nothing
        written, if the first batch is not such, or if the ops could not be written together
        (``run`` then runs each request through the store's own call, which answers its error).
        Each op is ``Store.set``'s with its defaults (``Decision.plain_set_op``, owner None)."""
        stores = self.conn.server.stores
        d: Decision | None = None
        first = ""
        made: list[kv_ops.Set] = []
        outcomes: list[list[bytes]] = []
        for _, cmds, _ in itertools.islice(round_, start, None):  # bounded by the round
            frames: list[bytes] = []
            ops_before = len(made)
            for command, request_id, body in cmds:  # bounded by the batch
                if command != p.KV_SET or not _plain_set(body):
                    break
                name = body.get("name", "")
                if d is None:
                    store = stores.opened("kv", name)
                    if store is None:  # (not open, or a name never checked: the long way)
                        break
                    try:
                        d, first = self.round.kv(name, store), name
                    except Exception:  # (closed meanwhile, locked...: ``run`` answers it, alone)
                        break
                elif name != first:
                    break
                op = _plain_set_op(d, body)
                if op is None:
                    break
                made.append(op)
                frames.append(_OK_TRUE_FRAME(_SET_REPLY_HEAD, request_id, _OK_TRUE_TAIL))
            if len(frames) != len(cmds):
                del made[ops_before:]  # (a batch is taken whole or not at all)
                break
            outcomes.append(frames)
        if not made or d is None:
            return []
        try:
            d.write_many(made)
        except (errors.LogspoolError, ValueError, TypeError):
            return []  # (checked before any op is applied)
        return outcomes

    def _append(self, tail: Any, request_id: int, body: dict[str, Any]) -> bytes:
        """A log.APPEND's reply frame, its records written to ``tail``."""
        records = body.get("records")
        if records is None:
            raise ValueError("field 'records' is missing")
        if not isinstance(records, list) or not all(isinstance(r, bytes) for r in records):
            raise TypeError("field 'records' must be a list of bytes")
        if not records:
            return p.encode_frame(p.REPLY, p.LOG_APPEND, request_id, {"first": None, "count": 0})
        lsns = tail.append_many(records)  # written now, fsynced by the round before any reply
        return _APPENDED_FRAME(_APPEND_REPLY_HEAD, request_id, _APPENDED_SIZE, _FIRST_FIELD, lsns[0],
                               _COUNT_FIELD, len(lsns))  # fmt: skip

    def take_writes(self) -> tuple[bool, dict[str, Any]]:
        """(wrote, {}): whether the round has written a store so far, so that the Committer
        calls its front's ``kv.sync`` (``_RoundStores.sync``: one fsync of each store written)
        before any reply. (Asked after ``run`` returned, once ``round`` is None again: a power
        cut lost every reply's write while this read ``round``.)"""
        wrote, self._wrote = self._wrote, False
        return wrote, {}

    def _landed(self, outcome: list[bytes] | _Batch | BaseException) -> None:
        """On the loop: the batch's round is durable, or failed (then every request of the
        batch gets an error reply: it may or may not be applied, as with a lost reply)."""
        if isinstance(outcome, list):
            self.conn._answered(outcome)
            return
        if isinstance(outcome, _Batch):  # the round's write or fsync failed (RESP's words)
            text = outcome.replies[0].decode("utf-8", "replace") if outcome.replies else ""
            err: BaseException = WriteFailedError(text.strip().lstrip("-").removeprefix("ERR "))
        else:
            err = outcome
        _logger.error("%s: a commit round failed: %s", self.conn.peer, err)
        self.conn.server.counters.errors += len(self.requests)
        self.conn._answered(
            [error_frame(command, request_id, err) for command, request_id, _ in self.requests]
        )


class WriteFailedError(Exception):
    """A commit round's write or fsync failed: its requests may or may not be applied."""


def _store_name(body: dict[str, Any]) -> str:
    return _name(body)


def _plain_set(body: dict[str, Any]) -> bool:
    """A kv.SET of a key (a string) and a value with no option but the defaults (overwrite and
    persist true, or absent: clients before 2516df1's sent both)."""
    if type(body.get("key")) is not str or "value" not in body:
        return False
    if len(body) == 3:
        return True
    return all(
        k in _SET_PLAIN_FIELDS or (k in _SET_DEFAULT_TRUE and (v is True or v is None))
        for k, v in body.items()
    )


def _plain_set_op(d: View, body: dict[str, Any]) -> kv_ops.Set | None:
    """The op of a plain kv.SET (``_plain_set``) in decision ``d``, as ``Store.set`` makes it with
    its defaults; None where ``Store.set`` would raise (a key that is not one, a value of a type
    or size the store refuses, a key locked by an owner: the request has none), which ``run``
    then answers through the store's own call."""
    key, value = body["key"], body["value"]
    try:
        # (a key of a few characters fits in UTF-8 whatever they are; a value of bytes is
        # ``encode_value``'s own: both as that call gives them, at a fifth of its cost)
        size = len(key) if len(key) <= KEY_CHARS_SAFE else len(key.encode("utf-8"))
        vtype, raw = (kv_ops.BYTES, value) if type(value) is bytes else kv_ops.encode_value(value)
    except (TypeError, ValueError):
        return None
    if not 0 < size <= limits.KV_KEY_SIZE_MAX or len(raw) > limits.KV_VALUE_SIZE_MAX:
        return None
    return d.plain_set_op(key, vtype, raw, None)


_SET_PLAIN_FIELDS = frozenset(("name", "key", "value"))
_SET_DEFAULT_TRUE = frozenset(("overwrite", "persist"))


def error_frame(command: int, request_id: int, err: BaseException) -> bytes:
    return p.encode_frame(p.REPLY, command, request_id, error_body(err), p.FLAG_ERROR)


def make_committer(server: Server, loop: asyncio.AbstractEventLoop) -> Committer:
    """The commit rounds of the native door: a Committer (the RESP door's class) whose round
    spans every store its batches write (``_RoundStores``)."""
    return Committer(cast(Any, NativeFront(server)), loop)
