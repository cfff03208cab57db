"""The writer lock kept between appends while nobody else writes (a *hold*, log/_active.py):
the system calls an append makes, counted through the I/O seam, and writers of several
processes that still take turns and lose nothing.

Counted, not timed: a hold ends when its handle pauses (a loaded machine pauses it), so the
count test looks until it has seen a long enough run of appends, within a bounded number of
rounds, and checks every append it saw against the two shapes an append may have.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections.abc import Callable
from typing import Any

import logspool
from logspool._fs import FileSystem

RUN_WANTED = 200  # appends in a row that must each be one pwrite
ROUNDS_MAX = 50  # rounds of 1,000 appends to find such a run in


class CountingFS(FileSystem):
    """The real file system, with a list of the calls an append can make."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        self.calls.append("pread")
        return super().pread(fd, size, offset)

    def pwrite(self, fd: int, data: bytes, offset: int) -> None:
        self.calls.append("pwrite")
        super().pwrite(fd, data, offset)

    def lock(self, fd: int, timeout_s: float, idle: Callable[[], bool] | None = None) -> bool:
        self.calls.append("lock")
        return super().lock(fd, timeout_s, idle)

    def lock_blocking(self, fd: int) -> None:
        self.calls.append("lock")
        super().lock_blocking(fd)

    def unlock(self, fd: int) -> None:
        self.calls.append("unlock")
        super().unlock(fd)


def _shapes(fs: CountingFS, log: Any, count: int) -> list[tuple[str, ...]]:
    """The calls of each of ``count`` appends (an unlock by the hold's thread between two
    appends goes to the one before it)."""
    out: list[tuple[str, ...]] = []
    for _ in range(count):
        fs.calls.clear()
        log.append(b"x" * 100)
        out.append(tuple(fs.calls))
    return out


def test_appends_of_a_lone_writer_make_one_system_call_each(tmp_path: Any) -> None:
    fs = CountingFS()
    alone = (("pwrite",), ("pwrite", "unlock"))  # held; held, then given back after it
    taken = (("lock", "pread", "pwrite", "unlock"), ("lock", "pread", "pwrite"))  # taken; taken, kept
    best = 0
    with logspool.open(str(tmp_path / "log"), durability="os", fs=fs, segment_size_max=1 << 30) as log:
        log.append(b"first")
        for _ in range(ROUNDS_MAX):  # bounded: until a long enough run was seen
            shapes = _shapes(fs, log, 1000)
            # A leading unlock is the hold's thread ending the hold before this append; a second
            # pwrite is an index entry (a record at each multiple of the index interval).
            plain = [tuple(dict.fromkeys(s[1:] if s[:1] == ("unlock",) else s)) for s in shapes]
            unknown = [s for s in plain if s not in alone + taken]
            assert not unknown, f"appends made calls of an unknown shape: {unknown[:3]}"
            run = 0
            for s in plain:
                run = run + 1 if s == ("pwrite",) else 0
                best = max(best, run)
            if best >= RUN_WANTED:
                break
        assert best >= RUN_WANTED, f"never {RUN_WANTED} appends in a row without a flock (best {best})"
        assert [r.lsn for r in log.read()] == list(range(log.info().next_lsn))


def _burst_writer(path: str, tag: bytes, count: int, go: Any) -> None:
    with logspool.open(path, durability="os") as log:
        go.wait()  # (an Event, or a Barrier: every writer open before any appends)
        for i in range(count):
            log.append(tag + b"%06d" % i)
            if i % 500 == 499:
                time.sleep(0.002)  # an idle moment: the hold ends by time too


def test_writers_of_several_processes_take_turns_and_lose_nothing(tmp_path: Any) -> None:
    path = str(tmp_path / "log")
    logspool.open(path).close()
    ctx = multiprocessing.get_context("spawn")
    go = ctx.Barrier(4, timeout=300)  # the three processes and this one's thread, all open
    count = 3000
    procs = [ctx.Process(target=_burst_writer, args=(path, b"p%d-" % k, count, go)) for k in range(3)]
    for p in procs:
        p.start()
    mine = threading.Thread(target=_burst_writer, args=(path, b"t-", count, go))
    mine.start()
    for p in procs:
        p.join(timeout=300)
        assert p.exitcode == 0
    mine.join(timeout=300)
    with logspool.open(path, readonly=True) as log:
        records = list(log.read())
    assert [r.lsn for r in records] == list(range(4 * count))
    by_tag: dict[bytes, list[int]] = {}
    for r in records:
        tag, _, n = r.payload.partition(b"-")
        by_tag.setdefault(tag, []).append(int(n))
    assert sorted(by_tag) == [b"p0", b"p1", b"p2", b"t"]
    assert all(v == list(range(count)) for v in by_tag.values()), (
        "a writer's records are missing or out of order"
    )
    assert logspool.verify(path).ok


def test_a_writer_that_waits_is_served_while_the_holder_keeps_appending(tmp_path: Any) -> None:
    """The holder never pauses (no idle end); the waiter in another process asks through the
    writer-wanted flag and gets its turn: it finishes while the holder is still appending."""
    path = str(tmp_path / "log")
    stop = threading.Event()
    held_appends = 0

    def hold() -> None:
        nonlocal held_appends
        with logspool.open(path, durability="os") as log:
            while not stop.is_set():
                log.append(b"h")
                held_appends += 1

    logspool.open(path).close()
    holder = threading.Thread(target=hold)
    holder.start()
    try:
        ctx = multiprocessing.get_context("spawn")
        go = ctx.Event()
        go.set()
        waiter = ctx.Process(target=_burst_writer, args=(path, b"w-", 200, go))
        waiter.start()
        waiter.join(timeout=120)
        assert waiter.exitcode == 0
        assert not stop.is_set() and holder.is_alive()
    finally:
        stop.set()
        holder.join(timeout=60)
    with logspool.open(path, readonly=True) as log:
        ours = [r.payload for r in log.read() if r.payload.startswith(b"w-")]
    assert ours == [b"w-%06d" % i for i in range(200)]
    assert held_appends > 0
