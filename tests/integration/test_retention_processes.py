"""Retention racing readers in other processes.

The parent appends records whose payload names their lsn and deletes old segments under a tight
size bound the whole time. Three reader processes follow the log as subscribers with
on_data_loss="skip". Each reader must see only whole, valid records (no CorruptionError, no torn
payload), in strictly increasing lsn order, contiguous except across the gaps it reports, and each
gap must be a range that retention really removed (below the earliest segment at the end).
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import textwrap

import logspool

READER = textwrap.dedent(
    """
    import json, sys, time, logspool
    log = logspool.open(sys.argv[1], readonly=True)
    sub = log.subscribe(sys.argv[2], start="earliest", on_data_loss="skip")
    print("subscribed", flush=True)
    lsns, bad = [], 0
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not lsns or lsns[-1] < 11_999):   # the writer's last
        rec = sub.next(timeout=1.0)
        if rec is None:
            continue
        if rec.payload != b"lsn %d " % rec.lsn * 8:
            bad += 1
        lsns.append(rec.lsn)
        if rec.lsn % 97 == 0:
            sub.commit()
            time.sleep(0.002)   # fall behind now and then
    print(json.dumps({"lsns": lsns, "gaps": [list(g[:2]) for g in sub.gaps], "bad": bad}))
    """
)


def test_retention_racing_readers_in_other_processes(log_dir: str) -> None:
    with logspool.open(log_dir, durability="os", segment_size_max=8192) as log:
        log.append(b"lsn 0 " * 8)
        readers = [
            subprocess.Popen(
                [sys.executable, "-c", READER, log_dir, f"reader-{i}"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for i in range(3)
        ]
        for proc in readers:  # each subscribed at lsn 0 (it says so; no fixed sleep)
            assert proc.stdout is not None and proc.stdout.readline() == "subscribed\n"
        policy = logspool.Retention(size_max=4 * 8192)
        removed = 0
        for lsn in range(1, 12_000):
            log.append(b"lsn %d " % lsn * 8)
            if lsn % 50 == 0:
                removed += len(log.enforce_retention(policy).removed)
        results = []
        for proc in readers:
            out, err = proc.communicate(timeout=180)
            assert proc.returncode == 0, err
            results.append(json.loads(out))
        first = log.info().first_lsn
    assert removed > 10 and first > 0
    for res in results:
        lsns, gaps = res["lsns"], res["gaps"]
        assert res["bad"] == 0
        assert lsns[0] == 0 and lsns[-1] == 11_999
        assert all(b > a for a, b in itertools.pairwise(lsns))
        holes = [[a + 1, b] for a, b in itertools.pairwise(lsns) if b != a + 1]
        assert holes == gaps  # every jump is a reported gap, and every gap a jump
        assert all(hi <= first for _lo, hi in gaps)
