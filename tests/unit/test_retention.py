"""Retention on real files: which segments go under each policy, and what readers then see.

Logs are made with small segments so that a few hundred records span many of them; each test
checks the files left, the lsn range, and the behaviour of subscribers whose records went.
"""

from __future__ import annotations

import os
import time

import pytest

import logspool
from logspool import _format as fmt
from tests.conftest import append_in_batches


def build(path: str, count: int = 200) -> logspool.Log:
    log = logspool.open(path, durability="os", segment_size_max=4096)
    append_in_batches(log, [f"record {i:04d} ".encode() * 6 for i in range(count)])
    return log


def segment_bases(path: str) -> list[int]:
    return sorted(b for b in (fmt.parse_segment_name(n) for n in os.listdir(path)) if b is not None)


def test_consumed_deletes_what_every_subscriber_passed(log_dir: str) -> None:
    with build(log_dir) as log:
        log.add_subscriber("fast", start=150)
        log.add_subscriber("slow", start=60)
        before = segment_bases(log_dir)
        report = log.enforce_retention(logspool.Retention(consumed=True))
        after = segment_bases(log_dir)
        assert report.removed and all(r.reason.startswith("consumed") for r in report.removed)
        assert after[0] <= 60 < (after[1] if len(after) > 1 else 10**9)  # slow's segment is kept
        assert [r.base_lsn for r in report.removed] == before[: len(before) - len(after)]
        assert not any(
            os.path.exists(os.path.join(log_dir, fmt.index_name(r.base_lsn))) for r in report.removed
        )
        sub = log.subscribe("slow")
        assert [r.lsn for r in sub][:1] == [60]  # nothing it had not read is gone
        sub.close()


def test_consumed_with_no_subscriber_keeps_everything(log_dir: str) -> None:
    with build(log_dir) as log:
        before = segment_bases(log_dir)
        assert log.enforce_retention(logspool.Retention(consumed=True)).removed == ()
        assert segment_bases(log_dir) == before


def test_the_active_segment_is_never_deleted(log_dir: str) -> None:
    with build(log_dir) as log:
        log.add_subscriber("done", start="latest")
        log.enforce_retention(logspool.Retention(consumed=True, size_max=1))
        bases = segment_bases(log_dir)
        assert len(bases) == 1
        assert log.info().next_lsn == 200
        log.append(b"still writable")
        assert log.info().next_lsn == 201


