"""The ``logspool`` command line: ``main`` is the ``logspool`` script (``logspool.cli:main``),
``python -m logspool`` and ``python -m logspool.cli``. Each command imports what it uses when it
runs, so that ``logspool --help`` and a one-record ``append`` start fast (issue 29)."""

from ._log import main

__all__ = ["main"]
