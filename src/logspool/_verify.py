"""verify: read a whole log and check everything that can be checked, while writers run.

Checked: segment headers; every record's checksum, lsn continuity within and across segments,
known flags; seals naming the next segment; timestamps never decreasing; index entries pointing
at the records they name. The newest segment may end in a record being written (or a torn tail
the next writer cuts): that is reported as a note, not as damage.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from . import _format as fmt
from . import _segment as seg
from ._fs import REAL, FileSystem
from ._reader import Reader
from .errors import CorruptionError, LogspoolError
from .log._directory import list_segments
from .log._sync import proven_offset, proven_text, read_mark

DAMAGE = "damage"
NOTE = "note"


@dataclass(frozen=True, slots=True)
class Problem:
    severity: str  # DAMAGE or NOTE
    path: str
    offset: int
    message: str

    def __str__(self) -> str:
        return f"{self.severity}: {self.path}: offset {self.offset}: {self.message}"


@dataclass(slots=True)
class VerifyReport:
    path: str
    segments: int = 0
    records: int = 0
    first_lsn: int = 0
    next_lsn: int = 0
    bytes: int = 0
    subscribers: int = 0
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True if no damage was found (notes are allowed)."""
        return not any(p.severity == DAMAGE for p in self.problems)

    def _add(self, severity: str, path: str, offset: int, message: str) -> None:
        self.problems.append(Problem(severity, path, offset, message))


