"""The ``logspool`` command line: ``main`` is the ``logspool`` script (``logspool.cli:main``),
``python -m logspool`` and ``python -m logspool.cli``.

One module per command group, each owning its subcommands' options, their work and their
output: ``_log`` (append, create, cat, tail, cutover, info, meta, monitor, demo), ``_subscriber``
(subscriber, retention), ``_check`` (verify, repair), ``_ckpt`` (ckpt), ``_torture`` (torture,
over the sweep in ``_sweep``), ``_jobs`` (jobs), ``_kv`` (kv), ``_server`` (serve, forward,
stats); ``_main`` builds the parser and dispatches; ``_args`` holds the argument types they share.

Invariants every module here keeps: the command line is thin over the public library (it
never writes a store's files itself); a command imports what it uses when it runs, so that
``logspool --help`` and a one-record ``append`` start fast (issue 29, benchmarks/bench_cli.py);
``--json`` on every command that prints a result; exit codes as ``_main`` states them.
"""

from ._main import main

__all__ = ["main"]
