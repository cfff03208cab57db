"""The cost of a GET's lookup in memory: the store's object graph against memory latency.

Run: env -u PYTHONDONTWRITEBYTECODE .venv/bin/python benchmarks/bench_get_lookup.py
     [--runs 7] [--gets 32000]   (~15 s, most of it filling the store)

Why: under ``redis-benchmark -t get -c 16 -P 16 -r 100000`` the daemon spends ~5.9 us of CPU a
GET (redis-server: 2.6 us), and a py-spy profile puts ~23% of the loop thread on one line of
``Session.gets_of`` (server/_resp.py), ``values.get(raw.decode())``, and ~7% on
``entry.value``. A random lookup over 100,000 keys walks ~5 dependent objects (the dict's index,
its entry, the key str, the ``Entry``, the value bytes), each likely a cache and TLB miss on this
VM, where a dependent random read over 64 MiB costs ~190-266 ns in C.

What: ns a GET, batches of 16 keys as ``GET -P16`` sends them, each batch's keys fresh ``bytes``
(``b"key:%012d"``, made before the batch's timer starts, as the parser's slices are fresh and
hot), the median of ``--runs`` runs, for keys drawn at random over all N = 100,000 keys and for
keys drawn from only 500 of them (cache-hot: 500 random keys of the store, so their objects are
spread over its pages as a hot set's would be; hotter still, the same 16 keys again, would hide
the TLB's misses); each batch timed alone, the timer's own cost subtracted; the cases:
1. the store: a real ``logspool.kv`` store in a temp dir (durability "os", single writer, as
   the daemon opens its own), filled through ``Store.set`` with N keys ``key:000000000000``...
   (in a random order, as ``-r`` SETs them) of 100-byte values, each value its own bytes (as
   each SET's are); timed: ``gets_of``'s work a batch, the daemon's own ``bulk_replies``
   (``Session.gets_of`` without the session's checks);
2. ready replies: a plain dict, key bytes -> the whole reply (``b"$100\\r\\n" + value +
   b"\\r\\n"``), ``b"".join(map(ready.get, keys))``: the "keep values ready to send" design;
3. the floor, none of our code: a pure-Python dependent walk (``i = perm[i]``) over a single
   cycle through N ints (Sattolo's shuffle), ns a step (a list slot and an int object, two
   dependent reads), and the same walk over a cycle of 500 ints; per step, not per GET.
Baseline: case 3 is the memory latency the machine gives Python at this size; case 1's random
figure against its hot one is what the object graph's misses cost a GET. Numbers on this
2-core Firecracker VM are noisy: the load average is printed before and after.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable

from logspool import kv
from logspool.server._resp import bulk_replies

N = 100_000
HOT = 500  # keys in the cache-hot case's working set
BATCH = 16  # GET -P16: the keys of one read
VALUE_SIZE = 100
NIL = b"$-1\r\n"  # RESP2's null bulk string (``Session.nil``)


def key_str(i: int) -> str:
    return f"key:{i:012d}"  # redis-benchmark's ``key:__rand_int__`` under -r


def gets_of(store: kv.Store, keys: list[bytes], requests: Counter[bytes]) -> bytes | None:
    """``Session.gets_of`` (server/_resp.py) without the session's ``multi``/``authed`` checks:
    the daemon's own ``bulk_replies`` for one GET -P16 batch, and its request count."""
    reply = bulk_replies(store, keys, NIL)
    if reply is not None:
        requests[b"GET"] += len(keys)
    return reply


def timer_floor_ns(tries: int = 20_000) -> float:
    """The cost of an empty timed region (two ``perf_counter_ns`` calls), subtracted from each
    batch: a batch is timed alone so that its keys can be made, untimed, just before it."""
    clock = time.perf_counter_ns
    spent = []
    for _ in range(tries):
        started = clock()
        spent.append(clock() - started)
    return statistics.median(spent)


def ns_per_get(
    lookup: Callable[[list[bytes]], object], picks: list[int], floor_ns: float, check: bool = True
) -> float:
    """One run: ns a GET over ``picks`` (indexes of keys), in batches of 16, each batch's keys
    made fresh just before its timer starts."""
    clock = time.perf_counter_ns
    spent = 0
    for at in range(0, len(picks), BATCH):
        keys = [b"key:%012d" % i for i in picks[at : at + BATCH]]
        started = clock()
        reply = lookup(keys)
        spent += clock() - started
        if check and reply is None:
            raise AssertionError("a GET left the fast path (a cold, expired or non-bytes value?)")
    batches = len(picks) // BATCH
    return (spent - floor_ns * batches) / len(picks)


def walk_ns_per_step(perm: list[int], steps: int) -> float:
    """One run of the dependent walk: each step's index is the value the previous step read,
    so no step can start before the one before it ends (the latency, not the bandwidth)."""
    i = 0
    started = time.perf_counter_ns()
    for _ in range(steps):
        i = perm[i]
    return (time.perf_counter_ns() - started) / steps


def one_cycle(n: int, rng: random.Random) -> list[int]:
    """A permutation of range(n) that is a single cycle (Sattolo's algorithm), so that the walk
    visits all n slots before it comes back: a random permutation's cycle through 0 might be
    short and cache-hot."""
    perm = list(range(n))
    for i in range(n - 1, 0, -1):
        j = rng.randrange(i)  # j < i, not <= i: that is what makes it one cycle
        perm[i], perm[j] = perm[j], perm[i]
    return perm


