"""kill -9 of ``logspool serve`` while its key-value store's snapshot is being written by a forked
child (docs/DESIGN.md, "A snapshot written by a forked child"): the daemon restarts at once on
the same ports (the orphaned writer holds none of them), and every acknowledged SET is there.
A real daemon, real redis-py clients; runs until it has killed the daemon with its writer alive
(observed), within a time bound."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.processes import alive, children
from tests.server.conftest import Daemon

KEYS = 30_000  # (a snapshot's writer lives for tens of ms at this size; one every 60,000 SETs)


def holds_no_socket(writer: int) -> bool:
    """True once the orphaned ``writer`` is seen writing its file (so past the closing of what it
    was not given) and holding no socket (the daemon's ports, its clients' connections); False
    if it is gone first."""
    deadline = time.monotonic() + 5
    while alive(writer) and time.monotonic() < deadline:
        try:
            fds = [os.readlink(f"/proc/{writer}/fd/{fd}") for fd in os.listdir(f"/proc/{writer}/fd")]
        except FileNotFoundError:
            return False
        if any(target.endswith(".tmp") for target in fds):
            assert not [target for target in fds if target.startswith("socket:")], fds
            return True
        time.sleep(0.001)
    return False


def test_a_daemon_killed_while_its_snapshot_is_written_restarts_at_once(tmp_path: Path) -> None:
    d = Daemon(tmp_path / "data", resp=True)
    acked: dict[str, bytes] = {}  # the last value acknowledged of each key
    maybe: dict[str, bytes] = {}  # a value sent after it, unanswered when the daemon died
    orphans_seen = 0
    n = 0  # SETs sent so far (each value unique)
    writers: list[int] = []  # the snapshot writers alive when their daemon was killed
    deadline = time.monotonic() + 240
    try:
        while orphans_seen < 2:  # two kills with the writer alive
            assert time.monotonic() < deadline, f"a snapshot's writer was caught alive {orphans_seen} times"
            d.start()  # (the same ports each time: it fails if anything still holds them)
            assert d.proc is not None
            daemon_pid = d.proc.pid
            c = redis.Redis(port=d.resp_port, retry=Retry(NoBackoff(), 0))  # type: ignore[arg-type]
            caught: list[int] = []
            killed = threading.Event()

            def watch(
                pid: int = daemon_pid, caught: list[int] = caught, killed: threading.Event = killed
            ) -> None:
                while not killed.is_set():  # bounded: the writes below end by the deadline
                    kids = children(pid)
                    if kids:
                        os.kill(pid, signal.SIGKILL)  # kill -9 while the writer runs
                        caught += kids
                        killed.set()
                        return
                    time.sleep(0.001)

            watcher = threading.Thread(target=watch)
            watcher.start()
            try:
                while not killed.is_set() and time.monotonic() < deadline:
                    batch = {f"k{(n + j) % KEYS}": b"v%d" % (n + j) for j in range(500)}
                    pipe = c.pipeline(transaction=False)
                    for key, value in batch.items():
                        pipe.set(key, value)
                    try:
                        pipe.execute()
                    except (redis.ConnectionError, redis.TimeoutError, OSError):
                        maybe.update(batch)  # the daemon died: in flight, applied or not
                        break
                    acked.update(batch)  # (every SET of the pipeline answered: acknowledged)
                    for key in batch:
                        maybe.pop(key, None)
                    n += 500
            finally:
                killed.set()
                watcher.join(30)
                c.close()
            d.kill()
            orphans_seen += sum(holds_no_socket(kid) for kid in caught)
            writers += caught
        d.start()
        c = redis.Redis(port=d.resp_port)
        missing = [k for k, v in acked.items() if c.get(k) not in (v, maybe.get(k))]
        assert not missing, f"{len(missing)} acknowledged SETs are missing, e.g. {missing[:3]}"
        c.close()
        assert d.signal(signal.SIGTERM) == 0  # (a stop waits for its own snapshot)
        while any(alive(writer) for writer in writers):  # bounded: an orphan stops at its next step
            assert time.monotonic() < deadline + 60, "an orphaned writer did not stop"
            time.sleep(0.01)
        store = tmp_path / "data" / "kv" / "default"
        left = [n for n in os.listdir(store) if n.endswith(".tmp")]
        assert not left, f"snapshot files left behind: {left}"  # (orphans removed theirs; open the rest)
    finally:
        d.kill()
