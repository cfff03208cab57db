"""The background snapshot of the key-value store and of the job journal, written by a forked
child (``logspool._forked``): the same bytes as a snapshot written in a thread, a failure in the
child reported to the parent with nothing left behind, a child that holds none of its parent's
sockets, and an orphan that stops. Real processes and files; the faults come through the I/O
seam, whose calls the child makes on its copy of the seam's object."""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import resource
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from logspool import _forked, jobs, kv
from logspool._fs import FileSystem, install_temp
from logspool.errors import ClosedError
from tests.clock import Clock
from tests.processes import alive, children

FORKS = [0]  # os.fork calls of this process (a snapshot said to fork must fork)
os.register_at_fork(before=lambda: FORKS.__setitem__(0, FORKS[0] + 1))


class InThisProcess(FileSystem):
    """The real file system, said not to be shared with a child: the store snapshots in a thread."""


class FullForSnapshots(FileSystem):
    """The real file system, shared with a child, on which a snapshot's temporary file fills the
    disk while ``full`` (its writer in the child sees ENOSPC; the op log and checkpoints do not)."""

    def __init__(self) -> None:
        self.full = True
        self._temps: set[int] = set()

    def shared_with_children(self) -> bool:
        return True

    def open(self, path: str, flags: int, mode: int = 0o644) -> int:
        fd = super().open(path, flags, mode)
        if os.path.basename(path).startswith(".snapshot.") and path.endswith(".tmp"):
            self._temps.add(fd)
        return fd

    def close(self, fd: int) -> None:
        self._temps.discard(fd)
        super().close(fd)

    def write(self, fd: int, data: bytes) -> None:
        if self.full and fd in self._temps:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        super().write(fd, data)


def fill(path: Path, fs: FileSystem | None) -> kv.Store:
    clock = Clock()
    s = kv.open(path, fs=fs, clock=clock, compact_in_background=True, single_writer=True, durability="os")
    for i in range(300):
        s.set(f"k{i:03d}", b"v" * i)
        clock.advance(0.001)
    s.set("n", 5)
    s.set("f", 1.5)
    s.set("t", "text")
    s.set("gone", b"x")
    s.delete("gone")  # a tombstone
    s.set("memory only", b"m", persist=False)  # written as a tombstone
    s.set("expires", b"e", ttl=100)
    s.set("touched", b"t", touch=50)
    s.lock("k001", "me", 3600)
    return s


def newest_snapshot(path: Path) -> bytes:
    names = sorted(n for n in os.listdir(path) if n.startswith("snapshot.0"))
    return (path / names[-1]).read_bytes()


def temporary_files(path: Path) -> list[str]:
    return [n for n in os.listdir(path) if n.endswith(".tmp")]


@pytest.mark.parametrize("first", ["forked", "thread"])
def test_a_forked_snapshot_holds_the_bytes_a_thread_writes(tmp_path: Path, first: str) -> None:
    """One snapshot written each way from the same state (the second from the state the first
    loaded, at the same lsn): byte for byte the same, tombstones, locks and times included."""
    path = tmp_path / "kv"
    fs_first, fs_second = (None, InThisProcess()) if first == "forked" else (InThisProcess(), None)
    s = fill(path, fs_first)
    forks = FORKS[0]
    assert s.snapshot() is not None
    assert (FORKS[0] > forks) == (first == "forked")
    s.close()
    written_first = newest_snapshot(path)
    with kv.open(path, fs=fs_second, compact_in_background=True, single_writer=True) as s:
        forks = FORKS[0]
        assert s.snapshot() is not None
        assert (FORKS[0] > forks) == (first == "thread")
        assert s["k299"] == b"v" * 299 and "memory only" not in s and "gone" not in s
    assert newest_snapshot(path) == written_first
    assert temporary_files(path) == []


@pytest.mark.parametrize("first", ["forked", "thread"])
def test_a_journals_forked_snapshot_holds_the_bytes_a_thread_writes(tmp_path: Path, first: str) -> None:
    """As the store's: a journal with jobs pending, delayed, leased and acked, and a setting (its
    max deliveries) that the child must take from the state as it is, not from the op log (it
    holds none of its parent's files)."""
    path = tmp_path / "j"
    fs_first, fs_second = (None, InThisProcess()) if first == "forked" else (InThisProcess(), None)
    clock = Clock()
    j = jobs.open(path, fs=fs_first, clock=clock, compact_in_background=True, max_deliveries=2)
    j.put_many([(f"k{i}", b"p%d" % i) for i in range(100)], priority=2)
    j.put("later", b"l", delay=3600)
    taken = j.take(60)
    j.ack(j.take(60))
    clock.advance(1)
    forks = FORKS[0]
    assert j.snapshot() is not None
    assert (FORKS[0] > forks) == (first == "forked")
    j.close()
    written_first = newest_snapshot(path)
    with jobs.open(path, fs=fs_second, compact_in_background=True) as j:
        forks = FORKS[0]
        assert j.snapshot() is not None
        assert (FORKS[0] > forks) == (first == "thread")
        assert j.max_deliveries == 2 and j.get("k99")[0].payload == b"p99"
    assert newest_snapshot(path) == written_first
    assert temporary_files(path) == []
    assert taken.payload == b"p0"


