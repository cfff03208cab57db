"""repair: bring a damaged log back to a state every reader and writer accepts, and say what it did.

A little over 600 lines: one procedure (FORMAT.md §9.1: find, quarantine, seal, report), each step
of which needs the ones before; split, the steps would pass their whole state between modules.

What it fixes (docs/FORMAT.md §9.1), each reported as a RepairAction:

- a torn tail of the newest segment (a crash state): cut, as a writer's recovery would;
- a damaged record anywhere (corruption): its bytes are copied to ``DIR/quarantine/`` and a gap
  record (FORMAT.md §4.5) is written over exactly those bytes, so readers skip the lost lsns
  with a reported gap and every good record after them stays where it was;
- damage reaching the end of a segment: the rest is quarantined, the segment cut, and a gap
  record carries the lsns on to the next segment;
- a damaged segment header: rewritten from the file name; a segment missing between two others:
  recreated as a single gap record;
- index files missing, damaged or stale: rebuilt; index files of removed segments: removed;
- checkpoints before the earliest record (JLog's repair) or past the head: moved there;
  damaged checkpoints: quarantined;
- temporary files left by processes that died: removed.

Repair holds the writer lock throughout, so appends wait for it. It edits segments in place
(never by replacing the file), because writers in other processes keep the newest segment open.
Every change is made crash-safe by order: the quarantine file is durable before the bytes it
saves are overwritten, and a repair interrupted at any point is finished by running it again
(a quarantine file that exists already is kept: it holds the original bytes).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from . import _format as fmt
from . import _quarantine as quarantine
from . import _segment as seg
from . import limits
from ._fs import REAL, FileSystem, process_alive, replace_file, temp_owner
from ._quarantine import QUARANTINE_DIR
from .errors import CorruptionError, LockedError, LogspoolError, NotALogError
from .log import _sync
from .log._directory import list_segments
from .log._sync import proven_offset, read_mark

TRUNCATE_TAIL = "truncate-tail"
QUARANTINE = "quarantine"
REWRITE_HEADER = "rewrite-header"
FILL_MISSING = "fill-missing-segment"
SEAL = "seal"
REBUILD_INDEX = "rebuild-index"
REMOVE_ORPHAN_INDEX = "remove-orphan-index"
MOVE_CHECKPOINT = "move-checkpoint"
QUARANTINE_CHECKPOINT = "quarantine-checkpoint"
REMOVE_TEMP = "remove-temp"


@dataclass(frozen=True, slots=True)
class RepairAction:
    kind: str  # one of the constants above
    path: str  # the file acted on
    detail: str  # what was found and done, for a person

    def __str__(self) -> str:
        return f"{self.kind}: {self.path}: {self.detail}"


@dataclass(slots=True)
class RepairReport:
    path: str
    dry_run: bool
    actions: list[RepairAction] = field(default_factory=list)
    # Damage found and left as it is, each with the reason repair could not fix it.
    unrepaired: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True if the log is whole after the repair (or would be, for a dry run)."""
        return not self.unrepaired


