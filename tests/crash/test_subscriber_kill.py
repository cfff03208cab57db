"""Subscribers under kill -9: a checkpoint is the old one or the new one, and nothing is skipped.

A child process commits a subscriber's position over and over and is killed with SIGKILL at a
random moment; the checkpoint file must then decode, and hold the last position the child reported
committed or the one it was committing. A second child consumes a log as a subscriber with
auto-commit, logging each record it handled, and is killed again and again; across the restarts
every record must have been handled at least once (at-least-once delivery: none skipped).

Power loss (un-fsynced writes dropped) is simulated through the _fs seam by the crash harness.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import logspool
from logspool import _format as fmt

COMMITTER = textwrap.dedent(
    """
    import sys, logspool
    log = logspool.open(sys.argv[1], durability="os")
    sub = log.subscribe("victim")
    i = 0
    while True:
        i += 1
        sub.commit(i)
        sys.stdout.write(f"{i}\\n"); sys.stdout.flush()
    """
)

CONSUMER = textwrap.dedent(
    """
    import os, sys, time, logspool
    log = logspool.open(sys.argv[1], durability="os")
    out = os.open(sys.argv[2], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    sub = log.subscribe("worker", auto_commit=True)
    print("started", flush=True)
    for rec in sub:
        os.write(out, b"%d\\n" % rec.lsn)   # the work: done before the next record is asked for
        if rec.lsn % 50 == 0:
            time.sleep(0.001)
    sub.close()
    print("done", flush=True)
    """
)


def _spawn(code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_a_checkpoint_killed_mid_update_is_old_or_new(log_dir: str) -> None:
    logspool.open(log_dir).close()
    rng = random.Random(7)
    cp_path = os.path.join(log_dir, fmt.checkpoint_name("victim"))
    for _round in range(12):
        child = _spawn(COMMITTER, log_dir)
        assert child.stdout is not None
        first = child.stdout.readline()  # it is committing
        assert first.strip().isdigit(), child.stderr.read() if child.stderr else ""
        time.sleep(rng.uniform(0.0, 0.05))
        child.send_signal(signal.SIGKILL)
        rest, _ = child.communicate()
        reported = [int(x) for x in (first + rest).split()]
        with open(cp_path, "rb") as f:
            cp = fmt.decode_checkpoint(f.read(), cp_path)  # never torn: it decodes
        assert cp.name == "victim"
        assert cp.lsn in (reported[-1], reported[-1] + 1), (cp.lsn, reported[-3:])


def test_a_subscriber_killed_again_and_again_skips_nothing(log_dir: str, tmp_path: object) -> None:
    count = 30_000
    with logspool.open(log_dir, durability="os", segment_size_max=64 * 1024) as log:
        for start in range(0, count, 1000):
            log.append_many([f"job {i}".encode() for i in range(start, start + 1000)])
    handled = os.path.join(str(tmp_path), "handled")
    rng = random.Random(11)
    killed_mid_way = 0
    # Each kill lands after the child was seen handling records this round (observed, not a
    # fixed delay the machine's speed decides), at a random moment a little later.
    deadline = time.monotonic() + 120
    while killed_mid_way < 6 and time.monotonic() < deadline:
        before = os.path.getsize(handled) if os.path.exists(handled) else 0
        child = _spawn(CONSUMER, log_dir, handled)
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "started"
        while child.poll() is None and time.monotonic() < deadline:
            if os.path.exists(handled) and os.path.getsize(handled) > before:
                break
            time.sleep(0.001)
        time.sleep(rng.uniform(0.0, 0.03))
        child.send_signal(signal.SIGKILL)
        child.communicate()
        with open(handled) as f:
            left = len(set(f.read().split())) < count
        if not left:
            break  # all handled before the kill: no work left to kill in the middle of
        killed_mid_way += 1
    assert killed_mid_way >= 3  # the kills landed while there was work left
    child = _spawn(CONSUMER, log_dir, handled)
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0 and "done" in out, err
    with open(handled) as f:
        seen = [int(x) for x in f.read().split()]
    assert set(seen) == set(range(count))  # every record handled at least once
    duplicates = len(seen) - count
    assert duplicates >= 0  # redelivery after a kill is allowed (at-least-once), loss is not
    with logspool.open(log_dir, readonly=True) as log:
        assert [s.lsn for s in log.subscribers()] == [count]
