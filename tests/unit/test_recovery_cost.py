"""What opening a log costs (FORMAT.md §9): within the boot in which a writer last recovered the
log, recovery starts at the newest segment's last index entry; after a reboot it reads the newest
segment whole; either way in chunks, so memory stays flat in the segment's size. Counted through
the I/O seam on real files."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import pytest

import logspool
from logspool import _format as fmt
from logspool import _segment as seg
from logspool._fs import FileSystem
from tests.conftest import AfterReboot

RECORDS = 60_000  # 100-byte payloads: ~8 MiB in one segment
PAYLOAD = b"p" * 100


class Counting(FileSystem):
    """The real file system, counting the bytes read from segment files."""

    def __init__(self, boot: bytes | None = None) -> None:
        self.seg_fds: set[int] = set()
        self.seg_bytes_read = 0
        self._boot = boot

    def boot_id(self) -> bytes:
        return super().boot_id() if self._boot is None else self._boot

    def open(self, path: str, flags: int, mode: int = 0o644) -> int:
        fd = super().open(path, flags, mode)
        if path.endswith(fmt.SEGMENT_SUFFIX):
            self.seg_fds.add(fd)
        return fd

    def close(self, fd: int) -> None:
        self.seg_fds.discard(fd)
        super().close(fd)

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        data = super().pread(fd, size, offset)
        if fd in self.seg_fds:
            self.seg_bytes_read += len(data)
        return data


def _fill(path: str, durability: str) -> int:
    """A log of RECORDS records in one segment; returns the segment's size."""
    with logspool.open(path, durability=durability, segment_size_max=64 << 20) as log:
        for _ in range(0, RECORDS, 1000):
            log.append_many([PAYLOAD] * 1000)
    (name,) = [n for n in os.listdir(path) if n.endswith(fmt.SEGMENT_SUFFIX)]
    return os.path.getsize(os.path.join(path, name))


def _open_and_append(path: str, fs: FileSystem) -> int:
    """Open as a writer, append one record; the peak of traced memory during the open."""
    tracemalloc.start()
    try:
        log = logspool.open(path, fs=fs)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    with log:
        assert log.append(b"after") == RECORDS
    return peak


def test_reopening_in_the_same_boot_reads_only_what_follows_the_last_index_entry(log_dir: str) -> None:
    size = _fill(log_dir, "always")
    fs = Counting()
    peak = _open_and_append(log_dir, fs)
    # The last entry is at most one index interval (64 KiB) before the end; the sync mark is at
    # the end (durable records), so nothing is read again to be rewritten either.
    assert fs.seg_bytes_read < 2 * fmt.SEGMENT_HEADER_SIZE + 64 * 1024 + 4096, (fs.seg_bytes_read, size)
    assert peak < 3 << 20, peak
    with logspool.open(log_dir, readonly=True) as log:
        assert sum(1 for _ in log.read()) == RECORDS + 1


def test_after_a_reboot_the_newest_segment_is_read_whole_in_chunks(log_dir: str) -> None:
    size = _fill(log_dir, "always")
    fs = Counting(boot=os.urandom(16))
    peak = _open_and_append(log_dir, fs)
    assert fs.seg_bytes_read >= size
    assert peak < 4 << 20, f"{peak} bytes traced while recovering a {size}-byte segment"
    # That open recorded this (fake) boot: the next open in it starts at the last index entry.
    again = Counting(boot=fs.boot_id())
    with logspool.open(log_dir, fs=again):
        assert again.seg_bytes_read < 64 * 1024 + 4096


def test_an_os_log_reopened_in_the_same_boot_is_rewritten_past_the_sync_mark_in_chunks(
    log_dir: str,
) -> None:
    """With durability "os" nothing moved the sync mark: the open writes the records again
    (the defence against a failed fsync's clean pages, FORMAT.md §9), a chunk at a time."""
    size = _fill(log_dir, "os")
    fs = Counting()
    peak = _open_and_append(log_dir, fs)
    assert size <= fs.seg_bytes_read < size + (1 << 20)
    assert peak < 3 << 20, peak


def _entry_bytes(path: str) -> bytes:
    (name,) = [n for n in os.listdir(path) if n.endswith(fmt.INDEX_SUFFIX)]
    return Path(path, name).read_bytes()


