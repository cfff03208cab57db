"""logspool against the persistent queues users would pick instead, side by side in one run.

Run:   scripts/bench [--quick]        (installs the ``bench`` extra, then runs this file)
or:    .venv/bin/python benchmarks/bench_peers.py [--quick] [--systems a,b] [--cases a,b]

It writes the section between the ``bench_peers`` markers of ``benchmarks/RESULTS.md``, one PNG
chart per case in ``benchmarks/charts/`` and the raw figures in ``benchmarks/out/peers.json``.

Every system runs in two settings, named next to its numbers in the results:
- **fast**: the quickest setting in which an acknowledged record survives the death of the
  process (page cache, no fsync per record): what "append without per-record fsync" measures.
- **durable**: the setting in which an acknowledged record survives a power failure (an fsync
  before the call returns); systems that have no such setting are listed as "not offered".

Every record carries its producer and sequence number; every case that reads checks that each
record came back exactly once and in its producer's order, and reports what was lost or doubled.
A figure is the median of several runs with the min and max beside it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import logspool

HERE = os.path.dirname(os.path.abspath(__file__))
SIZES = (100, 1024)
HEAD = 12  # b"%02d%010d": producer tag, sequence number


def make_payload(tag: int, seq: int, size: int) -> bytes:
    head = b"%02d%010d" % (tag, seq)
    return head + b"x" * (size - HEAD)


def parse_payload(p: bytes) -> tuple[int, int]:
    return int(p[:2]), int(p[2:HEAD])


# --- the systems ---------------------------------------------------------------------------------
# Each: open on a directory in "fast" or "durable" mode; put(bytes); get() -> the next payload,
# acknowledged (consumed for good), or None when empty; close().
class System:
    name: ClassVar[str]
    ours: ClassVar[bool] = False
    baseline: ClassVar[bool] = False
    process_safe: ClassVar[bool] = True  # may several processes open it at once
    settings: ClassVar[dict[str, str | None]]  # mode -> description; None: mode not offered
    can_get: ClassVar[bool] = True

    def __init__(self, d: str, mode: str) -> None:
        self.d = d
        self.mode = mode

    def put(self, payload: bytes) -> None:
        raise NotImplementedError

    def get(self) -> bytes | None:
        raise NotImplementedError

    def get_wait(self, timeout: float) -> bytes | None:
        """The next payload, polling until ``timeout`` (the peers have no cross-process wake-up)."""
        deadline = time.monotonic() + timeout
        while True:
            p = self.get()
            if p is not None or time.monotonic() >= deadline:
                return p
            time.sleep(0.0005)

    def close(self) -> None:
        close = getattr(getattr(self, "q", None), "close", None)  # the peers keep their queue in q
        if close is not None:
            close()


class RawWrite(System):
    name = "baseline: os.write loop"
    baseline = True
    can_get = False
    settings: ClassVar[dict[str, str | None]] = {
        "fast": "os.write of each payload to one O_APPEND file, no framing, no lock",
        "durable": "os.write + os.fsync of each payload",
    }

    def __init__(self, d: str, mode: str) -> None:
        super().__init__(d, mode)
        self.fd = os.open(os.path.join(d, "raw"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        self.sync = mode == "durable"

    def put(self, payload: bytes) -> None:
        os.write(self.fd, payload)
        if self.sync:
            os.fsync(self.fd)

    def close(self) -> None:
        os.close(self.fd)


class Logspool(System):
    name = "logspool"
    ours = True
    settings: ClassVar[dict[str, str | None]] = {
        "fast": "logspool.open(durability='os'); consume: subscriber, commit(durable=False) per record",
        "durable": "logspool.open(durability='always'); consume: subscriber, commit() per record",
    }

    def __init__(self, d: str, mode: str) -> None:
        super().__init__(d, mode)
        self.log = logspool.open(os.path.join(d, "log"), durability="always" if mode == "durable" else "os")
        self.sub: Any = None

    def put(self, payload: bytes) -> None:
        self.log.append(payload)

    def _subscriber(self) -> Any:
        if self.sub is None:
            self.sub = self.log.subscribe("bench")
        return self.sub

    def get(self) -> bytes | None:
        return self.get_wait(0)

    def get_wait(self, timeout: float) -> bytes | None:
        sub = self._subscriber()
        rec = sub.next(timeout=timeout)
        if rec is None:
            return None
        sub.commit(durable=self.mode == "durable")
        return bytes(rec.payload)

    def close(self) -> None:
        if self.sub is not None:
            self.sub.close()
        self.log.close()


class PersistQueueFile(System):
    name = "persist-queue Queue"
    process_safe = False
    settings: ClassVar[dict[str, str | None]] = {
        "fast": "persistqueue.Queue(path), get + task_done (its info file is rewritten per op)",
        "durable": None,  # fsyncs only when a chunk file fills
    }

    def __init__(self, d: str, mode: str) -> None:
        super().__init__(d, mode)
        import persistqueue

        self.q = persistqueue.Queue(os.path.join(d, "pq"), tempdir=d)

    def put(self, payload: bytes) -> None:
        self.q.put(payload)

    def get(self) -> bytes | None:
        import persistqueue

        try:
            item = self.q.get(block=False)
        except persistqueue.Empty:
            return None
        self.done(item)
        return item  # type: ignore[no-any-return]

    def done(self, item: bytes) -> None:
        self.q.task_done()


class PersistQueueSQLite(PersistQueueFile):
    name = "persist-queue SQLiteAckQueue"
    process_safe = True
    settings: ClassVar[dict[str, str | None]] = {
        "fast": "SQLiteAckQueue(path, auto_commit=True), WAL, PRAGMA synchronous=NORMAL; get + ack",
        "durable": "SQLiteAckQueue(path, auto_commit=True), WAL, synchronous=FULL (its default); get + ack",
    }

    def __init__(self, d: str, mode: str) -> None:
        System.__init__(self, d, mode)
        import persistqueue

        self.q = persistqueue.SQLiteAckQueue(os.path.join(d, "pq"), auto_commit=True, timeout=60)
        sync = "FULL" if mode == "durable" else "NORMAL"
        self.q._conn.execute(f"PRAGMA synchronous={sync};")

    def done(self, item: bytes) -> None:
        self.q.ack(item)


class Queuelib(System):
    name = "queuelib FifoDiskQueue"
    process_safe = False
    settings: ClassVar[dict[str, str | None]] = {
        "fast": "FifoDiskQueue(path): push / pop; pushes are buffered in the process, and its head "
        "and tail are saved at close()",
        "durable": None,  # never fsyncs
    }

    def __init__(self, d: str, mode: str) -> None:
        super().__init__(d, mode)
        from queuelib import FifoDiskQueue

        self.q = FifoDiskQueue(os.path.join(d, "ql"))

    def put(self, payload: bytes) -> None:
        self.q.push(payload)

    def get(self) -> bytes | None:
        return self.q.pop()  # type: ignore[no-any-return]


class DiskcacheDeque(System):
    name = "diskcache Deque"
    settings: ClassVar[dict[str, str | None]] = {
        "fast": "Deque.fromcache(Cache(path)): WAL, sqlite_synchronous=1 (NORMAL, its default); "
        "append / popleft",
        "durable": "Deque.fromcache(Cache(path, sqlite_synchronous=2)) (FULL); append / popleft",
    }

    def __init__(self, d: str, mode: str) -> None:
        super().__init__(d, mode)
        from diskcache import Cache, Deque

        self.cache = Cache(os.path.join(d, "dc"), sqlite_synchronous=2 if mode == "durable" else 1)
        self.q = Deque.fromcache(self.cache)

    def put(self, payload: bytes) -> None:
        self.q.append(payload)

    def get(self) -> bytes | None:
        try:
            return self.q.popleft()  # type: ignore[no-any-return]
        except IndexError:
            return None

    def close(self) -> None:
        self.cache.close()


class LiteQueue(System):
    name = "litequeue"
    settings: ClassVar[dict[str, str | None]] = {
        "fast": "LiteQueue(path): WAL, synchronous=NORMAL (its default); put / pop + done",
        "durable": "LiteQueue(path) then PRAGMA synchronous=FULL; put / pop + done",
    }

    def __init__(self, d: str, mode: str) -> None:
        super().__init__(d, mode)
        import litequeue

        self.q = litequeue.LiteQueue(os.path.join(d, "lq.db"), timeout=60)
        if mode == "durable":
            self.q.conn.execute("PRAGMA synchronous = FULL;")

    def put(self, payload: bytes) -> None:
        self.q.put(payload.decode("ascii"))  # litequeue stores text

    def get(self) -> bytes | None:
        msg = self.q.pop()
        if msg is None:
            return None
        self.q.done(msg.message_id)
        return msg.data.encode("ascii")  # type: ignore[no-any-return]


class SQLiteWAL(System):
    name = "sqlite3 table, WAL"
    settings: ClassVar[dict[str, str | None]] = {
        "fast": "one table (id INTEGER PRIMARY KEY, payload BLOB), WAL, synchronous=NORMAL, "
        "a transaction per insert; consume: BEGIN IMMEDIATE, SELECT first, DELETE, COMMIT",
        "durable": "the same with synchronous=FULL",
    }

    def __init__(self, d: str, mode: str) -> None:
        super().__init__(d, mode)
        self.db = sqlite3.connect(os.path.join(d, "q.db"), timeout=60, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute(f"PRAGMA synchronous={'FULL' if mode == 'durable' else 'NORMAL'}")
        self.db.execute("CREATE TABLE IF NOT EXISTS q (id INTEGER PRIMARY KEY, payload BLOB NOT NULL)")

    def put(self, payload: bytes) -> None:
        self.db.execute("INSERT INTO q (payload) VALUES (?)", (payload,))

    def get(self) -> bytes | None:
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            row = db.execute("SELECT id, payload FROM q ORDER BY id LIMIT 1").fetchone()
            if row is not None:
                db.execute("DELETE FROM q WHERE id = ?", (row[0],))
        finally:
            db.execute("COMMIT")
        return None if row is None else bytes(row[1])

    def close(self) -> None:
        self.db.close()


SYSTEMS: list[type[System]] = [
    RawWrite,
    Logspool,
    PersistQueueFile,
    PersistQueueSQLite,
    Queuelib,
    DiskcacheDeque,
    LiteQueue,
    SQLiteWAL,
]


# --- measuring -----------------------------------------------------------------------------------
@dataclass
class Outcome:
    """One case for one system and size: rates of the runs, or why it did not run."""

    rates: list[float] = field(default_factory=list)
    unit: str = "records/s"
    note: str = ""  # not offered, failed, lost records...
    extra: dict[str, float] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"unit": self.unit, "note": self.note, "runs": len(self.rates), **self.extra}
        if self.rates:
            out.update(median=statistics.median(self.rates), min=min(self.rates), max=max(self.rates))
        return out


class Check:
    """Exactly-once and per-producer order over what a consumer got back."""

    def __init__(self) -> None:
        self.seen: set[tuple[int, int]] = set()
        self.last: dict[int, int] = {}
        self.duplicates = 0
        self.out_of_order = 0

    def add(self, payload: bytes) -> None:
        key = parse_payload(payload)
        if key in self.seen:
            self.duplicates += 1
            return
        self.seen.add(key)
        tag, seq = key
        if seq < self.last.get(tag, -1):
            self.out_of_order += 1
        self.last[tag] = seq

    def problems(self, expected: int) -> str:
        lost = expected - len(self.seen)
        parts = []
        if lost:
            parts.append(f"lost {lost:,} of {expected:,}")
        if self.duplicates:
            parts.append(f"{self.duplicates:,} doubled")
        if self.out_of_order:
            parts.append(f"{self.out_of_order:,} out of order")
        return ", ".join(parts)


@contextlib.contextmanager
def scratch() -> Iterator[str]:
    d = tempfile.mkdtemp(prefix="logspool-peers-", dir=os.environ.get("BENCH_DIR"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def disk_bytes(d: str) -> tuple[int, int]:
    """(allocated bytes, apparent bytes) of every file under ``d``."""
    blocks = apparent = 0
    for root, _dirs, files in os.walk(d):
        for f in files:
            st = os.lstat(os.path.join(root, f))
            blocks += st.st_blocks * 512
            apparent += st.st_size
    return blocks, apparent


def drain_check(system: type[System], d: str, mode: str, expected: int) -> str:
    """Read everything back through the system and say what was wrong ("" when nothing)."""
    s = system(d, mode)
    check = Check()
    try:
        for _ in range(expected * 2 + 10):
            p = s.get()
            if p is None:
                break
            check.add(p)
    finally:
        s.close()
    return check.problems(expected)


# --- cases ---------------------------------------------------------------------------------------
def case_append(system: type[System], mode: str, size: int, n: int) -> tuple[float, str]:
    with scratch() as d:
        payloads = [make_payload(0, i, size) for i in range(n)]
        s = system(d, mode)
        start = time.perf_counter()
        for p in payloads:
            s.put(p)
        s.close()  # queuelib and persist-queue save their state here
        rate = n / (time.perf_counter() - start)
        problems = "" if not system.can_get else drain_check(system, d, mode, n)
        return rate, problems


def _put_and_die(system: type[System], d: str, mode: str, size: int, n: int) -> None:
    s = system(d, mode)
    for i in range(n):
        s.put(make_payload(0, i, size))
    os._exit(0)  # as kill -9 would: no close, no flush of user-space buffers, no atexit


def case_process_death(system: type[System], mode: str, size: int, n: int) -> tuple[float, str]:
    """A process puts n records and dies without closing; the share of them a reopen gets back
    (each put had returned). The rate is that share in percent."""
    ctx = multiprocessing.get_context("fork")
    with scratch() as d:
        child = ctx.Process(target=_put_and_die, args=(system, d, mode, size, n))
        child.start()
        child.join(timeout=600)
        s = system(d, mode)
        check = Check()
        for _ in range(n * 2 + 10):
            p = s.get()
            if p is None:
                break
            check.add(p)
        s.close()
        return 100.0 * len(check.seen) / n, check.problems(n)


def case_consume(system: type[System], mode: str, size: int, n: int) -> tuple[float, str]:
    with scratch() as d:
        s = system(d, "fast")
        for i in range(n):
            s.put(make_payload(0, i, size))
        s.close()
        s = system(d, mode)
        check = Check()
        start = time.perf_counter()
        for _ in range(n):
            p = s.get()
            if p is None:
                break
            check.add(p)
        s.close()
        rate = n / (time.perf_counter() - start)
        return rate, check.problems(n)


def _report_errors(fn: Callable[..., None]) -> Callable[..., None]:
    def run(*args: Any) -> None:
        errors = args[-1]
        try:
            fn(*args[:-1])
        except BaseException as err:  # the peers' failures are results here
            errors.put(f"{type(err).__name__}: {err}".splitlines()[0][:200])
            traceback.print_exc(file=open(os.devnull, "w"))  # noqa: SIM115
            raise SystemExit(1) from None

    return run


def _producer(system: type[System], d: str, mode: str, tag: int, n: int, size: int, go: Any) -> None:
    s = system(d, mode)
    go.wait()
    for i in range(n):
        s.put(make_payload(tag, i, size))
    s.close()


def _consumer(system: type[System], d: str, expected: int, producers_done: Any, out: Any) -> None:
    s = system(d, "fast")
    check = Check()
    idle_since: float | None = None
    while len(check.seen) < expected:
        p = s.get_wait(0.05)
        if p is not None:
            check.add(p)
            idle_since = None
            continue
        if producers_done.is_set():  # nothing more is coming: give stragglers 2 s
            idle_since = idle_since or time.monotonic()
            if time.monotonic() - idle_since > 2.0:
                break
    s.close()
    out.put((len(check.seen), check.duplicates, check.out_of_order))


def case_mpmc(system: type[System], mode: str, size: int, n: int, producers: int = 4) -> tuple[float, str]:
    """``producers`` processes put n records in all while one process consumes them."""
    ctx = multiprocessing.get_context("fork")
    with scratch() as d:
        system(d, mode).close()  # create it before the race
        go, done = ctx.Event(), ctx.Event()
        out, errors = ctx.Queue(), ctx.Queue()
        share = n // producers
        procs = [
            ctx.Process(target=_report_errors(_producer), args=(system, d, mode, t, share, size, go, errors))
            for t in range(producers)
        ]
        consumer = ctx.Process(
            target=_report_errors(_consumer), args=(system, d, share * producers, done, out, errors)
        )
        for p in [*procs, consumer]:
            p.start()
        time.sleep(0.2)
        start = time.perf_counter()
        go.set()
        for p in procs:
            p.join(timeout=600)
        done.set()
        consumer.join(timeout=600)
        elapsed = time.perf_counter() - start
        notes = []
        with contextlib.suppress(Exception):
            while True:
                notes.append(errors.get(timeout=0.1))
        try:
            got, dup, disorder = out.get(timeout=1)
        except Exception:
            got, dup, disorder = 0, 0, 0
            notes.append("the consumer died")
        expected = share * producers
        if got < expected:
            notes.append(f"lost {expected - got:,} of {expected:,}")
        if dup:
            notes.append(f"{dup:,} doubled")
        if disorder:
            notes.append(f"{disorder:,} out of order")
        rate = got / elapsed if got else 0.0
        return rate, "; ".join(dict.fromkeys(notes))


def case_writers(system: type[System], mode: str, size: int, n: int, writers: int = 8) -> tuple[float, str]:
    """``writers`` processes put n records in all, each acknowledged durably; then read back."""
    ctx = multiprocessing.get_context("fork")
    with scratch() as d:
        system(d, mode).close()
        go, errors = ctx.Event(), ctx.Queue()
        share = n // writers
        procs = [
            ctx.Process(target=_report_errors(_producer), args=(system, d, mode, t, share, size, go, errors))
            for t in range(writers)
        ]
        for p in procs:
            p.start()
        time.sleep(0.2)
        start = time.perf_counter()
        go.set()
        for p in procs:
            p.join(timeout=600)
        elapsed = time.perf_counter() - start
        notes = []
        with contextlib.suppress(Exception):
            while True:
                notes.append(errors.get(timeout=0.1))
        if system.can_get:
            problems = drain_check(system, d, mode, share * writers)
            if problems:
                notes.append(problems)
        return share * writers / elapsed, "; ".join(dict.fromkeys(notes))


def _probe(system_name: str, d: str, size: int) -> None:
    """In a fresh process: open a filled queue and read its first record; print time and memory."""

    def rss(field_name: str) -> int:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError(field_name)

    system = next(s for s in SYSTEMS if s.__name__ == system_name)
    before = rss("VmRSS")
    start = time.perf_counter()
    s = system(d, "fast")
    first = s.get()
    elapsed = time.perf_counter() - start
    peak = rss("VmHWM")
    assert first is not None and parse_payload(first) == (0, 0), first
    print(json.dumps({"open_s": elapsed, "memory": peak - before}))
    os._exit(0)  # do not close: closing is not part of opening


def case_open(system: type[System], size: int, n: int, runs: int) -> dict[str, Outcome]:
    """Fill a queue with n records, then open it ``runs`` times in a fresh process."""
    with scratch() as d:
        s = system(d, "fast")
        for i in range(n):
            s.put(make_payload(0, i, size))
        s.close()
        blocks, apparent = disk_bytes(d)
        opens, memory = Outcome(unit="s"), Outcome(unit="bytes")
        copy = os.path.join(d, "copy")
        for _ in range(runs):  # each probe consumes its first record: probe a copy
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(d, copy, ignore=shutil.ignore_patterns("copy"))
            subprocess.run(["sync"], check=False)
            out = subprocess.run(
                [sys.executable, __file__, "--probe", system.__name__, copy, str(size)],
                capture_output=True,
                text=True,
                check=False,
            )
            if out.returncode != 0:
                opens.note = memory.note = out.stderr.strip().splitlines()[-1][:200]
                break
            r = json.loads(out.stdout)
            opens.rates.append(r["open_s"])
            memory.rates.append(r["memory"])
        disk = Outcome(unit="bytes/record", rates=[blocks / n], extra={"apparent": apparent / n})
        return {"open": opens, "memory": memory, "disk": disk}


# --- the run -------------------------------------------------------------------------------------
@dataclass
class Case:
    key: str
    title: str
    mode: str
    fn: Callable[[type[System], str, int, int], tuple[float, str]] | None
    n: int
    needs_get: bool = False
    baseline_ok: bool = True
    higher_is_better: bool = True


def plan(quick: bool) -> list[Case]:
    scale = 1 if quick else 3
    return [
        Case("append", "append, no per-record fsync", "fast", case_append, 4000 * scale),
        Case("process_death", "records kept when the process dies after its puts returned", "fast",
             case_process_death, 1000, needs_get=True, baseline_ok=False),
        Case("append_durable", "append, durable per record", "durable", case_append, 200 * scale),
        Case("consume", "consume with ack, no fsync", "fast", case_consume, 3000 * scale, needs_get=True,
             baseline_ok=False),
        Case("consume_durable", "consume with ack, ack durable", "durable", case_consume, 200 * scale,
             needs_get=True, baseline_ok=False),
        Case("mpmc", "4 producer processes + 1 consumer process", "fast", case_mpmc, 4000 * scale,
             needs_get=True, baseline_ok=False),
        Case("writers_durable", "8 concurrent durable writer processes", "durable", case_writers,
             400 * scale),
        Case("open", "open a large queue and read its first record", "fast", None, 10000 if quick else 50000,
             needs_get=True, baseline_ok=False, higher_is_better=False),
    ]  # fmt: skip


def run_case(case: Case, system: type[System], size: int, runs: int) -> dict[str, Outcome]:
    if case.fn is None:
        return case_open(system, size, case.n, runs)
    out = Outcome(unit="%" if case.key == "process_death" else "records/s")
    if system.settings.get(case.mode) is None:
        out.note = "not offered"
        return {case.key: out}
    for _ in range(1 if case.key == "process_death" else runs):
        try:
            rate, problems = case.fn(system, case.mode, size, case.n)
        except Exception as err:
            out.note = f"failed: {type(err).__name__}: {err}".splitlines()[0][:200]
            break
        out.rates.append(rate)
        if problems:
            out.note = problems
    return {case.key: out}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--quick", action="store_true", help="fewer, smaller runs (a smoke test: writes only --out)"
    )
    parser.add_argument("--systems", help="comma-separated class names (default: all)")
    parser.add_argument("--cases", help="comma-separated case keys (default: all)")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--out", default=os.path.join(HERE, "out", "peers.json"))
    parser.add_argument("--no-write", action="store_true", help="do not touch RESULTS.md or the charts")
    parser.add_argument(
        "--write", action="store_true", help="with --quick: rewrite RESULTS.md and the charts all the same"
    )
    parser.add_argument("--probe", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe:
        _probe(args.probe[0], args.probe[1], int(args.probe[2]))
        return 0
    runs = 3 if args.quick else 5
    systems = [s for s in SYSTEMS if not args.systems or s.__name__ in args.systems.split(",")]
    cases = [c for c in plan(args.quick) if not args.cases or c.key in args.cases.split(",")]
    sizes = [int(x) for x in args.sizes.split(",")]
    started = time.perf_counter()
    results: dict[str, Any] = {
        "quick": args.quick,
        "runs": runs,
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "cases": {},
    }
    for case in cases:
        for size in sizes:
            for system in systems:
                if (system.baseline and not case.baseline_ok) or (case.needs_get and not system.can_get):
                    continue
                for key, outcome in run_case(case, system, size, runs).items():
                    entry = results["cases"].setdefault(key, {"title": case.title, "n": case.n, "rows": []})
                    row = {"system": system.__name__, "size": size, **outcome.summary()}
                    entry["rows"].append(row)
                    print(format_row(key, system, size, row), flush=True)
    results["seconds"] = time.perf_counter() - started
    print(f"done in {results['seconds']:.0f} s", flush=True)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=2)
    # A quick run is a smoke test: its numbers stay in --out unless asked, so the committed
    # RESULTS.md and charts only ever hold full runs.
    if args.quick and not args.write:
        print(f"quick run: results in {args.out}; RESULTS.md and the charts left as they are (--write)")
    elif not args.no_write:
        from report import write_report

        write_report(results, {s.__name__: s for s in SYSTEMS})
    return 0


def format_row(key: str, system: type[System], size: int, row: dict[str, Any]) -> str:
    if "median" not in row:
        return f"{key:16} {size:>5} B  {system.name:32} {row['note']}"
    lo, mid, hi = row["min"], row["median"], row["max"]
    fig = f"{mid:>12,.4g} {row['unit']} ({lo:,.4g}..{hi:,.4g})"
    return f"{key:16} {size:>5} B  {system.name:32} {fig}  {row['note']}"


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    sys.exit(main())
