"""The client of the daemon: ``logspool.client.connect("127.0.0.1:7070", token=...)``.

``c.kv(name)``, ``c.jobs(name)`` and ``c.log(name)`` have the methods of the embedded objects
(``set``/``get``/``add``...; ``put``/``take``/``ack``...; ``append``/``read``...). Replies are matched
to requests by id, so any number of threads may share one client and their requests are in
flight at once (pipelining); ``connect_async`` gives the same objects with coroutine methods.

A call whose connection broke raises ``RemoteError`` (kind ``ConnectionLost``): it may or may not
have been applied, as with any network call. The next call reconnects (``reconnect=True``). Errors
the server raised come back as the same classes (``KeyLockedError``, ``LeaseExpiredError``...).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import queue
import socket
import ssl
import threading
from collections.abc import Awaitable, Iterator
from typing import Any

from . import _wire as p
from . import errors
from ._remote import (
    AsyncRemoteJournal,
    AsyncRemoteKV,
    AsyncRemoteLog,
    Post,
    Record,
    RemoteJournal,
    RemoteKV,
    RemoteLog,
)

TIMEOUT_S_DEFAULT = 30.0
_BUILTIN_ERRORS: dict[str, type[Exception]] = {"ValueError": ValueError, "TypeError": TypeError,
                                                "KeyError": KeyError}  # fmt: skip


def parse_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"address must be HOST:PORT, not {address!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def error_from(address: str, body: dict[str, Any]) -> Exception:
    """The exception an error reply stands for."""
    kind = str(body.get("error", "Error"))
    message = str(body.get("message", ""))
    args = body.get("args") or []
    cls = getattr(errors, kind, None)
    if isinstance(cls, type) and issubclass(cls, errors.LogspoolError) and args:
        try:
            return cls(*args)
        except TypeError:
            pass
    if kind in _BUILTIN_ERRORS:
        return _BUILTIN_ERRORS[kind](message)
    return errors.RemoteError(address, kind, message)


def _lost(address: str, why: object) -> errors.RemoteError:
    return errors.RemoteError(address, "ConnectionLost", str(why))


def _unreachable(address: str, err: OSError) -> OSError:
    """The same kind of error (a caller may retry on it), saying which daemon was not reached:
    a bare "[Errno 111] Connection refused" names nothing (issue 29)."""
    why = err.strerror or str(err) or type(err).__name__
    return type(err)(err.errno, f"cannot reach the daemon at {address}: {why}")


class _Named:
    """What both clients share: their settings, and ``kv(name)``, ``jobs(name)``, ``log(name)``."""

    def __init__(self, address: str, *, token: str | None = None, timeout: float = TIMEOUT_S_DEFAULT,
                 ssl_context: ssl.SSLContext | None = None, reconnect: bool = True) -> None:  # fmt: skip
        self.address = address
        self._host, self._port = parse_address(address)
        self._token = token
        self.timeout = timeout
        self._ssl = ssl_context
        self._reconnect = reconnect
        self._closed = False
        self._ids = itertools.count(1)

    def kv(self: Any, name: str) -> RemoteKV:
        """The key-value store ``name`` on the daemon."""
        return RemoteKV(self, name)

    def jobs(self: Any, name: str) -> RemoteJournal:
        """The job journal ``name`` on the daemon."""
        return RemoteJournal(self, name)

    def log(self: Any, name: str) -> RemoteLog:
        """The log ``name`` on the daemon."""
        return RemoteLog(self, name)


# --- the sync client --------------------------------------------------------------------------------
class Subscription:
    """Events of a LISTEN (``Client.subscribe`` and ``Client.watch``): iterate, or ``next(timeout)``."""

    def __init__(self, client: Client, request_id: int) -> None:
        self._client = client
        self.request_id = request_id
        self.events: queue.Queue[tuple[int, dict[str, Any]] | None] = queue.Queue()
        self.ended = False

    def next(self, timeout: float | None = None) -> dict[str, Any] | None:
        """The next event's body, or None if none came in ``timeout`` seconds (or it ended)."""
        if self.ended:
            return None
        try:
            item = self.events.get(timeout=timeout)
        except queue.Empty:
            return None
        if item is None:
            self.ended = True
            raise _lost(self._client.address, "the connection closed")
        flags, body = item
        if flags & p.FLAG_END:
            self.ended = True
            if flags & p.FLAG_ERROR:
                raise error_from(self._client.address, body)
            return None
        return body

    def __iter__(self) -> Iterator[dict[str, Any]]:
        while not self.ended:
            event = self.next()
            if event is not None:
                yield event

    def records(self, timeout: float | None = None) -> list[Record]:
        """The records of the next event of a log subscription ([] if none came in time)."""
        event = self.next(timeout)
        return [Record(r) for r in event.get("records", [])] if event else []

    def close(self) -> None:
        if not self.ended:
            self._client._request(p.UNLISTEN, {"id": self.request_id}, lambda b: None)
            self.ended = True


