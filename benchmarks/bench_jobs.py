"""Benchmark of the job journal against SQLite-based peers, all durable, in the same run.

Run: .venv/bin/pip install persist-queue litequeue huey   (benchmark-only; not dependencies)
     .venv/bin/python benchmarks/bench_jobs.py [--quick]

Cases, each the median of several runs (min and max beside it):
- put: one thread puts N jobs (distinct keys).
- take+ack: one thread takes and acks N jobs that are already there.
- mix: 4 producer processes put N jobs in all while 4 worker processes take and ack them; the
  rate is jobs done per second, from start to the last ack.
logspool also runs batched forms (``put_many`` of 100; ``take_many`` of 100 acking the previous
batch), shown as their own rows.
Every system is durable: logspool with ``durability="always"`` (fsync before return);
persist-queue ``SQLiteAckQueue`` (WAL, synchronous=FULL: its default); litequeue with
``PRAGMA synchronous=FULL`` set after it opens (it sets NORMAL, which does not fsync a commit);
huey's ``SqliteStorage(fsync=True)`` (synchronous=FULL). huey has no ack: ``dequeue`` deletes,
so its take+ack is one commit where the others make two. Baseline in the same run: a loop of
``os.write`` + ``os.fsync`` of 100 bytes (the disk's limit for one durable op at a time).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

from logspool import jobs

PAYLOAD = b"x" * 100


# --- the systems: open, put, take_ack (one job; False when none is ready) -----------------------
class Logspool:
    name = "logspool.jobs"

    def __init__(self, d: str) -> None:
        self.j = jobs.open(os.path.join(d, "j"))

    def put(self, key: str) -> None:
        self.j.put(key, PAYLOAD)

    def flush(self) -> None:
        pass

    def take_ack(self) -> bool:
        job = self.j.take(lease=60, wait=0.01)
        if not job:
            return False
        self.j.ack(job)
        return True

    def close(self) -> None:
        self.j.close()


class LogspoolWork(Logspool):
    """The worker loop as ``work()`` runs it: each ack goes in the same durable step as the next
    take (one fsync for both)."""

    name = "logspool.jobs, take(ack=previous)"

    def __init__(self, d: str) -> None:
        super().__init__(d)
        self.previous: jobs.Job | None = None

    def take_ack(self) -> bool:
        job = self.j.take(lease=60, wait=0.01, ack=self.previous)
        self.previous = job if isinstance(job, jobs.Job) else None
        return self.previous is not None

    def close(self) -> None:
        if self.previous is not None:
            self.j.ack(self.previous)
        self.j.close()


class LogspoolBatch(LogspoolWork):
    """Producers that have many jobs at once: ``put_many`` in batches of 100 (one fsync each)."""

    name = "logspool.jobs, put_many(100) + take(ack=previous)"

    def __init__(self, d: str) -> None:
        super().__init__(d)
        self.batch: list[tuple[str, bytes]] = []

    def put(self, key: str) -> None:
        self.batch.append((key, PAYLOAD))
        if len(self.batch) == 100:
            self.j.put_many(self.batch)
            self.batch = []

    def flush(self) -> None:
        if self.batch:
            self.j.put_many(self.batch)
            self.batch = []

    def close(self) -> None:
        self.flush()
        super().close()


class LogspoolTakeMany(LogspoolBatch):
    """Workers that take in batches: ``take_many(100)``, acking the previous batch in the same
    step (one write and one fsync a batch); a job counts as done when the worker has it, and its
    ack rides the next batch's step (or ``ack_many`` at close)."""

    name = "logspool.jobs, put_many(100) + take_many(100, ack=previous batch)"
    cases = ("take+ack", "mix 4+4 processes")  # its put is LogspoolBatch's

    def __init__(self, d: str) -> None:
        super().__init__(d)
        self.held: list[jobs.Job] = []
        self.done: list[jobs.Job] = []

    def take_ack(self) -> bool:
        if not self.held:
            self.held = self.j.take_many(100, lease=60, wait=0.01, ack=self.done)[::-1]
            self.done = []
            if not self.held:
                return False
        self.done.append(self.held.pop())
        return True

    def close(self) -> None:
        self.j.ack_many(self.done)
        self.done = []
        super().close()


