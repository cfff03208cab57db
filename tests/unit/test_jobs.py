"""The job journal as a user drives it: ordering, fairness, latest-wins, leases and fencing, dead
letters, TTL, the work() iterator, waiting, snapshots and compaction, and bad input.

Real journals in tmp_path. Time is the one thing the tests move by hand: the journal's ``clock``
seam (ns since the epoch); everything else (files, the op log, fsync) is real.
"""

from __future__ import annotations

import gc
import json
import os
import struct
import sys
import threading
import time
from pathlib import Path

import pytest

import logspool
from logspool import _format as fmt
from logspool import jobs
from logspool.errors import (
    CorruptionError,
    JobNotFoundError,
    LeaseExpiredError,
    NotALogError,
    UnsupportedVersionError,
)
from logspool.jobs import _ops as jops
from tests.clock import Clock


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def journal(tmp_path: Path, clock: Clock) -> jobs.Journal:
    j = jobs.open(tmp_path / "j", clock=clock)
    yield j
    j.close()


def keys_in_take_order(j: jobs.Journal, n: int) -> list[str]:
    out = []
    for _ in range(n):
        job = j.take()
        assert job, f"expected a job, got {job}"
        out.append(job.key)
        j.ack(job)
    return out


def test_take_orders_by_priority_then_not_before_then_arrival(journal: jobs.Journal, clock: Clock) -> None:
    journal.put("a", priority=5)
    journal.put("b", priority=1)
    journal.put("c", priority=5, not_before=clock.ns / 1e9 - 10)  # earlier not_before than a
    journal.put("d", priority=5)
    assert keys_in_take_order(journal, 4) == ["b", "c", "a", "d"]
    assert not journal.take()


def test_domains_are_served_fairly_within_a_priority(journal: jobs.Journal) -> None:
    for i in range(6):
        journal.put(f"https://busy.example/{i}")
    journal.put("https://quiet.example/1")
    journal.put("https://other.example/1")
    order = [jobs.domain_of(k) for k in keys_in_take_order(journal, 8)]
    # the busy domain arrived first but cannot take more than one turn in a row while others wait
    assert order[:3] == ["busy.example", "quiet.example", "other.example"]
    assert order[3:] == ["busy.example"] * 5


def test_a_more_urgent_priority_beats_fairness(journal: jobs.Journal) -> None:
    journal.put("x:1", priority=9)
    journal.put("y:1", priority=0)
    journal.put("y:2", priority=0)
    assert keys_in_take_order(journal, 3) == ["y:1", "y:2", "x:1"]


def test_delayed_job_is_invisible_until_its_time_and_idle_says_when(
    journal: jobs.Journal, clock: Clock
) -> None:
    journal.put("later", delay=30)
    idle = journal.take()
    assert isinstance(idle, jobs.Idle) and not idle
    assert idle.next_at == pytest.approx(clock.ns / 1e9 + 30)
    clock.advance(29.9)
    assert not journal.take()
    clock.advance(0.2)
    job = journal.take()
    assert job and job.key == "later"


def test_put_on_a_pending_key_updates_it_latest_wins(journal: jobs.Journal, clock: Clock) -> None:
    first = journal.put("k", b"v1", priority=50, delay=10)
    journal.put("k", b"v2")  # priority and not_before left out: kept
    [job] = journal.get("k")
    assert (job.id, job.payload, job.priority, job.not_before) == (first, b"v2", 50, clock.ns / 1e9 + 10)
    journal.put("k", b"v3", priority=70, priority_merge="earliest", delay=5, not_before_merge="latest")
    [job] = journal.get("k")
    assert (job.payload, job.priority, job.not_before) == (b"v3", 50, clock.ns / 1e9 + 10)
    journal.put("k", b"v4", priority=70, delay=1)  # replace (the default for given values)
    [job] = journal.get("k")
    assert (job.payload, job.priority, job.not_before) == (b"v4", 70, clock.ns / 1e9 + 1)
    journal.put("k", b"v5", priority=90, priority_merge="keep", delay=0, not_before_merge="earliest")
    [job] = journal.get("k")
    assert (job.payload, job.priority, job.not_before, job.id) == (b"v5", 70, clock.ns / 1e9, first)
    st = journal.stats()
    assert st.counters["put"] == 1 and st.counters["updated"] == 4 and st.pending == 1


def test_put_while_leased_makes_the_next_job_which_waits_for_the_first(journal: jobs.Journal) -> None:
    journal.put("k", b"old")
    running = journal.take()
    assert running and running.payload == b"old"
    journal.put("k", b"new")
    journal.put("k", b"newer")  # merges into the pending one, not into the running one
    assert [(j.state, j.payload) for j in journal.get("k")] == [("leased", b"old"), ("pending", b"newer")]
    assert not journal.take(), "the next job of a key must wait while the first runs"
    assert journal.stats().blocked == 1
    journal.ack(running)
    nxt = journal.take()
    assert nxt and nxt.payload == b"newer" and nxt.id != running.id


