"""The daemon's stores as the client sees them: ``RemoteKV``, ``RemoteJournal``, ``RemoteLog``
and their async forms (``logspool.client`` exports them; ``Client.kv(name)`` etc. make them).

Each has the embedded object's calls, parameter for parameter (tests/server/test_client_parity.py
holds them to it), and makes one request per call through the client that made it: ``_call``
returns the reply, or through the async client an awaitable of it, which the async forms await.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar, cast

from . import _wire as p
from . import errors, limits
from .jobs import Idle, Job, JobStats
from .jobs._types import Merge
from .kv import KVStats, Page, Value
from .kv._ops import Value as KVValue

if TYPE_CHECKING:
    from .client import AsyncClient, Client

Post = Callable[[dict[str, Any]], Any]
_T = TypeVar("_T")


class _Remote:
    def __init__(self, client: Client | AsyncClient, name: str) -> None:
        self._client = client
        self.name = name

    def _call(self, command: int, post: Callable[[dict[str, Any]], _T], **fields: Any) -> _T:
        """One request; the reply through ``post``. (Through the async client, an awaitable of
        it: the async objects await it, typed by the sync method they call.)"""
        body = {"name": self.name, **{k: v for k, v in fields.items() if v is not None}}
        return cast(_T, self._client._request(command, body, post))


def _flag(field: str) -> Callable[[dict[str, Any]], bool]:
    return lambda b: bool(b[field])


def _integer(field: str) -> Callable[[dict[str, Any]], int]:
    return lambda b: int(b[field])


def _number(field: str) -> Callable[[dict[str, Any]], int | float]:
    return lambda b: b[field] if isinstance(b[field], int | float) else float(b[field])


_ok = _flag("ok")


def _value(body: dict[str, Any]) -> Value | None:
    found = body.get("value")
    return None if found is None else Value(**found)


def _page(body: dict[str, Any]) -> Page:
    return Page([Value(**v) for v in body["items"]], body["cursor"])


def _job(found: dict[str, Any]) -> Job:
    return Job(**found)


def _found(default: object) -> Post:
    """The post of a kv.GET with ``value_only`` for ``get``: the value, or ``default`` if the key
    holds none. A daemon that knows ``value_only`` answers ``{found, value}``; one before it
    ignores the field and answers the whole VALUE map (docs/PROTOCOL.md, kv.GET)."""

    def post(b: dict[str, Any]) -> Any:
        if "found" in b:
            return b.get("value") if b["found"] else default
        return default if b.get("value") is None else b["value"]["value"]

    return post


def _must(path: str, key: str) -> Post:
    """The post of a kv.GET with ``value_only`` for ``store[key]``: the value, or
    KeyNotFoundError (either reply, as ``_found``)."""

    def post(b: dict[str, Any]) -> Any:
        if "found" in b:
            if not b["found"]:
                raise errors.KeyNotFoundError(path, key)
            return b.get("value")
        if b.get("value") is None:
            raise errors.KeyNotFoundError(path, key)
        return b["value"]["value"]

    return post


def _present(b: dict[str, Any]) -> bool:
    """The post of a probe (kv.GET, ``value_only``, no data, no touch): whether the key holds a
    value (either reply, as ``_found``)."""
    return bool(b["found"]) if "found" in b else b.get("value") is not None


def _when(t: datetime | float | None) -> float | None:
    """A time as the wire carries it: seconds since the epoch (a naive datetime is UTC, as the
    embedded objects read it)."""
    if isinstance(t, datetime):
        return (t if t.tzinfo is not None else t.replace(tzinfo=UTC)).timestamp()
    return t


def _ref(job: Job) -> list[int]:
    if not isinstance(job, Job):
        raise TypeError(f"expected a logspool.jobs.Job, not {type(job).__name__}")
    return [job.id, job.token]


def _taken(b: dict[str, Any]) -> Job | Idle:
    """The post of a jobs.TAKE."""
    return _job(b["job"]) if b.get("job") else Idle(b.get("next_at"))


def _idle_or_job(b: dict[str, Any]) -> Job | Idle:
    """The post of a take: the job, or Idle with when to look again."""
    found = b.get("jobs")
    if found:
        return _job(found[0])
    return Idle(b.get("next_at"))


# The remote objects have the embedded objects' signatures, parameter for parameter
# (tests/server/test_client_parity.py holds them to it), and the async client's have the same as
# coroutines. Each method makes one request: ``_call`` returns the reply, or an awaitable of it.
class RemoteKV(_Remote):
    """A key-value store on the server (see ``logspool.kv.Store``): the same calls, one round
    trip each. ``get(key, default)`` gives the value and ``entry(key)`` the value with its
    metadata, as the Store's do. Of the Store's MutableMapping, the calls a round trip each
    suits: ``k[key]``, ``k[key] = v``, ``del k[key]``, ``key in k``, and iteration (``iter(k)``,
    ``keys()``, ``items()``, ``values()``) in key order, a ``kv.RANGE`` page at a time (1,000
    keys, or 4 MiB of keys and values). No ``len``: it would read every key over the network.
    The async client's store (``AsyncRemoteKV``) has the coroutine forms.
    """

    ITER_PAGE_COUNT = 1000
    ITER_PAGE_BYTES_MAX = 4 * 1024 * 1024

    @property
    def _path(self) -> str:
        """How errors raised here name the store: the daemon's address and the store's name."""
        return f"{self._client.address}/{self.name}"

    def set(self, key: str, value: KVValue, *, overwrite: bool = True, ttl: float | None = None,
            expire_at: datetime | float | None = None, touch: float | None = None, persist: bool = True,
            ts: datetime | float | None = None, owner: str | None = None) -> bool:  # fmt: skip
        """``Store.set``: store ``value`` under ``key``; False if ``overwrite=False`` found one."""
        # (overwrite and persist are sent only when not their default, True: a plain set is the
        # daemon's most frequent write, and three fields cost less to send and to read)
        return self._call(p.KV_SET, _ok, key=key, value=value, ttl=ttl, expire_at=_when(expire_at),
                          touch=touch, ts=_when(ts), owner=owner,
                          overwrite=None if overwrite is True else overwrite,
                          persist=None if persist is True else persist)  # fmt: skip

    def get(self, key: str, default: Any = None) -> Any:
        """``Store.get``: ``key``'s value, or ``default`` if it holds none; a read, so it
        touches."""
        return self._call(p.KV_GET, _found(default), key=key, value_only=True)

    def entry(self, key: str, *, data: bool = True, touch: bool = True) -> Value | None:
        """``Store.entry``: ``key``'s value with its metadata, a ``kv.Value``, or None."""
        return self._call(p.KV_GET, _value, key=key, data=data, touch=touch)

    def __getitem__(self, key: str) -> Any:
        return self._call(p.KV_GET, _must(self._path, key), key=key, value_only=True)

    def __setitem__(self, key: str, value: Any) -> None:
        self.set(key, value)

    def __delitem__(self, key: str) -> None:
        if not self.delete(key):
            raise errors.KeyNotFoundError(self._path, key)

    def __contains__(self, key: object) -> bool:
        """A probe (no value bytes, no touch). False for anything that cannot be a key."""
        if not isinstance(key, str) or not key:
            return False
        return bool(self._call(p.KV_GET, _present, key=key, data=False, touch=False, value_only=True))

    def __iter__(self) -> Iterator[str]:
        return (v.key for v in self._walk(data=False))

    def keys(self) -> Iterator[str]:
        return iter(self)

    def items(self) -> Iterator[tuple[str, Any]]:
        return ((v.key, v.value) for v in self._walk(data=True))

    def values(self) -> Iterator[Any]:
        return (v.value for v in self._walk(data=True))

    def _walk(self, *, data: bool) -> Iterator[Value]:
        cursor = None
        for _ in range(1 << 40):  # bounded: each turn reads a page or ends
            page = self.range(limit=self.ITER_PAGE_COUNT, cursor=cursor, data=data,
                              bytes_max=self.ITER_PAGE_BYTES_MAX)  # fmt: skip
            yield from page
            if page.cursor is None:
                return
            cursor = page.cursor
        raise AssertionError("unreachable")  # pragma: no cover

    def delete(self, key: str, *, ts: datetime | float | None = None, owner: str | None = None) -> bool:
        """``Store.delete``: remove ``key``; False if it held nothing."""
        return self._call(p.KV_DELETE, _ok, key=key, ts=_when(ts), owner=owner)

    def add(self, key: str, amount: int | float = 1, *, owner: str | None = None) -> int | float:
        """``Store.add``: add ``amount`` to the number under ``key``; the new value."""
        return self._call(p.KV_ADD, _number("value"), key=key, amount=amount, owner=owner)

    def flip(self, key: str, *, owner: str | None = None) -> bool:
        """``Store.flip``: negate the boolean under ``key``; the new value."""
        return self._call(p.KV_NOT, _flag("value"), key=key, owner=owner)

    def truncate(self, key: str, size: int, *, owner: str | None = None) -> int:
        """``Store.truncate``: cut the bytes or string under ``key`` to ``size``; the new size."""
        return self._call(p.KV_TRUNCATE, _integer("size"), key=key, size=size, owner=owner)

    def lock(self, key: str, owner: str, ttl: float = limits.JOB_LEASE_S_DEFAULT) -> float:
        """``Store.lock``: lock ``key`` for ``owner`` for ``ttl`` seconds; when the lock ends."""
        return self._call(p.KV_LOCK, _number("until"), key=key, owner=owner, ttl=ttl)

    def unlock(self, key: str, owner: str | None = None, *, force: bool = False) -> bool:
        """``Store.unlock``: release ``owner``'s lock on ``key`` (any lock with ``force``)."""
        return self._call(p.KV_UNLOCK, _ok, key=key, owner=owner, force=force)

    def rename(self, key: str, new: str, *, overwrite: bool = False, ts: datetime | float | None = None,
               owner: str | None = None) -> bool:  # fmt: skip
        """``Store.rename``: move ``key``'s value to ``new`` in one op."""
        return self._call(p.KV_RENAME, _ok, key=key, new=new, overwrite=overwrite, ts=_when(ts),
                          owner=owner)  # fmt: skip

    def range(self, start: str = "", end: str | None = None, *, limit: int = 100, cursor: str | None = None,
              data: bool = True, bytes_max: int | None = None) -> Page:  # fmt: skip
        """``Store.range``: a page of the keys from ``start`` to ``end``, in key order."""
        return self._call(p.KV_RANGE, _page, start=start, end=end, limit=limit, cursor=cursor, data=data,
                          bytes_max=bytes_max)  # fmt: skip

    def match(self, pattern: str, *, limit: int = 100, timeout: float = limits.KV_MATCH_TIMEOUT_S_DEFAULT,
              cursor: str | None = None, data: bool = True,
              bytes_max: int | None = None) -> Page:  # fmt: skip
        """``Store.match``: a page of the keys ``pattern`` matches, in key order."""
        return self._call(p.KV_MATCH, _page, pattern=pattern, limit=limit, timeout=timeout, cursor=cursor,
                          data=data, bytes_max=bytes_max)  # fmt: skip

    def stats(self) -> KVStats:
        """``Store.stats``: what the store holds, and its counters."""
        return self._call(p.KV_STATS, lambda b: KVStats(**b))


