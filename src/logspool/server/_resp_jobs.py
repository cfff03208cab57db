"""Job journals through the commands of Disque (antirez's job queue): ADDJOB, GETJOB, ACKJOB, NACK,
WORKING, QLEN, QPEEK, SHOW. A Disque queue is a job journal ``DATA/jobs/NAME`` (the same one the
native protocol's ``jobs.*`` commands and an embedded ``jobs.open`` use). docs/RESP.md says what
differs from Disque.

**Job ids** are ``D-<id>-<token>-<queue>``: the journal's job id, the lease's fencing token (0 in
ADDJOB's reply: no lease yet) and the queue's name, so that ACKJOB, NACK, WORKING and SHOW,
which name jobs by id alone, find the journal; a token from GETJOB is checked as the journal's
``ack`` checks it (a lease lost to an expiry and a new delivery is not acked twice).

**Keys.** A logspool job has a key (one pending job per key: a second put updates it, latest
wins). ADDJOB gives each job a key of its own unless ``KEY k`` says otherwise, so that, as in
Disque, every ADDJOB adds a job.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from typing import TYPE_CHECKING

from .. import _wire, jobs
from ..errors import JobNotFoundError, LeaseExpiredError
from . import _resp_wire as w
from ._resp_commands import Block, _int, command
from ._resp_kv import RedisError

if TYPE_CHECKING:
    from ._resp import Session

LEASE_S = 300.0  # how long a GETJOB's job stays hidden (Disque's default RETRY: 5 minutes)
GETJOB_COUNT_MAX = 1000
QPEEK_COUNT_MAX = 1000


def _queue(raw: bytes) -> str:
    text = raw.decode("ascii", "replace")
    if not _wire.NAME_RE.fullmatch(text):
        raise RedisError("ERR logspool queue names are journal names: [A-Za-z0-9][A-Za-z0-9._-]{0,127}")
    return text


def _journal(s: Session, name: str, create: bool) -> jobs.Journal | None:
    if not create and not os.path.isdir(os.path.join(s.front.server.data, "jobs", name)):
        return None
    return s.front.server.stores.get("jobs", name)  # type: ignore[no-any-return]


def job_id(job: jobs.Job, queue: str, token: int | None = None) -> bytes:
    return f"D-{job.id}-{job.token if token is None else token}-{queue}".encode()


def _parse_id(raw: bytes) -> tuple[int, int, str]:
    parts = raw.decode("ascii", "replace").split("-", 3)
    if len(parts) != 4 or parts[0] != "D" or not parts[1].isdigit() or not parts[2].isdigit():
        raise RedisError(f"BADID Invalid Job ID format: {raw.decode('ascii', 'replace')[:80]}")
    return int(parts[1]), int(parts[2]), _queue(parts[3].encode())


def _ref(job_id_: int, token: int) -> jobs.Job:
    return jobs.Job(job_id_, "", "", b"", 0, "leased", 0.0, 0, token, None, None, 0.0, 0.0, "")


def _leased_ref(s: Session, raw: bytes) -> tuple[jobs.Journal, jobs.Job] | None:
    """The journal and the lease a job id names (its token, or the job's current lease if the id
    carries none); None if there is no such leased job."""
    jid, token, queue = _parse_id(raw)
    journal = _journal(s, queue, create=False)
    if journal is None:
        return None
    if token == 0:
        try:
            job = journal.job(jid)
        except JobNotFoundError:
            return None
        if job.state != "leased":
            return None
        token = job.token
    return journal, _ref(jid, token)


def _job_reply(queue: str, job: jobs.Job, counters: bool) -> bytes:
    items = [w.bulk(queue.encode()), w.bulk(job_id(job, queue)), w.bulk(job.payload)]
    if counters:
        items += [w.bulk(b"nacks"), w.integer(max(0, job.deliveries - 1)),
                  w.bulk(b"additional-deliveries"), w.integer(0)]  # fmt: skip
    return w.array(items)


@command("ADDJOB", -4, "jobs")
def _addjob(s: Session, args: list[bytes]) -> bytes:
    queue = _queue(args[1])
    body = args[2]
    _int(args[3])  # the replication timeout: one node, durable before the reply
    delay = ttl = None
    key = None
    priority = None
    maxlen = None
    i = 4
    while i < len(args):
        option = args[i].upper()
        if option == b"ASYNC":
            i += 1
            continue
        if i + 1 >= len(args):
            raise RedisError("ERR syntax error")
        value = args[i + 1]
        if option == b"DELAY":
            delay = float(_int(value))
        elif option == b"TTL":
            ttl = float(_int(value))
        elif option in (b"RETRY", b"REPLICATE"):
            _int(value)  # (accepted: see docs/RESP.md)
        elif option == b"MAXLEN":
            maxlen = _int(value)
        elif option == b"KEY":
            key = value.decode("utf-8", "strict")
        elif option == b"PRIORITY":
            priority = _int(value)
        else:
            raise RedisError("ERR syntax error")
        i += 2
    journal = _journal(s, queue, create=True)
    assert journal is not None
    key = key if key is not None else f"{queue}/{uuid.uuid4().hex}"
    # MAXLEN's look at the queue and the put are one step among the daemon's clients (ADDJOBs
    # run in the pool: without the lock, 16 at once on an empty queue all found it empty).
    with (
        s.front.server.stores.lock_for(f"maxlen/{queue}") if maxlen is not None else contextlib.nullcontext()
    ):
        if maxlen is not None and journal.stats().pending >= maxlen:
            raise RedisError("MAXLEN Queue is already longer than the specified MAXLEN count")
        put = journal.put(key, body, priority=priority, delay=delay or None, ttl=ttl or None)
    pending = [j for j in journal.get(key) if j.state == "pending"]
    found = pending[-1] if pending else None
    return w.bulk(f"D-{found.id if found else put}-0-{queue}".encode())


def _take(s: Session, queues: list[str], count: int, counters: bool) -> tuple[bytes | None, float | None]:
    """GETJOB's look: up to ``count`` jobs from the queues in order; or None and when a delayed
    job becomes ready (or a lease ends)."""
    items: list[bytes] = []
    next_at: float | None = None
    for queue in queues:
        journal = _journal(s, queue, create=False)
        if journal is None:
            continue
        got = journal.take_many(count - len(items), LEASE_S)
        items += [_job_reply(queue, job, counters) for job in got]
        if len(items) >= count:
            break
        if not got:
            idle = journal.take(LEASE_S)  # nothing ready: when will something be?
            if isinstance(idle, jobs.Job):
                items.append(_job_reply(queue, idle, counters))
            elif idle.next_at is not None:
                next_at = idle.next_at if next_at is None else min(next_at, idle.next_at)
    return (w.array(items) if items else None), next_at


@command("GETJOB", -3, "jobs")
def _getjob(s: Session, args: list[bytes]) -> bytes | Block:
    nohang = counters = False
    timeout_ms = 0
    count = 1
    i = 1
    while i < len(args) and args[i].upper() != b"FROM":
        option = args[i].upper()
        if option == b"NOHANG":
            nohang = True
        elif option == b"WITHCOUNTERS":
            counters = True
        elif option in (b"TIMEOUT", b"COUNT") and i + 1 < len(args):
            number = _int(args[i + 1])
            if option == b"TIMEOUT":
                timeout_ms = max(number, 0)
            else:
                count = number
            i += 1
        else:
            raise RedisError("ERR syntax error")
        i += 1
    queues = [_queue(q) for q in args[i + 1 :]]
    if i >= len(args) or not queues:
        raise RedisError("ERR syntax error: GETJOB ... FROM queue [queue ...]")
    if not 1 <= count <= GETJOB_COUNT_MAX:
        raise RedisError(f"ERR COUNT must be from 1 to {GETJOB_COUNT_MAX}")
    reply, _ = _take(s, queues, count, counters)
    if reply is not None:
        return reply
    if nohang or s._tx is not None:
        return w.null_array(s.proto)
    deadline = None if timeout_ms == 0 else time.monotonic() + timeout_ms / 1000
    watch = [f"jobs/{q}/ops" for q in queues]
    return Block(watch, lambda: _take(s, queues, count, counters), deadline, w.null_array(s.proto))


def _settle(s: Session, args: list[bytes], how: str) -> bytes:
    for raw in args[1:]:
        _parse_id(raw)  # (every id checked before any job is acked or nacked: -BADID changes nothing)
    done = 0
    for raw in args[1:]:
        found = _leased_ref(s, raw)
        if found is None:
            if how == "ack":  # a queued job: ACKJOB removes it, as in Disque
                jid, _, queue = _parse_id(raw)
                journal = _journal(s, queue, create=False)
                if journal is not None:
                    try:
                        job = journal.job(jid)
                    except JobNotFoundError:
                        continue
                    if job.state == "pending" and journal.cancel(job.key):
                        done += 1
            continue
        journal, ref = found
        try:
            if how == "ack":
                journal.ack(ref)
            else:
                journal.nack(ref)
        except (LeaseExpiredError, JobNotFoundError):
            continue
        done += 1
    return w.integer(done)


@command("ACKJOB", -2, "jobs")
def _ackjob(s: Session, args: list[bytes]) -> bytes:
    return _settle(s, args, "ack")


command("FASTACK", -2, "jobs")(_ackjob)  # (one node: the same as ACKJOB)


@command("NACK", -2, "jobs")
def _nack(s: Session, args: list[bytes]) -> bytes:
    return _settle(s, args, "nack")


@command("WORKING", 2, "jobs")
def _working(s: Session, args: list[bytes]) -> bytes:
    found = _leased_ref(s, args[1])
    if found is None:
        raise RedisError("NOJOB Job not known or not active")
    journal, ref = found
    try:
        journal.extend(ref, LEASE_S)
    except LeaseExpiredError:
        raise RedisError("NOJOB The job's lease was lost (it was delivered again)") from None
    return w.integer(int(LEASE_S))


@command("QLEN", 2, "jobs")
def _qlen(s: Session, args: list[bytes]) -> bytes:
    journal = _journal(s, _queue(args[1]), create=False)
    return w.integer(0 if journal is None else journal.stats().pending)


@command("QPEEK", 3, "jobs")
def _qpeek(s: Session, args: list[bytes]) -> bytes:
    queue = _queue(args[1])
    count = _int(args[2])
    journal = _journal(s, queue, create=False)
    if journal is None or count == 0:
        return w.EMPTY_ARRAY
    pending = journal.jobs(state="pending")
    picked = (
        pending[: min(count, QPEEK_COUNT_MAX)] if count > 0 else pending[::-1][: min(-count, QPEEK_COUNT_MAX)]
    )
    return w.array([_job_reply(queue, job, False) for job in picked])


_STATES = {"pending": b"queued", "leased": b"active", "dead": b"dead"}


@command("SHOW", 2, "jobs")
def _show(s: Session, args: list[bytes]) -> bytes:
    jid, _, queue = _parse_id(args[1])
    journal = _journal(s, queue, create=False)
    if journal is None:
        return s.nil()
    try:
        job = journal.job(jid)
    except JobNotFoundError:
        return s.nil()
    now = time.time()
    fields = [
        (b"id", w.bulk(job_id(job, queue))),
        (b"queue", w.bulk(queue.encode())),
        (b"state", w.bulk(_STATES.get(job.state, job.state.encode()))),
        (b"key", w.bulk(job.key.encode())),
        (b"priority", w.integer(job.priority)),
        (b"ttl", w.integer(-1 if job.ttl_until is None else int(job.ttl_until - now))),
        (b"ctime", w.integer(int(job.created * 1_000_000_000))),
        (b"delay", w.integer(max(0, int(job.not_before - now)))),
        (b"retry", w.integer(int(LEASE_S))),
        (b"nacks", w.integer(max(0, job.deliveries - 1))),
        (b"additional-deliveries", w.integer(0)),
        (
            b"next-requeue-within",
            w.integer(-1 if job.lease_until is None else int((job.lease_until - now) * 1000)),
        ),
        (b"body", w.bulk(job.payload)),
    ]
    return w.mapping([(w.bulk(k), v) for k, v in fields], s.proto)
