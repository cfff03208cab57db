"""The RESP front door of the daemon: Redis's own protocol, so that redis-cli, redis-benchmark,
redis-py and other Redis clients work against logspool unchanged. docs/RESP.md lists the commands.

``logspool serve --data DIR --resp 127.0.0.1:6380``: the same ``Server`` as the native protocol,
with the same stores (so a key set here is read by the native client and by an embedded
``kv.open(DIR/kv/default)``), token, connection limit and counters. Keys and values live in one
key-value store (``default``, or ``--resp-kv NAME``; ``_resp_kv.py`` maps Redis's strings onto
its typed values); stream keys are logs (``_resp_streams.py``).

How a connection is served (one ``asyncio.Protocol`` each):
- Bytes are parsed on the event loop as they arrive (``_resp_wire.RespParser``: every bound is
  checked before buffering); every complete command of a read is taken at once.
- A connection's commands run in order, a batch of them (up to ``BATCH_COMMANDS_MAX``) in one hop
  to the server's thread pool, and their replies go out in one write. Connections run at once
  (each in its own pool thread), so their durable writes share fsyncs (the log's group commit).
- Durability: the writes of a batch are decided without waiting for an fsync, then the batch
  syncs each store it wrote once, *before* any of its replies is written: an acknowledged write
  is on disk with ``durability="always"`` (the default), and a pipeline of N SETs costs one fsync.
- Bounds: the parser's (RespLimits); reading pauses while more than ``INPUT_PAUSE_SIZE`` bytes wait
  to be parsed; a batch stops taking commands once its replies pass ``BATCH_REPLY_SIZE_MAX``; no
  command runs while the socket's send buffer is over ``OUTPUT_HIGH_SIZE`` (a client that never
  reads stops being read: TCP pushes back), and a connection whose unsent replies pass
  ``output_size_max`` anyway is closed, as Redis's ``client-output-buffer-limit``.
- A protocol error answers ``-ERR Protocol error: ...`` and closes that connection only; an
  unknown command or a bad argument is an error reply and the connection goes on.
- A blocked XREAD waits on the event loop (``_resp_streams.Tails``), holding no thread.
- SIGTERM (``Server.stop``): stop reading, finish and answer the batch in hand, close.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hmac
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from .. import errors, limits
from . import _resp_wire as w
from ._resp_kv import NOT_INTEGER, RedisError, RedisKV, View, canonical_int, glob_match, key_of, parse_float
from ._resp_streams import (
    ID_MAX,
    STREAM_REPLY_COUNT_MAX,
    Cursor,
    Entry,
    Streams,
    Tails,
    parse_id,
)

if TYPE_CHECKING:
    from ._server import Server

_logger = logging.getLogger("logspool.server.resp")

BATCH_COMMANDS_MAX = 1024  # commands run in one hop to the pool
BATCH_REPLY_SIZE_MAX = 4 * 1024 * 1024  # a batch stops taking commands once its replies pass this
INPUT_PAUSE_SIZE = 1024 * 1024  # stop reading while this much waits to be parsed (and a batch runs)
OUTPUT_HIGH_SIZE = 1024 * 1024  # no command runs while more than this waits to be sent
SCAN_COUNT_MAX = 100_000  # keys one SCAN looks at
SCAN_CURSORS_MAX = 10_000  # SCAN cursors remembered (the oldest is forgotten first)
REDIS_VERSION = "7.0.0"  # the Redis whose commands and replies this follows (HELLO, INFO)


@dataclass
class RespOptions:
    """The RESP front door's settings (``logspool serve --resp ...``)."""

    host: str = "127.0.0.1"
    port: int = 6380
    kv: str = "default"  # the key-value store of GET, SET and the rest
    flushdb: bool = False  # FLUSHDB and FLUSHALL delete every key only when this is on
    output_size_max: int = 64 * 1024 * 1024  # unsent replies of one connection before it is closed
    limits: w.RespLimits = field(default_factory=w.RespLimits)


@dataclass
class _Block:
    """An XREAD BLOCK that found nothing: the connection waits on the event loop, then runs it again."""

    cursors: list[Cursor]
    count: int
    deadline: float | None  # time.monotonic(); None: no end


@dataclass
class _Batch:
    replies: list[bytes]
    rest: list[list[bytes]]  # commands not run yet (the batch stopped early)
    block: _Block | None = None
    close: bool = False  # QUIT