class AsyncRemoteKV(RemoteKV):
    """The async client's key-value store: ``await k.get(key)``, ``await k.entry(key)`` and the
    rest as coroutines, and ``async for key in k``, ``k.keys()``, ``k.items()``, ``k.values()``
    as async iterators over ``kv.RANGE`` pages. ``k[key]``, ``k[key] = v``, ``del k[key]`` and
    ``key in k`` cannot wait for a reply: they raise TypeError naming the coroutine to use."""

    # (each coroutine awaits the request RemoteKV's method makes through the async client)
    async def set(self, key: str, value: KVValue, *, overwrite: bool = True, ttl: float | None = None,  # type: ignore[override]
                  expire_at: datetime | float | None = None, touch: float | None = None, persist: bool = True,
                  ts: datetime | float | None = None, owner: str | None = None) -> bool:  # fmt: skip
        return await _awaited(super().set(key, value, overwrite=overwrite, ttl=ttl, expire_at=expire_at,
                                          touch=touch, persist=persist, ts=ts, owner=owner))  # fmt: skip

    async def get(self, key: str, default: Any = None) -> Any:
        return await _awaited(super().get(key, default))

    async def entry(self, key: str, *, data: bool = True, touch: bool = True) -> Value | None:  # type: ignore[override]
        return await _awaited(super().entry(key, data=data, touch=touch))

    async def delete(self, key: str, *, ts: datetime | float | None = None, owner: str | None = None) -> bool:  # type: ignore[override]
        return await _awaited(super().delete(key, ts=ts, owner=owner))

    async def add(self, key: str, amount: int | float = 1, *, owner: str | None = None) -> int | float:  # type: ignore[override]
        return await _awaited(super().add(key, amount, owner=owner))

    async def flip(self, key: str, *, owner: str | None = None) -> bool:  # type: ignore[override]
        return await _awaited(super().flip(key, owner=owner))

    async def truncate(self, key: str, size: int, *, owner: str | None = None) -> int:  # type: ignore[override]
        return await _awaited(super().truncate(key, size, owner=owner))

    async def lock(self, key: str, owner: str, ttl: float = limits.JOB_LEASE_S_DEFAULT) -> float:  # type: ignore[override]
        return await _awaited(super().lock(key, owner, ttl))

    async def unlock(self, key: str, owner: str | None = None, *, force: bool = False) -> bool:  # type: ignore[override]
        return await _awaited(super().unlock(key, owner, force=force))

    async def rename(self, key: str, new: str, *, overwrite: bool = False,  # type: ignore[override]
                     ts: datetime | float | None = None, owner: str | None = None) -> bool:  # fmt: skip
        return await _awaited(super().rename(key, new, overwrite=overwrite, ts=ts, owner=owner))

    async def range(self, start: str = "", end: str | None = None, *, limit: int = 100,  # type: ignore[override]
                    cursor: str | None = None, data: bool = True,
                    bytes_max: int | None = None) -> Page:  # fmt: skip
        return await _awaited(
            super().range(start, end, limit=limit, cursor=cursor, data=data, bytes_max=bytes_max)
        )

    async def match(self, pattern: str, *, limit: int = 100,  # type: ignore[override]
                    timeout: float = limits.KV_MATCH_TIMEOUT_S_DEFAULT, cursor: str | None = None,
                    data: bool = True, bytes_max: int | None = None) -> Page:  # fmt: skip
        return await _awaited(super().match(pattern, limit=limit, timeout=timeout, cursor=cursor, data=data,
                                            bytes_max=bytes_max))  # fmt: skip

    async def stats(self) -> KVStats:  # type: ignore[override]
        return await _awaited(super().stats())

    def __getitem__(self, key: str) -> Any:
        raise TypeError("an async client's store has no k[key]: use await k.get(key) or k.entry(key)")

    def __setitem__(self, key: str, value: Any) -> None:
        raise TypeError("an async client's store has no k[key] = value: use await k.set(key, value)")

    def __delitem__(self, key: str) -> None:
        raise TypeError("an async client's store has no del k[key]: use await k.delete(key)")

    def __contains__(self, key: object) -> bool:
        raise TypeError("an async client's store has no 'key in k': use await k.entry(key, data=False)")

    def __iter__(self) -> Iterator[str]:
        raise TypeError("an async client's store iterates with 'async for'")

    def __aiter__(self) -> AsyncIterator[str]:
        return self.keys()

    async def keys(self) -> AsyncIterator[str]:  # type: ignore[override]
        async for v in self._walk_async(data=False):
            yield v.key

    async def items(self) -> AsyncIterator[tuple[str, Any]]:  # type: ignore[override]
        async for v in self._walk_async(data=True):
            yield v.key, v.value

    async def values(self) -> AsyncIterator[Any]:  # type: ignore[override]
        async for v in self._walk_async(data=True):
            yield v.value

    async def _walk_async(self, *, data: bool) -> AsyncIterator[Value]:
        cursor = None
        for _ in range(1 << 40):  # bounded: each turn reads a page or ends
            page = await self.range(limit=self.ITER_PAGE_COUNT, cursor=cursor, data=data,
                                    bytes_max=self.ITER_PAGE_BYTES_MAX)  # fmt: skip
            for v in page:
                yield v
            if page.cursor is None:
                return
            cursor = page.cursor
        raise AssertionError("unreachable")  # pragma: no cover


