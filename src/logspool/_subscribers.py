"""Subscribers: readers whose position is checkpointed under a name (JLog's ``cp.`` files).

A durable subscriber has a checkpoint file ``DIR/cp.<sha256 of its name>`` (docs/FORMAT.md §6.2)
holding the next lsn it reads, in one of two slots. ``commit`` overwrites the slot that does not
hold the last durable position (one ``pwrite``, then one ``fdatasync`` unless ``durable=False``),
so a crash or power cut during a commit leaves that position intact, and a reader takes the valid
slot with the newest generation. Delivery is at-least-once: whatever was handed out after the
last commit is handed out again. Names starting with ``~`` are transient (JLog): no checkpoint,
they start at the latest record and what is appended while they are away is not kept for them.

Concurrency: checkpoints may be read and written by any thread or process. Each commit is whole;
two processes committing the same subscriber at once race and the newer generation wins. One
``Subscriber`` object is used by one thread at a time, like any reader.
"""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass
from datetime import datetime

from . import _format as fmt
from . import limits
from ._format import Gap
from ._fs import FileSystem, replace_file
from ._reader import OnDataLoss, Position, Reader
from .errors import CorruptionError, DataLossError, PositionError, SubscriberNotFoundError
from .log._directory import list_segments

TRANSIENT_PREFIX = "~"
CHECKPOINT_FILE_MAX = 4096 + limits.SUBSCRIBER_NAME_SIZE_MAX


@dataclass(frozen=True, slots=True)
class SubscriberInfo:
    """A durable subscriber's checkpoint and how far behind the head it is."""

    name: str
    lsn: int  # the next lsn it reads (every lsn below it is committed as consumed)
    committed_ns: int  # when its checkpoint was last written
    created_ns: int
    records_behind: int  # lsns from its position to the head
    bytes_behind: int  # bytes of segment from its position to the head
    position_age_s: float  # how old the next record it would read is (0 when caught up)
    lost: int  # lsns below the earliest segment it had not read (removed by retention)

    @property
    def idle_s(self) -> float:
        """Seconds since its last commit."""
        return max(0.0, (time.time_ns() - self.committed_ns) / 1e9)


def check_name(name: object) -> str:
    """A valid subscriber name, or a ValueError/TypeError saying what is wrong with it."""
    if not isinstance(name, str):
        raise TypeError(f"a subscriber name must be a str, not {type(name).__name__}")
    if not name:
        raise ValueError("a subscriber name must not be empty")
    try:
        size = len(name.encode())
    except UnicodeEncodeError as err:
        raise ValueError(f"a subscriber name must be encodable as UTF-8: {err}") from err
    if size > limits.SUBSCRIBER_NAME_SIZE_MAX:
        raise ValueError(
            f"a subscriber name is at most {limits.SUBSCRIBER_NAME_SIZE_MAX} bytes of UTF-8, "
            f"this one is {size}"
        )
    return name


def is_transient(name: str) -> bool:
    return name.startswith(TRANSIENT_PREFIX)


class _Slots:
    """An open version-2 checkpoint file that commits write into in place."""

    __slots__ = ("fd", "generation", "image", "size", "stable")

    def __init__(self, fd: int, size: int, stable: int) -> None:
        self.fd = fd
        self.size = size  # of one slot
        self.stable = stable  # the slot holding the newest position known durable: never overwritten
        self.image = b""  # the file's bytes after our last commit: if unchanged, no decoding
        self.generation = 0  # the newest generation in ``image``


