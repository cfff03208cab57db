"""How far a long command is: one line on stderr, redrawn in place, only for a person watching.

Issue 29: `verify`, `repair` and `cat` of a large log ran for minutes in silence. The line is
drawn only when stderr is a terminal (a pipe, a file or a test harness never sees it), and, for a
command whose own output goes to that same terminal, not at all (it would tear the output). It is
redrawn at most every PROGRESS_REDRAW_S and erased when the command ends, so what stays on the
screen is only the command's own output. LOGSPOOL_PROGRESS=0 turns it off.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO

from . import limits


def wanted(*, output_to_terminal_too: bool = False) -> bool:
    """Whether a progress line should be drawn: stderr is a terminal and progress is not turned
    off, and (for a command that prints its results on stdout) stdout is not a terminal."""
    if os.environ.get("LOGSPOOL_PROGRESS") == "0":
        return False
    try:
        if not sys.stderr.isatty():
            return False
        return not (output_to_terminal_too and sys.stdout.isatty())
    except (AttributeError, ValueError):  # closed or replaced streams
        return False


class Progress:
    """``update(done)`` as work goes on; ``close()`` erases the line. ``total`` may be None."""

    def __init__(
        self, what: str, total: int | None, unit: str, *, on: bool, stream: TextIO | None = None
    ) -> None:
        self.what = what
        self.total = total
        self.unit = unit
        self.on = on
        self._stream = stream or sys.stderr
        self._drawn_at = -1.0
        self._width = 0

    def update(self, done: int) -> None:
        if not self.on:
            return
        now = time.monotonic()
        if self._drawn_at >= 0 and now - self._drawn_at < limits.PROGRESS_REDRAW_S:
            return
        self._drawn_at = now
        if self.total:
            share = min(100.0, 100.0 * done / self.total)
            text = f"{self.what}: {done:,} of {self.total:,} {self.unit} ({share:.0f}%)"
        else:
            text = f"{self.what}: {done:,} {self.unit}"
        pad = " " * max(0, self._width - len(text))
        self._width = len(text)
        self._stream.write("\r" + text + pad)
        self._stream.flush()

    def close(self) -> None:
        if self.on and self._width:
            self._stream.write("\r" + " " * self._width + "\r")
            self._stream.flush()
            self._width = 0

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