def _read_exact(stream: Any, size: int) -> bytes:
    data = stream.read(size)
    if len(data) < size:
        raise ConnectionError("the server closed the connection")
    return bytes(data)


class Client(_Named):
    """A connection to a logspool daemon, shared by threads. Use ``connect``."""

    def __init__(self, address: str, **options: Any) -> None:
        super().__init__(address, **options)
        self._lock = threading.Lock()  # sending, connecting
        self._pending: dict[int, concurrent.futures.Future[tuple[int, dict[str, Any]]]] = {}
        self._subs: dict[int, Subscription] = {}
        self._sock: socket.socket | None = None
        self._refused: Exception | None = None
        self.hello: dict[str, Any] = {}
        self._connect()

    def _connect(self) -> None:
        try:
            sock = socket.create_connection((self._host, self._port), timeout=self.timeout)
        except OSError as err:
            raise _unreachable(self.address, err) from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._ssl is not None:
            sock = self._ssl.wrap_socket(sock, server_hostname=self._host)
            # An SSL object must not read in one thread while another writes: right after the
            # handshake a TLS 1.3 server sends its session tickets, and a reader thread taking
            # them in while this thread wrote HELLO hung the connection now and then (test_tls).
            # So HELLO's exchange is made here, before the reader thread starts.
            stream = sock.makefile("rb")
            try:
                hello_id = next(self._ids) & 0xFFFFFFFF
                sock.sendall(p.encode_frame(p.REQUEST, p.HELLO, hello_id, {"token": self._token}))
                head = p.decode_header(_read_exact(stream, p.HEADER_SIZE), 1 << 31)
                body = p.decode_body(_read_exact(stream, head.size))
            except (OSError, ValueError, p.ProtocolError) as err:
                with_close(sock)
                raise _lost(self.address, err) from err
            finally:
                stream.close()
            if head.flags & p.FLAG_ERROR:
                with_close(sock)
                raise error_from(self.address, body)
            self.hello = body
        sock.settimeout(None)
        self._sock = sock
        threading.Thread(target=self._read_loop, args=(sock,), daemon=True, name="logspool-client").start()
        if self._ssl is None:
            self.hello = self._request(p.HELLO, {"token": self._token}, lambda b: b)

    def _read_loop(self, sock: socket.socket) -> None:
        stream = sock.makefile("rb")
        why: object = "the server closed the connection"
        try:
            while True:
                raw = stream.read(p.HEADER_SIZE)
                if len(raw) < p.HEADER_SIZE:
                    break
                head = p.decode_header(raw, 1 << 31)
                body = p.decode_body(stream.read(head.size))
                if head.kind == p.EVENT:
                    sub = self._subs.get(head.request_id)
                    if sub is not None:
                        sub.events.put((head.flags, body))
                        if head.flags & p.FLAG_END:
                            self._subs.pop(head.request_id, None)
                    continue
                fut = self._pending.pop(head.request_id, None)
                if fut is not None:
                    fut.set_result((head.flags, body))
                elif head.flags & p.FLAG_ERROR:  # a refusal not tied to a request (id 0)
                    why = error_from(self.address, body)
                    self._refused = why
                    break
        except (OSError, ValueError, p.ProtocolError) as err:
            why = err
        finally:
            with self._lock:
                if self._sock is sock:
                    self._sock = None
                pending, self._pending = self._pending, {}
                subs, self._subs = self._subs, {}
            for fut in pending.values():
                fut.set_exception(why if isinstance(why, Exception) and not isinstance(why, OSError)
                                  else _lost(self.address, why))  # fmt: skip
            for sub in subs.values():
                sub.events.put(None)
            with_close(sock)

    def _send(self, command: int, body: dict[str, Any]) -> tuple[int, concurrent.futures.Future[Any]]:
        fut: concurrent.futures.Future[tuple[int, dict[str, Any]]] = concurrent.futures.Future()
        with self._lock:
            if self._closed:
                raise errors.ClosedError(self.address, "client is closed")
            request_id = next(self._ids) & 0xFFFFFFFF
            frame = p.encode_frame(p.REQUEST, command, request_id, body)
            if self._sock is None:
                if self._refused is not None:  # the server refused the connection (before a reply)
                    refused, self._refused = self._refused, None
                    raise refused
                if not self._reconnect:
                    raise _lost(self.address, "not connected")
                self._lock.release()
                try:
                    self._connect()
                finally:
                    self._lock.acquire()
                if self._sock is None:
                    raise _lost(self.address, "reconnection failed")
            self._pending[request_id] = fut
            try:
                self._sock.sendall(frame)
            except OSError as err:
                self._pending.pop(request_id, None)
                raise _lost(self.address, err) from err
        return request_id, fut

    def _request(self, command: int, body: dict[str, Any], post: Post) -> Any:
        _, fut = self._send(command, body)
        return self._result(fut, post)

    def _result(self, fut: concurrent.futures.Future[Any], post: Post) -> Any:
        try:
            flags, reply = fut.result(timeout=self.timeout)
        except concurrent.futures.TimeoutError:
            raise _lost(self.address, f"no reply in {self.timeout} s") from None
        if flags & p.FLAG_ERROR:
            raise error_from(self.address, reply)
        return post(reply)

    def pipeline(self, calls: list[tuple[int, dict[str, Any]]]) -> list[Any]:
        """Send every ``(command, body)`` before reading any reply; the replies' bodies (or the
        exceptions) in order."""
        futs = [self._send(command, body)[1] for command, body in calls]
        out: list[Any] = []
        for fut in futs:
            try:
                out.append(self._result(fut, lambda b: b))
            except Exception as err:
                out.append(err)
        return out

    def _listen(self, body: dict[str, Any]) -> Subscription:
        fut: concurrent.futures.Future[Any]
        with self._lock:  # registered before the first event can arrive
            request_id = next(self._ids) & 0xFFFFFFFF
            sub = Subscription(self, request_id)
            self._subs[request_id] = sub
        try:
            fut = concurrent.futures.Future()
            with self._lock:
                if self._sock is None:
                    raise _lost(self.address, "not connected")
                self._pending[request_id] = fut
                self._sock.sendall(p.encode_frame(p.REQUEST, p.LISTEN, request_id, body))
            self._result(fut, lambda b: b)
        except BaseException:
            self._subs.pop(request_id, None)
            raise
        return sub

    def subscribe(self, log: str, start: int | str = "latest", *, batch: int = 1000) -> Subscription:
        """Tail the log ``log`` from ``start``: events ``{"records": [[lsn, ts, payload]...]}``."""
        return self._listen({"kind": "log", "name": log, "start": start, "batch": batch})

    def watch(self, store: str, keys: list[str]) -> Subscription:
        """Be told when a key of the key-value store ``store`` changes: ``{"key", "version"}``."""
        return self._listen({"kind": "kv", "name": store, "keys": list(keys)})

    def ping(self) -> float:
        return float(self._request(p.PING, {}, lambda b: b["time"]))

    def stats(self) -> dict[str, Any]:
        return dict(self._request(p.STATS, {}, lambda b: b))

    def close(self) -> None:
        with self._lock:
            self._closed = True
            sock, self._sock = self._sock, None
        if sock is not None:
            with_close(sock)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def with_close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