def repair(
    path: str | os.PathLike[str],
    *,
    dry_run: bool = False,
    lock_timeout_s: float = limits.LOCK_TIMEOUT_S_DEFAULT,
    fs: FileSystem | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> RepairReport:
    """Repair the log at ``path`` (see the module docstring); with ``dry_run``, only report what
    would be done. Raises NotALogError or CorruptionError if the meta file is missing or damaged
    (its settings cannot be guessed), LockedError if the writer lock is not free in time.
    ``progress(done, total)`` is called as segments are walked (for a progress line)."""
    fs = fs or REAL
    root = os.fspath(path)
    meta_path = os.path.join(root, fmt.META_NAME)
    try:
        raw = fs.read_file(meta_path, limits.META_SIZE_MAX + 64)
    except FileNotFoundError:
        raise NotALogError(root, "no meta file: repair needs the log's settings") from None
    except ValueError as err:
        raise CorruptionError(meta_path, 0, str(err)) from err
    meta = fmt.decode_meta(raw, meta_path)
    report = RepairReport(root, dry_run)
    lock_fd = fs.open(os.path.join(root, fmt.LOCK_NAME), os.O_RDONLY | os.O_CREAT)
    try:
        if not fs.lock(lock_fd, lock_timeout_s):
            raise LockedError(root, lock_timeout_s)
        try:
            _Repair(root, fs, meta, report, progress).run()
        finally:
            fs.unlock(lock_fd)
    finally:
        fs.close(lock_fd)
    return report


class _Repair:
    def __init__(
        self,
        root: str,
        fs: FileSystem,
        meta: fmt.Meta,
        report: RepairReport,
        progress: Callable[[int, int], None] | None = None,
    ) -> None:
        self.progress = progress
        self.root = root
        self.fs = fs
        self.meta = meta
        self.report = report
        self.dry = report.dry_run
        self.size_max = meta.record_size_max
        # New headers and gap records: a gap needs version 2; compressed logs are version 2 anyway.
        self.version = fmt.VERSION_1 if meta.compression is None else fmt.VERSION_2
        self.names_changed = False  # files created or removed in DIR: fsync it at the end
        # What the writers' sync mark proves fsynced, and whether the newest segment was written
        # in this boot: read before repair forgets the boot (FORMAT.md §9).
        self.mark, boot = read_mark(fs, root)
        self.same_boot = bool(boot) and boot == fs.boot_id()

    def act(self, kind: str, path: str, detail: str) -> None:
        self.report.actions.append(RepairAction(kind, path, detail))

    def run(self) -> None:
        if not self.dry:
            self.forget_boot()  # first: a repair interrupted after a change is not trusted either
        self.remove_temps()
        bases = list_segments(self.fs, self.root)
        first = head = 0
        if bases:
            first = bases[0]
            head = self.segments(bases)
        self.remove_orphan_indexes()
        self.checkpoints(first, head)
        if self.names_changed and not self.dry:
            self.fs.fsync_dir(self.root)

    # --- temporary files -----------------------------------------------------------------------
    def remove_temps(self) -> None:
        """``.<name>.<pid>.<hex>.tmp`` (replace_file) and ``.meta.<pid>.<hex>`` (creation) files
        whose process is gone: a crash before their rename left them."""
        for name in sorted(self.fs.listdir(self.root)):
            pid = temp_owner(name)
            if pid is None or process_alive(pid):
                continue
            path = os.path.join(self.root, name)
            if not self.dry:
                try:
                    self.fs.unlink(path)
                except FileNotFoundError:
                    continue
                self.names_changed = True
            self.act(REMOVE_TEMP, path, f"temporary file of process {pid}, which is gone")

    # --- segments ------------------------------------------------------------------------------
    def segments(self, bases: list[int]) -> int:
        """Walk every segment in order; returns the head (the lsn the next append gets)."""
        expected = bases[0]
        last_ts = 0
        seen = False  # a segment was walked: a later one starting past its end means a missing one
        for n, base in enumerate(bases):
            if self.progress is not None:
                self.progress(n, len(bases))
            newest = n == len(bases) - 1
            if seen and base > expected:
                self.fill_missing(expected, base, last_ts)
            elif seen and base < expected:
                self.report.unrepaired.append(
                    f"{self.seg_path(base)}: starts at lsn {base}, but the segment before it ends at lsn "
                    f"{expected}: overlapping segments (a restored copy?); repair leaves them for a person"
                )
            next_base = None if newest else bases[n + 1]
            try:
                expected, last_ts = self.segment(base, next_base, last_ts)
            except FileNotFoundError:
                if seen or newest:
                    raise
                expected = bases[n + 1]  # retention removed it while we worked: a prefix, not damage
                continue
            seen = True
        return expected

    def seg_path(self, base: int) -> str:
        return os.path.join(self.root, fmt.segment_name(base))

    def fill_missing(self, first: int, next_base: int, ts: int) -> None:
        """Segment ``first`` is missing and ``next_base`` follows: recreate it as one gap record."""
        path = self.seg_path(first)
        note = "segment file missing"
        gap = fmt.encode_gap(first, next_base, ts, note, fmt.RECORD_OVERHEAD + 8 + len(note))
        seal = fmt.encode_record(next_base, ts, next_base - 1, b"", fmt.FLAG_SEAL)
        data = fmt.encode_segment_header(first, ts, fmt.VERSION_2) + gap + seal
        if not self.dry:
            fd = self.fs.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL)
            try:
                self.fs.write(fd, data)
                self.fs.fsync(fd)
            finally:
                self.fs.close(fd)
            self.names_changed = True
            self.write_index(first, data)
        self.act(FILL_MISSING, path, f"lsns {first}..{next_base - 1} lost with it: readers skip them")

    def segment(self, base: int, next_base: int | None, last_ts: int) -> tuple[int, int]:
        """Check and fix one segment; returns (the lsn after it, the last timestamp in it)."""
        path = self.seg_path(base)
        fs = self.fs
        fd = fs.open(path, os.O_RDONLY if self.dry else os.O_RDWR)
        try:
            seg_file = _SegmentFile(self, fd, path, base, fs.pread(fd, fs.size(fd), 0))
            lsn, last_ts = seg_file.fix(next_base, last_ts)
            if seg_file.changed and not self.dry:
                fs.fsync(fd)
            self.index(base, seg_file.data)
            return lsn, last_ts
        finally:
            fs.close(fd)

    def quarantine(self, base: int, offset: int, data: bytes) -> str:
        """Save ``data`` (from segment ``base`` at ``offset``) for an operator, durably, before it
        is overwritten. Returns the file's name relative to DIR. A file of that name that exists
        already is kept: an interrupted repair saved the original bytes there."""
        return quarantine.save(self.fs, self.root, base, offset, data, dry=self.dry)

    def lower_sync_mark(self, base: int, offset: int) -> None:
        """Before cutting segment ``base`` at ``offset``: the writers' sync mark must not claim
        bytes written there later as durable (docs/FORMAT.md §8.1)."""
        _sync.lower_mark(self.fs, self.root, base, offset)

    def forget_boot(self) -> None:
        """Before changing segments: the next writer recovers the newest segment whole, not from
        its last index entry, and no writer trusts the tail hint (docs/FORMAT.md §8.1)."""
        _sync.forget_boot(self.fs, self.root)

    # --- indexes -------------------------------------------------------------------------------
    def index(self, base: int, data: bytes) -> None:
        """Rebuild the segment's index if it is not exactly what its records imply (§5.2)."""
        ipath = os.path.join(self.root, fmt.index_name(base))
        expected = seg.index_bytes(data, len(data), base, self.size_max, self.meta.index_interval)
        try:
            current = self.fs.read_file(ipath, limits.SEGMENT_SIZE_LIMIT)
            why = "damaged or stale"
        except FileNotFoundError:
            current, why = None, "missing"
        if current == expected:
            return
        if not self.dry:
            self.write_index(base, data)
        self.act(REBUILD_INDEX, ipath, f"index {why}: rebuilt from the segment's records")

    def write_index(self, base: int, data: bytes) -> None:
        """In place (writers keep the newest segment's index open): cut, write, fsync."""
        ipath = os.path.join(self.root, fmt.index_name(base))
        expected = seg.index_bytes(data, len(data), base, self.size_max, self.meta.index_interval)
        created = not self.fs.exists(ipath)
        fd = self.fs.open(ipath, os.O_RDWR | os.O_CREAT)
        try:
            self.fs.truncate(fd, 0)
            self.fs.pwrite(fd, expected, 0)
            self.fs.fsync(fd)
        finally:
            self.fs.close(fd)
        self.names_changed |= created

    def remove_orphan_indexes(self) -> None:
        """Index files whose segment is gone (a crash between retention's two unlinks)."""
        names = set(self.fs.listdir(self.root))
        for name in sorted(names):
            stem, dot, suffix = name.partition(".")
            if dot + suffix != fmt.INDEX_SUFFIX or fmt.parse_segment_name(stem + fmt.SEGMENT_SUFFIX) is None:
                continue
            if stem + fmt.SEGMENT_SUFFIX in names:
                continue
            path = os.path.join(self.root, name)
            if not self.dry:
                with contextlib.suppress(FileNotFoundError):  # retention's second unlink came first
                    self.fs.unlink(path)
                self.names_changed = True
            self.act(REMOVE_ORPHAN_INDEX, path, "index of a segment that no longer exists")

    # --- checkpoints ---------------------------------------------------------------------------
    def checkpoints(self, first: int, head: int) -> None:
        for name in sorted(n for n in self.fs.listdir(self.root) if fmt.is_checkpoint_name(n)):
            path = os.path.join(self.root, name)
            try:
                raw = self.fs.read_file(path, 4096 + limits.SUBSCRIBER_NAME_SIZE_MAX)
                cp = fmt.decode_checkpoint(raw, path)
            except FileNotFoundError:
                continue
            except (LogspoolError, ValueError) as err:
                self.move_aside(path, name, f"damaged ({err}); that subscriber must be added again")
                continue
            right = fmt.checkpoint_name(cp.name)
            if right != name:
                if self.fs.exists(os.path.join(self.root, right)):
                    self.move_aside(path, name, f"a second checkpoint of {cp.name!r} under the wrong name")
                    continue
                if not self.dry:
                    self.fs.rename(path, os.path.join(self.root, right))
                    self.names_changed = True
                self.act(MOVE_CHECKPOINT, path, f"checkpoint of {cp.name!r} renamed to {right}")
                path = os.path.join(self.root, right)
            if cp.lsn < first:
                self.move_checkpoint(
                    path,
                    cp,
                    first,
                    f"was at lsn {cp.lsn}, before the earliest record {first} "
                    f"({first - cp.lsn} records it had not read are gone)",
                )
            elif cp.lsn > head:
                self.move_checkpoint(path, cp, head, f"was at lsn {cp.lsn}, past the head {head}")

    def move_checkpoint(self, path: str, cp: fmt.Checkpoint, lsn: int, why: str) -> None:
        if not self.dry:
            moved = fmt.Checkpoint(cp.name, lsn, time.time_ns(), cp.created_ns, cp.generation + 1)
            replace_file(self.fs, self.root, os.path.basename(path), fmt.encode_checkpoint(moved))
        self.act(MOVE_CHECKPOINT, path, f"subscriber {cp.name!r} {why}: moved to lsn {lsn}")

    def move_aside(self, path: str, name: str, why: str) -> None:
        rel = f"{QUARANTINE_DIR}/{name}"
        if not self.dry:
            qdir = quarantine.quarantine_dir(self.fs, self.root)
            self.fs.rename(path, os.path.join(self.root, rel))
            self.fs.fsync_dir(qdir)
            self.names_changed = True
        self.act(QUARANTINE_CHECKPOINT, path, f"{why}: moved to {rel}")


