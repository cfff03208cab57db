"""The ``logspool`` command: thin over the library. Exit 0 ok, 1 error (message on stderr), 2 usage."""

from __future__ import annotations

import argparse
import base64
import json
import signal
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from . import _format as fmt
from ._log import Log
from ._verify import verify
from .errors import LogspoolError

_STDIN_BATCH = 1000  # lines appended per append_many call when reading stdin


def _parse_time(text: str) -> datetime | float:
    """RFC 3339 / ISO 8601 (naive means UTC) or seconds since the epoch."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a time: {text!r} (use RFC 3339 like 2026-11-21T15:00:00Z, or epoch seconds)"
        ) from None


def _rfc3339(ns: int) -> str:
    dt = datetime.fromtimestamp(ns // 1_000_000_000, tz=UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S") + f".{ns % 1_000_000_000:09d}Z"


def _record_json(rec: fmt.Record) -> str:
    obj: dict[str, Any] = {"lsn": rec.lsn, "timestamp": _rfc3339(rec.timestamp)}
    try:
        obj["payload"] = rec.payload.decode("utf-8")
    except UnicodeDecodeError:
        obj["payload_base64"] = base64.b64encode(rec.payload).decode("ascii")
    return json.dumps(obj, ensure_ascii=False)


def _cmd_append(args: argparse.Namespace) -> int:
    with Log(args.dir, durability=args.durability) as log:
        if args.payload:
            if args.raw:
                raise SystemExit("logspool append: --raw reads stdin; give no PAYLOAD with it")
            for lsn in log.append_many([p.encode() for p in args.payload]):
                print(lsn)
            return 0
        if args.raw:
            lsn = log.append(sys.stdin.buffer.read())
            print(lsn)
            return 0
        count, first, last = 0, -1, -1
        batch: list[bytes] = []
        for line in sys.stdin.buffer:
            batch.append(line[:-1] if line.endswith(b"\n") else line)
            if len(batch) >= _STDIN_BATCH:
                lsns = log.append_many(batch)
                first = lsns[0] if first < 0 else first
                last, count, batch = lsns[-1], count + len(lsns), []
        if batch:
            lsns = log.append_many(batch)
            first = lsns[0] if first < 0 else first
            last, count = lsns[-1], count + len(lsns)
        print(f"appended {count} records" + (f", lsns {first} to {last}" if count else ""))
    return 0


def _cmd_cat(args: argparse.Namespace) -> int:
    with Log(args.dir, readonly=True, create=False) as log:
        if args.since is not None:
            reader = log.reader(since=args.since)
        else:
            reader = log.reader("earliest" if args.start is None else args.start)
        out = sys.stdout.buffer
        try:
            while True:
                rec = reader.next(timeout=0.5 if args.follow else 0)
                if rec is None:
                    if not args.follow:
                        return 0
                    out.flush()
                    continue
                if args.json:
                    out.write(_record_json(rec).encode() + b"\n")
                else:
                    out.write(rec.payload + b"\n")
        finally:
            reader.close()


def _info_dict(path: str) -> dict[str, Any]:
    with Log(path, readonly=True, create=False) as log:
        info = log.info()
        return {
            "path": info.path,
            "format_version": info.meta.version,
            "first_lsn": info.first_lsn,
            "next_lsn": info.next_lsn,
            "records": info.record_count,
            "size_bytes": info.size,
            "created": _rfc3339(info.meta.created_ns),
            "settings": {
                "segment_size_max": info.meta.segment_size_max,
                "index_interval": info.meta.index_interval,
                "record_size_max": info.meta.record_size_max,
            },
            "segments": [{"base_lsn": s.base_lsn, "size_bytes": s.size} for s in info.segments],
        }


def _cmd_info(args: argparse.Namespace) -> int:
    info = _info_dict(args.dir)
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    print(f"log        {info['path']} (format v{info['format_version']}, created {info['created']})")
    print(f"records    {info['records']} (lsn {info['first_lsn']} to {info['next_lsn'] - 1})")
    print(f"size       {info['size_bytes']} bytes in {len(info['segments'])} segments")
    for name, value in info["settings"].items():
        print(f"{name:<18} {value}")
    for s in info["segments"]:
        print(f"  segment {s['base_lsn']:>12}  {s['size_bytes']:>12} bytes")
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    report = verify(args.dir)
    for problem in report.problems:
        print(problem, file=sys.stderr if problem.severity == "damage" else sys.stdout)
    state = "ok" if report.ok else "DAMAGED"
    print(
        f"{state}: {report.records} records (lsn {report.first_lsn} to {report.next_lsn - 1}) "
        f"in {report.segments} segments, {report.bytes} bytes"
    )
    return 0 if report.ok else 1


def _cmd_cutover(args: argparse.Namespace) -> int:
    with Log(args.dir, create=False) as log:
        print(log.cutover())
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run

    return run(args.dir, writers=args.writers, records=args.records)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="logspool", description="A durable, crash-safe journal.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("append", help="append records (arguments, stdin lines, or --raw stdin)")
    p.add_argument("dir")
    p.add_argument("payload", nargs="*", help="one record each (UTF-8); none: one per stdin line")
    p.add_argument("--raw", action="store_true", help="all of stdin as one record")
    p.add_argument("--durability", choices=["always", "interval", "os"], default="always")
    p.set_defaults(func=_cmd_append)

    p = sub.add_parser("cat", help="print records")
    p.add_argument("dir")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--from", dest="start", type=int, default=None, metavar="LSN")
    where.add_argument("--since", type=_parse_time, metavar="TIME", help="RFC 3339 or epoch seconds")
    p.add_argument("--follow", "-f", action="store_true", help="wait for new records")
    p.add_argument("--json", action="store_true", help="one JSON object a line")
    p.set_defaults(func=_cmd_cat)

    p = sub.add_parser("info", help="segments, lsns, sizes and settings")
    p.add_argument("dir")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_info)

    p = sub.add_parser("verify", help="check every record, index and seal; exit 1 on damage")
    p.add_argument("dir")
    p.set_defaults(func=_cmd_verify)

    p = sub.add_parser("cutover", help="seal the active segment and start the next")
    p.add_argument("dir")
    p.set_defaults(func=_cmd_cutover)

    p = sub.add_parser("demo", help="writer processes, a tailing reader, a cutover, info")
    p.add_argument("--dir", default="demo-output/log")
    p.add_argument("--writers", type=int, default=4)
    p.add_argument("--records", type=int, default=2500, help="records per writer")
    p.set_defaults(func=_cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `logspool cat | head` ends quietly
    try:
        code: int = args.func(args)
        return code
    except KeyboardInterrupt:
        return 130
    except (LogspoolError, OSError, ValueError, TypeError) as err:
        print(f"logspool {args.command}: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
