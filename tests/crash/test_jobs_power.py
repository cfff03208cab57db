"""The job journal under simulated power loss and I/O errors, at every file-system operation.

The workload has puts, takes, acks, nacks, a release, delays, a TTL, dead letters, a retry and snapshots with
compaction; ``tests/crash/fold_torture.py`` has the oracle: after any cut, the journal opens to
the fold of a prefix of the reference run's ops at least as long as every call that returned had
made it. So no acknowledged op is lost and an acked job never comes back.
"""

from __future__ import annotations

from pathlib import Path

from logspool import jobs
from logspool.jobs import _ops as ops
from logspool.jobs._state import State
from tests.clock import Clock
from tests.crash import fold_torture as torture
from tests.crash.faultfs import FaultFS
from tests.crash.fold_torture import NS, Summary


def workload(root: Path, fs: FaultFS | None, acked: list[int], *, snapshots: bool) -> None:
    """``acked`` gets the journal's applied lsn after every call that returned."""
    clock = Clock()
    j = jobs.open(
        root / "j", fs=fs, clock=clock, max_deliveries=2, snapshot_ops_min=10**9, segment_size_max=4096
    )

    def done() -> None:
        acked.append(j._state.next_lsn)

    done()
    for i in range(6):
        j.put(f"k{i % 4}", b"v%d" % i + b"." * 300, priority=i % 2, delay=5 if i == 3 else None)
        done()
    j.put("t", b"ttl", ttl=3)
    done()
    a = j.take(lease=10)
    done()
    j.ack(a)
    done()
    b = j.take(lease=10)
    done()
    j.nack(b, error="first")
    done()
    if snapshots:
        j.snapshot()
        done()
    clock.ns += 20 * NS  # the TTL passes, the delay ends
    for _ in range(4):
        job = j.take(lease=1)
        done()
        if job:
            j.nack(job, error="again")
            done()
    for i in range(4):
        j.put(f"n{i}", b"w" * 200)
        done()
    if snapshots:
        j.snapshot()
        done()
    for _ in range(2):
        job = j.take(lease=1)
        done()
        if job:
            j.ack(job)
            done()
    j.put_many([(f"r{i}", b"r") for i in range(4)])
    done()
    batch = j.take_many(3, lease=1)  # batched decisions: one write each
    done()
    more = j.take_many(2, lease=1, ack=batch[:1])
    done()
    assert len(more) == 2
    j.release_many(more[1:])  # given back unstarted: raises the journal's version, then writes
    done()
    j.ack_many(batch[1:] + more[:1])
    done()
    clock.ns += 5 * NS
    for dead in j.dead_letters()[:1]:
        j.retry(dead)
        done()
    j.purge()
    done()
    j.close()


def summary(state: State) -> Summary:
    rows = sorted(
        (e.id, e.key, e.domain, e.payload, e.priority, e.state, e.not_before_ns, e.ttl_until_ns,
         e.deliveries, e.token, e.lease_until_ns, e.error)
        for e in state.jobs.values()
    )  # fmt: skip
    return (state.next_lsn, state.max_deliveries, tuple(sorted(state.counters.items())), tuple(rows))


SUBJECT = torture.Subject(workload, summary, State, ops.decode, jobs.open)


class TestJobJournal(torture.Sweeps):
    SUBJECT = SUBJECT
