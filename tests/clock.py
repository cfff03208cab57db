"""The clock the folded stores' tests move by hand (their ``clock`` seam: ns since the epoch)."""

from __future__ import annotations

START_S = 1_800_000_000


class Clock:
    def __init__(self) -> None:
        self.ns = START_S * 10**9

    def __call__(self) -> int:
        return self.ns

    def advance(self, seconds: float) -> None:
        self.ns += int(seconds * 1e9)
