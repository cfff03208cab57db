"""Subscribers on real files: durable checkpoints, transient names, rewind, copy, lag, bad names.

Each test opens a real log, reads as a named subscriber, and checks what a second open (as a
restarted consumer would do) sees: the committed position, nothing more and nothing less.
"""

from __future__ import annotations

import os
import time

import pytest

import logspool
from logspool import _format as fmt
from tests.conftest import append_in_batches


def payloads(n: int, start: int = 0) -> list[bytes]:
    return [f"r{i}".encode() for i in range(start, start + n)]


def test_a_durable_subscriber_resumes_at_its_commit(log_dir: str) -> None:
    with logspool.open(log_dir, durability="os") as log:
        log.append_many(payloads(10))
        sub = log.subscribe("billing")
        got = [sub.next(timeout=0) for _ in range(4)]
        assert [r.lsn for r in got if r] == [0, 1, 2, 3]
        sub.commit()
        assert sub.committed_lsn == 4
        sub.next(timeout=0)  # read but not committed: handed out again after a restart
        sub.close()
        again = log.subscribe("billing", start="latest")  # start is ignored: it exists
        assert again.position == 4
        assert [r.lsn for r in again] == list(range(4, 10))
        again.close()


def test_a_new_subscriber_is_durable_from_its_start(log_dir: str) -> None:
    with logspool.open(log_dir, durability="os") as log:
        log.append_many(payloads(5))
        log.subscribe("late", start="latest").close()  # never committed by hand
        log.append_many(payloads(3, 5))
        sub = log.subscribe("late")
        assert [r.payload for r in sub] == [b"r5", b"r6", b"r7"]
        sub.close()


def test_auto_commit_commits_each_consumed_batch_and_on_close(log_dir: str) -> None:
    with logspool.open(log_dir, durability="os") as log:
        log.append_many(payloads(20))
        sub = log.subscribe("auto", auto_commit=True)
        for rec in sub:
            if rec.lsn == 12:
                break
        sub.close()  # 0..12 were handed out: position 13 is committed
        assert [s.lsn for s in log.subscribers()] == [13]
        sub = log.subscribe("auto", auto_commit=True)
        assert [r.lsn for r in sub] == list(range(13, 20))
        log.append(b"more")
        assert sub.next(timeout=1) is not None  # asking for more commits what came before
        assert log.subscribers()[0].lsn == 20
        sub.close()
        assert log.subscribers()[0].lsn == 21


def test_transient_subscribers_start_at_latest_and_keep_nothing(log_dir: str) -> None:
    with logspool.open(log_dir, durability="os") as log:
        log.append_many(payloads(5))
        sub = log.subscribe("~alerts")
        assert sub.position == 5 and sub.transient
        log.append(b"new")
        rec = sub.next(timeout=1)
        assert rec is not None and rec.payload == b"new"
        sub.commit()  # nothing to commit
        sub.close()
        assert log.subscribers() == []
        assert not [n for n in os.listdir(log_dir) if n.startswith("cp.")]
        with pytest.raises(ValueError, match="transient"):
            log.add_subscriber("~alerts")


def test_subscribe_since_a_time(log_dir: str) -> None:
    with logspool.open(log_dir, durability="os") as log:
        log.append_many(payloads(3))
        time.sleep(0.02)
        cut = time.time()
        time.sleep(0.02)
        log.append_many(payloads(2, 3))
        sub = log.subscribe("recent", since=cut)
        assert [r.lsn for r in sub] == [3, 4]
        sub.close()


def test_add_rewind_copy_remove(log_dir: str) -> None:
    with logspool.open(log_dir, durability="os") as log:
        log.append_many(payloads(10))
        assert log.add_subscriber("a", start=7) == 7
        with pytest.raises(logspool.SubscriberExistsError, match="'a' exists"):
            log.add_subscriber("a")
        assert log.rewind_subscriber("a", start="earliest") == 0
        assert log.rewind_subscriber("a", start="latest") == 10
        assert log.rewind_subscriber("a", start=3) == 3
        assert log.copy_subscriber("a", "b") == 3
        with pytest.raises(logspool.SubscriberExistsError):
            log.copy_subscriber("a", "b")
        assert {s.name: s.lsn for s in log.subscribers()} == {"a": 3, "b": 3}
        log.remove_subscriber("a")
        with pytest.raises(logspool.SubscriberNotFoundError, match="no subscriber named 'a'"):
            log.remove_subscriber("a")
        with pytest.raises(logspool.SubscriberNotFoundError):
            log.rewind_subscriber("a", start=0)
        with pytest.raises(logspool.PositionError):
            log.rewind_subscriber("b", start=99)
        assert [s.name for s in log.subscribers()] == ["b"]


