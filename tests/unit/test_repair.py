"""logspool repair, one damage kind at a time, on real files: what it reports, what readers see
afterwards, that verify is clean, that writers go on, and that a second run finds nothing to do."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

import logspool
from logspool import _format as fmt
from logspool import _repair
from logspool import _segment as seg
from tests.conftest import AfterReboot, run_cli

SEGMENT = 4096


def payload(i: int) -> bytes:
    return b"record-%05d-" % i + b"x" * 40


def make_log(log_dir: str, n: int = 300, **options: object) -> list[int]:
    """A log of ``n`` records over several small segments; returns the segment bases."""
    with logspool.open(log_dir, segment_size_max=SEGMENT, index_interval=512, **options) as log:
        for i in range(0, n, 7):  # several batches, so records carry durable_lsn marks
            log.append_many([payload(j) for j in range(i, min(n, i + 7))])
    return sorted(b for b in (fmt.parse_segment_name(x) for x in os.listdir(log_dir)) if b is not None)


def seg_path(log_dir: str, base: int) -> str:
    return os.path.join(log_dir, fmt.segment_name(base))


def record_at(log_dir: str, bases: list[int], lsn: int) -> tuple[str, seg.RecordInfo]:
    base = max(b for b in bases if b <= lsn)
    path = seg_path(log_dir, base)
    infos: list[seg.RecordInfo] = []
    seg.parse(Path(path).read_bytes(), fmt.SEGMENT_HEADER_SIZE, base, 1 << 20, None, infos)
    return path, next(i for i in infos if i.lsn == lsn)


def overwrite(path: str, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def snapshot(log_dir: str) -> dict[str, bytes]:
    out = {}
    for root, _dirs, files in os.walk(log_dir):
        for name in files:
            p = os.path.join(root, name)
            out[os.path.relpath(p, log_dir)] = Path(p).read_bytes()
    return out


def read_all(log_dir: str) -> tuple[list[int], list[logspool.Gap]]:
    with logspool.open(log_dir, readonly=True) as log:
        reader = log.reader()
        lsns = []
        for rec in reader:
            assert rec.payload == payload(rec.lsn)
            lsns.append(rec.lsn)
        return lsns, reader.gaps


def repaired(log_dir: str, *kinds: str) -> logspool.RepairReport:
    """Dry-run, then repair: both report ``kinds`` (and maybe rebuilt indexes, whose entries
    pointed at quarantined records); the dry run changed nothing; the log then verifies clean and
    a second repair has nothing to do."""
    before = snapshot(log_dir)
    dry = logspool.repair(log_dir, dry_run=True)
    assert snapshot(log_dir) == before, "a dry run changed files"
    report = logspool.repair(log_dir)
    found = {a.kind for a in report.actions}
    assert set(kinds) <= found <= {*kinds, _repair.REBUILD_INDEX}, report.actions
    assert [(a.kind, a.path) for a in dry.actions] == [(a.kind, a.path) for a in report.actions]
    assert report.ok, report.unrepaired
    check = logspool.verify(log_dir)
    assert check.ok, [str(p) for p in check.problems]
    again = logspool.repair(log_dir)
    assert again.actions == [] and again.ok, again.actions
    return report


def test_a_healthy_log_needs_nothing(log_dir: str) -> None:
    make_log(log_dir)
    report = logspool.repair(log_dir)
    assert report.actions == [] and report.ok


def test_a_corrupt_record_in_an_old_segment_is_quarantined_and_skipped_with_a_gap(log_dir: str) -> None:
    bases = make_log(log_dir)
    path, info = record_at(log_dir, bases, 10)
    overwrite(path, info.offset + fmt.RECORD_HEADER_SIZE + 3, b"#")
    damaged = Path(path).read_bytes()[info.offset : info.offset + info.size]
    with pytest.raises(logspool.CorruptionError):
        read_all(log_dir)
    report = repaired(log_dir, _repair.QUARANTINE)
    (action,) = [a for a in report.actions if a.kind == _repair.QUARANTINE]
    rel = f"quarantine/{fmt.segment_name(bases[0])}.{info.offset}.bad"
    assert action.path == path and "lsns 10..10" in action.detail and rel in action.detail
    assert Path(log_dir, rel).read_bytes() == damaged  # the operator gets the original bytes
    lsns, gaps = read_all(log_dir)
    assert lsns == [i for i in range(300) if i != 10]
    assert gaps == [logspool.Gap(10, 11, f"quarantined by repair ({rel})")]
    header = fmt.decode_segment_header(Path(path).read_bytes(), path)
    assert header.version == 2  # the segment now holds a gap record
    with logspool.open(log_dir) as log:
        assert log.append(payload(300)) == 300


def test_a_damaged_length_field_loses_only_that_record(log_dir: str) -> None:
    bases = make_log(log_dir)
    path, info = record_at(log_dir, bases, 40)
    overwrite(path, info.offset, (7_000_000).to_bytes(4, "little"))  # a length that lies
    repaired(log_dir, _repair.QUARANTINE)
    lsns, gaps = read_all(log_dir)
    assert lsns == [i for i in range(300) if i != 40]
    assert [(g.first_lsn, g.next_lsn) for g in gaps] == [(40, 41)]


def test_damage_over_several_records_becomes_one_gap(log_dir: str) -> None:
    bases = make_log(log_dir)
    path, first = record_at(log_dir, bases, 50)
    _path, last = record_at(log_dir, bases, 52)
    assert _path == path
    overwrite(path, first.offset + 5, bytes(last.offset + last.size - first.offset - 10))
    repaired(log_dir, _repair.QUARANTINE)
    lsns, gaps = read_all(log_dir)
    assert lsns == [i for i in range(300) if not 50 <= i <= 52]
    assert [(g.first_lsn, g.next_lsn) for g in gaps] == [(50, 53)]


def test_damage_to_the_end_of_an_old_segment_gaps_to_the_next_segment(log_dir: str) -> None:
    bases = make_log(log_dir)
    path = seg_path(log_dir, bases[1])
    _p, info = record_at(log_dir, bases, bases[2] - 3)
    size = os.path.getsize(path)
    overwrite(path, info.offset + 2, b"\xee" * (size - info.offset - 2))  # the last records and the seal
    report = repaired(log_dir, _repair.QUARANTINE, _repair.SEAL)
    assert report.actions[0].kind == _repair.QUARANTINE
    assert f"lsns {bases[2] - 3}..{bases[2] - 1}" in report.actions[0].detail
    assert report.actions[1].kind == _repair.SEAL  # the segment ends sealed again
    lsns, gaps = read_all(log_dir)
    assert lsns == [i for i in range(300) if not bases[2] - 3 <= i < bases[2]]
    assert [(g.first_lsn, g.next_lsn) for g in gaps] == [(bases[2] - 3, bases[2])]


@pytest.mark.parametrize("lost", [0, 1, 4])
def test_an_old_segment_cut_short_at_a_record_boundary_is_damage_and_is_sealed(
    log_dir: str, lost: int
) -> None:
    """No crash leaves a segment unsealed before the next one (the seal is durable first): a
    reader must not stop there quietly as if the log ended, verify must call it damage, and
    repair records the lost lsns as a gap and writes the seal."""
    bases = make_log(log_dir)
    path = seg_path(log_dir, bases[1])
    first_lost = bases[2] - lost
    cut = (
        record_at(log_dir, bases, first_lost)[1].offset
        if lost
        else os.path.getsize(path) - fmt.RECORD_OVERHEAD
    )
    os.truncate(path, cut)
    problems = logspool.verify(log_dir).problems
    if lost:
        with pytest.raises(logspool.CorruptionError) as info:
            read_all(log_dir)
        assert info.value.path == path and info.value.offset == cut
        assert f"ends at lsn {first_lost} without a seal, but segment {bases[2]} follows" in str(info.value)
        assert any(p.severity == "damage" and p.path == path and p.offset == cut for p in problems)
    else:  # only the seal is gone: nothing is lost, readers go on to the next segment
        assert read_all(log_dir) == (list(range(300)), [])
        assert [(p.severity, p.path) for p in problems] == [("note", path)]
        assert "lost seal" in problems[0].message
    report = repaired(log_dir, _repair.SEAL)
    assert ("lost: a gap record" in report.actions[0].detail) == bool(lost)
    lsns, gaps = read_all(log_dir)
    assert lsns == [i for i in range(300) if not first_lost <= i < bases[2]]
    assert [(g.first_lsn, g.next_lsn) for g in gaps] == ([(first_lost, bases[2])] if lost else [])


def test_a_torn_tail_of_the_newest_segment_is_cut(log_dir: str) -> None:
    bases = make_log(log_dir)
    path = seg_path(log_dir, bases[-1])
    with open(path, "ab") as f:  # half a record: a crash mid-append
        f.write(fmt.encode_record(300, 1, 0, b"never acknowledged")[:30])
    report = repaired(log_dir, _repair.TRUNCATE_TAIL)
    assert "lsn 300 was not proven durable" in report.actions[0].detail
    assert read_all(log_dir) == (list(range(300)), [])


def test_a_corrupt_acknowledged_record_in_the_newest_segment_is_quarantined(log_dir: str) -> None:
    n = 330  # (the newest segment then holds lsns 294..329, with index entries after 295)
    bases = make_log(log_dir, n)
    # The second record of the newest segment's first batch: the next batches' records carry
    # a durable_lsn above it, and the sync mark lies past it, which proves it was fsynced (a
    # crash cannot have torn it) and makes it corruption, not a torn tail.
    damaged = bases[-1] + 1
    assert damaged + 7 < n, "the newest segment needs a batch after the damaged record"
    path, info = record_at(log_dir, bases, damaged)
    assert path == seg_path(log_dir, bases[-1])
    overwrite(path, info.offset + 20, b"\x00\xff")
    # In the boot that wrote it, a writer's open starts at the newest index entry, after it, and
    # leaves it alone; a reader names it.
    with logspool.open(log_dir) as log, pytest.raises(logspool.CorruptionError) as caught:
        list(log.read(start=0))
    assert (caught.value.path, caught.value.offset) == (path, info.offset)
    # After a reboot the open checks the newest segment whole, and a writer refuses it: a later
    # record proves it was fsynced.
    with pytest.raises(logspool.CorruptionError) as caught:
        logspool.open(log_dir, fs=AfterReboot()).close()
    assert (caught.value.path, caught.value.offset) == (path, info.offset)
    repaired(log_dir, _repair.QUARANTINE)
    assert read_all(log_dir)[0] == [i for i in range(n) if i != damaged]
    with logspool.open(log_dir) as log:
        assert log.append(payload(n)) == n
    assert read_all(log_dir)[0][-2:] == [n - 1, n]


def test_a_damaged_segment_header_is_rewritten_from_the_name(log_dir: str) -> None:
    bases = make_log(log_dir)
    overwrite(seg_path(log_dir, bases[1]), 0, b"GARBAGE!")
    with pytest.raises(logspool.CorruptionError):
        read_all(log_dir)
    repaired(log_dir, _repair.REWRITE_HEADER)
    assert read_all(log_dir) == (list(range(300)), [])


def test_a_missing_segment_becomes_a_gap(log_dir: str) -> None:
    bases = make_log(log_dir)
    os.unlink(seg_path(log_dir, bases[2]))
    os.unlink(os.path.join(log_dir, fmt.index_name(bases[2])))
    repaired(log_dir, _repair.FILL_MISSING)
    lsns, gaps = read_all(log_dir)
    assert lsns == [i for i in range(300) if not bases[2] <= i < bases[3]]
    assert [(g.first_lsn, g.next_lsn) for g in gaps] == [(bases[2], bases[3])]


def test_indexes_missing_damaged_or_orphaned_are_rebuilt_or_removed(log_dir: str) -> None:
    bases = make_log(log_dir)
    os.unlink(os.path.join(log_dir, fmt.index_name(bases[1])))
    overwrite(os.path.join(log_dir, fmt.index_name(bases[2])), 40, b"\x01\x02\x03")
    Path(log_dir, fmt.index_name(10**9)).write_bytes(fmt.encode_index_header(10**9, 512))
    good = Path(log_dir, fmt.index_name(bases[3])).read_bytes()
    report = repaired(log_dir, _repair.REBUILD_INDEX, _repair.REMOVE_ORPHAN_INDEX)
    assert len(report.actions) == 3
    assert not os.path.exists(os.path.join(log_dir, fmt.index_name(10**9)))
    assert Path(log_dir, fmt.index_name(bases[3])).read_bytes() == good  # a good one is left alone
    with logspool.open(log_dir, readonly=True) as log:
        assert log.reader(start=bases[1] + 5).next(timeout=0).lsn == bases[1] + 5  # type: ignore[union-attr]


def test_checkpoints_before_the_start_or_past_the_head_are_moved_and_damaged_ones_set_aside(
    log_dir: str,
) -> None:
    bases = make_log(log_dir)
    with logspool.open(log_dir) as log:
        log.add_subscriber("early", start="earliest")
        log.add_subscriber("late", start=250)
        log.add_subscriber("fine", start=100)
    os.unlink(seg_path(log_dir, bases[0]))  # as retention would, without looking at subscribers
    os.unlink(os.path.join(log_dir, fmt.index_name(bases[0])))
    late = os.path.join(log_dir, fmt.checkpoint_name("late"))
    cp = fmt.decode_checkpoint(Path(late).read_bytes(), late)
    Path(late).write_bytes(
        fmt.encode_checkpoint(fmt.Checkpoint("late", 10**6, cp.committed_ns, cp.created_ns))
    )
    bad = fmt.CHECKPOINT_PREFIX + hashlib.sha256(b"lost").hexdigest()
    Path(log_dir, bad).write_bytes(b"not a checkpoint at all")
    report = repaired(log_dir, _repair.MOVE_CHECKPOINT, _repair.QUARANTINE_CHECKPOINT)
    assert len(report.actions) == 3
    with logspool.open(log_dir) as log:
        where = {s.name: s.lsn for s in log.subscribers()}
    assert where == {"early": bases[1], "late": 300, "fine": 100}
    assert Path(log_dir, "quarantine", bad).read_bytes() == b"not a checkpoint at all"


def test_temporary_files_of_dead_processes_are_removed(log_dir: str) -> None:
    make_log(log_dir, n=20)
    dead = 2**22 + 12345  # above pid_max on a default kernel: no such process
    stale = [f".{fmt.checkpoint_name('a')}.{dead}.0badc0de.tmp", f".meta.{dead}.abcd1234"]
    live = f".retention.{os.getpid()}.12345678.tmp"
    for name in [*stale, live]:
        Path(log_dir, name).write_bytes(b"partial")
    report = repaired(log_dir, _repair.REMOVE_TEMP)
    assert sorted(os.path.basename(a.path) for a in report.actions) == sorted(stale)
    assert os.path.exists(os.path.join(log_dir, live))  # its process may still rename it


def test_a_compressed_record_that_does_not_decompress_is_quarantined(log_dir: str) -> None:
    bases = make_log(log_dir, compression="zstd")
    path, info = record_at(log_dir, bases, 7)
    length = info.size - fmt.RECORD_OVERHEAD
    data = Path(path).read_bytes()
    head = data[info.offset : info.offset + fmt.RECORD_HEADER_SIZE]
    _l, flags, lsn, ts, durable = fmt.RECORD_HEADER.unpack(head)
    assert flags == fmt.FLAG_ZSTD
    overwrite(
        path, info.offset, fmt.encode_record(lsn, ts, durable, b"\x28\xb5\x2f\xfd" + bytes(length - 4), flags)
    )
    repaired(log_dir, _repair.QUARANTINE)
    assert read_all(log_dir)[0] == [i for i in range(300) if i != 7]


def test_repair_waits_for_the_writer_lock(log_dir: str) -> None:
    make_log(log_dir, n=10)
    with logspool.open(log_dir) as log, log.exclusive(), pytest.raises(logspool.LockedError):
        logspool.repair(log_dir, lock_timeout_s=0.2)


def test_repair_refuses_what_is_not_a_log(tmp_path: Path) -> None:
    with pytest.raises(logspool.NotALogError):
        logspool.repair(tmp_path)


def test_cli_repair_reports_each_action_and_exits_0(log_dir: str) -> None:
    bases = make_log(log_dir)
    path, info = record_at(log_dir, bases, 33)
    overwrite(path, info.offset + 40, b"!!")
    dry = run_cli("repair", log_dir, "--dry-run")
    assert (
        dry.returncode == 0 and b"would quarantine:" in dry.stdout and b"would take 1 actions" in dry.stdout
    )
    done = run_cli("repair", log_dir, "--json")
    assert done.returncode == 0, done.stderr
    obj = json.loads(done.stdout)
    assert obj["ok"] and [a["kind"] for a in obj["actions"]] == ["quarantine"]
    assert run_cli("verify", log_dir).returncode == 0
    assert b"took 0 actions" in run_cli("repair", log_dir).stdout


def test_verify_reports_each_gap_record_at_its_own_offset(log_dir: str) -> None:
    """verify named every gap record at offset 0 of its segment (issue 32): it must name the
    gap's own offset, for a gap in the middle of a segment and for two gap records in a row."""
    bases = make_log(log_dir)
    path, first = record_at(log_dir, bases, 10)
    _path, second = record_at(log_dir, bases, 11)
    _path, third = record_at(log_dir, bases, 20)
    assert first.offset > fmt.SEGMENT_HEADER_SIZE and _path == path
    for info in (first, third):
        overwrite(path, info.offset + fmt.RECORD_HEADER_SIZE + 3, b"#")
    repaired(log_dir, _repair.QUARANTINE)
    overwrite(path, second.offset + fmt.RECORD_HEADER_SIZE + 3, b"#")  # right after the first gap
    repaired(log_dir, _repair.QUARANTINE)
    notes = [p for p in logspool.verify(log_dir).problems if "quarantined by repair" in p.message]
    assert [(p.path, p.offset, p.message.split(":")[0]) for p in notes] == [
        (path, first.offset, "lsns 10..10"),
        (path, second.offset, "lsns 11..11"),
        (path, third.offset, "lsns 20..20"),
    ]
    done = run_cli("verify", log_dir)
    assert done.returncode == 0 and f"offset {first.offset}: lsns 10..10".encode() in done.stdout