def spread(figures: list[float]) -> str:
    """The median, and the runs' range beside it: a run's noise is as worth seeing as its figure."""
    return f"{statistics.median(figures):,.0f} ({min(figures):,.0f}-{max(figures):,.0f})"


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7, help="runs a case (the median is shown)")
    ap.add_argument("--gets", type=int, default=32_000, help="GETs a run")
    args = ap.parse_args()
    rng = random.Random(1905)
    load_before = os.getloadavg()

    # The picks are made once, so every case looks up the same keys in the same order.
    hot_keys = rng.sample(range(N), HOT)  # spread over the store, as 500 random keys would be
    random_picks = [[rng.randrange(N) for _ in range(args.gets)] for _ in range(args.runs)]
    hot_picks = [[rng.choice(hot_keys) for _ in range(args.gets)] for _ in range(args.runs)]
    rows: list[tuple[str, list[float], list[float]]] = []

    with tempfile.TemporaryDirectory(prefix="bench-get-lookup-") as d:
        store = kv.open(d, durability="os", single_writer=True, snapshot_ops_min=10**9)
        try:
            rss_before = rss_bytes()
            started = time.perf_counter()
            order = list(range(N))
            rng.shuffle(order)  # (-r SETs keys in a random order: the objects lie in that order)
            for i in order:
                # each value its own bytes, as each SET's are (one shared object would be one
                # cache-hot line for every GET: a miss fewer than the daemon pays)
                store.set(key_str(i), b"%0*d" % (VALUE_SIZE, i))
            fill_s = time.perf_counter() - started
            # (roughly the store's footprint, the working set a random GET draws from)
            store_mib = (rss_bytes() - rss_before) / 2**20
            values = store._current().values
            assert len(values) == N and len(values[key_str(7)].value) == VALUE_SIZE

            # The "ready replies" design: the whole reply of each key, kept as bytes by key bytes.
            ready = {
                key.encode(): b"$%d\r\n" % len(entry.value) + entry.value + b"\r\n"
                for key, entry in values.items()
            }
            requests: Counter[bytes] = Counter()

            def store_lookup(keys: list[bytes]) -> bytes | None:
                return gets_of(store, keys, requests)

            def ready_lookup(keys: list[bytes]) -> bytes:
                return b"".join(map(ready.get, keys))  # type: ignore[arg-type]

            # The two must give the same replies, byte for byte, before their times mean anything.
            sample = [b"key:%012d" % i for i in random_picks[0][:BATCH]]
            assert store_lookup(sample) == ready_lookup(sample), "the two designs reply differently"

            floor_ns = timer_floor_ns()
            # A collection landing in a timed batch would be noise here (the daemon pays it
            # elsewhere); the store's entries are untracked, so nothing else changes.
            gc.collect()
            gc.disable()
            try:
                for name, lookup in (
                    ("1. store: bulk_replies (gets_of) over State.values", store_lookup),
                    ("2. ready replies: dict bytes -> reply, join(map(get))", ready_lookup),
                ):
                    lookup([b"key:%012d" % i for i in hot_keys[:BATCH]])  # warm the code path
                    randomly = [ns_per_get(lookup, p, floor_ns) for p in random_picks]
                    hotly = [ns_per_get(lookup, p, floor_ns) for p in hot_picks]
                    rows.append((name, randomly, hotly))
            finally:
                gc.enable()
        finally:
            store.close()

    # 3. The floor: a dependent walk with none of our code, at the store's size and at 500.
    steps = args.gets * 4
    big = one_cycle(N, rng)
    small = one_cycle(HOT, rng)
    gc.disable()
    try:
        randomly = [walk_ns_per_step(big, steps) for _ in range(args.runs)]
        hotly = [walk_ns_per_step(small, steps) for _ in range(args.runs)]
    finally:
        gc.enable()
    rows.append((f"3. floor: i = perm[i] over one cycle of {N:,} / {HOT} ints, ns a step", randomly, hotly))

    load_after = os.getloadavg()
    print(
        f"N = {N:,} keys of {VALUE_SIZE}-byte values (filled in {fill_s:.1f} s, RSS +{store_mib:.0f} MiB), "
        f"hot = {HOT} keys, "
        f"batches of {BATCH}, {args.gets:,} GETs a run, median of {args.runs} runs; "
        f"timer floor {floor_ns:.0f} ns a batch (subtracted)"
    )
    print()
    print("| case | ns per GET, random (min-max) | ns per GET, hot (min-max) | random / hot |")
    print("|---|---:|---:|---:|")
    for name, randomly, hotly in rows:
        ratio = statistics.median(randomly) / statistics.median(hotly)
        print(f"| {name} | {spread(randomly)} | {spread(hotly)} | {ratio:.1f} |")
    print()
    before, after = (" ".join(f"{x:.2f}" for x in load) for load in (load_before, load_after))
    print(
        f"load average (1, 5, 15 min): before {before}, after {after} "
        f"({os.cpu_count()} cores: near or above that, the runs shared the CPU)"
    )


if __name__ == "__main__":
    main()
