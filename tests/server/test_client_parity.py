"""The remote client against the embedded objects: the same signatures (so code moves between
them unchanged, and an editor shows the same parameters), and the calls that were missing
remotely (``put_many``, ``take(ack=)``, ``cancel``) doing on a real daemon what they do embedded.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

import logspool
from logspool import _wire, client, jobs, kv
from logspool.errors import LeaseExpiredError
from tests.server.conftest import Running

# The journal's calls that are not remote (RemoteJournal's docstring says why): the worker loop,
# the managing calls (``logspool jobs`` on the daemon's machine) and the handle's own.
NOT_REMOTE = {
    "work",
    "jobs",
    "job",
    "dead_letters",
    "retry",
    "purge",
    "configure",
    "snapshot",
    "close",
    "sync",
}
PAIRS = [
    (jobs.Journal, client.RemoteJournal, client.AsyncRemoteJournal),
    (kv.Store, client.RemoteKV, client.AsyncRemoteKV),
    (logspool.Log, client.RemoteLog, client.AsyncRemoteLog),
]


def _shape(fn: Callable[..., Any]) -> list[tuple[str, Any, Any]]:
    """Each parameter's name, kind and default (annotations are compared by mypy, not here)."""
    sig = inspect.signature(fn)
    return [(p.name, p.kind, p.default) for p in sig.parameters.values() if p.name != "self"]


@pytest.mark.parametrize(("embedded", "remote", "async_remote"), PAIRS, ids=lambda c: c.__name__)
def test_remote_calls_have_the_embedded_signatures(embedded: type, remote: type, async_remote: type) -> None:
    shared = [
        name
        for name, fn in inspect.getmembers(remote, inspect.isfunction)
        if not name.startswith("_") and hasattr(embedded, name)
    ]
    assert shared, "no call in common"
    for name in shared:
        if embedded is logspool.Log and name in {"info"}:  # (the daemon's info is a dict of the same)
            continue
        want = _shape(getattr(embedded, name))
        assert _shape(getattr(remote, name)) == want, (
            f"{remote.__name__}.{name} differs from {embedded.__name__}"
        )
        if name in {"keys", "items", "values"}:
            continue  # (async iterators on the async store)
        got = getattr(async_remote, name)
        assert _shape(got) == want, f"{async_remote.__name__}.{name} differs from {embedded.__name__}"
        assert inspect.iscoroutinefunction(got) or name == "release", f"{async_remote.__name__}.{name}"
        assert getattr(remote, name).__doc__, f"{remote.__name__}.{name} has no docstring"


def test_every_producing_and_consuming_call_of_the_journal_is_remote() -> None:
    public = {n for n, _ in inspect.getmembers(jobs.Journal, inspect.isfunction) if not n.startswith("_")}
    missing = public - set(dir(client.RemoteJournal)) - NOT_REMOTE
    assert not missing, f"calls of Journal missing from RemoteJournal: {sorted(missing)}"


def test_every_command_has_a_number_of_its_own() -> None:
    """The command numbers are distinct (a dict of names by number would hide a clash)."""
    names = [n for n in vars(_wire) if n.isupper() and n.startswith(("KV_", "LOG_", "JOB_"))]
    names += ["NOP", "QUIT", "HELLO", "PING", "STATS", "LISTEN", "UNLISTEN"]
    numbers = [getattr(_wire, n) for n in names]
    clashes = {n: getattr(_wire, n) for n in names if numbers.count(getattr(_wire, n)) > 1}
    assert not clashes, f"commands sharing a number: {clashes}"
    assert len(numbers) == len(_wire.COMMANDS)


def test_put_many_take_with_ack_and_cancel_on_a_daemon(running: Running) -> None:
    with client.connect(running.address) as c:
        q = c.jobs("work")
        ids = q.put_many([("a", b"1"), ("b", b"2"), ("c", b"3")], priority=7)
        assert len(ids) == 3 and ids == sorted(ids)
        assert q.put_many([]) == []
        first = q.take(lease=30)
        assert isinstance(first, jobs.Job) and first.payload == b"1" and first.priority == 7
        second = q.take(lease=30, ack=first)  # acks the first in the same step
        assert isinstance(second, jobs.Job) and second.payload == b"2"
        with pytest.raises(LeaseExpiredError):
            q.take(ack=first)  # already acked: nothing taken
        assert q.cancel("c") is True and q.cancel("c") is False
        idle = q.take(ack=second)
        assert isinstance(idle, jobs.Idle) and not idle
        q.put("later", b"", delay=3600)
        idle = q.take()
        assert isinstance(idle, jobs.Idle) and idle.next_at is not None
        stats = q.stats()
        assert stats.counters["acked"] == 2 and stats.pending == 1
        with pytest.raises(TypeError):
            q.take_many(2, ack=first)  # type: ignore[arg-type]
        when = datetime(2100, 1, 1, tzinfo=UTC)
        q.put("dated", b"", not_before=when)
        assert q.get("dated")[0].not_before == when.timestamp()


def test_the_async_client_has_the_journal_and_the_log(running: Running) -> None:
    async def go() -> None:
        async with await client.connect_async(running.address) as c:
            q = c.jobs("aq")
            assert len(await q.put_many([("x", b"1"), ("y", b"2")])) == 2
            job = await q.take()
            assert isinstance(job, jobs.Job)
            nxt = await q.take(ack=job)
            assert isinstance(nxt, jobs.Job) and nxt.key == "y"
            await q.release(nxt)
            assert await q.cancel("y") is True
            log = c.log("al")
            assert await log.append_many([b"a", b"b"]) == [0, 1]
            assert await log.append(b"c") == 2
            records, nxt_lsn = await log.read_page(0)
            assert [r.payload for r in records] == [b"a", b"b", b"c"] and nxt_lsn == 3

    asyncio.run(go())


def test_a_packed_page_holds_what_the_records_page_holds(running: Running) -> None:
    """log.READ ``packed``: one bytes value with the page's columns, decoded by _wire; the same
    records as the list-per-record reply, and a page whose sizes do not add up is refused."""
    with client.connect(running.address) as c:
        payloads = [b"", b"x" * 1000, *(b"r%d" % i for i in range(500))]
        c.log("p").append_many(payloads)
        plain = c.pipeline([(_wire.LOG_READ, {"name": "p", "start": 0, "limit": 10_000})])[0]
        packed = c.pipeline([(_wire.LOG_READ, {"name": "p", "start": 0, "limit": 10_000, "packed": True})])[0]
    lsns, stamps, got = _wire.unpack_records(packed["packed"])
    assert [[a, b, p] for a, b, p in zip(lsns, stamps, got, strict=True)] == plain["records"]
    assert packed["next"] == plain["next"] == len(payloads)
    assert _wire.unpack_records(_wire.pack_records([])) == ([], [], [])
    raw = packed["packed"]
    for bad in (raw[:3], raw[:-1], raw + b"x", raw[:30]):
        with pytest.raises(_wire.ProtocolError):
            _wire.unpack_records(bad)
