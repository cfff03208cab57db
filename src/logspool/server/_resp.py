"""The RESP front door of the daemon: Redis's own protocol, so that redis-cli, redis-benchmark,
redis-py and other Redis clients work against logspool unchanged. docs/RESP.md lists the commands.

Longer than 600 lines: the connection (reading, pipelining, output bounds, blocking commands) and
the session (a batch's execution, MULTI, the read views) are one path a request takes; the commit
rounds (``_resp_commit.py``), the wire (``_resp_wire.py``) and the commands are apart already.

``logspool serve --data DIR --resp 127.0.0.1:6380``: the same ``Server`` as the native protocol,
with the same stores (so a key set here is read by the native client), token, connection limit
and counters. Keys and values live in one key-value store (``default``, or ``--resp-kv NAME``;
``_resp_kv.py`` maps Redis's strings onto its typed values), which the daemon owns
(``RespOptions.own_kv``: its writer lock until it stops, so an embedded
``kv.open(DIR/kv/default)`` in another process waits for it); stream keys are logs
(``_resp_streams.py``).

How a connection is served (one ``asyncio.Protocol`` each):
- Bytes are parsed on the event loop as they arrive (``_resp_wire.RespParser``: every bound is
  checked before buffering); every complete command of a read is taken at once.
- A connection's commands run in order, a batch of them (every complete command of a read, up to
  ``BATCH_COMMANDS_MAX``) at a time, and their replies go out in one write. Where a batch runs
  (``_Connection._execute``): reads on the event loop itself when the store's mutex is free;
  batches that write in the rounds of the one ``Committer``, each of which runs the batches of
  every connection as one decision of the store (one write) and one fsync (group commit); scans,
  ranges and blocking reads in the server's thread pool. The common cases skip the connection's
  task (``_Connection._serve_now``, from ``data_received``): reads run at once, a plain GET from
  one view of the batch (a read that is one whole GET, without the parser: ``_lone_get``);
  writes go to the committer and its round writes their replies (one ``_deliver`` a round); a
  round runs on the loop itself, every batch of a turn of the loop together, as Redis's do
  (``Committer.gather``), or on the committer's thread when it would wait there (a lock held
  elsewhere, a store shared with other processes) or while fsyncs are slow.
- Durability: writes are decided without waiting for an fsync, then each store written is synced
  once, *before* any reply of those batches is written: an acknowledged write is on disk with
  ``durability="always"`` (the default), and a round of N SETs costs one fsync.
- Bounds: the parser's (RespLimits); reading pauses while more than ``INPUT_PAUSE_SIZE`` bytes wait
  to be parsed; a batch stops taking commands once its replies pass ``BATCH_REPLY_SIZE_MAX``; no
  command runs while the socket's send buffer is over ``OUTPUT_HIGH_SIZE`` (a client that never
  reads stops being read: TCP pushes back), and a connection whose unsent replies pass
  ``output_size_max`` anyway is closed, as Redis's ``client-output-buffer-limit``.
- A protocol error answers ``-ERR Protocol error: ...`` and closes that connection only; an
  unknown command or a bad argument is an error reply and the connection goes on.
- A blocked XREAD waits on the event loop (``_resp_streams.Tails``), holding no thread.
- SIGTERM (``Server.stop``): stop reading, finish and answer the batch in hand, close.

One file for the connection and the session (a little past 700 lines): the two share the
batch's life (parse, place, run, reply) and its bounds, and the fast paths of the second phase
of issue 34 cross them (a plain GET or SET taken out of the dispatch, a connection's batch
handed to a round and answered from it). The commit rounds are ``_resp_commit.py``; the
commands are apart.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hmac
import itertools
import logging
import re
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from .. import _wire, errors, limits
from ..kv._ops import BYTES, Set
from ..kv._state import State
from . import _resp_jobs, _resp_stream_commands, _resp_strings
from . import _resp_wire as w
from ._resp_commands import (
    COMMANDS,
    INLINE,
    POOL,
    SET_NAMES,
    SLOW_WRITES,
    WRITER,
    Block,
    _arity_error,
    places,
)
from ._resp_commit import Committer, _Batch, settled_all, sync_writes
from ._resp_kv import NotHere, RedisError, RedisKV, View, from_bytes
from ._resp_streams import (
    STREAM_REPLY_BYTES_MAX,
    Cursor,
    Entry,
    HeldTails,
    Streams,
    Tails,
    entries_reply,
    fields_bound,
)

if TYPE_CHECKING:
    from ..kv import Store
    from ._server import Server

_logger = logging.getLogger("logspool.server.resp")

BATCH_COMMANDS_MAX = 1024  # commands run in one hop to the pool
BATCH_REPLY_SIZE_MAX = 4 * 1024 * 1024  # a batch stops taking commands once its replies pass this
INPUT_PAUSE_SIZE = 1024 * 1024  # stop reading while this much waits to be parsed (and a batch runs)
OUTPUT_HIGH_SIZE = 1024 * 1024  # no command runs while more than this waits to be sent
SCAN_CURSORS_MAX = 10_000  # SCAN cursors remembered (the oldest is forgotten first)
_GET = (b"GET", b"get")  # (another spelling takes the common path)
_LONE_GET = b"*2\r\n$3\r\nGET\r\n$"  # a read that may be one whole GET (``_lone_get``)
# A GET's header up to its key, its length in plain digits (``_whole_gets`` cuts a read at each).
_GET_HEADS = re.compile(rb"\*2\r\n\$3\r\nGET\r\n\$([1-9][0-9]{0,4})\r\n")
_LONE_SET = b"*3\r\n$3\r\nSET\r\n$"  # a read that may be one whole SET (``_lone_write``)
_LONE_SET_SIZE = len(_LONE_SET)
# A bulk string's length in plain digits (no sign, no leading zero but a lone 0), after its
# ``$`` (the first of a command: ``_whole_bulks``), and the header of each one after the first.
_BULK_FIRST_HEAD = re.compile(rb"(0|[1-9][0-9]{0,7})\r\n")
_BULK_HEAD = re.compile(rb"\r\n\$(0|[1-9][0-9]{0,7})\r\n")
_LONE_XADD = b"*5\r\n$4\r\nXADD\r\n$"  # a read that may be one whole XADD of one field (``_lone_write``)
_SET = SET_NAMES
# The header of a bulk string reply of each small size (``Session.gets``: no formatting a GET).
_BULK_HEADS_N = 4096
_BULK_HEADS = tuple(b"$%d\r\n" % n for n in range(_BULK_HEADS_N))


def _apart(cmds: list[list[bytes]]) -> int:
    """How many of a batch's commands run together: up to the first write after a command of
    the pool, or the first command of the pool after a write (``_Connection._execute``). A
    write runs only in a commit round, whose fsync comes before any read sees it: run in the
    pool with a slow read (``SET k v`` then ``KEYS *``, as a redis-py pipeline sends them), its
    decision would be seen by other connections' reads before the batch's fsync at its end."""
    pool = write = False
    for i, args in enumerate(cmds):
        place = PLACES.get(args[0].upper(), POOL)
        if place == POOL:
            if write:
                return i
            pool = True
        elif place == WRITER:
            if pool:
                return i
            write = True
    return len(cmds)


def _whole_gets(data: bytes) -> list[bytes] | None:
    """The keys of a read that is whole ``GET key`` commands only, each as a client sends it
    (``_LONE_GET``, the key's length in plain digits: no sign, no leading zero, the key, CRLF);
    None for anything else (the parser takes it). Cut at each header (``_GET_HEADS``): a key
    holding a header's bytes leaves its piece shorter than its length says, so every piece
    matching its own length exactly is the parse the parser would make, one command after
    another. (One ``re.split`` in C: a third less than cutting at ``_LONE_GET`` and reading
    each length in Python, GET -P16.)"""
    pieces = _GET_HEADS.split(data)
    if pieces[0] or len(pieces) > 2 * BATCH_COMMANDS_MAX + 1:
        return None
    keys = []
    for digits, piece in zip(pieces[1::2], pieces[2::2], strict=True):  # (a length, what follows)
        size = int(digits)
        if len(piece) != size + 2 or piece[size:] != b"\r\n":
            return None
        keys.append(piece[:size])
    return keys


def _whole_bulks(data: bytes, at: int, count: int) -> list[bytes] | None:
    """The ``count`` bulk strings of a read that is one whole command as a client sends it and
    nothing else, the first one's length starting at ``at`` (just past its ``$``): each length in
    plain digits (no sign, no leading zero but a lone 0 for an empty string); None for anything
    else (the parser takes it). (Each header matched in C, ``_BULK_HEAD``: a SET's two in a
    third of the time a loop over their bytes took, SET x50.)"""
    head = _BULK_FIRST_HEAD.match(data, at)
    out: list[bytes] = []
    for _ in range(count):  # bounded by count
        if head is None:
            return None
        start = head.end()
        stop = start + int(head.group(1))
        out.append(data[start:stop])
        head = _BULK_HEAD.match(data, stop)
    if len(data) != stop + 2 or data[stop:] != b"\r\n":
        return None
    return out


def _whole_set(data: bytes) -> tuple[bytes, bytes] | None:
    """The key and value of a read that is one whole ``SET key value`` as a client sends it
    (``_LONE_SET``, ``_whole_bulks``), the key not empty, and nothing else; None for anything
    else (the parser takes it)."""
    found = _whole_bulks(data, _LONE_SET_SIZE, 2)
    if found is None or not found[0]:
        return None
    return found[0], found[1]


def _whole_xadd(data: bytes) -> list[bytes] | None:
    """The key, ``*``, field and value of a read that is one whole ``XADD key * field value`` as
    a client sends it (``_LONE_XADD``, ``_whole_bulks``: the id ``*``, one field), and nothing
    else; None for anything else (the parser takes it)."""
    found = _whole_bulks(data, len(_LONE_XADD), 4)
    if found is None or found[1] != b"*":
        return None
    return found


def bulk_replies(store: Store, keys: list[bytes], nil: bytes) -> bytes | None:
    """The replies of GETs of these keys (GET -P16), each of a value held as bytes or of a
    missing key (``nil``), joined; None, having done nothing but touch the entries it passed, for
    a key that is not one or a value that is not such (cold, lost, a touch TTL, another type,
    expired: ``Session.run`` answers those). Under the store's mutex. (``_get``'s checks written
    out in one loop: a sixth of a pipelined GET's cost in process; benchmarks/bench_get_lookup.py
    times it over a real store.)"""
    state = store._current()
    now = store._clock()
    values = state.values
    lru = state._lru
    out: list[bytes] = []
    size_max = limits.KV_KEY_SIZE_MAX
    heads = _BULK_HEADS
    for raw in keys:
        if not raw or len(raw) > size_max:
            return None
        try:
            entry = values.get(raw.decode())
        except UnicodeDecodeError:
            return None
        if entry is None:
            out.append(nil)
            continue
        value = entry.value
        if value is None or entry.touch_ns or entry.vtype != BYTES or 0 < entry.expire_ns <= now:
            return None
        # (touched here: if a later command sends the batch to ``run``, it touches this entry
        # again, as it would have anyway)
        entry.accessed_ns = now
        if lru and entry.key in lru:
            lru.move_to_end(entry.key)
        size = len(value)
        out += (heads[size] if size < _BULK_HEADS_N else b"$%d\r\n" % size, value, b"\r\n")
    return b"".join(out)


@dataclass
class RespOptions:
    """The RESP front door's settings (``logspool serve --resp ...``)."""

    host: str = "127.0.0.1"
    port: int = 6380
    kv: str = "default"  # the key-value store of GET, SET and the rest
    # The daemon owns that store (``kv.open(single_writer=True, compact_in_background=True)``):
    # no catch-up with other processes' writes before a round, no cross-process fsync protocol,
    # no commit round stalled by a snapshot. ``kv.open`` of it in another process waits for the
    # daemon to stop (or LockedError). False: shared, as the others.
    own_kv: bool = True
    flushdb: bool = False  # FLUSHDB and FLUSHALL delete every key only when this is on
    output_size_max: int = 64 * 1024 * 1024  # unsent replies of one connection before it is closed
    limits: w.RespLimits = field(default_factory=w.RespLimits)


