"""The log's API on real files: appends, reads, positions, cutover, reopen, bad input.

Each test opens a log in a fresh temporary directory and checks what a user would see.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import struct
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import logspool
from logspool import _format as fmt
from logspool import limits
from logspool._fs import FileSystem
from tests.conftest import append_in_batches


def payloads(n: int, prefix: bytes = b"r") -> list[bytes]:
    return [prefix + str(i).encode() for i in range(n)]


def test_append_returns_contiguous_lsns_from_zero(log_dir: str) -> None:
    with logspool.open(log_dir) as log:
        assert log.append(b"a") == 0
        assert log.append_many([b"b", b"c"]) == [1, 2]
        assert log.append(b"") == 3
        assert [(r.lsn, r.payload) for r in log.read()] == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"")]


def test_records_survive_reopen_and_lsns_continue(log_dir: str) -> None:
    with logspool.open(log_dir) as log:
        log.append_many(payloads(100))
    with logspool.open(log_dir) as log:
        assert log.append(b"next") == 100
        got = [r.payload for r in log.read()]
    assert got == [*payloads(100), b"next"]


def test_rotation_by_size_keeps_lsns_contiguous(log_dir: str) -> None:
    with logspool.open(log_dir, segment_size_max=4096) as log:
        for p in payloads(300):
            log.append(p)
        append_in_batches(log, payloads(300, b"m"))
        info = log.info()
        assert len(info.segments) > 5
        assert [s.base_lsn for s in info.segments] == sorted(s.base_lsn for s in info.segments)
        assert all(s.size <= 4096 for s in info.segments)
        assert [r.lsn for r in log.read()] == list(range(600))
    assert logspool.verify(log_dir).ok


def test_info_says_where_the_newest_segments_records_end(log_dir: str) -> None:
    """``size`` counts the zeros preallocated after the newest segment's records (the disk they
    hold); ``end`` is the offset past its last record and ``written`` the bytes up to there, as
    a plan of reads by bytes wants them, from any handle, reader or writer; closed, the zeros
    are cut and the three agree."""
    with logspool.open(log_dir, segment_size_max=64 * 1024) as log:
        assert log.info().end == fmt.SEGMENT_HEADER_SIZE and log.info().written == fmt.SEGMENT_HEADER_SIZE
        log.append_many(payloads(100))
        info = log.info()
        records = sum(fmt.RECORD_OVERHEAD + len(p) for p in payloads(100))
        assert info.end == fmt.SEGMENT_HEADER_SIZE + records < info.segments[-1].size == info.size
        assert info.written == info.end
        append_in_batches(log, [b"r" * 500] * 400)  # rotations: sealed segments, then the newest
        info = log.info()
        assert len(info.segments) > 2
        with logspool.open(log_dir, readonly=True) as reader:
            assert reader.info().end == info.end  # (another handle finds the same end)
        sealed = sum(s.size for s in info.segments[:-1])
        assert info.written == sealed + info.end < info.size
        assert info.end <= info.segments[-1].size
    closed = logspool.open(log_dir, readonly=True)
    try:
        info = closed.info()
        assert info.end == info.segments[-1].size and info.written == info.size
    finally:
        closed.close()


def test_a_batch_is_written_whole_into_one_segment(log_dir: str) -> None:
    """A batch never spans a rotation (so it is in the log whole or not at all): one that does
    not fit in the active segment starts the next, and one larger than a segment gets a segment
    of its own, larger than segment_size_max, as a single large record does (Kafka's rule)."""
    with logspool.open(log_dir, segment_size_max=4096) as log:
        log.append(b"first")
        small = log.append_many([b"s" * 1000] * 3)  # fits
        fits_next = log.append_many([b"n" * 1000] * 3)  # does not fit: the next segment
        large = log.append_many([b"L" * 1000] * 10)  # larger than a segment: one of its own
        log.append(b"after")
        by_base = {s.base_lsn: s for s in log.info().segments}
    assert sorted(by_base) == [0, fits_next[0], large[0], large[-1] + 1]
    assert small == [1, 2, 3] and by_base[large[0]].size > 4096
    assert logspool.verify(log_dir).ok
    big = b"x" * (200 << 20)  # (one object, 21 times: 4.2 GB of batch, 200 MB of memory)
    with logspool.open(log_dir + "-big", record_size_max=256 << 20) as log:
        with pytest.raises(ValueError, match="smaller batches"):
            log.append_many([big] * 21)  # more than a segment may hold: nothing written
        assert log.next_lsn == 0


def test_cutover_starts_a_segment_named_by_its_first_lsn(log_dir: str) -> None:
    with logspool.open(log_dir) as log:
        log.append_many(payloads(10))
        assert log.cutover() == 10
        assert log.cutover() == 10  # empty active segment: nothing to cut
        log.append(b"x")
        names = sorted(n for n in os.listdir(log_dir) if n.endswith(".seg"))
        assert names == [fmt.segment_name(0), fmt.segment_name(10)]
        assert [r.lsn for r in log.read(start=9)] == [9, 10]


def test_read_from_any_lsn_uses_the_index(log_dir: str) -> None:
    with logspool.open(log_dir, segment_size_max=64 * 1024, index_interval=512) as log:
        log.append_many(payloads(5000))
        for start in (0, 1, 499, 2500, 4999, 5000):
            got = [r.lsn for r in log.read(start=start)]
            assert got == list(range(start, 5000))


def test_read_since_a_time(log_dir: str) -> None:
    with logspool.open(log_dir, segment_size_max=8192) as log:
        log.append_many(payloads(200, b"old"))
        time.sleep(0.01)
        middle = time.time()
        time.sleep(0.01)
        log.append_many(payloads(200, b"new"))
        got = [r.payload for r in log.read(since=middle)]
        assert got == payloads(200, b"new")
        as_dt = datetime.fromtimestamp(middle, tz=UTC)
        assert [r.payload for r in log.read(since=as_dt)] == got
        assert [r.payload for r in log.read(since=as_dt.replace(tzinfo=None))] == got
        assert len(list(log.read(since=0))) == 400
        assert list(log.read(since=time.time() + 10)) == []


def test_timestamps_never_decrease(log_dir: str) -> None:
    with logspool.open(log_dir) as log:
        log.append_many(payloads(50))
        for p in payloads(50):
            log.append(p)
        stamps = [r.timestamp for r in log.read()]
    assert stamps == sorted(stamps)
    assert abs(stamps[-1] - time.time_ns()) < 60 * 10**9


def test_reader_latest_waits_for_the_next_append(log_dir: str) -> None:
    with logspool.open(log_dir) as log:
        log.append_many(payloads(5))
        reader = log.reader("latest")
        assert reader.position == 5
        assert reader.next(timeout=0.05) is None
        threading.Timer(0.05, lambda: log.append(b"late")).start()
        rec = reader.next(timeout=5)
        assert rec is not None and rec.lsn == 5 and rec.payload == b"late"
        assert reader.position == 6
        reader.close()


def test_reader_follows_cutover_while_tailing(log_dir: str) -> None:
    with logspool.open(log_dir) as log:
        reader = log.reader()
        log.append(b"a")
        log.cutover()
        log.append(b"b")
        got = [reader.next(timeout=1), reader.next(timeout=1)]
        assert [r.payload for r in got if r] == [b"a", b"b"]


def test_reader_position_resumes_exactly(log_dir: str) -> None:
    with logspool.open(log_dir, segment_size_max=4096) as log:
        log.append_many(payloads(500))
        reader = log.reader()
        for _ in range(123):
            reader.next(timeout=0)
        pos = reader.position
        reader.close()
        assert pos == 123
        assert next(iter(log.read(start=pos))).payload == b"r123"


def test_position_is_exact_after_leaving_a_for_loop_mid_chunk(log_dir: str) -> None:
    with logspool.open(log_dir) as log:
        log.append_many(payloads(100))
        reader = log.reader()
        for rec in reader:
            if rec.lsn == 41:
                break
        assert reader.position == 42
        nxt = reader.next(timeout=0)
        assert nxt is not None and nxt.lsn == 42
        assert [r.lsn for r in reader] == list(range(43, 100))
        assert reader.position == 100
        reader.close()


def test_large_records_across_read_chunks(log_dir: str) -> None:
    big = os.urandom(3 * 1024 * 1024)
    with logspool.open(log_dir) as log:
        log.append(b"small")
        log.append(big)
        log.append(b"after")
        assert [r.payload for r in log.read()] == [b"small", big, b"after"]


def test_exclusive_appends_see_a_stable_tail(log_dir: str) -> None:
    with logspool.open(log_dir) as log:
        log.append(b"x")
        with log.exclusive() as tail:
            assert tail.next_lsn == 1
            assert tail.append(b"y") == 1
            assert tail.append_many([b"z"]) == [2]
            assert tail.next_lsn == 3
            with pytest.raises(RuntimeError, match="exclusive"):
                log.append(b"deadlock?")
        assert log.append(b"w") == 3


def test_a_writer_waiting_for_exclusive_does_its_idle_work_until_the_lock_is_free(log_dir: str) -> None:
    with logspool.open(log_dir) as holder, logspool.open(log_dir) as waiter:
        held, release = threading.Event(), threading.Event()

        def hold() -> None:
            with holder.exclusive() as tail:
                tail.append(b"by the holder")
                held.set()
                release.wait(10)

        thread = threading.Thread(target=hold)
        thread.start()
        held.wait(10)
        seen: list[int] = []

        def idle() -> bool:
            # what a folded store does here: read what the holder wrote
            seen.append(len(list(waiter.read())))
            if len(seen) == 5:
                release.set()
            return len(seen) % 2 == 0  # (a turn with news looks again at once; one without sleeps)

        with waiter.exclusive(idle=idle) as tail:
            assert tail.next_lsn == 1, "the holder's record, adopted once the lock is ours"
            tail.append(b"by the waiter")
        thread.join()
        turns = len(seen)
        assert turns >= 5 and seen[0] == 1, "idle ran while the other handle held the lock"
        with waiter.exclusive(idle=idle):
            pass
        assert len(seen) == turns, "a free lock is taken without idle work"
        assert [r.payload for r in waiter.read()] == [b"by the holder", b"by the waiter"]


def test_exclusive_appends_take_a_chosen_timestamp_never_an_earlier_one(log_dir: str) -> None:
    with logspool.open(log_dir, segment_size_max=4096) as log:
        log.append(b"x")
        with log.exclusive() as tail:
            last = tail.timestamp
            for bad in (last - 1, 1.5, True, "now"):
                with pytest.raises(ValueError, match="timestamp must be"):
                    tail.append_many([b"y"], timestamp=bad)  # type: ignore[arg-type]
            chosen = last  # the same as the record before: in the past by now
            time.sleep(0.01)
            # batches that fill segments: each segment's creation time and seal stay at or
            # before the records after them (FORMAT.md §4)
            for i in range(1, 101, 10):
                assert tail.append_many([b"z" * 100] * 10, timestamp=chosen) == list(range(i, i + 10))
            assert tail.timestamp == chosen
        recs = list(log.read())
        assert [r.timestamp for r in recs[1:]] == [chosen] * 100
        segments = log.info().segments
    assert len(segments) > 2
    first_ts = {r.lsn: r.timestamp for r in recs}
    for segment in segments:
        with open(segment.path, "rb") as f:
            header = fmt.decode_segment_header(f.read(fmt.SEGMENT_HEADER_SIZE), segment.path)
        assert header.created_ns <= first_ts[segment.base_lsn], segment.path
    assert logspool.verify(log_dir).ok


@pytest.mark.parametrize("single_writer", [False, True], ids=["process-safe", "single-writer"])
def test_many_threads_append_with_group_commit(log_dir: str, single_writer: bool) -> None:
    """Threads of one handle go through the write queue, across rotations; each keeps its order."""
    with logspool.open(
        log_dir, durability="always", segment_size_max=4096, single_writer=single_writer
    ) as log:

        def work(t: int) -> None:
            for i in range(100):
                log.append(f"{t}:{i}".encode())

        threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        recs = list(log.read())
        assert len(log.info().segments) > 2  # rotations on the way
    assert [r.lsn for r in recs] == list(range(800))
    for t in range(8):
        mine = [r.payload for r in recs if r.payload.startswith(f"{t}:".encode())]
        assert mine == [f"{t}:{i}".encode() for i in range(100)]
    assert logspool.verify(log_dir).ok


@pytest.mark.parametrize("durability", ["always", "interval", "os"])
def test_every_durability_round_trips(log_dir: str, durability: str) -> None:
    with logspool.open(log_dir, durability=durability, sync_interval_ms=5) as log:
        log.append_many(payloads(20))
        log.sync()
    with logspool.open(log_dir, readonly=True) as log:
        assert [r.payload for r in log.read()] == payloads(20)


# --- bad input -----------------------------------------------------------------------------------
def test_oversized_record_is_refused_and_nothing_written(log_dir: str) -> None:
    with logspool.open(log_dir, record_size_max=1000) as log:
        log.append(b"ok")
        with pytest.raises(logspool.RecordTooLargeError) as info:
            log.append(b"x" * 1001)
        assert isinstance(info.value, ValueError)
        assert info.value.size == 1001 and info.value.size_max == 1000
        with pytest.raises(logspool.RecordTooLargeError):
            log.append_many([b"fine", b"y" * 2000])
        assert [r.payload for r in log.read()] == [b"ok"]
        assert log.append(b"x" * 1000) == 1


def test_wrong_payload_types_are_refused(log_dir: str) -> None:
    with logspool.open(log_dir) as log:
        for bad in ("text", 5, None, [b"a"]):
            with pytest.raises(TypeError, match="payload must be bytes"):
                log.append(bad)  # type: ignore[arg-type]
        assert log.append(bytearray(b"ba")) == 0
        assert log.append(memoryview(b"mv")) == 1
        assert [r.payload for r in log.read()] == [b"ba", b"mv"]


def test_bad_options_are_refused(log_dir: str) -> None:
    with pytest.raises(ValueError, match="durability"):
        logspool.open(log_dir, durability="sometimes")
    with pytest.raises(ValueError, match="segment_size_max"):
        logspool.open(log_dir, segment_size_max=10)
    with pytest.raises(ValueError, match="record_size_max"):
        logspool.open(log_dir, record_size_max=1 << 40)
    assert not os.path.exists(log_dir)
    logspool.open(log_dir, segment_size_max=8192).close()
    with pytest.raises(ValueError, match="created with segment_size_max=8192"):
        logspool.open(log_dir, segment_size_max=16384)


def test_a_directory_that_is_not_a_log_is_refused(tmp_path: Path) -> None:
    (tmp_path / "stuff.txt").write_text("hello")
    with pytest.raises(logspool.NotALogError, match="no meta file"):
        logspool.open(tmp_path)
    assert (tmp_path / "stuff.txt").read_text() == "hello"
    with pytest.raises(logspool.NotALogError, match="not a directory"):
        logspool.open(tmp_path / "stuff.txt")
    with pytest.raises(logspool.NotALogError, match="does not exist"):
        logspool.open(tmp_path / "missing", create=False)


def test_a_newer_format_version_is_refused(log_dir: str) -> None:
    with logspool.open(log_dir) as log:
        log.append(b"keep me")
    meta_path = os.path.join(log_dir, "meta")
    meta = fmt.decode_meta(Path(meta_path).read_bytes(), meta_path)
    newer = fmt.Meta(**{**{f: getattr(meta, f) for f in meta.__slots__}, "version": 99})  # type: ignore[attr-defined]
    Path(meta_path).write_bytes(fmt.encode_meta(newer))
    with pytest.raises(logspool.UnsupportedVersionError, match="version 99") as info:
        logspool.open(log_dir)
    assert info.value.version == 99


def test_readonly_handle_refuses_writes(log_dir: str) -> None:
    logspool.open(log_dir).close()
    with logspool.open(log_dir, readonly=True) as log:
        with pytest.raises(logspool.ReadOnlyError):
            log.append(b"x")
        with pytest.raises(logspool.ReadOnlyError):
            log.cutover()


def test_read_only_directory_gives_a_clear_error(tmp_path: Path) -> None:
    # Root ignores permission bits, so as root the log lives on a tmpfs remounted read-only.
    import subprocess

    mount = tmp_path / "mnt"
    mount.mkdir()
    log_dir = str(mount / "log")
    as_root = os.geteuid() == 0
    if as_root:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)], check=False)
        if done.returncode != 0:
            pytest.skip("root, but cannot mount a tmpfs here to make a read-only file system")
    try:
        with logspool.open(log_dir) as log:
            log.append(b"x")
        if as_root:
            subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        else:
            for name in os.listdir(log_dir):
                os.chmod(os.path.join(log_dir, name), 0o444)
            os.chmod(log_dir, 0o555)
        with pytest.raises(logspool.ReadOnlyError, match="readonly=True"):
            logspool.open(log_dir)
        with logspool.open(log_dir, readonly=True) as log:
            assert [r.payload for r in log.read()] == [b"x"]
    finally:
        if as_root:
            subprocess.run(["umount", str(mount)], check=True)
        else:
            os.chmod(log_dir, 0o755)