class Checkpoints:
    """The checkpoint files of one log directory. ``close()`` closes the files kept open for
    commits (a context manager too)."""

    def __init__(self, path: str, fs: FileSystem, size_max: int) -> None:
        self.path = path
        self.fs = fs
        self.size_max = size_max
        self._slots: dict[str, _Slots] = {}

    def __enter__(self) -> Checkpoints:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for slots in self._slots.values():
            self.fs.close(slots.fd)
        self._slots.clear()

    def _file(self, name: str) -> str:
        return os.path.join(self.path, fmt.checkpoint_name(name))

    def read(self, name: str) -> fmt.Checkpoint | None:
        """The checkpoint of ``name``, or None if it has none. CorruptionError if damaged."""
        path = self._file(check_name(name))
        try:
            raw = self.fs.read_file(path, CHECKPOINT_FILE_MAX)
        except FileNotFoundError:
            return None
        except ValueError as err:
            raise CorruptionError(path, 0, str(err)) from err
        cp = fmt.decode_checkpoint(raw, path)
        if cp.name != name:
            raise CorruptionError(path, 40, f"checkpoint holds the name {cp.name!r}, not {name!r}")
        return cp

    def write(
        self, name: str, lsn: int, created_ns: int | None = None, *, durable: bool = True
    ) -> fmt.Checkpoint:
        """Set ``name``'s position to ``lsn``: durable on return, or with ``durable=False`` in
        the page cache only (it survives the process, not a power cut, which may bring back an
        earlier position, never one before the last durable commit)."""
        now = time.time_ns()
        slots = self._open_slots(name)
        if slots is not None:
            size = slots.size
            raw = self.fs.pread(slots.fd, 2 * size, 0)
            newest = slots.generation
            if raw != slots.image:  # written by another handle since (or the first commit)
                held = fmt.checkpoint_slots(raw, self._file(name))
                newest = max((cp.generation for cp in held if cp is not None and cp.name == name), default=0)
            if newest:
                created = created_ns if created_ns is not None else now
                cp = fmt.Checkpoint(name, lsn, now, created, newest + 1)
                target = 1 - slots.stable
                record = fmt.encode_checkpoint_slot(cp)
                self.fs.pwrite(slots.fd, record, target * size)
                at = target * size
                slots.image = raw[:at] + record + raw[at + len(record) :]
                slots.generation = cp.generation
                if durable:
                    self.fs.fdatasync(slots.fd)
                    slots.stable = target
                return cp
        # No checkpoint yet, a version-1 file or a damaged one: replace the whole file.
        cp = fmt.Checkpoint(name, lsn, now, created_ns if created_ns is not None else now, 1)
        replace_file(self.fs, self.path, fmt.checkpoint_name(name), fmt.encode_checkpoint(cp))
        return cp

    def _open_slots(self, name: str) -> _Slots | None:
        """The open version-2 file of ``name`` (opened now if need be), or None if there is none.

        On opening, one fdatasync makes what the file holds durable, so that the slot holding
        the newest position can be treated as stable from then on."""
        slots = self._slots.get(name)
        if slots is not None:
            if os.fstat(slots.fd).st_nlink > 0:
                return slots
            del self._slots[name]  # removed, or replaced by a whole new file: open the new one
            self.fs.close(slots.fd)
        size = fmt.checkpoint_slot_size(name)
        try:
            fd = self.fs.open(self._file(name), os.O_RDWR)
        except FileNotFoundError:
            return None
        try:
            held: list[fmt.Checkpoint | None] = [None, None]
            if self.fs.size(fd) == 2 * size:
                held = fmt.checkpoint_slots(self.fs.pread(fd, 2 * size, 0), self._file(name))
            if not any(cp is not None and cp.name == name for cp in held):
                self.fs.close(fd)  # a version-1 file, or damaged
                return None
            self.fs.fdatasync(fd)
        except BaseException:
            self.fs.close(fd)
            raise
        gens = [-1 if cp is None else cp.generation for cp in held]
        slots = self._slots[name] = _Slots(fd, size, gens.index(max(gens)))
        return slots

    def remove(self, name: str) -> None:
        try:
            self.fs.unlink(self._file(check_name(name)))
        except FileNotFoundError:
            raise SubscriberNotFoundError(self.path, name) from None
        self.fs.fsync_dir(self.path)  # without this the removal can be undone by a power failure

    def all(self, *, floor: bool = False) -> list[fmt.Checkpoint]:
        """Every durable subscriber's checkpoint, by name. CorruptionError if one is damaged.

        ``floor``: each position is the lowest its file can hold after a power cut: the lower of
        the two slots (the slot not written last holds the last durable commit, and a commit
        made with ``durable=False`` may be undone). Retention removes segments on these."""
        names = [n for n in self.fs.listdir(self.path) if fmt.is_checkpoint_name(n)]
        if len(names) > limits.SUBSCRIBER_COUNT_MAX:
            raise CorruptionError(self.path, 0, f"{len(names)} checkpoint files, more than the limit")
        out = []
        for file_name in names:
            path = os.path.join(self.path, file_name)
            try:
                raw = self.fs.read_file(path, CHECKPOINT_FILE_MAX)
            except FileNotFoundError:
                continue  # removed while we listed
            except ValueError as err:
                raise CorruptionError(path, 0, str(err)) from err
            cp = fmt.decode_checkpoint(raw, path)
            if fmt.checkpoint_name(cp.name) != file_name:
                raise CorruptionError(path, 40, f"checkpoint of {cp.name!r} stored under the wrong name")
            if floor and cp.generation:
                lowest = min(held.lsn for held in fmt.checkpoint_slots(raw, path) if held is not None)
                cp = dataclasses.replace(cp, lsn=lowest)
            out.append(cp)
        return sorted(out, key=lambda c: c.name)

    def resolve(self, start: Position, since: datetime | float | int | None) -> int:
        """The lsn a subscriber starting at ``start`` (or at time ``since``) reads first."""
        reader = Reader(self.path, self.fs, self.size_max, start=start, since=since)
        try:
            if isinstance(start, int) and since is None:
                head = Reader(self.path, self.fs, self.size_max, start="latest")
                head.close()
                if start > head.position:
                    bases = list_segments(self.fs, self.path)
                    raise PositionError(self.path, start, bases[0] if bases else 0, head.position)
            if since is None:
                return reader.position
            rec = reader.next(timeout=0)
            return rec.lsn if rec is not None else reader.position
        finally:
            reader.close()