class RemoteJournal(_Remote):
    """A job journal on the server (see ``logspool.jobs.Journal``): the same calls, one round
    trip each, durable on return as the daemon's journal is. Not remote: ``work`` (a loop over
    ``take_many`` and ``ack``; write it over these), and the managing calls (``jobs``, ``job``,
    ``dead_letters``, ``retry``, ``purge``, ``configure``, ``snapshot``: ``logspool jobs`` on the daemon's
    machine)."""

    def put(self, key: str, payload: bytes = b"", *, priority: int | None = None,
            not_before: datetime | float | None = None, delay: float | None = None, ttl: float | None = None,
            domain: str | None = None, priority_merge: Merge = "replace",
            not_before_merge: Merge = "replace") -> int:  # fmt: skip
        """``Journal.put``: record that ``key`` needs work; the put's id."""
        # (a daemon of a release before journal format 4 answers "lsn" only: a put's id was its lsn)
        return self._call(p.JOB_PUT, lambda b: int(b.get("id", b["lsn"])), key=key, payload=payload,
                          priority=priority, not_before=_when(not_before), delay=delay, ttl=ttl,
                          domain=domain, priority_merge=priority_merge,
                          not_before_merge=not_before_merge)  # fmt: skip

    def put_many(self, items: Iterable[tuple[str, bytes]], *, priority: int | None = None,
                 not_before: datetime | float | None = None, delay: float | None = None,
                 ttl: float | None = None, domain: str | None = None, priority_merge: Merge = "replace",
                 not_before_merge: Merge = "replace") -> list[int]:  # fmt: skip
        """``Journal.put_many``: ``put`` for each ``(key, payload)``, all or none, one fsync;
        the puts' ids."""
        pairs = [[key, payload] for key, payload in items]
        return self._call(p.JOB_PUT_MANY, lambda b: list(b["ids"]), items=pairs, priority=priority,
                          not_before=_when(not_before), delay=delay, ttl=ttl, domain=domain,
                          priority_merge=priority_merge, not_before_merge=not_before_merge)  # fmt: skip

    def take(self, lease: float = limits.JOB_LEASE_S_DEFAULT, *, wait: float = 0.0,
             ack: Job | None = None) -> Job | Idle:  # fmt: skip
        """``Journal.take``: the next ready job, leased for ``lease`` seconds, or ``Idle``;
        ``ack``: a job of the caller's acked first, in the same durable step."""
        if ack is None:
            return self._call(p.JOB_TAKE, _taken, lease=lease, wait=wait)
        return self._call(p.JOB_TAKE_MANY, _idle_or_job, count=1, lease=lease, wait=wait, ack=[_ref(ack)])

    def take_many(self, count: int, lease: float = limits.JOB_LEASE_S_DEFAULT, *, wait: float = 0.0,
                  ack: Iterable[Job] = ()) -> list[Job]:  # fmt: skip
        """``Journal.take_many``: up to ``count`` ready jobs, each leased; ``ack``: jobs acked
        first, in the same durable step."""
        if isinstance(ack, Job):
            raise TypeError("ack must be a list of jobs (take(ack=job) acks one)")
        return self._call(p.JOB_TAKE_MANY, lambda b: [_job(j) for j in b["jobs"]], count=count, lease=lease,
                          wait=wait, ack=[_ref(job) for job in ack])  # fmt: skip

    def ack(self, job: Job) -> None:
        """``Journal.ack``: mark ``job`` done (LeaseExpiredError if the lease was lost)."""
        return self._call(p.JOB_ACK, lambda b: None, id=job.id, token=job.token)

    def ack_many(self, jobs: Iterable[Job]) -> None:
        """``Journal.ack_many``: ack every job, all or none."""
        return self._call(p.JOB_ACK_MANY, lambda b: None, jobs=[_ref(job) for job in jobs])

    def release(self, job: Job) -> None:
        """``Journal.release``: give a leased job back unstarted, at its place."""
        return self.release_many([job])

    def release_many(self, jobs: Iterable[Job]) -> None:
        """``Journal.release_many``: ``release`` for each job, all or none."""
        return self._call(p.JOB_RELEASE_MANY, lambda b: None, jobs=[_ref(job) for job in jobs])

    def nack(self, job: Job, *, delay: float = 0.0, error: str = "") -> None:
        """``Journal.nack``: the job failed; deliver it again after ``delay`` seconds."""
        return self._call(p.JOB_NACK, lambda b: None, id=job.id, token=job.token, delay=delay, error=error)

    def extend(self, job: Job, lease: float = limits.JOB_LEASE_S_DEFAULT) -> Job:
        """``Journal.extend``: the lease runs ``lease`` seconds from now; the job, updated."""
        return self._call(p.JOB_EXTEND, lambda b: _job(b["job"]), id=job.id, token=job.token, lease=lease)

    def get(self, key: str) -> list[Job]:
        """``Journal.get``: the live jobs of ``key`` (leased, then pending)."""
        return self._call(p.JOB_GET, lambda b: [_job(j) for j in b["jobs"]], key=key)

    def stats(self) -> JobStats:
        """``Journal.stats``: what the journal holds, and its counters."""
        return self._call(p.JOB_STATS, lambda b: JobStats(**b))

    def cancel(self, key: str) -> bool:
        """``Journal.cancel``: remove the pending job of ``key``; True if there was one."""
        return self._call(p.JOB_CANCEL, lambda b: bool(b["ok"]), key=key)


