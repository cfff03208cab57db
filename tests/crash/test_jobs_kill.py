"""Kill torture for the job journal: producers and workers (one taking a job at a time, one in
batches with take_many) are killed with SIGKILL at random moments, round after round, while they
share one journal; some die while opening it.

What each process reports after a call returned is the oracle (tests/jobs_agent.py). After every
round the journal must open and hold its invariants; at the end a drain takes what is left
(leases of killed workers expire after 1 s) and then: no job was ever taken again after its ack was
acknowledged, and every acknowledged put is covered (its key's payload, or a later one for the
same key, was taken). SIGKILL keeps the page cache: power loss is test_jobs_power.py.
``LOGSPOOL_TORTURE=N`` runs N times as many rounds.
"""

from __future__ import annotations

import collections
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from logspool import jobs
from tests.jobs_agent import parse

ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 12 * int(os.environ.get("LOGSPOOL_TORTURE", "1"))


def agent(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.jobs_agent", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "LEASE_S": "1"},
    )


def test_killed_producers_and_workers_lose_no_put_and_never_rerun_an_acked_job(tmp_path: Path) -> None:
    path = str(tmp_path / "j")
    never = str(tmp_path / "never")  # workers never see a stop file: they are killed
    rng = random.Random(7)
    outputs: list[list[list[str]]] = []
    jobs.open(path, snapshot_ops_min=300, segment_size_max=8192).close()
    # Rounds go on until enough was observed (at least ROUNDS, and 20 acks returned), within a
    # time bound: on a loaded machine kills at fixed delays may find the agents not started yet.
    deadline = time.monotonic() + 240
    acks_seen = 0
    keys_put: set[str] = set()
    rnd = 0
    while rnd < ROUNDS or ((acks_seen <= 20 or len(keys_put) < ROUNDS // 2) and time.monotonic() < deadline):
        procs = [agent("produce", path, f"p{rnd}", "8", "100000")]
        procs += [agent(kind, path, f"w{rnd}.{kind}", never) for kind in ("work", "work-batch")]
        for proc in rng.sample(procs, len(procs)):
            time.sleep(rng.choice([0.0, 0.02, 0.1, 0.3]))
            proc.send_signal(signal.SIGKILL)
        for proc in procs:
            outputs.append(parse(proc.communicate(timeout=60)[0]))
            acks_seen += sum(1 for words in outputs[-1] if words[0] == "acked")
            keys_put.update(words[1] for words in outputs[-1] if words[0] == "put")
        with jobs.open(path) as journal:
            journal._state.check()
        rnd += 1

    took: list[tuple[int, int, str, str]] = []  # id, token, key, payload
    acked: dict[int, int] = {}  # id -> token whose ack returned
    put_seq: dict[str, int] = {}
    for out in outputs:
        for words in out:
            if words[0] == "put":
                put_seq[words[1]] = max(put_seq.get(words[1], -1), int(words[2]))
            elif words[0] == "took":
                took.append((int(words[1]), int(words[2]), words[3], words[4]))
            elif words[0] == "acked":
                acked[int(words[1])] = int(words[2])
    # the drain: what killed workers held comes back when their 1 s leases run out
    with jobs.open(path) as journal:
        for _ in range(100_000):
            job = journal.take(lease=30, wait=1.5)
            if not job:
                break
            took.append((job.id, job.token, job.key, job.payload.decode()))
            journal.ack(job)
        stats = journal.stats()
        journal._state.check()
    assert stats.pending == stats.leased == 0, stats
    assert len(put_seq) >= ROUNDS // 2, "too few puts were acknowledged to prove anything"
    assert len(acked) > 20, "too few acks were acknowledged to prove anything"

    for job_id, token, _key, _payload in took:
        if job_id in acked:
            assert token <= acked[job_id], f"job {job_id} taken again (token {token}) after its ack returned"
    done: dict[str, int] = collections.defaultdict(lambda: -1)
    for _id, _token, key, payload in took:
        done[key] = max(done[key], int(payload.split(":")[1]))
    for key, seq in put_seq.items():
        assert done[key] >= seq, f"{key}: put {seq} was acknowledged but never taken (last taken {done[key]})"
