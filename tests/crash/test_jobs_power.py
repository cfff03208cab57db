"""The job journal under simulated power loss and I/O errors, at every file-system operation.

A workload (puts, takes, acks, nacks, delays, a TTL, dead letters, a retry, snapshots with
compaction) runs through ``FaultFS`` with a hand-moved clock, so its ops are the same in every run.
A reference run without snapshots keeps the whole op log; folding each prefix of it gives the
state after every lsn. The oracle: after a power cut at any operation, with the disk holding only
what was fsynced (and a mix of what was not), opening the journal gives the state of some prefix
of the ops at least as long as every call that returned had made it, and a second open the
same. So no acknowledged op is lost, an acked job never comes back, and compaction never removes
an op a surviving snapshot does not cover. An I/O error at every operation must stop the call with
an error and leave a journal that opens to such a state too.
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import shutil
from pathlib import Path

import pytest

import logspool
from logspool import jobs
from logspool.jobs import _ops as ops
from logspool.jobs._state import State
from tests.crash.faultfs import Fault, FaultFS, PowerLoss, materialize

STATES_PER_CUT = 2 * int(os.environ.get("LOGSPOOL_TORTURE", "1"))
NS = 10**9


class Clock:
    def __init__(self) -> None:
        self.ns = 1_800_000_000 * NS

    def __call__(self) -> int:
        return self.ns


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
    for _ in range(3):
        job = j.take(lease=1)
        done()
        if job:
            j.ack(job)
            done()
    clock.ns += 5 * NS
    for dead in j.dead_letters()[:1]:
        j.retry(dead)
        done()
    j.purge()
    done()
    j.close()


def summary(state: State) -> tuple[object, ...]:
    rows = sorted(
        (e.id, e.key, e.domain, e.payload, e.priority, e.state, e.not_before_ns, e.ttl_until_ns,
         e.deliveries, e.token, e.lease_until_ns, e.error)
        for e in state.jobs.values()
    )  # fmt: skip
    return (state.next_lsn, state.max_deliveries, tuple(sorted(state.counters.items())), tuple(rows))


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[int, tuple[object, ...]]:
    """The state after every lsn of the workload (from a run that keeps its whole op log)."""
    root = tmp_path_factory.mktemp("ref")
    workload(root, None, [], snapshots=False)
    state = State()
    states = {0: summary(state)}
    with logspool.open(root / "j" / "ops", readonly=True) as log:
        for rec in log.read():
            state.apply(rec.lsn, rec.timestamp, ops.decode(rec.payload, "ref"))
            states[rec.lsn + 1] = summary(state)
    assert len(states) > 30
    return states


def recovered(target: Path) -> tuple[object, ...] | None:
    if not (target / "j" / "JOURNAL").exists():
        return None
    with jobs.open(target / "j", create=False, clock=Clock()) as j:
        first = summary(j._state)
        j._state.check()
    with jobs.open(target / "j", create=False, clock=Clock()) as j:
        assert summary(j._state) == first, "a second open changed the state"
    return first


def check(
    got: tuple[object, ...] | None, acked: list[int], reference: dict[int, tuple[object, ...]]
) -> str | None:
    if got is None:
        return None if not acked else "the journal is gone after its creation returned"
    lsn = got[0]
    assert isinstance(lsn, int)
    if acked and lsn < acked[-1]:
        return f"lost acknowledged ops: state at lsn {lsn}, calls had returned up to {acked[-1]}"
    if reference.get(lsn) != got:
        return f"state at lsn {lsn} is not the fold of the first {lsn} ops"
    return None


def judge(target: Path, acked: list[int], reference: dict[int, tuple[object, ...]]) -> str | None:
    """What is wrong with the journal in ``target`` after a fault (None: nothing)."""
    try:
        return check(recovered(target), acked, reference)
    except Exception as err:  # any failure to open is a finding
        return f"open failed: {err!r}"


def count_ops(base: Path) -> int:
    (base / "count").mkdir()
    fs = FaultFS(str(base / "count"))
    workload(base / "count", fs, [], snapshots=True)
    return fs.count


def test_power_loss_at_every_operation_leaves_a_prefix_with_every_acknowledged_op(
    fast_dir: Path, reference: dict[int, tuple[object, ...]]
) -> None:
    total = count_ops(fast_dir)
    rng = random.Random(3)
    violations, states = [], 0
    for n in range(1, total + 1):
        work = fast_dir / f"cut{n}"
        work.mkdir()
        fs = FaultFS(str(work), crash_at=n)
        acked: list[int] = []
        with contextlib.suppress(PowerLoss):
            workload(work, fs, acked, snapshots=True)
        fs.release()
        assert fs.crashed, f"operation {n} of {total} never reached"
        for k, state in enumerate(fs.crash_states(rng, STATES_PER_CUT)):
            target = fast_dir / f"after{n}.{k}"
            materialize(state, str(target))
            problem = judge(target, acked, reference)
            if problem:
                violations.append(f"cut {n} ({fs.kinds[n - 1]}), state {k}: {problem}")
            states += 1
            shutil.rmtree(target)
        shutil.rmtree(work)
    assert violations == []
    assert total > 100 and states == total * STATES_PER_CUT


@pytest.mark.parametrize("err", [errno.EIO, errno.ENOSPC], ids=["EIO", "ENOSPC"])
def test_an_io_error_at_every_operation_fails_the_call_and_the_journal_reopens(
    fast_dir: Path, reference: dict[int, tuple[object, ...]], err: int
) -> None:
    total = count_ops(fast_dir)
    violations = []
    for n in range(1, total + 1, 2):
        work = fast_dir / f"f{n}"
        work.mkdir()
        fs = FaultFS(str(work), fault=Fault(at=n, errno=err))
        acked: list[int] = []
        with contextlib.suppress(OSError, logspool.LogspoolError):
            workload(work, fs, acked, snapshots=True)
        fs.release()
        problem = judge(work, acked, reference)
        if problem:
            violations.append(f"fault at {n} ({fs.kinds[n - 1] if n <= len(fs.kinds) else '?'}): {problem}")
        shutil.rmtree(work)
    assert violations == []
