"""``logspool jobs ...``: the job journal from the shell (thin over ``logspool.jobs``).

Exit codes: 0 ok, 1 error (message on stderr), 2 usage, 3 ``take`` found no ready job.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from .. import limits
from ..errors import LogspoolError

if TYPE_CHECKING:
    from .. import jobs  # imported by the commands that run (CLI start-up, issue 29)

IDLE_EXIT = 3


def _time(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def job_json(job: jobs.Job) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "id": job.id,
        "key": job.key,
        "domain": job.domain,
        "state": job.state,
        "priority": job.priority,
        "not_before": _time(job.not_before),
        "deliveries": job.deliveries,
        "token": job.token,
        "lease_until": _time(job.lease_until),
        "ttl_until": _time(job.ttl_until),
        "created": _time(job.created),
        "updated": _time(job.updated),
        "error": job.error,
    }
    try:
        obj["payload"] = job.payload.decode("utf-8")
    except UnicodeDecodeError:
        obj["payload_base64"] = base64.b64encode(job.payload).decode("ascii")
    return obj


# Text output: a job is one line of tab-separated columns (`cut -f` works; the payload is last,
# so a tab in it moves no other column); a listing (list, dead) starts with this header line.
_JOB_HEADER = "id\ttoken\tstate\tpriority\tlease_until\tkey\tpayload"


def _job_line(job: jobs.Job) -> str:
    payload = job.payload.decode("utf-8", "backslashreplace")
    lease = _time(job.lease_until) or "-"
    return f"{job.id}\t{job.token}\t{job.state}\t{job.priority}\t{lease}\t{job.key}\t{payload}"


def _job_table(listed: list[jobs.Job]) -> str:
    return "\n".join([_JOB_HEADER, *(_job_line(j) for j in listed)])


def _lease(journal: jobs.Journal, job_id: int, token: int) -> jobs.Job:
    """The job as its lease holder knows it (id and token), for ack, nack, release and extend."""
    from .. import jobs

    try:
        job = journal.job(job_id)
    except LogspoolError:
        job = jobs.Job(job_id, "", "", b"", 0, "leased", 0.0, 0, token, None, None, 0.0, 0.0, "")
    return job._replace(token=token)


def _cmd(args: argparse.Namespace) -> int:
    from .. import jobs

    with jobs.open(args.dir, create=args.action == "put") as journal:
        return _run(journal, args)


def _run(journal: jobs.Journal, args: argparse.Namespace) -> int:
    from .. import jobs

    action = args.action
    out: Any = None
    if action == "put":
        items = [(args.key, (args.payload or "").encode())] if args.key is not None else []
        if args.key is None:  # key<TAB>payload lines from stdin
            for line in sys.stdin.buffer:
                key, _, payload = line.rstrip(b"\n").partition(b"\t")
                if key:
                    items.append((key.decode("utf-8"), payload))
        ids = journal.put_many(
            items,
            priority=args.priority,
            delay=args.delay,
            not_before=args.not_before,
            ttl=args.ttl,
            domain=args.domain,
        )
        out = {"ids": ids} if args.json else "\n".join(map(str, ids))
    elif action == "take" and args.count != 1:
        batch = journal.take_many(args.count, lease=args.lease, wait=args.wait)
        if not batch:
            print("[]" if args.json else "idle", file=sys.stdout if args.json else sys.stderr)
            return IDLE_EXIT
        out = [job_json(j) for j in batch] if args.json else "\n".join(_job_line(j) for j in batch)
    elif action == "take":
        got = journal.take(lease=args.lease, wait=args.wait)
        if not isinstance(got, jobs.Job):
            if args.json:
                print(json.dumps({"idle": True, "next_at": _time(got.next_at)}))
            else:
                print(f"idle next_at={_time(got.next_at)}", file=sys.stderr)
            return IDLE_EXIT
        out = job_json(got) if args.json else _job_line(got)
    elif action in ("ack", "nack", "release", "extend"):
        job = _lease(journal, args.id, args.token)
        if action == "ack":
            journal.ack(job)
        elif action == "nack":
            journal.nack(job, delay=args.delay, error=args.error)
        elif action == "release":
            journal.release(job)
        else:
            job = journal.extend(job, args.lease)
            out = job_json(job) if args.json else _job_line(job)
    elif action == "cancel":
        out = "cancelled" if journal.cancel(args.key) else "no pending job"
    elif action == "list":
        listed = list(
            journal.jobs(state=args.state, limit=args.limit) if args.key is None else journal.get(args.key)
        )
        out = [job_json(j) for j in listed] if args.json else _job_table(listed)
    elif action == "stats":
        st = journal.stats()
        if args.json:
            out = st.to_json()
        else:
            shown = {**st.to_json(), "next_at": _time(st.next_at)}
            lines = [f"{k:<18} {v}" for k, v in shown.items() if k != "counters"]
            lines += [f"{'counters.' + k:<18} {v}" for k, v in st.counters.items()]
            out = "\n".join(lines)
    elif action == "dead":
        if args.retry is not None:
            journal.retry(args.retry, delay=args.delay)
        elif args.purge is not None:
            n = journal.purge(None if args.purge == "all" else int(args.purge))
            out = {"purged": n} if args.json else f"purged {n}"
        else:
            dead = journal.dead_letters()
            out = [job_json(j) for j in dead] if args.json else _job_table(dead)
    elif action == "snapshot":
        out = f"snapshot at lsn {journal.snapshot()}"
    if out is not None and out != "":
        print(json.dumps(out, indent=2, ensure_ascii=False) if args.json else out)
    return 0


def _seconds(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None


def _count(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if not 1 <= n <= limits.JOB_TAKE_MAX:
        raise argparse.ArgumentTypeError(f"not a count from 1 to {limits.JOB_TAKE_MAX}: {text!r}")
    return n


def add_parser(sub: Any) -> None:
    p = sub.add_parser("jobs", help="the job journal: put, take, ack, nack, list, stats, dead letters")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")

    def action(name: str, help: str) -> argparse.ArgumentParser:
        a: argparse.ArgumentParser = actions.add_parser(name, help=help)
        a.add_argument("dir", metavar="DIR")
        a.add_argument("--json", action="store_true", help="JSON output")
        return a

    a = action(
        "put", help="put KEY [PAYLOAD]; without KEY, key<TAB>payload lines from stdin (one durable step)"
    )
    a.add_argument("key", nargs="?", metavar="KEY")
    a.add_argument("payload", nargs="?", metavar="PAYLOAD")
    a.add_argument("--priority", type=int, help="0..255, smaller runs first (default 128; kept on update)")
    a.add_argument("--delay", type=_seconds, help="seconds before the job may run")
    a.add_argument("--not-before", type=_seconds, metavar="EPOCH_S", help="time before which it may not run")
    a.add_argument("--ttl", type=_seconds, help="drop it if nobody took it within this many seconds")
    a.add_argument("--domain", help="fairness group (default: the key's host or prefix)")
    a = action("take", help="lease the next ready job (exit 3 if none)")
    a.add_argument("--lease", type=_seconds, default=30.0, help="seconds (default 30)")
    a.add_argument("--wait", type=_seconds, default=0.0, help="seconds to wait for a job (default 0)")
    a.add_argument(
        "--count",
        type=_count,
        default=1,
        help="lease up to N jobs in one step (one line each; with --json, a list)",
    )
    for name, what in (
        ("ack", "mark a leased job done"),
        ("nack", "give a leased job back"),
        ("release", "give back a leased job not started (its delivery not counted)"),
        ("extend", "renew a lease"),
    ):
        a = action(name, help=what)
        a.add_argument("id", type=int, metavar="ID")
        a.add_argument("token", type=int, metavar="TOKEN")
        if name == "nack":
            a.add_argument("--delay", type=_seconds, default=0.0, help="seconds before it runs again")
            a.add_argument("--error", default="", help="why (kept with the job)")
        if name == "extend":
            a.add_argument("--lease", type=_seconds, default=30.0, help="seconds from now (default 30)")
    a = action("cancel", help="remove KEY's pending job")
    a.add_argument("key", metavar="KEY")
    a = action("list", help="jobs in arrival order (or KEY's)")
    a.add_argument("key", nargs="?", metavar="KEY")
    a.add_argument("--state", choices=["pending", "leased", "dead"])
    a.add_argument("--limit", type=int)
    action("stats", help="counts and counters")
    a = action("dead", help="list dead letters, or --retry ID, or --purge ID|all")
    a.add_argument("--retry", type=int, metavar="ID")
    a.add_argument("--purge", metavar="ID|all")
    a.add_argument("--delay", type=_seconds, default=0.0, help="with --retry: seconds before it runs")
    action("snapshot", help="write a snapshot now and compact the op log")
    p.set_defaults(func=_cmd)