class PersistQueue:
    name = "persist-queue SQLiteAckQueue"

    def __init__(self, d: str) -> None:
        import persistqueue

        self.q = persistqueue.SQLiteAckQueue(os.path.join(d, "pq"), auto_commit=True, multithreading=True)

    def put(self, key: str) -> None:
        self.q.put({"key": key, "payload": PAYLOAD})

    def take_ack(self) -> bool:
        import persistqueue

        try:
            item = self.q.get(block=True, timeout=0.01)
        except persistqueue.Empty:
            return False
        self.q.ack(item)
        return True

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.q.close()


class LiteQueue:
    name = "litequeue"

    def __init__(self, d: str) -> None:
        import litequeue

        self.q = litequeue.LiteQueue(os.path.join(d, "lq.db"))
        self.q.conn.execute("PRAGMA synchronous = FULL;")

    def put(self, key: str) -> None:
        self.q.put(key + ":" + PAYLOAD.decode())

    def take_ack(self) -> bool:
        msg = self.q.pop()
        if msg is None:
            time.sleep(0.001)
            return False
        self.q.done(msg.message_id)
        return True

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.q.close()


class Huey:
    name = "huey SqliteStorage"

    def __init__(self, d: str) -> None:
        from huey.storage import SqliteStorage

        self.s = SqliteStorage("bench", os.path.join(d, "huey.db"), fsync=True)

    def put(self, key: str) -> None:
        self.s.enqueue(key.encode() + PAYLOAD)

    def take_ack(self) -> bool:
        if self.s.dequeue() is None:
            time.sleep(0.001)
            return False
        return True

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.s.close()


SYSTEMS: list[type[Any]] = [
    Logspool,
    LogspoolWork,
    LogspoolBatch,
    LogspoolTakeMany,
    PersistQueue,
    LiteQueue,
    Huey,
]


# --- cases ---------------------------------------------------------------------------------------
def case_put(system: type[Any], d: str, n: int) -> float:
    s = system(d)
    try:
        start = time.perf_counter()
        for i in range(n):
            s.put(f"k{i}")
        s.flush()  # a batching producer writes its last batch here
        return n / (time.perf_counter() - start)
    finally:
        s.close()


def case_take_ack(system: type[Any], d: str, n: int) -> float:
    s = system(d)
    try:
        for i in range(n):
            s.put(f"k{i}")
        s.flush()
        start = time.perf_counter()
        done = 0
        for _ in range(n * 100):
            if s.take_ack():
                done += 1
                if done == n:
                    break
        assert done == n, (system.name, done, n)
        return n / (time.perf_counter() - start)
    finally:
        s.close()


def _producer(system: type[Any], d: str, first: int, count: int, barrier: Any) -> None:
    s = system(d)
    barrier.wait()
    for i in range(first, first + count):
        s.put(f"k{i}")
    s.close()


def _worker(system: type[Any], d: str, done: Any, slot: int, total: int, barrier: Any) -> None:
    """Take and ack until the workers have done ``total`` jobs between them. Each counts its own
    in its slot of ``done`` (one writer a slot: no lock, so the count costs every system the
    same, next to nothing; a lock shared by the workers cost ~2 contended acquisitions a job)."""
    s = system(d)
    barrier.wait()
    mine = 0
    for _ in range(total * 1000):
        if sum(done) >= total:
            break
        if s.take_ack():
            mine += 1
            done[slot] = mine
    s.close()