def test_size_bound_removes_oldest_first(log_dir: str) -> None:
    with build(log_dir, 400) as log:
        total = log.info().size
        report = log.enforce_retention(logspool.Retention(size_max=total // 2))
        assert report.removed and {r.reason for r in report.removed} == {"over the size bound"}
        assert log.info().size <= total // 2
        assert report.size_freed >= total - total // 2 - 4096


def test_age_removes_segments_older_than_the_lifetime(log_dir: str) -> None:
    with build(log_dir) as log:
        time.sleep(0.3)
        log.append_many([b"y" * 100] * 60)  # fresh segments
        report = log.enforce_retention(logspool.Retention(age_max_s=0.2))
        assert report.removed
        first = log.info().first_lsn
        stamps = [r.timestamp for r in log.read()]
        assert first > 0 and stamps
        # every segment left holds a record younger than the lifetime, or is the first of them
        assert time.time_ns() - stamps[-1] < 0.2e9


def test_dry_run_reports_without_deleting(log_dir: str) -> None:
    with build(log_dir) as log:
        before = segment_bases(log_dir)
        report = log.enforce_retention(logspool.Retention(size_max=1), dry_run=True)
        assert report.dry_run and len(report.removed) == len(before) - 1
        assert segment_bases(log_dir) == before


def test_stored_policy_is_applied_after_each_rotation(log_dir: str) -> None:
    with logspool.open(log_dir, durability="os", segment_size_max=4096) as log:
        log.set_retention(logspool.Retention(size_max=3 * 4096))
        assert log.retention == logspool.Retention(size_max=3 * 4096)
        for i in range(600):
            log.append(f"{i:05d}".encode() * 20)
        assert log.info().size <= 4 * 4096
        assert log.retention_error is None
        log.set_retention(None)
        assert log.retention is None


def test_a_subscriber_whose_records_went_gets_a_clear_error_or_a_gap(log_dir: str) -> None:
    with build(log_dir) as log:
        log.add_subscriber("asleep", start=5)
        log.enforce_retention(logspool.Retention(size_max=1))
        first = log.info().first_lsn
        with pytest.raises(logspool.DataLossError) as exc:
            log.subscribe("asleep")
        err = exc.value
        assert (err.subscriber, err.lost_from, err.lost_to) == ("asleep", 5, first)
        assert f"lsns 5 to {first - 1} were removed" in str(err)
        sub = log.subscribe("asleep", on_data_loss="skip")
        assert sub.gaps == [logspool.Gap(5, first, "removed by retention before it was read")]
        assert next(iter(sub)).lsn == first
        sub.close()
        assert [s.lost for s in log.subscribers()] == [first - 5]


def test_a_reader_between_segments_meets_the_loss(log_dir: str) -> None:
    with build(log_dir) as log:
        reader = log.reader(start=0)
        first = reader.next(timeout=0)
        assert first is not None and first.lsn == 0
        # it holds segment 0 open: that one stays readable; the ones after it go
        log.enforce_retention(logspool.Retention(size_max=1))
        got = []
        with pytest.raises(logspool.DataLossError):
            for rec in reader:
                got.append(rec.lsn)
        assert got == list(range(1, got[-1] + 1))  # all of the open segment, then the error
        reader.close()
        skip = log.reader(start="earliest")  # "earliest" is never a loss
        assert next(iter(skip)).lsn == log.info().first_lsn
        skip.close()


def test_dead_subscribers_expire_by_idle_age(log_dir: str) -> None:
    with build(log_dir) as log:
        log.add_subscriber("dead", start=0)
        time.sleep(0.2)
        log.add_subscriber("alive", start=150)
        pinned = log.enforce_retention(logspool.Retention(consumed=True), dry_run=True)
        assert pinned.removed == () and pinned.pinned_by == ("dead",)
        report = log.enforce_retention(logspool.Retention(consumed=True, subscriber_idle_max_s=0.1))
        assert report.expired_subscribers == ("dead",)
        assert [s.name for s in log.subscribers()] == ["alive"]
        assert report.removed


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"age_max_s": -1}, "age_max_s must be a positive number"),
        ({"size_max": 0}, "size_max must be a positive number"),
        ({"size_max": 1.5}, "size_max must be a positive number"),
        ({"subscriber_idle_max_s": float("nan")}, "subscriber_idle_max_s must be"),
        ({"consumed": "yes"}, "consumed must be True or False"),
    ],
)
def test_bad_policies_get_clear_errors(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises((ValueError, TypeError), match=match):
        logspool.Retention(**kwargs)  # type: ignore[arg-type]


def test_a_writer_left_behind_by_retention_appends_at_the_end(log_dir: str) -> None:
    """A handle that last wrote in a segment which retention has since removed, with the
    segment its seal names removed too (another handle wrote on through several rotations, and
    a subscriber consumed them): its next append goes at the log's end, after every record the
    other wrote, never into a segment made again under a removed one's name (which took lsns
    the log had used, and was then cut as a torn tail, records of the other writer with it)."""
    behind = logspool.open(log_dir, durability="os", segment_size_max=4096)
    behind.append(b"first")
    with build(log_dir, 0) as other:
        for i in range(200):
            other.append(f"record {i:04d} ".encode() * 6)
        other.add_subscriber("done", start=150)
        removed = other.enforce_retention(logspool.Retention(consumed=True)).removed
        kept = segment_bases(log_dir)
    # (its own segment and the one its seal names: gone)
    assert len(removed) >= 2 and removed[0].base_lsn == 0 and kept[0] > removed[1].base_lsn
    with behind.exclusive(sync=False) as tail:
        assert tail.next_lsn == 201
        assert tail.append_many([b"decided"]) == [201]
    assert behind.append(b"appended") == 202
    behind.close()
    with logspool.open(log_dir) as fresh:
        records = list(fresh.read(start=kept[0]))
    assert [r.lsn for r in records] == list(range(kept[0], 203))
    assert [r.payload for r in records[-2:]] == [b"decided", b"appended"]
    assert records[-3].payload == b"record 0199 " * 6
    assert segment_bases(log_dir)[0] == kept[0]  # (no segment made again below the kept ones)


def _segment_bytes(path: str) -> dict[str, bytes]:
    found = {}
    for name in os.listdir(path):
        if name.endswith(".seg"):
            with open(os.path.join(path, name), "rb") as f:
                found[name] = f.read()
    return found


def test_a_writer_behind_a_hole_in_the_segments_is_told_it_is_damage(log_dir: str) -> None:
    """The same writer left behind, but only the segment its seal names is gone, the segments
    before and after it still there: not retention's doing (it removes a prefix), so the
    write is refused with an error naming the missing segment (repair records the loss),
    never made again under a used lsn, and nothing of what is there is changed."""
    behind = logspool.open(log_dir, durability="os", segment_size_max=4096)
    behind.append(b"first")
    with build(log_dir, 0) as other:
        for i in range(200):
            other.append(f"record {i:04d} ".encode() * 6)
    bases = segment_bases(log_dir)
    os.unlink(os.path.join(log_dir, fmt.segment_name(bases[1])))
    before = _segment_bytes(log_dir)
    with pytest.raises(
        logspool.CorruptionError, match=f"segment {bases[1]} is missing between segments 0 and"
    ):
        behind.append(b"refused")
    behind.close()
    assert _segment_bytes(log_dir) == before