def test_lag_in_records_bytes_and_age(log_dir: str) -> None:
    with logspool.open(log_dir, durability="os", segment_size_max=4096) as log:
        append_in_batches(log, [b"x" * 100] * 100)  # about 13,600 bytes: several segments
        log.add_subscriber("behind", start=10)
        log.add_subscriber("caught-up", start="latest")
        time.sleep(0.05)
        info = {s.name: s for s in log.subscribers()}
        behind, done = info["behind"], info["caught-up"]
        assert behind.records_behind == 90 and done.records_behind == 0
        assert 90 * 136 <= behind.bytes_behind <= 90 * 136 + 4096  # records + headers and seals
        assert done.bytes_behind == 0 and done.position_age_s == 0
        assert behind.position_age_s >= 0.05
        assert behind.idle_s >= 0.0 and behind.lost == 0


@pytest.mark.parametrize(
    "name",
    ["../x", "a/b", "\x00", "x" * 1023, "é", "e\u0301", "CON", ".", "..", "cp.0", "not~at~start"],
)
def test_hostile_names_stay_inside_and_apart(log_dir: str, name: str) -> None:
    with logspool.open(log_dir, durability="os") as log:
        log.append(b"a")
        log.add_subscriber(name)
        log.add_subscriber(name + "2")
        assert sorted(s.name for s in log.subscribers()) == sorted([name, name + "2"])
    parent = os.listdir(os.path.dirname(log_dir))
    assert parent == [os.path.basename(log_dir)]  # nothing escaped the log directory
    files = [n for n in os.listdir(log_dir) if n.startswith("cp.")]
    assert len(files) == 2 and all(fmt.is_checkpoint_name(n) for n in files)


@pytest.mark.parametrize(
    ("name", "error", "match"),
    [
        ("", ValueError, "must not be empty"),
        ("x" * 1025, ValueError, "at most 1024 bytes"),
        ("y" * 10240, ValueError, "this one is 10240"),
        ("\ud800", ValueError, "UTF-8"),
        (b"bytes", TypeError, "must be a str"),
        (None, TypeError, "must be a str"),
    ],
)
def test_bad_names_get_clear_errors(log_dir: str, name: object, error: type, match: str) -> None:
    with logspool.open(log_dir, durability="os") as log, pytest.raises(error, match=match):
        log.subscribe(name)  # type: ignore[arg-type]


def test_a_damaged_checkpoint_is_reported_not_reset(log_dir: str) -> None:
    with logspool.open(log_dir, durability="os") as log:
        log.append_many(payloads(3))
        log.add_subscriber("s", start=2)
    path = os.path.join(log_dir, fmt.checkpoint_name("s"))
    with open(path, "r+b") as f:
        f.seek(16)
        f.write(b"\xff")
    with logspool.open(log_dir, durability="os") as log:
        with pytest.raises(
            logspool.CorruptionError, match=r"no valid checkpoint slot \(slot 0: checksum mismatch"
        ) as exc:
            log.subscribe("s")
        assert exc.value.path == path


def test_verify_checks_checkpoints(log_dir: str) -> None:
    with logspool.open(log_dir, durability="os", segment_size_max=4096) as log:
        append_in_batches(log, [b"x" * 100] * 100)
        log.add_subscriber("ok", start=99)
        log.add_subscriber("behind", start=0)
        log.add_subscriber("broken", start=5)
        log.enforce_retention(logspool.Retention(size_max=1))
        first = log.info().first_lsn
    report = logspool.verify(log_dir)
    assert report.ok and report.subscribers == 3
    assert any(f"'behind' is at lsn 0, before the earliest record {first}" in str(p) for p in report.problems)
    path = os.path.join(log_dir, fmt.checkpoint_name("broken"))
    with open(path, "r+b") as f:
        f.seek(20)
        f.write(b"\x01")
    report = logspool.verify(log_dir)
    assert not report.ok
    assert [p.path for p in report.problems if p.severity == "damage"] == [path]


def test_a_transient_subscriber_may_ask_for_earliest(log_dir: str) -> None:
    with logspool.open(log_dir, durability="os") as log:
        log.append_many(payloads(3))
        sub = log.subscribe("~replay", start="earliest")
        assert [r.lsn for r in sub] == [0, 1, 2]
        sub.close()


def _slots(path: str) -> list[fmt.Checkpoint | None]:
    with open(path, "rb") as f:
        return fmt.checkpoint_slots(f.read(), path)


