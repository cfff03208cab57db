"""``logspool subscriber`` (list, add, remove, rewind, copy) and ``logspool retention``: who
reads a log, and what of it may be removed. Also the subscriber lines ``info`` and ``monitor``
print.

Invariants: looking never deletes (``retention`` without ``--apply`` is a dry run; ``--set``
only stores the policy, which writers apply after each rotation); a subscriber's position moves
only through the log's own calls (``add_subscriber``, ``rewind_subscriber``...), which write it
durably. The log and its retention are imported when a command runs (CLI start-up, issue 29).
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from ._args import human_age, human_size, parse_duration, parse_size, parse_start, parse_time, rfc3339

if TYPE_CHECKING:
    from .._retention import Retention
    from ..log import Log


def subscriber_dicts(log: Log) -> list[dict[str, Any]]:
    return [
        {
            "name": s.name,
            "lsn": s.lsn,
            "records_behind": s.records_behind,
            "bytes_behind": s.bytes_behind,
            "position_age_s": round(s.position_age_s, 3),
            "idle_s": round(s.idle_s, 3),
            "committed": rfc3339(s.committed_ns),
            "lost": s.lost,
        }
        for s in log.subscribers()
    ]


def print_subscribers(subs: list[dict[str, Any]]) -> None:
    for s in subs:
        lost = f"  LOST {s['lost']} records" if s["lost"] else ""
        print(
            f"  {s['name']!r:<24} @ {s['lsn']:>10}  behind {s['records_behind']:>8} records "
            f"{human_size(s['bytes_behind']):>10}  position age {human_age(s['position_age_s']):>7}"
            f"  idle {human_age(s['idle_s']):>7}{lost}"
        )


def _cmd_subscriber(args: argparse.Namespace) -> int:
    from ..log import Log

    with Log(args.dir, readonly=True, create=False) as log:
        action = args.action
        if action == "list":
            subs = subscriber_dicts(log)
            if args.json:
                print(json.dumps(subs, indent=2, ensure_ascii=False))
            elif not subs:
                print("no durable subscribers")
            else:
                print_subscribers(subs)
            return 0
        if action == "add":
            lsn = log.add_subscriber(args.name, args.start, since=args.since)
            said, obj = f"added {args.name!r} at lsn {lsn}", {"name": args.name, "lsn": lsn}
        elif action == "remove":
            log.remove_subscriber(args.name)
            said, obj = f"removed {args.name!r}", {"name": args.name, "removed": True}
        elif action == "rewind":
            lsn = log.rewind_subscriber(args.name, args.start, since=args.since)
            said, obj = f"{args.name!r} is now at lsn {lsn}", {"name": args.name, "lsn": lsn}
        else:
            lsn = log.copy_subscriber(args.name, args.target)
            said = f"copied {args.name!r} to {args.target!r} at lsn {lsn}"
            obj = {"name": args.target, "lsn": lsn, "copied_from": args.name}
        print(json.dumps(obj, ensure_ascii=False) if args.json else said)
    return 0


def _policy_from_args(args: argparse.Namespace) -> Retention | None:
    from .._retention import Retention

    if not (args.consumed or args.max_age or args.max_size or args.expire_idle):
        return None
    return Retention(
        consumed=args.consumed,
        age_max_s=args.max_age,
        size_max=args.max_size,
        subscriber_idle_max_s=args.expire_idle,
    )


def _cmd_retention(args: argparse.Namespace) -> int:
    from ..log import Log

    with Log(args.dir, readonly=True, create=False) as log:
        given = _policy_from_args(args)
        said: list[str] = []
        obj: dict[str, Any] = {"path": log.path, "stored": False, "cleared": False}
        try:
            _retention(log, args, given, said, obj)
        finally:  # what was done before an error is said; --json prints a whole answer only
            if not args.json and said:
                print("\n".join(said))
        if args.json:
            print(json.dumps(obj, ensure_ascii=False))
    return 0


def _retention(
    log: Log, args: argparse.Namespace, given: Retention | None, said: list[str], obj: dict[str, Any]
) -> None:
    """`logspool retention`: what it says goes to ``said`` (text) and ``obj`` (--json)."""
    if args.clear:
        log.set_retention(None)
        obj["cleared"] = True
        said.append("retention policy cleared: everything is kept")
        return
    apply = args.apply and not args.dry_run
    if args.set:
        if given is None:
            raise SystemExit("logspool retention: --set needs a policy (--consumed, --max-age, ...)")
        log.set_retention(given)
        obj["stored"] = True
        said.append("retention policy stored; writers apply it after each rotation")
        if not apply:
            return
    stored = log.retention
    policy = given or stored
    obj["policy"] = None if policy is None else policy.to_json()
    if policy is None:
        said.append("retention policy: none stored (everything is kept); nothing to do")
        return
    source = "given" if given is not None else "stored"
    obj["source"] = source
    said.append(f"retention policy ({source}): " + ", ".join(_policy_words(policy)))
    # Looking never deletes: only --apply removes segments.
    report = log.enforce_retention(policy, dry_run=not apply)
    obj.update(
        dry_run=report.dry_run,
        removed=[
            {"base_lsn": r.base_lsn, "next_lsn": r.next_lsn, "size": r.size, "reason": r.reason}
            for r in report.removed
        ],
        expired_subscribers=list(report.expired_subscribers),
        pinned_by=list(report.pinned_by),
        size_freed=report.size_freed,
    )
    verb = "would remove" if report.dry_run else "removed"
    for name in report.expired_subscribers:
        said.append(f"{verb} idle subscriber {name!r}")
    for r in report.removed:
        said.append(
            f"{verb} segment {r.base_lsn} (lsns {r.base_lsn} to {r.next_lsn - 1}, {r.size} bytes): {r.reason}"
        )
    if report.pinned_by:
        said.append("kept by subscribers: " + ", ".join(repr(n) for n in report.pinned_by))
    said.append(f"{verb} {len(report.removed)} segments, {report.size_freed} bytes")
    if report.dry_run and (report.removed or report.expired_subscribers):
        said.append("nothing was removed: add --apply to remove them")


def _policy_words(policy: Retention) -> list[str]:
    words = [f"{k}={v}" for k, v in policy.to_json().items() if v not in (None, False)]
    return words or ["keeps everything"]


def add_subscriber(sub: Any) -> None:
    p = sub.add_parser("subscriber", help="durable subscribers: list, add, remove, rewind, copy")
    actions = p.add_subparsers(dest="action", required=True)
    a = actions.add_parser("list", help="each subscriber's position and lag")
    a.add_argument("dir")
    a.add_argument("--json", action="store_true")
    for action, what in (("add", "create a subscriber"), ("rewind", "move a subscriber")):
        a = actions.add_parser(action, help=what)
        a.add_argument("dir")
        a.add_argument("name")
        a.add_argument("--json", action="store_true")
        at = a.add_mutually_exclusive_group()
        at.add_argument("--to", "--from", dest="start", type=parse_start, default="earliest", metavar="LSN")
        at.add_argument("--since", type=parse_time, metavar="TIME", help="RFC 3339 or epoch seconds")
    a = actions.add_parser("remove", help="delete a subscriber")
    a.add_argument("dir")
    a.add_argument("name")
    a.add_argument("--json", action="store_true")
    a = actions.add_parser("copy", help="create TARGET at the position of NAME")
    a.add_argument("dir")
    a.add_argument("name")
    a.add_argument("target")
    a.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_subscriber)


def add_retention(sub: Any) -> None:
    p = sub.add_parser("retention", help="show the retention policy and what it would remove; --apply, --set")
    p.add_argument("dir")
    p.add_argument("--consumed", action="store_true", help="segments every subscriber has passed")
    p.add_argument("--max-age", type=parse_duration, metavar="DURATION", help="e.g. 7d")
    p.add_argument("--max-size", type=parse_size, metavar="SIZE", help="e.g. 10G")
    p.add_argument(
        "--expire-idle", type=parse_duration, metavar="DURATION", help="subscribers idle this long"
    )
    p.add_argument(
        "--apply",
        "--now",
        dest="apply",
        action="store_true",
        help="remove what the policy allows now (without it: only show what would go)",
    )
    p.add_argument("--dry-run", action="store_true", help="show what would be removed (the default)")
    p.add_argument("--set", action="store_true", help="store the policy for every writer to apply")
    p.add_argument("--clear", action="store_true", help="remove the stored policy")
    p.add_argument("--json", action="store_true", help="one JSON object: the policy and what it removes")
    p.set_defaults(func=_cmd_retention)
