"""``logspool torture corrupt``: the corruption sweep of every store (a log, a job journal, a
key-value store, a checkpointed file), run and reported. The sweep itself is ``_sweep.py``,
imported when the command runs: it starts child processes and would slow every start-up.

Invariant: exit 0 only when the sweep found no silent loss, no wrong data and no defect.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def _cmd_torture(args: argparse.Namespace) -> int:
    from . import _sweep

    if args.trials < 1:
        raise SystemExit(f"logspool torture corrupt: --trials must be 1 or more, not {args.trials}")
    report = _sweep.sweep(
        args.trials,
        seed=args.seed,
        stores=tuple(args.store or _sweep.STORES),
        modes=tuple(args.mode or _sweep.MODES),
        workdir=args.dir,
        progress=None if args.json else lambda line: print(line, file=sys.stderr, flush=True),
    )
    if args.json:
        print(_sweep.main_json(report))
    else:
        print(report.table())
        for example in report.examples:
            print(example)
        print("ok: no silent loss, no wrong data" if report.ok else "FAILED: silent loss or wrong data")
    return 0 if report.ok else 1


def add_parser(sub: Any) -> None:
    p = sub.add_parser("torture", help="torture tools for every store: corrupt (the corruption sweep)")
    actions = p.add_subparsers(dest="action", required=True)
    a = actions.add_parser(
        "corrupt",
        help="damage copies of a log, a job journal, a kv store and a checkpointed file at random; "
        "classify each trial (error, exact, loss, wrong)",
    )
    a.add_argument("--trials", type=int, default=200, help="trials per store and mode (default 200)")
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--store", action="append", choices=("log", "jobs", "kv", "ckpt"), help="repeatable")
    a.add_argument("--mode", action="append", choices=("clean", "kill"), help="repeatable")
    a.add_argument("--dir", help="where the copies are made (default: the system's temporary directory)")
    a.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_torture)
