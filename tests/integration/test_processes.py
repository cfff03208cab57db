"""Many processes on one log: writers interleave safely, readers in other processes wake at once.

Real processes (spawned interpreters) share one log directory, with no broker between them.
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import subprocess
import sys
import time

import pytest

import logspool

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
import sys, time, logspool
log = logspool.open(sys.argv[1], readonly=True)
reader = log.reader("latest")
print("ready", flush=True)
for _ in range(int(sys.argv[2])):
    rec = reader.next(timeout=10)
    sent = int(rec.payload)
    print(time.time_ns() - sent, flush=True)
"""


@pytest.mark.parametrize("inotify", [True, False])
def test_reader_in_another_process_wakes_within_milliseconds(log_dir: str, inotify: bool) -> None:
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
        latencies_ms = []
        for _ in range(rounds):
            time.sleep(0.02)  # the reader is waiting, not spinning through ready data
            log.append(str(time.time_ns()).encode())
            latencies_ms.append(int(proc.stdout.readline()) / 1e6)
        assert proc.wait(30) == 0
    finally:
        proc.kill()
        log.close()
    median = statistics.median(latencies_ms)
    # Wake-up, not a fixed sleep: milliseconds. (Polling backs off to 50 ms at most.)
    assert median < (20 if inotify else 60), latencies_ms