class AsyncRemoteJournal(RemoteJournal):
    """The async client's job journal: ``RemoteJournal``'s calls as coroutines."""

    async def put(self, key: str, payload: bytes = b"", *, priority: int | None = None,  # type: ignore[override]
                  not_before: datetime | float | None = None, delay: float | None = None,
                  ttl: float | None = None, domain: str | None = None, priority_merge: Merge = "replace",
                  not_before_merge: Merge = "replace") -> int:  # fmt: skip
        return await _awaited(super().put(key, payload, priority=priority, not_before=not_before, delay=delay,
                                          ttl=ttl, domain=domain, priority_merge=priority_merge,
                                          not_before_merge=not_before_merge))  # fmt: skip

    async def put_many(self, items: Iterable[tuple[str, bytes]], *, priority: int | None = None,  # type: ignore[override]
                       not_before: datetime | float | None = None, delay: float | None = None,
                       ttl: float | None = None, domain: str | None = None, priority_merge: Merge = "replace",
                       not_before_merge: Merge = "replace") -> list[int]:  # fmt: skip
        return await _awaited(super().put_many(items, priority=priority, not_before=not_before, delay=delay,
                                               ttl=ttl, domain=domain, priority_merge=priority_merge,
                                               not_before_merge=not_before_merge))  # fmt: skip

    async def take(self, lease: float = limits.JOB_LEASE_S_DEFAULT, *, wait: float = 0.0,  # type: ignore[override]
                   ack: Job | None = None) -> Job | Idle:  # fmt: skip
        return await _awaited(super().take(lease, wait=wait, ack=ack))

    async def take_many(self, count: int, lease: float = limits.JOB_LEASE_S_DEFAULT, *,  # type: ignore[override]
                        wait: float = 0.0, ack: Iterable[Job] = ()) -> list[Job]:  # fmt: skip
        return await _awaited(super().take_many(count, lease, wait=wait, ack=ack))

    async def ack(self, job: Job) -> None:  # type: ignore[override]
        return await _awaited(super().ack(job))

    async def ack_many(self, jobs: Iterable[Job]) -> None:  # type: ignore[override]
        return await _awaited(super().ack_many(jobs))

    async def release(self, job: Job) -> None:  # type: ignore[override]
        return await _awaited(super().release_many([job]))

    async def release_many(self, jobs: Iterable[Job]) -> None:  # type: ignore[override]
        return await _awaited(super().release_many(jobs))

    async def nack(self, job: Job, *, delay: float = 0.0, error: str = "") -> None:  # type: ignore[override]
        return await _awaited(super().nack(job, delay=delay, error=error))

    async def extend(self, job: Job, lease: float = limits.JOB_LEASE_S_DEFAULT) -> Job:  # type: ignore[override]
        return await _awaited(super().extend(job, lease))

    async def get(self, key: str) -> list[Job]:  # type: ignore[override]
        return await _awaited(super().get(key))

    async def stats(self) -> JobStats:  # type: ignore[override]
        return await _awaited(super().stats())

    async def cancel(self, key: str) -> bool:  # type: ignore[override]
        return await _awaited(super().cancel(key))


