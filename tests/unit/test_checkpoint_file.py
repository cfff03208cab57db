"""CheckpointFile: reads and writes at offsets, transactions between checkpoints, rollback.

Real files in tmp_path. Crash states are made the way a crash makes them: a child process killed
with SIGKILL in the middle of a transaction, or undo logs cut or damaged byte by byte as a torn
write or a bad disk would leave them (FORMAT.md §13). Power loss is in tests/crash.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import logspool
from logspool import _format as fmt
from logspool._fs import FileSystem
from logspool.ckpt._file import archive_path_of


def test_create_read_write_checkpoint_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "data"
    with logspool.CheckpointFile(path, size=10_000) as f:
        assert f.size == 10_000
        assert f.read(0, 10_000) == bytes(10_000)
        f.write(4090, b"across a block boundary")
        f.write_int(8, 2**64 - 1)
        f.write_int(16, -5, size=2, signed=True)
        assert f.changed
        f.checkpoint()
        assert not f.changed
        assert not os.path.exists(f.undo_path)
    with logspool.CheckpointFile(path) as f:
        assert f.last_rollback is None
        assert f.read(4090, 23) == b"across a block boundary"
        assert f.read_int(8) == 2**64 - 1
        assert f.read_int(16, size=2, signed=True) == -5
        assert f.read_int(16, size=2) == 2**16 - 5
    assert os.path.getsize(path) == 10_000
    assert sorted(os.listdir(tmp_path)) == ["data"]


def test_bad_arguments_are_refused_with_what_was_wrong(tmp_path: Path) -> None:
    path = tmp_path / "data"
    with pytest.raises(FileNotFoundError, match="a size is needed to create one"):
        logspool.CheckpointFile(path)
    with pytest.raises(ValueError, match="power of two"):
        logspool.CheckpointFile(path, size=100, block_size=1000)
    with pytest.raises(ValueError, match="size must be"):
        logspool.CheckpointFile(path, size=0)
    with logspool.CheckpointFile(path, size=100) as f:
        with pytest.raises(ValueError, match=r"bytes 95 to 105 are outside the file \(0 to 100\)"):
            f.write(95, b"0123456789")
        with pytest.raises(ValueError, match="outside the file"):
            f.read(-1, 2)
        with pytest.raises(ValueError, match=r"256 does not fit in 1 bytes \(unsigned\)"):
            f.write_int(0, 256, size=1)
        with pytest.raises(ValueError, match="integer size must be one of"):
            f.read_int(0, size=3)
        assert f.read(0, 100) == bytes(100)  # nothing refused changed anything
    with pytest.raises(ValueError, match="the file is 100 bytes, not the 200 asked for"):
        logspool.CheckpointFile(path, size=200)
    (tmp_path / "empty").touch()
    with pytest.raises(ValueError, match="empty"):
        logspool.CheckpointFile(tmp_path / "empty")


def test_close_and_exceptions_roll_back_what_was_not_checkpointed(tmp_path: Path) -> None:
    path = tmp_path / "data"
    with logspool.CheckpointFile(path, size=4096) as f:
        f.write(0, b"kept")
    f = logspool.CheckpointFile(path)
    f.write(0, b"lost")
    f.write(2000, b"lost too")
    report = f.rollback()
    assert report is not None and report.entries == 1 and report.size == 4096
    assert f.read(0, 4) == b"kept" and f.read(2000, 8) == bytes(8)
    assert f.rollback() is None
    f.write(0, b"gone")
    f.close()
    f.close()  # idempotent
    with pytest.raises(logspool.ClosedError):
        f.read(0, 1)
    with pytest.raises(RuntimeError), logspool.CheckpointFile(path) as f:
        f.write(0, b"nope")
        raise RuntimeError("the caller failed")
    with logspool.CheckpointFile(path) as f:
        assert f.read(0, 4) == b"kept"


_KILLED_CHILD = """
import sys, time, logspool
f = logspool.CheckpointFile(sys.argv[1], block_size=512)
for i in range(0, 8192, 700):
    f.write(i, b"new!" * 50)