class RespFront:
    """The RESP listener of a ``Server``: options, the shared key-value adapter, the stream
    waiters, SCAN cursors, client ids."""

    def __init__(self, server: Server, options: RespOptions) -> None:
        from ._server import NAME_RE

        if not NAME_RE.fullmatch(options.kv):
            raise ValueError(
                f"the RESP key-value store's name must match {NAME_RE.pattern}, not {options.kv!r}"
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
                self._kv = RedisKV(self.server.stores.get("kv", self.options.kv))
            return self._kv

    def request_counts(self) -> dict[str, int]:
        """Commands run, as the daemon's counters name them (``resp.get``...)."""
        return {"resp." + k.decode("ascii", "replace").lower(): v for k, v in list(self.requests.items())}

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        await self.server.call(lambda: self.kv)  # open (and recover) the store off the loop
        self.tails = Tails(loop, self.server.data)
        self.committer = Committer(self, loop)
        self._listener = await loop.create_server(
            lambda: _Connection(self), self.options.host, self.options.port, ssl=self.server._ssl
        )
        self.options.port = self._listener.sockets[0].getsockname()[1]
        _logger.info("serving RESP on %s:%d (key-value store %r)", self.options.host, self.options.port,
                     self.options.kv)  # fmt: skip

    def close_listener(self) -> None:
        if self._listener is not None:
            self._listener.close()

    def close(self) -> None:
        if self.committer is not None:
            self.committer.stop()
        if self.tails is not None:
            self.tails.close()

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
        self.parser.feed(data)
        if self._busy and self.parser.buffered > INPUT_PAUSE_SIZE and not self._paused:
            assert self.transport is not None
            self.transport.pause_reading()
            self._paused = True
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
        self.server.counters.bytes_out += len(data)
        transport.write(data)
        if transport.get_write_buffer_size() > self.front.options.output_size_max:
            _logger.warning("%s: closing the RESP connection: more than %d bytes of replies unsent",
                            self.peer, self.front.options.output_size_max)  # fmt: skip
            transport.abort()
            self._lost = True

    async def _run(self) -> None:
        try:
            pending: list[list[bytes]] = []
            for _ in itertools.count():  # bounded by the connection's life
                if not pending:
                    try:
                        pending = self.parser.commands(BATCH_COMMANDS_MAX) if self._reading else []
                    except w.RespProtocolError as err:
                        self.server.counters.protocol_errors += 1
                        _logger.warning("%s: RESP protocol error: %s", self.peer, err)
                        self._write(w.error(f"ERR Protocol error: {err}"))
                        return
                if self._paused and (not pending or self.parser.buffered < INPUT_PAUSE_SIZE):
                    assert self.transport is not None
                    self._paused = False
                    self.transport.resume_reading()
                if self._lost:
                    return
                if not pending:
                    if self._eof:
                        return
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                self._busy = True
                try:
                    batch = await self._execute(pending)
                finally:
                    self._busy = False
                self._write(b"".join(batch.replies))
                pending = batch.rest
                if batch.block is not None:
                    self._write(await self._blocked(batch.block))
                if batch.close:
                    return
                if not self._writable.is_set():
                    await self._writable.wait()
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
        right now, writes on the committer thread, the rest (scans, ranges) in the pool."""
        where = max(PLACES.get(args[0].upper(), POOL) for args in cmds)
        if where == INLINE:
            mutex = self.front.kv.store._mutex
            if mutex.acquire(blocking=False):  # never wait on the loop (a decision holds it)
                try:
                    return self.session.run(cmds)
                finally:
                    mutex.release()
            where = POOL
        if where == WRITER:
            assert self.front.committer is not None
            return await self.front.committer.submit(self.session, cmds)
        return await self.server.call(lambda: self.session.run(cmds))  # type: ignore[no-any-return]

    async def _blocked(self, block: _Block) -> bytes:
        """Wait for entries (any process's appends), holding no thread; the XREAD reply."""
        tails = self.front.tails
        assert tails is not None
        names = [c.name for c in block.cursors]
        for _ in itertools.count():  # bounded by the deadline, or by the connection's life
            fut = tails.register(names)
            self._block = fut
            try:
                reply: bytes | None = await self.server.call(lambda: self.session.xread_now(block))
                if reply is not None:
                    return reply
                timeout = None if block.deadline is None else block.deadline - time.monotonic()
                if timeout is not None and timeout <= 0:
                    break
                try:
                    await asyncio.wait_for(asyncio.shield(fut), timeout)
                except TimeoutError:
                    break
                except asyncio.CancelledError:
                    if self._lost or not self._reading:
                        break
                    raise
            finally:
                tails.unregister(names, fut)
                self._block = None
        return w.null_array(self.session.proto)


Handler = Callable[["Session", list[bytes]], "bytes | _Block"]


@dataclass(frozen=True, slots=True)
class Command:
    handler: Handler
    arity: int  # Redis's: n exactly, or -n at least n (the name counts)
    kind: str  # "conn": no store; "read"; "write": a kv decision; "stream"


COMMANDS: dict[bytes, Command] = {}


def command(name: str, arity: int, kind: str) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        COMMANDS[name.encode()] = Command(fn, arity, kind)
        return fn

    return register


INLINE, WRITER, POOL = 0, 1, 2  # where a batch runs (``_Connection._execute``)
# Reads that take the store's state as it is, with no disk but a catch-up with the op log: run
# on the event loop. Commands that may take long (a scan of every key, a range of a log, a
# blocking read) run in the pool; every other write runs on the committer thread.
_SLOW = {b"SCAN", b"KEYS", b"FLUSHDB", b"FLUSHALL", b"XLEN", b"XRANGE", b"XREVRANGE", b"XREAD"}


def _places() -> dict[bytes, int]:
    places = {}
    for name, spec in COMMANDS.items():
        if name in _SLOW:
            places[name] = POOL
        elif spec.kind in ("write", "stream") or name == b"EXEC":
            places[name] = WRITER
        else:
            places[name] = INLINE
    return places


def _arity_error(name: bytes) -> RedisError:
    return RedisError(f"ERR wrong number of arguments for '{name.decode(errors='replace').lower()}' command")


def _int(raw: bytes) -> int:
    number = canonical_int(raw)
    if number is None:
        raise RedisError(NOT_INTEGER)
    return number


def _stream_name(raw: bytes) -> str:
    from ._server import NAME_RE

    text = raw.decode("ascii", "replace")
    if not NAME_RE.fullmatch(text):
        raise RedisError(
            "ERR logspool stream keys are log names: [A-Za-z0-9][A-Za-z0-9._-]{0,127} (no '/', no '..')"
        )
    return text


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
            return View(store, store._clock(), s.name)
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
        self._wrote_kv = False
        self._wrote_logs: dict[str, Any] = {}
        self._caught_up = False  # the store was caught up with its op log in this batch
        self.closing = False

    # --- running a batch --------------------------------------------------------------------------
    def run(self, cmds: list[list[bytes]], *, sync: bool = True) -> _Batch:
        """Run commands in order until one blocks or closes, or the replies pass
        BATCH_REPLY_SIZE_MAX. ``sync``: make the batch's writes durable before returning (the
        committer passes False and syncs every batch of its round at once)."""
        replies: list[bytes] = []
        size = 0
        batch = _Batch(replies, [])
        self._caught_up = False
        try:
            for i, args in enumerate(cmds):
                if size > BATCH_REPLY_SIZE_MAX:
                    batch.rest = cmds[i:]
                    break
                reply = self.execute(args)
                if isinstance(reply, _Block):
                    batch.block = reply
                    batch.rest = cmds[i + 1 :]
                    break
                replies.append(reply)
                size += len(reply)
                if self.closing:
                    batch.close = True
                    break
        finally:
            if sync:
                self.sync()
        return batch

    def sync(self) -> None:
        """Make the batch's writes durable before its replies go out (see the module docstring)."""
        wrote_kv, logs = self.take_writes()
        sync_writes(self.front, wrote_kv, logs)

    def take_writes(self) -> tuple[bool, dict[str, Any]]:
        """What the batches since the last call wrote: the kv store?, the logs by name."""
        wrote_kv, logs = self._wrote_kv, self._wrote_logs
        self._wrote_kv, self._wrote_logs = False, {}
        return wrote_kv, logs

    def execute(self, args: list[bytes]) -> bytes | _Block:
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
            if spec.kind == "write":
                self._wrote_kv = True
            return spec.handler(self, args)
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
    def xread_now(self, block: _Block) -> bytes | None:
        """The reply of an XREAD with entries, or None if none of its streams has any."""
        found: list[tuple[bytes, list[Entry]]] = []
        for cursor in block.cursors:
            entries = self.front.streams.read_cursor(cursor, block.count)
            if entries:
                found.append((cursor.name.encode(), entries))
        if not found:
            return None
        return self.stream_reply(found)

    def stream_reply(self, found: list[tuple[bytes, list[Entry]]]) -> bytes:
        pairs = [(w.bulk(name), entries_reply(entries)) for name, entries in found]
        if self.proto == 3:
            return w.mapping(pairs, 3)
        return w.array([w.array([k, v]) for k, v in pairs])


def sync_writes(front: RespFront, wrote_kv: bool, logs: dict[str, Any]) -> None:
    """fsync what batches wrote (one fsync a store, shared by them all) and wake the XREADs
    waiting on the logs appended to."""
    if wrote_kv:
        front.kv.sync()
    if logs:
        for log in logs.values():
            if log.durability == "always":
                log.sync()
        if front.tails is not None:
            front.tails.wake_threadsafe(set(logs))


class Committer:
    """The thread that runs every batch that writes, from all connections, in arrival order: a
    round takes every batch queued (at most ``ROUND_BATCHES_MAX``), decides their writes one
    after another, makes them durable with one fsync a store, then hands all their replies to
    the event loop at once (Redis's ``appendfsync always`` group commit: while one round's fsync
    runs, the next round's batches queue up). One thread, not one per connection: 16 or 50
    threads contending for the GIL cost more CPU than the writes themselves (benchmarks/RESULTS.md).
    """

    ROUND_BATCHES_MAX = 1024
    ROUND_COMMANDS_MAX = 4096  # (a round is one decision: its ops are one write)

    def __init__(self, front: RespFront, loop: asyncio.AbstractEventLoop) -> None:
        self.front = front
        self.loop = loop
        self._queue: collections.deque[tuple[Session, list[list[bytes]], asyncio.Future[_Batch]]] = (
            collections.deque()
        )
        self._cond = threading.Condition()
        self._stopping = False
        self.rounds = 0  # rounds run (each: at most one fsync a store written)
        self.batches = 0  # batches they held (INFO: batches a round, the group commit's size)
        self._thread = threading.Thread(target=self._run, name="logspool-resp-committer", daemon=True)
        self._thread.start()

    def submit(self, session: Session, cmds: list[list[bytes]]) -> asyncio.Future[_Batch]:
        fut: asyncio.Future[_Batch] = self.loop.create_future()
        with self._cond:
            if self._stopping:
                fut.set_exception(errors.ClosedError(self.front.server.data, "the daemon is stopping"))
                return fut
            self._queue.append((session, cmds, fut))
            self._cond.notify()
        return fut

    def _run(self) -> None:
        for _ in itertools.count():  # bounded by stop()
            with self._cond:
                while not self._queue and not self._stopping:
                    self._cond.wait()
                if not self._queue:
                    return
                round_ = [self._queue.popleft()]
                commands = len(round_[0][1])
                while (
                    self._queue
                    and len(round_) < self.ROUND_BATCHES_MAX
                    and commands < self.ROUND_COMMANDS_MAX
                ):
                    round_.append(self._queue.popleft())
                    commands += len(round_[-1][1])
                count = len(round_)
            self.rounds += 1
            self.batches += count
            done: list[tuple[asyncio.Future[_Batch], _Batch | BaseException]] = []
            wrote_kv = False
            logs: dict[str, Any] = {}
            try:
                # One decision for the whole round: one writer lock, one catch-up, one write of
                # every op (each command is still atomic: they run one after another inside it).
                with self.front.kv.decide() as d:
                    for session, cmds, fut in round_:
                        d.owner = session.name  # (locks are checked against each connection's name)
                        session.round = d
                        try:
                            done.append((fut, session.run(cmds, sync=False)))
                        except BaseException as err:  # (run answers each command's error itself)
                            done.append((fut, err))
                        finally:
                            session.round = None
                        kv_written, logs_written = session.take_writes()
                        wrote_kv |= kv_written
                        logs.update(logs_written)
                sync_writes(self.front, wrote_kv, logs)  # before any reply of the round is sent
            except Exception as err:  # the write or the fsync failed: nothing here is acknowledged
                _logger.error("RESP commit round failed: %s", err)
                failed = w.error(f"ERR the write failed, the commands may or may not be applied: {err}")
                done = [(fut, _Batch([failed] * len(cmds), [])) for _, cmds, fut in round_]
            with contextlib.suppress(RuntimeError):  # the loop closed
                self.loop.call_soon_threadsafe(_deliver, done)

    def stop(self) -> None:
        """Finish the batches queued, then end the thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join(60)


def _deliver(done: list[tuple[asyncio.Future[_Batch], _Batch | BaseException]]) -> None:
    for fut, outcome in done:
        if fut.done():
            continue
        if isinstance(outcome, BaseException):
            fut.set_exception(outcome)
        else:
            fut.set_result(outcome)


def entries_reply(entries: list[Entry]) -> bytes:
    return w.array([w.array([w.bulk(eid), w.bulks(fields)]) for eid, fields in entries])


# --- connection commands ------------------------------------------------------------------------
@command("PING", -1, "conn")
def _ping(s: Session, args: list[bytes]) -> bytes:
    if len(args) > 2:
        raise _arity_error(b"ping")
    return w.bulk(args[1]) if len(args) == 2 else w.PONG


@command("ECHO", 2, "conn")
def _echo(s: Session, args: list[bytes]) -> bytes:
    return w.bulk(args[1])


@command("QUIT", -1, "conn")
def _quit(s: Session, args: list[bytes]) -> bytes:
    s.closing = True  # the batch ends with this reply and the connection closes
    return w.OK


@command("AUTH", -2, "conn")
def _auth(s: Session, args: list[bytes]) -> bytes:
    if len(args) > 3:
        raise RedisError("ERR syntax error")
    _authenticate(s, args[1] if len(args) == 2 else args[2], None if len(args) == 2 else args[1])
    return w.OK


def _authenticate(s: Session, password: bytes, user: bytes | None) -> None:
    if s.front.server._token is None:
        raise RedisError(
            "ERR AUTH <password> called without any password configured for the default user. "
            "Are you sure your configuration is correct?"
        )
    if (user is not None and user != b"default") or not s.front.check_token(password):
        raise RedisError("WRONGPASS invalid username-password pair or user is disabled.")
    s.authed = True
    s.conn.parser.authenticated = True  # (the parser is the loop's; a bool store is atomic)


@command("HELLO", -1, "conn")
def _hello(s: Session, args: list[bytes]) -> bytes:
    proto = s.proto
    i = 1
    if len(args) > 1:
        try:
            proto = int(args[1])
        except ValueError:
            raise RedisError("ERR Protocol version is not an integer or out of range") from None
        if proto not in (2, 3):
            raise RedisError("NOPROTO unsupported protocol version")
        i = 2
    name = None
    while i < len(args):
        option = args[i].upper()
        if option == b"AUTH" and i + 2 < len(args):
            _authenticate(s, args[i + 2], args[i + 1])
            i += 3
        elif option == b"SETNAME" and i + 1 < len(args):
            name = _client_name(args[i + 1])
            i += 2
        else:
            raise RedisError(f"ERR Syntax error in HELLO option '{args[i].decode(errors='replace')}'")
    if not s.authed:
        raise RedisError(
            "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO "
            "<proto> AUTH <user> <pass> option can be used to authenticate the client and select the "
            "RESP protocol version at the same time"
        )
    if name is not None:
        s.name = name or None
    s.proto = proto
    from .. import __version__

    pairs = [
        (w.bulk(b"server"), w.bulk(b"redis")),
        (w.bulk(b"version"), w.bulk(REDIS_VERSION.encode())),
        (w.bulk(b"proto"), w.integer(proto)),
        (w.bulk(b"id"), w.integer(s.id)),
        (w.bulk(b"mode"), w.bulk(b"standalone")),
        (w.bulk(b"role"), w.bulk(b"master")),
        (w.bulk(b"modules"), w.EMPTY_ARRAY),
        (w.bulk(b"logspool"), w.bulk(__version__.encode())),
    ]
    return w.mapping(pairs, proto)


def _client_name(raw: bytes) -> str:
    if any(c <= 32 or c >= 127 for c in raw) or len(raw) > limits.KV_OWNER_SIZE_MAX:
        raise RedisError("ERR Client names cannot contain spaces, newlines or special characters.")
    return raw.decode("ascii")


@command("SELECT", 2, "conn")
def _select(s: Session, args: list[bytes]) -> bytes:
    if _int(args[1]) != 0:
        raise RedisError("ERR DB index is out of range")
    return w.OK


@command("CLIENT", -2, "conn")
def _client(s: Session, args: list[bytes]) -> bytes:
    sub = args[1].upper()
    if sub == b"SETNAME" and len(args) == 3:
        s.name = _client_name(args[2]) or None
        return w.OK
    if sub == b"GETNAME" and len(args) == 2:
        return s.maybe(None if s.name is None else s.name.encode())
    if sub == b"ID" and len(args) == 2:
        return w.integer(s.id)
    if sub == b"SETINFO" and len(args) == 4:
        return w.OK
    if sub in (b"NO-EVICT", b"NO-TOUCH") and len(args) == 3:
        return w.OK
    if sub in (b"INFO", b"LIST"):
        line = f"id={s.id} addr={s.conn.peer} name={s.name or ''} db=0 resp={s.proto}\n"
        return w.bulk(line.encode())
    typed = sub.decode(errors="replace").lower()
    raise RedisError(f"ERR unknown subcommand or wrong number of arguments for 'client|{typed}'")


@command("COMMAND", -1, "conn")
def _command(s: Session, args: list[bytes]) -> bytes:
    sub = args[1].upper() if len(args) > 1 else b""
    if sub == b"COUNT":
        return w.integer(len(COMMANDS))
    if sub == b"DOCS":
        return w.mapping([], s.proto)
    if sub == b"INFO":
        names = [a.upper() for a in args[2:]] or sorted(COMMANDS)
        return w.array([_command_info(n) if n in COMMANDS else w.null_array(s.proto) for n in names])
    if sub == b"LIST":
        return w.bulks([n.lower() for n in sorted(COMMANDS)])
    if sub == b"":
        return w.array([_command_info(n) for n in sorted(COMMANDS)])
    raise RedisError(f"ERR unknown subcommand '{sub.decode(errors='replace').lower()}'")


def _command_info(name: bytes) -> bytes:
    spec = COMMANDS[name]
    keyed = spec.kind in ("read", "write", "stream") and abs(spec.arity) >= 2
    flags = [b"write"] if spec.kind == "write" else [b"readonly"] if spec.kind == "read" else []
    return w.array([
        w.bulk(name.lower()), w.integer(spec.arity),
        w.array([w.simple(f.decode()) for f in flags]),
        w.integer(1 if keyed else 0), w.integer(1 if keyed else 0), w.integer(1 if keyed else 0),
    ])  # fmt: skip


@command("INFO", -1, "conn")
def _info(s: Session, args: list[bytes]) -> bytes:
    from .. import __version__

    server = s.front.server
    c = server.counters
    committer = s.front.committer
    with s.view() as v:
        keys = s.front.kv.dbsize(v)
    sections: dict[str, list[tuple[str, object]]] = {
        "server": [("redis_version", REDIS_VERSION), ("logspool_version", __version__),
                   ("redis_mode", "standalone"), ("process_id", os.getpid()),
                   ("tcp_port", s.front.options.port),
                   ("uptime_in_seconds", int(time.time() - server.started))],
        "clients": [("connected_clients", c.connections)],
        "persistence": [("aof_enabled", int(server.stores.durability == "always")),
                        ("logspool_durability", server.stores.durability)],
        "stats": [("total_connections_received", c.connections_total),
                  ("total_commands_processed", sum(s.front.requests.values())),
                  ("rejected_connections", c.refused), ("total_net_input_bytes", c.bytes_in),
                  ("total_net_output_bytes", c.bytes_out), ("total_error_replies", c.errors),
                  ("logspool_commit_rounds", committer.rounds if committer else 0),
                  ("logspool_commit_batches", committer.batches if committer else 0)],
        "keyspace": [("db0", f"keys={keys},expires=0,avg_ttl=0")] if keys else [],
    }  # fmt: skip
    wanted = {a.decode(errors="replace").lower() for a in args[1:]}
    lines = []
    for title, fields in sections.items():
        if wanted and not wanted & {title, "all", "everything", "default"}:
            continue
        lines.append(f"# {title.capitalize()}")
        lines += [f"{k}:{v}" for k, v in fields]
        lines.append("")
    return w.bulk("\r\n".join(lines).encode())


@command("CONFIG", -2, "conn")
def _config(s: Session, args: list[bytes]) -> bytes:
    sub = args[1].upper()
    if sub == b"GET" and len(args) >= 3:
        always = s.front.server.stores.durability == "always"
        known = {b"appendonly": b"yes" if always else b"no", b"save": b"", b"databases": b"1",
                 b"appendfsync": b"always" if always else b"everysec"}  # fmt: skip
        pairs = [
            (w.bulk(k), w.bulk(v))
            for k, v in known.items()
            if any(glob_match(p.lower(), k) for p in args[2:])
        ]
        return w.mapping(pairs, s.proto)
    if sub == b"RESETSTAT":
        return w.OK
    raise RedisError(
        "ERR logspool's settings are its command line (logspool serve --help); CONFIG SET is not supported"
    )


@command("TIME", 1, "conn")
def _time(s: Session, args: list[bytes]) -> bytes:
    now = time.time_ns() // 1000
    return w.bulks([b"%d" % (now // 1_000_000), b"%d" % (now % 1_000_000)])


# --- transactions ---------------------------------------------------------------------------------
@command("MULTI", 1, "conn")
def _multi(s: Session, args: list[bytes]) -> bytes:
    if s.multi is not None:
        raise RedisError("ERR MULTI calls can not be nested")
    s.multi = []
    s.multi_failed = False
    return w.OK


@command("DISCARD", 1, "conn")
def _discard(s: Session, args: list[bytes]) -> bytes:
    if s.multi is None:
        raise RedisError("ERR DISCARD without MULTI")
    s.multi = None
    s.watched = {}
    return w.OK


@command("WATCH", -2, "read")
def _watch(s: Session, args: list[bytes]) -> bytes:
    if s.multi is not None:
        raise RedisError("ERR WATCH inside MULTI is not allowed")
    with s.view() as v:
        for raw in args[1:]:
            key = key_of(raw)
            entry = v.live(key)
            s.watched[key] = None if entry is None else entry.version
    return w.OK


@command("UNWATCH", 1, "conn")
def _unwatch(s: Session, args: list[bytes]) -> bytes:
    s.watched = {}
    return w.OK


@command("EXEC", 1, "conn")
def _exec(s: Session, args: list[bytes]) -> bytes:
    """The queued commands, in one decision of the key-value store: atomic for every process and
    written in one write (stream commands in it run in order but are not part of the decision)."""
    if s.multi is None:
        raise RedisError("ERR EXEC without MULTI")
    queued, s.multi = s.multi, None
    watched, s.watched = s.watched, {}
    if s.multi_failed:
        raise RedisError("EXECABORT Transaction discarded because of previous errors.")
    with s.decide() as d:  # (the committer's round, if this runs in one)
        for key, version in watched.items():
            entry = d.live(key)
            if (None if entry is None else entry.version) != version:
                return w.null_array(s.proto)
        s._tx = d
        try:
            replies = []
            for cmd in queued:
                reply = s.execute(cmd)
                replies.append(w.null_array(s.proto) if isinstance(reply, _Block) else reply)
        finally:
            s._tx = None
    return w.array(replies)


# --- keys and values ------------------------------------------------------------------------------
@command("GET", 2, "read")
def _get(s: Session, args: list[bytes]) -> bytes:
    key = key_of(args[1])
    with s.view() as v:
        return s.maybe(s.front.kv.get(v, key))


@command("MGET", -2, "read")
def _mget(s: Session, args: list[bytes]) -> bytes:
    keys = [key_of(a) for a in args[1:]]
    kv = s.front.kv
    out = []
    size = 0
    with s.view() as v:
        for key in keys:
            value = kv.get(v, key)
            out.append(s.maybe(value))
            size += 0 if value is None else len(value)
            if size > s.front.options.output_size_max:
                raise RedisError("ERR the reply would be larger than the output buffer limit")
    return w.array(out)


def _expiry(option: bytes, raw: bytes, now_ns: int) -> int:
    """The expiry (ns since the epoch) of an EX/PX/EXAT/PXAT option (Redis's checks)."""
    number = canonical_int(raw)
    if number is None:
        raise RedisError(NOT_INTEGER)
    if number <= 0:
        raise RedisError("ERR invalid expire time in 'set' command")
    if option == b"EX":
        return now_ns + number * 1_000_000_000
    if option == b"PX":
        return now_ns + number * 1_000_000
    if option == b"EXAT":
        return number * 1_000_000_000
    return number * 1_000_000  # PXAT


_EXPIRY_OPTIONS = (b"EX", b"PX", b"EXAT", b"PXAT")


@command("SET", -3, "write")
def _set(s: Session, args: list[bytes]) -> bytes:
    key = key_of(args[1])
    nx = xx = get = keepttl = False
    expiry: tuple[bytes, bytes] | None = None
    i = 3
    while i < len(args):
        option = args[i].upper()
        if option == b"NX" and not xx:
            nx = True
        elif option == b"XX" and not nx:
            xx = True
        elif option == b"GET":
            get = True
        elif option == b"KEEPTTL" and expiry is None:
            keepttl = True
        elif option in _EXPIRY_OPTIONS and expiry is None and not keepttl and i + 1 < len(args):
            expiry = (option, args[i + 1])
            i += 1
        else:
            raise RedisError("ERR syntax error")
        i += 1
    with s.decide() as d:
        at = None if expiry is None else _expiry(expiry[0], expiry[1], d.now)
        done, old = s.front.kv.set(d, key, args[2], expire_ns=at, keepttl=keepttl, nx=nx, xx=xx)
        if get:
            return s.maybe(None if old is None else d.value(old))
    return w.OK if done else s.nil()


@command("SETNX", 3, "write")
def _setnx(s: Session, args: list[bytes]) -> bytes:
    with s.decide() as d:
        return w.integer(int(s.front.kv.set(d, key_of(args[1]), args[2], nx=True)[0]))


@command("SETEX", 4, "write")
def _setex(s: Session, args: list[bytes]) -> bytes:
    with s.decide() as d:
        s.front.kv.set(d, key_of(args[1]), args[3], expire_ns=_expiry(b"EX", args[2], d.now))
    return w.OK


@command("PSETEX", 4, "write")
def _psetex(s: Session, args: list[bytes]) -> bytes:
    with s.decide() as d:
        s.front.kv.set(d, key_of(args[1]), args[3], expire_ns=_expiry(b"PX", args[2], d.now))
    return w.OK


@command("GETSET", 3, "write")
def _getset(s: Session, args: list[bytes]) -> bytes:
    with s.decide() as d:
        _, old = s.front.kv.set(d, key_of(args[1]), args[2])
        return s.maybe(None if old is None else d.value(old))


@command("GETDEL", 2, "write")
def _getdel(s: Session, args: list[bytes]) -> bytes:
    key = key_of(args[1])
    with s.decide() as d:
        entry = d.live(key)
        if entry is None:
            return s.nil()
        value = d.value(entry)
        s.front.kv.delete(d, [key])
        return w.bulk(value)


@command("GETEX", -2, "write")
def _getex(s: Session, args: list[bytes]) -> bytes:
    key = key_of(args[1])
    option = args[2].upper() if len(args) > 2 else None
    if (
        (option == b"PERSIST" and len(args) != 3)
        or (option in _EXPIRY_OPTIONS and len(args) != 4)
        or (option is not None and option != b"PERSIST" and option not in _EXPIRY_OPTIONS)
    ):
        raise RedisError("ERR syntax error")
    with s.decide() as d:
        entry = d.live(key)
        if entry is None:
            return s.nil()
        value = d.value(entry)
        if option == b"PERSIST":
            s.front.kv.expire(d, key, None)
        elif option is not None:
            s.front.kv.expire(d, key, _expiry(option, args[3], d.now))
        return w.bulk(value)


@command("MSET", -3, "write")
def _mset(s: Session, args: list[bytes]) -> bytes:
    if len(args) % 2 == 0:
        raise _arity_error(b"mset")
    pairs = [(key_of(args[i]), args[i + 1]) for i in range(1, len(args), 2)]
    with s.decide() as d:
        for key, _ in pairs:
            d.unlocked(key)
        for key, value in pairs:
            d.set(key, value)
    return w.OK


@command("MSETNX", -3, "write")
def _msetnx(s: Session, args: list[bytes]) -> bytes:
    if len(args) % 2 == 0:
        raise _arity_error(b"msetnx")
    pairs = [(key_of(args[i]), args[i + 1]) for i in range(1, len(args), 2)]
    with s.decide() as d:
        if any(d.live(key) is not None for key, _ in pairs):
            return w.ZERO
        for key, _ in pairs:
            d.unlocked(key)
        for key, value in pairs:
            d.set(key, value)
    return w.ONE


@command("DEL", -2, "write")
def _del(s: Session, args: list[bytes]) -> bytes:
    keys = [key_of(a) for a in args[1:]]
    with s.decide() as d:
        return w.integer(s.front.kv.delete(d, keys))


COMMANDS[b"UNLINK"] = Command(_del, -2, "write")


@command("EXISTS", -2, "read")
def _exists(s: Session, args: list[bytes]) -> bytes:
    keys = [key_of(a) for a in args[1:]]
    with s.view() as v:
        return w.integer(s.front.kv.exists(v, keys))


@command("TYPE", 2, "read")
def _type(s: Session, args: list[bytes]) -> bytes:
    raw = args[1]
    with s.view() as v:
        try:
            if v.live(key_of(raw)) is not None:
                return w.simple("string")
        except RedisError:
            pass
    with contextlib.suppress(RedisError):
        if s.front.streams.exists(_stream_name(raw)):
            return w.simple("stream")
    return w.simple("none")


def _incr(s: Session, key: bytes, amount: int) -> bytes:
    with s.decide() as d:
        return w.integer(s.front.kv.incr(d, key_of(key), amount))


@command("INCR", 2, "write")
def _incr1(s: Session, args: list[bytes]) -> bytes:
    return _incr(s, args[1], 1)


@command("DECR", 2, "write")
def _decr1(s: Session, args: list[bytes]) -> bytes:
    return _incr(s, args[1], -1)


@command("INCRBY", 3, "write")
def _incrby(s: Session, args: list[bytes]) -> bytes:
    return _incr(s, args[1], _int(args[2]))


@command("DECRBY", 3, "write")
def _decrby(s: Session, args: list[bytes]) -> bytes:
    amount = _int(args[2])
    if amount == -(1 << 63):
        raise RedisError("ERR decrement would overflow")
    return _incr(s, args[1], -amount)


@command("INCRBYFLOAT", 3, "write")
def _incrbyfloat(s: Session, args: list[bytes]) -> bytes:
    amount = parse_float(args[2])
    with s.decide() as d:
        return w.bulk(s.front.kv.incrbyfloat(d, key_of(args[1]), amount))


@command("APPEND", 3, "write")
def _append(s: Session, args: list[bytes]) -> bytes:
    with s.decide() as d:
        return w.integer(s.front.kv.append(d, key_of(args[1]), args[2]))


@command("STRLEN", 2, "read")
def _strlen(s: Session, args: list[bytes]) -> bytes:
    with s.view() as v:
        return w.integer(s.front.kv.strlen(v, key_of(args[1])))


@command("GETRANGE", 4, "read")
def _getrange(s: Session, args: list[bytes]) -> bytes:
    start, end = _int(args[2]), _int(args[3])
    with s.view() as v:
        return w.bulk(s.front.kv.getrange(v, key_of(args[1]), start, end))


COMMANDS[b"SUBSTR"] = Command(_getrange, 4, "read")


@command("SETRANGE", 4, "write")
def _setrange(s: Session, args: list[bytes]) -> bytes:
    offset = _int(args[2])
    with s.decide() as d:
        return w.integer(s.front.kv.setrange(d, key_of(args[1]), offset, args[3]))


def _expire(s: Session, args: list[bytes], unit_ns: int, absolute: bool) -> bytes:
    key = key_of(args[1])
    number = _int(args[2])
    cond = None
    if len(args) == 4:
        cond = args[3].upper().decode(errors="replace")
        if cond not in ("NX", "XX", "GT", "LT"):
            raise RedisError(f"ERR Unsupported option {cond}")
    elif len(args) > 4:
        raise RedisError("ERR NX and XX, GT or LT options at the same time are not compatible")
    with s.decide() as d:
        at = number * unit_ns if absolute else d.now + number * unit_ns
        if not -(1 << 62) < at < (1 << 63):
            raise RedisError(
                f"ERR invalid expire time in '{args[0].decode(errors='replace').lower()}' command"
            )
        return w.integer(int(s.front.kv.expire(d, key, at, cond)))


@command("EXPIRE", -3, "write")
def _expire_s(s: Session, args: list[bytes]) -> bytes:
    return _expire(s, args, 1_000_000_000, False)


@command("PEXPIRE", -3, "write")
def _pexpire(s: Session, args: list[bytes]) -> bytes:
    return _expire(s, args, 1_000_000, False)


@command("EXPIREAT", -3, "write")
def _expireat(s: Session, args: list[bytes]) -> bytes:
    return _expire(s, args, 1_000_000_000, True)


@command("PEXPIREAT", -3, "write")
def _pexpireat(s: Session, args: list[bytes]) -> bytes:
    return _expire(s, args, 1_000_000, True)


@command("TTL", 2, "read")
def _ttl(s: Session, args: list[bytes]) -> bytes:
    with s.view() as v:
        ms = s.front.kv.pttl(v, key_of(args[1]))
    return w.integer(ms if ms < 0 else (ms + 500) // 1000)


@command("PTTL", 2, "read")
def _pttl(s: Session, args: list[bytes]) -> bytes:
    with s.view() as v:
        return w.integer(s.front.kv.pttl(v, key_of(args[1])))


@command("PERSIST", 2, "write")
def _persist(s: Session, args: list[bytes]) -> bytes:
    with s.decide() as d:
        return w.integer(int(s.front.kv.expire(d, key_of(args[1]), None)))


@command("RENAME", 3, "write")
def _rename(s: Session, args: list[bytes]) -> bytes:
    with s.decide() as d:
        s.front.kv.rename(d, key_of(args[1]), key_of(args[2]), nx=False)
    return w.OK


@command("RENAMENX", 3, "write")
def _renamenx(s: Session, args: list[bytes]) -> bytes:
    with s.decide() as d:
        return w.integer(int(s.front.kv.rename(d, key_of(args[1]), key_of(args[2]), nx=True)))


@command("DBSIZE", 1, "read")
def _dbsize(s: Session, args: list[bytes]) -> bytes:
    with s.view() as v:
        return w.integer(s.front.kv.dbsize(v))


@command("SCAN", -2, "read")
def _scan(s: Session, args: list[bytes]) -> bytes:
    cursor = _int(args[1])
    pattern: bytes | None = None
    count = 10
    kind: bytes | None = None
    i = 2
    while i < len(args):
        option = args[i].upper()
        if i + 1 >= len(args):
            raise RedisError("ERR syntax error")
        if option == b"MATCH":
            pattern = args[i + 1]
        elif option == b"COUNT":
            count = _int(args[i + 1])
            if count < 1:
                raise RedisError("ERR syntax error")
        elif option == b"TYPE":
            kind = args[i + 1].lower()
        else:
            raise RedisError("ERR syntax error")
        i += 2
    after = None if cursor == 0 else s.front.cursor_key(cursor)
    with s.view() as v:
        keys, last = s.front.kv.scan(v, after, min(count, SCAN_COUNT_MAX), pattern)
    if kind is not None and kind != b"string":
        keys = []
    nxt = 0 if last is None else s.front.cursor_for(last)
    return w.array([w.bulk(b"%d" % nxt), w.bulks(keys)])


@command("KEYS", 2, "read")
def _keys(s: Session, args: list[bytes]) -> bytes:
    with s.view() as v:
        return w.bulks(s.front.kv.keys(v, args[1]))


def _flush(s: Session, args: list[bytes]) -> bytes:
    if len(args) > 2 or (len(args) == 2 and args[1].upper() not in (b"ASYNC", b"SYNC")):
        raise RedisError("ERR syntax error")
    if not s.front.options.flushdb:
        raise RedisError("ERR FLUSHDB is disabled: start the daemon with --resp-flushdb to allow it")
    if s._tx is not None:
        s.front.kv.flush(s._tx, 1 << 62)
        return w.OK
    for _ in range(1 << 40):  # bounded: each turn deletes a batch or ends
        with s.decide() as d:
            if not s.front.kv.flush(d, 1000):
                break
    return w.OK


COMMANDS[b"FLUSHDB"] = Command(_flush, -1, "write")
COMMANDS[b"FLUSHALL"] = Command(_flush, -1, "write")


# --- logspool's own: LS.LOCK key owner [ttl_s], LS.UNLOCK key [owner] [FORCE], LS.NOT, LS.TRUNCATE --
@command("LS.LOCK", -3, "write")
def _lock(s: Session, args: list[bytes]) -> bytes:
    ttl = parse_float(args[3]) if len(args) > 3 else 30.0
    if len(args) > 4:
        raise RedisError("ERR syntax error")
    owner = _client_name(args[2])
    with s.decide() as d:
        return w.integer(s.front.kv.lock(d, key_of(args[1]), owner, ttl))


@command("LS.UNLOCK", -2, "write")
def _unlock(s: Session, args: list[bytes]) -> bytes:
    rest = args[2:]
    force = bool(rest) and rest[-1].upper() == b"FORCE"
    if force:
        rest = rest[:-1]
    if len(rest) > 1:
        raise RedisError("ERR syntax error")
    owner = _client_name(rest[0]) if rest else s.name
    with s.decide() as d:
        return w.integer(int(s.front.kv.unlock(d, key_of(args[1]), owner, force)))


@command("LS.NOT", 2, "write")
def _not(s: Session, args: list[bytes]) -> bytes:
    with s.decide() as d:
        return w.integer(s.front.kv.flip(d, key_of(args[1])))


@command("LS.TRUNCATE", 3, "write")
def _truncate(s: Session, args: list[bytes]) -> bytes:
    size = _int(args[2])
    with s.decide() as d:
        return w.integer(s.front.kv.truncate(d, key_of(args[1]), size))


# --- streams --------------------------------------------------------------------------------------
@command("XADD", -5, "stream")
def _xadd(s: Session, args: list[bytes]) -> bytes:
    name = _stream_name(args[1])
    i = 2
    nomkstream = False
    while i < len(args) and args[i].upper() in (b"NOMKSTREAM", b"MAXLEN", b"MINID", b"LIMIT"):
        if args[i].upper() != b"NOMKSTREAM":
            raise RedisError("ERR logspool streams are trimmed by the log's retention (logspool retention), "
                             "not by XADD MAXLEN or MINID")  # fmt: skip
        nomkstream = True
        i += 1
    if i >= len(args):
        raise _arity_error(b"xadd")
    if args[i] != b"*":
        raise RedisError("ERR logspool assigns stream ids itself (<ms>-<lsn>): XADD takes the id '*' only")
    fields = args[i + 1 :]
    if not fields or len(fields) % 2:
        raise _arity_error(b"xadd")
    log = s.front.streams.log(name, create=not nomkstream)
    if log is None:
        return s.nil()
    entry_id = s.front.streams.add(log, fields)
    s._wrote_logs[name] = log
    return w.bulk(entry_id)


@command("XLEN", 2, "stream")
def _xlen(s: Session, args: list[bytes]) -> bytes:
    log = s.front.streams.log(_stream_name(args[1]), create=False)
    return w.integer(0 if log is None else s.front.streams.length(log))


def _range_count(args: list[bytes]) -> int | None:
    if len(args) == 4:
        return None
    if len(args) != 6 or args[4].upper() != b"COUNT":
        raise RedisError("ERR syntax error")
    count = _int(args[5])
    return max(count, 0)


def _xrange(s: Session, args: list[bytes], reverse: bool) -> bytes:
    name = _stream_name(args[1])
    hi_raw, lo_raw = (args[2], args[3]) if reverse else (args[3], args[2])
    start, start_excl = parse_id(lo_raw)
    end, end_excl = parse_id(hi_raw, end=True)
    count = _range_count(args)
    log = s.front.streams.log(name, create=False)
    if log is None or count == 0:
        return w.EMPTY_ARRAY
    wanted = STREAM_REPLY_COUNT_MAX + 1 if count is None else min(count, STREAM_REPLY_COUNT_MAX)
    if reverse:
        entries = s.front.streams.backward(log, end, end_excl, start, start_excl, wanted)
    else:
        entries = s.front.streams.forward(log, start, start_excl, end, end_excl, wanted)
    if count is None and len(entries) > STREAM_REPLY_COUNT_MAX:
        raise RedisError(f"ERR the range holds more than {STREAM_REPLY_COUNT_MAX} entries: give COUNT "
                         "and continue from the last id")  # fmt: skip
    return entries_reply(entries)


@command("XRANGE", -4, "stream")
def _xrange_fwd(s: Session, args: list[bytes]) -> bytes:
    return _xrange(s, args, False)


@command("XREVRANGE", -4, "stream")
def _xrevrange(s: Session, args: list[bytes]) -> bytes:
    return _xrange(s, args, True)


@command("XREAD", -4, "stream")
def _xread(s: Session, args: list[bytes]) -> bytes | _Block:
    count = STREAM_REPLY_COUNT_MAX
    block_ms: int | None = None
    i = 1
    while i < len(args) and args[i].upper() != b"STREAMS":
        option = args[i].upper()
        if option == b"COUNT" and i + 1 < len(args):
            count = min(max(_int(args[i + 1]), 1), STREAM_REPLY_COUNT_MAX)
        elif option == b"BLOCK" and i + 1 < len(args):
            block_ms = _int(args[i + 1])
            if block_ms < 0:
                raise RedisError("ERR timeout is negative")
        else:
            raise RedisError("ERR syntax error")
        i += 2
    rest = args[i + 1 :]
    if i >= len(args) or not rest or len(rest) % 2:
        raise RedisError(
            "ERR Unbalanced 'xread' list of streams: for each stream key an ID or '$' must be specified."
        )
    half = len(rest) // 2
    cursors = []
    for raw_name, raw_id in zip(rest[:half], rest[half:], strict=True):
        name = _stream_name(raw_name)
        if raw_id == b"$":
            cursors.append(s.front.streams.last_lsn_cursor(name))
        else:
            after, _ = parse_id(raw_id)
            if after[0] == ID_MAX:
                raise RedisError("ERR Invalid stream ID specified as stream command argument")
            cursors.append(Cursor(name, after=after))
    deadline = None if not block_ms else time.monotonic() + block_ms / 1000
    block = _Block(cursors, count, deadline)
    reply = s.xread_now(block)
    if reply is not None:
        return reply
    if block_ms is None or s._tx is not None:
        return w.null_array(s.proto)
    return block


PLACES = _places()  # (after every command is registered)
