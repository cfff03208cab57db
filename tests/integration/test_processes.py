"""Many processes on one log: writers interleave safely, readers in other processes wake at once.

Real processes (spawned interpreters) share one log directory, with no broker between them.
"""

from __future__ import annotations

import multiprocessing
import os
import select
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

import logspool
from logspool import _format as fmt
from logspool._fs import FileSystem

_CTX = multiprocessing.get_context("spawn")


def _writer(path: str, writer: int, count: int, batch: int, durability: str) -> None:
    with logspool.open(path, durability=durability, segment_size_max=16384) as log:
        i = 0
        while i < count:
            n = min(batch, count - i)
            items = [f"{writer}:{j}".encode() for j in range(i, i + n)]
            if n == 1:
                log.append(items[0])
            else:
                log.append_many(items)
            if i % 97 == 0 and writer == 0:
                log.cutover()  # cutovers while the others write
            i += n


@pytest.mark.parametrize(("durability", "batch"), [("os", 1), ("always", 7)])
def test_writer_processes_each_record_once_in_writer_order(log_dir: str, durability: str, batch: int) -> None:
    writers, count = 4, 600
    logspool.open(log_dir, segment_size_max=16384).close()
    procs = [
        _CTX.Process(target=_writer, args=(log_dir, w, count, batch, durability)) for w in range(writers)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    with logspool.open(log_dir, readonly=True) as log:
        recs = list(log.read())
    assert [r.lsn for r in recs] == list(range(writers * count))
    seen: dict[int, list[int]] = {w: [] for w in range(writers)}
    for r in recs:
        w, j = r.payload.decode().split(":")
        seen[int(w)].append(int(j))
    for w in range(writers):
        assert seen[w] == list(range(count)), f"writer {w} lost, doubled or reordered records"
    report = logspool.verify(log_dir)
    assert report.ok, report.problems
    assert report.segments > 3


_TAIL_READER = """
import sys, logspool
log = logspool.open(sys.argv[1], readonly=True)
reader = log.reader("latest")
print("ready", flush=True)
for _ in range(int(sys.argv[2])):
    rec = reader.next(timeout=3600)
    print(rec.payload.decode(), reader._watch is not None and reader._watch.uses_inotify, flush=True)
"""


@pytest.mark.parametrize("inotify", [True, False])
def test_reader_in_another_process_wakes_on_an_append(log_dir: str, inotify: bool) -> None:
    """A reader waiting in another process (for up to an hour) returns each record appended:
    with inotify it is woken by the append itself (it switched to a watch once it had waited
    50 ms), without it it polls (LOGSPOOL_NO_INOTIFY=1). Nothing here is timed: the latency is
    measured in benchmarks/bench_wake.py against a pipe between two processes."""
    rounds = 20
    env = dict(os.environ)
    if not inotify:
        env["LOGSPOOL_NO_INOTIFY"] = "1"
    log = logspool.open(log_dir, durability="os")
    proc = subprocess.Popen(
        [sys.executable, "-c", _TAIL_READER, log_dir, str(rounds)],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        watched = []
        for n in range(rounds):
            time.sleep(0.02)  # let the reader wait (and switch to inotify); not a proof of anything
            log.append(b"%d" % n)
            ready, _, _ = select.select([proc.stdout], [], [], 120)
            assert ready, f"round {n}: the reader was not woken by the append"
            payload, uses_inotify = proc.stdout.readline().split()
            assert payload == str(n)
            watched.append(uses_inotify == "True")
        assert proc.wait(30) == 0
    finally:
        proc.kill()
        log.close()
    # With inotify the reader moved to a watch after its first waits and kept it; without, never.
    assert watched[-1] is inotify and (watched == sorted(watched) if inotify else not any(watched)), watched


class _SlowFsync(FileSystem):
    """Segment fsyncs last at least ``floor_s``; with ``hang`` set, the first one writes the file
    ``hang`` and then never returns (a process stuck in an fsync, holding the syncer's locks)."""

    def __init__(self, floor_s: float, hang: str = "") -> None:
        self.floor_s = floor_s
        self.hang = hang
        self.segment_fsyncs = 0

    def fsync(self, fd: int) -> None:
        start = time.monotonic()
        super().fsync(fd)
        if fmt.parse_segment_name(os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))) is None:
            return
        self.segment_fsyncs += 1
        if self.hang:
            with open(self.hang, "w"):
                pass
            time.sleep(600)
        time.sleep(max(0.0, self.floor_s - (time.monotonic() - start)))

    fdatasync = fsync  # (the log's data syncs are fdatasyncs: the same fault, the same count)


def _durable_writer(path: str, writer: int, count: int, floor_s: float, fsyncs: Any, start: Any) -> None:
    fs = _SlowFsync(floor_s)
    with logspool.open(path, durability="always", fs=fs) as log:
        start.wait(60)  # all appending at once, not as each interpreter comes up
        before = fs.segment_fsyncs
        for i in range(count):
            log.append(f"{writer}:{i}".encode())
        fsyncs.put(fs.segment_fsyncs - before)


def test_durable_writer_processes_gather_into_shared_fsyncs(log_dir: str) -> None:
    """4 processes appending one record at a time on a 5 ms fsync: the process that fsyncs
    waits (less than an fsync) for the writers the last fsync covered to append again, so most
    fsyncs carry all four records; without gathering half the writers miss each fsync."""
    writers, count = 4, 40
    logspool.open(log_dir).close()
    fsyncs = _CTX.Queue()
    start = _CTX.Barrier(writers)
    procs = [
        _CTX.Process(target=_durable_writer, args=(log_dir, w, count, 0.005, fsyncs, start))
        for w in range(writers)
    ]
    for p in procs:
        p.start()
    total = sum(fsyncs.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    with logspool.open(log_dir, readonly=True) as log:
        payloads = sorted(r.payload for r in log.read())
    assert payloads == sorted(f"{w}:{i}".encode() for w in range(writers) for i in range(count))
    assert total <= 75, (
        f"{total} fsyncs for {writers * count} records (measured: 49-60; 91-107 without gathering)"
    )


def _hanging_writer(path: str, hang: str) -> None:
    with logspool.open(path, durability="always", fs=_SlowFsync(0.0, hang)) as log:
        log.append(b"from the process killed in its fsync")


def test_a_writer_killed_inside_its_fsync_does_not_stall_the_others(log_dir: str) -> None:
    """The syncer holds the sync flock and its gate through its fsync; killed there (kill -9),
    both go with the process, and a writer waiting for that fsync goes on with its own."""
    logspool.open(log_dir).close()
    hang = os.path.join(os.path.dirname(log_dir), "hanging")
    result: list[int] = []
    with logspool.open(log_dir, durability="always") as log:  # (opening waits for a syncer)
        child = _CTX.Process(target=_hanging_writer, args=(log_dir, hang))
        child.start()
        deadline = time.monotonic() + 60
        while not os.path.exists(hang):
            assert time.monotonic() < deadline and child.is_alive(), "the child never reached its fsync"
            time.sleep(0.01)
        waiter = threading.Thread(target=lambda: result.append(log.append(b"from the parent")))
        waiter.start()
        waiter.join(0.3)
        assert waiter.is_alive(), "the append did not wait for the fsync in progress"
        os.kill(child.pid, signal.SIGKILL)
        child.join(30)
        waiter.join(10)
        assert not waiter.is_alive(), "the append stayed stuck after the syncer died"
    assert result == [1]
    with logspool.open(log_dir, readonly=True) as log:
        assert [r.payload for r in log.read()] == [
            b"from the process killed in its fsync",
            b"from the parent",
        ]
