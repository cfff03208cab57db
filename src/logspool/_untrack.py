"""CPython's ``PyObject_GC_UnTrack`` for the objects a store holds one of a key or a job.

A full collection of the cyclic garbage collector walks every tracked object, and every instance
of a class with slots is tracked: a store of 300,000 keys held 300,000 such objects, and a daemon
under sustained writes stopped every client for 150-940 ms at each full collection. Such an
object that refers to nothing that can refer back to it (strings, bytes, numbers, a tuple of
them) can never be part of a reference cycle, so the collector need not walk it: ``UNTRACK(obj)``
says so (a full collection of 300,000 key-value entries 62.6 -> 15.7 ms). Reference counting frees
it as before, and assigning its fields never tracks it again (the interpreter re-tracks only
tuples and dicts). ``UNTRACK`` is None on a Python without that C API (nothing is untracked).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast


def _untracker() -> Callable[[object], None] | None:
    try:
        import ctypes

        untrack = ctypes.pythonapi.PyObject_GC_UnTrack
    except (ImportError, AttributeError):
        return None
    untrack.argtypes = [ctypes.py_object]
    untrack.restype = None
    return cast("Callable[[object], None]", untrack)


UNTRACK = _untracker()