def test_an_expired_lease_is_delivered_again_and_the_old_token_is_fenced(
    journal: jobs.Journal, clock: Clock
) -> None:
    journal.put("k", b"x")
    first = journal.take(lease=10)
    assert first
    idle = journal.take()
    assert not idle and idle.next_at == pytest.approx(first.lease_until)
    clock.advance(11)
    second = journal.take(lease=10)
    assert second and second.id == first.id and second.deliveries == 2 and second.token > first.token
    with pytest.raises(LeaseExpiredError) as err:
        journal.ack(first)
    assert err.value.current_token == second.token and "taken again" in str(err.value)
    with pytest.raises(LeaseExpiredError):
        journal.nack(first)
    with pytest.raises(LeaseExpiredError):
        journal.extend(first, 60)
    journal.ack(second)
    with pytest.raises(LeaseExpiredError) as gone:
        journal.ack(second)
    assert gone.value.current_token is None
    assert journal.stats().counters["redelivered"] == 1


def test_an_expired_lease_not_taken_again_still_acks(journal: jobs.Journal, clock: Clock) -> None:
    journal.put("k")
    job = journal.take(lease=1)
    clock.advance(5)
    journal.ack(job)
    assert not journal.take() and journal.get("k") == []


def test_extend_renews_the_lease(journal: jobs.Journal, clock: Clock) -> None:
    journal.put("k")
    job = journal.take(lease=10)
    clock.advance(8)
    job = journal.extend(job, 10)
    assert job.lease_until == pytest.approx(clock.ns / 1e9 + 10)
    clock.advance(8)
    assert not journal.take(), "an extended lease must hide the job"
    journal.ack(job)


def test_nack_returns_the_job_after_its_delay_and_keeps_the_error(
    journal: jobs.Journal, clock: Clock
) -> None:
    journal.put("k", b"p")
    job = journal.take()
    journal.nack(job, delay=5, error="timeout talking to k")
    assert not journal.take()
    clock.advance(5)
    again = journal.take()
    assert again and again.deliveries == 2 and again.error == "timeout talking to k"


def test_nack_with_a_newer_put_pending_drops_the_old_payload(journal: jobs.Journal) -> None:
    journal.put("k", b"old")
    job = journal.take()
    journal.put("k", b"new")
    journal.nack(job)
    [pending] = journal.get("k")
    assert pending.payload == b"new" and pending.state == "pending"
    assert journal.stats().counters["superseded"] == 1


def test_after_max_deliveries_a_job_goes_to_the_dead_letters(tmp_path: Path, clock: Clock) -> None:
    with jobs.open(tmp_path / "j", clock=clock, max_deliveries=2) as j:
        j.put("k", b"p")
        j.nack(j.take(), error="e1")
        j.nack(j.take(), error="e2")  # the second delivery was the last: dead now
        assert not j.take()
        [dead] = j.dead_letters()
        assert (dead.key, dead.state, dead.deliveries, dead.error) == ("k", "dead", 2, "e2")
        j.put("k", b"fresh")  # the key is free again
        fresh = j.take()
        assert fresh and fresh.payload == b"fresh"
        j.ack(fresh)
        j.retry(dead)
        back = j.take()
        assert back and back.id == dead.id and back.deliveries == 1
        j.nack(back)
        j.nack(j.take())
        assert len(j.dead_letters()) == 1
        assert j.purge() == 1 and j.dead_letters() == []
        with pytest.raises(JobNotFoundError):
            j.retry(dead)
        with pytest.raises(JobNotFoundError):
            j.purge(dead.id)


def test_a_lease_that_expires_at_max_deliveries_dies_at_the_next_take(tmp_path: Path, clock: Clock) -> None:
    with jobs.open(tmp_path / "j", clock=clock, max_deliveries=1) as j:
        j.put("k")
        j.put("m")
        assert j.take(lease=1).key == "k"
        clock.advance(2)
        nxt = j.take()
        assert nxt and nxt.key == "m"
        [dead] = j.dead_letters()
        assert dead.key == "k" and "max_deliveries 1" in dead.error


def test_max_deliveries_is_stored_in_the_journal(tmp_path: Path) -> None:
    with jobs.open(tmp_path / "j", max_deliveries=3) as j:
        assert j.max_deliveries == 3
    with jobs.open(tmp_path / "j") as j:
        assert j.max_deliveries == 3
        j.configure(max_deliveries=7)
    with jobs.open(tmp_path / "j") as j:
        assert j.max_deliveries == 7


def test_ttl_drops_a_job_nobody_took(journal: jobs.Journal, clock: Clock) -> None:
    journal.put("short", ttl=5)
    journal.put("taken", ttl=5)
    journal.put("z:never")  # no ttl
    clock.advance(1)
    taken = journal.take()
    assert taken and taken.key == "short"
    journal.nack(taken)  # taken once: its TTL no longer applies
    clock.advance(10)
    keys = keys_in_take_order(journal, 2)
    assert sorted(keys) == ["short", "z:never"]
    assert journal.stats().counters["expired"] == 1
    assert journal.get("taken") == []


def test_cancel_removes_only_the_pending_job(journal: jobs.Journal) -> None:
    journal.put("k", b"1")
    running = journal.take()
    journal.put("k", b"2")
    assert journal.cancel("k") is True
    assert journal.cancel("k") is False
    assert [j.state for j in journal.get("k")] == ["leased"]
    journal.ack(running)
    assert journal.get("k") == []