class _SegmentFile:
    """One segment being repaired: its bytes in memory, kept equal to the file as it is edited."""

    def __init__(self, repair: _Repair, fd: int, path: str, base: int, data: bytes) -> None:
        self.r = repair
        self.fd = fd
        self.path = path
        self.base = base
        self.data = data
        self.changed = False
        self.version = fmt.VERSION_1
        self.created_ns = 0

    def write(self, offset: int, data: bytes) -> None:
        """Overwrite (or extend) the file at ``offset``."""
        if not self.r.dry:
            self.r.fs.pwrite(self.fd, data, offset)
        self.data = self.data[:offset] + data + self.data[offset + len(data) :]
        self.changed = True

    def cut(self, offset: int) -> None:
        if not self.r.dry:
            self.r.lower_sync_mark(self.base, offset)
            self.r.fs.truncate(self.fd, offset)
            self.r.lower_sync_mark(self.base, offset)  # again: see Log._cut_active
        self.data = self.data[:offset]
        self.changed = True

    def header(self, last_ts: int) -> None:
        """Check the header; rewrite it from the file name if it is damaged."""
        try:
            header = fmt.decode_segment_header(self.data, self.path)
            if header.base_lsn != self.base:
                raise CorruptionError(
                    self.path, 16, f"header base lsn {header.base_lsn}, name says {self.base}"
                )
            self.version, self.created_ns = header.version, header.created_ns
            return
        except CorruptionError as err:
            reason = err.reason
        old = self.data[: fmt.SEGMENT_HEADER_SIZE]
        first_ts = _first_timestamp(self.data, self.base, self.r.size_max)
        self.created_ns = min(first_ts, max(last_ts, 1)) if first_ts is not None else max(last_ts, 1)
        self.version = self.r.version
        if any(old):
            self.r.quarantine(self.base, 0, old)
        if len(self.data) < fmt.SEGMENT_HEADER_SIZE:
            self.data += bytes(fmt.SEGMENT_HEADER_SIZE - len(self.data))
        self.write(0, fmt.encode_segment_header(self.base, self.created_ns, self.version))
        self.r.act(
            REWRITE_HEADER, self.path, f"segment header damaged ({reason}): rewritten from the file name"
        )

    def fix(self, next_base: int | None, last_ts: int) -> tuple[int, int]:
        self.header(last_ts)
        last_ts = max(last_ts, self.created_ns)
        pos, lsn, durable_known = fmt.SEGMENT_HEADER_SIZE, self.base, 0
        wants_payloads = self.r.meta.compression is not None  # to check that frames decompress
        gaps: list[fmt.Gap] = []
        for _ in range(1 << 20):  # bounded: each turn ends the segment or replaces damage by a gap
            infos: list[seg.RecordInfo] = []
            out: list[fmt.Record] | None = [] if wants_payloads else None
            stop = seg.parse(self.data, pos, lsn, self.r.size_max, out, infos, 0, gaps)
            for info in infos:
                durable_known = max(durable_known, info.durable_lsn)
                last_ts = max(last_ts, info.timestamp)
            pos, lsn = stop.pos, stop.lsn
            if next_base is None and (
                stop.kind == seg.END or (stop.kind == seg.ZERO and seg.zeros_from(self.data, pos))
            ):
                self.lost_proven_tail(pos, lsn, last_ts)
                break
            if stop.kind == seg.END:
                if next_base is not None and lsn <= next_base:
                    if self.seal(pos, lsn, next_base, last_ts):
                        gaps.append(fmt.Gap(lsn, next_base, "segment cut short"))
                    lsn = next_base
                break
            if stop.kind == seg.SEAL:
                end = pos + fmt.RECORD_OVERHEAD
                extra = len(self.data) - end
                if extra > 0 and seg.zeros_from(self.data, end):
                    self.cut(end)  # preallocated space a crash left after the seal: no data
                    self.r.act(TRUNCATE_TAIL, self.path, f"cut {extra} zero bytes after the seal")
                elif extra > 0:
                    rel = self.r.quarantine(self.base, end, self.data[end:])
                    self.cut(end)
                    self.r.act(QUARANTINE, self.path, f"{extra} bytes after the seal moved to {rel}")
                break
            if next_base is None and stop.kind in (seg.INCOMPLETE, seg.ZERO, seg.TORN):
                try:
                    cut = seg.judge_damage(
                        self.path,
                        self.data,
                        stop,
                        durable_known,
                        self.r.size_max,
                        0,
                        proven_end=proven_offset(self.r.mark, self.base),
                        same_boot=self.r.same_boot,
                    )
                except CorruptionError:
                    pass  # proven acknowledged records are damaged: quarantine, below
                else:
                    self.cut_tail(cut, stop)
                    break
            # A gap record now stands at ``pos`` for lsn ``lsn``: parse on from there.
            if not self.quarantine(stop, next_base, durable_known, last_ts):
                break
        else:
            raise AssertionError(f"{self.path}: 2^20 damaged places replaced, and the segment goes on")
        if gaps and self.version < fmt.VERSION_2:
            # Gap records are version 2 (written now, or by a repair interrupted before this step).
            self.version = fmt.VERSION_2
            self.write(0, fmt.encode_segment_header(self.base, self.created_ns, self.version))
        return lsn, last_ts

    def seal(self, pos: int, lsn: int, next_base: int, ts: int) -> bool:
        """The segment ends at ``pos`` (lsn ``lsn``) without a seal, and segment ``next_base``
        follows: it was cut short (the seal is durable before the next segment is created, so no
        crash leaves this). Write a gap for the lsns lost, if any, and the seal. True if a gap
        was written."""
        data = b""
        lost = "no record lost"
        if lsn < next_base:
            note = "segment cut short"
            data = fmt.encode_gap(lsn, next_base, ts, note, fmt.RECORD_OVERHEAD + 8 + len(note))
            lost = f"lsns {lsn}..{next_base - 1} lost: a gap record for them"
        data += fmt.encode_record(next_base, ts, next_base - 1, b"", fmt.FLAG_SEAL)
        self.write(pos, data)
        self.r.act(
            SEAL, self.path, f"ends at offset {pos} without a seal, before segment {next_base} ({lost})"
        )
        return lsn < next_base

    def cut_tail(self, cut: int, stop: seg.Stop) -> None:
        """A tail never proven durable (a crash state): cut it, keeping any non-zero bytes aside."""
        tail = self.data[cut:]
        kept = ""
        if any(tail):
            kept = f"; its bytes are in {self.r.quarantine(self.base, cut, tail)}"
        self.cut(cut)
        self.r.act(
            TRUNCATE_TAIL,
            self.path,
            f"cut {len(tail)} bytes at offset {cut}: lsn {stop.lsn} was not proven durable "
            f"({stop.reason or stop.kind}){kept}",
        )

    def proven_end(self) -> int:
        """The offset below which the sync mark proves this segment fsynced (capped at the
        largest a segment may be)."""
        return min(proven_offset(self.r.mark, self.base), max(len(self.data), self.r.meta.segment_size_max))

    def lsns_bound(self, pos: int) -> int:
        """At least 1, and at least as many lsns as records could have stood from ``pos`` to the
        last non-zero byte or to what the sync mark proves, whichever is further."""
        end = max(len(self.data.rstrip(b"\0")), self.proven_end())
        return max(1, _lsns_in(end - pos))

    def lost_proven_tail(self, pos: int, lsn: int, ts: int) -> None:
        """The newest segment's records end at ``pos`` (the end of the file, or zeros to it), but
        the sync mark proves records fsynced past it: acknowledged records were cut off or zeroed.
        Write a gap record there for as many lsns as they could have taken, so that none of them
        is given to a new record (a reader may have seen them)."""
        proven = self.proven_end()
        if pos >= proven:
            return  # the end of the records, or preallocated space: nothing lost
        gap_to = lsn + _lsns_in(proven - pos)
        note = "proven records missing"
        gap = fmt.encode_gap(lsn, gap_to, ts, note, fmt.RECORD_OVERHEAD + 8 + len(note))
        self.write(pos, gap)
        if not self.r.dry:
            # The mark now proves the gap record's end: the lsns it stands for are accounted for.
            self.r.fs.fsync(self.fd)
            self.r.lower_sync_mark(self.base, pos + len(gap))
        self.r.act(
            QUARANTINE,
            self.path,
            f"the records end at offset {pos}, but the sync mark proves them fsynced to offset {proven}: "
            f"acknowledged records are gone; a gap record for lsns {lsn}..{gap_to - 1} (at most that many "
            "were lost) keeps their lsns from being given again",
        )

    def quarantine(self, stop: seg.Stop, next_base: int | None, durable_known: int, ts: int) -> bool:
        """Move the damaged bytes at ``stop`` aside and put a gap record for lsn ``stop.lsn`` in
        their place. True to parse on from ``stop.pos`` (a gap record was written, or an older
        segment was cut there and wants its seal), False if the newest segment now ends at
        ``stop.pos`` or the damage is left as it is."""
        pos, lsn = stop.pos, stop.lsn
        why = stop.reason or stop.kind
        resume = seg.find_resume(self.data, pos, lsn, self.r.size_max, limits.REPAIR_RESYNC_LSNS)
        if resume is not None:
            rpos, rlsn = resume
            size = rpos - pos
            if size < fmt.GAP_RECORD_SIZE_MIN + 4 and rlsn != lsn + 1:
                self.r.report.unrepaired.append(
                    f"{self.path}: offset {pos}: lsns {lsn}..{rlsn - 1} are missing but only {size} "
                    "bytes are damaged, too few for a gap record; repair leaves it"
                )
                return False
            rel = self.r.quarantine(self.base, pos, self.data[pos:rpos])
            self.write(pos, fmt.encode_gap(lsn, rlsn, ts, rel, size))
            self.r.act(
                QUARANTINE,
                self.path,
                f"lsns {lsn}..{rlsn - 1} ({size} bytes at offset {pos}: {why}) moved to {rel}; "
                "readers skip them, the records after them are kept",
            )
            return True
        # The damage reaches the end of the segment. In the newest one, no lsn a reader may have
        # seen is given again: the gap covers as many lsns as records could fill the bytes that
        # were ever there (the non-zero ones, and all the sync mark proves), 36 bytes at least each.
        gap_to = next_base if next_base is not None else max(durable_known, lsn + self.lsns_bound(pos))
        if next_base is not None and next_base < lsn:
            self.r.report.unrepaired.append(
                f"{self.path}: offset {pos}: damage, and the next segment starts at lsn {next_base}, "
                f"before {lsn}; repair leaves it"
            )
            return False
        rel = self.r.quarantine(self.base, pos, self.data[pos:])
        size = len(self.data) - pos
        self.cut(pos)
        if gap_to > lsn:
            self.write(pos, fmt.encode_gap(lsn, gap_to, ts, rel, fmt.RECORD_OVERHEAD + 8 + len(rel.encode())))
            lost = f"lsns {lsn}..{gap_to - 1}"
        else:
            lost = "no record"
        self.r.act(
            QUARANTINE,
            self.path,
            f"{size} bytes from offset {pos} to the end of the segment ({why}; {lost}) moved to {rel}",
        )
        # Parse on from ``pos``: past the gap, or (an older segment) at its new end, where the
        # seal naming the next segment is written in this same run (it once took a second run).
        return gap_to > lsn or next_base is not None


def _lsns_in(size: int) -> int:
    """The most records ``size`` bytes can hold (each is at least 36 bytes long)."""
    return -(-size // fmt.RECORD_OVERHEAD)


def _first_timestamp(data: bytes, base: int, size_max: int) -> int | None:
    """The timestamp of the segment's first record, if it is valid."""
    infos: list[seg.RecordInfo] = []
    end = fmt.SEGMENT_HEADER_SIZE + fmt.RECORD_OVERHEAD + size_max
    seg.parse(data[:end], fmt.SEGMENT_HEADER_SIZE, base, size_max, None, infos)
    return infos[0].timestamp if infos else None
