"""The checkpointed file: atomic changes to a memory-mapped file through a physical undo log.

A ``CheckpointFile`` is a fixed-size file, mapped into memory, that is read and written at byte
offsets. The writes between two ``checkpoint()`` calls are one transaction: after a crash the file
holds exactly what it held at the end of a checkpoint, never part of a transaction. This is the
CKPTFile design (docs/DESIGN.md), with its flaws fixed: the rollback is idempotent (no second
"repair" log), every undo entry carries a checksum, and a checkpoint is acknowledged only once the
retirement of its undo log is durable.

How:

- Before the first change to a block (``block_size`` bytes) after a checkpoint, the block's old
  bytes are appended to ``FILE.undo`` (docs/FORMAT.md §13). With ``safely=True`` (the default)
  that entry is fsynced, and the undo log's name fsynced into the directory, before the block is
  changed: the kernel may write a dirty page of a mapping back at any moment, so the old bytes
  must be on disk first.
- ``checkpoint()`` writes the mapping back and fsyncs the file, then retires the undo log (unlinks
  it, or renames it to ``FILE.undo.<sequence>`` with ``archive=True``) and fsyncs the directory.
- Opening a file whose undo log exists rolls the file back: every entry's bytes are written back,
  the file is fsynced, then the undo log is retired. Rolling back writes only old bytes, so doing
  it again after a crash in the middle gives the same file: no log of the rollback is needed.

Invariants (each write below says what a crash right there leaves):

- A block changed since the last checkpoint has an entry in the undo log, durable (safely) before
  the change was made.
- ``FILE.undo`` exists exactly while a transaction is open or a rollback is unfinished.

Durability: ``checkpoint()`` returns after the transaction is durable. With ``safely=False`` a
process crash (kill -9) still rolls back cleanly, since the page cache holds both files, but a
power failure may not: the data pages can reach the disk before the undo entries that restore
them. ``safely=False`` costs one fsync per checkpoint instead of one per write that touches new
blocks.

Concurrency: a handle is thread-safe (one lock around every call). One process at a time opens a
file: the handle holds an exclusive flock on it, and another open waits up to ``lock_timeout_s``
and raises ``LockedError``.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from types import TracebackType

from .. import _format as fmt
from .. import limits
from .._fs import REAL, FileSystem, process_alive
from ..errors import ClosedError, CorruptionError, FailedError, LockedError

_INT_SIZES = (1, 2, 4, 8)


@dataclass(frozen=True, slots=True)
class RollbackReport:
    """What opening (or ``CheckpointFile.repair``) found in the undo log and did about it.

    ``entries`` blocks were restored (``size`` bytes). ``torn_tail`` says the last entry was torn
    by a crash while it was written (it was ignored: its block had not been changed yet).
    ``proven`` is False only after ``repair(path, force=True)`` restored an undo log that does
    not give back the checkpoint whole (entries of changed blocks were lost to damage).
    ``discarded`` says the undo log had no valid header and nothing after it (a crash while it was
    being created) and was removed without touching the file.
    """

    path: str
    undo_path: str
    entries: int
    size: int
    torn_tail: bool
    discarded: bool
    # The restored file has the CRC the undo log recorded for the checkpoint (always, unless
    # an operator forced a rollback of a damaged undo log; a version-1 undo log records none).
    proven: bool = True


def undo_path_of(path: str) -> str:
    return path + fmt.UNDO_SUFFIX


def archive_path_of(path: str, sequence: int) -> str:
    return f"{path}{fmt.UNDO_SUFFIX}.{sequence:020d}"


def archived_sequences(path: str, fs: FileSystem = REAL) -> list[int]:
    """The sequence numbers of the archived undo logs of ``path``, ascending."""
    directory, name = os.path.split(os.path.abspath(path))
    prefix = name + fmt.UNDO_SUFFIX + "."
    out = []
    for entry in fs.listdir(directory):
        rest = entry[len(prefix) :]
        if entry.startswith(prefix) and len(rest) == 20 and rest.isdigit():
            out.append(int(rest))
    return sorted(out)


class CheckpointFile:
    """A fixed-size memory-mapped file whose writes between checkpoints are atomic.

    ``CheckpointFile(path, size=N)`` creates the file (zero-filled, atomically) if it does not
    exist; an existing file keeps its size (``size``, if given, must match). Opening rolls back an
    unfinished transaction; ``last_rollback`` says what that did.

    Options: ``safely`` fsyncs each undo entry before the change it protects (power-failure safe;
    see the module doc); ``archive`` keeps each retired undo log as ``FILE.undo.<sequence>``, the
    history of the file's changes; ``block_size`` is the undo unit (a power of two).

    Used as a context manager, a clean exit checkpoints and an exception rolls back; both close.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        size: int | None = None,
        safely: bool = True,
        archive: bool = False,
        block_size: int = limits.CKPT_BLOCK_SIZE_DEFAULT,
        lock_timeout_s: float = limits.LOCK_TIMEOUT_S_DEFAULT,
        fs: FileSystem = REAL,
    ) -> None:
        _check_block_size(block_size)
        if size is not None and not 1 <= size <= limits.CKPT_FILE_SIZE_MAX:
            raise ValueError(f"size must be 1 to {limits.CKPT_FILE_SIZE_MAX} bytes, not {size}")
        self.path = os.path.abspath(os.fspath(path))
        self.undo_path = undo_path_of(self.path)
        self._dir = os.path.dirname(self.path)
        self._fs = fs
        self.safely = safely
        self.archive = archive
        self.block_size = block_size
        self._mutex = threading.RLock()
        self._failed: BaseException | None = None
        self._closed = False
        if not fs.exists(self.path):
            if size is None:
                raise FileNotFoundError(
                    f"{self.path}: no such checkpointed file (a size is needed to create one)"
                )
            _create(fs, self.path, size)
        self._fd = fs.open(self.path, os.O_RDWR)
        try:
            if not fs.lock(self._fd, lock_timeout_s):
                raise LockedError(self.path, lock_timeout_s)
            self.size = fs.size(self._fd)
            if size is not None and size != self.size:
                raise ValueError(f"{self.path}: the file is {self.size} bytes, not the {size} asked for")
            if self.size == 0:
                raise ValueError(
                    f"{self.path}: the file is empty; a checkpointed file has a fixed, nonzero size"
                )
            if self.size > limits.CKPT_FILE_SIZE_MAX:
                raise ValueError(
                    f"{self.path}: {self.size} bytes, over the {limits.CKPT_FILE_SIZE_MAX} limit"
                )
            self.last_rollback = _roll_back(fs, self._fd, self.path, self.size)
            _remove_stale_temps(fs, self.path)
            self._mm = fs.map_shared(self._fd, self.size)
        except BaseException:
            fs.close(self._fd)
            raise
        self._undo_fd: int | None = None
        self._logged: set[int] = set()  # blocks with an entry in the current undo log
        archived = archived_sequences(self.path, fs)
        self._sequence = (archived[-1] + 1) if archived else 1

    # --- reading ---------------------------------------------------------------------------------
    def read(self, offset: int, size: int) -> bytes:
        """``size`` bytes at ``offset``, as this handle sees them (its own uncommitted writes
        included). Thread-safe: never half of a concurrent write."""
        with self._mutex:
            self._check_usable()
            self._check_range(offset, size)
            return self._mm[offset : offset + size]

    def read_int(self, offset: int, *, size: int = 8, signed: bool = False) -> int:
        """The little-endian integer of ``size`` bytes (1, 2, 4 or 8) at ``offset``."""
        _check_int_size(size)
        return int.from_bytes(self.read(offset, size), "little", signed=signed)

    # --- writing ---------------------------------------------------------------------------------
    def write(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        """Write ``data`` at ``offset``, as part of the transaction the next ``checkpoint()``
        commits. Durability: none by itself; the undo entries it needs are written (and fsynced
        with ``safely``) before the file changes. An I/O error stops the handle (``FailedError``);
        reopening rolls back to the last checkpoint."""
        data = bytes(data)
        with self._mutex:
            self._check_usable()
            self._check_range(offset, len(data))
            if not data:
                return
            first, last = offset // self.block_size, (offset + len(data) - 1) // self.block_size
            new = [b for b in range(first, last + 1) if b not in self._logged]
            if new:
                self._save_blocks(new)
            # Crash from here until the checkpoint: the undo log restores every block touched.
            self._mm[offset : offset + len(data)] = data

    def write_int(self, offset: int, value: int, *, size: int = 8, signed: bool = False) -> None:
        """Write ``value`` as a little-endian integer of ``size`` bytes (1, 2, 4 or 8)."""
        _check_int_size(size)
        try:
            data = value.to_bytes(size, "little", signed=signed)
        except OverflowError:
            kind = "signed" if signed else "unsigned"
            raise ValueError(f"{value} does not fit in {size} bytes ({kind})") from None
        self.write(offset, data)

    def checkpoint(self) -> None:
        """Make every write since the last checkpoint durable, as one. Returns after the file is
        fsynced and the retirement of the undo log is durable; a crash before that rolls the
        whole transaction back. Does nothing if nothing was written."""
        with self._mutex:
            self._check_usable()
            if self._undo_fd is None:
                return
            try:
                if not self.safely:
                    # Every entry on disk before any data page is forced: a power failure in the
                    # checkpoint then finds a whole undo log (pages written back earlier by the
                    # kernel are what safely=False does not cover).
                    self._fs.fsync(self._undo_fd)
                self._fs.msync(self._mm)
                self._fs.fsync(self._fd)  # crash up to here: the undo log rolls the file back
                self._fs.close(self._undo_fd)
                self._undo_fd = None
                if self.archive:
                    self._fs.rename(self.undo_path, archive_path_of(self.path, self._sequence))
                else:
                    self._fs.unlink(self.undo_path)
                # crash here: the removal may be undone, and the file rolled back: the checkpoint
                # was not acknowledged, and rolling back is all-or-nothing too.
                self._fs.fsync_dir(self._dir)
            except OSError as err:
                raise self._fail("checkpoint", err) from err
            self._logged.clear()
            self._sequence += 1

    def rollback(self) -> RollbackReport | None:
        """Undo every write since the last checkpoint (what a crash would do). Returns what was
        restored, or None if nothing was written. Durable when it returns."""
        with self._mutex:
            self._check_usable()
            if self._undo_fd is None:
                return None
            try:
                self._fs.close(self._undo_fd)
                self._undo_fd = None
                report = _roll_back(self._fs, self._fd, self.path, self.size)
            except OSError as err:
                raise self._fail("rollback", err) from err
            self._logged.clear()
            return report

    @property
    def changed(self) -> bool:
        """Whether there are writes since the last checkpoint."""
        return self._undo_fd is not None

    # --- closing ---------------------------------------------------------------------------------
    def close(self) -> None:
        """Roll back writes not checkpointed, unmap, release the lock. Idempotent."""
        with self._mutex:
            if self._closed:
                return
            try:
                if self._failed is None and self._undo_fd is not None:
                    self.rollback()
            finally:
                self._closed = True
                self._release()

    def _release(self) -> None:
        """Close the undo log, unmap, and close the file (which releases the lock)."""
        if self._undo_fd is not None:
            self._fs.close(self._undo_fd)
            self._undo_fd = None
        if not self._mm.closed:
            self._mm.close()  # the mapping holds a duplicate of the fd: the lock goes with both
            self._fs.close(self._fd)

    def __enter__(self) -> CheckpointFile:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if exc_type is None and self._failed is None and not self._closed:
                self.checkpoint()
        finally:
            self.close()

    @staticmethod
    def repair(
        path: str | os.PathLike[str], *, force: bool = False, fs: FileSystem = REAL
    ) -> RollbackReport | None:
        """Roll ``path`` back to its last checkpoint if a transaction was left unfinished (what
        opening does). Returns None if there was nothing to do. Safe to repeat, and to crash in.

        ``force``: also when the undo log cannot restore the checkpoint whole (storage damage
        cut it: opening raises CorruptionError then): what it holds is restored and the undo log
        retired; the report's ``proven`` is False, and the file may hold part of the unfinished
        transaction. Only an operator who has decided that is better than nothing asks for it."""
        if not force:
            with CheckpointFile(path, fs=fs) as f:
                return f.last_rollback
        full = os.path.abspath(os.fspath(path))
        fd = fs.open(full, os.O_RDWR)
        try:
            if not fs.lock(fd, limits.LOCK_TIMEOUT_S_DEFAULT):
                raise LockedError(full, limits.LOCK_TIMEOUT_S_DEFAULT)
            return _roll_back(fs, fd, full, fs.size(fd), force=True)
        finally:
            fs.close(fd)  # (the lock goes with it)

    # --- internals -------------------------------------------------------------------------------
    def _save_blocks(self, blocks: list[int]) -> None:
        """Append the old bytes of ``blocks`` to the undo log (durably with ``safely``)."""
        try:
            if self._undo_fd is None:
                self._undo_fd = self._begin()
            group: list[bytes] = []
            group_size = 0
            for b in blocks:
                start = b * self.block_size
                entry = fmt.encode_undo_entry(
                    start, self._mm[start : min(self.size, start + self.block_size)]
                )
                group.append(entry)
                group_size += len(entry)
                if group_size >= limits.CKPT_UNDO_WRITE_SIZE_MAX:
                    self._fs.write(self._undo_fd, b"".join(group))
                    group, group_size = [], 0
            if group:
                # crash mid-write: a torn last entry, whose block was not changed yet (rollback
                # ignores it, FORMAT.md §13)
                self._fs.write(self._undo_fd, b"".join(group))
            if self.safely:
                self._fs.fsync(self._undo_fd)  # the old bytes are durable before the change
        except OSError as err:
            raise self._fail("undo log write", err) from err
        self._logged.update(blocks)

    def _begin(self) -> int:
        """Create the undo log of a new transaction."""
        # The checkpointed content's CRC (nothing changed since the checkpoint yet): the rollback's
        # proof that the undo log restores all of it (one pass over the file per transaction).
        data_crc = fmt.crc32(self._mm)
        header = fmt.UndoHeader(self.block_size, self.size, self._sequence, time.time_ns(), data_crc)
        fd = self._fs.open(self.undo_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND)
        try:
            # crash here: an undo log without a (whole) header and nothing after it: discarded.
            self._fs.write(fd, fmt.encode_undo_header(header))
            if self.safely:
                self._fs.fsync(fd)
                self._fs.fsync_dir(self._dir)  # the name is durable before any block changes
        except BaseException:
            self._fs.close(fd)
            raise
        return fd

    def _fail(self, what: str, err: OSError) -> FailedError:
        """Stop for good, and let go of the file at once so that a reopen can roll it back."""
        self._failed = err
        self._release()
        return FailedError(self.path, f"{what} failed ({err}); reopen to roll back to the last checkpoint")

    def _check_usable(self) -> None:
        if self._failed is not None:
            raise FailedError(self.path, f"stopped after an I/O error ({self._failed}); reopen it")
        if self._closed:
            raise ClosedError(self.path, "checkpointed file is closed")

    def _check_range(self, offset: int, size: int) -> None:
        if offset < 0 or size < 0 or offset + size > self.size:
            raise ValueError(
                f"{self.path}: bytes {offset} to {offset + size} are outside the file (0 to {self.size})"
            )


def _check_block_size(block_size: int) -> None:
    ok = limits.CKPT_BLOCK_SIZE_MIN <= block_size <= limits.CKPT_BLOCK_SIZE_MAX
    if not ok or block_size & (block_size - 1):
        raise ValueError(
            f"block_size must be a power of two from {limits.CKPT_BLOCK_SIZE_MIN} to "
            f"{limits.CKPT_BLOCK_SIZE_MAX}, not {block_size}"
        )


def _check_int_size(size: int) -> None:
    if size not in _INT_SIZES:
        raise ValueError(f"integer size must be one of {_INT_SIZES} bytes, not {size}")


def _create(fs: FileSystem, path: str, size: int) -> None:
    """Create ``path`` as ``size`` zero bytes, atomically: the name appears only when whole."""
    directory, name = os.path.split(path)
    tmp = os.path.join(directory, f".{name}.{os.getpid()}.{os.urandom(4).hex()}.new")
    fd = fs.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        fs.truncate(fd, size)
        fs.fsync(fd)  # crash before here: a stray temporary, never the file's name
    finally:
        fs.close(fd)
    try:
        fs.link(tmp, path)  # not rename: a file another process created meanwhile is kept
    except FileExistsError:
        pass
    finally:
        fs.unlink(tmp)
    fs.fsync_dir(directory)  # crash before here: no file, or the whole file


def _scan_undo(
    fs: FileSystem, fd: int, undo_path: str, data_size: int
) -> tuple[list[tuple[int, int]], bool, bool, int | None]:
    """Check a whole undo log before anything is restored from it.

    Returns (entries as (position in the undo log, entry size), torn tail?, discard?, the CRC of
    the checkpointed file from the header (None: version 1, or discard)). Damage that a
    crash cannot leave raises CorruptionError naming the undo log and the offset: restoring part of
    a transaction would silently change data, so the file is left alone for a person to decide.
    """
    end = fs.size(fd)
    head = fs.pread(fd, min(end, fmt.UNDO_HEADER_SIZE), 0)
    try:
        header = fmt.decode_undo_header(head, undo_path)
    except CorruptionError:
        # A crash while the undo log was created leaves a partial header (or zeros) and nothing
        # after it: no block was changed under it.
        if end <= fmt.UNDO_HEADER_SIZE or not fs.pread(
            fd, end - fmt.UNDO_HEADER_SIZE, fmt.UNDO_HEADER_SIZE
        ).strip(b"\0"):
            return [], False, True, None
        raise
    if header.data_size != data_size:
        raise CorruptionError(
            undo_path, 0, f"undo log is for a file of {header.data_size} bytes, this one has {data_size}"
        )
    entries: list[tuple[int, int]] = []
    pos = fmt.UNDO_HEADER_SIZE
    while pos < end:  # bounded: each turn moves pos forward by a whole entry, or ends
        head = fs.pread(fd, min(fmt.UNDO_ENTRY.size, end - pos), pos)
        size = fmt.undo_entry_size(head) if len(head) == fmt.UNDO_ENTRY.size else -1
        if 0 < size <= header.block_size:
            whole = fmt.UNDO_ENTRY_OVERHEAD + size
            buf = fs.pread(fd, min(whole, end - pos), pos)
            decoded = fmt.decode_undo_entry(buf)
            if decoded is not None and decoded[0] + size <= data_size:
                entries.append((pos, whole))
                pos += whole
                continue
        if _is_torn_tail(fs, fd, pos, end, size, header.block_size):
            return entries, True, False, header.data_crc
        raise CorruptionError(
            undo_path, pos, "undo entry fails its checksum or bounds, and is not a torn tail"
        )
    return entries, False, False, header.data_crc


def _is_torn_tail(fs: FileSystem, fd: int, pos: int, end: int, size: int, block_size: int) -> bool:
    """Could the bytes from ``pos`` to the end be the last entry, torn by a crash?

    A torn write leaves a prefix of the entry, perhaps followed by zeros (the size grew, the data
    did not come). So: a header that is cut short or zeroed from some byte on; or a sane size
    whose entry reaches past the end; or a sane size whose checksum field is zero and nothing but
    zeros after the entry. A wrong checksum with nonzero bytes in it, or anything after the entry,
    is damage.
    """
    if end - pos < fmt.UNDO_ENTRY.size:
        return True  # not even an entry header: a cut write (a whole damaged entry is longer)
    if not 0 < size <= block_size:
        # Only a size field zeroed from some byte on is a crash: then all after it is zero too.
        return not fs.pread(fd, end - pos - 4, pos + 4).strip(b"\0")
    whole = fmt.UNDO_ENTRY_OVERHEAD + size
    if pos + whole > end:
        return True
    crc_field = fs.pread(fd, 4, pos + whole - 4)
    after = fs.pread(fd, end - pos - whole, pos + whole) if end > pos + whole else b""
    return crc_field == bytes(4) and not after.strip(b"\0")


def _remove_stale_temps(fs: FileSystem, path: str) -> None:
    """Remove temporaries that a creation killed part-way left behind (their process is gone)."""
    directory, name = os.path.split(path)
    prefix = f".{name}."
    for entry in fs.listdir(directory):
        parts = entry[len(prefix) :].split(".")
        if not entry.startswith(prefix) or len(parts) != 3 or parts[2] != "new" or not parts[0].isdigit():
            continue
        if not process_alive(int(parts[0])):
            fs.unlink(os.path.join(directory, entry))


def _roll_back(
    fs: FileSystem, fd: int, path: str, data_size: int, *, force: bool = False
) -> RollbackReport | None:
    """Restore ``path`` from its undo log, if there is one (idempotent; see the module doc).

    The restored file must have the CRC the undo log's header recorded for the checkpoint
    (version 2): if it would not, entries of blocks that did change are missing (storage damage
    cut the undo log), and rolling back would leave part of the transaction in the file. Then
    CorruptionError names the undo log and neither file is touched, unless ``force`` (an
    operator's ``logspool ckpt repair --force``): the entries there are restored anyway and the
    report says the result is unproven."""
    undo_path = undo_path_of(path)
    if not fs.exists(undo_path):
        return None
    ufd = fs.open(undo_path, os.O_RDONLY)
    try:
        entries, torn, discard, data_crc = _scan_undo(fs, ufd, undo_path, data_size)
        restore: list[tuple[int, bytes]] = []
        seen: set[int] = set()
        for pos, whole in entries:
            decoded = fmt.decode_undo_entry(fs.pread(ufd, whole, pos))
            assert decoded is not None  # checked by the scan, and the undo log is ours alone
            offset, old = decoded
            if offset in seen:
                continue  # the first entry of a block holds its checkpointed bytes
            seen.add(offset)
            restore.append((offset, old))
    finally:
        fs.close(ufd)
    proven = data_crc is None or _restored_crc(fs, fd, data_size, restore) == data_crc
    if not proven and not force:
        raise CorruptionError(
            undo_path,
            40,
            f"the undo log does not restore the checkpoint ({len(restore)} entries; the restored "
            f"file would not have the checkpoint's CRC 0x{data_crc:08x}): entries of changed blocks "
            f"are missing or damaged, and {path} holds part of an unfinished transaction. Both "
            "files are left as they are; 'logspool ckpt repair --force' restores what the undo "
            "log holds anyway",
        )
    restored = 0
    for offset, old in restore:
        # crash here: some blocks restored, the undo log intact: the next rollback redoes it
        fs.pwrite(fd, old, offset)
        restored += len(old)
    fs.fsync(fd)  # the restored bytes are durable before the undo log goes
    fs.unlink(undo_path)  # crash after: a rolled-back file, with or without its undo log: same
    fs.fsync_dir(os.path.dirname(path))
    return RollbackReport(path, undo_path, len(seen), restored, torn, discard, proven)


def _restored_crc(fs: FileSystem, fd: int, data_size: int, restore: list[tuple[int, bytes]]) -> int:
    """The CRC-32 the file would have with ``restore`` written over it, in order (read in chunks;
    nothing written)."""
    crc = 0
    chunk_size = limits.CKPT_CRC_CHUNK_SIZE
    ordered = sorted(range(len(restore)), key=lambda k: restore[k][0])  # (ties keep write order)
    for pos in range(0, data_size, chunk_size):  # bounded by the file's size
        end = min(data_size, pos + chunk_size)
        chunk = bytearray(fs.pread(fd, end - pos, pos))
        for k in ordered:
            offset, old = restore[k]
            if offset >= end:
                break
            lo, hi = max(offset, pos), min(offset + len(old), end)
            if lo < hi:
                chunk[lo - pos : hi - pos] = old[lo - offset : hi - offset]
        crc = fmt.crc32(chunk, crc)
    return crc
