"""The job journal: jobs kept as ops in a logspool log, shared by any number of processes.

The layout of a journal directory (an op log, snapshots, a marker) and the machinery of opening,
catching up, deciding and compacting are ``logspool._fold``'s (docs/FORMAT.md §14).

Longer than 600 lines on purpose: ``Journal`` is the public API, one method per call, each a short
decision with its rules in its docstring; what they share is elsewhere (``_fold``, the state in
``_state``, the ops in ``_ops``, the worker loop in ``_work``, the returned types in ``_types``).

Guarantees (docs/DURABILITY.md has the argument and the tests that prove it):
- With ``durability="always"`` (default) every call that changes the journal returns after its op
  is fsynced; threads of a process share fsyncs (group commit). A crash at any point loses no op a
  call returned for, and an acked job never runs again.
- Decisions that read the state (take, ack, nack, extend, cancel, retry, purge) are made under the
  op log's writer lock after reading every op before it, so two workers never get the same lease
  and a stale lease token can never ack. ``put`` needs no decision: it only appends.
- A job taken by a worker that dies comes back when its lease expires.
- ``compact_in_background=True``: the snapshot that a decision finds due is written in the
  background (by a forked child where it can be, else a thread: ``logspool._fold``), not at the
  end of that decision, so no call waits for it (the daemon opens its journals so).

Concurrency: a ``Journal`` is safe to share between threads; any number of processes may open the
same directory (one handle per process; not across fork).
"""

from __future__ import annotations

import collections
import logging
import os
import time
from collections.abc import Callable, Iterable
from datetime import datetime

from .. import limits
from .._fold import FoldedStore, _Writer
from .._fs import FileSystem
from ..errors import JobNotFoundError, LeaseExpiredError
from ..log import Durability
from ..log._directory import to_ns
from . import _ops as ops
from ._state import NONE, JobEntry, Leases, State
from ._types import Idle, Job, JobStats, Merge, domain_of
from ._work import Work

_logger = logging.getLogger("logspool.jobs")

PRIORITY_DEFAULT = 128
_NS = 1_000_000_000
_new_tuple = tuple.__new__


