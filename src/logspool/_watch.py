"""Waking a reader when a log directory changes: polling for a short wait, inotify for a long one
where the kernel has it, polling otherwise.

A waiting reader must wake within milliseconds of an append made by *any* process, with no broker.
Linux's inotify reports every write to a file in a watched directory; we reach it through ctypes
(the standard library has no binding) and fall back to polling with a backoff where it is missing.
A short wait polls in steps of at most half a millisecond, and sets up no watch at all.

The race between "look for data" and "wait" is closed by order: ``wait`` returns at once after it
sets up the inotify watch, so the caller looks again with the watch in place; events are drained
*before* each look, and an event that arrives after the look stays queued, so the following wait
returns at once.
"""

from __future__ import annotations

import ctypes
import functools
import os
import select
import time
import weakref

from . import limits

_IN_MODIFY = 0x00000002
_IN_CLOSE_WRITE = 0x00000008
_IN_MOVED_TO = 0x00000080
_IN_CREATE = 0x00000100
_IN_DELETE = 0x00000200
_IN_NONBLOCK = 0o4000
_IN_CLOEXEC = 0o2000000
_FD_SETSIZE = 1024  # select() takes descriptors below this only
_MASK = _IN_MODIFY | _IN_CLOSE_WRITE | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """libc's inotify calls, loaded on the first watch that wants them. The process's own symbols
    (dlopen of NULL) hold libc's: no ctypes.util.find_library, which runs ldconfig in a child
    process and cost every `import logspool` tens of milliseconds (issue 29: CLI start-up)."""
    if os.environ.get("LOGSPOOL_NO_INOTIFY") == "1":
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    except (OSError, AttributeError):
        return None
    return libc


class DirectoryWatch:
    """Wait for any change in one directory. One per waiting reader; not shared between threads.

    It polls first, in steps of WATCH_POLL_S_MIN doubling to WATCH_POLL_S_FAST, and sets up
    inotify once it has waited WATCH_INOTIFY_AFTER_S in all: an inotify watch costs milliseconds
    to set up and more to take down (the kernel waits out a grace period), so a short wait, or a
    short-lived process, never pays for one; a reader tailing a log gets one within its first
    waits and keeps it. Without inotify it polls on, backing off to POLL_INTERVAL_S_MAX."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._fd = -1
        self._waited_s = 0.0  # time spent polling so far; inotify from WATCH_INOTIFY_AFTER_S on
        self._no_inotify = False  # until _start_inotify finds no libc
        self._poll_delay_s = limits.WATCH_POLL_S_MIN

    def _start_inotify(self) -> bool:
        """Set up the inotify watch; False if it cannot be had (then this watch polls for good)."""
        libc = _libc()
        if libc is None:
            return False
        fd = libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            return False  # out of inotify instances
        if libc.inotify_add_watch(fd, os.fsencode(self._path), _MASK) < 0:
            os.close(fd)
            return False
        self._fd = fd
        # A watch dropped without close() (a reader left to the garbage collector) gives its
        # descriptor back: inotify instances are few (128 a user by default), and a process
        # that ran out would make every later watch poll instead.
        self._close_fd = weakref.finalize(self, os.close, fd)
        self._poller = select.poll()
        self._poller.register(fd, select.POLLIN)
        return True

    @property
    def uses_inotify(self) -> bool:
        return self._fd >= 0

    def drain(self) -> None:
        """Forget the changes seen so far. Call before looking for new data."""
        if self._fd < 0:
            return
        for _ in range(1024):  # bounded; each read takes up to 64 KiB of queued events
            try:
                if not os.read(self._fd, 65536):
                    return
            except BlockingIOError:
                return

    def wait(self, timeout_s: float) -> None:
        """Return when the directory may have changed, or after ``timeout_s`` seconds (or
        sooner: the caller looks again, and waits again if nothing changed)."""
        if timeout_s <= 0:
            return
        if self._fd >= 0:
            if timeout_s < 0.001 and self._fd < _FD_SETSIZE:
                select.select([self._fd], [], [], timeout_s)  # microseconds; poll's unit is 1 ms
            else:
                self._poller.poll(timeout_s * 1000.0)
            return
        if not self._no_inotify and self._waited_s >= limits.WATCH_INOTIFY_AFTER_S:
            if self._start_inotify():
                return  # the caller looks again, now that changes are watched: no race
            self._no_inotify = True
        delay = min(self._poll_delay_s, timeout_s)
        slept_from = time.monotonic()
        time.sleep(delay)
        # The time that passed, not the time asked for: on a loaded machine a sleep lasts longer,
        # and a reader that has waited long must get its watch however many sleeps that took.
        self._waited_s += time.monotonic() - slept_from
        cap = limits.POLL_INTERVAL_S_MAX if self._no_inotify else limits.WATCH_POLL_S_FAST
        self._poll_delay_s = min(self._poll_delay_s * 2, cap)

    def reset_backoff(self) -> None:
        """Data arrived: poll quickly again (only matters while polling)."""
        self._poll_delay_s = limits.WATCH_POLL_S_MIN

    def close(self) -> None:
        if self._fd >= 0:
            self._close_fd()
            self._fd = -1
