"""``single_writer=True``: a handle that holds the writer lock from open to close.

Other writers (other handles, other processes) cannot open the log while it is held and get
LockedError; readers, tailing readers and subscribers go on; the lock ends with the handle's close
or its process's death, and not later because a forked child inherited the descriptor.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import logspool


def test_single_writer_appends_reads_and_hands_over_at_close(log_dir: str) -> None:
    with logspool.open(log_dir, single_writer=True) as log:
        assert log.single_writer
        assert log.append(b"a") == 0
        assert log.append_many([b"b", b"c"]) == [1, 2]
        log.cutover()
        with log.exclusive() as tail:
            assert tail.append(b"d") == 3
        assert [r.payload for r in log.read()] == [b"a", b"b", b"c", b"d"]
    with logspool.open(log_dir) as log:  # an ordinary writer takes over, lsns go on
        assert log.append(b"e") == 4
    with logspool.open(log_dir, single_writer=True) as log:
        assert [r.payload for r in log.read()] == [b"a", b"b", b"c", b"d", b"e"]


def test_other_writers_are_refused_while_readers_and_tails_go_on(log_dir: str) -> None:
    with logspool.open(log_dir, single_writer=True, durability="os") as log:
        log.append(b"first")
        started = time.monotonic()
        with pytest.raises(logspool.LockedError) as info:
            logspool.open(log_dir, lock_timeout_s=0.2)
        assert 0.15 < time.monotonic() - started < 5
        assert info.value.path == log_dir
        with pytest.raises(logspool.LockedError):
            logspool.open(log_dir, single_writer=True, lock_timeout_s=0.1)
        with logspool.open(log_dir, readonly=True) as reader_log:
            reader = reader_log.reader(start="latest")
            threading.Timer(0.05, lambda: log.append(b"second")).start()
            rec = reader.next(timeout=5.0)
            assert rec is not None and rec.payload == b"second"
            reader.close()
        sub = log.subscribe("billing", start="earliest")
        got = [sub.next(timeout=1.0), sub.next(timeout=1.0)]
        assert [r.payload for r in got if r is not None] == [b"first", b"second"]
        sub.commit()
        sub.close()
    assert logspool.open(log_dir, lock_timeout_s=0.2).append(b"third") == 2


def test_bad_single_writer_settings_are_refused(log_dir: str) -> None:
    logspool.open(log_dir).close()
    with pytest.raises(ValueError, match="single_writer"):
        logspool.open(log_dir, readonly=True, single_writer=True)
    with pytest.raises(TypeError, match="single_writer must be True or False, not 'yes'"):
        logspool.open(log_dir, single_writer="yes")


_WRITER = """
import sys, logspool
log = logspool.open(sys.argv[1], single_writer=True, durability="always")
for i in range(1_000_000):
    log.append(b"r%d" % i)
    print(i, flush=True)
"""


def test_a_killed_single_writer_releases_the_log_with_every_acknowledged_record(log_dir: str) -> None:
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, log_dir], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    acked = -1
    for line in proc.stdout:
        acked = int(line)
        if acked >= 200:
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    with logspool.open(log_dir, lock_timeout_s=2) as log:  # the lock died with the process
        payloads = [r.payload for r in log.read()]
    assert len(payloads) >= acked + 1
    assert payloads == [b"r%d" % i for i in range(len(payloads))]


# (each line one os.write: with PYTHONUNBUFFERED, print writes a line's text and its end apart,
# and the child's line could come between them)
_FORKS = """
import os, sys, time, logspool
log = logspool.open(sys.argv[1], single_writer=True)
log.append(b"parent")
pid = os.fork()
if pid == 0:  # the child: its copy of the handle is unusable, and it outlives the parent
    try:
        log.append(b"child")
        os.write(1, b"child appended\\n")
    except logspool.ClosedError:
        os.write(1, b"child refused\\n")
    time.sleep(60)
    os._exit(0)
os.write(1, b"%d\\n" % pid)
time.sleep(60)
"""


def test_a_forked_child_does_not_keep_the_lock_of_a_killed_parent(log_dir: str) -> None:
    parent = subprocess.Popen([sys.executable, "-c", _FORKS, log_dir], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    lines = [parent.stdout.readline().strip(), parent.stdout.readline().strip()]
    child_pid = int(next(line for line in lines if line.isdigit()))
    try:
        assert "child refused" in lines
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        os.kill(child_pid, 0)  # the child still lives, holding its copies of the descriptors
        with logspool.open(log_dir, lock_timeout_s=2) as log:
            assert log.append(b"next") == 1
    finally:
        os.kill(child_pid, signal.SIGKILL)
