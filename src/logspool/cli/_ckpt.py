"""``logspool ckpt``: the checkpointed file's tools (pound, pummel, corrupt) and its repair.
The tools themselves are ``logspool.ckpt._tools``; this module parses and prints.

Invariants: ``ckpt repair`` rolls a file back only through ``CheckpointFile.repair`` (it exits 1
when a damaged undo log could not give the checkpoint back whole); ``pound --ready`` is the
hidden handshake ``pummel`` uses with the child it kills. The checkpointed file is imported when a
command runs (CLI start-up, issue 29).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ._args import parse_size


def _cmd_ckpt(args: argparse.Namespace) -> int:
    from ..ckpt import CheckpointFile
    from ..ckpt import _tools as _ckpt_tools

    if args.action == "pound":
        done = _ckpt_tools.pound(
            args.file,
            size=args.size,
            rounds=args.rounds,
            safely=not args.unsafely,
            block_size=args.block_size,
            seed=args.seed,
            ready=args.ready,
        )
        print(f"pound: {done} rounds, the file was one checkpoint after each")
        return 0
    if args.action == "pummel":
        report = _ckpt_tools.pummel(
            args.file,
            rounds=args.rounds,
            size=args.size,
            safely=not args.unsafely,
            delay_max_s=args.delay_max_ms / 1000,
            seed=args.seed,
        )
        for failure in report.failures:
            print(failure, file=sys.stderr)
        print(report.summary())
        return 1 if report.failures else 0
    if args.action == "corrupt":
        offsets = _ckpt_tools.corrupt(args.file, args.count, seed=args.seed)
        if args.json:
            print(json.dumps({"file": args.file, "offsets": sorted(offsets)}))
            return 0
        shown = ", ".join(str(o) for o in sorted(offsets)[:10]) + (", ..." if len(offsets) > 10 else "")
        print(f"changed {len(offsets)} bytes of {args.file}" + (f" at offsets {shown}" if offsets else ""))
        return 0
    rolled = CheckpointFile.repair(args.file, force=args.force)
    if args.json:
        obj: dict[str, Any] = {"file": args.file, "rolled_back": rolled is not None and not rolled.discarded}
        if rolled is not None:
            obj.update(
                entries=rolled.entries,
                size=rolled.size,
                discarded=rolled.discarded,
                proven=rolled.proven,
                torn_tail=rolled.torn_tail,
            )
        print(json.dumps(obj))
        return 0 if rolled is None or rolled.proven else 1
    if rolled is None:
        print(f"{args.file}: no unfinished transaction; nothing to do")
    elif rolled.discarded:
        print(f"{args.file}: removed an undo log that was never written (the file was not changed)")
    elif not rolled.proven:
        print(
            f"{args.file}: restored {rolled.entries} blocks ({rolled.size} bytes) from a damaged undo "
            "log; it could not give back the checkpoint whole: the file may hold part of the "
            "unfinished transaction",
            file=sys.stderr,
        )
        return 1
    else:
        torn = " (ignored a torn last entry)" if rolled.torn_tail else ""
        print(
            f"{args.file}: rolled back {rolled.entries} blocks ({rolled.size} bytes)"
            f" to the last checkpoint{torn}"
        )
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("ckpt", help="the checkpointed file: pound, pummel, corrupt, repair")
    actions = p.add_subparsers(dest="action", required=True)
    a = actions.add_parser("pound", help="fill with one timestamp, checkpoint, check; again (until killed)")
    a.add_argument("file")
    a.add_argument("--size", type=parse_size, help="create the file this size (default 256K)")
    a.add_argument("--rounds", type=int, default=0, help="stop after this many (0: never)")
    a.add_argument("--unsafely", action="store_true", help="do not fsync each undo entry")
    a.add_argument("--block-size", type=int, default=4096)
    a.add_argument("--seed", type=int)
    a.add_argument("--ready", action="store_true", help=argparse.SUPPRESS)
    a = actions.add_parser("pummel", help="kill a pounding child at random moments; check after each")
    a.add_argument("file")
    a.add_argument("--rounds", type=int, default=100)
    a.add_argument("--size", type=parse_size, help="create the file this size (default 256K)")
    a.add_argument("--unsafely", action="store_true", help="pound without fsyncing undo entries")
    a.add_argument("--delay-max-ms", type=float, default=200.0, help="kill within this long of ready")
    a.add_argument("--seed", type=int)
    a = actions.add_parser("corrupt", help="change COUNT random bytes of FILE (damage, for testing)")
    a.add_argument("file")
    a.add_argument("count", type=int)
    a.add_argument("--seed", type=int)
    a.add_argument("--json", action="store_true", help="the changed offsets as JSON")
    a = actions.add_parser("repair", help="roll FILE back to its last checkpoint if a change was cut short")
    a.add_argument("file")
    a.add_argument(
        "--force",
        action="store_true",
        help="restore what a damaged undo log holds even though it cannot give back the checkpoint whole",
    )
    a.add_argument("--json", action="store_true", help="what was restored, as JSON")
    p.set_defaults(func=_cmd_ckpt)
