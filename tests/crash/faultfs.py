"""The crash harness's file system: fault injection and power-loss simulation behind the _fs seam.

``FaultFS`` wraps the real file system (the workload runs on real files) and counts every
operation. It can:

- fail operation number N with an OSError (EIO, ENOSPC...), once or from then on (``fail_at``);
- cut the power at operation N (``crash_at``): that operation and every later one raise
  ``PowerLoss``, which unwinds the workload; ``crash_states()`` then gives what the disk may
  hold after such a power failure.

The power-loss model is the weakest a POSIX file system promises (the assumptions of
docs/DURABILITY.md):

- a file's bytes are durable as of its last successful ``fsync``; everything written since may be
  lost, or kept in part: the bytes appended since may survive as any prefix (a torn write), or
  the file may have been extended with zeros that never got their data; bytes changed in place
  (pwrite, or stores into a shared mapping, which the kernel writes back a page at a time
  whenever it likes) may survive sector by sector: any mix of 512-byte sectors, old and new;
- a name's creation, rename or removal is durable only after the ``fsync`` of its directory;
  until then each such change may be lost on its own: every name changed since the directory's
  last fsync is, independently, as it was then or as it is now (the strict state: as it was);
- files removed since are back with their durable content if their name was durable.

State is tracked by inode: ``durable[ino]`` is the content at the last fsync (files present when
the harness started count as durable), ``names[dir]`` the name -> inode map at the last fsync of
that directory.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import random
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from logspool import _format as fmt
from logspool import _segment as seg
from logspool._fs import FileSystem


class PowerLoss(BaseException):
    """The power went out: raised by every operation from the crash point on. A BaseException,
    so that no ``except Exception`` or ``except OSError`` in the code under test swallows it."""


@dataclass
class Fault:
    at: int  # the operation number (from 1) that fails
    errno: int = errno.EIO
    sticky: bool = False  # fail every operation of the same kind from then on
    ops: tuple[str, ...] = ()  # only count these operations (empty: all mutating ones)


MUTATING = (
    "write",
    "pwrite",
    "allocate",
    "fsync",
    "fsync_dir",
    "truncate",
    "rename",
    "link",
    "unlink",
    "mkdir",
    "open_create",
    "msync",
)
SECTOR_SIZE = 512  # the unit a power failure keeps or loses of an in-place change (DURABILITY.md)


class FaultFS(FileSystem):
    """The real file system, with a counter, faults, and a record of what is durable."""

    def __init__(
        self, root: str, *, crash_at: int = 0, fault: Fault | None = None, fsyncgate: bool = False
    ) -> None:
        self.root = os.path.abspath(root)
        self.count = 0  # mutating operations so far
        self.crash_at = crash_at
        self.crashed = False
        self.fault = fault
        self.faults_raised = 0
        # fsyncgate (Linux, PostgreSQL 2018): a failed fsync drops the dirty pages it could not
        # write, marks them clean and clears the error, so no later fsync writes them: on disk
        # those bytes stay what they were (zeros past the old end), while reads still see them.
        self.fsyncgate = fsyncgate
        self.dropped: dict[int, list[tuple[int, int]]] = {}  # inode -> byte ranges never written
        self.kinds: list[str] = []  # the kind of each mutating operation, in order
        self.durable: dict[int, bytes] = {}  # inode -> content at its last fsync
        self.names: dict[str, dict[str, int]] = {}  # directory -> {name: inode} at its last fsync
        self.fds: set[int] = set()  # open through us: closed by release() after a crash
        # Files unlinked or renamed over stay open here, so that their inode numbers are not
        # reused by new files while the model still refers to them.
        self._pinned: list[int] = []
        # The boot the workload runs in: its own, so that a crash state opened afterwards (on
        # the real file system) is opened after a "reboot", as it would be after a power loss.
        self._boot = os.urandom(16)
        self.snapshot_all()

    def release(self) -> None:
        """Close every fd the workload left open (it was unwound by PowerLoss) and the pins."""
        for fd in [*self.fds, *self._pinned]:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds.clear()
        self._pinned.clear()

    def _pin(self, path: str) -> None:
        with contextlib.suppress(OSError):
            self._pinned.append(os.open(path, os.O_RDONLY | os.O_CLOEXEC))

    # --- the durable model -----------------------------------------------------------------------
    def snapshot_all(self) -> None:
        """Take everything under root as durable now (the state before the workload)."""
        if not os.path.isdir(self.root):
            parent = os.path.dirname(self.root)
            self.names[parent] = {n: os.stat(os.path.join(parent, n)).st_ino for n in os.listdir(parent)}
            return
        for dirpath, _dirs, files in os.walk(self.root):
            self._snap_dir(dirpath)
            for name in files:
                p = os.path.join(dirpath, name)
                with open(p, "rb") as f:
                    self.durable[os.fstat(f.fileno()).st_ino] = f.read()
        self._snap_dir(os.path.dirname(self.root))

    def _snap_dir(self, path: str) -> None:
        path = os.path.abspath(path)
        self.names[path] = {n: os.stat(os.path.join(path, n)).st_ino for n in os.listdir(path)}

    def crash_states(self, rng: random.Random, count: int) -> Iterator[dict[str, bytes | None]]:
        """``count`` possible disk states after the power failure, as {path relative to root:
        content, or None for a directory}. The first is the strict one: only what was fsynced."""
        for k in range(count):
            yield self._state(rng if k else None)

    def _state(self, rng: random.Random | None) -> dict[str, bytes | None]:
        out: dict[str, bytes | None] = {}
        parent = os.path.dirname(self.root)
        top = self.names.get(parent, {})
        if os.path.basename(self.root) not in top:
            return out  # the log directory's own name was never made durable
        self._collect(self.root, "", out, rng)
        return out

    def _collect(self, path: str, rel: str, out: dict[str, bytes | None], rng: random.Random | None) -> None:
        if rel:
            out[rel] = None
        for name, ino in sorted(self._names_after(path, rng).items()):
            child = os.path.join(path, name)
            child_rel = f"{rel}/{name}" if rel else name
            if ino in self.durable or not os.path.isdir(child):
                out[child_rel] = self._content(ino, child, rng)
            else:
                self._collect(child, child_rel, out, rng)

    def _names_after(self, path: str, rng: random.Random | None) -> dict[str, int]:
        """The names of directory ``path`` after the power failure: those at its last fsync in
        the strict state; otherwise each name created, removed or renamed since then is, on its
        own, as it was at that fsync or as it is now (assumption 2: before the directory's fsync
        each change may be undone independently)."""
        durable = self.names.get(path, {})
        if rng is None:
            return dict(durable)
        try:
            current = {n: os.stat(os.path.join(path, n)).st_ino for n in os.listdir(path)}
        except FileNotFoundError:
            current = {}
        out: dict[str, int] = {}
        for name in sorted(durable.keys() | current.keys()):
            old, new = durable.get(name), current.get(name)
            chosen = old if old == new or rng.random() < 0.5 else new
            if chosen is not None:
                out[name] = chosen
        return out

    def _content(self, ino: int, path: str, rng: random.Random | None) -> bytes:
        durable = self.durable.get(ino, b"")
        if rng is None:
            return durable
        try:
            with open(path, "rb") as f:
                if os.fstat(f.fileno()).st_ino != ino:
                    return durable
                current = f.read()
        except (FileNotFoundError, IsADirectoryError):
            return durable
        if current == durable:
            return durable
        choice = rng.random()
        if len(current) == len(durable):  # changed in place: any mix of old and new sectors
            return _mix_sectors(durable, current, rng)
        if current.startswith(durable) and choice < 0.5:  # a torn append: a prefix of the new bytes
            return current[: rng.randrange(len(durable), len(current) + 1)]
        if choice < 0.7:  # the size grew, the data never came: zeros
            return durable + bytes(rng.randrange(0, max(1, len(current) - len(durable)) + 1))
        return durable

    # --- counting, faults and the crash ----------------------------------------------------------
    def boot_id(self) -> bytes:
        return self._boot

    def _op(self, kind: str) -> None:
        if self.crashed:
            raise PowerLoss(kind)
        self.count += 1
        self.kinds.append(kind)
        if self.crash_at and self.count >= self.crash_at:
            self.crashed = True
            raise PowerLoss(kind)
        f = self.fault
        hit = f is not None and (self.count == f.at or (f.sticky and self.count > f.at))
        if hit and f is not None and (not f.ops or kind in f.ops):
            self.faults_raised += 1
            raise OSError(f.errno, os.strerror(f.errno))

    def open(self, path: str, flags: int, mode: int = 0o644) -> int:
        if flags & os.O_CREAT and not os.path.exists(path):
            self._op("open_create")
        elif self.crashed:
            raise PowerLoss("open")
        fd = super().open(path, flags, mode)
        self.fds.add(fd)
        return fd

    def close(self, fd: int) -> None:
        self.fds.discard(fd)
        super().close(fd)  # closing is not an I/O the disk sees; always allowed, even after the crash

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        if self.crashed:
            raise PowerLoss("pread")
        return super().pread(fd, size, offset)

    def write(self, fd: int, data: bytes) -> None:
        try:
            self._op("write")
        except OSError:
            if self.faults_raised == 1 and len(data) > 1:
                os.write(
                    fd, data[: len(data) // 2]
                )  # the first failure lands half-way, as a disk filling up does
            raise
        start = os.fstat(fd).st_size
        super().write(fd, data)
        self._redirtied(fd, start, start + len(data))

    def pwrite(self, fd: int, data: bytes, offset: int) -> None:
        self._op("pwrite")
        super().pwrite(fd, data, offset)
        self._redirtied(fd, offset, offset + len(data))

    def _redirtied(self, fd: int, start: int, end: int) -> None:
        """Bytes written again are dirty again: the next fsync writes them (fsyncgate model)."""
        ino = os.fstat(fd).st_ino
        kept = []
        for a, b in self.dropped.get(ino, []):
            kept += [(a, min(b, start))] if a < start else []
            kept += [(max(a, end), b)] if b > end else []
        if ino in self.dropped:
            self.dropped[ino] = [(a, b) for a, b in kept if a < b]

    def allocate(self, fd: int, offset: int, length: int) -> None:
        self._op("allocate")  # the new size is durable at the next fsync, like an append's
        super().allocate(fd, offset, length)

    def fsync(self, fd: int) -> None:
        try:
            self._op("fsync")
        except OSError:
            if self.fsyncgate:
                # The pages written since the last fsync (appended, or changed in place, as in
                # a preallocated segment) are the ones dropped.
                ino = os.fstat(fd).st_ino
                self.dropped.setdefault(ino, []).extend(
                    _changed_pages(self.durable.get(ino, b""), _read_fd(fd))
                )
            raise
        super().fsync(fd)
        ino = os.fstat(fd).st_ino
        content = _read_fd(fd)
        old = self.durable.get(ino, b"")
        for start, end in self.dropped.get(ino, []):
            end = min(end, len(content))
            if start < end:  # on disk these bytes stay what they were (zeros past the old end)
                content = content[:start] + old[start:end].ljust(end - start, b"\0") + content[end:]
        self.durable[ino] = content

    def fdatasync(self, fd: int) -> None:
        self.fsync(fd)  # the same promise for the data; metadata is not modelled beyond names

    def fsync_dir(self, path: str) -> None:
        self._op("fsync_dir")
        super().fsync_dir(path)
        self._snap_dir(path)

    def truncate(self, fd: int, size: int) -> None:
        self._op("truncate")
        super().truncate(fd, size)

    def rename(self, src: str, dst: str) -> None:
        self._op("rename")
        self._pin(dst)
        super().rename(src, dst)

    def link(self, src: str, dst: str) -> None:
        self._op("link")
        super().link(src, dst)

    def unlink(self, path: str) -> None:
        self._op("unlink")
        self._pin(path)
        super().unlink(path)

    def mkdir(self, path: str) -> None:
        self._op("mkdir")
        super().mkdir(path)

    def msync(self, mm: mmap.mmap) -> None:
        self._op("msync")  # durability is recorded by the fsync of the file that follows
        super().msync(mm)

    def map_shared(self, fd: int, size: int) -> mmap.mmap:
        if self.crashed:
            raise PowerLoss("mmap")
        return super().map_shared(fd, size)

    def lock_blocking(self, fd: int) -> None:
        if self.crashed:
            raise PowerLoss("lock")
        super().lock_blocking(fd)

    def lock(self, fd: int, timeout_s: float, idle: Callable[[], bool] | None = None) -> bool:
        if self.crashed:
            raise PowerLoss("lock")
        return super().lock(fd, timeout_s, idle)

    def unlock(self, fd: int) -> None:
        if fd not in self.fds:  # closed by release(): a dead process's threads (a hold's) do nothing
            return
        super().unlock(fd)  # unlocking is not an I/O the disk sees; always allowed, as close


PAGE_SIZE = 4096  # the unit of the page cache, whose dirty pages a failed fsync drops


def _read_fd(fd: int) -> bytes:
    """The whole content of the file open as ``fd`` (which may be write-only: read it through a
    second, read-only open of the same file)."""
    rfd = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.pread(rfd, os.fstat(rfd).st_size, 0)
    finally:
        os.close(rfd)


def covered_by_fsync(path: str, fd: int) -> int:
    """The bytes of file ``path`` (open as ``fd``) that an fsync starting now makes durable:
    its size, or for a segment the end of its valid records (not its size, which counts the
    zeros preallocated after them)."""
    data = _read_fd(fd)
    base = fmt.parse_segment_name(os.path.basename(path))
    if base is None or len(data) < fmt.SEGMENT_HEADER_SIZE:
        return len(data)
    return seg.parse(data, fmt.SEGMENT_HEADER_SIZE, base, 1 << 30, None).pos


def _changed_pages(old: bytes, new: bytes) -> list[tuple[int, int]]:
    """The byte ranges, page by page, where ``new`` differs from ``old`` (or runs past it)."""
    return [
        (i, min(i + PAGE_SIZE, len(new)))
        for i in range(0, len(new), PAGE_SIZE)
        if new[i : i + PAGE_SIZE] != old[i : i + PAGE_SIZE]
    ]


def _mix_sectors(old: bytes, new: bytes, rng: random.Random) -> bytes:
    """Each changed sector old or new, independently (half the time all new but one old)."""
    changed = [
        i for i in range(0, len(new), SECTOR_SIZE) if new[i : i + SECTOR_SIZE] != old[i : i + SECTOR_SIZE]
    ]
    if rng.random() < 0.5:
        keep_old = {rng.choice(changed)} if changed else set()
    else:
        keep_old = {i for i in changed if rng.random() < 0.5}
    out = bytearray(new)
    for i in keep_old:
        out[i : i + SECTOR_SIZE] = old[i : i + SECTOR_SIZE]
    return bytes(out)


def materialize(state: dict[str, bytes | None], target: str) -> None:
    """Write a crash state as a real directory at ``target`` (replacing whatever is there)."""
    if os.path.exists(target):
        shutil.rmtree(target)
    os.makedirs(target)
    for rel, content in sorted(state.items()):
        p = os.path.join(target, rel)
        if content is None:
            os.makedirs(p, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "wb") as f:
                f.write(content)