def test_closed_handle_refuses_use(log_dir: str) -> None:
    log = logspool.open(log_dir)
    log.close()
    log.close()
    with pytest.raises(logspool.ClosedError):
        log.append(b"x")


def test_start_before_the_log_or_bad_start_is_refused(log_dir: str) -> None:
    with logspool.open(log_dir) as log:
        log.append(b"x")
        with pytest.raises(TypeError):
            log.reader("middle")  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            log.reader(-1)
        with pytest.raises(ValueError, match="start or since"):
            log.reader(0, since=0)


def test_errors_pickle_with_their_attributes() -> None:
    errors = [
        logspool.CorruptionError("/p/seg", 40, "checksum mismatch"),
        logspool.RecordTooLargeError(10, 5),
        logspool.UnsupportedVersionError("/p/meta", 3, 1),
        logspool.NotALogError("/p", "why"),
        logspool.LockedError("/p", 1.5),
        logspool.FailedError("/p", "fsync failed"),
        logspool.AppendError("/p", "disk full"),
        logspool.PositionError("/p", 3, 5, 9),
    ]
    for err in errors:
        back = pickle.loads(pickle.dumps(err))
        assert type(back) is type(err) and str(back) == str(err)
    assert logspool.CorruptionError("/p/seg", 40, "x").offset == 40


