"""A file written by a forked child: the child holds this process's memory as it was at the fork
(copy-on-write), so writing a large state costs this process the fork, not a copy of the state
made under its lock, and the encoding runs in another process, off this one's GIL (Redis writes
its RDB and rewrites its AOF so). The background snapshots of the key-value store and of the
job journal use it (``FoldedStore.snapshot``, docs/DESIGN.md "A snapshot written by a forked
child").

The child runs only the bytes' producer and the writes: it closes every descriptor it was not
given to keep (a daemon's listening socket and its clients' connections are not the child's to
hold open: a restarted daemon binds the same port), takes back the default action of the signals
that stop a process, never runs the parent's atexit handlers or flushes its buffers (``os._exit``)
and stops if the parent is gone. The parent names the file (``install_temp``) only once the child
has fsynced it and said so through a pipe (its exit status is read too where there is one: a
process that ignores SIGCHLD has its children reaped by the kernel); a child that failed reports
why through the same pipe, and the parent raises it as an OSError with the child's errno.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import os
import signal
import warnings
from collections.abc import Callable, Iterable, Iterator

from ._fs import FileSystem, temp_path, write_temp

# Python 3.12 warns at every fork of a process with threads; the child here runs only code that
# takes no lock another thread may have held at the fork (the producer's own, and the writes).
_FORK_WARNING = r".*use of fork\(\) may lead to deadlocks"
warnings.filterwarnings("ignore", message=_FORK_WARNING, category=DeprecationWarning, module=__name__)

_MESSAGE_MAX = 4000  # bytes of a child's error message (less than a pipe's buffer: it never blocks)
_DONE = b"done"  # the child's report that its file is written and fsynced


def available() -> bool:
    return hasattr(os, "fork")


class Child:
    """A forked writer of ``tmp``. ``wait`` once: it reaps the child."""

    def __init__(self, fs: FileSystem, pid: int, tmp: str, errors: int) -> None:
        self.fs = fs
        self.pid = pid
        self.tmp = tmp
        self._errors = errors

    def wait(self) -> None:
        """Wait for the child (the GIL let go). OSError, with the child's errno and message, if it
        did not write and fsync ``tmp`` (which is then removed). Its report through the pipe
        decides, not its exit status alone: a process that ignores SIGCHLD has its children
        reaped by the kernel, and ``waitpid`` then has nothing to say."""
        try:
            report = b""
            while len(report) <= _MESSAGE_MAX:  # bounded: until the child's end closes (EOF)
                more = os.read(self._errors, _MESSAGE_MAX + 16)
                if not more:
                    break
                report += more
        except BaseException:  # (interrupted: the child is stopped, reaped, its file removed)
            self.abandon()
            raise
        finally:
            os.close(self._errors)
        code: int | None = None
        with contextlib.suppress(ChildProcessError):  # (reaped already: SIGCHLD ignored)
            code = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
        if report == _DONE and code in (0, None):
            return
        with contextlib.suppress(FileNotFoundError):
            self.fs.unlink(self.tmp)  # (a child killed by a signal left it)
        number, _, message = report.decode("utf-8", "replace").partition("\n")
        if not message:
            message = (
                f"killed by signal {-code}" if code is not None and code < 0
                else f"it ended (exit status {code}) without saying it was done"
            )  # fmt: skip
        raise OSError(int(number) if number.isdigit() else errno.EIO,
                      f"{self.tmp}: the forked writer (pid {self.pid}) failed: {message}")  # fmt: skip

    def abandon(self) -> None:
        """Stop the child if it still runs, reap it and remove its file (the parent gave up on
        this snapshot: an error or an interrupt while it waited or named the file)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)
        with contextlib.suppress(FileNotFoundError):
            self.fs.unlink(self.tmp)


def write_in_child(
    fs: FileSystem,
    directory: str,
    name: str,
    produce: Callable[[], bytes | Iterable[bytes]],
    keep: Iterable[int] = (),
) -> Child:
    """Fork a child that writes ``produce()`` (run in the child) to a temporary file for
    ``directory/name`` and fsyncs it; ``keep``: descriptors the child keeps open (a lock it must
    hold while it writes). Returns at once in the parent; then ``Child.wait`` and
    ``install_temp(fs, directory, child.tmp, name)``."""
    salt = os.urandom(4).hex()
    parent = os.getpid()
    errors, report = os.pipe()
    try:
        pid = fs.fork()
    except BaseException:  # (ENOMEM, EAGAIN: no child; nothing of it left open)
        os.close(errors)
        os.close(report)
        raise
    if pid == 0:  # the child: this thread alone, the memory as it was at the fork
        code = 1
        tmp = temp_path(directory, name, os.getpid(), salt)
        try:
            os.close(errors)
            _alone({report, *keep})
            data = produce()
            pieces = [data] if isinstance(data, bytes) else data
            try:
                write_temp(fs, tmp, _while_alive(pieces, parent))
                _check_parent(parent)  # (the fsync is the longest step: the parent may be gone)
                os.write(report, _DONE)  # (the parent names the file only after reading this)
            except BaseException:
                with contextlib.suppress(OSError):  # (write_temp removed it if it failed itself)
                    fs.unlink(tmp)
                raise
            code = 0
        except BaseException as err:  # (anything: the parent must hear of it, and nothing else runs)
            number = err.errno if isinstance(err, OSError) and err.errno else errno.EIO
            message = f"{number}\n{type(err).__name__}: {err}".encode("utf-8", "replace")[:_MESSAGE_MAX]
            with contextlib.suppress(OSError):
                os.write(report, message)
        finally:
            os._exit(code)
    os.close(report)
    return Child(fs, pid, temp_path(directory, name, pid, salt), errors)


def _alone(keep: set[int]) -> None:
    """In the child: no collector runs (it would walk, and so copy, every page of objects), the
    signals that stop a process stop it, 0-2 are /dev/null (an orphan must not hold its parent's
    output open), and every other descriptor but ``keep`` is closed."""
    gc.disable()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.set_wakeup_fd(-1)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        if fd != null:
            os.dup2(null, fd)
    try:
        open_fds = [int(fd) for fd in os.listdir("/proc/self/fd")]  # (every one, above any limit)
    except OSError:
        open_fds = list(range(3, os.sysconf("SC_OPEN_MAX")))
    for fd in open_fds:
        if fd > 2 and fd not in keep:
            with contextlib.suppress(OSError):  # (the listing's own, closed already)
                os.close(fd)


def _while_alive(pieces: Iterable[bytes], parent: int) -> Iterator[bytes]:
    """The pieces, while the parent lives (an orphan stops at the next piece, its file removed)."""
    for piece in pieces:
        _check_parent(parent)
        yield piece


def _check_parent(parent: int) -> None:
    if os.getppid() != parent:
        raise ChildOrphaned(f"the process that forked this writer (pid {parent}) is gone")


class ChildOrphaned(Exception):
    pass
