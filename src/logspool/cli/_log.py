"""The log's own commands: ``append``, ``create``, ``cat``, ``tail``, ``cutover``, ``info``,
``meta``, ``monitor`` and ``demo`` (what writes, reads and describes one log). Their subscribers
and retention are in ``_subscriber.py``; checking and repairing a log in ``_check.py``.

Invariants this module relies on and keeps:

- Start-up (issue 29): nothing but the stdlib, ``limits``, ``_progress`` and ``_args`` is imported
  at the top; each command imports the log (or the client, with ``--server``) when it runs, so
  ``logspool --help`` never imports the log and a one-record ``append`` imports no daemon, client,
  journal or store (tests/integration/test_cli_users.py holds it).
- A record ``cat`` prints to a subscriber is committed only after it is flushed to stdout: a
  crash between the two prints it again, never skips it.
- ``append`` writes through ``Log`` with the durability asked for (default ``always``: every lsn
  it prints is fsynced); it never writes around the library.
"""

from __future__ import annotations

import argparse
import base64
import itertools
import json
import os
import sys
import time
from collections.abc import Callable, Generator, Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from .. import _progress, limits
from ._args import (
    human_age,
    human_size,
    parse_duration,
    parse_size,
    parse_start,
    parse_time,
    positive_int,
    rfc3339,
    whole_count,
)
from ._subscriber import print_subscribers, subscriber_dicts

if TYPE_CHECKING:
    from .. import _format as fmt
    from .._reader import Reader
    from ..log import Log

# Each command imports what it uses when it runs, so that `logspool --help` and a small
# `logspool append` start in well under 100 ms (issue 29).

_STDIN_BATCH = 1000  # lines appended per append_many call when reading stdin
_CAT_CHUNK = 1024  # records cat writes at once


def _record_json(rec: fmt.Record) -> str:
    obj: dict[str, Any] = {"lsn": rec.lsn, "timestamp": rfc3339(rec.timestamp)}
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


def _cmd_cutover(args: argparse.Namespace) -> int:
    from ..log import Log

    with Log(args.dir, create=False) as log:
        base = log.cutover()
    print(json.dumps({"next_segment_base_lsn": base}) if args.json else base)
    return 0


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
            "created": rfc3339(info.meta.created_ns),
            "settings": {
                "segment_size_max": info.meta.segment_size_max,
                "index_interval": info.meta.index_interval,
                "record_size_max": info.meta.record_size_max,
            },
            "segments": [{"base_lsn": s.base_lsn, "size_bytes": s.size} for s in info.segments],
            "subscribers": subscriber_dicts(log),
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
    print_subscribers(info["subscribers"])
    return 0


def _meta_dict(meta: fmt.Meta) -> dict[str, Any]:
    return {
        "format_version": meta.version,
        "log_id": meta.log_id,
        "created": rfc3339(meta.created_ns),
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
                    f"segments     {len(info.segments)}   disk {human_size(info.size)}",
                    "subscribers",
                ]
                subs = subscriber_dicts(log)
                for s in subs:
                    lines.append(
                        f"  {s['name']!r:<24} lag {s['records_behind']:>8} records "
                        f"{human_size(s['bytes_behind']):>10}  age {human_age(s['position_age_s'])}"
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


def _cmd_demo(args: argparse.Namespace) -> int:
    from ..demo import DemoDirError, run

    try:
        return run(args.dir, writers=args.writers, records=args.records, force=args.force)
    except DemoDirError as err:
        raise SystemExit(f"logspool demo: {err}") from None


def _server_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--server", metavar="HOST:PORT", help="read the log DIR names on this daemon (logspool serve)"
    )
    p.add_argument("--token", help="the daemon's token (or LOGSPOOL_TOKEN)")


def add_append(sub: Any) -> None:
    p = sub.add_parser("append", help="append records (arguments, stdin lines, or --raw stdin)")
    p.add_argument("dir")
    p.add_argument("payload", nargs="*", help="one record each (UTF-8); none: one per stdin line")
    p.add_argument("--raw", action="store_true", help="all of stdin as one record")
    p.add_argument("--durability", choices=["always", "interval", "os"], default="always")
    p.add_argument(
        "--lock-timeout",
        type=parse_duration,
        default=limits.LOCK_TIMEOUT_S_DEFAULT,
        metavar="DURATION",
        help="how long to wait for another writer to let go (default 60s)",
    )
    p.add_argument("--json", action="store_true", help="the lsns appended as JSON")
    p.set_defaults(func=_cmd_append)


def add_create(sub: Any) -> None:
    p = sub.add_parser("create", help="create a log with chosen settings (append creates one with defaults)")
    p.add_argument("dir")
    p.add_argument("--segment-size", type=parse_size, metavar="SIZE", help="e.g. 64M")
    p.add_argument("--index-interval", type=parse_size, metavar="SIZE", help="e.g. 64K")
    p.add_argument("--record-size-max", type=parse_size, metavar="SIZE", help="e.g. 16M")
    p.add_argument("--compression", choices=["zstd"], help="compress each record (needs logspool[zstd])")
    p.add_argument("--level", type=int, metavar="N", help="the zstd level (default 3)")
    p.add_argument("--json", action="store_true", help="the log's settings as JSON")
    p.set_defaults(func=_cmd_create)


def add_cat(sub: Any) -> None:
    p = sub.add_parser("cat", help="print records")
    p.add_argument("dir")
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--from",
        dest="start",
        type=parse_start,
        default=None,
        metavar="LSN",
        help="an lsn, earliest or latest",
    )
    where.add_argument(
        "--since",
        type=parse_time,
        metavar="TIME",
        help="RFC 3339, epoch seconds, or back from now: 15m, 1h, 7d",
    )
    p.add_argument("--follow", "-f", action="store_true", help="wait for new records")
    p.add_argument("-n", "--max", type=positive_int, metavar="N", help="stop after N records")
    p.add_argument("--json", action="store_true", help="one JSON object a line")
    p.add_argument(
        "--subscriber",
        metavar="NAME",
        help="read as the durable subscriber NAME: resume where it left off and commit what was printed",
    )
    _server_options(p)
    p.set_defaults(func=_cmd_cat, last=None)


def add_tail(sub: Any) -> None:
    p = sub.add_parser("tail", help="print the last records, then new ones as they come (tail -f)")
    p.add_argument("dir", help="the log (with --server: its name on the daemon)")
    p.add_argument(
        "-n", dest="last", type=whole_count, default=10, metavar="N", help="the last N (default 10)"
    )
    p.add_argument("--no-follow", action="store_true", help="print the last N and stop")
    p.add_argument("--json", action="store_true", help="one JSON object a line")
    _server_options(p)
    p.set_defaults(func=_cmd_tail)


def add_info(sub: Any) -> None:
    p = sub.add_parser("info", help="segments, lsns, sizes and settings")
    p.add_argument("dir")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_info)


def add_cutover(sub: Any) -> None:
    p = sub.add_parser("cutover", help="seal the active segment and start the next")
    p.add_argument("dir")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_cutover)


def add_meta(sub: Any) -> None:
    p = sub.add_parser("meta", help="the settings the log was created with")
    p.add_argument("dir")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_meta)


def add_monitor(sub: Any) -> None:
    p = sub.add_parser("monitor", help="a live view: rate, head, segments, disk, subscriber lag")
    p.add_argument("dir")
    p.add_argument("--interval", type=float, default=1.0, metavar="SECONDS")
    p.add_argument("--frames", type=int, default=0, help="stop after this many frames (0: never)")
    p.set_defaults(func=_cmd_monitor)


def add_demo(sub: Any) -> None:
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
