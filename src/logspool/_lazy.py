"""Names a package exports on first use (PEP 562), so that importing it costs only what is used.

``logspool`` uses it so that ``import logspool`` and the CLI's start-up do not pay for modules a
command never uses (issue 29); ``logspool.log`` so that the readers can import the log's ground
modules from it while its facade imports the readers (no import cycle).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(
    package: str, table: dict[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, whose module globals are
    ``namespace``: a name of ``table`` is imported from the module it maps to (relative to the
    package) on first use, and kept in ``namespace`` (later uses cost nothing)."""

    def getattr_(name: str) -> Any:
        where = table.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(where, package), name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted(set(namespace) | set(table))

    return getattr_, dir_