def case_mix(system: type[Any], d: str, n: int, producers: int = 4, workers: int = 4) -> float:
    ctx = multiprocessing.get_context("fork")
    system(d).close()  # create it before the race
    barrier = ctx.Barrier(producers + workers + 1)
    done = ctx.Array("q", workers, lock=False)
    share = n // producers
    procs = [
        ctx.Process(target=_producer, args=(system, d, p * share, share, barrier)) for p in range(producers)
    ]
    procs += [
        ctx.Process(target=_worker, args=(system, d, done, k, share * producers, barrier))
        for k in range(workers)
    ]
    for p in procs:
        p.start()
    barrier.wait()
    start = time.perf_counter()
    for p in procs:
        p.join(timeout=600)
        assert p.exitcode == 0, (system.name, p.exitcode)
    elapsed = time.perf_counter() - start
    assert sum(done) >= share * producers, (system.name, list(done))
    return share * producers / elapsed


def fsync_loop(d: str, n: int) -> float:
    fd = os.open(os.path.join(d, "f"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        start = time.perf_counter()
        for _ in range(n):
            os.write(fd, PAYLOAD)
            os.fsync(fd)
        return n / (time.perf_counter() - start)
    finally:
        os.close(fd)


def once(fn: Callable[[str], float]) -> float:
    d = tempfile.mkdtemp(prefix="logspool-bench-", dir=os.environ.get("BENCH_DIR"))
    try:
        return fn(d)
    finally:
        shutil.rmtree(d)


def summary(rates: list[float]) -> dict[str, float]:
    return {"median": statistics.median(rates), "min": min(rates), "max": max(rates)}


def measure(fn: Callable[[str], float], runs: int) -> dict[str, float]:
    return summary([once(fn) for _ in range(runs)])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--systems", default=",".join(s.__name__ for s in SYSTEMS))
    args = parser.parse_args()
    n, runs = (300, 1) if args.quick else (2000, 5)
    chosen = [s for s in SYSTEMS if s.__name__ in args.systems.split(",")]
    rows = []
    base = measure(lambda d: fsync_loop(d, n), runs)
    print(
        f"baseline write+fsync loop: {base['median']:,.0f}/s ({base['min']:,.0f}..{base['max']:,.0f})",
        flush=True,
    )
    for case, fn in (("put", case_put), ("take+ack", case_take_ack), ("mix 4+4 processes", case_mix)):
        systems = [s for s in chosen if case in getattr(s, "cases", (case,))]
        rates: dict[str, list[float]] = {s.name: [] for s in systems}
        # The systems take turns, run after run, so that a drift of this machine's speed (which
        # moves a VM's rates by a fifth within minutes) falls on all of them alike.
        for _ in range(runs):
            for system in list(systems):
                try:
                    rates[system.name].append(once(lambda d, s=system, f=fn: f(s, d, n)))  # type: ignore[misc]
                except ImportError as err:
                    print(f"{case:20} {system.name:30} skipped: {err}", flush=True)
                    systems.remove(system)
                    del rates[system.name]
        for name, got in rates.items():
            r = summary(got)
            rows.append((case, name, r))
            print(
                f"{case:20} {name:30} {r['median']:>10,.0f}/s  ({r['min']:,.0f}..{r['max']:,.0f})",
                flush=True,
            )
    print()
    print("| case | system | jobs/s (median) | min | max | / fastest peer |")
    print("|---|---|---:|---:|---:|---:|")
    fastest: dict[str, float] = {}
    for case, name, r in rows:
        if not name.startswith("logspool"):
            fastest[case] = max(fastest.get(case, 0.0), r["median"])
    for case, name, r in rows:
        ratio = f"{r['median'] / fastest[case]:.1f}x" if fastest.get(case) else ""
        print(f"| {case} | {name} | {r['median']:,.0f} | {r['min']:,.0f} | {r['max']:,.0f} | {ratio} |")
    lo, mid, hi = base["min"], base["median"], base["max"]
    print(f"| baseline | write+fsync loop, 100 B | {mid:,.0f} | {lo:,.0f} | {hi:,.0f} | |")


if __name__ == "__main__":
    main()
