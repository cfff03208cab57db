"""A commit round's decision of plain SETs, in one process, against the least it must do.

Run: env -u PYTHONDONTWRITEBYTECODE .venv/bin/python benchmarks/bench_decision.py [--rounds N]

Issue 34's profile: a daemon's write crosses the store, the fold, the log, the segment and the
file system seam, a few Python calls each. This measures what that costs a decision, warm, on a
store held as the daemon holds it (``kv.open(single_writer=True, compact_in_background=True)``,
100,000 keys of 100 bytes, random keys overwritten), through the daemon's own path
(``RedisKV.decide``, ``plain_set_op``, ``write_many``), for rounds of 1 and of 13 SETs (SET x1;
SET x16's mean round), without the fsync (the round's ``sync`` is apart); and through the path
a round of plain SETs only takes there (``RedisKV.alone``: no decision). Against them, in the same
run: the floor, the same steps with none of the layers (under a lock: the key's last write looked
up, the op built, encoded, applied by ``State.apply_plain``, its record encoded with its CRC, one
``pwrite`` a round). The gap is what a write path without the generic layers could save.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import threading
import time

from logspool import _format as fmt
from logspool import kv
from logspool.kv import _ops as ops
from logspool.kv._state import State
from logspool.server._resp_kv import RedisKV

KEYS = 100_000
VALUE = b"v" * 100


def through_the_store(directory: str, keys: list[str], per_round: int, rounds: int, *, alone: bool) -> float:
    """Microseconds a round through the daemon's path: a decision (``RedisKV.decide``), or with
    ``alone`` the path a round of plain SETs only takes (``RedisKV.alone``: written without a
    decision, ``kv.Store._write_alone``)."""
    store = kv.open(os.path.join(directory, "kv"), durability="always", single_writer=True,
                    compact_in_background=True)  # fmt: skip
    try:
        front = RedisKV(store)
        for i in range(0, KEYS, 1000):
            with front.decide() as d:
                d.write_many(
                    [d.plain_set_op(f"key:{j:012d}", ops.BYTES, VALUE, None) for j in range(i, i + 1000)]
                )
        front.sync()
        k = 0
        started = time.perf_counter()
        for r in range(rounds):
            with front.alone() if alone else front.decide() as d:
                made = []
                for _ in range(per_round):
                    made.append(d.plain_set_op(keys[k], ops.BYTES, VALUE, None))
                    k += 1
                if d.write_many(made) is False:  # type: ignore[arg-type,func-returns-value]
                    with front.decide() as again:  # (a rotation: the round decides, as the daemon's)
                        again.write_many(made)  # type: ignore[arg-type]
            if r % 64 == 63:  # (the op log's page cache kept small; outside the clock's share)
                front.sync()
        return (time.perf_counter() - started) / rounds * 1e6
    finally:
        store.close()


def floor(directory: str, keys: list[str], per_round: int, rounds: int) -> float:
    """Microseconds a round of the same steps with none of the layers."""
    state = State(None)
    stamp = time.time_ns()
    for i in range(KEYS):
        state.apply(i, stamp, ops.Set(f"key:{i:012d}", ops.BYTES, VALUE, stamp, 0, 0, False))
    fd = os.open(os.path.join(directory, "floor.seg"), os.O_WRONLY | os.O_CREAT, 0o644)
    mutex = threading.RLock()
    lsn, offset, k = state.next_lsn, 0, 0
    try:
        started = time.perf_counter()
        for _ in range(rounds):
            with mutex:
                now = time.time_ns()
                records = []
                for _ in range(per_round):
                    key = keys[k]
                    k += 1
                    last = state.last_ts(key)
                    op = ops.Set(
                        key, ops.BYTES, VALUE, now if last is None or last < now else last, 0, 0, False
                    )
                    payload = ops.encode(op)
                    state.apply_plain(lsn, now, op)
                    records.append(fmt.encode_record(lsn, now, 0, payload))
                    lsn += 1
                data = b"".join(records)
                os.pwrite(fd, data, offset)
                offset += len(data)
        return (time.perf_counter() - started) / rounds * 1e6
    finally:
        os.close(fd)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=4000, help="rounds a measurement (default 4000)")
    ap.add_argument("--runs", type=int, default=5, help="measurements of each, in turns (default 5)")
    args = ap.parse_args()
    rng = random.Random(34)
    print("| plain SETs a round | through the store (RedisKV.decide), us a round | written alone "
          "(RedisKV.alone), us a round | floor, us a round | decide / floor | alone / floor |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for per_round in (1, 13):
        keys = [f"key:{rng.randrange(KEYS):012d}" for _ in range(args.rounds * per_round)]
        ours, alones, least = [], [], []
        for _ in range(args.runs):  # in turns: all see the same machine
            with tempfile.TemporaryDirectory(prefix="bench-decision-") as d:
                ours.append(through_the_store(d, keys, per_round, args.rounds, alone=False))
            with tempfile.TemporaryDirectory(prefix="bench-decision-") as d:
                alones.append(through_the_store(d, keys, per_round, args.rounds, alone=True))
            with tempfile.TemporaryDirectory(prefix="bench-decision-") as d:
                least.append(floor(d, keys, per_round, args.rounds))
        a, c, b = statistics.median(ours), statistics.median(alones), statistics.median(least)

        def cell(median: float, runs: list[float]) -> str:
            return f"{median:.1f} ({min(runs):.1f}-{max(runs):.1f})"

        print(
            f"| {per_round} | {cell(a, ours)} | {cell(c, alones)} | {cell(b, least)} | {a / b:.1f}x "
            f"| {c / b:.1f}x |",
            flush=True,
        )


if __name__ == "__main__":
    main()
