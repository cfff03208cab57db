"""Recovering a large unpublished batch takes memory for a few chunks, not for the batch, and
decides exactly as before (review of issue 28: a writer killed between a 64 MiB batch's fsync
and its publish made the next open take 3x the batch's size in memory, since the bytes after the
failed record were read, searched and copied to quarantine whole).

How: a writer process, through a ``_fs`` seam whose fsync ends the process after the batch's
body was written and fsynced (FORMAT.md §7.1 step 4, before the publish), leaves a 64 MiB batch
unpublished in a segment of its own. Then, in this process (the same boot), a writer's open
(recovery, §9) or a live writer's next append (its catch-up, §7 step 1) cuts it, under
``tracemalloc``: the peak of Python's allocations is deterministic, unlike a time or the RSS.
The decisions are checked as well: the records are those before the batch, the quarantine file
holds the bytes from the batch's first record to its last non-zero byte, byte for byte (compared
by hash: the test holds no copy of the batch either), and the log verifies clean. (That the
judgment itself decides as before in every case is tests/unit/test_judge_in_chunks.py.)
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import textwrap
import tracemalloc
from pathlib import Path

import pytest

import logspool
from logspool import _format as fmt

BATCH_SIZE = 64 << 20  # bytes framed: 16384 records of 4096 bytes
RECORD_SIZE = 4096
PEAK_MAX = 8 << 20  # a few chunks of 1 MiB (``_segment.SCAN_CHUNK``); before the fix: ~200 MiB

_DIE_AFTER_BODY_FSYNC = f"""
import os, sys
import logspool
from logspool._fs import FileSystem

class DieAfterBodyFsync(FileSystem):
    # The batch's body is written in pwrites of a chunk (1 MiB here); the first fsync after
    # one is the body's (FORMAT.md §7.1 step 4): the process dies right after it.
    written = False

    def pwrite(self, fd, data, offset):
        super().pwrite(fd, data, offset)
        if len(data) > 65536:
            self.written = True

    def fsync(self, fd):
        super().fsync(fd)
        if self.written:
            os._exit(9)

path, size, record = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
payload = b"r" * (record - {fmt.RECORD_OVERHEAD})
per_chunk = (1 << 20) // record
chunks = ([payload] * per_chunk for _ in range(size // record // per_chunk))
log = logspool.open(path, fs=DieAfterBodyFsync(), durability="os")
with log.exclusive() as tail:
    tail.append_batch(chunks, size=size)
sys.exit("the batch was published")
"""


def _leave_unpublished_batch(path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(_DIE_AFTER_BODY_FSYNC),
            str(path),
            str(BATCH_SIZE),
            str(RECORD_SIZE),
        ],
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 9, done.stderr.decode()


def _tail_digest(segment: Path, offset: int) -> tuple[int, str]:
    """The size and sha256 of the segment's bytes from ``offset`` to its last non-zero byte (what
    recovery copies to quarantine), read in chunks."""
    data_end = offset
    digest = hashlib.sha256()
    pending = 0  # zeros seen since the last non-zero byte, hashed once a non-zero byte follows
    with segment.open("rb") as f:
        f.seek(offset)
        for chunk in iter(lambda: f.read(1 << 20), b""):
            kept = chunk.rstrip(b"\0")
            if kept:
                digest.update(bytes(pending))
                digest.update(kept)
                data_end += pending + len(kept)
                pending = len(chunk) - len(kept)
            else:
                pending += len(chunk)
    return data_end - offset, digest.hexdigest()


@pytest.mark.parametrize("path_taken", ["open", "catch_up"])
def test_an_unpublished_batch_is_cut_in_bounded_memory(tmp_path: Path, path_taken: str) -> None:
    path = tmp_path / "log"
    before = [b"A%d" % i for i in range(5)]
    with logspool.open(path, durability="os") as log:
        log.append_many(before)
    live = logspool.open(path, durability="os") if path_taken == "catch_up" else None
    try:
        _leave_unpublished_batch(path)
        segments = sorted(path.glob("*.seg"))
        newest = segments[-1]
        assert newest.name == fmt.segment_name(len(before)), "the batch has a segment of its own"
        at = fmt.SEGMENT_HEADER_SIZE  # the batch's first record, its CRC complemented
        size, digest = _tail_digest(newest, at)
        assert size == BATCH_SIZE, "the batch was not all written before its fsync"

        tracemalloc.start()
        try:
            if live is None:
                with logspool.open(path, durability="os") as log:
                    pass
            else:
                assert live.append(b"after") == len(before)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    finally:
        if live is not None:
            live.close()
    assert peak < PEAK_MAX, f"recovery peaked at {peak} bytes of Python allocations"

    expected = [*before, b"after"] if live is not None else before
    with logspool.open(path, readonly=True) as log:
        assert [r.payload for r in log.read()] == expected
    saved = path / "quarantine" / f"{newest.name}.{at}.bad"
    assert _tail_digest(saved, 0) == (size, digest)
    assert saved.stat().st_size == size
    assert logspool.verify(path).ok


def test_a_seal_met_across_a_chunk_boundary_is_judged_as_before(tmp_path: Path) -> None:
    """The one place besides damage where recovery read the rest of a segment whole, a part read
    ending within the zero length field of a seal, is now read a chunk at a time and decides as
    before: having read the rest whole, recovery cut the zeros after the seal only if they ran to
    the end of the file; here they do not (non-zero bytes 2 MiB past the seal, beyond the next
    chunk), so nothing is cut. (Where the seal lies inside the first read, only the zeros to the
    end of that read are looked at, as before.)"""
    path = tmp_path / "log"
    with logspool.open(path, durability="os", segment_size_max=8 << 20):
        pass
    # Records up to 2 bytes before the end of recovery's first read (1 MiB from offset 40),
    # then a seal: that read ends within the seal's zero length field.
    records = [fmt.encode_record(lsn, 1, 0, b"p" * 1000) for lsn in range(1012)]
    records.append(fmt.encode_record(1012, 1, 0, b"p" * 106))
    body = b"".join(records)
    assert len(body) == (1 << 20) - 2
    seal = fmt.encode_record(1013, 1, 1012, b"", fmt.FLAG_SEAL)
    segment = path / fmt.segment_name(0)
    data = fmt.encode_segment_header(0, 1) + body + seal + bytes(2 << 20) + b"junk"
    segment.write_bytes(data)
    (path / fmt.index_name(0)).unlink()  # (recovery starts at the first record)
    with logspool.open(path, durability="os") as log:
        assert log.info().next_lsn == 1013
    assert segment.read_bytes() == data