class RespFront:
    """The RESP listener of a ``Server``: options, the shared key-value adapter, the stream
    waiters, SCAN cursors, client ids."""

    def __init__(self, server: Server, options: RespOptions) -> None:
        if not _wire.NAME_RE.fullmatch(options.kv):
            raise ValueError(
                f"the RESP key-value store's name must match {_wire.NAME_RE.pattern}, not {options.kv!r}"
            )
        self.server = server
        self.options = options
        self.streams = Streams(server.stores, server.data)
        self._kv: RedisKV | None = None
        self._kv_lock = threading.Lock()
        self._ids = itertools.count(1)
        self.requests: collections.Counter[bytes] = collections.Counter()  # commands run, by name
        self._cursors: dict[int, str] = {}
        self._cursor_ids = itertools.count(1)
        self._cursor_lock = threading.Lock()
        self.tails: Tails | None = None
        self.committer: Committer | None = None
        self._listener: asyncio.Server | None = None
        self.connections: set[_Connection] = set()

    @property
    def kv(self) -> RedisKV:
        found = self._kv
        if found is not None:
            return found
        with self._kv_lock:
            if self._kv is None:
                store = self.server.stores.get("kv", self.options.kv, own=self.options.own_kv)
                self._kv = RedisKV(store)
            return self._kv

    def request_counts(self) -> dict[str, int]:
        """Commands run, as the daemon's counters name them (``resp.get``...)."""
        return {"resp." + k.decode("ascii", "replace").lower(): v for k, v in list(self.requests.items())}

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        await self.server.call(lambda: self.kv)  # open (and recover) the store off the loop
        self.tails = self.server.tails  # (the daemon's, both doors': the daemon closes it)
        assert self.tails is not None
        self.committer = Committer(self, loop)
        self._listener = await loop.create_server(
            lambda: _Connection(self), self.options.host, self.options.port, ssl=self.server._ssl
        )
        self.options.port = self._listener.sockets[0].getsockname()[1]
        _logger.info("serving RESP on %s:%d (key-value store %r)", self.options.host, self.options.port,
                     self.options.kv)  # fmt: skip

    def hold_streams(self, group: list[tuple[Session, list[list[bytes]], Any]]) -> HeldTails | None:
        """For a commit round on the loop (``Committer._run_group``): the writer lock of every
        stream the group's XADDs append to, each taken only if it is free now; None, nothing
        held, if one is not (another process's handle holds it), or a stream is not open (an
        open may wait): the round then runs on the thread, which may wait."""
        held = HeldTails()
        stores = self.server.stores
        need: dict[bytes, int] = {}  # (each stream's segment must have room for them all)
        for _, cmds, _ in group:
            for args in cmds:
                if len(args) >= 2 and (args[0] == b"XADD" or args[0].upper() == b"XADD"):
                    need[args[1]] = need.get(args[1], 0) + fields_bound(args)
        for name, size in need.items():
            log = stores.opened("logs", name.decode("utf-8", "replace"))
            if log is None or not held.take_now(log, size):
                held.close()
                return None
        return held

    def answered(self) -> bool:
        """Whether every commit round started so far, this door's and the native door's (a
        native write may be to this door's store), is durable and answered: a read may then
        reply at once. A read on the loop asks before it takes the store's mutex and again once
        it holds it (a round on the thread may have decided in between: it numbers itself
        before it takes the mutex)."""
        c, n = self.committer, self.server._committer
        return (c is None or c.delivered >= c.rounds) and (n is None or n.delivered >= n.rounds)

    def settled(self) -> asyncio.Future[Any] | None:
        """After a read: a future done once every commit round started so far, of both doors,
        is durable and answered; None if they all are."""
        return settled_all(*self.committers())

    def committers(self) -> tuple[Committer | None, Committer | None]:
        """This door's committer and the native door's (None where a door has none)."""
        return self.committer, self.server._committer

    def decides_kv(self, round_: Sequence[tuple[Any, list[list[bytes]], Any]]) -> bool:
        """Whether a commit round of these batches opens a decision of the store: not for one
        of XADDs only (each stream's lock is the round's own: ``hold_streams``)."""
        return not all(args[0].upper() == b"XADD" for _, cmds, _ in round_ for args in cmds)

    def plain_round(self, round_: Sequence[tuple[Any, list[list[bytes]], Any]]) -> list[_Batch] | None:
        """A commit round whose every batch is one plain ``SET key value`` (SET x1, SET x16), on a
        store the daemon owns: written without a decision (``RedisKV.alone``), each checked
        against its own session as ``Session.plain_sets`` checks it. Their outcomes, each +OK; or
        None, nothing written, for any other round, or if one is not plain (a lock, MULTI,
        before AUTH...), or if the store needs a decision for them: the round then runs as any
        round does (``Committer._decide``)."""
        if not self.kv.store.single_writer:
            return None
        for _, cmds, _ in round_:
            if len(cmds) != 1 or len(args := cmds[0]) != 3 or args[0] not in _SET:
                return None
        with self.kv.alone() as a:
            made: list[Set] = []
            for session, cmds, _ in round_:
                op = session.plain_set_op(cmds[0], a)
                if op is None:
                    return None
                made.append(op)
            try:
                if not a.write_many(made):
                    return None
            except errors.RecordTooLargeError:
                return None  # (checked before anything is written: the round answers it)
        self.requests[b"SET"] += len(made)
        return [_Batch([w.OK], []) for _ in made]

    def owns_kv(self) -> bool:
        """Whether the daemon holds its key-value store's writer lock (``own_kv``): a decision of
        it then waits for no other process, and its rounds may run on the loop."""
        return bool(self.kv.store.single_writer)

    def close_listener(self) -> None:
        if self._listener is not None:
            self._listener.close()

    def close(self) -> None:
        if self.committer is not None:
            self.committer.stop()

    def close_stores(self) -> None:
        """After the pool's threads are done: the consumer groups' stores (each op was durable
        already; group commands run in the pool)."""
        self.streams.close()

    def next_id(self) -> int:
        return next(self._ids)

    def cursor_for(self, key: str) -> int:
        with self._cursor_lock:
            cid = next(self._cursor_ids)
            self._cursors[cid] = key
            while len(self._cursors) > SCAN_CURSORS_MAX:
                del self._cursors[next(iter(self._cursors))]
            return cid

    def cursor_key(self, cid: int) -> str:
        with self._cursor_lock:
            key = self._cursors.get(cid)
        if key is None:
            raise RedisError("ERR invalid cursor")
        return key

    def check_token(self, password: bytes) -> bool:
        token = self.server._token
        return token is not None and hmac.compare_digest(password, token)