def _seconds(value: object, what: str, *, zero: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{what} must be a number of seconds, not {type(value).__name__}")
    low_ok = value >= 0 if zero else value > 0
    if not low_ok or not value <= limits.JOB_DURATION_S_MAX:
        bound = ">= 0" if zero else "> 0"
        raise ValueError(
            f"{what} must be {bound} and at most {limits.JOB_DURATION_S_MAX:g} seconds, not {value!r}"
        )
    return float(value)


def _job(entry: JobEntry) -> Job:
    state = entry.state
    values = (
        entry.id,
        entry.key,
        entry.domain,
        entry.payload,
        entry.priority,
        ops.STATES[state],
        entry.not_before_ns / _NS,
        entry.deliveries,
        entry.token,
        entry.lease_until_ns / _NS if state == ops.LEASED else None,
        entry.ttl_until_ns / _NS if entry.ttl_until_ns else None,
        entry.created_ns / _NS,
        entry.updated_ns / _NS,
        entry.error,
    )
    return _new_tuple(Job, values)  # (Job's own __new__ takes the fields as arguments: slower)


def _ack_ops(jobs_: list[Job]) -> tuple[list[ops.Op], int]:
    """The ops that ack ``jobs_``, and the journal format they need: one ACK, or one ACK_MANY."""
    if len(jobs_) == 1:
        return [ops.Ack(jobs_[0].id, jobs_[0].token)], 1
    return [ops.AckMany(tuple(j.id for j in jobs_), tuple(j.token for j in jobs_))], 3


def _release_ops(jobs_: list[Job]) -> tuple[list[ops.Op], int]:
    return [ops.Release(job.id, job.token) for job in jobs_], 2


_MakeOps = Callable[[list[Job]], tuple[list[ops.Op], int]]
assert limits.JOB_TAKE_MAX <= ops.LIST_MAX, "a take_many is one TAKE_MANY op (if it buries none)"


class Journal(FoldedStore[State, ops.Op]):
    """A job journal in a directory. Use ``logspool.jobs.open``. See the module docstring."""

    KIND = "logspool-jobs"
    # 2: RELEASE ops; 3: TAKE_MANY and ACK_MANY; 4: PUT_MANY (a journal says the lowest it needs)
    VERSION = 4
    WHAT = "job journal"

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        create: bool = True,
        durability: Durability = "always",
        max_deliveries: int | None = None,
        segment_size_max: int | None = None,
        snapshot_ops_min: int = limits.JOB_SNAPSHOT_OPS_MIN,
        lock_timeout_s: float = limits.LOCK_TIMEOUT_S_DEFAULT,
        compact_in_background: bool = False,
        fs: FileSystem | None = None,
        clock: Callable[[], int] | None = None,
    ) -> None:
        if max_deliveries is not None:
            _check_max_deliveries(max_deliveries)
        # lease tokens this handle acked or nacked lately (so work() does not settle them again)
        self._settled: collections.OrderedDict[int, None] = collections.OrderedDict()
        self._open_store(
            path,
            create=create,
            durability=durability,
            segment_size_max=segment_size_max,
            snapshot_ops_min=snapshot_ops_min,
            lock_timeout_s=lock_timeout_s,
            fs=fs,
            clock=clock,
            compact_in_background=compact_in_background,
        )
        try:
            if max_deliveries is not None and max_deliveries != self.max_deliveries:
                self.configure(max_deliveries=max_deliveries)
        except BaseException:
            self.close()
            raise

    # --- the fold's hooks -------------------------------------------------------------------------
    def _new_state(self, snapshot: bytes | None, path: str) -> State:
        return State(None if snapshot is None else ops.decode_snapshot(snapshot, path))

    def _encode_op(self, op: ops.Op) -> bytes:
        return ops.encode(op)

    def _decode_op(self, payload: bytes, where: str) -> ops.Op:
        return ops.decode(payload, where)

    def _freeze(self, in_place: bool = False) -> tuple[int, object]:
        # The state as it is (caught up by the caller): no read of the op log, which a forked
        # child (``in_place``) cannot make (it holds none of its parent's files).
        snap = self._state.snapshot(self._state.max_deliveries or limits.JOB_MAX_DELIVERIES_DEFAULT)
        return snap.next_lsn, snap

    def _encode_snapshot(self, frozen: object) -> bytes:
        assert isinstance(frozen, ops.Snapshot)
        return ops.encode_snapshot(frozen)

    def _state_size(self) -> int:
        return len(self._state.jobs)

    # --- settings ---------------------------------------------------------------------------------
    @property
    def max_deliveries(self) -> int:
        """Deliveries after which a job that comes back goes to the dead letters."""
        return self._current().max_deliveries or limits.JOB_MAX_DELIVERIES_DEFAULT

    def configure(self, *, max_deliveries: int) -> None:
        """Change the journal's settings for every process (a CONFIG op). Durable on return."""
        _check_max_deliveries(max_deliveries)
        with self._decide() as w:
            w.write(ops.Config(max_deliveries))

    # --- producing --------------------------------------------------------------------------------
    def put(
        self,
        key: str,
        payload: bytes = b"",
        *,
        priority: int | None = None,
        not_before: datetime | float | None = None,
        delay: float | None = None,
        ttl: float | None = None,
        domain: str | None = None,
        priority_merge: Merge = "replace",
        not_before_merge: Merge = "replace",
    ) -> int:
        """Record that ``key`` needs work; return the put's id (the job's ``id`` if it created one).

        If ``key`` has a pending job, that job is updated (latest wins): the payload and TTL are
        replaced; ``priority`` and ``not_before`` are merged as ``priority_merge`` and
        ``not_before_merge`` say ("replace", "keep", "earliest": the one that runs first,
        "latest"); one left out (None) keeps the pending job's value. A job being worked on is not
        touched: the put makes the key's next pending job, which runs once the first is done.
        ``priority``: 0..255, smaller runs first (default 128). ``not_before`` (a datetime, naive
        is UTC, or seconds since the epoch) or ``delay`` (seconds from now): the job is invisible
        until then. ``ttl``: seconds after which the job is dropped if nobody took it.
        ``domain``: the fairness group (default: ``domain_of(key)``).
        Durability: returns after the op is fsynced ("always"). Any thread or process. The first
        put raises an older journal's format version to 4 (docs/FORMAT.md §14).
        """
        op = self._put_op(
            ((key, payload, domain),),
            priority=priority,
            not_before=not_before,
            delay=delay,
            ttl=ttl,
            priority_merge=priority_merge,
            not_before_merge=not_before_merge,
        )
        self._check_open()
        self._ensure_version(4)
        return ops.item_id(self._log.append(ops.encode(op)), 0)

    def put_many(
        self,
        items: Iterable[tuple[str, bytes]],
        *,
        priority: int | None = None,
        not_before: datetime | float | None = None,
        delay: float | None = None,
        ttl: float | None = None,
        domain: str | None = None,
        priority_merge: Merge = "replace",
        not_before_merge: Merge = "replace",
    ) -> list[int]:
        """``put`` for each ``(key, payload)`` in order, with the same options, in one write and
        one fsync: all or none of them are in the journal (one op, or one per 65,536 puts or per
        ``record_size_max`` bytes of the op log). Returns the puts' ids. Durable on return."""
        op = self._put_op(
            ((key, payload, domain) for key, payload in items), priority=priority, not_before=not_before,
            delay=delay, ttl=ttl, priority_merge=priority_merge, not_before_merge=not_before_merge,
        )  # fmt: skip
        if not op.items:
            return []
        self._check_open()
        self._ensure_version(4)
        records = ops.encode_put_many(op, self._log.record_size_max)
        lsns = self._log.append_many([record for record, _ in records])
        return [ops.item_id(lsn, i) for lsn, (_, n) in zip(lsns, records, strict=True) for i in range(n)]

    def _put_op(
        self,
        items: Iterable[tuple[str, bytes, str | None]],
        *,
        priority: int | None = None,
        not_before: datetime | float | None = None,
        delay: float | None = None,
        ttl: float | None = None,
        priority_merge: Merge = "replace",
        not_before_merge: Merge = "replace",
    ) -> ops.PutMany:
        """The PUT_MANY op of ``(key, payload, domain)`` items with these options, checked (the
        rules are on ``put``; a domain None is the key's)."""
        now = self._clock()
        checked = []
        for key, payload, domain in items:
            key_raw = ops.utf8(key, "key", limits.JOB_KEY_SIZE_MAX)
            if not key_raw:
                raise ValueError("key must not be empty")
            dom = domain_of(key) if domain is None else domain
            ops.utf8(dom, "domain", limits.JOB_DOMAIN_SIZE_MAX)
            if not isinstance(payload, bytes | bytearray | memoryview):
                raise TypeError(f"payload must be bytes, not {type(payload).__name__}")
            checked.append((key, dom, bytes(payload)))
        merges = []
        for name, mode in (("priority_merge", priority_merge), ("not_before_merge", not_before_merge)):
            if mode not in ops.MERGES:
                raise ValueError(f"{name} must be one of {sorted(ops.MERGES)}, not {mode!r}")
            merges.append(ops.MERGES[mode])
        if priority is None:
            priority, merges[0] = PRIORITY_DEFAULT, ops.KEEP
        elif isinstance(priority, bool) or not isinstance(priority, int) or not 0 <= priority <= 255:
            raise ValueError(f"priority must be an integer from 0 to 255, not {priority!r}")
        if not_before is not None and delay is not None:
            raise ValueError("give not_before or delay, not both")
        if delay is not None:
            nb = now + int(_seconds(delay, "delay") * _NS)
        elif not_before is not None:
            nb = to_ns(not_before)
        else:
            nb, merges[1] = now, ops.KEEP
        ttl_until = 0 if ttl is None else now + int(_seconds(ttl, "ttl", zero=False) * _NS)
        return ops.PutMany(tuple(checked), priority, nb, ttl_until, merges[0], merges[1])

    # --- consuming --------------------------------------------------------------------------------
    def take(
        self, lease: float = limits.JOB_LEASE_S_DEFAULT, *, wait: float = 0.0, ack: Job | None = None
    ) -> Job | Idle:
        """The next ready job, leased to the caller for ``lease`` seconds; or ``Idle``.

        Order: the smallest priority number first; within a priority, the domain served least
        recently; within a domain, the earliest ``not_before``, then the earliest put. A job whose
        lease expired is delivered again (its ``deliveries`` grows); one already delivered
        ``max_deliveries`` times goes to the dead letters instead; jobs past their TTL are dropped.
        With ``wait`` > 0, waits up to that many seconds: it wakes when a job becomes ready (a put
        or an ack from any process, or a delay or lease running out). ``Idle.next_at`` says when
        the next job may be ready. ``ack``: a job of the caller's to ack first, in the same
        durable step (one fsync for both; a worker's loop). LeaseExpiredError as ``ack``, and
        then nothing is taken. Durability: the lease is fsynced before return. Any thread.
        """
        acks = () if ack is None else (ack,)
        result = self._take(1, _seconds(lease, "lease", zero=False), _seconds(wait, "wait"), acks)
        return result if isinstance(result, Idle) else result[0]

    def _take(self, count: int, lease_s: float, wait_s: float, acks: Iterable[Job]) -> list[Job] | Idle:
        """take and take_many: ack ``acks`` and lease up to ``count`` jobs in one decision, waiting
        up to ``wait_s`` seconds for one to be ready."""
        acks = _jobs_list(acks, "ack")
        deadline = time.monotonic() + wait_s
        for _ in range(1 << 40):  # bounded by the deadline
            with self._decide() as w:
                self._settle_in(w, acks, _ack_ops)
                result = self._lease(w, lease_s, count)
            for job in acks:
                self._mark_settled(job.token)  # (once written)
            acks = []
            remaining = deadline - time.monotonic()
            if not isinstance(result, Idle) or remaining <= 0:
                return result
            until_next = remaining if result.next_at is None else result.next_at - self._clock() / _NS
            self._wait_for_ops(max(0.0, min(remaining, until_next)))
        raise AssertionError("unreachable")  # pragma: no cover

    def _lease(self, w: _Writer[State, ops.Op], lease_s: float, count: int) -> list[Job] | Idle:
        """Inside a decision: lease up to ``count`` ready jobs, in take order (each pick sees the
        ones before it taken, so domains take turns), dropping jobs past their TTL and burying
        those delivered ``max_deliveries`` times on the way. Idle if none is ready."""
        state = self._state
        now = self._clock()
        expired, _ = state.due(now)
        for job_id in expired:
            w.write(ops.Expire(job_id))
        until = now + int(lease_s * _NS)
        max_deliveries = state.max_deliveries or limits.JOB_MAX_DELIVERIES_DEFAULT
        chosen: list[Job] = []
        # The leases are one TAKE_MANY op, applied as each job is picked (the next pick sees it
        # taken, so domains take turns: ``State.leases``, the fold's own steps) and written once;
        # a burial in between ends it.
        leases: Leases | None = None
        # bounded: each turn takes a job or buries one, and there are finitely many
        for _ in range(count + limits.JOB_STALE_ENTRIES_MAX):
            entry = state.pick(now)
            if entry is None:
                break
            if entry.deliveries >= max_deliveries:
                if leases is not None:
                    w.write_applied(leases.op())
                    leases = None
                reason = f"delivered {entry.deliveries} times (max_deliveries {max_deliveries})"
                if entry.error:
                    reason += f"; last error: {entry.error}"
                w.write(ops.Dead(entry.id, reason))
                continue
            if leases is None:
                self._require_version(3)
                leases = state.leases(*w.begin_applied(), until)
            if not leases.take(entry.id):
                raise AssertionError(f"take: picked job {entry.id}, which cannot be taken")
            chosen.append(_job(entry))
            if len(chosen) == count:
                break
        else:
            raise AssertionError("take: no decision after looking at every index entry")
        if leases is not None:
            w.write_applied(leases.op())
        if chosen:
            return chosen
        at = state.next_at()
        return Idle(None if at is None else at / _NS)

    def take_many(
        self,
        count: int,
        lease: float = limits.JOB_LEASE_S_DEFAULT,
        *,
        wait: float = 0.0,
        ack: Iterable[Job] = (),
    ) -> list[Job]:
        """Up to ``count`` ready jobs, in the order ``take`` would give them one by one (domains
        take turns within a priority), each leased for ``lease`` seconds; an empty list if none is
        ready within ``wait`` seconds (it returns as soon as at least one is). ``ack``: jobs of
        the caller's to ack first, in the same durable step; if any of their leases was lost,
        LeaseExpiredError and nothing is acked or taken. One write and one fsync for all of it:
        a worker that takes jobs in batches pays the disk once a batch, not once a job. Each
        lease runs from now, so ``lease`` must cover the whole batch's work (or ``extend`` it).
        Durability: the leases and acks are fsynced before return. Any thread or process.
        """
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= limits.JOB_TAKE_MAX:
            raise ValueError(f"count must be an integer from 1 to {limits.JOB_TAKE_MAX}, not {count!r}")
        if isinstance(ack, Job):
            raise TypeError("ack must be a list of jobs (take(ack=job) acks one)")
        result = self._take(count, _seconds(lease, "lease", zero=False), _seconds(wait, "wait"), ack)
        return [] if isinstance(result, Idle) else result

    def _settle_in(self, w: _Writer[State, ops.Op], jobs_: list[Job], make: _MakeOps) -> None:
        """Inside a decision: write the ops ``make`` makes for ``jobs_`` (acks, releases), or
        nothing if any lease was lost."""
        for job in jobs_:
            self._leased(job)  # every lease is checked before anything is made
        if jobs_:
            made, version = make(jobs_)
            self._require_version(version)  # the journal format those ops need
            w.write_many(made)

    def _leased(self, job: Job) -> JobEntry:
        """The state's entry for ``job`` if the caller's lease still holds; else LeaseExpiredError."""
        if not isinstance(job, Job):
            raise TypeError(f"expected a logspool.jobs.Job, not {type(job).__name__}")
        entry = self._state.jobs.get(job.id)
        if entry is None:
            raise LeaseExpiredError(
                self.path, job.id, job.token, None, "the job is gone (acked, dead, expired or superseded)"
            )
        if entry.state != ops.LEASED or entry.token != job.token:
            if entry.state == ops.LEASED:
                why = f"its lease expired and it was taken again (lease token {entry.token})"
            else:
                why = f"its lease expired and it is now {ops.STATES[entry.state]}"
            raise LeaseExpiredError(self.path, job.id, job.token, entry.token, why)
        return entry

    def _mark_settled(self, token: int) -> None:
        self._settled[token] = None
        if len(self._settled) > 1024:
            self._settled.popitem(last=False)

    def ack(self, job: Job) -> None:
        """Mark ``job`` done: it is removed and never delivered again. LeaseExpiredError if the
        caller's lease was lost (the job was taken again after it expired). A lease that expired
        but was not taken again still acks. Durable on return. Any thread or process."""
        with self._decide() as w:
            self._leased(job)
            w.write(ops.Ack(job.id, job.token))
        self._mark_settled(job.token)

    def ack_many(self, jobs: Iterable[Job]) -> None:
        """``ack`` each of ``jobs``, in one durable step (one write, one fsync): all are acked, or,
        if any lease was lost, none (LeaseExpiredError naming it). Durable on return."""
        self._settle_many("ack", jobs, _ack_ops)

    def _settle_many(self, what: str, jobs: Iterable[Job], make: _MakeOps) -> None:
        """ack_many and release_many: the ops ``make`` makes for the jobs, in one decision, or
        none if any lease was lost."""
        if isinstance(jobs, Job):
            raise TypeError(f"{what}_many takes a list of jobs; {what}(job) takes one")
        items = _jobs_list(jobs, "jobs")
        if not items:
            return
        with self._decide() as w:
            self._settle_in(w, items, make)
        for job in items:
            self._mark_settled(job.token)

    def nack(self, job: Job, *, delay: float = 0.0, error: str = "") -> None:
        """Give ``job`` back: it is delivered again after ``delay`` seconds, or goes to the dead
        letters if it has been delivered ``max_deliveries`` times. ``error`` is kept with it
        (cut to 4 KiB). If a newer put for its key is pending, this job is dropped in its favour
        (latest wins). LeaseExpiredError as ``ack``. Durable on return."""
        delay_s = _seconds(delay, "delay")
        if not isinstance(error, str):
            raise TypeError(f"error must be a str, not {type(error).__name__}")
        with self._decide() as w:
            entry = self._leased(job)
            dead = entry.deliveries >= (self._state.max_deliveries or limits.JOB_MAX_DELIVERIES_DEFAULT)
            w.write(ops.Nack(job.id, job.token, self._clock() + int(delay_s * _NS), dead, error))
        self._mark_settled(job.token)

    def release(self, job: Job) -> None:
        """Give back a leased job that was not started: it is pending again at its place in the
        order (its not_before and arrival are unchanged) and this delivery does not count toward
        ``max_deliveries`` (what ``nack`` is for a job that was worked on). If a newer put for
        its key is pending, this job is dropped in its favour (latest wins). LeaseExpiredError as
        ``ack``. Durable on return. The first release raises the journal's format version to 2
        (docs/FORMAT.md §14): code that reads only version 1 refuses to open it from then on."""
        self.release_many([job])

    def release_many(self, jobs: Iterable[Job]) -> None:
        """``release`` each of ``jobs`` in one durable step: all of them, or, if any lease was
        lost, none (LeaseExpiredError naming it). Durable on return."""
        self._settle_many("release", jobs, _release_ops)

    def extend(self, job: Job, lease: float = limits.JOB_LEASE_S_DEFAULT) -> Job:
        """Renew the lease: it now ends ``lease`` seconds from now. Returns the job as it is now.
        LeaseExpiredError as ``ack``. Durable on return."""
        lease_s = _seconds(lease, "lease", zero=False)
        with self._decide() as w:
            self._leased(job)
            w.write(ops.Extend(job.id, job.token, self._clock() + int(lease_s * _NS)))
            return _job(self._state.jobs[job.id])

    def work(
        self,
        lease: float = limits.JOB_LEASE_S_DEFAULT,
        *,
        idle_timeout: float | None = None,
        backoff_s: float = 1.0,
        batch: int = 1,
    ) -> Work:
        """Jobs one after another: ``for job in journal.work(lease=30): ...``.

        Asking for the next job acks the previous one. In ``with journal.work() as jobs: for job
        in jobs:``, an exception in the loop nacks the current job (with a backoff of
        ``backoff_s * 2 ** (deliveries - 1)`` seconds, at most an hour, and the error's repr) and
        leaving it otherwise acks it. In a bare ``for`` loop an exception cannot be told from a
        ``break``, so leaving the loop either way gives the job back at once (nack, no delay):
        ack it yourself before ``break`` if it was done. Waits for work for ever, or until idle
        for ``idle_timeout`` seconds.

        ``batch`` > 1: jobs are leased ``batch`` at a time (``take_many``), and the jobs finished
        since the last batch are acked in the same step as the next one: one fsync a batch, not
        a job. The lease runs from the batch's take, so it must cover the whole batch. Leaving
        the loop acks the finished jobs and gives back the ones not started (``release_many``:
        at their place, their delivery not counted). A crash redoes the finished jobs not yet
        acked.
        """
        if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= limits.JOB_TAKE_MAX:
            raise ValueError(f"batch must be an integer from 1 to {limits.JOB_TAKE_MAX}, not {batch!r}")
        return Work(
            self, _seconds(lease, "lease", zero=False), idle_timeout, _seconds(backoff_s, "backoff_s"), batch
        )

    # --- inspecting -------------------------------------------------------------------------------
    def get(self, key: str) -> list[Job]:
        """The live jobs of ``key``: the leased one (if any), then the pending one (if any).
        Reads the log up to now (no lock). Any thread."""
        with self._mutex:
            state = self._current()
            slots = state.keys.get(key)
            if slots is None:
                return []
            return [_job(state.jobs[i]) for i in slots if i != NONE]

    def job(self, job_id: int) -> Job:
        """The job (or dead letter) with this id; JobNotFoundError if there is none."""
        with self._mutex:
            entry = self._current().jobs.get(job_id)
            if entry is None:
                raise JobNotFoundError(self.path, f"job {job_id}")
            return _job(entry)

    def jobs(self, *, state: str | None = None, limit: int | None = None) -> list[Job]:
        """Jobs in id (arrival) order, optionally only those in ``state`` ("pending", "leased",
        "dead"), at most ``limit`` of them."""
        if state is not None and state not in ops.STATES.values():
            raise ValueError(f"state must be one of {sorted(ops.STATES.values())}, not {state!r}")
        with self._mutex:
            entries = sorted(self._current().jobs.values(), key=lambda e: e.id)
            out = [_job(e) for e in entries if state is None or ops.STATES[e.state] == state]
        return out if limit is None else out[:limit]

    def dead_letters(self) -> list[Job]:
        """The dead letters, oldest first."""
        with self._mutex:
            state = self._current()
            return [_job(state.jobs[i]) for i in sorted(state.dead)]

    def stats(self) -> JobStats:
        """What the journal holds now, and its counters. O(jobs). Any thread."""
        now = self._clock()
        with self._mutex:
            state = self._current()
            ready = delayed = blocked = leased = 0
            times = []  # when something not ready now becomes ready: delays and leases ending
            for e in state.jobs.values():
                if e.state == ops.LEASED:
                    leased += 1
                    times.append(e.lease_until_ns)
                elif e.state == ops.PENDING:
                    if state.keys[e.key][0] != NONE:
                        blocked += 1
                    elif e.not_before_ns > now:
                        delayed += 1
                        times.append(e.not_before_ns)
                    else:
                        ready += 1
            at = min(times, default=None)
            return JobStats(
                pending=ready + delayed + blocked,
                ready=ready,
                delayed=delayed,
                blocked=blocked,
                leased=leased,
                dead=len(state.dead),
                keys=len(state.keys),
                next_at=None if at is None else at / _NS,
                next_lsn=state.next_lsn,
                max_deliveries=self.max_deliveries,
                counters=dict(state.counters),
                ops_lost=self._ops_lost,
            )

    # --- managing ---------------------------------------------------------------------------------
    def cancel(self, key: str) -> bool:
        """Remove the pending job of ``key`` (a leased one is left to finish). True if there was
        one. Durable on return."""
        with self._decide() as w:
            slots = self._state.keys.get(key)
            if slots is None or slots[1] == NONE:
                return False
            w.write(ops.Cancel(slots[1]))
            return True

    def retry(self, job: Job | int, *, delay: float = 0.0) -> None:
        """Send a dead letter back to pending (deliveries start again at 0) after ``delay``
        seconds. If its key has a pending job already, the dead letter is dropped in its favour
        (latest wins). JobNotFoundError if it is not a dead letter. Durable on return."""
        job_id = job.id if isinstance(job, Job) else job
        delay_s = _seconds(delay, "delay")
        with self._decide() as w:
            if job_id not in self._state.dead:
                raise JobNotFoundError(self.path, f"dead letter {job_id}")
            w.write(ops.Retry(job_id, self._clock() + int(delay_s * _NS)))

    def purge(self, job: Job | int | None = None) -> int:
        """Remove one dead letter (JobNotFoundError if it is not one), or all of them (None).
        Returns how many went. Durable on return."""
        with self._decide() as w:
            if job is None:
                ids = sorted(self._state.dead)
            else:
                job_id = job.id if isinstance(job, Job) else job
                if job_id not in self._state.dead:
                    raise JobNotFoundError(self.path, f"dead letter {job_id}")
                ids = [job_id]
            w.write_many([ops.Purge(i) for i in ids])
            return len(ids)

    # --- closing ----------------------------------------------------------------------------------
    def __repr__(self) -> str:
        return f"<logspool.jobs.Journal {self.path!r}>"