def test_work_acks_each_job_and_nacks_on_exception(journal: jobs.Journal) -> None:
    for i in range(3):
        journal.put(f"k{i}")
    seen = []
    with pytest.raises(RuntimeError), journal.work(lease=30, idle_timeout=0) as jobs_iter:
        for job in jobs_iter:
            seen.append(job.key)
            if job.key == "k1":
                raise RuntimeError("boom")
    assert seen == ["k0", "k1"]
    [failed] = journal.get("k1")
    assert failed.state == "pending" and "boom" in failed.error
    assert journal.get("k0") == []
    with journal.work(idle_timeout=0) as w:
        for job in w:
            if job.key == "k2":
                break  # leaving a with-block without an error acks
    assert journal.get("k2") == []


def test_bare_work_loop_gives_the_job_back_when_left(journal: jobs.Journal) -> None:
    journal.put("k")
    for job in journal.work(idle_timeout=0):
        assert job.key == "k"
        break
    [back] = journal.get("k")
    assert back.state == "pending"
    for job in journal.work(idle_timeout=0):
        journal.ack(job)  # settled by hand: the iterator does not ack it again
        break
    assert journal.get("k") == []


def test_work_in_batches_acks_each_batch_with_the_next_take(journal: jobs.Journal) -> None:
    journal.put_many([(f"k{i}", b"") for i in range(7)])
    seen, leased = [], []
    with journal.work(idle_timeout=0, batch=3) as w:
        for job in w:
            seen.append(job.key)
            stats = journal.stats()
            leased.append((stats.leased, stats.counters["acked"]))
    assert seen == [f"k{i}" for i in range(7)]
    # three leased at once; the finished ones acked only when the next batch is taken
    assert leased == [(3, 0), (3, 0), (3, 0), (3, 3), (3, 3), (3, 3), (1, 6)]
    assert journal.jobs() == [] and w.done_count == 7


def test_release_gives_a_job_back_at_its_place_without_counting_the_delivery(tmp_path: Path) -> None:
    with jobs.open(tmp_path / "j", max_deliveries=1) as j:
        j.put_many([("a", b""), ("b", b"")])
        a = j.take()
        assert isinstance(a, jobs.Job) and a.key == "a"
        j.release(a)
        with pytest.raises(LeaseExpiredError):
            j.ack(a)  # the lease is gone with the release
        again = j.take()  # first again, and not buried though max_deliveries is 1
        assert isinstance(again, jobs.Job) and again.key == "a" and again.deliveries == 1
        j.nack(again)  # a delivery that counted: now it goes to the dead letters
        assert [d.key for d in j.dead_letters()] == ["a"]
        assert j.stats().counters["released"] == 1


def test_release_many_is_all_or_none_and_latest_wins(journal: jobs.Journal, clock: Clock) -> None:
    journal.put_many([("a", b"1"), ("b", b""), ("c", b"")])
    [a] = journal.take_many(1, lease=60)
    [b] = journal.take_many(1, lease=5)
    [c] = journal.take_many(1, lease=60)
    clock.advance(6)
    b2 = journal.take()  # b's lease ran out and another worker has it
    assert isinstance(b2, jobs.Job) and b2.key == "b"
    with pytest.raises(LeaseExpiredError, match=f"job {b.id}"):
        journal.release_many([a, b, c])
    assert journal.get("a")[0].state == "leased", "all or none: a stays leased"
    journal.put("a", b"2")  # a newer put for a key whose job is leased
    journal.release_many([a, c])
    [pending] = journal.get("a")  # the released older payload gave way to the newer one
    assert pending.payload == b"2" and journal.stats().counters["superseded"] == 1
    assert journal.get("c")[0].state == "pending"
    with pytest.raises(TypeError, match="release_many takes a list"):
        journal.release_many(b2)  # type: ignore[arg-type]


def test_the_journal_format_version_rises_with_the_first_op_that_needs_it(tmp_path: Path) -> None:
    path = tmp_path / "j"

    class VersionOneReader(jobs.Journal):
        VERSION = 1  # code that knows no RELEASE op

    class VersionTwoReader(jobs.Journal):
        VERSION = 2  # code that knows no TAKE_MANY or ACK_MANY op

    class VersionThreeReader(jobs.Journal):
        VERSION = 3  # code that knows no PUT_MANY op

    def marker() -> int:
        return int(json.loads((path / "JOURNAL").read_text())["version"])

    with jobs.open(path) as j:
        stale = jobs.open(path)  # reads the marker at version 1 and keeps it
        with j._decide() as w:  # a put as versions 1-3 wrote it (a PUT op)
            w.write(jops.Put("a", "", b"", 128, j._clock(), 0, jops.KEEP, jops.KEEP))
        assert marker() == 1, "a journal keeps the lowest version that holds what it holds"
        assert j.get("a")[0].id == 0, "a PUT's job id is its lsn"
        VersionOneReader(path).close()
        # a lease as version 1 wrote it (a TAKE op), released by this code: a RELEASE needs 2
        with j._decide() as w:
            w.write(jops.Take(0, j._clock() + 60 * 10**9))
        [old] = j.jobs(state="leased")
        assert old.token == 1, "a TAKE's token is its lsn"
        j.release(old)
        assert marker() == 2
    with pytest.raises(UnsupportedVersionError, match="version 2"):
        VersionOneReader(path)
    VersionTwoReader(path).close()
    with jobs.open(path) as j:
        job = j.take()
        assert isinstance(job, jobs.Job) and job.key == "a"
        assert job.token == 3 << jops.INDEX_BITS, "the first lease of the TAKE_MANY at lsn 3"
        assert marker() == 3
    with pytest.raises(UnsupportedVersionError, match="version 3"):
        VersionTwoReader(path)
    VersionThreeReader(path).close()
    with jobs.open(path) as j:
        b = j.put("b")
        assert marker() == 4
        assert b == 4 << jops.INDEX_BITS, "the first put of the PUT_MANY at lsn 4"
        assert [x.id for x in j.get("b")] == [b] and b > job.id, "ids grow through the upgrade"
        c, d = j.put_many([("c", b""), ("d", b"")])
        assert (c, d) == (5 << jops.INDEX_BITS, 5 << jops.INDEX_BITS | 1)
        assert [x.key for x in j.jobs(state="pending")] == ["b", "c", "d"], "arrival order"
    with pytest.raises(UnsupportedVersionError, match="version 4"):
        VersionThreeReader(path)
    with stale:  # a handle that raises the version from a stale reading never lowers it
        assert stale._version == 1
        stale.release(stale.take_many(1)[0])
        assert marker() == 4 and stale._version == 4
    with jobs.open(path) as j:
        assert [x.key for x in j.jobs(state="leased")] == ["a"]
        j.ack(job)
        assert j.stats().counters["acked"] == 1