class _Connection(asyncio.Protocol):
    """One client. Parsing and writing on the event loop; commands in the pool (``Session``)."""

    def __init__(self, front: RespFront) -> None:
        self.front = front
        self.server = front.server
        self.loop = asyncio.get_running_loop()
        self.parser = w.RespParser(front.options.limits)
        self.session = Session(front, self)
        self.transport: asyncio.Transport | None = None
        self.done = asyncio.Event()
        self._wake = asyncio.Event()
        self._writable = asyncio.Event()
        self._writable.set()
        self._reading = True
        self._paused = False
        self._busy = False
        self._idle = False  # the task waits for data with nothing in hand
        # A batch of writes handed to the committer by the fast path (``_serve_now``), its
        # replies not written yet: nothing else of this connection runs until they are.
        self._inflight = False
        self._pending: list[list[bytes]] = []  # commands parsed, not yet run
        self._eof = False
        self._lost = False
        self._task: asyncio.Task[None] | None = None
        self._block: asyncio.Future[None] | None = None
        self.peer = "?"

    # --- asyncio.Protocol -----------------------------------------------------------------------
    def connection_made(self, base: asyncio.BaseTransport) -> None:
        self.transport = transport = cast(asyncio.Transport, base)  # (uvloop's is not a subclass)
        self.peer = str(transport.get_extra_info("peername"))
        server = self.server
        if server.connection_count() >= server.limits.connections_max:
            server.counters.refused += 1
            transport.write(w.error("ERR max number of clients reached"))
            transport.close()
            self.done.set()
            return
        self.front.connections.add(self)
        server.counters.connections = server.connection_count()
        server.counters.connections_total += 1
        self.parser.authenticated = server._token is None
        transport.set_write_buffer_limits(high=OUTPUT_HIGH_SIZE)
        self._task = self.loop.create_task(self._run())

    def data_received(self, data: bytes) -> None:
        if not self._reading:
            return
        self.server.counters.bytes_in += len(data)
        if self._idle and not (self._inflight or self._paused):  # (the reads taken without the parser)
            if data.startswith(_LONE_GET):
                if self._lone_get(data):
                    return
            elif data.startswith(_LONE_SET):
                if self._lone_write(_whole_set(data), b"SET"):
                    return
            elif data.startswith(_LONE_XADD) and self._lone_write(_whole_xadd(data), b"XADD"):
                return
        self.parser.feed(data)
        if self._inflight:  # (its commands run once the batch in flight is answered: _landed)
            if self.parser.buffered > INPUT_PAUSE_SIZE and not self._paused:
                assert self.transport is not None
                self.transport.pause_reading()
                self._paused = True
            return
        if self._idle and not self._paused and self._serve_now():
            return
        if self._busy and self.parser.buffered > INPUT_PAUSE_SIZE and not self._paused:
            assert self.transport is not None
            self.transport.pause_reading()
            self._paused = True
        self._wake.set()

    def _serve_now(self) -> bool:
        """The fast path, in data_received itself (or once a batch in flight is answered), while
        the connection is idle: a batch of reads that can run on the loop now (the store's mutex
        free, no commit round unanswered) runs and is answered at once; a batch of writes goes
        to the committer, whose round writes its replies (``_landed``). Neither wakes the
        connection's task (two task steps, an Event and a Future a command: a third of a GET's
        cost with one client, a quarter of a SET's loop time). True if it did; else the task
        takes the commands parsed here."""
        if not self._writable.is_set() or self._eof or not self._reading:
            return False
        try:
            cmds = self.parser.commands(BATCH_COMMANDS_MAX)
        except w.RespProtocolError:
            return False  # (the parser raises it again for the task, which answers it)
        if not cmds:
            return True  # a command not complete yet: nothing to do until more comes
        committer = self.front.committer
        if cmds[0][0] in _GET and committer is not None and self.front.answered():
            # GETs only (GET -P16), before the dispatch below looks at each command (``gets``
            # answers None, having done nothing, for any other batch).
            mutex = self.front.kv.store._mutex
            if mutex.acquire(blocking=False):
                try:
                    got = self.session.gets(cmds) if self.front.answered() else None
                finally:
                    mutex.release()
                if got is not None:
                    self._write(got)
                    return not self.parser.failed
        where = INLINE
        on_loop = True  # (the batch's round may run on the loop: Committer.gather)
        for args in cmds:
            name = args[0]
            place = PLACES.get(name)  # (a client's usual spelling: no upper() a command)
            if place is None:
                name = name.upper()
                place = PLACES.get(name, POOL)
            if place == POOL or name == b"QUIT":
                where = POOL
                break
            if place > where:
                where = place
            if name in _THREAD_WRITES and not (name == b"XADD" and len(args) >= 5 and args[2] == b"*"):
                on_loop = False  # (an XADD with no option: its stream's lock taken without a wait)
        if where == WRITER and committer is not None and not self.parser.failed:
            self._inflight = True
            if not (on_loop and self.front.owns_kv() and committer.gather(self.session, cmds, self)):
                committer.submit(self.session, cmds, self)
            return True
        if where == INLINE and committer is not None and self.front.answered():
            mutex = self.front.kv.store._mutex
            if mutex.acquire(blocking=False):
                try:
                    batch = self.session.run(cmds, locked=True) if self.front.answered() else None
                finally:
                    mutex.release()
                if batch is None:  # (a round decided meanwhile: the task reads, then waits for it)
                    self._pending = cmds
                    return False
                self._write(b"".join(batch.replies))
                if not batch.rest and batch.block is None and not batch.close and not self.parser.failed:
                    return True
                self._pending = batch.rest  # (rare: replies past BATCH_REPLY_SIZE_MAX)
                return False
        self._pending = cmds
        return False

    def _lone_get(self, data: bytes) -> bool:
        """A read that is one whole ``GET key`` and nothing else, nothing buffered before it (a
        client that waits for each reply: GET x1), answered here as ``_serve_now`` would answer
        it, without the parser, the batch and the session's run (half a lone GET's cost on the
        loop); or whole GETs only (GET -P16: ``_whole_gets``, then ``Session.gets_of``, a
        quarter of a pipelined GET's cost). False, having done nothing, for anything else: the
        parser takes it."""
        end = data.find(b"\r\n", len(_LONE_GET))
        digits = data[len(_LONE_GET) : end]
        # (the length as the parser takes it: digits only, no sign, no leading zero; else it says)
        if not 0 < len(digits) <= 5 or not digits.isdigit() or digits[0] == 48:
            return False
        start = end + 2
        stop = start + int(digits)
        keys = None
        if len(data) != stop + 2 or not data.endswith(b"\r\n"):
            keys = _whole_gets(data)  # (a pipeline of GETs: GET -P16)
            if keys is None:
                return False
        if self.parser.buffered or self.parser.failed or not self._writable.is_set() or self._eof:
            return False
        committer = self.front.committer
        session = self.session
        if committer is None or not self.front.answered() or session.multi is not None:
            return False
        if not session.authed:
            return False
        store = self.front.kv.store
        if not store._mutex.acquire(blocking=False):
            return False
        try:
            if not self.front.answered():
                return False  # (a round decided meanwhile: the parser's path waits for it)
            if keys is not None:
                reply = session.gets_of(keys)
            else:
                reply = session._get(store._current(), store._clock(), data[start:stop])
                if reply is not None:
                    self.front.requests[b"GET"] += 1
        except errors.LogspoolError:
            return False  # (the store's error, answered by the common path)
        finally:
            store._mutex.release()
        if reply is None:
            return False
        self._write(reply)
        return True

    def _lone_write(self, found: Sequence[bytes] | None, name: bytes) -> bool:
        """A read that is one whole plain write and nothing else, nothing buffered before it
        (``_whole_set``: SET x16, x50, x1; ``_whole_xadd``: XADD x16; each client waits for its
        reply), ``found`` its arguments after ``name``, handed to the committer as ``_serve_now``
        would hand it, without the parser. False, having done nothing, for anything else
        (``found`` None): the parser takes it."""
        if found is None:
            return False
        parser = self.parser
        if max(map(len, found)) > parser.limits.bulk_size_max or len(found) >= parser.limits.args_max:
            return False  # (the parser refuses it, in Redis's words)
        if parser.buffered or parser.failed or not parser.authenticated:
            return False  # (before AUTH the parser's tighter bounds apply)
        committer = self.front.committer
        if committer is None or not self._writable.is_set() or self._eof or not self._reading:
            return False
        cmds = [[name, *found]]
        self._inflight = True
        if not (self.front.owns_kv() and committer.gather(self.session, cmds, self)):
            committer.submit(self.session, cmds, self)
        return True

    def _landed(self, outcome: _Batch | BaseException) -> None:
        """On the loop: the batch the fast path handed to the committer is durable and answered
        (its round's ``_deliver``); the connection goes on with what came meanwhile."""
        self._inflight = False
        if isinstance(outcome, BaseException):
            _logger.error("%s: RESP batch failed: %r", self.peer, outcome)
            if self.transport is not None:
                self.transport.abort()
            self._lost = True
            self._wake.set()
            return
        self._write(b"".join(outcome.replies))
        if outcome.rest or outcome.block is not None or outcome.close:
            self._pending = outcome.rest  # (rare: replies past BATCH_REPLY_SIZE_MAX: the task)
            self._wake.set()
            return
        if self._paused or not self._idle or self._lost:
            self._wake.set()
            return
        served = not (self.parser.buffered or self.parser.failed) or self._serve_now()
        if not served or self._eof:
            self._wake.set()

    def eof_received(self) -> bool:
        self._eof = True  # answer what came before the end, then close
        self._wake.set()
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._writable.set()
        self._wake.set()
        if self._block is not None and not self._block.done():
            self._block.cancel()

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    # --- serving --------------------------------------------------------------------------------
    def stop_reading(self) -> None:
        """Shutdown: no more commands; the batch in hand finishes and is answered."""
        self._reading = False
        self._eof = True
        self._wake.set()
        if self._block is not None and not self._block.done():
            self._block.cancel()

    def _write(self, data: bytes) -> None:
        transport = self.transport
        if transport is None or self._lost or not data:
            return
        if self.server.failure is not None:  # (a store's fsync failed: no reply from now on)
            self._lost = True
            transport.abort()
            return
        self.server.counters.bytes_out += len(data)
        transport.write(data)
        if transport.get_write_buffer_size() > self.front.options.output_size_max:
            _logger.warning("%s: closing the RESP connection: more than %d bytes of replies unsent",
                            self.peer, self.front.options.output_size_max)  # fmt: skip
            transport.abort()
            self._lost = True

    async def _run(self) -> None:
        try:
            for _ in itertools.count():  # bounded by the connection's life
                if self._inflight and not self._lost:
                    self._wake.clear()  # (its _landed wakes us if there is more to do)
                    self._idle = True
                    try:
                        await self._wake.wait()
                    finally:
                        self._idle = False
                    continue
                if not self._pending:
                    try:
                        self._pending = self.parser.commands(BATCH_COMMANDS_MAX) if self._reading else []
                    except w.RespProtocolError as err:
                        self.server.counters.protocol_errors += 1
                        _logger.warning("%s: RESP protocol error: %s", self.peer, err)
                        self._write(w.error(f"ERR Protocol error: {err}"))
                        return
                if self._paused and (not self._pending or self.parser.buffered < INPUT_PAUSE_SIZE):
                    assert self.transport is not None
                    self._paused = False
                    self.transport.resume_reading()
                if self._lost:
                    return
                if not self._pending:
                    if self._eof:
                        return
                    self._wake.clear()
                    self._idle = True  # (data_received may serve the next reads itself)
                    try:
                        await self._wake.wait()
                    finally:
                        self._idle = False
                    continue
                if not self._writable.is_set():
                    await self._writable.wait()  # no command runs while replies wait to be sent
                    continue
                self._busy = True
                try:
                    batch = await self._execute(self._pending)
                finally:
                    self._busy = False
                self._write(b"".join(batch.replies))
                self._pending = batch.rest
                if batch.block is not None:
                    self._write(await self._blocked(batch.block))
                if batch.close:
                    return
        except Exception:
            _logger.exception("%s: RESP connection failed", self.peer)
        finally:
            self.front.connections.discard(self)
            self.server.counters.connections = self.server.connection_count()
            if self.transport is not None:
                self.transport.close()
            self.done.set()

    async def _execute(self, cmds: list[list[bytes]]) -> _Batch:
        """Run a batch where it belongs (``place``): reads on the event loop if the store is free
        right now, writes in a commit round on the committer thread, the rest (scans, ranges)
        in the pool. A batch with both writes and pool commands runs in turns (``_apart``): a
        write runs in a commit round only, whose fsync comes before any read can see it."""
        cut = _apart(cmds)
        later = cmds[cut:]
        cmds = cmds[:cut]
        batch = await self._execute_here(cmds)
        if later:
            batch.rest = batch.rest + later
        return batch

    async def _execute_here(self, cmds: list[list[bytes]]) -> _Batch:
        where = max(PLACES.get(args[0].upper(), POOL) for args in cmds)
        committer = self.front.committer
        assert committer is not None
        if where == WRITER:
            return await committer.submit(self.session, cmds)
        batch: _Batch | None = None
        if where == INLINE:
            mutex = self.front.kv.store._mutex
            if mutex.acquire(blocking=False):  # never wait on the loop (a decision holds it)
                try:
                    batch = self.session.run(cmds, locked=True)
                finally:
                    mutex.release()
                if batch.pool and not batch.replies:  # (its first read would write: in the pool)
                    batch = None
        if batch is None:  # (what it read is durable before the reply goes out)
            return await self.server.read(lambda: self.session.run(cmds))  # type: ignore[no-any-return]
        settling = self.front.settled()  # (likewise)
        if settling is not None:
            await settling
        return batch

    async def _blocked(self, block: Block) -> bytes:
        """Wait until ``block.retry`` has a reply (a change in a watched directory, by any process,
        or the time it named), holding no thread; its reply, or the timeout's."""
        tails = self.front.tails
        assert tails is not None
        for _ in itertools.count():  # bounded by the deadline, or by the connection's life
            fut = tails.register(block.watch)  # before the look: a change after it wakes us
            self._block = fut
            try:
                # (as in _execute: no reply shows a write not yet durable)
                got: tuple[bytes | None, float | None] = await self.server.read(block.retry)
                reply, again_at = got
                if reply is not None:
                    return reply
                now = time.monotonic()
                timeout = None if block.deadline is None else block.deadline - now
                if timeout is not None and timeout <= 0:
                    break
                if again_at is not None:  # (a delayed job becoming ready: no write to wake us)
                    wait_s = max(0.0, again_at - time.time())
                    timeout = wait_s if timeout is None else min(timeout, wait_s)
                try:
                    await asyncio.wait_for(asyncio.shield(fut), timeout)
                except TimeoutError:
                    continue  # look again: the deadline is checked above
                except asyncio.CancelledError:
                    if self._lost or not self._reading:
                        break
                    raise
            finally:
                tails.unregister(block.watch, fut)
                self._block = None
        return block.timeout_reply