class CountingFS(FileSystem):
    """The real file system, counting the bytes read (one count for all handles that use it)."""

    read_size = 0

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        data = super().pread(fd, size, offset)
        CountingFS.read_size += len(data)
        return data


def test_catch_up_reads_only_what_others_appended(log_dir: str) -> None:
    # Two handles (as two processes would) alternate appends. Each catch-up must read the bytes
    # the other appended, not the segment from its start: that made interleaving quadratic.
    a = logspool.open(log_dir, durability="os", fs=CountingFS())
    b = logspool.open(log_dir, durability="os", fs=CountingFS())
    CountingFS.read_size = 0
    for i in range(400):
        (a if i % 2 else b).append(b"x" * 100)
    read_size = CountingFS.read_size
    # Each append reads the record header at its end offset (zeros: nobody else wrote), and a
    # catch-up what the other handle appended in one read of a page: not the segment from its
    # start (that was 11 MB here).
    appended = 400 * (fmt.RECORD_OVERHEAD + 100)
    assert read_size <= appended + 400 * (4096 + fmt.RECORD_HEADER_SIZE), (read_size, appended)
    assert [r.lsn for r in a.read()] == list(range(400))
    a.close()
    b.close()


def test_a_catch_up_checks_the_last_record_others_wrote_not_all_of_them(log_dir: str) -> None:
    # The tail hint (FORMAT.md §8.1): the writer that appended last says where its last record
    # is; the next writer reads that record (and the header after it), not all that came before.
    a = logspool.open(log_dir, durability="os", fs=CountingFS())
    b = logspool.open(log_dir, durability="os", fs=CountingFS())
    assert b.append(b"b") == 0
    a.append_many([b"x" * 100] * 1000)  # 136 KB, the batch path
    assert a.append(b"one more") == 1001  # the one-record path
    CountingFS.read_size = 0
    assert b.append(b"b again") == 1002
    assert CountingFS.read_size < 1024
    assert a.append_many([b"a again"] * 3) == [1003, 1004, 1005]
    a.close()
    b.close()
    with logspool.open(log_dir) as log:
        assert [r.lsn for r in log.read()] == list(range(1006))
    assert logspool.verify(log_dir).ok