def test_work_in_batches_settles_everything_when_the_loop_ends_early(journal: jobs.Journal) -> None:
    journal.put_many([(f"k{i}", b"") for i in range(5)])
    with pytest.raises(RuntimeError), journal.work(idle_timeout=0, batch=4) as w:
        for job in w:
            if job.key == "k1":
                raise RuntimeError("boom")
    assert journal.get("k0") == [], "finished before the error: acked"
    [failed] = journal.get("k1")
    assert failed.state == "pending" and "boom" in failed.error and failed.not_before > time.time()
    for key in ("k2", "k3"):  # leased with the batch, never started: released, not counted
        [back] = journal.get(key)
        assert back.state == "pending" and back.deliveries == 0 and back.error == ""
    assert w.done_count == 1 and w.failed_count == 1
    assert journal.stats().counters["released"] == 2 and journal.stats().counters["nacked"] == 1
    for job in journal.work(idle_timeout=0, batch=10):  # a bare loop: break gives the job back
        if job.key == "k3":
            break
    # k2 finished: acked; k3 left with the break and k4 never started: both given back
    assert [j.key for j in journal.jobs(state="pending")] == ["k1", "k3", "k4"]
    assert journal.stats().counters["acked"] == 2


def test_work_in_batches_acks_the_rest_when_a_finished_lease_was_lost(
    journal: jobs.Journal, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    journal.put_many([("a", b""), ("b", b""), ("c", b"")])
    w = journal.work(lease=5, idle_timeout=0, batch=2)
    assert next(w).key == "a"
    clock.advance(6)  # both leases of the batch run out; another worker takes "a" again
    other = journal.take()
    assert other and other.key == "a"
    assert next(w).key == "b"  # "b" was held: its lease ran out but nobody took it
    assert next(w).key == "c"  # the batch's acks failed for "a": "b" is acked on its own
    assert "lease was lost" in caplog.text
    assert journal.get("b") == [] and journal.get("a")[0].token == other.token
    w.close()
    assert [j.key for j in journal.jobs(state="pending")] == ["c"]
    with pytest.raises(ValueError, match="batch must be an integer"):
        journal.work(batch=0)


def test_take_with_wait_wakes_on_a_put_from_another_handle(tmp_path: Path) -> None:
    with jobs.open(tmp_path / "j") as worker:
        assert not worker.take()

        def produce() -> None:
            time.sleep(0.3)
            with jobs.open(tmp_path / "j") as producer:
                producer.put("k", b"hello")

        t = threading.Thread(target=produce)
        start = time.monotonic()
        t.start()
        job = worker.take(wait=120)
        took = time.monotonic() - start
        t.join()
        assert job and job.payload == b"hello"
        # Woken by the put (0.3 s in), not by the end of its 120 s wait: no bound on the
        # machine's speed beyond that.
        assert 0.25 < took < 120, took


def test_take_with_wait_wakes_when_a_delay_ends(tmp_path: Path) -> None:
    with jobs.open(tmp_path / "j") as j:
        j.put("k", delay=0.3)
        start = time.monotonic()
        job = j.take(wait=5)
        assert job and 0.25 < time.monotonic() - start < 2


def test_state_survives_reopen_and_snapshots_compact_the_op_log(tmp_path: Path, clock: Clock) -> None:
    path = tmp_path / "j"
    with jobs.open(path, clock=clock, snapshot_ops_min=200, segment_size_max=8192) as j:
        for i in range(600):
            j.put(f"k{i % 50}", b"%d" % i)
            if i % 3 == 0:
                job = j.take()
                if job:
                    j.ack(job)
        before = j.stats()
        lsn = j.snapshot()
        assert lsn == before.next_lsn
    snaps = sorted(n for n in os.listdir(path) if n.startswith("snapshot.") and n != "snapshot.lock")
    assert 1 <= len(snaps) <= 2
    info = logspool.open(path / "ops").info()
    assert info.first_lsn > 0, "compaction should have removed the oldest op segments"
    with jobs.open(path, clock=clock) as j:
        after = j.stats()
        assert after == before
        assert sorted(x.key for x in j.jobs()) == sorted(x.key for x in jobs.open(path, clock=clock).jobs())


def test_a_corrupt_newest_snapshot_falls_back_to_the_older_one(tmp_path: Path, clock: Clock) -> None:
    path = tmp_path / "j"
    with jobs.open(path, clock=clock, snapshot_ops_min=10**9) as j:
        for i in range(20):
            j.put(f"k{i}")
        j.snapshot()
        for i in range(20, 40):
            j.put(f"k{i}")
        newest = j.snapshot()
        want = j.stats()
    name = path / f"snapshot.{newest:016x}"
    data = bytearray(name.read_bytes())
    data[-3] ^= 0xFF
    name.write_bytes(bytes(data))
    with jobs.open(path, clock=clock) as j:
        assert j.stats() == want


def _put_many_op(count: int, items: bytes, merge: int = 0) -> bytes:
    """A PUT_MANY op's bytes (FORMAT §14.1) around ``items`` as given."""
    return bytes([jops.PUT_MANY, merge, 128, 0]) + count.to_bytes(4, "little") + bytes(16) + items


def _put_item(key: bytes, domain: bytes = b"", payload: bytes = b"") -> bytes:
    sizes = (
        len(key).to_bytes(2, "little")
        + len(domain).to_bytes(2, "little")
        + len(payload).to_bytes(4, "little")
    )
    return sizes + key + domain + payload


@pytest.mark.parametrize(
    ("op", "error", "words"),
    [
        (b"\x02\x00", CorruptionError, "take op of 2 bytes is too short"),
        (b"\x0f" + bytes(10), CorruptionError, "put_many op of 11 bytes is too short"),
        (_put_many_op(0, b""), CorruptionError, "put_many op of 0 entries"),
        (_put_many_op(1, _put_item(b"k"), merge=0x10), CorruptionError, "unknown merge bits 0x10"),
        (_put_many_op(2, _put_item(b"k")), CorruptionError, "put_many op of 33 bytes is too short"),
        (_put_many_op(1, _put_item(b"k", payload=b"abc")[:-1]), CorruptionError, "put 0 of 1 runs past"),
        (_put_many_op(1, _put_item(b"k") + b"zz"), CorruptionError, "2 bytes after the last of 1 puts"),
        (_put_many_op(1, _put_item(b"\xff")), CorruptionError, "put 0 of 1: key or domain is not UTF-8"),
        (b"\x7f" + bytes(15), UnsupportedVersionError, "version 127"),
        (
            b"\x0d" + bytes(15) + (2).to_bytes(4, "little") + bytes(8),
            CorruptionError,
            "take_many op of 2 entries is 28 bytes, not 36",
        ),
        (b"\x0d" + bytes(15) + bytes(4), CorruptionError, "take_many op of 0 entries"),
        (
            b"\x0e" + bytes(7) + (1).to_bytes(4, "little") + bytes(24),
            CorruptionError,
            "ack_many op of 1 entries is 36 bytes, not 28",
        ),
    ],
)
def test_an_op_that_does_not_read_back_is_named_by_its_lsn(
    tmp_path: Path, op: bytes, error: type[Exception], words: str
) -> None:
    path = tmp_path / "j"
    with jobs.open(path) as j:
        j.put("a")
        j.put("b")
    with logspool.open(path / "ops", create=False) as ops_log:
        bad = ops_log.append(op)
    with pytest.raises(error) as caught:
        jobs.open(path)
    assert f"lsn {bad}" in str(caught.value) and words in str(caught.value)


def test_a_job_entry_keeps_every_field_of_its_row() -> None:
    from logspool.jobs._ops import JobRow
    from logspool.jobs._state import JobEntry

    row = JobRow(1, "k", "d", b"p", 4, 1, 5, 6, 7, 8, 9, 10, 11, "e")
    assert JobEntry(row).row() == row


def test_bad_input_is_refused_with_a_clear_error(journal: jobs.Journal, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="priority"):
        journal.put("k", priority=256)
    with pytest.raises(ValueError, match="empty"):
        journal.put("")
    with pytest.raises(ValueError, match="key is"):
        journal.put("x" * 5000)
    with pytest.raises(TypeError, match="payload"):
        journal.put("k", "text")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not both"):
        journal.put("k", delay=1, not_before=5)
    with pytest.raises(ValueError, match="priority_merge"):
        journal.put("k", priority=1, priority_merge="newest")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="lease"):
        journal.take(lease=0)
    with pytest.raises(ValueError, match="ttl"):
        journal.put("k", ttl=-1)
    with pytest.raises(TypeError, match="Job"):
        journal.ack("k")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_deliveries"):
        jobs.open(tmp_path / "other", max_deliveries=0)
    (tmp_path / "notajournal").mkdir()
    (tmp_path / "notajournal" / "file").write_text("x")
    with pytest.raises(NotALogError):
        jobs.open(tmp_path / "notajournal")
    with pytest.raises(NotALogError):
        jobs.open(tmp_path / "missing", create=False)
    assert journal.stats().next_lsn == 0, "nothing may be written by a refused call"


