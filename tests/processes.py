"""What the tests ask of a process by its pid, through /proc (Linux)."""

from __future__ import annotations

import os


def alive(pid: int) -> bool:
    """Running (a zombie nobody reaped yet is not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def children(pid: int) -> list[int]:
    """The pids of the children of ``pid`` (of any of its threads); none once it is gone."""
    out: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(c) for c in f.read().split()]
    except (FileNotFoundError, ProcessLookupError):
        pass
    return out