@pytest.mark.parametrize("damage", ["zeroed", "flipped"])
def test_a_damaged_seal_is_replaced_in_one_run(log_dir: str, damage: str) -> None:
    """An older segment whose seal was zeroed or fails its checksum, the next segment starting
    where it said: one repair quarantines the bytes and writes the seal (it took two runs), and
    a second repair has nothing to do."""
    with logspool.open(log_dir) as log:
        log.append_many([b"a", b"b", b"c"])
        log.cutover()
        log.append(b"d")
        seal_end = log.info().segments[0].size
    first = os.path.join(log_dir, fmt.segment_name(0))
    with open(first, "r+b") as f:
        f.seek(seal_end - fmt.RECORD_OVERHEAD)
        seal = f.read(fmt.RECORD_OVERHEAD)
        f.seek(seal_end - fmt.RECORD_OVERHEAD)
        f.write(bytes(fmt.RECORD_OVERHEAD) if damage == "zeroed" else seal[:-1] + bytes([seal[-1] ^ 1]))
    assert not logspool.verify(log_dir).ok
    report = logspool.repair(log_dir)
    assert report.ok and {a.kind for a in report.actions} == {_repair.QUARANTINE, _repair.SEAL}
    assert logspool.repair(log_dir).actions == []
    assert logspool.verify(log_dir).ok
    with logspool.open(log_dir, readonly=True) as log:
        assert [r.payload for r in log.read()] == [b"a", b"b", b"c", b"d"]