def connect(address: str, **options: Any) -> Client:
    """Connect to a daemon at ``HOST:PORT``. Options: ``token``, ``timeout`` (seconds),
    ``ssl_context``, ``reconnect``."""
    return Client(address, **options)


# --- the asyncio client -------------------------------------------------------------------------
class AsyncClient(_Named):
    """The asyncio client: the same objects, with coroutine methods. Use ``connect_async``."""

    def __init__(self, address: str, **options: Any) -> None:
        super().__init__(address, **options)
        self._pending: dict[int, asyncio.Future[tuple[int, dict[str, Any]]]] = {}
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self.hello: dict[str, Any] = {}

    async def _open(self) -> AsyncClient:
        try:
            reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(self._host, self._port, ssl=self._ssl), self.timeout
            )
        except OSError as err:
            raise _unreachable(self.address, err) from None
        self._reader_task = asyncio.create_task(self._read_loop(reader))
        self.hello = await self._request(p.HELLO, {"token": self._token}, lambda b: b)
        return self

    async def _read_loop(self, reader: asyncio.StreamReader) -> None:
        why: Exception = _lost(self.address, "the server closed the connection")
        try:
            while True:
                head = p.decode_header(await reader.readexactly(p.HEADER_SIZE), 1 << 31)
                body = p.decode_body(await reader.readexactly(head.size))
                fut = self._pending.pop(head.request_id, None)
                if fut is not None and not fut.done():
                    fut.set_result((head.flags, body))
                elif head.kind == p.REPLY and head.flags & p.FLAG_ERROR:
                    why = error_from(self.address, body)
                    break
        except (OSError, asyncio.IncompleteReadError, p.ProtocolError) as err:
            why = _lost(self.address, err)
        finally:
            pending, self._pending = self._pending, {}
            for fut in pending.values():
                if not fut.done():
                    fut.set_exception(why)

    def _request(self, command: int, body: dict[str, Any], post: Post) -> Awaitable[Any]:
        async def run() -> Any:
            if self._writer is None or self._reader_task is None or self._reader_task.done():
                if self._closed or not self._reconnect or command == p.HELLO:
                    raise _lost(self.address, "not connected")
                try:
                    await self._open()  # the connection broke earlier: a new one for this call
                except OSError as err:
                    raise _lost(self.address, err) from err
            assert self._writer is not None
            request_id = next(self._ids) & 0xFFFFFFFF
            fut: asyncio.Future[tuple[int, dict[str, Any]]] = asyncio.get_running_loop().create_future()
            self._pending[request_id] = fut
            self._writer.write(p.encode_frame(p.REQUEST, command, request_id, body))
            try:
                flags, reply = await asyncio.wait_for(fut, self.timeout)
            except TimeoutError:
                self._pending.pop(request_id, None)
                raise _lost(self.address, f"no reply in {self.timeout} s") from None
            if flags & p.FLAG_ERROR:
                raise error_from(self.address, reply)
            return post(reply)

        return run()

    def kv(self, name: str) -> AsyncRemoteKV:
        """The key-value store ``name`` on the daemon, with coroutine methods."""
        return AsyncRemoteKV(self, name)

    def jobs(self, name: str) -> AsyncRemoteJournal:
        """The job journal ``name`` on the daemon, with coroutine methods."""
        return AsyncRemoteJournal(self, name)

    def log(self, name: str) -> AsyncRemoteLog:
        """The log ``name`` on the daemon, with coroutine methods."""
        return AsyncRemoteLog(self, name)

    async def ping(self) -> float:
        return float(await self._request(p.PING, {}, lambda b: b["time"]))

    async def stats(self) -> dict[str, Any]:
        return dict(await self._request(p.STATS, {}, lambda b: b))

    async def close(self) -> None:
        self._closed = True
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(OSError):
                await self._writer.wait_closed()
        if self._reader_task is not None:
            await asyncio.gather(self._reader_task, return_exceptions=True)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def connect_async(address: str, **options: Any) -> AsyncClient:
    """Connect with asyncio: ``c = await connect_async("127.0.0.1:7070")``; ``await c.kv("k").get(key)``."""
    return await AsyncClient(address, **options)._open()


__all__ = ["AsyncClient", "AsyncRemoteJournal", "AsyncRemoteKV", "AsyncRemoteLog", "Client", "Record",
           "RemoteJournal", "RemoteKV", "RemoteLog", "Subscription", "connect", "connect_async"]  # fmt: skip