def _jobs_list(jobs_: Iterable[Job], what: str) -> list[Job]:
    """``jobs_`` as a list, after checking that each is a Job and no lease is named twice."""
    items = list(jobs_)
    for job in items:
        if not isinstance(job, Job):
            raise TypeError(f"expected a logspool.jobs.Job, not {type(job).__name__}")
    if len({job.token for job in items}) != len(items):
        raise ValueError(f"{what} names the same lease twice")
    return items


def _check_max_deliveries(value: object) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not 1 <= value <= limits.JOB_MAX_DELIVERIES_LIMIT
    ):
        raise ValueError(
            f"max_deliveries must be an integer from 1 to {limits.JOB_MAX_DELIVERIES_LIMIT}, not {value!r}"
        )


def open(
    path: str | os.PathLike[str],
    *,
    create: bool = True,
    durability: Durability = "always",
    max_deliveries: int | None = None,
    segment_size_max: int | None = None,
    snapshot_ops_min: int = limits.JOB_SNAPSHOT_OPS_MIN,
    lock_timeout_s: float = limits.LOCK_TIMEOUT_S_DEFAULT,
    compact_in_background: bool = False,
    fs: FileSystem | None = None,
    clock: Callable[[], int] | None = None,
) -> Journal:
    """Open (and by default create) the job journal at ``path``. The options are those of
    ``Journal``, with the same defaults."""
    return Journal(
        path,
        create=create,
        durability=durability,
        max_deliveries=max_deliveries,
        segment_size_max=segment_size_max,
        snapshot_ops_min=snapshot_ops_min,
        lock_timeout_s=lock_timeout_s,
        compact_in_background=compact_in_background,
        fs=fs,
        clock=clock,
    )


# One signature in two places: open's options are Journal's, with the same defaults (checked here, at
# import, so that an option added to one and not the other fails every test).
assert open.__kwdefaults__ == Journal.__init__.__kwdefaults__, "open() and Journal() take other options"


__all__ = ["Idle", "Job", "JobStats", "Journal", "Work", "domain_of", "open"]