def test_a_snapshot_writer_that_fails_in_the_child_is_reported_and_leaves_nothing(tmp_path: Path) -> None:
    fs = FullForSnapshots()
    path = tmp_path / "kv"
    s = fill(path, fs)
    with pytest.raises(OSError) as err:
        s.snapshot()
    assert err.value.errno == errno.ENOSPC
    assert "forked writer" in str(err.value) and "No space left on device" in str(err.value)
    assert sorted(os.listdir(path)) == ["JOURNAL", "ops", "snapshot.lock"]  # no snapshot, no temporary file
    s.set("after", b"still written")  # the store goes on
    fs.full = False
    assert s.snapshot() is not None
    s.close()
    with kv.open(path) as s:
        assert s["after"] == b"still written" and s["k123"] == b"v" * 123
    assert temporary_files(path) == []


def test_a_process_that_ignores_sigchld_still_gets_its_snapshot(tmp_path: Path) -> None:
    """The kernel reaps the children of a process that ignores SIGCHLD, so no exit status is left
    to wait for: the writer's report through its pipe says that its file is written."""
    path = tmp_path / "kv"
    previous = signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    try:
        s = fill(path, None)
        assert s.snapshot() is not None
        s.close()
    finally:
        signal.signal(signal.SIGCHLD, previous)
    assert temporary_files(path) == [] and newest_snapshot(path)
    with kv.open(path) as s:
        assert s["k200"] == b"v" * 200 and s["n"] == 5


def test_the_child_holds_none_of_its_parents_sockets(tmp_path: Path) -> None:
    """A daemon's listening socket stays its own: closed by the daemon (or with it, killed), its
    port can be bound again while a snapshot's writer still runs."""
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen()
    port = listening.getsockname()[1]
    gate_r, gate_w = os.pipe()
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    above = min(900, soft - 1)  # above every fd the child keeps
    high = fcntl.fcntl(listening.fileno(), fcntl.F_DUPFD_CLOEXEC, above)

    def produce() -> Iterator[bytes]:
        yield b"first piece, "
        os.read(gate_r, 1)  # the child waits here until the test lets it go on
        yield b"second piece"

    child = _forked.write_in_child(FileSystem(), str(tmp_path), "out", produce, keep=(gate_r,))
    try:
        wait_for_file(tmp_path)  # (the child closes what it does not keep before it starts its file)
        fds = {
            int(fd): os.readlink(f"/proc/{child.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{child.pid}/fd")
        }
        assert not [target for target in fds.values() if target.startswith("socket:")], fds
        assert gate_r in fds and gate_w not in fds
        listening.close()
        os.close(high)
        with socket.socket() as again:  # the child would hold the port if it had kept the socket
            again.bind(("127.0.0.1", port))
    finally:
        os.write(gate_w, b"!")
        os.close(gate_w)
        os.close(gate_r)
        child.wait()  # (reaped whatever failed above)
    install_temp(FileSystem(), str(tmp_path), child.tmp, "out")
    assert (tmp_path / "out").read_bytes() == b"first piece, second piece"