def test_domain_of() -> None:
    assert jobs.domain_of("https://Example.COM:8080/a?b") == "example.com"
    assert jobs.domain_of("user:42") == "user"
    assert jobs.domain_of("a/b/c") == "a"
    assert jobs.domain_of("plain") == ""


def test_closed_journal_refuses_calls(tmp_path: Path) -> None:
    j = jobs.open(tmp_path / "j")
    j.close()
    j.close()
    with pytest.raises(logspool.ClosedError):
        j.put("k")
    with pytest.raises(logspool.ClosedError):
        j.take()


def test_put_many_is_one_durable_step_with_the_rules_of_put(journal: jobs.Journal) -> None:
    ids = journal.put_many([("a", b"1"), ("b", b"2"), ("a", b"3")], priority=7)
    assert ids == [0, 1, 2], "one PUT_MANY op at lsn 0: the i-th put's id is (0 << 16) | i"
    assert [(j.id, j.key, j.payload, j.priority) for j in journal.jobs()] == [
        (0, "a", b"3", 7),
        (1, "b", b"2", 7),
    ]
    with pytest.raises(ValueError, match="empty"):
        journal.put_many([("c", b""), ("", b"")])
    assert journal.stats().next_lsn == 1, "one op; a refused batch writes nothing"
    assert journal.put_many([]) == [] and journal.stats().next_lsn == 1