def verify(
    path: str | os.PathLike[str],
    *,
    fs: FileSystem | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> VerifyReport:
    """Check every byte of the log at ``path``. Takes no lock; safe while writers run.

    Returns a report; ``report.ok`` is False if anything is damaged, and each problem names the
    file and offset. ``progress(done, total)`` is called as segments are checked.
    """
    fs = fs or REAL
    root = os.fspath(path)
    report = VerifyReport(path=root)
    meta_path = os.path.join(root, fmt.META_NAME)
    try:
        meta = fmt.decode_meta(fs.read_file(meta_path, 1 << 20), meta_path)
    except FileNotFoundError:
        report._add(DAMAGE, meta_path, 0, "meta file missing: not a log")
        return report
    except (LogspoolError, ValueError) as err:
        report._add(DAMAGE, meta_path, getattr(err, "offset", 0), str(err))
        return report
    bases = list_segments(fs, root)
    report.segments = len(bases)
    if not bases:
        report._add(NOTE, root, 0, "no segments yet (no writer has opened the log)")
        return report
    report.first_lsn = expected = bases[0]
    mark, _boot = read_mark(fs, root)  # before the segments: what it proves is there when read
    last_ts = 0
    for n, base in enumerate(bases):
        if progress is not None:
            progress(n, len(bases))
        newest = n == len(bases) - 1
        spath = os.path.join(root, fmt.segment_name(base))
        try:
            data = fs.read_file(spath, 1 << 40)
        except FileNotFoundError:
            report._add(NOTE, spath, 0, "removed while verifying (retention)")
            continue
        report.bytes += len(data)
        try:
            header = fmt.decode_segment_header(data, spath)
        except LogspoolError as err:
            if newest and not any(data):
                report._add(NOTE, spath, 0, "segment being created (no header yet)")
                break
            report._add(DAMAGE, spath, 0, str(err))
            break
        if header.base_lsn != base:
            report._add(DAMAGE, spath, 16, f"header base lsn {header.base_lsn}, name says {base}")
        if base != expected:
            report._add(DAMAGE, spath, 0, f"segment starts at lsn {base}, expected {expected}: a gap")
        infos: list[seg.RecordInfo] = []
        # Payloads are wanted only to check that compressed ones decompress.
        out: list[fmt.Record] | None = None if meta.compression is None else []
        gaps: list[fmt.Gap] = []
        stop = seg.parse(data, fmt.SEGMENT_HEADER_SIZE, base, meta.record_size_max, out, infos, 0, gaps)
        del out
        for gap, at in zip(gaps, _gap_offsets(data, stop.pos), strict=True):
            report._add(NOTE, spath, at, f"lsns {gap.first_lsn}..{gap.next_lsn - 1}: {gap.reason}")
        report.records += len(infos)
        for info in infos:
            if info.timestamp < last_ts:
                report._add(DAMAGE, spath, info.offset, f"timestamp goes back at lsn {info.lsn}")
            last_ts = info.timestamp
        expected = stop.lsn
        if stop.kind == seg.SEAL:
            seal_end = stop.pos + fmt.RECORD_OVERHEAD
            if seal_end != len(data) and newest and seg.zeros_from(data, seal_end):
                report._add(
                    NOTE,
                    spath,
                    seal_end,
                    "zeros after the seal (preallocated space): the next writer cuts them",
                )
            elif seal_end != len(data):
                report._add(DAMAGE, spath, stop.pos, "bytes after the seal record")
            if newest:
                report._add(NOTE, spath, stop.pos, "sealed, next segment not created yet")
            elif bases[n + 1] != stop.next_lsn:
                report._add(
                    DAMAGE,
                    spath,
                    stop.pos,
                    f"seal names lsn {stop.next_lsn}, next segment is {bases[n + 1]}",
                )
        elif stop.kind == seg.END:
            # The seal is durable before the next segment is created: no crash leaves a segment
            # that ends unsealed before another, so records missing there are damage.
            if not newest and stop.lsn != bases[n + 1]:
                report._add(
                    DAMAGE,
                    spath,
                    stop.pos,
                    f"ends at lsn {stop.lsn} without a seal, but the next segment starts at lsn "
                    f"{bases[n + 1]}: the segment was cut short",
                )
            elif not newest:
                report._add(
                    NOTE, spath, stop.pos, "not sealed, but the next segment follows on (a lost seal)"
                )
            else:
                _verify_proven_end(spath, stop, proven_offset(mark, base), report)
        elif newest and stop.kind == seg.ZERO and seg.zeros_from(data, stop.pos):
            # The space a writer preallocated after the records (or a crash left): no record.
            _verify_proven_end(spath, stop, proven_offset(mark, base), report)
        elif newest and stop.kind in (seg.INCOMPLETE, seg.ZERO, seg.TORN):
            try:
                seg.judge_damage(
                    spath, data, stop, 0, meta.record_size_max, 0, proven_end=proven_offset(mark, base)
                )
                report._add(
                    NOTE,
                    spath,
                    stop.pos,
                    f"tail not complete ({stop.reason or stop.kind}): a record being written, or a "
                    "torn tail that the next writer cuts",
                )
            except CorruptionError as err:
                report._add(DAMAGE, spath, err.offset, err.reason)
        else:
            report._add(DAMAGE, spath, stop.pos, stop.reason or f"{stop.kind} record")
        _verify_index(fs, root, base, infos, report)
    report.next_lsn = expected
    _verify_checkpoints(fs, root, meta.record_size_max, report)
    _verify_strays(fs, root, bases, report)
    return report


def _gap_offsets(data: bytes, end: int) -> list[int]:
    """The offsets of the gap records among the records from the segment header to ``end``.

    ``seg.parse`` checked every record before ``end`` (where it stopped), so their length fields
    are true and the records can be walked by them; a Gap it reports does not carry its offset.
    """
    offsets: list[int] = []
    pos = fmt.SEGMENT_HEADER_SIZE
    while pos < end:  # bounded: each turn moves past one whole record (at least 36 bytes)
        length, flags, _lsn, _ts, _durable = fmt.RECORD_HEADER.unpack_from(data, pos)
        if flags == fmt.FLAG_GAP:
            offsets.append(pos)
        pos += fmt.RECORD_OVERHEAD + length
    return offsets


def _verify_proven_end(spath: str, stop: seg.Stop, proven: int, report: VerifyReport) -> None:
    """The newest segment's records end cleanly at ``stop``: damage if the sync mark proves
    records fsynced past it (acknowledged records were cut off or zeroed)."""
    if stop.pos < proven:
        shown = proven_text(proven)
        report._add(
            DAMAGE,
            spath,
            stop.pos,
            f"the records end at lsn {stop.lsn}, but the sync mark proves the segment fsynced to "
            f"{shown}: acknowledged records are missing (logspool repair records the loss)",
        )


def _verify_checkpoints(fs: FileSystem, root: str, size_max: int, report: VerifyReport) -> None:
    """Every checkpoint decodes, is stored under its name's hash, and points into the log."""
    for name in sorted(n for n in fs.listdir(root) if fmt.is_checkpoint_name(n)):
        cpath = os.path.join(root, name)
        try:
            cp = fmt.decode_checkpoint(fs.read_file(cpath, 1 << 16), cpath)
        except FileNotFoundError:
            continue  # removed while verifying
        except (LogspoolError, ValueError) as err:
            report._add(DAMAGE, cpath, getattr(err, "offset", 0), str(err))
            continue
        report.subscribers += 1
        if fmt.checkpoint_name(cp.name) != name:
            report._add(DAMAGE, cpath, 40, f"checkpoint of {cp.name!r} is stored under the wrong name")
        elif cp.lsn < report.first_lsn:
            lost = report.first_lsn - cp.lsn
            report._add(
                NOTE,
                cpath,
                16,
                f"subscriber {cp.name!r} is at lsn {cp.lsn}, before the earliest record "
                f"{report.first_lsn}: {lost} records it had not read were removed",
            )
        elif cp.lsn > report.next_lsn:
            head = Reader(root, fs, size_max, start="latest")  # writers may have gone on since
            head.close()
            if cp.lsn > head.position:
                report._add(
                    DAMAGE,
                    cpath,
                    16,
                    f"subscriber {cp.name!r} is at lsn {cp.lsn}, past the head {head.position}",
                )


def _verify_strays(fs: FileSystem, root: str, bases: list[int], report: VerifyReport) -> None:
    """Index files whose segment retention removed (a crash between the two unlinks)."""
    have = set(bases)
    for name in sorted(fs.listdir(root)):
        stem, _dot, suffix = name.partition(".")
        orphan = "." + suffix == fmt.INDEX_SUFFIX and stem.isdigit() and int(stem) not in have
        if orphan and bases and int(stem) < bases[0]:
            report._add(NOTE, os.path.join(root, name), 0, "index of a removed segment (harmless)")


def _verify_index(
    fs: FileSystem, root: str, base: int, infos: list[seg.RecordInfo], report: VerifyReport
) -> None:
    ipath = os.path.join(root, fmt.index_name(base))
    try:
        raw = fs.read_file(ipath, 1 << 36)
    except FileNotFoundError:
        report._add(NOTE, ipath, 0, "index missing (lookups scan; repair rebuilds it)")
        return
    if len(raw) < fmt.INDEX_HEADER_SIZE and not any(raw):
        # Created, never fsynced, then a power failure: derived data, as good as missing.
        report._add(NOTE, ipath, 0, "index empty (lookups scan; repair rebuilds it)")
        return
    try:
        ibase, _interval = fmt.decode_index_header(raw, ipath)
    except LogspoolError as err:
        report._add(DAMAGE, ipath, 0, f"index header: {err}")
        return
    if ibase != base:
        report._add(DAMAGE, ipath, 16, f"index base lsn {ibase}, segment is {base}")
        return
    by_offset = {i.offset: i for i in infos}
    entries = fmt.decode_index_entries(raw)
    for k, entry in enumerate(entries):
        info = by_offset.get(entry.offset)
        at = fmt.INDEX_HEADER_SIZE + k * fmt.INDEX_ENTRY_SIZE
        if info is None or info.lsn != entry.lsn or info.timestamp != entry.timestamp:
            if info is None and infos and entry.offset > infos[-1].offset:
                continue  # points past what we read: written after our read of the segment
            report._add(DAMAGE, ipath, at, f"index entry for lsn {entry.lsn} does not match its record")
    tail = len(raw) - fmt.INDEX_HEADER_SIZE - len(entries) * fmt.INDEX_ENTRY_SIZE
    if tail >= fmt.INDEX_ENTRY_SIZE:
        report._add(NOTE, ipath, len(raw) - tail, "index entries past a damaged one are ignored")
