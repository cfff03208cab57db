"""A damaged or missing sealed segment is never taken for the end of the log.

A sealed segment and its seal were fsynced before the next segment was created, so whatever is
wrong with one that is not the newest is damage, never a crash state: a segment cut short (inside
a record), its header zeroed, or the whole file gone (deleted by hand, or left behind by a power
cut in the middle of retention). Each test damages a real three-segment log that way and checks
every reader a user has: ``read``, a tailing reader, a durable subscriber, the ``cat`` command and
a key-value store's fold raise CorruptionError naming the file and the lsns, instead of stopping
short or waiting forever at the hole; ``verify`` reports it. Retention itself is cut by a power
failure at each of its operations (the I/O seam), and every crash state still holds a contiguous
log. And a durable subscriber that has read nothing yet is told when retention removes its
records (DataLossError, or a listed gap), never moved on in silence.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

import logspool
from logspool import kv
from tests.conftest import run_cli

from .faultfs import FaultFS, PowerLoss, materialize


def _three_segments(path: Path) -> list[Path]:
    with logspool.open(path, segment_size_max=4096, durability="os") as log:
        for i in range(60):
            log.append(b"record-%02d-" % i + b"x" * 100)
            if len(log.info().segments) == 3:
                break
    segments = sorted(path.glob("*.seg"))
    assert len(segments) == 3
    return segments


def _all_readers_refuse(path: Path, named: Path) -> None:
    with logspool.open(path, readonly=True) as log:
        with pytest.raises(logspool.CorruptionError) as err:
            list(log.read())
        assert err.value.path == str(named)
        tail = log.reader(start="earliest")
        with pytest.raises(logspool.CorruptionError):
            for _ in range(200):  # bounded: it must raise, not wait at the damage
                if tail.next(timeout=0.01) is None:
                    break
        tail.close()
    with logspool.open(path) as log, log.subscribe("billing") as sub, pytest.raises(logspool.CorruptionError):
        for _ in range(200):
            if sub.next(timeout=0.01) is None:
                break
    cat = run_cli("cat", str(path))
    assert cat.returncode != 0 and named.name.encode() in cat.stderr
    assert not logspool.verify(path).ok


def test_a_sealed_segment_cut_short_inside_a_record(tmp_path: Path) -> None:
    segments = _three_segments(tmp_path / "log")
    middle = segments[1]
    middle.write_bytes(middle.read_bytes()[:-100])
    _all_readers_refuse(tmp_path / "log", middle)


def test_a_sealed_segment_whose_first_512_bytes_are_zeroed(tmp_path: Path) -> None:
    segments = _three_segments(tmp_path / "log")
    data = segments[0].read_bytes()
    segments[0].write_bytes(bytes(512) + data[512:])
    _all_readers_refuse(tmp_path / "log", segments[0])


def test_a_segment_deleted_by_hand_is_a_hole_not_the_end(tmp_path: Path) -> None:
    segments = _three_segments(tmp_path / "log")
    segments[1].unlink()
    with (
        logspool.open(tmp_path / "log", readonly=True) as log,
        pytest.raises(logspool.CorruptionError, match="segment missing") as err,
    ):
        list(log.read())
    assert err.value.path == str(segments[1])
    _all_readers_refuse(tmp_path / "log", segments[1])


def test_a_key_value_store_whose_older_op_log_segment_was_cut_refuses_to_open(tmp_path: Path) -> None:
    with kv.open(tmp_path / "kv", segment_size_max=4096) as store:
        for i in range(200):
            store.set(f"key-{i}", b"v" * 60)
    segments = sorted((tmp_path / "kv" / "ops").glob("*.seg"))
    assert len(segments) >= 3
    segments[1].write_bytes(segments[1].read_bytes()[:-100])
    with pytest.raises(logspool.CorruptionError):
        kv.open(tmp_path / "kv")


def test_a_power_cut_in_the_middle_of_retention_leaves_a_contiguous_log(tmp_path: Path) -> None:
    rng = random.Random(5)
    cuts = 0
    for crash_at in range(1, 200):  # bounded: retention of four segments is a few dozen operations
        path = tmp_path / f"log{crash_at}"
        with logspool.open(path, segment_size_max=4096, durability="always") as log:
            for i in range(300):
                log.append(b"record-%03d-" % i + b"x" * 100)
                if len(log.info().segments) == 6:
                    break
        fs = FaultFS(str(path))
        log = logspool.open(path, fs=fs, segment_size_max=4096)
        fs.crash_at = fs.count + crash_at
        try:
            log.enforce_retention(logspool.Retention(size_max=4096 * 2))
        except PowerLoss:
            cuts += 1
        else:
            fs.crash_at = 0
            log.close()
            fs.release()
            break
        fs.release()
        for k, state in enumerate(fs.crash_states(rng, 3)):
            target = tmp_path / f"state{crash_at}-{k}"
            materialize(state, str(target))
            with logspool.open(target, readonly=True) as after:
                lsns = [r.lsn for r in after.read()]
            assert lsns == list(range(lsns[0], lsns[0] + len(lsns))), f"cut at {crash_at}: a hole"
            assert lsns[-1] >= 40 and logspool.verify(target).ok, f"cut at {crash_at}"
    assert cuts >= 4, f"retention had only {cuts} operations to cut at"


@pytest.mark.parametrize("on_data_loss", ["fail", "skip"])
def test_a_new_subscriber_that_read_nothing_is_told_when_retention_removes_its_records(
    tmp_path: Path, on_data_loss: str
) -> None:
    path = tmp_path / "log"
    _three_segments(path)
    with logspool.open(path, segment_size_max=4096) as log:
        sub = log.subscribe("billing", on_data_loss=on_data_loss)  # type: ignore[arg-type]
        assert sub.position == 0
        log.enforce_retention(logspool.Retention(size_max=1))  # all but the active segment
        first = min(int(p.stem) for p in path.glob("*.seg"))
        assert first > 0
        if on_data_loss == "fail":
            with pytest.raises(logspool.DataLossError):
                sub.next(timeout=0.01)
        else:
            rec = sub.next(timeout=0.01)
            assert rec is not None and rec.lsn == first
            assert [(g.first_lsn, g.next_lsn) for g in sub.gaps] == [(0, first)]
        sub.close()
