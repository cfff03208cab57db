"""The command line's own cost (issue 29): start-up of `logspool --help` and of a one-record
`logspool append`, and `logspool cat` of a large log, each against a baseline run in the same
process pairs (A, B, A, B ...), whole processes timed from outside:

- start-up against `python -c pass` (the interpreter's own start, the floor no CLI goes below);
- cat against a Python program iterating ``log.read()`` and summing payload sizes (the library
  with no output), as the issue states the target: cat within 1.5x of ``log.read``.

Run it as a user's install runs: with bytecode cached (PYTHONDONTWRITEBYTECODE unset).

    .venv/bin/python benchmarks/bench_cli.py [--records 1000000] [--runs 11]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import logspool

_READ_ALL = """
import sys, logspool
n = 0
with logspool.open(sys.argv[1], readonly=True, create=False) as log:
    for r in log.read():
        n += len(r.payload)
"""


def _wall(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=env)
    return time.perf_counter() - start


def _paired(a: list[str], b: list[str], runs: int, env: dict[str, str]) -> tuple[float, float, float]:
    """Medians of A and B and the median of the pair-by-pair ratio A/B."""
    _wall(a, env), _wall(b, env)  # warm-up: page cache, bytecode
    times_a, times_b, ratios = [], [], []
    for _ in range(runs):
        ta, tb = _wall(a, env), _wall(b, env)
        times_a.append(ta)
        times_b.append(tb)
        ratios.append(ta / tb)
    return statistics.median(times_a), statistics.median(times_b), statistics.median(ratios)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="records in the log cat reads")
    parser.add_argument("--runs", type=int, default=11, help="pairs of runs for each line")
    args = parser.parse_args()
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    cli = shutil.which("logspool", path=os.path.dirname(sys.executable)) or "logspool"
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        small, big = os.path.join(tmp, "small"), os.path.join(tmp, "big")
        logspool.open(small).close()
        with logspool.open(big, durability="os") as log:
            for first in range(0, args.records, 10_000):
                count = min(10_000, args.records - first)
                log.append_many([b"record-%08d-" % (first + i) + b"x" * 80 for i in range(count)])
        script = os.path.join(tmp, "read_all.py")
        with open(script, "w") as f:
            f.write(_READ_ALL)
        floor = [sys.executable, "-c", "pass"]
        rows = [
            ("logspool --help", [cli, "--help"], "python -c pass", floor),
            (
                "logspool append LOG x (durability always)",
                [cli, "append", small, "x"],
                "python -c pass",
                floor,
            ),
            (
                f"logspool cat LOG > /dev/null ({args.records:,} records of 100 B)",
                [cli, "cat", big],
                "python: for r in log.read()",
                [sys.executable, script, big],
            ),
        ]
        print(f"| command | median s | baseline | median s | ratio (median of {args.runs} pairs) |")
        print("|---|---|---|---|---|")
        for name, a, base, b in rows:
            ta, tb, ratio = _paired(a, b, args.runs, env)
            print(f"| `{name}` | {ta:.3f} | {base} | {tb:.3f} | {ratio:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