print("written", flush=True)
time.sleep(60)
"""


def test_a_process_killed_mid_transaction_is_rolled_back_on_open(tmp_path: Path) -> None:
    path = tmp_path / "data"
    with logspool.CheckpointFile(path, size=8192, block_size=512) as f:
        f.write(0, bytes(range(256)) * 32)
    before = path.read_bytes()
    child = subprocess.Popen([sys.executable, "-c", _KILLED_CHILD, str(path)], stdout=subprocess.PIPE)
    assert child.stdout is not None
    assert child.stdout.readline().strip() == b"written"
    assert path.read_bytes() != before  # the mapping wrote through: the file holds a half-done change
    child.kill()
    child.wait()
    with logspool.CheckpointFile(path) as f:
        touched = {b for i in range(0, 8192, 700) for b in range(i // 512, (i + 199) // 512 + 1)}
        assert f.last_rollback is not None and f.last_rollback.entries == len(touched)
        assert not f.last_rollback.torn_tail
        assert f.read(0, 8192) == before
    assert not os.path.exists(str(path) + ".undo")


def test_another_handle_or_process_waits_for_the_lock(tmp_path: Path) -> None:
    path = tmp_path / "data"
    with logspool.CheckpointFile(path, size=512):
        with pytest.raises(logspool.LockedError, match=r"not acquired within 0\.05 s"):
            logspool.CheckpointFile(path, lock_timeout_s=0.05)
        code = "import logspool, sys; logspool.CheckpointFile(sys.argv[1], lock_timeout_s=0.05)"
        done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True)
        assert done.returncode == 1 and "LockedError" in done.stderr
    logspool.CheckpointFile(path, lock_timeout_s=0.05).close()


def test_archive_keeps_each_transactions_old_bytes(tmp_path: Path) -> None:
    path = tmp_path / "data"
    with logspool.CheckpointFile(path, size=2048, block_size=512, archive=True) as f:
        for i in range(3):
            f.write(100, b"v%d" % (i + 1))
            f.checkpoint()
        f.checkpoint()  # nothing written: no transaction, no archive
    with logspool.CheckpointFile(path, block_size=512, archive=True) as f:  # sequence goes on
        f.write(1500, b"v4")
    for seq, old in [(1, b"\0\0"), (2, b"v1"), (3, b"v2"), (4, b"\0\0")]:
        buf = Path(archive_path_of(str(path), seq)).read_bytes()
        header = fmt.decode_undo_header(buf, "archive")
        assert header.sequence == seq and header.data_size == 2048
        entry = fmt.decode_undo_entry(buf[fmt.UNDO_HEADER_SIZE :])
        assert entry is not None
        offset, block = entry
        written_at = 100 if seq < 4 else 1500
        assert offset == written_at // 512 * 512 and block[written_at % 512 :][:2] == old
    assert not os.path.exists(archive_path_of(str(path), 5))


def test_threads_writing_and_checkpointing_never_see_half_a_write(tmp_path: Path) -> None:
    path = tmp_path / "data"
    size, span = 64 * 1024, 6000  # each write crosses two block boundaries
    errors: list[str] = []
    with logspool.CheckpointFile(path, size=size) as f:

        def writer(k: int) -> None:
            for i in range(150):
                f.write(k * 16_000, bytes([(k * 50 + i) % 251 + 1]) * span)
                if i % 25 == 0:
                    f.checkpoint()

        def reader() -> None:
            for _ in range(400):
                for k in range(4):
                    got = f.read(k * 16_000, span)
                    if got != got[:1] * span:
                        errors.append(f"region {k} is half of one write and half of another")

        threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
        threads.append(threading.Thread(target=reader))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        final = [f.read(k * 16_000, span) for k in range(4)]
    assert errors == []
    with logspool.CheckpointFile(path) as f:
        assert [f.read(k * 16_000, span) for k in range(4)] == final
        assert final == [bytes([(k * 50 + 149) % 251 + 1]) * span for k in range(4)]


def _undo(path: Path, data_size: int, entries: list[bytes], block_size: int = 512) -> bytes:
    header = fmt.encode_undo_header(fmt.UndoHeader(block_size, data_size, 1, 0))
    buf = header + b"".join(entries)
    Path(str(path) + ".undo").write_bytes(buf)
    return buf


def test_a_torn_last_undo_entry_is_ignored_at_every_cut(tmp_path: Path) -> None:
    path = tmp_path / "data"
    old_a, new_a = b"A" * 512, b"a" * 512
    entry_a = fmt.encode_undo_entry(0, old_a)
    entry_b = fmt.encode_undo_entry(512, b"B" * 512)
    # Block 0 was changed under its entry; block 1's entry was being written (block 1 unchanged).
    for cut in range(1, len(entry_b)):
        path.write_bytes(new_a + b"B" * 512)
        _undo(path, 1024, [entry_a, entry_b[:cut]])
        with logspool.CheckpointFile(path) as f:
            assert f.last_rollback is not None and f.last_rollback.torn_tail, cut
            assert f.read(0, 1024) == old_a + b"B" * 512
    # The same cut, padded with zeros: the size grew but the data never came.
    for cut in (3, 16, 200, len(entry_b) - 4):
        path.write_bytes(new_a + b"B" * 512)
        _undo(path, 1024, [entry_a, entry_b[:cut] + bytes(len(entry_b) - cut + 7)])
        with logspool.CheckpointFile(path) as f:
            assert f.last_rollback is not None and f.last_rollback.torn_tail, cut
            assert f.read(0, 1024) == old_a + b"B" * 512


def test_damage_in_the_undo_log_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "data"
    entries = [fmt.encode_undo_entry(i * 512, bytes([65 + i]) * 512) for i in range(3)]
    now = b"n" * 1536
    for flip in range(fmt.UNDO_HEADER_SIZE, fmt.UNDO_HEADER_SIZE + len(entries[0]) * 2, 97):
        path.write_bytes(now)
        buf = bytearray(_undo(path, 1536, entries))
        buf[flip] ^= 0x10
        Path(str(path) + ".undo").write_bytes(buf)
        with pytest.raises(logspool.CorruptionError) as info:
            logspool.CheckpointFile(path)
        entry_start = fmt.UNDO_HEADER_SIZE + (flip - fmt.UNDO_HEADER_SIZE) // len(entries[0]) * len(
            entries[0]
        )
        assert info.value.path == str(path) + ".undo" and info.value.offset == entry_start
        assert f"offset {entry_start}" in str(info.value)
        assert path.read_bytes() == now and os.path.exists(str(path) + ".undo")
    # A whole entry whose checksum is wrong at the end of the log: damage, not a torn write.
    path.write_bytes(now)
    buf = bytearray(_undo(path, 1536, entries))
    buf[-1] ^= 1
    Path(str(path) + ".undo").write_bytes(buf)
    with pytest.raises(logspool.CorruptionError, match="not a torn tail"):
        logspool.CheckpointFile(path)
    # An undo log made for a file of another size.
    _undo(path, 4096, entries)
    with pytest.raises(logspool.CorruptionError, match="for a file of 4096 bytes, this one has 1536"):
        logspool.CheckpointFile(path)
    # A damaged header with entries after it.
    buf = bytearray(_undo(path, 1536, entries))
    buf[3] ^= 1
    Path(str(path) + ".undo").write_bytes(buf)
    with pytest.raises(logspool.CorruptionError, match="not an undo log"):
        logspool.CheckpointFile(path)
    assert path.read_bytes() == now


@pytest.mark.parametrize("content", [b"", b"LOGSPU", bytes(48), bytes(300)])
def test_an_undo_log_cut_while_it_was_created_is_discarded(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "data"
    path.write_bytes(b"x" * 700)
    Path(str(path) + ".undo").write_bytes(content)
    report = logspool.CheckpointFile.repair(path)
    assert report is not None and report.discarded and report.entries == 0
    assert path.read_bytes() == b"x" * 700 and not os.path.exists(str(path) + ".undo")
    assert logspool.CheckpointFile.repair(path) is None


def test_a_temporary_left_by_a_killed_creation_is_removed(tmp_path: Path) -> None:
    path = tmp_path / "data"
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    stale = tmp_path / f".data.{int(dead.stdout)}.0badf00d.new"
    stale.write_bytes(b"partial")
    live = tmp_path / f".data.{os.getpid()}.0badf00d.new"
    live.write_bytes(b"being created")
    logspool.CheckpointFile(path, size=64).close()
    assert not stale.exists() and live.exists()


class UndoWriteFails(FileSystem):
    broken = False

    def write(self, fd: int, data: bytes) -> None:
        if self.broken:
            os.write(fd, data[: len(data) // 3])
            raise OSError(errno.ENOSPC, "No space left on device")
        super().write(fd, data)


def test_an_undo_write_error_stops_the_handle_and_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "data"
    fs = UndoWriteFails()
    f = logspool.CheckpointFile(path, size=4096, block_size=512, fs=fs)
    f.write(0, b"committed")
    f.checkpoint()
    f.write(0, b"pending!!")
    fs.broken = True
    with pytest.raises(logspool.FailedError, match="No space left"):
        f.write(1000, b"never")
    assert path.read_bytes()[1000:1005] == bytes(5)  # the store did not happen
    with pytest.raises(logspool.FailedError, match="reopen"):
        f.read(0, 1)
    # The failed handle let go of the file: a reopen (before its close) takes the lock and rolls back.
    with logspool.CheckpointFile(path, lock_timeout_s=0.1) as g:
        assert g.last_rollback is not None and g.last_rollback.torn_tail
        assert g.read(0, 9) == b"committed"
    f.close()