def _set_tail_hint(log_dir: str, base: int, offset: int, lsn: int, end: int) -> None:
    """Write the sync file's tail hint as another process (of any release, or killed) may have."""
    with open(os.path.join(log_dir, fmt.SYNC_NAME), "r+b") as f:
        f.seek(fmt.SYNC_TAIL_OFFSET)
        f.write(fmt.SYNC_TAIL.pack(base, offset, lsn, end))


_SIZES = [1 + 37 * i % 300 for i in range(20)]  # A's records' payload sizes


def _a_offsets() -> list[int]:
    """Where A's records are: after the segment header and B's one-byte record."""
    offsets = [fmt.SEGMENT_HEADER_SIZE + fmt.RECORD_OVERHEAD + 1]
    for size in _SIZES:
        offsets.append(offsets[-1] + fmt.RECORD_OVERHEAD + size)
    return offsets  # the last is where A's records end


@pytest.mark.parametrize(
    "hint",
    [
        pytest.param(lambda off: (0, 0, 0, 0), id="none"),
        pytest.param(lambda off: (0, off[9], 10, off[10]), id="stale: a record before the last"),
        pytest.param(lambda off: (0, off[0], 1, off[1]), id="stale: the first of them"),
        pytest.param(lambda off: (0, off[9], 11, off[10]), id="wrong lsn"),
        pytest.param(lambda off: (0, off[9], 10, off[11]), id="wrong end"),
        pytest.param(lambda off: (0, off[9] + 5, 10, off[10]), id="inside a record"),
        pytest.param(lambda off: (0, off[20], 21, off[20] + 100), id="past the records"),
        pytest.param(lambda off: (0, off[19], 20, 1 << 40), id="end far past the file"),
        pytest.param(lambda off: (7, off[19], 20, off[20]), id="another segment"),
        pytest.param(lambda off: (0, fmt.SEGMENT_HEADER_SIZE, 0, off[0]), id="b's own record"),
        pytest.param(lambda off: (2**64 - 1, 2**64 - 1, 2**64 - 1, 2**64 - 1), id="all ones"),
    ],
)
def test_a_tail_hint_is_believed_only_as_far_as_the_record_it_names(
    log_dir: str, hint: Callable[[list[int]], tuple[int, int, int, int]]
) -> None:
    """Any value in the hint is safe: a writer of an earlier release does not write it, one killed
    after its write leaves it behind, a torn store mixes two. The catch-up must land exactly
    after the others' records whatever it says."""
    a = logspool.open(log_dir, durability="os")
    b = logspool.open(log_dir, durability="os")
    assert b.append(b"b") == 0
    for i, size in enumerate(_SIZES):
        assert a.append(bytes([65 + i]) * size) == i + 1
    _set_tail_hint(log_dir, *hint(_a_offsets()))
    assert b.append(b"b again") == 21
    assert a.append(b"a again") == 22
    assert b.append_many([b"b", b"b"]) == [23, 24]
    a.close()
    b.close()
    expected = [b"b"] + [bytes([65 + i]) * size for i, size in enumerate(_SIZES)]
    expected += [b"b again", b"a again", b"b", b"b"]
    with logspool.open(log_dir) as log:
        assert [r.payload for r in log.read()] == expected
    report = logspool.verify(log_dir)
    assert report.ok, report


