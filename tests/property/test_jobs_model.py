"""The job journal against a plain in-memory model, driven by hypothesis.

The model is the issue's rules written as directly as possible (lists and loops, no heaps): latest
wins for a pending key, a job being worked on is left alone, order by priority, then the domain
served least recently, then not_before, then arrival; leases hide a job until they expire; stale
tokens are refused; max_deliveries leads to the dead letters; TTLs drop untaken jobs. Every rule
runs the same call on a real journal (real files, a hand-moved clock) and on the model and
compares; the journal is closed and reopened (sometimes after a snapshot with compaction) at
random, and after each step every key's jobs, the dead letters and the counts must agree.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass

import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from logspool import jobs
from logspool.errors import LeaseExpiredError

NS = 10**9
KEYS = ["a:1", "a:2", "a:3", "b:1", "b:2", "c"]
MAX_DELIVERIES = 2


@dataclass
class MJob:
    id: int
    key: str
    payload: bytes
    priority: int
    not_before: int
    ttl_until: int
    state: str = "pending"
    deliveries: int = 0
    token: int = 0
    lease_until: int = 0
    error: str = ""

    @property
    def domain(self) -> str:
        return jobs.domain_of(self.key)


class JournalModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="jobs-model-")
        self.now = 1_800_000_000 * NS
        self.journal = self._open()
        self.jobs: dict[int, MJob] = {}
        self.served: dict[tuple[int, str], int] = {}
        self.serial = 0
        self.held: list[jobs.Job] = []  # leases handed out (some stale by now)

    def _open(self) -> jobs.Journal:
        return jobs.open(
            self.dir + "/j",
            clock=lambda: self.now,
            max_deliveries=MAX_DELIVERIES,
            snapshot_ops_min=25,
            segment_size_max=4096,
        )

    def teardown(self) -> None:
        self.journal.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # --- model helpers ----------------------------------------------------------------------------
    def live(self, key: str) -> list[MJob]:
        js = [j for j in self.jobs.values() if j.key == key and j.state != "dead"]
        return sorted(js, key=lambda j: j.state != "leased")

    def pending(self, key: str) -> MJob | None:
        return next((j for j in self.live(key) if j.state == "pending"), None)

    def active(self, key: str) -> MJob | None:
        return next((j for j in self.live(key) if j.state == "leased"), None)

    def forget_empty_pairs(self) -> None:
        """Fairness memory goes with the last job of its (priority, domain) pair."""
        pairs = {(j.priority, j.domain) for j in self.jobs.values()}
        self.served = {pd: n for pd, n in self.served.items() if pd in pairs}

    def model_take(self) -> MJob | None:
        for j in list(self.jobs.values()):  # TTLs first
            if j.state == "pending" and j.ttl_until and j.ttl_until <= self.now:
                del self.jobs[j.id]
        self.forget_empty_pairs()
        for _ in range(100):
            ready = [
                j
                for j in self.jobs.values()
                if (j.state == "pending" and self.active(j.key) is None and j.not_before <= self.now)
                or (j.state == "leased" and j.lease_until <= self.now)
            ]
            if not ready:
                return None
            p = min(j.priority for j in ready)
            at_p = [j for j in ready if j.priority == p]
            best = min(
                at_p,
                key=lambda j: (self.served.get((p, j.domain), -1), j.not_before, j.id),
            )
            # the domain's head is its earliest job: choose by domain, then within it
            dom = best.domain
            head = min((j for j in at_p if j.domain == dom), key=lambda j: (j.not_before, j.id))
            if head.deliveries >= MAX_DELIVERIES:
                head.state = "dead"
                continue
            return head
        raise AssertionError("model loop")

    # --- rules ------------------------------------------------------------------------------------
    @rule(
        key=st.sampled_from(KEYS),
        payload=st.binary(max_size=8),
        priority=st.sampled_from([None, 0, 5, 5, 200]),
        delay=st.sampled_from([None, None, 0, 3, 20]),
        ttl=st.sampled_from([None, None, 10]),
    )
    def put(self, key: str, payload: bytes, priority: int | None, delay: int | None, ttl: int | None) -> None:
        lsn = self.journal.put(key, payload, priority=priority, delay=delay, ttl=ttl)
        pend = self.pending(key)
        ttl_until = self.now + ttl * NS if ttl else 0
        if pend is not None:
            pend.payload = payload
            pend.ttl_until = ttl_until
            if priority is not None:
                pend.priority = priority
            if delay is not None:
                pend.not_before = self.now + delay * NS
        else:
            nb = self.now + (delay or 0) * NS
            self.jobs[lsn] = MJob(lsn, key, payload, 128 if priority is None else priority, nb, ttl_until)

    @rule(lease=st.sampled_from([5, 30]))
    def take(self, lease: int) -> None:
        got = self.journal.take(lease=lease)
        want = self.model_take()
        if want is None:
            assert not got, f"journal gave {got} where the model has nothing ready"
            return
        assert got, f"journal idle where the model takes {want}"
        self._leased(want, got, lease)

    @rule(count=st.sampled_from([1, 2, 5]), lease=st.sampled_from([5, 30]))
    def take_many(self, count: int, lease: int) -> None:
        got = self.journal.take_many(count, lease)
        assert 0 <= len(got) <= count
        for i in range(count):
            want = self.model_take()
            if want is None:
                assert len(got) == i, f"journal gave {got[i:]} where the model has nothing ready"
                return
            assert i < len(got), f"journal gave {len(got)} jobs where the model takes {want} next"
            self._leased(want, got[i], lease)

    def _leased(self, want: MJob, got: jobs.Job, lease: int) -> None:
        assert (got.id, got.key, got.payload) == (want.id, want.key, want.payload)
        want.state = "leased"
        want.deliveries += 1
        want.token = got.token
        want.lease_until = self.now + lease * NS
        want.ttl_until = 0
        self.serial += 1
        self.served[(want.priority, want.domain)] = self.serial
        assert got.deliveries == want.deliveries
        self.held.append(got)

    def _lease_ok(self, job: jobs.Job) -> MJob | None:
        m = self.jobs.get(job.id)
        return m if m is not None and m.state == "leased" and m.token == job.token else None

    @precondition(lambda self: self.held)
    @rule(i=st.integers(0, 100), how=st.sampled_from(["ack", "nack", "nack-later", "extend", "release"]))
    def settle(self, i: int, how: str) -> None:
        job = self.held[i % len(self.held)]
        m = self._lease_ok(job)
        try:
            if how == "ack":
                self.journal.ack(job)
            elif how == "extend":
                self.journal.extend(job, 30)
            elif how == "release":
                self.journal.release(job)
            else:
                self.journal.nack(job, delay=7 if how == "nack-later" else 0, error=how)
        except LeaseExpiredError:
            assert m is None, f"{how} refused a valid lease {job}"
            self.held.remove(job)
            return
        assert m is not None, f"{how} accepted a stale lease {job}"
        if how == "ack":
            del self.jobs[m.id]
            self.held.remove(job)
        elif how == "extend":
            m.lease_until = self.now + 30 * NS
        elif how == "release":  # back at its place (not_before unchanged), the delivery uncounted
            self.held.remove(job)
            m.deliveries -= 1
            if self.pending(m.key) is not None:
                del self.jobs[m.id]  # superseded by the newer put
            else:
                m.state, m.token, m.lease_until = "pending", 0, 0
        else:
            self.held.remove(job)
            m.error = how
            if m.deliveries >= MAX_DELIVERIES:
                m.state = "dead"
            elif self.pending(m.key) is not None:
                del self.jobs[m.id]  # superseded by the newer put
            else:
                m.state, m.token = "pending", 0
                m.not_before = self.now + (7 if how == "nack-later" else 0) * NS

    @precondition(lambda self: self.held)
    @rule(picks=st.lists(st.integers(0, 100), min_size=1, max_size=4, unique=True))
    def ack_many(self, picks: list[int]) -> None:
        chosen = list({id(j): j for j in (self.held[i % len(self.held)] for i in picks)}.values())
        valid = [self._lease_ok(job) for job in chosen]
        try:
            self.journal.ack_many(chosen)
        except LeaseExpiredError:
            assert None in valid, f"ack_many refused valid leases {chosen}"
            return  # all or none: nothing was acked
        assert None not in valid, f"ack_many accepted a stale lease among {chosen}"
        for job, m in zip(chosen, valid, strict=True):
            assert m is not None
            del self.jobs[m.id]
            self.held.remove(job)

    @rule(seconds=st.sampled_from([1, 4, 8, 31]))
    def advance(self, seconds: int) -> None:
        self.now += seconds * NS

    @rule(key=st.sampled_from(KEYS))
    def cancel(self, key: str) -> None:
        pend = self.pending(key)
        assert self.journal.cancel(key) is (pend is not None)
        if pend is not None:
            del self.jobs[pend.id]

    @precondition(lambda self: any(j.state == "dead" for j in self.jobs.values()))
    @rule(purge=st.booleans())
    def dead_letter(self, purge: bool) -> None:
        dead = min(j.id for j in self.jobs.values() if j.state == "dead")
        m = self.jobs[dead]
        if purge:
            self.journal.purge(dead)
            del self.jobs[dead]
            return
        self.journal.retry(dead)
        if self.pending(m.key) is not None:
            del self.jobs[dead]
        else:
            m.state, m.deliveries, m.not_before = "pending", 0, self.now

    @rule(snapshot=st.booleans())
    def reopen(self, snapshot: bool) -> None:
        if snapshot:
            self.journal.snapshot()
        self.journal.close()
        self.journal = self._open()

    # --- invariants -------------------------------------------------------------------------------
    @invariant()
    def same_jobs(self) -> None:
        self.forget_empty_pairs()  # (after each rule: no rule empties a pair and fills it again)
        for key in KEYS:
            got = [(j.id, j.state, j.payload, j.priority, j.deliveries) for j in self.journal.get(key)]
            want = [(j.id, j.state, j.payload, j.priority, j.deliveries) for j in self.live(key)]
            assert got == want, key
        dead = [(j.id, j.key, j.deliveries) for j in self.journal.dead_letters()]
        assert dead == sorted((j.id, j.key, j.deliveries) for j in self.jobs.values() if j.state == "dead")
        self.journal._state.check()


TestJournalModel = JournalModel.TestCase
TestJournalModel.settings = settings(max_examples=80, stateful_step_count=50, deadline=None)
