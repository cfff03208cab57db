"""The ``logspool`` command's parser and dispatch: the top-level options (``--version``), the
order of the commands in ``logspool --help``, and the exit codes. Each command group adds its
own subcommands and runs them (``_log``, ``_subscriber``, ``_check``, ``_ckpt``, ``_torture``,
``_jobs``, ``_kv``, ``_server``).

Invariants:

- Exit codes: 0 ok; 1 an error, its message on stderr as ``logspool COMMAND: message``
  (``LogspoolError``, ``OSError``, ``ValueError``, ``TypeError``; a command may also end with
  ``SystemExit("message")``, which exits 1 too); 2 a usage error (argparse); 3 ``jobs take``
  found no ready job; 130 Ctrl-C. An exception of any other type is a defect of ours and is not
  caught.
- Start-up (issue 29): building the parser imports every group module, so a group imports at
  its top only the stdlib, ``limits``, ``errors``, ``_progress`` and ``_args``; what a command
  uses is imported when it runs. ``--version`` looks the version up only when asked.
- SIGPIPE is set to its default after parsing, so ``logspool cat | head`` ends quietly.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence
from typing import Any

from ..errors import LogspoolError
from . import _check, _ckpt, _jobs, _kv, _log, _server, _subscriber, _torture


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("logspool")
    except PackageNotFoundError:
        return "(not installed)"


class _VersionAction(argparse.Action):
    """--version, looking the version up only when asked (importlib.metadata costs ~15 ms)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        print(f"logspool {_version()}")
        parser.exit()


# Every command, in the order `logspool --help` lists them (the order they had before the split).
_COMMANDS = (
    _log.add_append,
    _log.add_create,
    _log.add_cat,
    _log.add_tail,
    _log.add_info,
    _check.add_verify,
    _check.add_repair,
    _log.add_cutover,
    _subscriber.add_subscriber,
    _subscriber.add_retention,
    _log.add_meta,
    _log.add_monitor,
    _ckpt.add_parser,
    _torture.add_parser,
    _jobs.add_parser,
    _kv.add_parser,
    _server.add_parser,
    _log.add_demo,
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="logspool", description="A durable, crash-safe journal.")
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", required=True)
    for add in _COMMANDS:
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `logspool cat | head` ends quietly
    try:
        code: int = args.func(args)
        return code
    except KeyboardInterrupt:
        return 130
    except (LogspoolError, OSError, ValueError, TypeError) as err:
        print(f"logspool {args.command}: {err}", file=sys.stderr)
        return 1
