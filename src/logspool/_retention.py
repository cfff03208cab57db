"""Retention: which sealed segments to delete, and deleting them safely.

Policies combine as "any of": a segment is deleted when at least one policy wants it gone, and
only from the front of the log (lsns stay contiguous from the earliest segment on). The active
(newest) segment is never deleted. A reader in another process that has a deleted segment open
goes on reading it (the inode lives until its last descriptor closes); a reader that had not
reached it gets ``DataLossError`` or, if it asked, skips to the earliest record and reports the gap.

The policy is stored in ``DIR/retention`` (docs/FORMAT.md §6.3), so every writer applies the same
one after each rotation, and ``logspool info`` shows it.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any

from . import _format as fmt
from . import limits
from ._fs import FileSystem, replace_file
from ._subscribers import Checkpoints
from .errors import CorruptionError
from .log._directory import list_segments

CONSUMED = "consumed by every durable subscriber"
AGE = "older than the lifetime"
SIZE = "over the size bound"


@dataclass(frozen=True, slots=True)
class Retention:
    """A retention policy. Every field is optional; a segment goes if any one wants it gone.

    consumed: delete segments every durable subscriber has passed (with no durable subscriber,
        nothing counts as consumed: nobody has read it).
    age_max_s: delete segments whose newest record is older than this (PersistentQueue's lifetime).
    size_max: delete the oldest segments while the log is larger than this many bytes.
    subscriber_idle_max_s: first expire (remove) durable subscribers that have not committed for
        this long, so that a dead subscriber does not pin the disk for ever.
    """

    consumed: bool = False
    age_max_s: float | None = None
    size_max: int | None = None
    subscriber_idle_max_s: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.consumed, bool):
            raise TypeError(f"consumed must be True or False, not {self.consumed!r}")
        for name in ("age_max_s", "subscriber_idle_max_s"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value <= 0
            ):
                raise ValueError(f"{name} must be a positive number of seconds, not {value!r}")
        size = self.size_max
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size <= 0):
            raise ValueError(f"size_max must be a positive number of bytes, not {size!r}")

    @property
    def empty(self) -> bool:
        return (
            not self.consumed
            and self.age_max_s is None
            and self.size_max is None
            and (self.subscriber_idle_max_s is None)
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "consumed": self.consumed,
            "age_max_s": self.age_max_s,
            "size_max": self.size_max,
            "subscriber_idle_max_s": self.subscriber_idle_max_s,
        }

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Retention:
        return cls(
            consumed=bool(body.get("consumed", False)),
            age_max_s=body.get("age_max_s"),
            size_max=body.get("size_max"),
            subscriber_idle_max_s=body.get("subscriber_idle_max_s"),
        )


@dataclass(frozen=True, slots=True)
class Removal:
    base_lsn: int
    next_lsn: int  # the first lsn after this segment
    size: int
    reason: str


@dataclass(frozen=True, slots=True)
class RetentionReport:
    """What a retention pass removed (or, with dry_run, would remove)."""

    dry_run: bool
    removed: tuple[Removal, ...] = ()
    expired_subscribers: tuple[str, ...] = ()
    pinned_by: tuple[str, ...] = field(default=())  # subscribers holding back "consumed"

    @property
    def size_freed(self) -> int:
        return sum(r.size for r in self.removed)


def read_policy(fs: FileSystem, path: str) -> Retention | None:
    """The stored policy of the log at ``path``, or None if it has none."""
    file = os.path.join(path, fmt.RETENTION_NAME)
    try:
        raw = fs.read_file(file, limits.META_SIZE_MAX + 64)
    except FileNotFoundError:
        return None
    except ValueError as err:
        raise CorruptionError(file, 0, str(err)) from err
    _version, body = fmt.decode_json_file(fmt.RETENTION_MAGIC, raw, file, "retention")
    try:
        return Retention.from_json(body)
    except (TypeError, ValueError) as err:
        raise CorruptionError(file, fmt.META_HEADER_SIZE, f"retention policy is not valid: {err}") from err


def write_policy(fs: FileSystem, path: str, policy: Retention | None) -> None:
    """Store ``policy`` (None: remove it). Atomic and durable."""
    if policy is None or policy.empty:
        try:
            fs.unlink(os.path.join(path, fmt.RETENTION_NAME))
        except FileNotFoundError:
            return
        fs.fsync_dir(path)  # without this the removal can be undone by a power failure
        return
    data = fmt.encode_json_file(fmt.RETENTION_MAGIC, fmt.VERSION_1, policy.to_json())
    replace_file(fs, path, fmt.RETENTION_NAME, data)


def _segment_end_ns(fs: FileSystem, path: str, next_base: int) -> int | None:
    """When the segment before ``next_base`` ended: the creation time of the next segment, which
    rotation sets to at least the newest timestamp before it."""
    file = os.path.join(path, fmt.segment_name(next_base))
    try:
        fd = fs.open(file, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        head = fs.pread(fd, fmt.SEGMENT_HEADER_SIZE, 0)
    finally:
        fs.close(fd)
    try:
        return fmt.decode_segment_header(head, file).created_ns
    except CorruptionError:
        return None  # being created: not ended long ago


def enforce(
    fs: FileSystem,
    path: str,
    checkpoints: Checkpoints,
    policy: Retention,
    *,
    dry_run: bool = False,
    now_ns: int | None = None,
) -> RetentionReport:
    """Apply ``policy`` to the log at ``path`` now. Any thread or process, at any time: several
    passes at once each delete what they find still there. Durability: returns after the
    removals' directory entries are fsynced."""
    now = time.time_ns() if now_ns is None else now_ns
    expired: list[str] = []
    cps = checkpoints.all(floor=True)  # positions a power cut cannot take back (docs/FORMAT.md §6.2)
    if policy.subscriber_idle_max_s is not None:
        idle_ns = int(policy.subscriber_idle_max_s * 1e9)
        for cp in cps:
            if now - cp.committed_ns > idle_ns:
                expired.append(cp.name)
        cps = [cp for cp in cps if cp.name not in expired]
    bases = list_segments(fs, path)
    sizes = []
    for base in bases:
        try:
            sizes.append(os.stat(os.path.join(path, fmt.segment_name(base))).st_size)
        except FileNotFoundError:
            sizes.append(0)  # removed by a concurrent pass
    total = sum(sizes)
    consumed_below = min((cp.lsn for cp in cps), default=None) if policy.consumed else None
    removals: list[Removal] = []
    for i in range(len(bases) - 1):  # never the newest segment
        base, next_base, size = bases[i], bases[i + 1], sizes[i]
        reason = None
        if consumed_below is not None and next_base <= consumed_below:
            reason = CONSUMED
        elif policy.age_max_s is not None:
            end_ns = _segment_end_ns(fs, path, next_base)
            if end_ns is not None and now - end_ns > policy.age_max_s * 1e9:
                reason = AGE
        if reason is None and policy.size_max is not None and total > policy.size_max:
            reason = SIZE
        if reason is None:
            break  # only a prefix goes: the lsns left stay contiguous
        removals.append(Removal(base, next_base, size, reason))
        total -= size
    pinned: tuple[str, ...] = ()
    if policy.consumed and removals == [] and cps and len(bases) > 1:
        pinned = tuple(cp.name for cp in cps if cp.lsn < bases[1])
    if not dry_run:
        for name in expired:
            with contextlib.suppress(KeyError):  # expired by a concurrent pass
                checkpoints.remove(name)
        for removal in removals:
            for file in (fmt.segment_name(removal.base_lsn), fmt.index_name(removal.base_lsn)):
                # Segment first: a crash between leaves an index without its segment, which
                # readers ignore and repair removes. A reader with the segment open reads on.
                with contextlib.suppress(FileNotFoundError):  # a concurrent pass removed it
                    fs.unlink(os.path.join(path, file))
                if file.endswith(fmt.SEGMENT_SUFFIX):
                    # Each segment's removal is durable before the next one's: a power failure
                    # can only bring back a suffix of the removed segments, so what is left is
                    # always contiguous (a hole in the middle would be lost records).
                    fs.fsync_dir(path)
        if removals:
            fs.fsync_dir(path)  # (the last index's removal)
    return RetentionReport(dry_run, tuple(removals), tuple(expired), pinned)