def test_a_sync_file_of_an_earlier_release_grows_to_hold_the_tail_hint(log_dir: str) -> None:
    with logspool.open(log_dir) as log:
        log.append(b"one")
    sync = os.path.join(log_dir, fmt.SYNC_NAME)
    os.truncate(sync, fmt.SYNC_FILE_SIZE)  # as the releases before the hint made it
    with logspool.open(log_dir) as a, logspool.open(log_dir) as b:
        assert os.path.getsize(sync) == fmt.SYNC_FILE_SIZE_TAIL
        assert a.append(b"a") == 1
        assert b.append(b"b") == 2
        assert a.append(b"a") == 3


def test_repair_forgets_the_tail_hint(log_dir: str) -> None:
    with logspool.open(log_dir) as a, logspool.open(log_dir) as b:
        a.append(b"a")
        b.append(b"b")
    with open(os.path.join(log_dir, fmt.SYNC_NAME), "rb") as f:
        assert fmt.read_sync_tail(f.read()).lsn == 1
    logspool.repair(log_dir)
    with open(os.path.join(log_dir, fmt.SYNC_NAME), "rb") as f:
        assert fmt.read_sync_tail(f.read()) == (0, 0, 0, 0)


def test_a_handle_cannot_append_in_a_forked_child(log_dir: str) -> None:
    with logspool.open(log_dir) as log:
        log.append(b"parent")
        pid = os.fork()
        if pid == 0:  # the child: report through the exit code only
            try:
                log.append(b"child")
                code = 1
            except logspool.ClosedError as err:
                code = 0 if "fork" in str(err) else 2
            except BaseException:
                code = 3
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        log.append(b"parent again")  # the parent's handle is untouched
        assert [r.payload for r in log.read()] == [b"parent", b"parent again"]


def test_rotation_by_age(log_dir: str) -> None:
    with logspool.open(log_dir, durability="os", segment_age_max_s=0.2) as log:
        time.sleep(0.3)  # the first segment is old but empty: no rotation for that
        log.append_many(payloads(3))
        assert len(log.info().segments) == 1
        time.sleep(0.3)
        log.append(b"after")  # the segment with records is too old now: sealed first
        log.append(b"same segment")
        info = log.info()
        assert [s.base_lsn for s in info.segments] == [0, 3]
        assert [r.payload for r in log.read()][-2:] == [b"after", b"same segment"]
    with pytest.raises(ValueError, match="segment_age_max_s must be a positive number"):
        logspool.open(log_dir, segment_age_max_s=0)