def test_put_many_splits_at_65536_puts_and_at_the_op_logs_record_size(tmp_path: Path) -> None:
    big = bytes(range(256)) * (9 << 12)  # 9 MiB: two of them pass the 16 MiB record_size_max
    n = jops.LIST_MAX + 1
    with jobs.open(tmp_path / "j") as j:
        ids = j.put_many([("big1", big), ("big2", big), ("small", b"s")])
        assert ids == [0, 1 << 16, 1 << 16 | 1]
        ids = j.put_many([(f"k{i}", b"") for i in range(n)])
        assert ids[0] == 2 << 16 and ids[-2] == 2 << 16 | (n - 2) and ids[-1] == 3 << 16
        assert j.stats().next_lsn == 4
        with pytest.raises(logspool.RecordTooLargeError):
            j.put("huge", bytes(16 << 20))
        assert j.stats().next_lsn == 4, "a put the op log refuses writes nothing"
    with jobs.open(tmp_path / "j") as j:
        assert j.stats().pending == n + 3
        assert [x.payload for x in j.get("big1") + j.get("big2")] == [big, big]
        assert [x.key for x in j.take_many(4)] == ["big1", "big2", "small", "k0"], "arrival order"


def test_take_with_ack_settles_the_previous_job_in_the_same_step(journal: jobs.Journal, clock: Clock) -> None:
    journal.put("a")
    journal.put("b")
    first = journal.take()
    second = journal.take(ack=first)
    assert second and second.key == "b" and journal.get("a") == []
    idle = journal.take(ack=second)
    assert not idle and journal.stats().counters["acked"] == 2
    journal.put("c")
    third = journal.take(lease=1)
    clock.advance(2)
    again = journal.take()
    with pytest.raises(LeaseExpiredError):
        journal.take(ack=third)
    assert journal.get("c")[0].token == again.token, "a refused ack takes nothing"


def test_take_many_takes_in_take_order_with_domains_taking_turns(journal: jobs.Journal) -> None:
    for i in range(4):
        journal.put(f"https://busy.example/{i}")
    journal.put("https://quiet.example/1")
    journal.put("urgent:1", priority=0)
    got = journal.take_many(4, lease=60)
    assert [j.key for j in got] == [
        "urgent:1",
        "https://busy.example/0",
        "https://quiet.example/1",
        "https://busy.example/1",
    ]
    assert len({j.token for j in got}) == 4 and all(j.deliveries == 1 for j in got)
    assert journal.stats().leased == 4
    rest = journal.take_many(10)
    assert [j.key for j in rest] == ["https://busy.example/2", "https://busy.example/3"]
    assert journal.take_many(10) == []


def test_a_batch_that_buries_a_job_on_the_way_folds_the_same_in_every_handle(
    tmp_path: Path, clock: Clock
) -> None:
    path = tmp_path / "j"
    with jobs.open(path, clock=clock, max_deliveries=1) as j, jobs.open(path, clock=clock) as other:
        j.put_many([("a:1", b""), ("b:1", b""), ("c:1", b"")])
        first = j.take_many(1, lease=5)
        assert [x.key for x in first] == ["a:1"]
        clock.advance(10)  # a:1's lease runs out: delivered once already, it is buried by the next take
        j.put_many([("a:2", b""), ("d:1", b"")])
        got = j.take_many(10, lease=60)
        # domains never served first; then domain a, whose a:1 is buried before a:2 is taken:
        # two TAKE_MANY ops with a DEAD between them
        assert [x.key for x in got] == ["b:1", "c:1", "d:1", "a:2"]
        with logspool.open(path / "ops", readonly=True) as ops_log:
            kinds = [rec.payload[0] for rec in ops_log.reader(0)]
        assert kinds[-3:] == [jops.TAKE_MANY, jops.DEAD, jops.TAKE_MANY]
        assert [x.key for x in j.dead_letters()] == ["a:1"]
        assert len({x.token for x in got}) == 4
        for view in (other, jobs.open(path, clock=clock)):  # caught up, and folded from scratch
            assert view.stats() == j.stats()
            assert {x.key: x.token for x in view.jobs(state="leased")} == {x.key: x.token for x in got}
            view._state.check()
        other.ack_many(got)  # the other handle's fold accepts every lease token
        assert j.stats().counters["acked"] == 4 and j.jobs(state="leased") == []


