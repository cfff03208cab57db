"""``logspool verify`` and ``logspool repair``: checking every record, index and seal of a log,
and fixing what can be fixed (docs/FORMAT.md §9.1), with a progress line on a terminal.

Invariants: ``verify`` only reads (it takes no lock and changes nothing); ``repair --dry-run``
changes nothing; both exit 1 while damage is left. The work is ``logspool._verify`` and
``logspool._repair``, imported when the command runs (CLI start-up, issue 29).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .. import _progress


class _SegmentProgress:
    """A progress line for a command that walks a log's segments: ``progress(done, total)``."""

    def __init__(self, command: str, path: str) -> None:
        self._line = _progress.Progress(f"{command} {path}", None, "segments", on=_progress.wanted())

    def __call__(self, done: int, total: int) -> None:
        self._line.total = total
        self._line.update(done)

    def __enter__(self) -> _SegmentProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self._line.close()


def _cmd_verify(args: argparse.Namespace) -> int:
    from .._verify import verify

    with _SegmentProgress("verify", args.dir) as shown:
        report = verify(args.dir, progress=shown)
    if args.json:
        print(
            json.dumps(
                {
                    "ok": report.ok,
                    "path": report.path,
                    "records": report.records,
                    "first_lsn": report.first_lsn,
                    "next_lsn": report.next_lsn,
                    "segments": report.segments,
                    "bytes": report.bytes,
                    "subscribers": report.subscribers,
                    "problems": [
                        {"severity": p.severity, "path": p.path, "offset": p.offset, "message": p.message}
                        for p in report.problems
                    ],
                }
            )
        )
        return 0 if report.ok else 1
    for problem in report.problems:
        print(problem, file=sys.stderr if problem.severity == "damage" else sys.stdout)
    state = "ok" if report.ok else "DAMAGED"
    print(
        f"{state}: {report.records} records (lsn {report.first_lsn} to {report.next_lsn - 1}) "
        f"in {report.segments} segments, {report.bytes} bytes"
    )
    return 0 if report.ok else 1


def _cmd_repair(args: argparse.Namespace) -> int:
    from .._repair import repair

    with _SegmentProgress("repair", args.dir) as shown:
        report = repair(args.dir, dry_run=args.dry_run, lock_timeout_s=args.lock_timeout, progress=shown)
    if args.json:
        obj = {
            "dry_run": report.dry_run,
            "ok": report.ok,
            "actions": [{"kind": a.kind, "path": a.path, "detail": a.detail} for a in report.actions],
            "unrepaired": report.unrepaired,
        }
        print(json.dumps(obj, indent=2))
    else:
        for action in report.actions:
            print(("would " if report.dry_run else "") + str(action))
        for left in report.unrepaired:
            print(f"not repaired: {left}", file=sys.stderr)
        verb = "would take" if report.dry_run else "took"
        state = "" if report.ok else f", {len(report.unrepaired)} problems left"
        print(f"repair {verb} {len(report.actions)} actions{state}")
    return 0 if report.ok else 1


def add_verify(sub: Any) -> None:
    p = sub.add_parser("verify", help="check every record, index and seal; exit 1 on damage")
    p.add_argument("dir")
    p.add_argument("--json", action="store_true", help="one JSON object: the counts and every problem")
    p.set_defaults(func=_cmd_verify)


def add_repair(sub: Any) -> None:
    p = sub.add_parser("repair", help="fix a damaged log (torn tail, corrupt records, indexes, checkpoints)")
    p.add_argument("dir")
    p.add_argument("--dry-run", action="store_true", help="report what would be done, change nothing")
    p.add_argument("--json", action="store_true")
    p.add_argument("--lock-timeout", type=float, default=60.0, metavar="SECONDS")
    p.set_defaults(func=_cmd_repair)
