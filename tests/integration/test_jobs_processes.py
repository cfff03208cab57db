"""Many processes share one job journal: producers put while workers take and ack, all at once.

Three producer processes put 600 values each over 20 keys apiece (latest wins merges many of them),
three worker processes take and ack until the producers are done and nothing is left. Proven from
what the processes report after each call returned: every job is done exactly once (no job id
acked twice), nothing is lost (each key's last put is among the payloads done for it), a key's
generations run one after the other in put order, and the journal ends empty with its counters
matching what the workers did.
"""

from __future__ import annotations

import collections
import subprocess
import sys
from pathlib import Path

from logspool import jobs
from tests.jobs_agent import parse

ROOT = Path(__file__).resolve().parents[2]


def agent(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.jobs_agent", *args], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )


def test_producers_and_workers_in_many_processes_do_every_generation_exactly_once(tmp_path: Path) -> None:
    path = str(tmp_path / "j")
    stop = str(tmp_path / "stop")
    jobs.open(path).close()
    producers = [agent("produce", path, f"p{i}", "20", "600") for i in range(3)]
    workers = [agent(kind, path, f"w{i}", stop) for i, kind in enumerate(("work", "work", "work-batch"))]
    puts = [parse(p.communicate(timeout=300)[0]) for p in producers]
    assert all(p.returncode == 0 for p in producers)
    Path(stop).touch()
    outs = [parse(w.communicate(timeout=300)[0]) for w in workers]
    assert all(w.returncode == 0 for w in workers)

    took = {}
    acked = []
    for out in outs:
        for words in out:
            if words[0] == "took":
                took[int(words[2])] = (int(words[1]), words[3], words[4])
            elif words[0] == "acked":
                acked.append((int(words[1]), int(words[2])))
    ids = [job_id for job_id, _ in acked]
    assert len(ids) == len(set(ids)), "a job was done twice"
    done_by_key: dict[str, list[tuple[int, int]]] = collections.defaultdict(list)
    for job_id, token in acked:
        tid, key, payload = took[token]
        assert tid == job_id
        done_by_key[key].append((job_id, int(payload.split(":")[1])))
    last_put = {}
    for out in puts:
        for _, key, seq in out:
            last_put[key] = int(seq)
    assert len(last_put) == 60
    for key, seq in last_put.items():
        done = sorted(done_by_key[key])
        assert done and done[-1][1] == seq, f"{key}: last put {seq} not done last ({done[-3:]})"
        seqs = [s for _, s in done]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs), f"{key}: generations out of order"
    with jobs.open(path) as journal:
        stats = journal.stats()
    assert stats.pending == stats.leased == 0
    assert stats.counters["put"] == len(acked) == stats.counters["acked"] == stats.counters["taken"]
    assert stats.counters["put"] + stats.counters["updated"] == 1800