def test_take_many_acks_the_previous_batch_in_the_same_step(journal: jobs.Journal) -> None:
    journal.put_many([(f"k{i}", b"%d" % i) for i in range(5)])
    first = journal.take_many(3)
    second = journal.take_many(3, ack=first)
    assert [j.key for j in second] == ["k3", "k4"]
    assert journal.stats().counters["acked"] == 3
    assert journal.take_many(3, ack=second) == []  # acks even when nothing is left to take
    assert journal.stats().counters["acked"] == 5 and journal.jobs() == []


def test_take_many_with_a_lost_lease_in_ack_acks_and_takes_nothing(
    journal: jobs.Journal, clock: Clock
) -> None:
    journal.put("a")
    journal.put("b")
    stale, kept = journal.take_many(2, lease=1)
    clock.advance(2)
    again = journal.take()  # takes "a" again: the first lease of it is lost
    assert again and again.key == "a"
    journal.put("c")
    with pytest.raises(LeaseExpiredError):
        journal.take_many(5, ack=[kept, stale])
    assert journal.get("b")[0].state == "leased" and journal.get("b")[0].token == kept.token
    assert journal.get("c")[0].state == "pending", "a refused ack takes nothing"
    journal.ack_many([kept, again])
    assert [j.key for j in journal.jobs()] == ["c"]


def test_ack_many_is_all_or_none(journal: jobs.Journal, clock: Clock) -> None:
    journal.put_many([("a", b""), ("b", b""), ("c", b"")])
    (a,) = journal.take_many(1, lease=1)
    (b,) = journal.take_many(1, lease=3)
    clock.advance(2)
    again, c = journal.take_many(2)  # "a" again (its first lease is lost), then "c"
    assert (again.key, c.key) == ("a", "c")
    with pytest.raises(LeaseExpiredError, match="job 0"):
        journal.ack_many([c, a])
    assert journal.get("c")[0].state == "leased"
    clock.advance(2)
    journal.ack_many([c, b])  # b's lease expired but nobody took it again: it still acks
    assert [j.key for j in journal.jobs()] == ["a"]
    journal.ack_many([])


def test_take_many_with_wait_wakes_on_a_put_from_another_handle(tmp_path: Path) -> None:
    with jobs.open(tmp_path / "j") as worker:
        start = time.monotonic()
        assert worker.take_many(3, wait=0.2) == []
        assert time.monotonic() - start >= 0.2

        def produce() -> None:
            time.sleep(0.3)
            with jobs.open(tmp_path / "j") as producer:
                producer.put_many([("k1", b"1"), ("k2", b"2")])

        t = threading.Thread(target=produce)
        start = time.monotonic()
        t.start()
        got = worker.take_many(3, wait=120)
        took = time.monotonic() - start
        t.join()
        assert [j.payload for j in got] == [b"1", b"2"]
        # Woken by the put (0.3 s in), not by the end of its 120 s wait: no bound on the
        # machine's speed beyond that.
        assert 0.25 < took < 120, took


