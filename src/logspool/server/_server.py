"""The daemon: an asyncio server that serves logs, job journals and key-value stores by name.

Longer than 600 lines: the native protocol's handler table (one short handler per command of
docs/PROTOCOL.md) with the server that runs it; the native connection (``_native.py``), the RESP
door, the stores and the wire codec (``logspool._wire``) are apart. Next to split when it grows:
the handler table.

``logspool serve --data DIR --listen 127.0.0.1:PORT``. Each store lives in ``DIR/logs/NAME``,
``DIR/jobs/NAME`` or ``DIR/kv/NAME`` and is opened on first use; the daemon is one more process
sharing its logs and job journals (embedded users may open the same directories), and it owns the
key-value stores it serves (``own_kv``, the default: opened with ``single_writer``, so
``kv.open`` of one in another process waits for the daemon to stop, or fails with LockedError;
``own_kv=False``, ``--shared-kv``: shared as the rest, at the cost of a catch-up a call).
Requests are read as they come and run concurrently (pipelining: replies carry the request's id
and may come in any order). Where each runs (``_native.py``): kv.GET on the event loop; writes
of key-value stores and log appends in commit rounds shared by every connection (the RESP door's
``Committer``: one write and one fsync a store a round); the rest in a thread pool. A write's
reply is sent after its round's fsync, a read's after any round it may have seen is durable, so
a durable store's reply means durable.

Safety: listens on 127.0.0.1 by default; an optional shared-secret token (HELLO first, compared
in constant time) and TLS; limits on frame size, connections and requests in flight per
connection. A frame that breaks the protocol gets an error reply and closes its connection only.
SIGTERM (``stop``) stops reading requests, lets those in flight finish and reply, then closes the
stores: nothing acknowledged is lost.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import hmac
import itertools
import json
import logging
import os
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal

from .. import _wire as p
from .. import jobs, kv
from .._fs import REAL, FileSystem
from ..log import Log
from ._resp import RespFront, RespOptions
from ._resp import _Connection as _RespConnection
from ._resp_commit import Committer, settled_all
from ._resp_kv import durable_entry
from ._resp_streams import Tails

if TYPE_CHECKING:
    from ._native import NativeConnection

_logger = logging.getLogger("logspool.server")

NAME_RE = p.NAME_RE
READ_LIMIT_MAX = 10_000
# The keys and values of a kv.RANGE or kv.MATCH reply (or one value, at most 15 MiB): a page of
# large values stays within a frame, whatever ``limit`` the request gives.
KV_PAGE_BYTES_MAX = 8 * 1024 * 1024
WAIT_S_MAX = 60.0
KINDS = ("logs", "jobs", "kv")


@dataclass
class Limits:
    frame_size_max: int = 16 * 1024 * 1024 + 64 * 1024  # a 16 MiB value and its request
    connections_max: int = 256
    in_flight_max: int = 64  # requests per connection being served at once
    threads: int = 32  # store calls at once (a LISTEN or a take with wait holds none as it waits)
    stores_max: int = 4096  # stores open at once (each holds files open); more are refused

    def check(self) -> None:
        """ValueError naming the first bound that is not a positive integer: with
        ``in_flight_max`` 0 a connection would be paused before its first request, for ever;
        with the others 0 every connection, request or store would be refused."""
        for bound in fields(self):
            value = getattr(self, bound.name)
            if type(value) is not int or value < 1:
                raise ValueError(f"the daemon's limit {bound.name} must be a positive integer, not {value!r}")


@dataclass
class Counters:
    connections: int = 0
    connections_total: int = 0
    refused: int = 0
    requests: dict[str, int] = field(default_factory=dict)
    errors: int = 0
    protocol_errors: int = 0
    bytes_in: int = 0
    bytes_out: int = 0


def _name(body: dict[str, Any]) -> str:
    name = body.get("name")
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise ValueError(f"name must match {NAME_RE.pattern}, not {name!r}")
    return name


def _get(body: dict[str, Any], key: str, kind: type | tuple[type, ...], default: Any = None) -> Any:
    """Field ``key`` of a request: of type ``kind``, or ``default`` when absent or nil."""
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) and kind in (int, float, (int, float)):
        raise TypeError(f"field {key!r} must be a number, not a boolean")
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise TypeError(f"field {key!r} must be {names}, not {type(value).__name__}")
    return value


def _need(body: dict[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    if body.get(key) is None:
        raise ValueError(f"field {key!r} is missing")
    return _get(body, key, kind)


def _page_bytes_max(body: dict[str, Any]) -> int:
    requested: int = _get(body, "bytes_max", int, KV_PAGE_BYTES_MAX)
    return min(requested, KV_PAGE_BYTES_MAX)


def value_to_wire(v: kv.Value) -> dict[str, Any]:
    return {
        "key": v.key, "value": v.value, "type": v.type, "size": v.size, "created": v.created,
        "modified": v.modified, "accessed": v.accessed, "expire_at": v.expire_at, "touch": v.touch,
        "persist": v.persist, "version": v.version, "timestamp": v.timestamp, "locked_by": v.locked_by,
        "lock_until": v.lock_until,
    }  # fmt: skip


def job_to_wire(j: jobs.Job) -> dict[str, Any]:
    return {
        "id": j.id, "key": j.key, "domain": j.domain, "payload": j.payload, "priority": j.priority,
        "state": j.state, "not_before": j.not_before, "deliveries": j.deliveries, "token": j.token,
        "lease_until": j.lease_until, "ttl_until": j.ttl_until, "created": j.created,
        "updated": j.updated, "error": j.error,
    }  # fmt: skip


def _job_ref(body: dict[str, Any]) -> jobs.Job:
    """The job a request names by id and lease token (all the journal checks)."""
    return jobs.Job(_need(body, "id", int), "", "", b"", 0, "leased", 0.0, 0, _need(body, "token", int),
                    None, None, 0.0, 0.0, "")  # fmt: skip


def _job_refs(body: dict[str, Any], key: str) -> list[jobs.Job]:
    """The jobs a request names as a list of [id, token] pairs in field ``key`` (absent: none)."""
    refs = _get(body, key, list, [])
    out = []
    for ref in refs:
        if not (isinstance(ref, list) and len(ref) == 2 and all(type(x) is int for x in ref)):
            raise TypeError(f"field {key!r} must be a list of [id, token] pairs of integers, not {ref!r}")
        out.append(_job_ref({"id": ref[0], "token": ref[1]}))
    return out


def error_body(err: BaseException) -> dict[str, Any]:
    args: list[Any] = []
    for arg in getattr(err, "args", ()):
        if isinstance(arg, str | int | float | bool | bytes) or arg is None:
            args.append(arg)
        else:
            args = []
            break
    return {"error": type(err).__name__, "message": str(err), "args": args}


class Stores:
    """The stores of a data directory, opened on first use, shared by every connection."""

    def __init__(
        self,
        data: str,
        durability: str,
        stores_max: int = 4096,
        fs: FileSystem | None = None,
        *,
        own_kv: bool = False,
    ) -> None:
        self.data = data
        self.durability = durability
        self.stores_max = stores_max
        self.own_kv = own_kv  # every key-value store opened is owned (``Server``'s ``own_kv``)
        self.fs = fs  # the I/O seam of every store opened (None: the real one; tests fault it)
        # Told when a store's log handle fails (an fsync refused: ``Server._store_failed``).
        self.on_fail: Callable[[str, BaseException], None] | None = None
        # The logs written since a read last made them durable (``settle``): each with a count
        # of its writes, raised by a writer once it holds the log's writer lock (``adopt``).
        self._written: dict[Log, int] = {}
        self._written_lock = threading.Lock()
        self._open: dict[tuple[str, str], Any] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()

    def get(self, kind: str, name: str, *, own: bool = False) -> Any:
        """The store ``kind``/``name``, opened now if it is not open. ``own`` (a key-value store
        opened by this call): the daemon holds its writer lock until it closes, and compacts it
        in the background (``kv.open``'s ``single_writer`` and ``compact_in_background``).
        A store open already is found without the lock, which a thread opening another store
        holds through the open (a log's open may wait for its writer lock): an event loop's
        commit round gets its stores here, and must not wait for it."""
        found = self._open.get((kind, name))
        if found is not None:
            return found
        with self._lock:
            found = self._open.get((kind, name))
            if found is None:
                if len(self._open) >= self.stores_max:
                    raise ValueError(f"{self.stores_max} stores are open already (--stores-max)")
                path = os.path.join(self.data, kind, name)
                self.make_dir(os.path.dirname(path))
                openers: dict[str, Callable[..., Any]] = {"logs": Log, "jobs": jobs.open, "kv": kv.open,
                                                          "forward": kv.open}  # fmt: skip
                opener = openers[kind]
                owned: dict[str, Any] = (
                    {"single_writer": True, "compact_in_background": True}
                    if kind == "kv" and (own or self.own_kv)
                    else {"compact_in_background": True}  # (no call, no commit round, waits for a snapshot)
                    if kind in ("jobs", "kv")
                    else {}
                )
                if self.fs is not None:
                    owned["fs"] = self.fs
                found = opener(path, durability=self.durability, **owned)
                self.adopt(found if isinstance(found, Log) else found._log)
                self._open[(kind, name)] = found
            return found

    def make_dir(self, path: str) -> None:
        """Make ``path``, a directory of DATA (a kind's, the consumer groups'), if it is not
        there: durable before any store is made in it (a store fsyncs the directory it is made
        in, not that one's parent: without this a power cut could take every store in it). A
        failed fsync stops a daemon of durability "always", as a store's does (``on_fail``): it
        is not to be tried again (the next call would find the directory and make a store in
        it)."""
        if os.path.isdir(path):
            return
        fs = self.fs or REAL
        with contextlib.suppress(FileExistsError):  # (another process made it: fsynced below too)
            fs.mkdir(path)
        try:
            fs.fsync_dir(self.data)
        except OSError as err:
            if self.on_fail is not None and self.durability == "always":  # (as ``adopt`` wires it)
                self.on_fail(self.data, err)
            raise

    def opened(self, kind: str, name: object) -> Any:
        """The store ``kind``/``name`` if it is open, else None; never opens one (the event loop
        asks: opening recovers a store from disk). Any ``name`` may be asked: only names that
        were checked when their store was opened are found."""
        return self._open.get((kind, name)) if type(name) is str else None

    def lock_for(self, name: str) -> threading.Lock:
        """The lock that orders forwarded appends into the log ``name``."""
        with self._lock:
            return self._locks.setdefault(name, threading.Lock())

    def log(self, body: dict[str, Any]) -> Log:
        return self.get("logs", _name(body))  # type: ignore[no-any-return]

    def jobs(self, body: dict[str, Any]) -> jobs.Journal:
        return self.get("jobs", _name(body))  # type: ignore[no-any-return]

    def kv(self, body: dict[str, Any]) -> kv.Store:
        return self.get("kv", _name(body))  # type: ignore[no-any-return]

    def adopt(self, log: Log) -> None:
        """Watch a log of the daemon (a store's, or a consumer group store's), with durability
        "always": its writes for ``settle``, its failure for ``on_fail``."""
        if self.durability != "always":
            return
        log._state.on_fail = self.on_fail
        log._state.on_write = lambda: self._wrote(log)

    def _wrote(self, log: Log) -> None:
        with self._written_lock:
            self._written[log] = self._written.get(log, 0) + 1

    def settle(self) -> None:
        """Return once what every log of the daemon has written so far is durable (with
        durability "always"; an fsync under way is waited for, else one is led): after a read
        in the pool, before its reply. A write in the pool (a job's put, a forwarded append)
        fsyncs after it lets go of its locks, as a commit round does; a read meanwhile may see
        it, and its reply must not show a write a crash could still take back. Only the logs
        written since they were last settled are looked at (``_written``); each one's writer
        lock is taken and given back first: a write under way may be read already (its bytes
        are in the file before the handle counts them written), and its end must be in the
        fsync. A log whose handle failed (its fsync refused: the daemon stops) or closed is
        passed over."""
        with self._written_lock:
            marked = list(self._written.items())
        for log, count in marked:
            if log._state.usable:
                with log._active.lock:  # (a writer that holds it has written, or will)
                    pass
                log.sync(gather=False)  # (what was written, durable now: no wait for more)
            with self._written_lock:
                if self._written.get(log) == count:  # (else written again since: kept)
                    del self._written[log]

    def listing(self) -> dict[str, list[str]]:
        with self._lock:
            return {k: sorted(n for kind, n in self._open if kind == k) for k in KINDS}

    def close(self) -> None:
        with self._lock:
            for store in self._open.values():
                with contextlib.suppress(Exception):
                    store.close()
            self._open.clear()


def _digest(payloads: list[bytes]) -> str:
    h = hashlib.sha256()
    for payload in payloads:
        h.update(len(payload).to_bytes(8, "big"))
        h.update(payload)
    return h.hexdigest()


FORGET_PRODUCERS_MAX = 10_000  # producers one log.FORGET names at most


def forget_producers(table: kv.Store, lock: threading.Lock, producers: list[str]) -> int:
    """Forget what ``forward_into`` keeps for ``producers`` (their ``done`` and any ``pending``):
    for producers that will never send again (a finished Spark batch write, a forwarder whose
    source log is gone). A forgotten producer that sends again starts from nothing: every record
    it sends is appended, those it had sent before included. How many had an entry. Durable on
    return (each delete is fsynced); under the log's forward lock, so never beside a forward."""
    with lock:
        return sum(1 for producer in producers if table.delete(producer))


def forward_into(
    log: Log, table: kv.Store, lock: threading.Lock, producer: str, first: int, records: list[bytes]
) -> dict[str, Any]:
    """Append the records a forwarder sends (source lsns ``first``...) unless they were appended
    before: idempotent by (producer, source lsn), across crashes of the daemon.

    ``table`` (a key-value store beside the log) holds, per producer, ``done``: the source lsn up
    to which records are in the log, and while an append is under way ``pending``: its source
    range, where it starts in the log and a digest of its payloads. Written durably before the
    append; cleared after. A pending left by a crash is resolved by reading the log where it
    would be: the same digest means it landed.
    """
    with lock:
        found = table.get(producer)
        state: dict[str, Any] = json.loads(str(found)) if found is not None else {"done": 0, "pending": None}
        pending = state["pending"]
        if pending is not None:
            start, count, at, digest = pending
            landed = (
                [r.payload for r in itertools.islice(log.read(at), count)]
                if at >= log.info().first_lsn
                else []
            )
            if len(landed) == count and _digest(landed) == digest:
                state["done"] = max(state["done"], start + count)
            state["pending"] = None
            table.set(producer, json.dumps(state))
        done = int(state["done"])
        gap = max(0, first - done)  # records the source no longer had (its retention): not ours to fill
        new = records[max(0, done - first) :]
        if new:
            begin = max(first, done)
            with log.exclusive() as tail:  # the log's next lsn is ours until the block ends
                state["pending"] = [begin, len(new), tail.next_lsn, _digest(new)]
                table.set(producer, json.dumps(state))  # durable before the records are
                tail.append_many(new)
            state["done"] = begin + len(new)
            state["pending"] = None
            table.set(producer, json.dumps(state))
        done_now = int(state["done"])
        return {"next": done_now, "gap": gap, "appended": len(new)}


class Server:
    """``await Server(data).start()``; ``address``; ``await stop()``. See the module docstring."""

    def __init__(
        self,
        data: str | os.PathLike[str],
        *,
        host: str = "127.0.0.1",
        port: int | None = 0,
        token: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
        limits: Limits | None = None,
        durability: str = "always",
        resp: RespOptions | None = None,
        fs: FileSystem | None = None,
        own_kv: bool | None = None,
    ) -> None:
        """``fs``: the I/O seam of the stores (tests/crash/faultfs.py cuts the power there).
        ``own_kv``: the daemon owns every key-value store it serves, as the RESP door owns its
        own (``kv.open(single_writer=True, compact_in_background=True)``): no catch-up with the
        op log before each read batch and decision, no cross-process fsync protocol (same run:
        kv.GET x1 8,345 -> 11,180/s, GET -P16 65,620 -> 96,369); ``kv.open`` of a served store
        in another process then waits for the daemon to stop (or LockedError). None (the
        default): owned, unless the RESP door's store is shared (``RespOptions(own_kv=False)``),
        then every store is. False: embedded processes share the key-value stores the daemon
        serves (but the RESP door's, unless it says so too). True with the RESP door's store
        shared is refused: one of the two would be ignored."""
        if own_kv is None:
            own_kv = resp is None or resp.own_kv
        elif own_kv and resp is not None and not resp.own_kv:
            raise ValueError(
                "own_kv (every key-value store owned) contradicts RespOptions(own_kv=False) "
                "(--own-kv with --shared-kv): choose one"
            )
        if limits is not None:
            limits.check()  # (before anything is made)
        self.data = os.fspath(data)
        os.makedirs(self.data, exist_ok=True)
        self.host, self.port = host, port
        self._token = token.encode() if token is not None else None
        self._ssl = ssl_context
        self.limits = limits or Limits()
        self.stores = Stores(self.data, durability, self.limits.stores_max, fs, own_kv=own_kv)
        self.stores.on_fail = self._store_failed
        # A store's fsync failed ("always"): no reply goes out after it, the daemon stops
        # (``_store_failed``); set on the thread that met it, read by every connection's write.
        self.failure: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.counters = Counters()
        self.started = time.time()
        self._pool = concurrent.futures.ThreadPoolExecutor(self.limits.threads, thread_name_prefix="logspool")
        self._server: asyncio.Server | None = None
        self._metrics: asyncio.Server | None = None
        self._connections: set[NativeConnection] = set()
        self._committer: Committer | None = None  # the native door's commit rounds (start)
        # What wakes the native door's waits (a LISTEN, a jobs.TAKE with wait) on the event loop:
        # a change in a store's directory, by this daemon or any process (start).
        self.tails: Tails | None = None
        # Every native LISTEN's task until it ends (its connection's ``listens`` forgets it at
        # its UNLISTEN or when the connection is lost, before it has sent its end and closed
        # its reader in the pool): ``stop`` waits for them before it stops the pool.
        self.listen_tasks: set[asyncio.Task[None]] = set()
        self._stopped = asyncio.Event()
        self._handlers = self._build_handlers()
        self._listen = port is not None  # port None: RESP only
        self.resp = RespFront(self, resp) if resp is not None else None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def start(self) -> Server:
        from ._native import NativeConnection
        from ._native_rounds import make_committer

        loop = self._loop = asyncio.get_running_loop()
        # One Tails for both doors: a round of either wakes the waits of both at once (a native
        # log.APPEND a RESP XREAD, an XADD a native LISTEN), not through an inotify event later.
        self.tails = Tails(loop, self.data)
        if self.resp is not None:
            await self.resp.start()
        if self._listen:
            committer = self._committer = make_committer(self, loop)
            self._server = await loop.create_server(
                lambda: NativeConnection(self, committer), self.host, self.port, ssl=self._ssl
            )
            sock = self._server.sockets[0]
            self.port = sock.getsockname()[1]
            _logger.info("serving %s on %s", self.data, self.address)
        return self

    async def start_metrics(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Serve the counters as Prometheus text at ``http://HOST:PORT/metrics``; returns the port."""
        self._metrics = await asyncio.start_server(self._metrics_request, host, port)
        return int(self._metrics.sockets[0].getsockname()[1])

    def metrics_text(self) -> str:
        c = self.counters
        metrics = [
            ("connections", "gauge", c.connections),
            ("connections_total", "counter", c.connections_total),
            ("connections_refused_total", "counter", c.refused),
            ("errors_total", "counter", c.errors),
            ("protocol_errors_total", "counter", c.protocol_errors),
            ("bytes_in_total", "counter", c.bytes_in),
            ("bytes_out_total", "counter", c.bytes_out),
        ]
        lines: list[str] = []
        for name, kind, value in metrics:
            lines += [f"# TYPE logspool_{name} {kind}", f"logspool_{name} {value}"]
        lines.append("# TYPE logspool_requests_total counter")
        lines += [
            f'logspool_requests_total{{command="{k}"}} {v}' for k, v in sorted(self.request_counts().items())
        ]
        return "\n".join(lines) + "\n"

    async def _metrics_request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            line = await asyncio.wait_for(reader.readline(), 5)
            ok = line.split(b" ")[1:2] == [b"/metrics"]
            body = self.metrics_text().encode() if ok else b"not found: GET /metrics\n"
            status = b"200 OK" if ok else b"404 Not Found"
            writer.write(b"HTTP/1.0 " + status + b"\r\nContent-Type: text/plain; version=0.0.4\r\n"
                         + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)  # fmt: skip
            await writer.drain()
        writer.close()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    def _store_failed(self, path: str, err: BaseException) -> None:
        """A store's log handle failed (an fsync refused, durability "always"): what its memory
        and the page cache hold may not be on the disk, and nothing tells which (fsyncgate). As
        redis-server exits when an ``appendfsync always`` fsync fails, the daemon stops: from now
        on no connection sends a reply (``failure``, checked by every write to a client: a reply
        could show such a write), and it stops serving; a restart recovers what the disk holds.
        Any thread."""
        if self.failure is not None:
            return
        self.failure = err
        _logger.critical(
            "%s: fsync failed (%s): the daemon stops; no reply is sent from now on (one could show a "
            "write the disk may not hold); restart it to recover what the disk holds",
            path,
            err,
        )
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # (the loop closed: stopped already)
                loop.call_soon_threadsafe(lambda: asyncio.ensure_future(self.stop(timeout_s=1.0)))

    async def stop(self, timeout_s: float = 30.0) -> None:
        """Stop accepting, stop reading requests, let those in flight reply, close the stores."""
        if self._server is not None:
            self._server.close()
        if self._metrics is not None:
            self._metrics.close()
        if self.resp is not None:
            self.resp.close_listener()
        conns: list[NativeConnection | _RespConnection] = list(self._connections)
        if self.resp is not None:
            conns += list(self.resp.connections)
        for conn in conns:
            conn.stop_reading()
        if conns:
            await asyncio.wait([asyncio.ensure_future(c.done.wait()) for c in conns], timeout=timeout_s)
        # The LISTENs, cancelled with their connections: each sends its end and closes its reader
        # in the pool, so the pool stops after them (a task left pending when the loop closes
        # would be torn down in the middle of its wait).
        listens = list(self.listen_tasks)
        for task in listens:
            task.cancel()
        if listens:
            await asyncio.wait(listens, timeout=timeout_s)
        if self._committer is not None:
            self._committer.stop()
        if self.tails is not None:
            self.tails.close()
        if self.resp is not None:
            self.resp.close()
        self._pool.shutdown(wait=True)
        if self.resp is not None:
            self.resp.close_stores()
        self.stores.close()
        self._stopped.set()

    def request_counts(self) -> dict[str, int]:
        """Requests served, by command: the native protocol's and RESP's (``resp.get``...)."""
        counts = dict(self.counters.requests)
        if self.resp is not None:
            counts.update(self.resp.request_counts())
        return counts

    def commit_counters(self) -> dict[str, Any]:
        """The native door's commit rounds: rounds run (``rounds_here`` of them on the loop,
        ``handed`` of those finished on the thread: their fsync would have waited;
        ``rounds_alone``: of plain kv.SETs only, written without a decision), the batches
        they held (a batch: one read's writes of one connection), and where their time went,
        in seconds: deciding (the requests and the write), fsyncs, and the commit delay's waits
        for the rest of a group."""
        c = self._committer
        if c is None:
            return {}
        return {"rounds": c.rounds, "rounds_here": c.rounds_here, "rounds_alone": c.rounds_alone,
                "handed": c.handed, "batches": c.batches,
                "decide_s": c.decide_s, "sync_s": c.sync_s, "delay_s": c.delay_s}  # fmt: skip

    def connection_count(self) -> int:
        """Connections open now, native and RESP (``Limits.connections_max`` bounds them together)."""
        return len(self._connections) + (len(self.resp.connections) if self.resp is not None else 0)

    async def call(self, fn: Callable[[], Any]) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn)

    async def read(self, fn: Callable[[], Any]) -> Any:
        """``call`` for a read whose result goes into a reply: returned once everything it may
        show is durable, the writes of the pool (``Stores.settle``) and every commit round of
        both doors started so far (``settled_all``)."""

        def run() -> Any:
            try:
                return fn()
            finally:  # (an error's reply may show a write too: "the job is gone, acked")
                self.stores.settle()

        try:
            return await self.call(run)
        finally:
            settling = self.settled()
            if settling is not None:
                await settling

    def settled(self) -> asyncio.Future[Any] | None:
        """A future done once every commit round of both doors started so far is durable and
        answered; None if they all are."""
        return settled_all(self._committer, self.resp.committer if self.resp is not None else None)

    def check_token(self, token: object) -> bool:
        if self._token is None:
            return True
        return isinstance(token, str) and hmac.compare_digest(token.encode(), self._token)

    # --- commands ---------------------------------------------------------------------------------
    def _build_handlers(self) -> dict[int, Callable[[dict[str, Any]], dict[str, Any]]]:
        s = self.stores
        num = (int, float)

        def kv_set(b: dict[str, Any]) -> dict[str, Any]:
            ok = s.kv(b).set(
                _need(b, "key", str), b.get("value"), overwrite=_get(b, "overwrite", bool, True),
                ttl=_get(b, "ttl", num), expire_at=_get(b, "expire_at", num), touch=_get(b, "touch", num),
                persist=_get(b, "persist", bool, True), ts=_get(b, "ts", num), owner=_get(b, "owner", str),
            )  # fmt: skip
            return {"ok": ok}

        def kv_get(b: dict[str, Any]) -> dict[str, Any]:
            got = durable_entry(s.kv(b), _need(b, "key", str), data=_get(b, "data", bool, True),
                                touch=_get(b, "touch", bool, True))  # fmt: skip
            if _get(b, "value_only", bool, False):  # (protocol 1, later: PROTOCOL.md kv.GET)
                return {"found": False} if got is None else {"found": True, "value": got.value}
            return {"value": None if got is None else value_to_wire(got)}

        def kv_page(page: kv.Page) -> dict[str, Any]:
            return {"items": [value_to_wire(v) for v in page], "cursor": page.cursor}

        def kv_range(b: dict[str, Any]) -> dict[str, Any]:
            return kv_page(s.kv(b).range(
                _get(b, "start", str, ""), _get(b, "end", str), limit=_get(b, "limit", int, 100),
                cursor=_get(b, "cursor", str), data=_get(b, "data", bool, True), bytes_max=_page_bytes_max(b),
            ))  # fmt: skip

        def kv_match(b: dict[str, Any]) -> dict[str, Any]:
            return kv_page(s.kv(b).match(
                _need(b, "pattern", str), limit=_get(b, "limit", int, 100),
                timeout=min(_get(b, "timeout", num, 0.1), 1.0), cursor=_get(b, "cursor", str),
                data=_get(b, "data", bool, True), bytes_max=_page_bytes_max(b),
            ))  # fmt: skip

        def log_read(b: dict[str, Any]) -> dict[str, Any]:
            log = s.log(b)
            start = _position(b.get("start", "earliest"))
            limit = min(_get(b, "limit", int, 1000), READ_LIMIT_MAX)
            bytes_max = _get(b, "bytes_max", int, 4 * 1024 * 1024)
            since = _get(b, "since", num)
            records: list[list[Any]] = []
            size = 0
            reader = log.reader(start, since=since)
            try:
                for rec in reader:
                    records.append([rec.lsn, rec.timestamp, rec.payload])
                    size += len(rec.payload)
                    if len(records) >= limit or size >= bytes_max:
                        break
                # An empty page's next is where the reader stopped, not the log's next_lsn read
                # after it: a record appended in between was skipped by a pager (cat --server).
                stopped = reader.position
            finally:
                reader.close()
            nxt = records[-1][0] + 1 if records else stopped
            if _get(b, "packed", bool, False):
                return {"packed": p.pack_records(records), "next": nxt}
            return {"records": records, "next": nxt}

        def log_info(b: dict[str, Any]) -> dict[str, Any]:
            i = s.log(b).info()
            return {
                "first_lsn": i.first_lsn,
                "next_lsn": i.next_lsn,
                "size": i.size,
                "segments": len(i.segments),
                # (newer than the rest: a client plans reads along the segments with them)
                "bases": [seg.base_lsn for seg in i.segments],
                "sizes": [seg.size for seg in i.segments],
                # (newer still: the newest segment's written end, its preallocated zeros left out)
                "end": i.end,
            }

        def log_append(b: dict[str, Any]) -> dict[str, Any]:
            records = _need(b, "records", list)
            if not all(isinstance(r, bytes) for r in records):
                raise TypeError("field 'records' must be a list of bytes")
            lsns = s.log(b).append_many(records)
            return {"first": lsns[0] if lsns else None, "count": len(lsns)}

        def log_forward(b: dict[str, Any]) -> dict[str, Any]:
            records = _need(b, "records", list)
            if not all(isinstance(r, bytes) for r in records):
                raise TypeError("field 'records' must be a list of bytes")
            producer = _need(b, "producer", str)
            if not producer or len(producer.encode()) > 1024:
                raise ValueError("field 'producer' must be 1 to 1024 bytes of UTF-8")
            first = _need(b, "first", int)
            if first < 0:
                raise ValueError(f"field 'first' must be an lsn >= 0, not {first}")
            name = _name(b)
            return forward_into(s.log(b), s.get("forward", name), s.lock_for(name), producer, first, records)

        def log_forget(b: dict[str, Any]) -> dict[str, Any]:
            producers = _need(b, "producers", list)
            if len(producers) > FORGET_PRODUCERS_MAX:
                raise ValueError(f"field 'producers' names {len(producers)} producers, at most "
                                 f"{FORGET_PRODUCERS_MAX} a request")  # fmt: skip
            for producer in producers:
                if not isinstance(producer, str) or not producer or len(producer.encode()) > 1024:
                    raise ValueError(
                        "field 'producers' must be a list of strings of 1 to 1024 bytes of UTF-8"
                    )
            name = _name(b)
            return {"forgotten": forget_producers(s.get("forward", name), s.lock_for(name), producers)}

        def job_put(b: dict[str, Any]) -> dict[str, Any]:
            put_id = s.jobs(b).put(
                _need(b, "key", str), _get(b, "payload", bytes, b""), priority=_get(b, "priority", int),
                not_before=_get(b, "not_before", num), delay=_get(b, "delay", num), ttl=_get(b, "ttl", num),
                domain=_get(b, "domain", str), priority_merge=_get(b, "priority_merge", str, "replace"),
                not_before_merge=_get(b, "not_before_merge", str, "replace"),
            )  # fmt: skip
            # "lsn": the field's name in releases before journal format 4, when a put's id was its lsn
            return {"id": put_id, "lsn": put_id}

        def job_take(b: dict[str, Any]) -> dict[str, Any]:
            got = s.jobs(b).take(_get(b, "lease", num, 30.0), wait=min(_get(b, "wait", num, 0.0), WAIT_S_MAX))
            if isinstance(got, jobs.Job):
                return {"job": job_to_wire(got)}
            return {"job": None, "next_at": got.next_at}

        def job_take_many(b: dict[str, Any]) -> dict[str, Any]:
            count, acks = _need(b, "count", int), _job_refs(b, "ack")
            lease, wait = _get(b, "lease", num, 30.0), min(_get(b, "wait", num, 0.0), WAIT_S_MAX)
            if count == 1 and len(acks) <= 1:  # take(ack=job): says when to look again if idle
                got = s.jobs(b).take(lease, wait=wait, ack=acks[0] if acks else None)
                if isinstance(got, jobs.Job):
                    return {"jobs": [job_to_wire(got)]}
                return {"jobs": [], "next_at": got.next_at}
            return {"jobs": [job_to_wire(j) for j in s.jobs(b).take_many(count, lease, wait=wait, ack=acks)]}

        def job_put_many(b: dict[str, Any]) -> dict[str, Any]:
            items = _need(b, "items", list)
            if not all(
                isinstance(i, list) and len(i) == 2 and isinstance(i[0], str) and isinstance(i[1], bytes)
                for i in items
            ):
                raise TypeError("field 'items' must be a list of [key (string), payload (bytes)] pairs")
            ids = s.jobs(b).put_many(
                [(key, payload) for key, payload in items], priority=_get(b, "priority", int),
                not_before=_get(b, "not_before", num), delay=_get(b, "delay", num), ttl=_get(b, "ttl", num),
                domain=_get(b, "domain", str), priority_merge=_get(b, "priority_merge", str, "replace"),
                not_before_merge=_get(b, "not_before_merge", str, "replace"),
            )  # fmt: skip
            return {"ids": ids}

        def job_cancel(b: dict[str, Any]) -> dict[str, Any]:
            return {"ok": s.jobs(b).cancel(_need(b, "key", str))}

        def job_ack_many(b: dict[str, Any]) -> dict[str, Any]:
            s.jobs(b).ack_many(_job_refs(b, "jobs"))
            return {}

        def job_release_many(b: dict[str, Any]) -> dict[str, Any]:
            s.jobs(b).release_many(_job_refs(b, "jobs"))
            return {}

        def job_ack(b: dict[str, Any]) -> dict[str, Any]:
            s.jobs(b).ack(_job_ref(b))
            return {}

        def job_nack(b: dict[str, Any]) -> dict[str, Any]:
            s.jobs(b).nack(_job_ref(b), delay=_get(b, "delay", num, 0.0), error=_get(b, "error", str, ""))
            return {}

        def job_extend(b: dict[str, Any]) -> dict[str, Any]:
            return {"job": job_to_wire(s.jobs(b).extend(_job_ref(b), _get(b, "lease", num, 30.0)))}

        def stats(b: dict[str, Any]) -> dict[str, Any]:
            c = self.counters
            return {
                "address": self.address, "data": self.data, "uptime": time.time() - self.started,
                "connections": c.connections, "connections_total": c.connections_total, "refused": c.refused,
                "requests": self.request_counts(), "errors": c.errors, "protocol_errors": c.protocol_errors,
                "bytes_in": c.bytes_in, "bytes_out": c.bytes_out, "stores": self.stores.listing(),
                "commit": self.commit_counters(),
            }  # fmt: skip

        return {
            p.PING: lambda b: {"time": time.time()},
            p.STATS: stats,
            p.KV_SET: kv_set,
            p.KV_GET: kv_get,
            p.KV_DELETE: lambda b: {
                "ok": s.kv(b).delete(_need(b, "key", str), ts=_get(b, "ts", num), owner=_get(b, "owner", str))
            },
            p.KV_ADD: lambda b: {
                "value": s.kv(b).add(
                    _need(b, "key", str), _get(b, "amount", num, 1), owner=_get(b, "owner", str)
                )
            },
            p.KV_NOT: lambda b: {"value": s.kv(b).flip(_need(b, "key", str), owner=_get(b, "owner", str))},
            p.KV_TRUNCATE: lambda b: {
                "size": s.kv(b).truncate(
                    _need(b, "key", str), _need(b, "size", int), owner=_get(b, "owner", str)
                )
            },
            p.KV_LOCK: lambda b: {
                "until": s.kv(b).lock(_need(b, "key", str), _need(b, "owner", str), _get(b, "ttl", num, 30.0))
            },
            p.KV_UNLOCK: lambda b: {
                "ok": s.kv(b).unlock(
                    _need(b, "key", str), _get(b, "owner", str), force=_get(b, "force", bool, False)
                )
            },
            p.KV_RENAME: lambda b: {
                "ok": s.kv(b).rename(
                    _need(b, "key", str),
                    _need(b, "new", str),
                    overwrite=_get(b, "overwrite", bool, False),
                    ts=_get(b, "ts", num),
                    owner=_get(b, "owner", str),
                )
            },
            p.KV_RANGE: kv_range,
            p.KV_MATCH: kv_match,
            p.KV_STATS: lambda b: s.kv(b).stats().to_json(),
            p.LOG_APPEND: log_append,
            p.LOG_READ: log_read,
            p.LOG_INFO: log_info,
            p.LOG_FORWARD: log_forward,
            p.LOG_FORGET: log_forget,
            p.JOB_PUT: job_put,
            p.JOB_TAKE: job_take,
            p.JOB_ACK: job_ack,
            p.JOB_TAKE_MANY: job_take_many,
            p.JOB_ACK_MANY: job_ack_many,
            p.JOB_RELEASE_MANY: job_release_many,
            p.JOB_PUT_MANY: job_put_many,
            p.JOB_CANCEL: job_cancel,
            p.JOB_NACK: job_nack,
            p.JOB_EXTEND: job_extend,
            p.JOB_STATS: lambda b: s.jobs(b).stats().to_json(),
            p.JOB_GET: lambda b: {"jobs": [job_to_wire(j) for j in s.jobs(b).get(_need(b, "key", str))]},
        }


class _Watched:
    """The versions of the keys a kv LISTEN watches, as last seen."""

    def __init__(self, store: kv.Store, keys: list[str]) -> None:
        self.store = store
        self.seen: dict[str, int | None] = dict.fromkeys(keys)

    def changed(self) -> list[tuple[str, int | None]]:
        """The keys whose version changed since the last call, with their version now."""
        out = []
        for key, before in self.seen.items():
            got = self.store.entry(key, data=False, touch=False)
            now = None if got is None else got.version
            if now != before:
                out.append((key, now))
                self.seen[key] = now
        return out


class _Tail:
    """A log reader for a LISTEN, used from pool threads one at a time."""

    def __init__(self, reader: Any) -> None:
        self._reader = reader
        self._lock = threading.Lock()

    def batch(self, size: int) -> list[list[Any]]:
        """Up to ``size`` records, those there now: a LISTEN waits for more on the event loop
        (``NativeConnection._log_events``), holding no thread."""
        with self._lock:
            rec = self._reader.next(timeout=0)
            if rec is None:
                return []
            out = [[rec.lsn, rec.timestamp, rec.payload]]
            while len(out) < size:
                rec = self._reader.next(timeout=0)
                if rec is None:
                    break
                out.append([rec.lsn, rec.timestamp, rec.payload])
            return out

    def close(self) -> None:
        with self._lock:
            self._reader.close()


def _position(value: object) -> int | Literal["earliest", "latest"]:
    if value == "earliest" or value == "latest":
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"field 'start' must be an lsn, 'earliest' or 'latest', not {value!r}")
    return value


def raw_id(raw: bytes) -> int:
    """The request id of a header that failed its checks (0 if it is too short to have one)."""
    return int.from_bytes(raw[8:12], "big") if len(raw) >= 12 else 0


def hello_body(server: Server) -> dict[str, Any]:
    from .. import __version__

    limits = server.limits
    return {
        "server": "logspool", "version": __version__, "protocol": p.VERSION,
        "frame_size_max": limits.frame_size_max, "in_flight_max": limits.in_flight_max,
    }  # fmt: skip