def test_an_index_entry_past_the_records_makes_the_open_read_the_segment_whole(log_dir: str) -> None:
    """Within the boot an index entry is trusted only if the record it names checks out."""
    with logspool.open(log_dir, index_interval=512) as log:
        log.append_many([PAYLOAD] * 100)
    with logspool.open(log_dir, readonly=True) as log:
        end = log.info().segments[-1].size  # (closed: the preallocated zeros are cut)
    good = _entry_bytes(log_dir)
    (idx,) = [n for n in os.listdir(log_dir) if n.endswith(fmt.INDEX_SUFFIX)]
    with open(os.path.join(log_dir, idx), "ab") as f:  # a stale entry: lsn 150 past the records
        f.write(fmt.encode_index_entry(150, 1, end + 1000))
    fs = Counting()
    with logspool.open(log_dir, fs=fs, index_interval=512) as log:
        assert fs.seg_bytes_read >= end
        assert log.append(b"after") == 100
    assert _entry_bytes(log_dir)[: len(good)] == good
    assert logspool.verify(log_dir).ok


def _records(path: str) -> list[seg.RecordInfo]:
    infos: list[seg.RecordInfo] = []
    seg.parse(Path(path).read_bytes(), fmt.SEGMENT_HEADER_SIZE, 0, 1 << 20, None, infos)
    return infos


def _small_os_log(log_dir: str) -> str:
    """100 records in ten batches, durability "os" (no record claims another durable), an index
    entry every 512 bytes; returns the segment's path."""
    with logspool.open(log_dir, durability="os", index_interval=512) as log:
        for _ in range(10):
            log.append_many([PAYLOAD] * 10)
    (name,) = [n for n in os.listdir(log_dir) if n.endswith(fmt.SEGMENT_SUFFIX)]
    return os.path.join(log_dir, name)


def test_a_hole_is_found_after_a_reboot_and_cut(log_dir: str) -> None:
    """A run of zeros inside the records of an "os" log: what a power loss can leave of bytes
    written in place and never fsynced. After a reboot the open reads the segment whole and cuts
    there: nothing from the hole on was acknowledged as durable."""
    path = _small_os_log(log_dir)
    hole = _records(path)[40]
    with open(path, "r+b") as f:
        f.seek(hole.offset)
        f.write(bytes(hole.size))
    with logspool.open(log_dir, fs=AfterReboot()) as log:
        assert [r.lsn for r in log.read()] == list(range(40))
        assert log.append(b"after") == 40
    assert logspool.verify(log_dir).ok


def test_damage_before_the_last_index_entry_within_the_boot_is_named_by_a_reader(log_dir: str) -> None:
    """Within the boot that wrote them no crash can damage records already written: the open
    starts after the damage (it does not cut it, nor anything else), a reader names it, and
    verify reports it."""
    path = _small_os_log(log_dir)
    damaged = _records(path)[40]
    with open(path, "r+b") as f:
        f.seek(damaged.offset + fmt.RECORD_HEADER_SIZE)
        f.write(b"\xff" * 8)
    with logspool.open(log_dir) as log:
        assert log.append(b"after") == 100
        with pytest.raises(logspool.CorruptionError) as caught:
            list(log.read())
    assert (caught.value.path, caught.value.offset) == (path, damaged.offset)
    assert not logspool.verify(log_dir).ok


def test_repair_makes_the_next_open_read_the_newest_segment_whole(log_dir: str) -> None:
    """Repair edits segments in place: the open after it does not start at an index entry that
    repair may have left behind; a dry run changes nothing, the boot included."""
    path = _small_os_log(log_dir)
    size = os.path.getsize(path)
    logspool.open(log_dir).close()  # recovered whole in this boot, which the sync file now names
    logspool.repair(log_dir, dry_run=True)
    fs = Counting()
    logspool.open(log_dir, fs=fs).close()
    trusted = fs.seg_bytes_read
    logspool.repair(log_dir)
    fs = Counting()
    logspool.open(log_dir, fs=fs).close()
    assert trusted < size <= fs.seg_bytes_read, (trusted, fs.seg_bytes_read, size)