def test_take_many_and_ack_many_refuse_bad_input(journal: jobs.Journal) -> None:
    journal.put("a")
    for count in (0, -1, 1.5, True, logspool.limits.JOB_TAKE_MAX + 1):
        with pytest.raises(ValueError, match="count must be an integer"):
            journal.take_many(count)  # type: ignore[arg-type]
    job = journal.take()
    assert job
    with pytest.raises(TypeError, match="list of jobs"):
        journal.take_many(1, ack=job)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="list of jobs"):
        journal.ack_many(job)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Job, not str"):
        journal.ack_many(["a"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="same lease twice"):
        journal.ack_many([job, job])
    with pytest.raises(ValueError, match="lease must be"):
        journal.take_many(1, lease=0)
    assert journal.get("a")[0].state == "leased", "refused calls change nothing"


def test_a_decision_reads_back_only_what_other_handles_wrote(tmp_path: Path) -> None:
    """Ops a handle wrote under the writer lock are applied as written: its next decision reads
    nothing back (no segment pread) unless another handle appended in between, and then exactly
    those ops, which it applies."""
    from logspool import _format as fmt
    from logspool._fs import FileSystem

    class CountsSegmentReads(FileSystem):
        def __init__(self) -> None:
            self.names: dict[int, str] = {}
            self.read_bytes = 0

        def open(self, path: str, flags: int, mode: int = 0o644) -> int:
            fd = super().open(path, flags, mode)
            self.names[fd] = os.path.basename(path)
            return fd

        def pread(self, fd: int, size: int, offset: int) -> bytes:
            data = super().pread(fd, size, offset)
            # (A writer reads the record header at its end offset to tell whether another
            # handle wrote: a probe, not a read-back.)
            if fmt.parse_segment_name(self.names.get(fd, "")) is not None and size > fmt.RECORD_HEADER_SIZE:
                self.read_bytes += len(data)
            return data

    fs = CountsSegmentReads()
    path = str(tmp_path / "j")
    with jobs.open(path, fs=fs) as mine, jobs.open(path) as other:
        for i in range(20):
            mine.put(f"k{i}", b"p")  # (puts need no decision: read back at the first take)
        job = mine.take(lease=30)
        # (having found ops it had not applied, the next decision looks for more before it
        # takes the writer lock: one probe of the log's end)
        job = mine.take(lease=30, ack=job)
        assert isinstance(job, jobs.Job)
        before = fs.read_bytes
        for _ in range(10):
            job = mine.take(lease=30, ack=job)
            assert isinstance(job, jobs.Job)
        assert fs.read_bytes == before  # ten decisions, nothing read back
        other.put("from-other", b"q", priority=0)
        nxt = mine.take(lease=30, ack=job)
        assert fs.read_bytes > before  # the other handle's op was read...
        assert isinstance(nxt, jobs.Job) and nxt.key == "from-other"  # ...and applied
        assert other.stats().pending == mine.stats().pending == 8


def test_batched_work_triggers_snapshots_as_single_ops_do(tmp_path: Path) -> None:
    """A batch op is one record holding thousands of puts or acks: snapshots follow the work an
    open would redo (bytes of ops, in op units), not the count of records, so a journal driven
    by put_many/take_many gets snapshots and opens without refolding everything it ever did."""
    path = tmp_path / "j"
    with jobs.open(path, snapshot_ops_min=2000) as j:
        done: list[jobs.Job] = []
        for n in range(0, 6000, 2000):  # 3 put records, 12 take records: 15 records in all
            j.put_many((f"k{n + i}", b"p" * 100) for i in range(2000))
            for _ in range(4):
                done = j.take_many(500, ack=done)
        j.ack_many(done)
        assert j.stats().ready == 0
    snapshots = [n for n in os.listdir(path) if n.startswith("snapshot.") and n != "snapshot.lock"]
    assert snapshots, "6,000 jobs in 16 batch records wrote no snapshot"


def test_a_snapshot_whose_text_is_not_utf8_falls_back_to_the_older_one(tmp_path: Path, clock: Clock) -> None:
    """Checksums right, a key's bytes not UTF-8 (FORMAT.md §14.2): damage like any other, so the
    journal opens from the older snapshot (before, jobs.open raised UnicodeDecodeError)."""
    path = tmp_path / "j"
    with jobs.open(path, clock=clock, snapshot_ops_min=10**9) as j:
        for i in range(20):
            j.put(f"k{i}")
        j.snapshot()
        j.put("bad-key")
        newest = j.snapshot()
        want = j.stats()
    name = path / f"snapshot.{newest:016x}"
    data = name.read_bytes()
    head, body = data[: jops.SNAPSHOT_HEADER_SIZE], data[jops.SNAPSHOT_HEADER_SIZE :]
    assert body.count(b"bad-key") == 1
    body = body.replace(b"bad-key", b"bad\xff\xfeey")
    fields = list(jops.SNAPSHOT_HEADER.unpack(head))
    fields[-2] = fmt.crc32(body)
    head = jops.SNAPSHOT_HEADER.pack(*fields)
    head = head[:-4] + struct.pack("<I", fmt.crc32(head[:-4]))
    name.write_bytes(head + body)
    with jobs.open(path, clock=clock) as j:
        assert j.stats() == want
        assert [job.key for job in j.get("bad-key")] == ["bad-key"]


@pytest.mark.skipif(sys.implementation.name != "cpython", reason="CPython's PyObject_GC_UnTrack")
def test_a_journals_jobs_are_not_walked_by_the_cyclic_collector(tmp_path: Path) -> None:
    """As the key-value store's entries (logspool._untrack): jobs put one by one or many at a
    time, leased, and loaded from a snapshot stay untracked, and read back the same."""
    from logspool.jobs._state import JobEntry

    def tracked_jobs() -> int:
        return sum(1 for o in gc.get_objects() if isinstance(o, JobEntry))

    with jobs.open(tmp_path / "j") as j:
        j.put("one", b"1")
        j.put_many([(f"k{i}", b"p%d" % i) for i in range(50)], priority=3)
        taken = j.take(60)
        assert tracked_jobs() == 0
        j.snapshot()
    with jobs.open(tmp_path / "j") as j:  # loaded from the snapshot
        assert tracked_jobs() == 0
        assert [job.payload for job in j.get("k7")] == [b"p7"] and j.get("one")[0].payload == b"1"
    assert taken.payload == b"p0"  # (priority 3 first)


def test_snapshots_in_the_background_compact_as_the_fold_does(tmp_path: Path) -> None:
    """``compact_in_background``: the snapshots a decision finds due are written meanwhile (by a
    forked child here), and ``close`` waits for the last; the op log is compacted below them."""
    path = tmp_path / "j"
    with jobs.open(path, snapshot_ops_min=100, segment_size_max=4096, compact_in_background=True) as j:
        for i in range(400):
            j.put(f"k{i}", b"p%d" % i)
            j.ack(j.take(60))  # (decisions go on while a snapshot is written)
        j.put("left", b"waiting")
    names = sorted(n for n in os.listdir(path) if n.startswith("snapshot.0"))
    assert len(names) == 2  # two kept, the older ones removed
    assert len(os.listdir(path / "ops")) < 40
    with jobs.open(path) as j:
        assert [job.payload for job in j.get("left")] == [b"waiting"]
        stats = j.stats()
        assert stats.pending == 1 and stats.counters["acked"] == 400
