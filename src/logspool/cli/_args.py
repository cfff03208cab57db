"""What the command groups share: the types of their arguments (durations, sizes, times, lsns,
counts) and the way they print times and sizes.

Invariants: stdlib only, imported at start-up by every group (nothing here may import the log,
the stores or anything slow: `logspool --help` imports this module). A type function raises
``argparse.ArgumentTypeError`` (argparse turns it into a usage error, exit 2) and never another
exception for a bad word. Times are printed as RFC 3339 in UTC with nanoseconds.
"""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime

_DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_duration(text: str) -> float:
    """Seconds from "90", "90s", "15m", "2h", "7d" or "1w"."""
    t = text.strip().lower()
    unit = t[-1:] if t[-1:] in _DURATION_UNITS else "s"
    number = t[:-1] if t[-1:] in _DURATION_UNITS else t
    try:
        value = float(number) * _DURATION_UNITS[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (like 90s, 15m, 2h, 7d)") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"a duration must be positive: {text!r}")
    return value


def parse_size(text: str) -> int:
    """Bytes from "4096", "512K", "64M", "10G" or "1T" (powers of 1024; a trailing B is allowed)."""
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    unit = t[-1:] if t[-1:] in _SIZE_UNITS and t[-1:] else ""
    number = t[: len(t) - len(unit)]
    try:
        value = int(float(number) * _SIZE_UNITS[unit])
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (like 4096, 512K, 64M, 10G)") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"a size must be positive: {text!r}")
    return value


def parse_time(text: str) -> datetime | float:
    """RFC 3339 / ISO 8601 (naive means UTC), seconds since the epoch, or a duration back from
    now ("90s", "15m", "1h", "7d": what kafka-console-consumer users and journalctl expect)."""
    try:
        return float(text)
    except ValueError:
        pass
    t = text.strip().lower()
    if t[-1:] in _DURATION_UNITS and t[:-1].replace(".", "", 1).isdigit():
        return time.time() - parse_duration(t)
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a time: {text!r} (use RFC 3339 like 2026-11-21T15:00:00Z, epoch seconds, or a "
            "duration back from now like 15m, 1h, 7d)"
        ) from None


def whole_number(text: str, least: int, what: str) -> int:
    """``text`` as an int of at least ``least``, or an argparse error naming ``what`` it should be."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"must be {least} or more, not {value}")
    return value


def whole_count(text: str) -> int:
    return whole_number(text, 0, "a count of 0 or more")


def positive_int(text: str) -> int:
    return whole_number(text, 1, "a whole number")


def parse_start(text: str) -> int | str:
    if text in ("earliest", "latest"):
        return text
    return whole_number(text, 0, "an lsn, 'earliest' or 'latest'")


def rfc3339(ns: int) -> str:
    dt = datetime.fromtimestamp(ns // 1_000_000_000, tz=UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S") + f".{ns % 1_000_000_000:09d}Z"


def human_size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def human_age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"