def test_catch_up_across_a_seal_at_any_chunk_boundary(tmp_path: Path) -> None:
    """A handle catches up on what another appended and sealed, reading in growing chunks; a
    chunk may end inside the seal's header, whose length field is zeros. That must not read as
    the zeros after the records: the handle would write over the seal and into the next segment
    (found by the jobs kill test). Record counts and sizes are swept so that chunk ends fall on
    every offset near the seal."""
    path = str(tmp_path / "log")
    with logspool.open(path, durability="os") as w, logspool.open(path, durability="os") as b:
        for n in (6, 7, 8):
            for size in range(100):
                first = w.append(b"w")  # w's view ends here
                for _ in range(n):
                    b.append(b"b" * size)
                sealed = b.cutover()
                assert sealed == first + n + 1
                b.append(b"in the new segment")
                assert w.append(b"after") == first + n + 2, (n, size)
    with logspool.open(path) as log:
        assert [r.lsn for r in log.read()] == list(range(100 * (9 + 10 + 11)))
    assert logspool.verify(path).ok


def _inotify_descriptors() -> int:
    count = 0
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(FileNotFoundError):  # (the listing's own descriptor)
            count += "inotify" in os.readlink(f"/proc/self/fd/{name}")
    return count


def test_tailing_readers_left_unclosed_give_back_their_inotify_instances(log_dir: str) -> None:
    """A reader that waits long watches the directory with an inotify instance; a user has 128
    by default. Readers dropped without close() must give theirs back when collected, or the
    process falls back to polling for good."""
    before = _inotify_descriptors()
    with logspool.open(log_dir) as log:
        for _ in range(30):
            reader = log.reader(start="latest")
            deadline = time.monotonic() + 30  # bounded; waits until it has waited long enough
            while _inotify_descriptors() == before and time.monotonic() < deadline:
                assert reader.next(timeout=limits.WATCH_INOTIFY_AFTER_S / 4) is None
            assert _inotify_descriptors() == before + 1  # it waited long enough to set one up
            del reader
        assert _inotify_descriptors() - before <= 2


def test_a_short_wait_polls_and_a_long_one_sets_up_inotify(log_dir: str) -> None:
    """Setting up an inotify watch and taking it down costs milliseconds (the kernel waits out a
    grace period to take one down): a short wait polls instead, in steps under a millisecond,
    and still sees an append at once; a reader that keeps waiting gets a watch and keeps it."""
    before = _inotify_descriptors()
    waited = 0.0  # the time spent in next(): the watch follows the time waited, not a count
    with logspool.open(log_dir) as log, log.reader(start="latest") as reader:
        for i in range(5):
            start = time.monotonic()
            assert reader.next(timeout=0.005) is None
            threading.Timer(0.002, log.append, [b"%d" % i]).start()
            appended = time.monotonic()
            rec = reader.next(timeout=5)
            assert rec is not None and rec.payload == b"%d" % i
            # (at once: polling steps are under a millisecond; 1 s only bounds a loaded machine)
            assert time.monotonic() - appended < 1.0
            waited += time.monotonic() - start
        if waited < limits.WATCH_INOTIFY_AFTER_S:  # (5 waits of 5 ms and a few of 2, unless loaded)
            assert _inotify_descriptors() == before
        assert reader.next(timeout=limits.WATCH_INOTIFY_AFTER_S) is None
        assert reader.next(timeout=0.01) is None
        assert _inotify_descriptors() == before + 1
        threading.Timer(0.05, log.append, [b"late"]).start()
        rec = reader.next(timeout=5)
        assert rec is not None and rec.payload == b"late"
    assert _inotify_descriptors() == before


def _meta_file(body: bytes, version: int = 1) -> bytes:
    head = fmt.META_HEADER.pack(fmt.META_MAGIC, version, 0, len(body)) + body
    return head + struct.pack("<I", fmt.crc32(head))


_GOOD_META = {
    "created_ns": 1,
    "index_interval": 65536,
    "log_id": "0123456789abcdef0123456789abcdef",
    "record_size_max": 1024,
    "segment_size_max": 65536,
}


