"""Whether a log handle may write: open or closed, failed (fail-stop), read-only, forked.

Invariants:

- Fail-stop (fsyncgate): once ``fail`` recorded an error, the handle never writes, fsyncs or
  acknowledges again; every later call raises FailedError naming that error. An fsync that
  failed is never retried: the pages it could not write may be marked clean by the kernel.
- ``usable`` is False once any of these holds (closed, failed, read-only, a forked child): the
  one test on the append hot path; ``check_usable`` then says which.
- ``closed`` only ever goes from False to True (``Log.close``).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from ..errors import ClosedError, FailedError, ReadOnlyError


class HandleState:
    """The life of one handle; shared by the parts of the log that write. Any thread."""

    __slots__ = ("closed", "failure", "on_fail", "on_write", "path", "pid", "readonly", "usable")

    def __init__(self, path: str, *, readonly: bool) -> None:
        self.path = path
        self.readonly = readonly
        self.pid = os.getpid()
        self.closed = False
        self.failure: BaseException | None = None
        self.usable = not readonly
        # Told of the failure, once, on the thread that met it (the daemon stops: see
        # ``server.Stores.get``); None: nobody.
        self.on_fail: Callable[[str, BaseException], None] | None = None
        # Called by a writer once it holds the writer lock, before it writes a byte (the
        # daemon's ``Stores.settle`` knows so which logs a read may have seen written); None:
        # nobody.
        self.on_write: Callable[[], None] | None = None

    def fail(self, err: BaseException) -> None:
        """Stop this handle for good (fsyncgate: never retry an fsync, never ack past it)."""
        first = self.failure is None
        if first:
            self.failure = err
            if self.on_fail is not None:  # (before ``usable`` falls: see Stores.settle)
                self.on_fail(self.path, err)
        self.usable = False

    def failure_now(self) -> BaseException | None:
        return self.failure

    def check_usable(self) -> None:
        """Raise the reason this handle cannot write, if there is one."""
        if self.failure is not None:
            raise FailedError(self.path, f"log handle failed: {self.failure}; reopen the log")
        if self.closed:
            raise ClosedError(self.path)
        if self.readonly:
            raise ReadOnlyError(self.path, "the log was opened with readonly=True")
        if os.getpid() != self.pid:
            raise ClosedError(self.path, "a Log handle cannot be used across fork; open a new one")

    def check_open(self) -> None:
        if self.closed:
            raise ClosedError(self.path)