class Record(tuple[int, int, bytes]):
    """A log record from the server: ``lsn``, ``timestamp`` (ns), ``payload``."""

    __slots__ = ()

    @property
    def lsn(self) -> int:
        return self[0]

    @property
    def timestamp(self) -> int:
        return self[1]

    @property
    def payload(self) -> bytes:
        return self[2]


class RemoteLog(_Remote):
    """A log on the server (see ``logspool.Log``): appends, pages of records, its info; a tail is
    ``Client.subscribe``."""

    def append(self, payload: bytes) -> int:
        """``Log.append``: append one record; its lsn (durable as the daemon's log is)."""
        return self._call(p.LOG_APPEND, _integer("first"), records=[payload])

    def append_many(self, payloads: Iterable[bytes]) -> list[int]:
        """``Log.append_many``: append records in order, all or none; their lsns."""
        return self._call(p.LOG_APPEND, lambda b: list(range(b["first"], b["first"] + b["count"]))
                          if b["count"] else [], records=list(payloads))  # fmt: skip

    def read_page(
        self, start: int | str = "earliest", *, limit: int = 1000, since: float | None = None
    ) -> tuple[list[Record], int]:
        """One page of records from ``start``: ``(records, next lsn)``."""
        return self._call(p.LOG_READ, lambda b: ([Record(r) for r in b["records"]], b["next"]),
                          start=start, limit=limit, since=since)  # fmt: skip

    def info(self) -> dict[str, Any]:
        """What the daemon says of the log: its lsns, size and segments."""
        return self._call(p.LOG_INFO, lambda b: b)

    def forget_producers(self, producers: Iterable[str]) -> int:
        """Forget what the daemon keeps for these log.FORWARD producers, which will never send
        again (PROTOCOL.md §4.1): how many it knew. Durable on return. A daemon before log.FORGET
        answers it with an error (RemoteError)."""
        return self._call(p.LOG_FORGET, _integer("forgotten"), producers=list(producers))


class AsyncRemoteLog(RemoteLog):
    """The async client's log: ``RemoteLog``'s calls as coroutines."""

    async def append(self, payload: bytes) -> int:  # type: ignore[override]
        return await _awaited(super().append(payload))

    async def append_many(self, payloads: Iterable[bytes]) -> list[int]:  # type: ignore[override]
        return await _awaited(super().append_many(payloads))

    async def read_page(  # type: ignore[override]
        self, start: int | str = "earliest", *, limit: int = 1000, since: float | None = None
    ) -> tuple[list[Record], int]:
        return await _awaited(super().read_page(start, limit=limit, since=since))

    async def info(self) -> dict[str, Any]:  # type: ignore[override]
        return await _awaited(super().info())

    async def forget_producers(self, producers: Iterable[str]) -> int:  # type: ignore[override]
        return await _awaited(super().forget_producers(producers))


async def _awaited(request: _T) -> _T:
    """The reply of a request made through the async client (``_call`` gave an awaitable of it)."""
    return await cast(Awaitable[_T], request)