@pytest.mark.parametrize("where", ["between pieces", "in the fsync"])
def test_an_orphaned_writer_stops_and_removes_its_file(tmp_path: Path, where: str) -> None:
    """The process that forked a writer is killed (kill -9, as a daemon may be) while the writer
    is between two pieces, or in the fsync of its whole file (its longest step, after the last
    piece): the writer stops and removes its temporary file; nothing is ever named."""
    gate = tmp_path / "gate"
    script = textwrap.dedent(f"""
        import os, sys, time
        from logspool import _forked
        from logspool._fs import FileSystem

        def wait_for_gate():
            while not os.path.exists({str(gate)!r}):  # (the test opens it once the parent is dead)
                time.sleep(0.01)

        class SlowFsync(FileSystem):
            def shared_with_children(self):
                return True

            def fsync(self, fd):
                wait_for_gate()
                super().fsync(fd)

        def produce():
            yield b"x" * 1000
            if {where == "between pieces"!r}:
                wait_for_gate()
            yield b"y" * 1000

        fs = FileSystem() if {where == "between pieces"!r} else SlowFsync()
        child = _forked.write_in_child(fs, {str(tmp_path)!r}, "out", produce)
        print(child.pid, flush=True)
        time.sleep(600)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, cwd=os.getcwd())
    assert parent.stdout is not None
    with parent.stdout:
        writer = int(parent.stdout.readline())
    wait_for_file(tmp_path)
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait(30)
    gate.touch()
    deadline = time.monotonic() + 30
    while alive(writer):
        assert time.monotonic() < deadline, "the orphaned writer did not stop"
        time.sleep(0.01)
    assert not temporary_files(tmp_path) and not (tmp_path / "out").exists()


def test_a_snapshot_file_left_by_a_process_gone_is_removed_at_open(tmp_path: Path) -> None:
    """A forked writer whose parent died after the writer said it was done, before it named the
    file, leaves it behind: the next open removes it (a live process's stays)."""
    path = tmp_path / "kv"
    kv.open(path).close()
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    gone = path / f".snapshot.0000000000000001.{int(dead.stdout)}.0a0b0c0d.tmp"
    live = path / f".snapshot.0000000000000001.{os.getpid()}.0a0b0c0d.tmp"
    gone.write_bytes(b"half a snapshot")
    live.write_bytes(b"being written")
    with kv.open(path) as s:
        s.set("a", b"1")
    assert not gone.exists() and live.exists()


class FullOfProcesses(FileSystem):
    """The real file system, on a machine that cannot fork now (EAGAIN)."""

    def shared_with_children(self) -> bool:
        return True

    def fork(self) -> int:
        raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN))


def test_a_store_that_cannot_fork_snapshots_from_a_copy(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "kv"
    s = fill(path, FullOfProcesses())
    with caplog.at_level(logging.WARNING, logger="logspool"):
        assert s.snapshot() is not None
    assert "no fork for the snapshot" in caplog.text
    s.close()
    written = newest_snapshot(path)
    with kv.open(path, fs=InThisProcess(), compact_in_background=True) as s:  # the same bytes
        assert s.snapshot() is not None
    assert newest_snapshot(path) == written and temporary_files(path) == []


class RenameFails(FileSystem):
    """The real file system, shared with a child, on which naming a snapshot fails (EIO)."""

    def shared_with_children(self) -> bool:
        return True

    def rename(self, src: str, dst: str) -> None:
        if os.path.basename(src).startswith(".snapshot."):
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        super().rename(src, dst)


def test_a_snapshot_that_cannot_be_named_leaves_no_file_and_no_child(tmp_path: Path) -> None:
    path = tmp_path / "kv"
    s = fill(path, RenameFails())
    before = set(children(os.getpid()))
    with pytest.raises(OSError) as err:
        s.snapshot()
    assert err.value.errno == errno.EIO
    assert temporary_files(path) == [] and not [n for n in os.listdir(path) if n.startswith("snapshot.0")]
    assert not set(children(os.getpid())) - before  # the writer reaped (a zombie would be listed)
    s.set("after", b"still written")
    s.close()
    with kv.open(path) as s:
        assert s["after"] == b"still written"


def test_close_waits_for_every_snapshot_it_let_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A decision that ends while the store closes starts no snapshot: close returns with no
    snapshot running, no file half-written, and no error logged (trials until snapshots were
    running at the close, within a bound)."""
    busy_closes = 0
    deadline = time.monotonic() + 60
    trial = 0
    while busy_closes < 5:
        assert time.monotonic() < deadline, f"a snapshot was running at only {busy_closes} closes"
        trial += 1
        path = tmp_path / f"kv{trial}"
        s = kv.open(
            path, compact_in_background=True, single_writer=True, durability="os", snapshot_ops_min=50
        )
        stop = threading.Event()

        def write(s: kv.Store = s, stop: threading.Event = stop) -> None:
            i = 0
            while not stop.is_set():
                try:
                    s.set(f"k{i % 2000}", b"v%d" % i)
                except ClosedError:
                    return
                i += 1

        writer = threading.Thread(target=write)
        with caplog.at_level(logging.ERROR, logger="logspool"):
            writer.start()
            wait_until(lambda path=path: any(n.startswith("snapshot.0") for n in os.listdir(path)))
            busy_closes += any(t.name.endswith("-compact") for t in threading.enumerate())
            s.close()
            running = [t.name for t in threading.enumerate() if t.name.endswith("-compact")]
            stop.set()
            writer.join(30)
        assert not running, running
        assert temporary_files(path) == []
    assert "snapshot failed" not in caplog.text


def wait_until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, "not within 30 s"
        time.sleep(0.001)


def wait_for_file(path: Path) -> None:
    """Until a writer has started its temporary file in ``path`` (30 s at most)."""
    deadline = time.monotonic() + 30
    while not temporary_files(path):
        assert time.monotonic() < deadline, "the writer never started its file"
        time.sleep(0.01)