class _Reading:
    """The store's state for a read, under its mutex; in a transaction or a committer round, that
    decision's state (a read there does not extend a touch TTL). One catch-up with the op log per
    batch: its commands arrived together, so reading them all as of its start is a moment the
    client cannot tell from the batch arriving at once. (A class, not a generator: this is on
    every GET's path and costs a third as much.)"""

    __slots__ = ("_mutex", "_session")

    def __init__(self, session: Session) -> None:
        self._session = session
        self._mutex: Any = None

    def __enter__(self) -> View:
        s = self._session
        shared = s._tx if s._tx is not None else s.round
        if shared is not None:
            return shared  # type: ignore[no-any-return]
        store = s.front.kv.store
        mutex = store._mutex
        mutex.acquire()
        self._mutex = mutex
        try:
            if not s._caught_up:
                store._current()
                s._caught_up = True
            view = View(store, store._clock(), s.name)
            view.on_loop = s.on_loop
            return view
        except BaseException:
            self._mutex = None
            mutex.release()
            raise

    def __exit__(self, *exc: object) -> None:
        if self._mutex is not None:
            self._mutex.release()
            self._mutex = None


class Session:
    """A connection's state and its commands. ``run`` is called from a pool thread, one batch at a
    time per connection."""

    def __init__(self, front: RespFront, conn: _Connection) -> None:
        self.front = front
        self.conn = conn
        self.id = front.next_id()
        self.proto = 2
        self.authed = front.server._token is None
        self.name: str | None = None
        self.multi: list[list[bytes]] | None = None
        self.multi_failed = False
        self.watched: dict[str, int | None] = {}
        self._tx: Any = None  # the Decision of a running EXEC
        self.round: Any = None  # the committer's Decision, while it runs this session's batch
        self.tails: HeldTails | None = None  # the round's held writer locks of logs (XADD)
        self._wrote_kv = False
        self._wrote_logs: dict[str, Any] = {}
        self._caught_up = False  # the store was caught up with its op log in this batch
        self.on_loop = False  # a batch of reads runs on the event loop (``run(locked=True)``)
        self.closing = False

    # --- running a batch --------------------------------------------------------------------------
    def run(self, cmds: list[list[bytes]], *, sync: bool = True, locked: bool = False) -> _Batch:
        """Run commands in order until one blocks or closes, or the replies pass
        BATCH_REPLY_SIZE_MAX. ``sync``: make the batch's writes durable before returning (the
        committer passes False and syncs every batch of its round at once). ``locked``: the
        caller holds the store's mutex (a batch of reads on the loop): a plain GET is answered
        from one view of the batch (``_get``)."""
        replies: list[bytes] = []
        size = 0
        batch = _Batch(replies, [])
        self._caught_up = False
        view: View | None = None
        gets = sets = 0
        self.on_loop = locked  # (its reads never write: ``NotHere``)
        try:
            for i, args in enumerate(cmds):
                if size > BATCH_REPLY_SIZE_MAX:
                    batch.rest = cmds[i:]
                    break
                if locked and len(args) == 2 and args[0] in _GET and self.multi is None and self.authed:
                    if view is None:
                        view = self._batch_view()
                    got = self._get(view.state, view.now, args[1])
                    if got is not None:
                        gets += 1
                        replies.append(got)
                        size += len(got)
                        continue
                elif len(args) == 3 and args[0] in _SET and self.round is not None and self._plain_set(args):
                    sets += 1
                    replies.append(w.OK)
                    size += 5
                    continue
                try:
                    reply = self.execute(args)
                except NotHere:
                    # (on the loop: this command and the rest go to the pool; the replies
                    # before it stand, their commands are not run again)
                    batch.rest, batch.pool = cmds[i:], True
                    break
                if isinstance(reply, Block):
                    batch.block = reply
                    batch.rest = cmds[i + 1 :]
                    break
                replies.append(reply)
                size += len(reply)
                if self.closing:
                    batch.close = True
                    break
        finally:
            self.on_loop = False
            if gets:
                self.front.requests[b"GET"] += gets
            if sets:
                self.front.requests[b"SET"] += sets
            if sync:
                self.sync()
        return batch

    def gets(self, cmds: list[list[bytes]]) -> bytes | None:
        """The replies of a batch of plain GETs (GET -P16), each of a value held as bytes or of a
        missing key, joined: ``_get``'s replies, its checks written out in one loop (a sixth of a
        pipelined GET's cost in process: no call, no view a GET). None, having done nothing, for
        any other batch (``run`` takes it). Under the store's mutex, as ``run(locked=True)``."""
        for args in cmds:
            if len(args) != 2 or args[0] not in _GET:
                return None
        return self.gets_of([args[1] for args in cmds])

    def gets_of(self, keys: list[bytes]) -> bytes | None:
        """``gets`` of the GETs of these keys (the caller checked they are plain GETs)."""
        if self.multi is not None or not self.authed:
            return None
        reply = bulk_replies(self.front.kv.store, keys, self.nil())
        if reply is not None:
            self.front.requests[b"GET"] += len(keys)
        return reply

    def _batch_view(self) -> View:
        """The store as of now, caught up once for the batch (the caller holds its mutex)."""
        store = self.front.kv.store
        if not self._caught_up:
            store._current()
            self._caught_up = True
        return View(store, store._clock(), self.name)

    def _get(self, state: State, now: int, raw: bytes) -> bytes | None:
        """GET's reply for a value held in memory as bytes, or a missing key's; None for anything
        else (a key that is not one, a touch TTL, another type: ``execute`` runs those). The same
        reply as ``_resp_strings._get``, a third of its cost (a pipelined GET's)."""
        if not raw or len(raw) > limits.KV_KEY_SIZE_MAX:
            return None
        try:
            key = raw.decode("utf-8")
        except UnicodeDecodeError:
            return None
        entry = state.live(key, now)
        if entry is None:
            return self.nil()
        value = entry.value
        if entry.touch_ns or value is None or entry.vtype != BYTES:
            return None
        state.used(entry, now)
        return b"$%d\r\n%b\r\n" % (len(value), value)

    def _plain_set(self, args: list[bytes]) -> bool:
        """``SET key value`` (no option) in the committer's round, as ``_resp_strings._set`` runs
        it (the same op, the same checks), without the command dispatch, the option parsing and
        a context manager a SET (a fifth of its cost in the round). False, having done nothing,
        for anything else (see ``plain_set_op``): ``execute`` runs those and answers their
        errors."""
        op = self.plain_set_op(args, self.round)
        if op is None:
            return False
        self._wrote_kv = True
        try:
            self.round.write(op)
        except (errors.LogspoolError, ValueError, TypeError):
            return False  # (checked before any op is applied: execute answers the error)
        return True

    def plain_set_op(self, args: list[bytes], d: Any) -> Set | None:
        """The op of ``SET key value`` (no option; ``args`` holds three items) in the committer's
        round's decision ``d``, as ``Decision.set`` makes it, not written; None for anything else
        (MULTI, before AUTH, a key that is not one, a value too large, a key another owner
        locked)."""
        raw, value = args[1], args[2]
        if self.multi is not None or not self.authed or not raw or len(raw) > limits.KV_KEY_SIZE_MAX:
            return None
        if len(value) > limits.KV_VALUE_SIZE_MAX:
            return None
        try:
            key = raw.decode("utf-8")
        except UnicodeDecodeError:
            return None
        vtype, stored = from_bytes(value)
        return d.plain_set_op(key, vtype, stored, self.name)  # type: ignore[no-any-return]

    def plain_sets(self, round_: Sequence[tuple[Any, list[Any], Any]], start: int) -> list[_Batch]:
        """In the committer's round (this session's ``round`` set, the round's batches in
        ``round_``): how many batches, from ``start`` on, are each one plain ``SET key value``
        (``plain_set_op``, each checked against its own session), written here with one
        ``write_many`` for them all (a round of SET x16 holds 16 such batches: one call down the
        fold instead of 16). Their outcomes, each +OK, one a batch taken; none, nothing written, if
        the first is not one, or if the ops could not be written together (``execute`` then runs
        them one by one and answers their errors)."""
        d = self.round
        made: list[Set] = []
        for session, cmds, _ in itertools.islice(round_, start, None):  # bounded by the round
            if len(cmds) != 1 or len(args := cmds[0]) != 3 or args[0] not in _SET:
                break
            op = session.plain_set_op(args, d)
            if op is None:
                break
            made.append(op)
        if not made:
            return []
        try:
            d.write_many(made)
        except (errors.LogspoolError, ValueError, TypeError):
            return []  # (checked before any op is applied)
        self.front.requests[b"SET"] += len(made)
        return [_Batch([w.OK], []) for _ in made]

    def plain_xadds(
        self, round_: Sequence[tuple[Any, list[Any], Any]], start: int, held: HeldTails
    ) -> tuple[list[_Batch], dict[str, Any]]:
        """In the committer's round (``held``: its writer locks of logs): how many batches, from
        ``start`` on, are each one plain ``XADD key * field value`` of an open log (the lone
        path's: the id ``*``, no option, one field; each checked against its own session),
        appended here as ``_xadd`` appends them (``Streams.add`` under the round's locks)
        without the command's dispatch and its options' parsing (XADD x16). Their outcomes, each
        the entry's id, one a batch taken, and the logs they wrote; none if the first is not one
        (``run`` takes it, opens a new log, answers its errors)."""
        streams, stores = self.front.streams, self.front.server.stores
        out: list[_Batch] = []
        wrote: dict[str, Any] = {}
        for session, cmds, _ in itertools.islice(round_, start, None):  # bounded by the round
            if len(cmds) != 1 or len(args := cmds[0]) != 5 or args[0] != b"XADD" or args[2] != b"*":
                break
            if session.multi is not None or not session.authed:
                break
            name = args[1].decode("ascii", "replace")
            log = stores.opened("logs", name) if _wire.NAME_RE.fullmatch(name) else None
            if log is None:
                break
            try:
                entry_id = streams.add(log, args[3:], None, held)
            except (errors.LogspoolError, ValueError, TypeError):
                break  # (checked before it is appended: ``run`` answers it)
            wrote[name] = log
            out.append(_Batch([w.bulk(entry_id)], []))
        if out:
            self.front.requests[b"XADD"] += len(out)
        return out, wrote

    def sync(self) -> None:
        """Make the batch's writes durable before its replies go out (see the module docstring)."""
        wrote_kv, logs = self.take_writes()
        sync_writes(self.front, wrote_kv, logs)

    def take_writes(self) -> tuple[bool, dict[str, Any]]:
        """What the batches since the last call wrote: the kv store?, the logs by name."""
        wrote_kv, logs = self._wrote_kv, self._wrote_logs
        self._wrote_kv, self._wrote_logs = False, {}
        return wrote_kv, logs

    def execute(self, args: list[bytes]) -> bytes | Block:
        name = args[0].upper()
        spec = COMMANDS.get(name)
        self.front.requests[name if spec is not None else b"UNKNOWN"] += 1
        try:
            if spec is None:
                if self.multi is not None:
                    self.multi_failed = True
                shown = " ".join(f"'{a.decode(errors='replace')[:128]}'" for a in args[1:20])
                typed = args[0].decode(errors="replace")[:128]
                raise RedisError(f"ERR unknown command '{typed}', with args beginning with: {shown}")
            if not self.authed and name not in (b"AUTH", b"HELLO", b"QUIT"):
                raise RedisError("NOAUTH Authentication required.")
            if (spec.arity > 0 and len(args) != spec.arity) or (spec.arity < 0 and len(args) < -spec.arity):
                if self.multi is not None:
                    self.multi_failed = True
                raise _arity_error(name)
            if self.multi is not None and name not in (b"EXEC", b"DISCARD", b"MULTI", b"WATCH", b"QUIT"):
                self.multi.append(args)
                return w.QUEUED
            if self.tails is not None and spec.kind in ("stream", "jobs") and name != b"XADD":
                # (a command that may take a log's writer lock itself: the round's are given
                # back first, as the lock is not reentrant; an XADD takes them again)
                self.tails.close()
            if spec.kind == "write":
                self._wrote_kv = True
            return spec.handler(self, args)
        except NotHere:
            self.front.requests[name] -= 1  # (counted when it runs, in the pool)
            raise  # (not an error: ``run`` leaves it and the rest to the pool)
        except RedisError as err:
            self.front.server.counters.errors += 1
            return w.error(str(err))
        except errors.KeyLockedError as err:
            self.front.server.counters.errors += 1
            return w.error(f"LOCKED {err}")
        except (errors.LogspoolError, ValueError, TypeError) as err:
            self.front.server.counters.errors += 1
            return w.error(f"ERR {err}")
        except Exception as err:
            self.front.server.counters.errors += 1
            _logger.exception("%s: %s failed", self.conn.peer, name)
            return w.error(f"ERR internal error: {type(err).__name__}: {err}")

    # --- the store, in a transaction or not ----------------------------------------------------------
    def view(self) -> _Reading:
        """``with session.view() as v``: the store's state for a read (see ``_Reading``)."""
        return _Reading(self)

    @contextlib.contextmanager
    def decide(self) -> Iterator[Any]:
        shared = self._tx if self._tx is not None else self.round
        if shared is not None:
            self._wrote_kv = True
            yield shared
            return
        self._wrote_kv = True
        with self.front.kv.decide(self.name) as d:
            yield d

    def nil(self) -> bytes:
        return w.null(self.proto)

    def maybe(self, value: bytes | None) -> bytes:
        return self.nil() if value is None else w.bulk(value)

    # --- streams --------------------------------------------------------------------------------
    def xread_now(self, cursors: list[Cursor], count: int) -> bytes | None:
        """The reply of an XREAD with entries, or None if none of its streams has any."""
        found: list[tuple[bytes, list[Entry]]] = []
        budget = STREAM_REPLY_BYTES_MAX  # payload bytes over all the streams of the reply
        for cursor in cursors:
            if budget <= 0:
                break  # (the streams after it are read by the client's next XREAD)
            entries = self.front.streams.read_cursor(cursor, count, budget)
            if entries:
                found.append((cursor.name.encode(), entries))
                budget -= sum(len(x) for _, fields in entries for x in fields)
        if not found:
            return None
        return self.stream_reply(found)

    def stream_reply(self, found: list[tuple[bytes, list[Entry]]]) -> bytes:
        pairs = [(w.bulk(name), entries_reply(entries)) for name, entries in found]
        if self.proto == 3:
            return w.mapping(pairs, 3)
        return w.array([w.array([k, v]) for k, v in pairs])


# Every command module registers its commands when imported (above); then where each runs.
PLACES = places()
# The batches that write and may wait for more than the key-value store the daemon owns (EXEC,
# which may hold any command; a stream's command: its log's writer lock, which another process
# may hold, or a trim): their rounds run on the committer's thread, never on the loop
# (``Committer.gather``); but an XADD with no option, whose stream's lock the round on the loop
# takes without waiting (``RespFront.hold_streams``).
_THREAD_WRITES = frozenset(
    n for n, place in PLACES.items() if place == WRITER and (COMMANDS[n].kind != "write" or n in SLOW_WRITES)
)
_COMMAND_MODULES = (_resp_jobs, _resp_stream_commands, _resp_strings)
