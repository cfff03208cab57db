"""Kill torture for writers (the CKPTFile article's pummel, for the log): writer processes appending
across frequent rotations are killed with SIGKILL at random moments, over and over, some of them
while still opening (recovering) the log. After every kill the log must hold every record a writer
reported acknowledged, each at its lsn with its payload, and nothing else but records appended by
writers in order. (SIGKILL keeps the page cache: this tests the process-crash states; power loss is
tests/crash/test_power_loss.py.) ``LOGSPOOL_TORTURE=N`` runs N times as many rounds.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import logspool

ROUNDS = 40 * int(os.environ.get("LOGSPOOL_TORTURE", "1"))

WRITER = textwrap.dedent(
    """
    import sys, logspool
    log = logspool.open(sys.argv[1], segment_size_max=4096, index_interval=512, durability=sys.argv[2])
    print("open", flush=True)
    tag = sys.argv[3].encode()
    while True:
        lsn = log.append(b"%s:%d:" % (tag, log.next_lsn) + b"." * 150)
        if sys.argv[2] != "always":
            log.sync()
        sys.stdout.write(f"{lsn}\\n"); sys.stdout.flush()
    """
)


def test_writers_killed_at_random_moments_lose_nothing_acknowledged(tmp_path: Path) -> None:
    path = str(tmp_path / "log")
    rng = random.Random(11)
    acked: dict[int, bytes] = {}  # lsn -> the tag of the writer that was told it is durable
    killed_in_open = 0
    # At least ROUNDS rounds, and more until enough was observed (a kill during an open, more
    # acknowledged appends than rounds), within a time bound: the delays assume no machine speed.
    deadline = time.monotonic() + 240
    rnd = -1
    while rnd + 1 < ROUNDS or ((len(acked) <= ROUNDS or killed_in_open < 1) and time.monotonic() < deadline):
        rnd += 1
        durability = rng.choice(["always", "os"])
        tag = f"w{rnd}"
        child = subprocess.Popen(
            [sys.executable, "-c", WRITER, path, durability, tag], stdout=subprocess.PIPE, text=True
        )
        time.sleep(rng.choice([0.0, 0.01, 0.05, 0.1, 0.2]))
        child.send_signal(signal.SIGKILL)
        out = child.communicate()[0].split()
        if not out or out[0] != "open":
            killed_in_open += 1
        for line in out[1:]:
            acked[int(line)] = tag.encode()
        if not os.path.exists(os.path.join(path, "meta")):  # killed before any writer created it
            assert not acked, f"round {rnd}: appends acknowledged, and no log"
            continue
        with logspool.open(path, readonly=True) as log:
            got = {r.lsn: r.payload for r in log.read()}
        assert sorted(got) == list(range(len(got))), f"round {rnd}: lsns not contiguous from 0"
        for lsn, payload in got.items():
            wtag, wlsn, _rest = payload.split(b":", 2)
            assert int(wlsn) == lsn and wtag.startswith(b"w"), (
                f"round {rnd}: lsn {lsn} holds {payload[:20]!r}"
            )
        for lsn, wtag in acked.items():
            assert lsn in got and got[lsn].startswith(wtag + b":"), (
                f"round {rnd}: acknowledged lsn {lsn} lost"
            )
    assert len(acked) > ROUNDS, "the writers hardly ever appended before the kill"
    assert killed_in_open >= 1, "no kill landed while a writer was still opening (recovering)"
    report = logspool.verify(path)
    assert report.ok, [str(p) for p in report.problems]
    assert len(os.listdir(path)) > 6  # many rotations happened


CONCURRENT_WRITER = textwrap.dedent(
    """
    import sys, logspool
    log = logspool.open(sys.argv[1], segment_size_max=16384, index_interval=512, durability="os")
    tag = sys.argv[2].encode()
    for n in range(10**9):
        payload = b"%s:%d:" % (tag, n) + b"." * (n % 200)
        if n % 3:
            lsn = log.append(payload)
        else:
            lsn = log.append_many([payload, payload + b"+"])[0]
        sys.stdout.write(f"{lsn} {n}\\n"); sys.stdout.flush()
    """
)


def test_concurrent_writers_killed_at_random_moments_keep_every_record_at_its_lsn(tmp_path: Path) -> None:
    """Three writer processes append at once and one of them is killed at random, over and over:
    some kills land between a write and the tail hint that tells the others where it ends
    (FORMAT.md §8.1), or in the middle of that hint. Every record a writer was told it wrote
    must be at that lsn, with the lsns contiguous and the log valid."""
    path = str(tmp_path / "log")
    logspool.open(path, segment_size_max=16384, index_interval=512).close()
    rng = random.Random(12)
    told: dict[int, bytes] = {}  # lsn -> the payload's "tag:n:" its writer was told is there

    def start(k: int) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-c", CONCURRENT_WRITER, path, f"w{k}"], stdout=subprocess.PIPE, text=True
        )

    def collect(child: subprocess.Popen[str], tag: str) -> None:
        out = child.communicate()[0].splitlines()
        for line in out[:-1]:  # (the last line may be cut by the kill)
            lsn, n = line.split()
            told[int(lsn)] = f"{tag}:{n}:".encode()

    running = {k: start(k) for k in range(3)}
    for k in range(3, 3 + ROUNDS // 2):
        time.sleep(rng.choice([0.02, 0.05, 0.1, 0.2]))
        victim = rng.choice(sorted(running))
        running[victim].send_signal(signal.SIGKILL)
        collect(running.pop(victim), f"w{victim}")
        running[k] = start(k)
    for k, child in running.items():
        child.send_signal(signal.SIGKILL)
        collect(child, f"w{k}")
    with logspool.open(path, readonly=True) as log:
        got = {r.lsn: r.payload for r in log.read()}
    assert sorted(got) == list(range(len(got))), "lsns not contiguous from 0"
    assert len(told) > ROUNDS * 10, "the writers hardly ever appended"
    for lsn, prefix in told.items():
        assert got.get(lsn, b"").startswith(prefix), f"lsn {lsn}: {got.get(lsn, b'')[:20]!r}, told {prefix!r}"
    report = logspool.verify(path)
    assert report.ok, [str(p) for p in report.problems]