def test_commits_overwrite_the_slot_that_is_not_stable(log_dir: str) -> None:
    """Durable commits alternate slots; non-durable ones only ever write the slot that does not
    hold the last durable position, so a torn write can never take that position away."""
    with logspool.open(log_dir, durability="os") as log:
        log.append_many(payloads(50))
        sub = log.subscribe("s")
        path = os.path.join(log_dir, fmt.checkpoint_name("s"))
        assert os.path.getsize(path) == 1024
        sub.commit(3)
        stable = next(cp for cp in _slots(path) if cp is not None and cp.lsn == 3)
        for lsn in range(4, 14):
            sub.commit(lsn, durable=False)
            held = _slots(path)
            assert stable in held, f"commit {lsn} overwrote the stable slot"
            assert max(cp.generation for cp in held if cp) == stable.generation + lsn - 3
        sub.commit(20)  # durable: it goes where the non-durable ones went, and becomes stable
        held = _slots(path)
        assert stable in held and {cp.lsn for cp in held if cp} == {3, 20}
        sub.commit(21, durable=False)
        assert {cp.lsn for cp in _slots(path) if cp} == {20, 21}
        sub.close()
        assert log.subscribe("s").position == 21  # the newest generation wins


def test_a_torn_slot_falls_back_to_the_other(log_dir: str) -> None:
    with logspool.open(log_dir, durability="os") as log:
        log.append_many(payloads(10))
        with log.subscribe("s") as sub:
            sub.commit(4)
            sub.commit(7, durable=False)
        path = os.path.join(log_dir, fmt.checkpoint_name("s"))
        newest = max(
            (k for k in (0, 1)), key=lambda k: (_slots(path)[k] or fmt.Checkpoint("", 0, 0, 0)).generation
        )
        with open(path, "r+b") as f:  # the in-flight write torn by a power cut: half its sector
            f.seek(newest * 512 + 20)
            f.write(b"\x00" * 200)
        with log.subscribe("s") as sub:
            assert sub.position == 4
            sub.commit(8)  # and commits go on from there
        with log.subscribe("s") as sub:
            assert sub.position == 8


def test_a_version_1_checkpoint_is_read_then_upgraded(log_dir: str) -> None:
    with logspool.open(log_dir, durability="os") as log:
        log.append_many(payloads(10))
    head = fmt.CHECKPOINT_HEADER.pack(fmt.CHECKPOINT_MAGIC, 1, 0, 3, 6, 10**18, 10**18 - 5)
    v1 = head + b"old" + fmt.crc32(b"old", fmt.crc32(head)).to_bytes(4, "little")
    path = os.path.join(log_dir, fmt.checkpoint_name("old"))
    with open(path, "wb") as f:
        f.write(v1)
    with logspool.open(log_dir, durability="os") as log:
        assert [(s.name, s.lsn, s.created_ns) for s in log.subscribers()] == [("old", 6, 10**18 - 5)]
        with log.subscribe("old") as sub:
            assert sub.position == 6
            sub.next(timeout=0)
            sub.commit()
            sub.commit(durable=False)  # the second commit writes in place
        assert os.path.getsize(path) == 1024
        cp = log.subscribers()[0]
        assert (cp.lsn, cp.created_ns) == (7, 10**18 - 5)
        assert logspool.verify(log_dir).ok


def test_a_commit_after_another_handle_removed_or_rewound_it(log_dir: str) -> None:
    with logspool.open(log_dir, durability="os") as log, logspool.open(log_dir, durability="os") as other:
        log.append_many(payloads(30))
        sub = log.subscribe("s")
        sub.commit(5)
        other.rewind_subscriber("s", 2)  # written in place by another handle: a newer generation
        assert {s.name: s.lsn for s in other.subscribers()}["s"] == 2
        sub.commit(9, durable=False)  # newer still: it wins
        assert {s.name: s.lsn for s in other.subscribers()}["s"] == 9
        other.remove_subscriber("s")
        sub.commit(11)  # the file is gone: the commit creates it again, as before
        assert {s.name: s.lsn for s in other.subscribers()}["s"] == 11
        sub.close()


def test_retention_keeps_what_a_power_cut_could_bring_back(log_dir: str) -> None:
    """A commit with ``durable=False`` can be undone by a power cut, back to the last durable
    one, so retention removes segments only below the lower of the two slots."""
    with logspool.open(log_dir, durability="os", segment_size_max=4096) as log:
        append_in_batches(log, [b"x" * 100] * 200)
        with log.subscribe("s") as sub:
            sub.commit(40)
            sub.commit(150, durable=False)
            report = log.enforce_retention(logspool.Retention(consumed=True))
            assert report.removed and report.removed[-1].next_lsn <= 40
            kept = log.info().first_lsn
            sub.commit(160)  # durable, into the slot 150 was in: 40 is still the other slot
            assert not log.enforce_retention(logspool.Retention(consumed=True)).removed
            sub.commit(170)  # the slot holding 40 is overwritten only now that 160 is durable
            report = log.enforce_retention(logspool.Retention(consumed=True))
            assert report.removed and report.removed[-1].next_lsn <= 160 and log.info().first_lsn > kept
            assert [s.lsn for s in log.subscribers()] == [170]  # what readers see: the newest