@pytest.mark.parametrize(
    ("change", "version", "says"),
    [
        ({"segment_size_max": 65536.0}, 1, "segment_size_max must be an integer"),
        ({"segment_size_max": 4096.7}, 1, "segment_size_max must be an integer"),
        ({"record_size_max": "1024"}, 1, "record_size_max must be an integer"),
        ({"record_size_max": True}, 1, "record_size_max must be an integer"),
        ({"index_interval": 0}, 1, "index_interval must be an integer from 512"),
        ({"log_id": None}, 1, "log_id must be a string"),
        ({"created_ns": None}, 1, "created_ns must be an integer"),
        ({"segment_size_max": None}, 1, "segment_size_max must be an integer"),
        (
            {"compression": "zstd", "compression_level": 99},
            2,
            "compression_level must be an integer from -7 to 22",
        ),
        ({"compression": "zstd"}, 2, "compression_level must be an integer"),
        ({"compression": "zstd", "compression_level": 3}, 1, "in a version 1 meta file"),
        ({"compression": "lz4", "compression_level": 3}, 2, "unknown compression"),
    ],
)
def test_a_meta_file_out_of_its_spec_is_damage(
    tmp_path: Path, change: dict[str, Any], version: int, says: str
) -> None:
    """FORMAT.md §6.1: the meta's integers are JSON integers in range, log_id a string, a
    compressed log's meta version 2 with a level: anything else is CorruptionError naming the
    meta file (before, int() took 4096.7, "1024" and true, and an index_interval of 0 opened and
    made every append raise ZeroDivisionError)."""
    path = tmp_path / "log"
    path.mkdir()
    body = {**_GOOD_META, **change}
    (path / fmt.META_NAME).write_bytes(_meta_file(json.dumps(body, sort_keys=True).encode(), version))
    with pytest.raises(logspool.CorruptionError) as raised:
        logspool.open(path)
    assert says in str(raised.value) and fmt.META_NAME in str(raised.value)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b'{"created_ns": 1, "created_ns": 2}', "given twice"),
        (json.dumps(_GOOD_META).encode("utf-16"), "not JSON"),
        (
            json.dumps({k: v for k, v in _GOOD_META.items() if k != "log_id"}).encode(),
            "required keys missing: log_id",
        ),
    ],
)
def test_a_meta_body_with_duplicate_keys_another_encoding_or_a_key_missing_is_damage(
    tmp_path: Path, body: bytes, says: str
) -> None:
    path = tmp_path / "log"
    path.mkdir()
    (path / fmt.META_NAME).write_bytes(_meta_file(body))
    with pytest.raises(logspool.CorruptionError, match=says):
        logspool.open(path)
    (path / fmt.META_NAME).write_bytes(_meta_file(json.dumps(_GOOD_META).encode()))
    logspool.open(path).close()  # the same file, valid: opens


