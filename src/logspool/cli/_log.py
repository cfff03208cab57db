"""The ``logspool`` command: thin over the library. Exit 0 ok, 1 error (message on stderr), 2 usage."""

from __future__ import annotations

import argparse
import base64
import itertools
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from .. import _progress, limits
from ..errors import LogspoolError
from . import _jobs, _kv, _server

if TYPE_CHECKING:
    from .. import _format as fmt
    from .._reader import Reader
    from .._retention import Retention
    from ..log import Log

# Each command imports what it uses when it runs, so that `logspool --help` and a small
# `logspool append` start in well under 100 ms (issue 29).

_STDIN_BATCH = 1000  # lines appended per append_many call when reading stdin
_CAT_CHUNK = 1024  # records cat writes at once


def _parse_time(text: str) -> datetime | float:
    """RFC 3339 / ISO 8601 (naive means UTC), seconds since the epoch, or a duration back from
    now ("90s", "15m", "1h", "7d": what kafka-console-consumer users and journalctl expect)."""
    try:
        return float(text)
    except ValueError:
        pass
    t = text.strip().lower()
    if t[-1:] in _DURATION_UNITS and t[:-1].replace(".", "", 1).isdigit():
        return time.time() - _parse_duration(t)
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a time: {text!r} (use RFC 3339 like 2026-11-21T15:00:00Z, epoch seconds, or a "
            "duration back from now like 15m, 1h, 7d)"
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


def _say_if_locked(command: str, path: str, timeout_s: float) -> None:
    """Before a command takes the writer lock: if another writer holds it now, say so on stderr
    at once (the command then waits up to ``timeout_s``), rather than wait in silence."""
    import fcntl

    from .. import _format as fmt

    try:
        fd = os.open(os.path.join(path, fmt.LOCK_NAME), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return  # no log yet, or no lock file: nobody holds it
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(
            f"logspool {command}: waiting for the writer lock of {path}: another writer holds it "
            f"(a single_writer handle holds it until it closes); giving up after {timeout_s:g} s "
            "(--lock-timeout)",
            file=sys.stderr,
            flush=True,
        )
    finally:
        os.close(fd)  # (releases the flock if it was taken)


def _cmd_append(args: argparse.Namespace) -> int:
    from ..log import Log

    _say_if_locked("append", args.dir, args.lock_timeout)
    with Log(args.dir, durability=args.durability, lock_timeout_s=args.lock_timeout) as log:
        if args.payload:
            if args.raw:
                raise SystemExit("logspool append: --raw reads stdin; give no PAYLOAD with it")
            lsns = log.append_many([p.encode() for p in args.payload])
            print(json.dumps({"lsns": lsns}) if args.json else "\n".join(map(str, lsns)))
            return 0
        if args.raw:
            lsn = log.append(sys.stdin.buffer.read())
            print(json.dumps({"lsns": [lsn]}) if args.json else lsn)
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
        if args.json:
            print(
                json.dumps(
                    {
                        "count": count,
                        "first_lsn": first if count else None,
                        "last_lsn": last if count else None,
                    }
                )
            )
        else:
            print(f"appended {count} records" + (f", lsns {first} to {last}" if count else ""))
    return 0


def _cmd_cat(args: argparse.Namespace) -> int:
    if args.server is not None:
        return _cat_remote(args)
    from .._subscribers import Subscriber
    from ..log import Log

    with Log(args.dir, readonly=True, create=False) as log:
        if args.last is not None:  # `logspool tail`: the last N records, then what comes
            info = log.info()
            args.start = max(info.first_lsn, info.next_lsn - args.last)
        reader = _cat_reader(log, args)
        on = not args.follow and _progress.wanted(output_to_terminal_too=True)
        end = log.info().next_lsn if on else None
        first = reader.position
        shown = _progress.Progress(f"cat {log.path}", None if end is None else end - first, "records", on=on)
        try:
            return _print_batches(
                _local_batches(reader, args.follow),
                args,
                reader if isinstance(reader, Subscriber) else None,
                lambda lsn: shown.update(lsn - first),
            )
        finally:
            shown.close()
            reader.close()


def _local_batches(reader: Reader, follow: bool) -> Iterator[list[Any]]:
    """Records in chunks (a Python call and a write per record made cat 1.5x, once 4.5x, slower
    than iterating log.read(): issue 29); following, an empty chunk whenever none are there."""
    while True:
        batch = list(itertools.islice(reader, _CAT_CHUNK))
        if batch:
            yield batch
            continue
        if not follow:
            return
        yield []
        rec = reader.next(timeout=0.5)
        if rec is not None:
            yield [rec]


def _print_batches(
    batches: Iterator[list[Any]],
    args: argparse.Namespace,
    subscriber: Any,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Write each chunk's records (payload lines, or --json lines); an empty chunk flushes.
    With a subscriber, records count as consumed once written: flush, then commit past them (a
    crash before the commit prints them again, never skips one)."""
    out = sys.stdout.buffer
    left = args.max  # None: no limit
    for batch in batches:
        if not batch:
            out.flush()
            continue
        if left is not None:
            batch = batch[:left]
        if args.json:
            out.write("".join(_record_json(r) + "\n" for r in batch).encode())
        else:
            out.write(b"\n".join([r.payload for r in batch]) + b"\n")
        if subscriber is not None:
            out.flush()
            subscriber.commit(batch[-1].lsn + 1)
        if progress is not None:
            progress(batch[-1].lsn + 1)
        if left is not None:
            left -= len(batch)
            if left <= 0:
                break
    return 0


def _cat_remote(args: argparse.Namespace) -> int:
    """cat and tail of a log the daemon at --server serves (DIR is the log's name there)."""
    from ..client import connect

    if args.subscriber is not None:
        raise SystemExit(
            "logspool cat: --subscriber keeps its position in a local log's directory; "
            "it cannot be used with --server"
        )
    token = args.token or os.environ.get("LOGSPOOL_TOKEN")
    with connect(args.server, token=token) as client:
        remote = client.log(args.dir)
        start: int | str = "earliest" if args.start is None else args.start
        if args.last is not None:
            info = remote.info()
            start = max(info["first_lsn"], info["next_lsn"] - args.last)
        since = args.since
        if isinstance(since, datetime):
            since = (since if since.tzinfo else since.replace(tzinfo=UTC)).timestamp()

        def batches() -> Generator[list[Any], None, None]:
            nxt, after = start, since
            while True:
                records, nxt = remote.read_page(nxt, limit=_CAT_CHUNK, since=after)
                after = None  # the next page starts at an lsn
                if not records:
                    break
                yield records
            if not args.follow:
                return
            tail = client.subscribe(args.dir, nxt, batch=_CAT_CHUNK)
            try:
                while True:
                    yield []
                    got = tail.records(timeout=0.5)
                    if got:
                        yield got
            finally:
                tail.close()

        chunks = batches()
        try:
            return _print_batches(chunks, args, None)
        finally:
            chunks.close()


def _cmd_tail(args: argparse.Namespace) -> int:
    args.start, args.since, args.max, args.subscriber = None, None, None, None
    args.follow = not args.no_follow
    return _cmd_cat(args)


def _cat_reader(log: Log, args: argparse.Namespace) -> Reader:
    """A plain reader, or with --subscriber the named subscriber (created at --from/--since, or
    the earliest record, when new; an existing one resumes where it committed)."""
    if args.subscriber is None:
        if args.since is not None:
            return log.reader(since=args.since)
        return log.reader("earliest" if args.start is None else args.start)
    if args.start is not None or args.since is not None:
        found = [s for s in log.subscribers() if s.name == args.subscriber]
        if found:
            raise SystemExit(
                f"logspool cat: subscriber {args.subscriber!r} of {log.path} exists (at lsn "
                f"{found[0].lsn}); --from and --since only place a new one (move it with "
                "`logspool subscriber rewind`)"
            )
    return log.subscribe(args.subscriber, args.start, since=args.since)


_DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def _parse_duration(text: str) -> float:
    """Seconds from "90", "90s", "15m", "2h", "7d" or "1w"."""
    t = text.strip().lower()
    unit = t[-1:] if t[-1:] in _DURATION_UNITS else "s"
    number = t[:-1] if t[-1:] in _DURATION_UNITS else t
    try:
        value = float(number) * _DURATION_UNITS[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (like 90s, 15m, 2h, 7d)") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"a duration must be positive: {text!r}")
    return value


def _parse_size(text: str) -> int:
    """Bytes from "4096", "512K", "64M", "10G" or "1T" (powers of 1024; a trailing B is allowed)."""
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    unit = t[-1:] if t[-1:] in _SIZE_UNITS and t[-1:] else ""
    number = t[: len(t) - len(unit)]
    try:
        value = int(float(number) * _SIZE_UNITS[unit])
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (like 4096, 512K, 64M, 10G)") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"a size must be positive: {text!r}")
    return value


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("logspool")
    except PackageNotFoundError:
        return "(not installed)"


class _VersionAction(argparse.Action):
    """--version, looking the version up only when asked (importlib.metadata costs ~15 ms)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        print(f"logspool {_version()}")
        parser.exit()


def _whole_number(text: str, least: int, what: str) -> int:
    """``text`` as an int of at least ``least``, or an argparse error naming ``what`` it should be."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"must be {least} or more, not {value}")
    return value


def _whole_count(text: str) -> int:
    return _whole_number(text, 0, "a count of 0 or more")


def _server_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--server", metavar="HOST:PORT", help="read the log DIR names on this daemon (logspool serve)"
    )
    p.add_argument("--token", help="the daemon's token (or LOGSPOOL_TOKEN)")


def _positive_int(text: str) -> int:
    return _whole_number(text, 1, "a whole number")


def _parse_start(text: str) -> int | str:
    if text in ("earliest", "latest"):
        return text
    return _whole_number(text, 0, "an lsn, 'earliest' or 'latest'")


def _human_size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def _human_age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def _subscriber_dicts(log: Log) -> list[dict[str, Any]]:
    return [
        {
            "name": s.name,
            "lsn": s.lsn,
            "records_behind": s.records_behind,
            "bytes_behind": s.bytes_behind,
            "position_age_s": round(s.position_age_s, 3),
            "idle_s": round(s.idle_s, 3),
            "committed": _rfc3339(s.committed_ns),
            "lost": s.lost,
        }
        for s in log.subscribers()
    ]


def _info_dict(path: str) -> dict[str, Any]:
    from ..log import Log

    with Log(path, readonly=True, create=False) as log:
        info = log.info()
        policy = log.retention
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
            "subscribers": _subscriber_dicts(log),
            "retention": policy.to_json() if policy is not None else None,
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
    policy = info["retention"]
    if policy is None:
        print("retention  none (everything is kept)")
    else:
        print("retention  " + ", ".join(f"{k}={v}" for k, v in policy.items() if v not in (None, False)))
    print(f"subscribers {len(info['subscribers'])}")
    _print_subscribers(info["subscribers"])
    return 0


def _print_subscribers(subs: list[dict[str, Any]]) -> None:
    for s in subs:
        lost = f"  LOST {s['lost']} records" if s["lost"] else ""
        print(
            f"  {s['name']!r:<24} @ {s['lsn']:>10}  behind {s['records_behind']:>8} records "
            f"{_human_size(s['bytes_behind']):>10}  position age {_human_age(s['position_age_s']):>7}"
            f"  idle {_human_age(s['idle_s']):>7}{lost}"
        )


def _cmd_subscriber(args: argparse.Namespace) -> int:
    from ..log import Log

    with Log(args.dir, readonly=True, create=False) as log:
        action = args.action
        if action == "list":
            subs = _subscriber_dicts(log)
            if args.json:
                print(json.dumps(subs, indent=2, ensure_ascii=False))
            elif not subs:
                print("no durable subscribers")
            else:
                _print_subscribers(subs)
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


def _meta_dict(meta: fmt.Meta) -> dict[str, Any]:
    return {
        "format_version": meta.version,
        "log_id": meta.log_id,
        "created": _rfc3339(meta.created_ns),
        "segment_size_max": meta.segment_size_max,
        "index_interval": meta.index_interval,
        "record_size_max": meta.record_size_max,
        "compression": meta.compression or "none",
        **({} if meta.compression is None else {"compression_level": meta.compression_level}),
        **meta.extra,
    }


def _cmd_meta(args: argparse.Namespace) -> int:
    from ..log import Log

    with Log(args.dir, readonly=True, create=False) as log:
        obj = _meta_dict(log.meta)
    if args.json:
        print(json.dumps(obj, indent=2))
    else:
        for key, value in obj.items():
            print(f"{key:<18} {value}")
    return 0


def _cmd_monitor(args: argparse.Namespace) -> int:
    """A live view that redraws in place; Ctrl-C ends it with exit 0."""
    from ..log import Log

    with Log(args.dir, readonly=True, create=False) as log:
        last: tuple[float, int] | None = None
        frames = 0
        try:
            while True:
                info = log.info()
                now = time.monotonic()
                rate = 0.0 if last is None else (info.next_lsn - last[1]) / max(now - last[0], 1e-9)
                last = (now, info.next_lsn)
                lines = [
                    f"logspool monitor  {info.path}  {datetime.now(UTC).strftime('%H:%M:%S')}Z"
                    f"  (every {args.interval:g}s, Ctrl-C to quit)",
                    f"head lsn     {info.next_lsn - 1 if info.next_lsn else '-'}"
                    f"   first lsn {info.first_lsn}",
                    f"append rate  {rate:,.0f} records/s",
                    f"segments     {len(info.segments)}   disk {_human_size(info.size)}",
                    "subscribers",
                ]
                subs = _subscriber_dicts(log)
                for s in subs:
                    lines.append(
                        f"  {s['name']!r:<24} lag {s['records_behind']:>8} records "
                        f"{_human_size(s['bytes_behind']):>10}  age {_human_age(s['position_age_s'])}"
                    )
                if not subs:
                    lines.append("  (none)")
                if sys.stdout.isatty():
                    sys.stdout.write("\x1b[H\x1b[2J")  # home and clear: redraw in place
                sys.stdout.write("\n".join(lines) + "\n")
                sys.stdout.flush()
                frames += 1
                if args.frames and frames >= args.frames:
                    return 0
                time.sleep(args.interval)
        except KeyboardInterrupt:
            sys.stdout.write("\n")
            return 0


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


def _cmd_create(args: argparse.Namespace) -> int:
    from .. import _format as fmt
    from ..log import Log

    if os.path.exists(os.path.join(args.dir, fmt.META_NAME)):
        raise ValueError(f"{args.dir} is a log already (its settings are fixed at creation)")
    with Log(
        args.dir,
        segment_size_max=args.segment_size,
        index_interval=args.index_interval,
        record_size_max=args.record_size_max,
        compression=args.compression,
        compression_level=args.level,
    ) as log:
        if args.json:
            print(json.dumps({"path": log.path, **_meta_dict(log.meta)}))
        else:
            print(f"created {log.path} ({log.meta.compression or 'no'} compression)")
    return 0


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


def _cmd_torture(args: argparse.Namespace) -> int:
    from . import _sweep

    if args.trials < 1:
        raise SystemExit(f"logspool torture corrupt: --trials must be 1 or more, not {args.trials}")
    report = _sweep.sweep(
        args.trials,
        seed=args.seed,
        stores=tuple(args.store or _sweep.STORES),
        modes=tuple(args.mode or _sweep.MODES),
        workdir=args.dir,
        progress=None if args.json else lambda line: print(line, file=sys.stderr, flush=True),
    )
    if args.json:
        print(_sweep.main_json(report))
    else:
        print(report.table())
        for example in report.examples:
            print(example)
        print("ok: no silent loss, no wrong data" if report.ok else "FAILED: silent loss or wrong data")
    return 0 if report.ok else 1


def _cmd_cutover(args: argparse.Namespace) -> int:
    from ..log import Log

    with Log(args.dir, create=False) as log:
        base = log.cutover()
    print(json.dumps({"next_segment_base_lsn": base}) if args.json else base)
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from ..demo import DemoDirError, run

    try:
        return run(args.dir, writers=args.writers, records=args.records, force=args.force)
    except DemoDirError as err:
        raise SystemExit(f"logspool demo: {err}") from None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="logspool", description="A durable, crash-safe journal.")
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("append", help="append records (arguments, stdin lines, or --raw stdin)")
    p.add_argument("dir")
    p.add_argument("payload", nargs="*", help="one record each (UTF-8); none: one per stdin line")
    p.add_argument("--raw", action="store_true", help="all of stdin as one record")
    p.add_argument("--durability", choices=["always", "interval", "os"], default="always")
    p.add_argument(
        "--lock-timeout",
        type=_parse_duration,
        default=limits.LOCK_TIMEOUT_S_DEFAULT,
        metavar="DURATION",
        help="how long to wait for another writer to let go (default 60s)",
    )
    p.add_argument("--json", action="store_true", help="the lsns appended as JSON")
    p.set_defaults(func=_cmd_append)

    p = sub.add_parser("create", help="create a log with chosen settings (append creates one with defaults)")
    p.add_argument("dir")
    p.add_argument("--segment-size", type=_parse_size, metavar="SIZE", help="e.g. 64M")
    p.add_argument("--index-interval", type=_parse_size, metavar="SIZE", help="e.g. 64K")
    p.add_argument("--record-size-max", type=_parse_size, metavar="SIZE", help="e.g. 16M")
    p.add_argument("--compression", choices=["zstd"], help="compress each record (needs logspool[zstd])")
    p.add_argument("--level", type=int, metavar="N", help="the zstd level (default 3)")
    p.add_argument("--json", action="store_true", help="the log's settings as JSON")
    p.set_defaults(func=_cmd_create)

    p = sub.add_parser("cat", help="print records")
    p.add_argument("dir")
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--from",
        dest="start",
        type=_parse_start,
        default=None,
        metavar="LSN",
        help="an lsn, earliest or latest",
    )
    where.add_argument(
        "--since",
        type=_parse_time,
        metavar="TIME",
        help="RFC 3339, epoch seconds, or back from now: 15m, 1h, 7d",
    )
    p.add_argument("--follow", "-f", action="store_true", help="wait for new records")
    p.add_argument("-n", "--max", type=_positive_int, metavar="N", help="stop after N records")
    p.add_argument("--json", action="store_true", help="one JSON object a line")
    p.add_argument(
        "--subscriber",
        metavar="NAME",
        help="read as the durable subscriber NAME: resume where it left off and commit what was printed",
    )
    _server_options(p)
    p.set_defaults(func=_cmd_cat, last=None)

    p = sub.add_parser("tail", help="print the last records, then new ones as they come (tail -f)")
    p.add_argument("dir", help="the log (with --server: its name on the daemon)")
    p.add_argument(
        "-n", dest="last", type=_whole_count, default=10, metavar="N", help="the last N (default 10)"
    )
    p.add_argument("--no-follow", action="store_true", help="print the last N and stop")
    p.add_argument("--json", action="store_true", help="one JSON object a line")
    _server_options(p)
    p.set_defaults(func=_cmd_tail)

    p = sub.add_parser("info", help="segments, lsns, sizes and settings")
    p.add_argument("dir")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_info)

    p = sub.add_parser("verify", help="check every record, index and seal; exit 1 on damage")
    p.add_argument("dir")
    p.add_argument("--json", action="store_true", help="one JSON object: the counts and every problem")
    p.set_defaults(func=_cmd_verify)

    p = sub.add_parser("repair", help="fix a damaged log (torn tail, corrupt records, indexes, checkpoints)")
    p.add_argument("dir")
    p.add_argument("--dry-run", action="store_true", help="report what would be done, change nothing")
    p.add_argument("--json", action="store_true")
    p.add_argument("--lock-timeout", type=float, default=60.0, metavar="SECONDS")
    p.set_defaults(func=_cmd_repair)

    p = sub.add_parser("cutover", help="seal the active segment and start the next")
    p.add_argument("dir")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_cutover)

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
        at.add_argument("--to", "--from", dest="start", type=_parse_start, default="earliest", metavar="LSN")
        at.add_argument("--since", type=_parse_time, metavar="TIME", help="RFC 3339 or epoch seconds")
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

    p = sub.add_parser("retention", help="show the retention policy and what it would remove; --apply, --set")
    p.add_argument("dir")
    p.add_argument("--consumed", action="store_true", help="segments every subscriber has passed")
    p.add_argument("--max-age", type=_parse_duration, metavar="DURATION", help="e.g. 7d")
    p.add_argument("--max-size", type=_parse_size, metavar="SIZE", help="e.g. 10G")
    p.add_argument(
        "--expire-idle", type=_parse_duration, metavar="DURATION", help="subscribers idle this long"
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

    p = sub.add_parser("meta", help="the settings the log was created with")
    p.add_argument("dir")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_meta)

    p = sub.add_parser("monitor", help="a live view: rate, head, segments, disk, subscriber lag")
    p.add_argument("dir")
    p.add_argument("--interval", type=float, default=1.0, metavar="SECONDS")
    p.add_argument("--frames", type=int, default=0, help="stop after this many frames (0: never)")
    p.set_defaults(func=_cmd_monitor)

    p = sub.add_parser("ckpt", help="the checkpointed file: pound, pummel, corrupt, repair")
    actions = p.add_subparsers(dest="action", required=True)
    a = actions.add_parser("pound", help="fill with one timestamp, checkpoint, check; again (until killed)")
    a.add_argument("file")
    a.add_argument("--size", type=_parse_size, help="create the file this size (default 256K)")
    a.add_argument("--rounds", type=int, default=0, help="stop after this many (0: never)")
    a.add_argument("--unsafely", action="store_true", help="do not fsync each undo entry")
    a.add_argument("--block-size", type=int, default=4096)
    a.add_argument("--seed", type=int)
    a.add_argument("--ready", action="store_true", help=argparse.SUPPRESS)
    a = actions.add_parser("pummel", help="kill a pounding child at random moments; check after each")
    a.add_argument("file")
    a.add_argument("--rounds", type=int, default=100)
    a.add_argument("--size", type=_parse_size, help="create the file this size (default 256K)")
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

    p = sub.add_parser("torture", help="torture tools for every store: corrupt (the corruption sweep)")
    actions = p.add_subparsers(dest="action", required=True)
    a = actions.add_parser(
        "corrupt",
        help="damage copies of a log, a job journal, a kv store and a checkpointed file at random; "
        "classify each trial (error, exact, loss, wrong)",
    )
    a.add_argument("--trials", type=int, default=200, help="trials per store and mode (default 200)")
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--store", action="append", choices=("log", "jobs", "kv", "ckpt"), help="repeatable")
    a.add_argument("--mode", action="append", choices=("clean", "kill"), help="repeatable")
    a.add_argument("--dir", help="where the copies are made (default: the system's temporary directory)")
    a.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_torture)

    _jobs.add_parser(sub)
    _kv.add_parser(sub)
    _server.add_parser(sub)

    p = sub.add_parser("demo", help="writer processes, a tailing reader, a cutover, info")
    p.add_argument(
        "--dir",
        default="demo-output/log",
        help="a new or empty directory, or one a demo made (replaced); default demo-output/log",
    )
    p.add_argument("--force", action="store_true", help="replace --dir even if a demo did not make it")
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
