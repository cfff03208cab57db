"""Recovery from every torn tail: the newest segment cut at every byte, zero-filled, or damaged.

How: write a log, keep a copy of its bytes, then for each damage rebuild the directory from the
copy with the damage applied and open it. After recovery the log must hold a prefix of what was
appended that contains every acknowledged record, verify clean, accept appends, and open again to
the same state. Damage inside records a later record proves were fsynced must raise
CorruptionError naming the file and offset, never be cut silently.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import logspool
from logspool import _format as fmt
from tests.conftest import AfterReboot


def _build(path: str, count: int, durability: str = "os") -> list[bytes]:
    data = [f"record-{i}-".encode() * (1 + i % 3) for i in range(count)]
    with logspool.open(path, durability=durability, segment_size_max=4096) as log:
        for p in data:
            log.append(p)
    return data


def _newest_segment(path: str) -> str:
    return os.path.join(path, sorted(n for n in os.listdir(path) if n.endswith(".seg"))[-1])


def _records_by_lsn(path: str) -> list[bytes]:
    with logspool.open(path, readonly=True) as log:
        recs = list(log.read())
    assert [r.lsn for r in recs] == list(range(len(recs)))
    return [r.payload for r in recs]


def test_cut_newest_segment_at_every_byte(tmp_path: Path) -> None:
    original = str(tmp_path / "orig")
    appended = _build(original, 100)
    newest = os.path.basename(_newest_segment(original))
    full = Path(original, newest).read_bytes()
    base = fmt.parse_segment_name(newest)
    assert base is not None and base > 0, "the test needs more than one segment"
    work = str(tmp_path / "work")
    for cut in range(len(full) + 1):
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(original, work)
        Path(work, newest).write_bytes(full[:cut])
        with logspool.open(work, durability="always") as log:
            got = _records_by_lsn(work)
            assert got == appended[: len(got)], f"cut at {cut}: not a prefix"
            assert len(got) >= base, f"cut at {cut}: lost records of sealed segments"
            assert log.append(b"after") == len(got)
        again = _records_by_lsn(work)
        assert again == [*got, b"after"]
        report = logspool.verify(work)
        assert report.ok, (cut, report.problems)
    # The untouched copy recovers to everything.
    assert _records_by_lsn(original) == appended


def test_zero_filled_tail_is_a_crash_state_and_is_cut(tmp_path: Path, log_dir: str) -> None:
    """Zeros after the records (a crash, or a writer's preallocated space) are no record: the
    next writer writes over them, and a handle cuts them when it closes."""
    appended = _build(log_dir, 10)
    seg_path = _newest_segment(log_dir)
    size = os.path.getsize(seg_path)
    for zeros in (1, 31, 32, 36, 4096):
        with open(seg_path, "ab") as f:
            f.write(bytes(zeros))
        assert logspool.verify(log_dir).ok  # a zero tail is a note, not damage
        with logspool.open(log_dir) as log:
            assert [r.payload for r in log.read()] == appended
        assert os.path.getsize(seg_path) == size, f"{zeros} zero bytes not cut on close"
    with open(seg_path, "ab") as f:
        f.write(bytes(4096))
    with logspool.open(log_dir) as log:
        assert log.append(b"over the zeros") == 10
    with logspool.open(log_dir) as log:
        assert [r.payload for r in log.read()] == [*appended, b"over the zeros"]
    assert os.path.getsize(seg_path) == size + fmt.RECORD_OVERHEAD + len(b"over the zeros")


def test_garbage_after_the_last_record_is_cut_when_never_fsynced(log_dir: str) -> None:
    appended = _build(log_dir, 10, durability="os")
    seg_path = _newest_segment(log_dir)
    size = os.path.getsize(seg_path)
    with open(seg_path, "ab") as f:
        f.write(b"\xff" * 100)
    with logspool.open(log_dir, durability="os") as log:
        assert [r.payload for r in log.read()] == appended
    assert os.path.getsize(seg_path) == size


def _flip(path: str, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x40]))


def test_damage_in_fsynced_records_is_reported_not_cut(log_dir: str) -> None:
    # With durability="always", later records carry durable_lsn past the damaged one: proof that
    # it was acknowledged, so recovery must refuse to cut it.
    _build(log_dir, 40, durability="always")
    seg_path = _newest_segment(log_dir)
    size = os.path.getsize(seg_path)
    target = fmt.SEGMENT_HEADER_SIZE + fmt.RECORD_HEADER_SIZE + 2  # payload of the first record
    _flip(seg_path, target)
    with pytest.raises(logspool.CorruptionError) as info:
        logspool.open(log_dir)
    assert info.value.path == seg_path
    assert info.value.offset == fmt.SEGMENT_HEADER_SIZE
    assert "fsynced" in info.value.reason
    assert os.path.getsize(seg_path) == size, "recovery cut acknowledged data"
    report = logspool.verify(log_dir)
    assert not report.ok
    assert any(p.path == seg_path and p.offset == fmt.SEGMENT_HEADER_SIZE for p in report.problems)
    with logspool.open(log_dir, readonly=True) as log, pytest.raises(logspool.CorruptionError):
        list(log.read())


def test_damage_in_a_sealed_segment_is_reported_by_readers_and_verify(log_dir: str) -> None:
    _build(log_dir, 80, durability="always")
    first = os.path.join(log_dir, fmt.segment_name(0))
    _flip(first, fmt.SEGMENT_HEADER_SIZE + 200)
    with logspool.open(log_dir) as log:  # only the newest segment is checked on open: O(newest)
        with pytest.raises(logspool.CorruptionError) as info:
            list(log.read())
        assert info.value.path == first
    report = logspool.verify(log_dir)
    assert not report.ok and report.problems[0].path == first


def test_unsynced_hole_followed_by_records_is_cut(log_dir: str) -> None:
    # durability="os": nothing was fsynced, so a power loss may keep a later page and lose an
    # earlier one. The records after the hole carry no proof: everything from the hole is cut.
    # (After the power loss, so in another boot: within the boot that wrote them, the page cache
    # cannot lose a page, and a hole followed by records is damage: the next test.) The bytes
    # cut are kept in quarantine/.
    appended = _build(log_dir, 30, durability="os")
    seg_path = _newest_segment(log_dir)
    data = bytearray(Path(seg_path).read_bytes())
    hole_at = fmt.SEGMENT_HEADER_SIZE + 100
    data[hole_at : hole_at + 64] = bytes(64)
    Path(seg_path).write_bytes(bytes(data))
    with logspool.open(log_dir, durability="os", fs=AfterReboot()) as log:
        got = [r.payload for r in log.read()]
    assert got == appended[: len(got)]
    assert logspool.verify(log_dir).ok
    kept = list(Path(log_dir, "quarantine").iterdir())
    assert len(kept) == 1 and appended[-1] in kept[0].read_bytes()


def test_a_hole_followed_by_records_within_the_boot_that_wrote_them_is_damage(log_dir: str) -> None:
    """A closed "os" log, one byte of its first record flipped (bit rot, or a stray write), then
    opened in the same boot: no crash of a process leaves a damaged record followed by valid
    ones, so recovery must not cut the 30 records; it raises, and verify says damaged."""
    _build(log_dir, 30, durability="os")
    seg_path = _newest_segment(log_dir)
    data = bytearray(Path(seg_path).read_bytes())
    data[fmt.SEGMENT_HEADER_SIZE + 40] ^= 0x10
    Path(seg_path).write_bytes(bytes(data))
    with pytest.raises(logspool.CorruptionError, match="followed by valid records"):
        logspool.open(log_dir, durability="os")
    assert Path(seg_path).read_bytes() == bytes(data)  # nothing cut


def test_crash_during_rotation_is_recovered(log_dir: str) -> None:
    appended = _build(log_dir, 40)
    newest = _newest_segment(log_dir)
    base = fmt.parse_segment_name(os.path.basename(newest))
    assert base is not None
    # The new segment was created but its header never written.
    Path(newest).write_bytes(b"")
    os.unlink(newest.replace(".seg", ".idx"))
    with logspool.open(log_dir) as log:
        assert [r.payload for r in log.read()] == appended[:base]
    # The seal was written but the new segment never created.
    os.unlink(_newest_segment(log_dir))
    with logspool.open(log_dir) as log:
        assert log.append(b"y") == base
    assert logspool.verify(log_dir).ok


def test_record_with_valid_checksum_but_wrong_lsn_is_corruption(log_dir: str) -> None:
    _build(log_dir, 3, durability="os")
    seg_path = _newest_segment(log_dir)
    # A duplicated block: the last record appended again, checksum valid, lsn repeated.
    with logspool.open(log_dir, readonly=True) as log:
        last = list(log.read())[-1]
    dup = fmt.encode_record(last.lsn, last.timestamp, 0, last.payload)
    with open(seg_path, "ab") as f:
        f.write(dup)
    with pytest.raises(logspool.CorruptionError, match="expected"):
        logspool.open(log_dir)


def _append_raw_record(path: str, lsn: int, payload: bytes, *, break_crc: bool) -> tuple[str, int, bytes]:
    """Write one whole record with lsn ``lsn`` at the end of the newest segment's records, as a
    writer copying it in (or a torn write) leaves it: (segment, offset, its good bytes)."""
    seg_path = _newest_segment(path)
    good = fmt.encode_record(lsn, 1, 0, payload)
    with logspool.open(path, readonly=True) as log:
        end = log.info().segments[-1].size
    with open(seg_path, "r+b") as f:
        f.seek(end)
        f.write(good[:-1] + bytes([good[-1] ^ 0xFF]) if break_crc else good)
    return seg_path, end, good


def test_a_one_shot_reader_ends_at_an_unproven_torn_record_and_a_follower_waits(log_dir: str) -> None:
    """FORMAT.md §9.2: a whole record failing its checksum at the end of the newest segment,
    with nothing proving it fsynced (an `os` log): a one-shot reader ends before it (the next
    writer cuts it, keeping a copy), `cat` exits 0 as `verify` does, a follower waits there and
    reads the record once its bytes are whole (a writer copying it in). Before, readers re-read
    it for 0.5 s, then raised CorruptionError while verify said ok."""
    from tests.conftest import run_cli

    with logspool.open(log_dir, durability="os") as log:
        log.append_many([b"a", b"b", b"c"])
    seg_path, end, good = _append_raw_record(log_dir, 3, b"zero" * 4, break_crc=True)
    with logspool.open(log_dir, readonly=True) as log:
        assert [r.payload for r in log.read()] == [b"a", b"b", b"c"]
        follower = log.reader(3)
        assert follower.next(timeout=0) is None
        with open(seg_path, "r+b") as f:
            f.seek(end)
            f.write(good)
        got = follower.next(timeout=30)
        assert got is not None and (got.lsn, got.payload) == (3, b"zero" * 4)
        follower.close()
    with open(seg_path, "r+b") as f:  # torn again, for the tools
        f.seek(end + len(good) - 1)
        f.write(bytes([good[-1] ^ 0xFF]))
    cat = run_cli("cat", log_dir)
    assert (cat.returncode, cat.stdout) == (0, b"a\nb\nc\n")
    assert run_cli("verify", log_dir).returncode == 0


def test_a_torn_record_proven_fsynced_is_damage_at_once(log_dir: str) -> None:
    """The same torn record below what the sync mark proves (an `always` log closed cleanly):
    damage for every reader, at once."""
    with logspool.open(log_dir) as log:
        log.append_many([b"a", b"b", b"c"])
    seg_path = _newest_segment(log_dir)
    size = os.path.getsize(seg_path)
    with logspool.open(log_dir, readonly=True) as log:
        end = log.info().segments[-1].size
    _flip(seg_path, end - 2)  # inside the last record's CRC
    assert os.path.getsize(seg_path) == size
    with logspool.open(log_dir, readonly=True) as log, pytest.raises(logspool.CorruptionError) as raised:
        list(log.read())
    assert "fails its checksum" in str(raised.value) and "sync mark proves" in str(raised.value)


def test_a_damaged_seal_says_no_lsn_is_missing(log_dir: str) -> None:
    """A sealed segment whose seal fails its checksum, the next segment starting where it said:
    damage (FORMAT.md §9.2), named as a damaged seal, not as a range "lsns 3..2"."""
    with logspool.open(log_dir) as log:
        log.append_many([b"a", b"b", b"c"])
        log.cutover()
        log.append(b"d")
    first = os.path.join(log_dir, fmt.segment_name(0))
    with logspool.open(log_dir, readonly=True) as log:
        seal_end = log.info().segments[0].size
    _flip(first, seal_end - 1)
    with logspool.open(log_dir, readonly=True) as log, pytest.raises(logspool.CorruptionError) as raised:
        list(log.read())
    assert "its seal is damaged; no lsn is missing" in str(raised.value)