def test_records_after_a_cutover_are_not_stamped_before_it_when_the_clock_steps_back(
    log_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FORMAT.md §4.3: the records after a seal carry timestamps at or after the seal's and the
    next segment's creation time, by this writer and by another handle that catches up, even if
    the wall clock steps back between the cutover and the append."""
    with logspool.open(log_dir) as log, logspool.open(log_dir) as other:
        log.append(b"before")
        other.append(b"other-before")
        base = log.cutover()
        with open(os.path.join(log_dir, fmt.segment_name(base)), "rb") as f:
            created = fmt.decode_segment_header(f.read(fmt.SEGMENT_HEADER_SIZE), "seg").created_ns
        real = time.time_ns
        monkeypatch.setattr(time, "time_ns", lambda: real() - 5_000_000_000)
        log.append(b"after")
        other.append(b"other-after")
        monkeypatch.undo()
        stamps = {r.payload: r.timestamp for r in log.read()}
    assert stamps[b"after"] >= created and stamps[b"other-after"] >= created


class _HoldSyncUnlock(FileSystem):
    """The seam: the thread named in ``hold`` stops in its next unlock of DIR/sync, still holding
    the flock, until ``release`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.hold: threading.Thread | None = None
        self.holding = threading.Event()
        self.release = threading.Event()

    def unlock(self, fd: int) -> None:
        if threading.current_thread() is self.hold and os.readlink(f"/proc/self/fd/{fd}").endswith("/sync"):
            self.hold = None
            self.holding.set()
            self.release.wait(60)
        super().unlock(fd)


def test_reading_the_mark_never_drops_the_flock_this_handles_syncer_holds(log_dir: str) -> None:
    """A flock belongs to the open file description a handle's threads share: a thread taking
    DIR/sync shared while the syncer holds it exclusive converted the syncer's lock, and its
    unlock dropped it, so another process could change the mark mid-sync (found writing down
    the lock order, issue 30). Reading the mark now waits for the sync role."""
    import fcntl

    fs = _HoldSyncUnlock()
    with logspool.open(log_dir, durability="always", fs=fs) as log:
        log.append(b"a")
        appender = threading.Thread(target=log.append, args=(b"b",))
        fs.hold = appender
        appender.start()
        assert fs.holding.wait(60)  # the syncer holds DIR/sync exclusive, in its unlock
        reading = threading.Thread(target=log._syncer.proven_end, args=(0,))
        reading.start()
        reading.join(2)  # before the fix it read and unlocked at once; now it waits for the role
        probe = os.open(os.path.join(log_dir, fmt.SYNC_NAME), os.O_RDONLY)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another process's view
        finally:
            fs.release.set()
            appender.join(60)
            reading.join(60)
            os.close(probe)
        assert not reading.is_alive() and log.next_lsn == 2


def _offsets(path: Path, base: int) -> list[int]:
    """The offsets of segment ``base``'s records, walked by their headers."""
    data = (path / fmt.segment_name(base)).read_bytes()
    at, found = fmt.SEGMENT_HEADER_SIZE, []
    while at + fmt.RECORD_HEADER_SIZE <= len(data):
        length, flags, _lsn, _ts, _d = fmt.RECORD_HEADER.unpack_from(data, at)
        if flags or not length:
            break
        found.append(at)
        at += fmt.RECORD_OVERHEAD + length
    return found


@pytest.mark.parametrize("damage", ["payload", "length"])
def test_a_seek_walks_to_its_lsn_and_meets_damage_before_it_as_a_read_does(
    tmp_path: Path, damage: str
) -> None:
    """A read from an lsn inside an index interval (64 KiB: ~270 records of 200 bytes) moves over
    the records before it without making them records (a key-value store's value read back
    from the op log parsed the 64 KiB before it into records it dropped: 1.1 ms), checking each
    as a read does: every seek returns the right records, and damage before the seek's lsn, in
    a payload or a length, is met and named as a read from the index entry meets it."""
    path = tmp_path / "log"
    with logspool.open(path) as log:
        log.append_many([b"%05d" % i + bytes([97 + i % 26]) * 195 for i in range(400)])
        log.cutover()  # (sealed: damage there is damage, never a torn tail)
    with logspool.open(path, readonly=True) as log:
        for start in (0, 1, 150, 269, 270, 271, 399, 400):
            assert [r.payload[:5] for r in log.read(start)] == [b"%05d" % i for i in range(start, 400)]
    offsets = _offsets(path, 0)
    assert len(offsets) == 400
    segment = path / fmt.segment_name(0)
    data = bytearray(segment.read_bytes())
    if damage == "payload":
        data[offsets[100] + fmt.RECORD_HEADER_SIZE + 10] ^= 0x40
    else:
        data[offsets[100] : offsets[100] + 4] = (7).to_bytes(4, "little")  # (not the record's length)
    segment.write_bytes(bytes(data))
    with logspool.open(path, readonly=True) as log:
        for start in (50, 200):
            with pytest.raises(logspool.CorruptionError, match=f"offset {offsets[100]}"):
                list(log.read(start))
    assert not logspool.verify(path).ok


def _payloads(tag: bytes, n: int) -> list[bytes]:
    return [tag + b"%05d" % i + b"." * 90 for i in range(n)]


def test_a_seek_into_an_unpublished_batch_returns_none_of_it(tmp_path: Path) -> None:
    """FORMAT.md 7.1: a batch is seen whole or not at all. While its writer is still writing it
    (between its first chunk and its publication), a read from an lsn inside it returns none of
    it, as a read from lsn 0 does. (Found by review: a seek's first walk over the records before
    its lsn went by their headers alone, past the batch's unpublished head.)"""
    path = tmp_path / "log"
    seen: dict[str, list[int]] = {}

    def chunks() -> Any:
        yield _payloads(b"B", 200)
        # (the first chunk is on disk, its head's checksum complemented: unpublished)
        with logspool.open(path, readonly=True) as other:
            seen["from0"] = [r.lsn for r in other.read(0)]
            seen["from50"] = [r.lsn for r in other.read(50)]
        yield _payloads(b"b", 200)

    with logspool.open(path, durability="os") as log:
        log.append(b"before")
        with log.exclusive() as tail:
            tail.append_batch(chunks(), size=400 * (fmt.RECORD_OVERHEAD + 96))
        assert len(list(log.read(50))) == 351
    assert seen == {"from0": [0], "from50": []}


_DYING_BATCH = """
import sys, time, logspool
def chunks():
    yield [b"X%05d" % i + b"." * 90 for i in range(300)]
    print("written", flush=True)
    time.sleep(60)  # (killed here: between the chunks, before the publication)
    yield []
with logspool.open(sys.argv[1], durability="os") as log:
    with log.exclusive() as tail:
        tail.append_batch(chunks(), size=400 * 132)
"""


def test_a_seek_never_returns_records_of_a_batch_whose_writer_died(tmp_path: Path) -> None:
    """A writer killed in the middle of a batch leaves it unpublished: the next writer cuts it
    and gives its lsns to other records. A read from an lsn inside it, before that, returns none
    of its records (an lsn handed out never changes its record). (Found by review: the seek's
    walk returned the dead batch's lsn 100, which the next writer gave to another record.)"""
    import subprocess
    import sys

    path = tmp_path / "log"
    with logspool.open(path, durability="os") as log:
        log.append(b"before")
    proc = subprocess.Popen(
        [sys.executable, "-c", _DYING_BATCH, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "written"
    finally:
        proc.kill()
        proc.wait()
    with logspool.open(path, readonly=True) as other:
        assert [r.payload for r in other.read(0)] == [b"before"]
        assert list(other.read(100)) == []
    with logspool.open(path, durability="os") as log:  # (its recovery cuts the batch)
        log.append_many([b"N%05d" % i for i in range(300)])
    with logspool.open(path, readonly=True) as other:
        assert [r.payload for r in other.read(100)][:1] == [b"N00099"]


def test_a_seek_past_a_torn_record_of_the_newest_segment_returns_nothing(tmp_path: Path) -> None:
    """In the newest segment a record that fails its checksum is the log's end for now
    (FORMAT.md 9.2: being written, or a torn tail the next writer cuts): a read from 0 ends
    there, and a read from a later lsn returns nothing past it. (Found by review.)"""
    path = tmp_path / "log"
    with logspool.open(path, durability="os") as log:
        log.append_many(_payloads(b"P", 300))
    segment = path / fmt.segment_name(0)
    data = bytearray(segment.read_bytes())
    at = fmt.SEGMENT_HEADER_SIZE + 100 * (fmt.RECORD_OVERHEAD + 96)
    data[at + fmt.RECORD_HEADER_SIZE + 50] ^= 0xFF  # (a page of the payload not written back)
    segment.write_bytes(bytes(data))
    with logspool.open(path, readonly=True) as log:
        assert [r.lsn for r in log.read(0)] == list(range(100))
        assert [r.lsn for r in log.read(150)] == []