class Subscriber(Reader):
    """A reader whose position is kept under a name. See the module docstring.

    ``commit()`` makes the current position durable; with ``auto_commit=True`` the position is
    committed each time every record handed out so far has been consumed and more are read, and
    on ``close()`` (Kafka's commit-on-poll: a record counts as processed once the next is asked).
    """

    def __init__(
        self,
        checkpoints: Checkpoints,
        name: str,
        *,
        start: Position,
        since: datetime | float | int | None,
        auto_commit: bool,
        on_data_loss: OnDataLoss,
    ) -> None:
        self.name = check_name(name)
        self.transient = is_transient(name)
        self._checkpoints = checkpoints
        self._auto_commit = auto_commit
        self.committed_lsn: int | None = None
        cp = None if self.transient else checkpoints.read(name)
        first_gap = None
        if cp is not None:
            since = None
            start = cp.lsn
            self.committed_lsn = cp.lsn
            self._created_ns = cp.created_ns
            bases = list_segments(checkpoints.fs, checkpoints.path)
            if bases and cp.lsn < bases[0]:
                if on_data_loss == "fail":
                    raise DataLossError(checkpoints.path, name, cp.lsn, bases[0])
                first_gap = (cp.lsn, bases[0])
                start = "earliest"
        super().__init__(
            checkpoints.path,
            checkpoints.fs,
            checkpoints.size_max,
            start=start,
            since=since,
            on_data_loss=on_data_loss,
            name=name,
        )
        if first_gap is not None:
            self.gaps.append(Gap(first_gap[0], first_gap[1], "removed by retention before it was read"))
        # A durable subscriber's position is an lsn it owns from its creation on (committed at
        # once below), not "whatever is earliest": records removed from there on before it read
        # them are lost to it, with DataLossError or a listed gap.
        self._follow_earliest = self.transient and self._follow_earliest
        if cp is None and not self.transient:
            # A new durable subscriber: its start is made durable now, so that what is appended
            # from here on is kept for it even before its first commit.
            self._created_ns = time.time_ns()
            self.commit(self.position)

    def commit(self, lsn: int | None = None, *, durable: bool = True) -> None:
        """Make ``lsn`` (default: the current position) the position of this subscriber.

        Durability: returns after the checkpoint is fsynced (one ``fdatasync``). With
        ``durable=False`` it is written to the page cache only: it survives the death of the
        process but a power cut may bring back any earlier position since the last durable
        commit (never one before it), so those records are delivered again.
        A transient subscriber has nothing to commit: this does nothing.
        """
        if self.transient:
            return
        if lsn is None:
            lsn = self.position
        elif isinstance(lsn, bool) or not isinstance(lsn, int) or lsn < 0:
            raise ValueError(f"a commit lsn must be an int >= 0, not {lsn!r}")
        self._checkpoints.write(self.name, lsn, self._created_ns, durable=durable)
        self.committed_lsn = lsn

    def _before_fill(self) -> None:
        if self._auto_commit and self.position != self.committed_lsn:
            self.commit()

    def seek(self, start: Position) -> None:
        """Move to an lsn, "earliest" or "latest"; ``commit()`` makes it durable."""
        super().seek(start)
        self._follow_earliest = self.transient and self._follow_earliest

    def close(self) -> None:
        try:
            if self._auto_commit and not self._closed and self.position != self.committed_lsn:
                self.commit()
        finally:
            self._checkpoints.close()
            super().close()


def subscriber_info(checkpoints: Checkpoints, cp: fmt.Checkpoint, first: int, head: int) -> SubscriberInfo:
    """How far ``cp`` is behind ``head`` (the next lsn), in records, bytes and age."""
    fs, path = checkpoints.fs, checkpoints.path
    lost = max(0, first - cp.lsn)
    lsn = max(cp.lsn, first)
    bytes_behind = 0
    age_s = 0.0
    if lsn < head:
        rec, offset = None, None
        try:
            reader = Reader(path, fs, checkpoints.size_max, start=lsn)
        except PositionError:
            pass  # removed since we looked: nothing behind in bytes we can see
        else:
            try:
                where = reader.locate()
                offset = where[1] if where is not None else None
                rec = reader.next(timeout=0)
            finally:
                reader.close()
        if rec is not None:
            age_s = max(0.0, (time.time_ns() - rec.timestamp) / 1e9)
        bases = list_segments(fs, path)
        for base in bases:
            try:
                size = os.stat(os.path.join(path, fmt.segment_name(base))).st_size
            except FileNotFoundError:
                continue
            nxt = [b for b in bases if b > base]
            if nxt and nxt[0] <= lsn:
                continue  # wholly before the position
            if base <= lsn and offset is not None:
                bytes_behind += max(0, size - offset)
            else:
                bytes_behind += size
    return SubscriberInfo(
        name=cp.name,
        lsn=cp.lsn,
        committed_ns=cp.committed_ns,
        created_ns=cp.created_ns,
        records_behind=max(0, head - lsn),
        bytes_behind=bytes_behind,
        position_age_s=age_s,
        lost=lost,
    )
