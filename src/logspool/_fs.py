"""The one I/O seam: the only module that writes, fsyncs, renames, truncates, unlinks or locks.

Everything that changes a file goes through a ``FileSystem`` object, so a test can hand a log a
subclass that fails the Nth call, or that remembers what was fsynced and simulates power loss by
dropping the rest (tests/crash). Reads go through it too, so a fault can be injected there as well.

The methods are thin: they add no policy, only the loops that the OS interface needs (a short
write is continued; an interrupted call is retried by Python itself, PEP 475).
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import struct
import time
from collections.abc import Callable, Iterable

from . import limits

_BOOT_ID: bytes | None = None  # read once a process (it cannot change while the process runs)


class FileSystem:
    """The real file system. Subclass and override to inject faults."""

    def fork(self) -> int:
        """``os.fork``: the child's pid, 0 in the child (``_forked``; a test's subclass makes it
        fail as a machine out of memory or processes would)."""
        return os.fork()

    def shared_with_children(self) -> bool:
        """True if a forked child's calls through this object reach the same files as this
        process's: the real file system's do. A test's subclass keeps what it simulates (the
        writes not yet fsynced, a count, a fault to come) in this process's memory, so it says
        False, and a store does in a thread what it would do in a child (``kv`` snapshots); a
        subclass that says True has its faults raised in the child, which reports them."""
        return type(self) is FileSystem

    # --- opening and closing -----------------------------------------------------------------
    def open(self, path: str, flags: int, mode: int = 0o644) -> int:
        return os.open(path, flags | os.O_CLOEXEC, mode)

    def close(self, fd: int) -> None:
        os.close(fd)

    # --- reading -------------------------------------------------------------------------------
    def pread(self, fd: int, size: int, offset: int) -> bytes:
        return os.pread(fd, size, offset)

    def size(self, fd: int) -> int:
        """The file's current size in bytes (lseek to the end: one cheap syscall)."""
        return os.lseek(fd, 0, os.SEEK_END)

    def read_file(self, path: str, size_max: int) -> bytes:
        """A whole small file; OSError if missing; ValueError if larger than ``size_max``."""
        fd = self.open(path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            if size > size_max:
                raise ValueError(f"{path}: {size} bytes, more than the {size_max} expected")
            return self.pread(fd, size, 0)
        finally:
            self.close(fd)

    def listdir(self, path: str) -> list[str]:
        return os.listdir(path)

    def boot_id(self) -> bytes:
        """16 bytes naming this boot of the machine (Linux's random boot id), b"" where there is
        none. While it is the same, the page cache holds every byte written since the boot began:
        nothing written and not fsynced can have been lost (docs/FORMAT.md §8.1)."""
        global _BOOT_ID
        if _BOOT_ID is None:
            try:
                with open("/proc/sys/kernel/random/boot_id", "rb") as f:
                    text = f.read(64).strip()
                _BOOT_ID = bytes.fromhex(text.decode("ascii").replace("-", ""))
                if len(_BOOT_ID) != 16:
                    _BOOT_ID = b""
            except (OSError, ValueError, UnicodeDecodeError):
                _BOOT_ID = b""
        return _BOOT_ID

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    # --- writing -------------------------------------------------------------------------------
    def write(self, fd: int, data: bytes) -> None:
        """Write all of ``data`` at the file's end (fds are opened O_APPEND); continue short writes.

        If this raises, part of ``data`` may be in the file: the caller truncates it away.
        """
        written = os.write(fd, data)
        while written < len(data):  # bounded: each turn writes at least one byte or raises
            n = os.write(fd, memoryview(data)[written:])
            if n == 0:
                raise OSError(errno.EIO, "write returned 0 bytes")
            written += n

    def pwrite(self, fd: int, data: bytes, offset: int) -> None:
        written = os.pwrite(fd, data, offset)  # (whole, nearly always: the loop is for the rest)
        if written == 0 and data:
            raise OSError(errno.EIO, "pwrite returned 0 bytes")
        while written < len(data):
            n = os.pwrite(fd, memoryview(data)[written:], offset + written)
            if n == 0:
                raise OSError(errno.EIO, "pwrite returned 0 bytes")
            written += n

    def allocate(self, fd: int, offset: int, length: int) -> None:
        """Make bytes ``offset`` to ``offset + length`` part of the file, reading as zeros where
        nothing was written (posix_fallocate: the file grows if they lie past its end). Writing
        into them later and fsyncing does not change the file's size, which makes that fsync
        cheaper (benchmarks/bench_disk.py). OSError (ENOSPC...) if the space cannot be had."""
        os.posix_fallocate(fd, offset, length)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def fdatasync(self, fd: int) -> None:
        """fsync the data of a file rewritten in place (its size unchanged): the inode's times
        are left to the next journal commit, which saves a second write of the metadata."""
        os.fdatasync(fd)

    def fsync_dir(self, path: str) -> None:
        """fsync a directory, making the creation, rename or removal of its entries durable."""
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def truncate(self, fd: int, size: int) -> None:
        os.ftruncate(fd, size)

    def rename(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def link(self, src: str, dst: str) -> None:
        """Create ``dst`` as a second name of ``src``; FileExistsError if ``dst`` exists."""
        os.link(src, dst)

    def unlink(self, path: str) -> None:
        os.unlink(path)

    def mkdir(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def map_shared(self, fd: int, size: int) -> mmap.mmap:
        """Map the first ``size`` bytes of ``fd`` read-write and shared between processes (the
        file must be at least that long). Stores into it are visible to every process at once;
        they reach the disk only whenever the kernel writes the page back: never rely on them
        for durability."""
        return mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)

    def msync(self, mm: mmap.mmap) -> None:
        """Write a shared mapping's dirty pages to the file and wait for them (msync MS_SYNC).
        The file's fsync after it makes them durable on every file system."""
        mm.flush()

    # --- locking -------------------------------------------------------------------------------
    def lock(self, fd: int, timeout_s: float, idle: Callable[[], bool] | None = None) -> bool:
        """Take an exclusive flock on ``fd`` within ``timeout_s``; False if it was not free in time.
        ``idle``: work to do while the lock is taken (True if it did some: look again at once
        rather than sleep), such as reading what the lock's holders write.

        flock, not fcntl record locks: a record lock is dropped when *any* fd of the process on that
        file is closed, which a library cannot control. flock belongs to the open file description,
        so each Log handle opens its own.
        """
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            pass
        start = time.monotonic()
        deadline = start + timeout_s
        delay = limits.LOCK_POLL_S_MIN
        while (now := time.monotonic()) < deadline:  # bounded by the deadline
            if idle is None or not idle():
                time.sleep(min(delay, deadline - now))
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                cap = (
                    limits.LOCK_POLL_S_FAST
                    if now - start < limits.LOCK_POLL_FAST_S
                    else limits.POLL_INTERVAL_S_MAX
                )
                delay = min(delay * 2, cap)
        return False

    def lock_blocking(self, fd: int) -> None:
        """Take an exclusive flock, waiting as long as it takes (the common, uncontended path)."""
        fcntl.flock(fd, fcntl.LOCK_EX)

    def lock_shared(self, fd: int) -> None:
        """Take a shared flock, waiting as long as it takes. Taking the exclusive lock while
        holding this one converts it (not atomically: others may get in between)."""
        fcntl.flock(fd, fcntl.LOCK_SH)

    def try_lock_shared(self, fd: int) -> bool:
        """Take a shared flock if no exclusive one is held now; False, nothing taken, if one is."""
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def unlock(self, fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)

    def lock_gate(self, fd: int, byte: int, kind: int) -> None:
        """Wait for and take (``fcntl.F_RDLCK``, ``F_WRLCK``) or release (``F_UNLCK``) gate
        ``byte`` of ``fd``'s file: an open file description lock (``F_OFD_SETLKW``) on one byte
        far past the end of the file, independent of the file's flock and, like it, released
        when the descriptor closes or its process dies. A no-op where the system has none."""
        if _OFD_LOCKS:
            fcntl.fcntl(fd, fcntl.F_OFD_SETLKW, _GATE.pack(kind, 0, _GATE_BYTE + byte, 1, 0))

    def try_gate(self, fd: int, byte: int) -> bool:
        """Take gate ``byte`` exclusively if it is free now (always, where there are none)."""
        if not _OFD_LOCKS:
            return True
        try:
            fcntl.fcntl(fd, fcntl.F_OFD_SETLK, _GATE.pack(fcntl.F_WRLCK, 0, _GATE_BYTE + byte, 1, 0))
        except (BlockingIOError, PermissionError):  # EAGAIN or EACCES: held by another
            return False
        return True


_GATE = struct.Struct("hhqqi4x")  # struct flock on 64-bit Linux: type, whence, start, len, pid
_GATE_BYTE = 1 << 40  # the gates' offset in the file (docs/FORMAT.md §8.1)
_OFD_LOCKS = hasattr(fcntl, "F_OFD_SETLK")

REAL = FileSystem()


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (the owner of a temporary file named after it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, owned by someone else
    except OSError as err:
        return err.errno != errno.ESRCH
    return True


def replace_file(fs: FileSystem, directory: str, name: str, data: bytes | Iterable[bytes]) -> None:
    """Make ``directory/name`` hold exactly ``data`` (bytes, or pieces written in turn), atomically
    and durably: after a crash at any point the file holds the old content or the new, never a mix
    (checkpoints, the retention file, snapshots).
    """
    tmp = temp_path(directory, name, os.getpid(), os.urandom(4).hex())
    write_temp(fs, tmp, data)
    install_temp(fs, directory, tmp, name)


def temp_path(directory: str, name: str, pid: int, salt: str) -> str:
    """Where ``replace_file`` writes ``name`` first: ``.<name>.<pid>.<salt>.tmp``, the pid of the
    process writing it (repair removes such a file once that process is gone)."""
    return os.path.join(directory, f".{name}.{pid}.{salt}.tmp")


def temp_owner(name: str) -> int | None:
    """The pid in a temporary file's name (``temp_path``; or ``.meta.<pid>.<hex>``, a log's
    creation), or None if it is not a temporary file of ours."""
    if name.startswith(".") and name.endswith(".tmp"):
        parts = name[1:].rsplit(".", 3)  # name, pid, hex, "tmp"
        if len(parts) == 4 and parts[1].isdigit():
            return int(parts[1])
    if name.startswith(".meta."):
        parts = name.split(".")  # "", "meta", pid, hex
        if len(parts) == 4 and parts[2].isdigit():
            return int(parts[2])
    return None


def write_temp(fs: FileSystem, tmp: str, data: bytes | Iterable[bytes]) -> None:
    """Write and fsync the new file ``tmp`` (``temp_path``); removed again if that fails."""
    fd = fs.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        for piece in [data] if isinstance(data, bytes) else data:
            fs.write(fd, piece)
        fs.fsync(fd)  # crash before here: the old file intact; the .tmp is garbage (repair removes it)
    except BaseException:
        fs.close(fd)
        fs.unlink(tmp)
        raise
    fs.close(fd)


def install_temp(fs: FileSystem, directory: str, tmp: str, name: str) -> None:
    """Rename the fsynced ``tmp`` to ``directory/name`` and make the rename durable."""
    fs.rename(tmp, os.path.join(directory, name))  # crash here: old or new file, never a mix
    fs.fsync_dir(directory)  # without this the rename itself can be lost on power failure
