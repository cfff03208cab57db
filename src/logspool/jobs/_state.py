"""The job journal's state: a deterministic fold over its ops, and the index that picks the next job.

The fold (``State.apply``) is a pure function of the ops in lsn order: every process that applies
the same ops holds the same jobs, keys, counters and fairness memory. The index (heaps by
priority, domain and time) is derived from that state by each process for itself; it only decides
which job a take proposes, and that choice is then written as a TAKE op that everyone applies.

Invariants (after every op; ``check()`` asserts them in the tests):
- A key has at most one leased job (``active``) and at most one pending job (``pending``); dead
  letters belong to no key. A pending job whose key has an active job is *blocked*: it runs after
  the active job is acked, nacked or dead (the seed's warning that dedup must ignore the
  "worked on" flag).
- A job's id is the position of the put that created it (a PUT's lsn; ``lsn << 16 | i`` for
  the i-th put of a PUT_MANY); a lease token is the position of the grant (a TAKE's lsn;
  ``lsn << 16 | i`` for the i-th job of a TAKE_MANY). Both grow, so ids are arrival order and a
  stale token never matches a later lease (fencing).
- An op that does not fit the state (an ack with a stale token) changes nothing but a counter:
  writers check under the log's writer lock before they write, so this only counts our own bugs or
  ops written by hand.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from .._untrack import UNTRACK
from . import _ops as ops
from ._ops import DEAD_LETTER, LEASED, PENDING

NONE = -1  # no job (0 is a real id)
COUNTERS = (
    "put",  # puts that created a job
    "updated",  # puts that merged into a pending job (latest wins)
    "taken",  # leases granted (deliveries)
    "redelivered",  # of those, jobs whose previous lease had expired
    "acked",
    "nacked",
    "extended",
    "expired",  # dropped by their TTL before anyone took them
    "dead",  # moved to the dead letters
    "superseded",  # a nacked or retried job dropped because a newer put for its key was pending
    "retried",  # dead letters sent back
    "purged",  # dead letters removed
    "cancelled",
    "released",  # leased jobs given back unstarted (their delivery not counted)
    "ops_ignored",  # ops that did not fit the state (see the module docstring)
)


class JobEntry:
    """One job in the state (mutable; the public ``Job`` is a frozen copy). Fields as ``JobRow``:
    strings, bytes and numbers, so it is in no reference cycle, and untracked by the cyclic
    collector once in a state (``_untrack``)."""

    id: int
    key: str
    domain: str
    payload: bytes
    priority: int
    state: int
    not_before_ns: int
    ttl_until_ns: int
    deliveries: int
    token: int
    lease_until_ns: int
    created_ns: int
    updated_ns: int
    error: str

    __slots__ = (
        "created_ns",
        "deliveries",
        "domain",
        "error",
        "id",
        "key",
        "lease_until_ns",
        "not_before_ns",
        "payload",
        "priority",
        "state",
        "token",
        "ttl_until_ns",
        "updated_ns",
    )

    def __init__(self, row: ops.JobRow) -> None:
        (
            self.id, self.key, self.domain, self.payload, self.priority, self.state,
            self.not_before_ns, self.ttl_until_ns, self.deliveries, self.token,
            self.lease_until_ns, self.created_ns, self.updated_ns, self.error,
        ) = row  # fmt: skip

    @classmethod
    def new(
        cls, job_id: int, ts: int, key: str, domain: str, payload: bytes, op: ops.Put | ops.PutMany
    ) -> JobEntry:
        """The pending job a put creates (written out: a put makes one on every process's fold)."""
        job = cls.__new__(cls)
        job.id, job.key, job.domain, job.payload = job_id, key, domain, payload
        job.priority, job.state = op.priority, PENDING
        job.not_before_ns, job.ttl_until_ns = op.not_before_ns, op.ttl_until_ns
        job.deliveries = job.token = job.lease_until_ns = 0
        job.created_ns = job.updated_ns = ts
        job.error = ""
        return job

    def row(self) -> ops.JobRow:
        return ops.JobRow(*(getattr(self, name) for name in ops.JobRow._fields))


@dataclass(slots=True)
class _Level:
    """The index of one priority: per-domain queues, and which domains to look at."""

    # domain -> heap of (not_before_ns, job id): the job id is its arrival order
    queues: dict[str, list[tuple[int, int]]]
    # domains whose head was ready: (last served lsn, head not_before, head id, domain)
    ready: list[tuple[int, int, int, str]]
    # domains to look at once the time passes: (time, domain); stale entries are harmless
    waiting: list[tuple[int, str]]
    # domain -> its entry in ``ready`` that stands (any other entry of the domain is dropped
    # when it surfaces): without it, every put would leave one more entry to look at per take
    placed: dict[str, tuple[int, int, int, str]]


def _merge(mode: int, old: int, new: int) -> int:
    if mode == ops.REPLACE:
        return new
    if mode == ops.KEEP:
        return old
    if mode == ops.EARLIEST:
        return min(old, new)
    return max(old, new)


class State:
    """Jobs, keys, counters and fairness memory after every op below ``next_lsn``; and the index."""

    def __init__(self, snapshot: ops.Snapshot | None = None) -> None:
        self.jobs: dict[int, JobEntry] = {}
        self.keys: dict[str, list[int]] = {}  # key -> [active id, pending id]
        self.dead: set[int] = set()
        self.counters = dict.fromkeys(COUNTERS, 0)
        self.served: dict[tuple[int, str], int] = {}
        # (priority, domain) -> how many jobs have it: the fairness memory of a pair is forgotten
        # with its last job, in the fold itself, so a state loaded from a snapshot is the state
        # the whole op log folds to (a domain that comes back counts as never served)
        self._pair_jobs: dict[tuple[int, str], int] = {}
        self.max_deliveries = 0  # 0 until the first CONFIG op: the journal's default applies
        self.next_lsn = 0
        if snapshot is not None:
            self.next_lsn = snapshot.next_lsn
            self.max_deliveries = snapshot.max_deliveries
            self.counters.update(snapshot.counters)
            self.served = dict(snapshot.served)
            for row in snapshot.jobs:
                job = JobEntry(row)
                if UNTRACK is not None:
                    UNTRACK(job)
                self.jobs[job.id] = job
                self._count_pair((job.priority, job.domain), 1)
                if job.state == DEAD_LETTER:
                    self.dead.add(job.id)
                else:
                    slots = self.keys.setdefault(job.key, [NONE, NONE])
                    slots[0 if job.state == LEASED else 1] = job.id
        self._rebuild_index()

    # --- snapshot ---------------------------------------------------------------------------------
    def snapshot(self, max_deliveries_default: int) -> ops.Snapshot:
        """The state as a snapshot (the fairness memory holds only pairs that have jobs)."""
        served = {pd: lsn for pd, lsn in self.served.items() if pd in self._pair_jobs}
        rows = [j.row() for j in sorted(self.jobs.values(), key=lambda j: j.id)]
        return ops.Snapshot(
            self.next_lsn, self.max_deliveries or max_deliveries_default, dict(self.counters), served, rows
        )

    # --- the fold ---------------------------------------------------------------------------------
    def apply(self, lsn: int, timestamp_ns: int, op: ops.Op) -> None:
        """Apply the op recorded at ``lsn`` (the log record's lsn and timestamp)."""
        assert lsn == self.next_lsn, (lsn, self.next_lsn)
        self.next_lsn = lsn + 1
        if isinstance(op, ops.PutMany):
            put = self._put
            for i, (key, domain, payload) in enumerate(op.items):
                put(ops.item_id(lsn, i), timestamp_ns, key, domain, payload, op)
            return
        if isinstance(op, ops.Put):
            self._put(lsn, timestamp_ns, op.key, op.domain, op.payload, op)
            return
        if isinstance(op, ops.Config):
            self.max_deliveries = op.max_deliveries
            return
        if isinstance(op, ops.TakeMany):
            leases = self.leases(lsn, timestamp_ns, op.lease_until_ns)
            for job_id in op.job_ids:
                leases.take(job_id)
            return
        if isinstance(op, ops.AckMany):
            for job_id, token in zip(op.job_ids, op.tokens, strict=True):
                self._ack(timestamp_ns, job_id, token)
            return
        job = self.jobs.get(op.job_id)
        if job is None or not self._fits(job, op):
            self.counters["ops_ignored"] += 1
            return
        job.updated_ns = timestamp_ns
        if isinstance(op, ops.Take):
            self._take(lsn, job, op.lease_until_ns)
        elif isinstance(op, ops.Ack):
            self.counters["acked"] += 1
            self._remove(job)
        elif isinstance(op, ops.Nack):
            self._nack(job, op)
        elif isinstance(op, ops.Extend):
            job.lease_until_ns = op.lease_until_ns
            heapq.heappush(self._leases, (op.lease_until_ns, job.id))
            self.counters["extended"] += 1
        elif isinstance(op, ops.Expire):
            self.counters["expired"] += 1
            self._remove(job)
        elif isinstance(op, ops.Dead):
            self._to_dead(job, op.reason)
        elif isinstance(op, ops.Retry):
            self._retry(job, op)
        elif isinstance(op, ops.Purge):
            self.counters["purged"] += 1
            self._remove(job)
        elif isinstance(op, ops.Cancel):
            self.counters["cancelled"] += 1
            self._remove(job)
        elif isinstance(op, ops.Release):
            self._release(job)

    def leases(self, lsn: int, timestamp_ns: int, lease_until_ns: int) -> Leases:
        """The TAKE_MANY at ``lsn``, applied a lease at a time: by the fold (``apply``), and by
        the writer that picks its jobs (each pick must see the ones before it taken)."""
        return Leases(self, lsn, timestamp_ns, lease_until_ns)

    def _take_one(self, token: int, timestamp_ns: int, job_id: int, lease_until_ns: int) -> bool:
        job = self.jobs.get(job_id)
        if job is None or not self._takeable(job):
            self.counters["ops_ignored"] += 1
            return False
        job.updated_ns = timestamp_ns
        self._take(token, job, lease_until_ns)
        return True

    def _ack(self, timestamp_ns: int, job_id: int, token: int) -> None:
        """One ack of an ACK_MANY, as ACK."""
        job = self.jobs.get(job_id)
        if job is None or job.state != LEASED or job.token != token:
            self.counters["ops_ignored"] += 1
            return
        job.updated_ns = timestamp_ns
        self.counters["acked"] += 1
        self._remove(job)

    def _takeable(self, job: JobEntry) -> bool:
        if job.state == LEASED:
            return True
        return job.state == PENDING and self.keys[job.key][0] == NONE

    def _fits(self, job: JobEntry, op: ops.Op) -> bool:
        if isinstance(op, ops.Take):
            return self._takeable(job)
        if isinstance(op, ops.Ack | ops.Nack | ops.Extend | ops.Release):
            return job.state == LEASED and job.token == op.token
        if isinstance(op, ops.Expire | ops.Cancel):
            return job.state == PENDING
        if isinstance(op, ops.Dead):
            return job.state != DEAD_LETTER
        return job.state == DEAD_LETTER  # Retry, Purge

    def _put(
        self, job_id: int, ts: int, key: str, domain: str, payload: bytes, op: ops.Put | ops.PutMany
    ) -> None:
        """A put of ``key`` (``op`` has its options) that creates job ``job_id`` or updates the
        key's pending job."""
        slots = self.keys.get(key)
        if slots is not None and slots[1] != NONE:
            job = self.jobs[slots[1]]
            old = (job.priority, job.domain, job.not_before_ns)
            job.payload = payload
            job.domain = domain
            job.priority = _merge(op.priority_merge, job.priority, op.priority)
            if (job.priority, job.domain) != old[:2]:
                self._count_pair((job.priority, job.domain), 1)
                self._count_pair(old[:2], -1)
            job.not_before_ns = _merge(op.not_before_merge, job.not_before_ns, op.not_before_ns)
            job.ttl_until_ns = op.ttl_until_ns
            job.updated_ns = ts
            self.counters["updated"] += 1
            if (job.priority, job.domain, job.not_before_ns) != old:
                self._enqueue(job)
        else:
            job = JobEntry.new(job_id, ts, key, domain, payload, op)
            if UNTRACK is not None:
                UNTRACK(job)
            self.jobs[job_id] = job
            self._count_pair((job.priority, domain), 1)
            if slots is None:
                self.keys[key] = [NONE, job_id]
            else:
                slots[1] = job_id
            self.counters["put"] += 1
            self._enqueue(job)
        if job.ttl_until_ns:
            heapq.heappush(self._ttls, (job.ttl_until_ns, job.id))

    def _take(self, token: int, job: JobEntry, lease_until_ns: int) -> None:
        slots = self.keys[job.key]
        if job.state == LEASED:
            self.counters["redelivered"] += 1
        else:
            slots[1] = NONE
            slots[0] = job.id
        job.state = LEASED
        job.token = token
        job.lease_until_ns = lease_until_ns
        job.deliveries += 1
        job.ttl_until_ns = 0  # a TTL drops jobs nobody took; this one was taken
        self.served[(job.priority, job.domain)] = token
        self.counters["taken"] += 1
        heapq.heappush(self._leases, (lease_until_ns, job.id))
        heapq.heappush(self._level(job.priority).waiting, (0, job.domain))  # its domain may have more

    def _nack(self, job: JobEntry, op: ops.Nack) -> None:
        self.counters["nacked"] += 1
        job.error = op.error
        if op.dead:
            self._to_dead(job, op.error)
            return
        self._give_back(job, op.not_before_ns)

    def _release(self, job: JobEntry) -> None:
        self.counters["released"] += 1
        job.deliveries -= 1  # the take that leased it did not deliver it
        self._give_back(job, job.not_before_ns)  # at its place: not_before and id unchanged

    def _give_back(self, job: JobEntry, not_before_ns: int) -> None:
        """A leased job becomes its key's pending job again, or is dropped if a newer put for the
        key is pending (latest wins: this older payload goes)."""
        slots = self.keys[job.key]
        if slots[1] != NONE:
            self.counters["superseded"] += 1
            self._remove(job)
            return
        slots[0] = NONE
        slots[1] = job.id
        job.state = PENDING
        job.token = 0
        job.lease_until_ns = 0
        job.not_before_ns = not_before_ns
        self._enqueue(job)

    def _to_dead(self, job: JobEntry, reason: str) -> None:
        self._unlink_key(job)
        job.state = DEAD_LETTER
        job.error = reason
        job.token = 0
        job.lease_until_ns = 0
        self.dead.add(job.id)
        self.counters["dead"] += 1

    def _retry(self, job: JobEntry, op: ops.Retry) -> None:
        self.counters["retried"] += 1
        slots = self.keys.get(job.key)
        if slots is not None and slots[1] != NONE:
            self.counters["superseded"] += 1
            self._remove(job)
            return
        self.dead.discard(job.id)
        if slots is None:
            self.keys[job.key] = [NONE, job.id]
        else:
            slots[1] = job.id
        job.state = PENDING
        job.deliveries = 0
        job.not_before_ns = op.not_before_ns
        self._enqueue(job)

    def _remove(self, job: JobEntry) -> None:
        del self.jobs[job.id]
        self._count_pair((job.priority, job.domain), -1)
        self.dead.discard(job.id)
        self._unlink_key(job)

    def _count_pair(self, pair: tuple[int, str], delta: int) -> None:
        count = self._pair_jobs.get(pair, 0) + delta
        if count:
            self._pair_jobs[pair] = count
        else:
            del self._pair_jobs[pair]
            self.served.pop(pair, None)

    def _unlink_key(self, job: JobEntry) -> None:
        """Take ``job`` out of its key's slots; a pending job it blocked becomes runnable."""
        slots = self.keys.get(job.key)
        if slots is None:
            return
        if slots[0] == job.id:
            slots[0] = NONE
            if slots[1] != NONE:
                self._enqueue(self.jobs[slots[1]])  # unblocked
        elif slots[1] == job.id:
            slots[1] = NONE
        if slots[0] == NONE and slots[1] == NONE:
            del self.keys[job.key]

    # --- the index --------------------------------------------------------------------------------
    def _rebuild_index(self) -> None:
        self._levels: dict[int, _Level] = {}
        self._leases: list[tuple[int, int]] = []
        self._ttls: list[tuple[int, int]] = []
        for job in self.jobs.values():
            if job.state == PENDING:
                self._enqueue(job)
                if job.ttl_until_ns:
                    self._ttls.append((job.ttl_until_ns, job.id))
            elif job.state == LEASED:
                self._leases.append((job.lease_until_ns, job.id))
        heapq.heapify(self._leases)
        heapq.heapify(self._ttls)

    def _level(self, priority: int) -> _Level:
        level = self._levels.get(priority)
        if level is None:
            level = self._levels[priority] = _Level({}, [], [], {})
        return level

    def _enqueue(self, job: JobEntry) -> None:
        level = self._level(job.priority)
        queue = level.queues.get(job.domain)
        if queue is None:
            queue = level.queues[job.domain] = []
        entry = (job.not_before_ns, job.id)
        heapq.heappush(queue, entry)
        if queue[0] is entry:
            # The domain's head changed: place it again when its time comes. (Behind the head, the
            # job waits for it: the head's place stands for the domain, in ``ready`` or
            # ``waiting``, and is looked at again when the head is taken or found stale.)
            heapq.heappush(level.waiting, (job.not_before_ns, job.domain))

    def _runnable(self, priority: int, domain: str, entry: tuple[int, int], now_ns: int) -> bool:
        """Whether a queue entry still stands for a job that may be delivered (at some time)."""
        job = self.jobs.get(entry[1])
        if job is None or job.priority != priority or job.domain != domain or job.not_before_ns != entry[0]:
            return False
        if job.state == PENDING:
            return self.keys[job.key][0] == NONE
        return job.state == LEASED and job.lease_until_ns <= now_ns

    def _head(self, priority: int, level: _Level, domain: str, now_ns: int) -> tuple[int, int] | None:
        queue = level.queues.get(domain)
        while queue:
            if self._runnable(priority, domain, queue[0], now_ns):
                return queue[0]
            heapq.heappop(queue)
        level.queues.pop(domain, None)
        return None

    def _place(
        self, priority: int, level: _Level, domain: str, now_ns: int
    ) -> tuple[int, int, int, str] | None:
        """Put the domain where its head says: in ``ready`` (returns the entry that stands for
        it there, if this call pushed it), or in ``waiting`` until its time."""
        head = self._head(priority, level, domain, now_ns)
        if head is None:
            level.placed.pop(domain, None)
            return None
        if head[0] <= now_ns:
            entry = (self.served.get((priority, domain), -1), head[0], head[1], domain)
            if level.placed.get(domain) != entry:
                level.placed[domain] = entry
                heapq.heappush(level.ready, entry)
                return entry
        else:
            heapq.heappush(level.waiting, (head[0], domain))
        return None

    def due(self, now_ns: int) -> tuple[list[int], list[int]]:
        """Jobs whose TTL passed untaken (to EXPIRE), and expired leases made runnable again."""
        expired: list[int] = []
        while self._ttls and self._ttls[0][0] <= now_ns:
            ttl, job_id = heapq.heappop(self._ttls)
            job = self.jobs.get(job_id)
            if job is not None and job.state == PENDING and job.ttl_until_ns == ttl:
                expired.append(job_id)
        lapsed: list[int] = []
        while self._leases and self._leases[0][0] <= now_ns:
            until, job_id = heapq.heappop(self._leases)
            job = self.jobs.get(job_id)
            if job is not None and job.state == LEASED and job.lease_until_ns == until:
                lapsed.append(job_id)
                self._enqueue(job)
        return expired, lapsed

    def pick(self, now_ns: int) -> JobEntry | None:
        """The next job to deliver at ``now_ns``: the smallest priority number with a ready job;
        within it, the domain served least recently (never served first); within the domain, the
        earliest not_before, then the earliest arrival. Call ``due`` first."""
        for priority in sorted(self._levels):
            level = self._levels[priority]
            # Entries placed by this call: their domain's head was found runnable at now_ns and
            # nothing has changed since, so the head need not be looked up again.
            fresh: dict[str, tuple[int, int, int, str]] = {}
            while level.waiting and level.waiting[0][0] <= now_ns:
                domain = heapq.heappop(level.waiting)[1]
                placed = self._place(priority, level, domain, now_ns)
                if placed is not None:
                    fresh[domain] = placed
            while level.ready:
                entry = level.ready[0]
                served, not_before, job_id, domain = entry
                if level.placed.get(domain) != entry:
                    heapq.heappop(level.ready)  # superseded by a newer entry of its domain
                    continue
                if fresh.get(domain) is entry:
                    return self.jobs[job_id]
                head = self._head(priority, level, domain, now_ns)
                if (
                    head == (not_before, job_id)
                    and not_before <= now_ns
                    and served == self.served.get((priority, domain), -1)
                ):
                    return self.jobs[job_id]
                heapq.heappop(level.ready)  # stale: place the domain again as it is now
                del level.placed[domain]
                self._place(priority, level, domain, now_ns)
            if not level.queues and not level.waiting:
                del self._levels[priority]
        if self._index_size() > 4 * len(self.jobs) + 10_000:
            self._rebuild_index()
        return None

    def next_at(self) -> int | None:
        """The earliest time (ns) at which ``pick`` may find a job it cannot find now, or None.
        Early rather than late: stale entries can only make a waiter wake and look again."""
        times = [level.waiting[0][0] for level in self._levels.values() if level.waiting]
        leases = self._leases
        while leases:  # (drop the stale head: a lease acked, nacked or extended since)
            until, job_id = leases[0]
            job = self.jobs.get(job_id)
            if job is not None and job.state == LEASED and job.lease_until_ns == until:
                times.append(until)
                break
            heapq.heappop(leases)
        return min(times) if times else None

    def _index_size(self) -> int:
        size = len(self._leases) + len(self._ttls)
        for level in self._levels.values():
            size += len(level.ready) + len(level.waiting) + sum(len(q) for q in level.queues.values())
        return size

    # --- checks (tests) ---------------------------------------------------------------------------
    def check(self) -> None:
        """Assert the invariants of the module docstring (for tests; O(jobs))."""
        for key, (active, pending) in self.keys.items():
            assert active != NONE or pending != NONE, key
            if active != NONE:
                assert self.jobs[active].state == LEASED and self.jobs[active].key == key
            if pending != NONE:
                assert self.jobs[pending].state == PENDING and self.jobs[pending].key == key
        for job in self.jobs.values():
            if job.state == DEAD_LETTER:
                assert job.id in self.dead
            else:
                assert self.keys[job.key][0 if job.state == LEASED else 1] == job.id, job.id
        assert all(self.jobs[i].state == DEAD_LETTER for i in self.dead)
        pairs: dict[tuple[int, str], int] = {}
        for job in self.jobs.values():
            pairs[(job.priority, job.domain)] = pairs.get((job.priority, job.domain), 0) + 1
        assert pairs == self._pair_jobs
        assert self.served.keys() <= pairs.keys()


class Leases:
    """One TAKE_MANY being applied (``State.leases``): the i-th job taken gets the lease token
    ``ops.item_id(lsn, i)``; a job that cannot be taken is counted in ``ops_ignored`` and still
    holds its index, as in the op (the fold and the writer agree on every token)."""

    __slots__ = ("_state", "job_ids", "lease_until_ns", "lsn", "timestamp_ns")

    def __init__(self, state: State, lsn: int, timestamp_ns: int, lease_until_ns: int) -> None:
        self._state = state
        self.lsn = lsn
        self.timestamp_ns = timestamp_ns
        self.lease_until_ns = lease_until_ns
        self.job_ids: list[int] = []

    def take(self, job_id: int) -> bool:
        """Lease ``job_id`` as the op's next entry; False if it cannot be taken."""
        token = ops.item_id(self.lsn, len(self.job_ids))
        self.job_ids.append(job_id)
        return self._state._take_one(token, self.timestamp_ns, job_id, self.lease_until_ns)

    def op(self) -> ops.TakeMany:
        """The op these leases make."""
        return ops.TakeMany(tuple(self.job_ids), self.lease_until_ns)
