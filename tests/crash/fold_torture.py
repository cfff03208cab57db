"""The power-loss and I/O-error sweeps for the folded stores (job journal, key-value store).

A subject's workload runs through ``FaultFS`` with a hand-moved clock, so its ops are the same in
every run. A reference run without snapshots keeps the whole op log; folding each prefix of it gives
the state after every lsn. The oracle: after a power cut at any operation, with the disk holding
only what was fsynced (and a mix of what was not), opening the store gives the state of some
prefix of the ops at least as long as every call that returned had made it, and a second open the
same. So no acknowledged op is lost and compaction never removes an op a surviving snapshot does
not cover. An I/O error at every operation must stop the call with an error and leave a store
that opens to such a state too.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import os
import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import logspool
from tests.clock import Clock
from tests.crash.faultfs import Fault, FaultFS, PowerLoss, materialize

STATES_PER_CUT = 2 * int(os.environ.get("LOGSPOOL_TORTURE", "1"))
NS = 10**9
NAME = "j"  # the store's directory under a run's root


Summary = tuple[object, ...]


@dataclass(frozen=True)
class Subject:
    """``workload(root, fs, acked, snapshots=)`` appends the store's applied lsn to ``acked`` after
    every call that returned; ``summary(state)`` starts with the state's next lsn."""

    workload: Callable[..., None]
    summary: Callable[[Any], Summary]
    new_state: Callable[[], Any]
    decode: Callable[[bytes, str], Any]
    open: Callable[..., Any]  # open(path, create=False, clock=Clock())


def reference(subject: Subject, root: Path) -> dict[int, Summary]:
    """The state after every lsn of the workload (from a run that keeps its whole op log)."""
    subject.workload(root, None, [], snapshots=False)
    state = subject.new_state()
    states = {0: subject.summary(state)}
    with logspool.open(root / NAME / "ops", readonly=True) as log:
        for rec in log.read():
            state.apply(rec.lsn, rec.timestamp, subject.decode(rec.payload, "ref"))
            states[rec.lsn + 1] = subject.summary(state)
    assert len(states) > 20
    return states


def recovered(subject: Subject, target: Path) -> Summary | None:
    if not (target / NAME / "JOURNAL").exists():
        return None
    with subject.open(target / NAME, create=False, clock=Clock()) as store:
        first = subject.summary(store._state)
        store._state.check()
    with subject.open(target / NAME, create=False, clock=Clock()) as store:
        assert subject.summary(store._state) == first, "a second open changed the state"
    return first


def check(got: Summary | None, acked: list[int], states: dict[int, Summary]) -> str | None:
    if got is None:
        return None if not acked else "the store is gone after its creation returned"
    lsn = got[0]
    assert isinstance(lsn, int)
    if acked and lsn < acked[-1]:
        return f"lost acknowledged ops: state at lsn {lsn}, calls had returned up to {acked[-1]}"
    if states.get(lsn) != got:
        return f"state at lsn {lsn} is not the fold of the first {lsn} ops"
    return None


def judge(subject: Subject, target: Path, acked: list[int], states: dict[int, Summary]) -> str | None:
    """What is wrong with the store in ``target`` after a fault (None: nothing)."""
    try:
        return check(recovered(subject, target), acked, states)
    except Exception as err:  # any failure to open is a finding
        return f"open failed: {err!r}"


def count_ops(subject: Subject, base: Path) -> int:
    (base / "count").mkdir()
    fs = FaultFS(str(base / "count"))
    subject.workload(base / "count", fs, [], snapshots=True)
    return fs.count


def power_loss_sweep(subject: Subject, base: Path, states: dict[int, Summary]) -> tuple[list[str], int]:
    """Cut the power at every file-system operation; the violations, and how many operations."""
    total = count_ops(subject, base)
    rng = random.Random(3)
    violations, seen = [], 0
    for n in range(1, total + 1):
        work = base / f"cut{n}"
        work.mkdir()
        fs = FaultFS(str(work), crash_at=n)
        acked: list[int] = []
        with contextlib.suppress(PowerLoss):
            subject.workload(work, fs, acked, snapshots=True)
        gc.collect()  # the abandoned store's finalizers close its fds before release() does
        fs.release()
        assert fs.crashed, f"operation {n} of {total} never reached"
        for k, state in enumerate(fs.crash_states(rng, STATES_PER_CUT)):
            target = base / f"after{n}.{k}"
            materialize(state, str(target))
            problem = judge(subject, target, acked, states)
            if problem:
                violations.append(f"cut {n} ({fs.kinds[n - 1]}), state {k}: {problem}")
            seen += 1
            shutil.rmtree(target)
        shutil.rmtree(work)
    assert seen == total * STATES_PER_CUT
    return violations, total


def io_error_sweep(subject: Subject, base: Path, states: dict[int, Summary], err: int) -> list[str]:
    """Fail every other file-system operation with ``err``; the violations."""
    total = count_ops(subject, base)
    violations = []
    for n in range(1, total + 1, 2):
        work = base / f"f{n}"
        work.mkdir()
        fs = FaultFS(str(work), fault=Fault(at=n, errno=err))
        acked: list[int] = []
        with contextlib.suppress(OSError, logspool.LogspoolError):
            subject.workload(work, fs, acked, snapshots=True)
        gc.collect()  # the abandoned store's finalizers close its fds before release() does
        fs.release()
        problem = judge(subject, work, acked, states)
        if problem:
            violations.append(f"fault at {n} ({fs.kinds[n - 1] if n <= len(fs.kinds) else '?'}): {problem}")
        shutil.rmtree(work)
    return violations


class Sweeps:
    """The sweeps as tests: a test module defines ``class TestX(Sweeps)`` with ``SUBJECT`` set."""

    SUBJECT: Subject

    @pytest.fixture(scope="class")
    @classmethod
    def states(cls, tmp_path_factory: pytest.TempPathFactory) -> dict[int, Summary]:
        return reference(cls.SUBJECT, tmp_path_factory.mktemp("ref"))

    def test_power_loss_at_every_operation_leaves_a_prefix_with_every_acknowledged_op(
        self, fast_dir: Path, states: dict[int, Summary]
    ) -> None:
        violations, total = power_loss_sweep(self.SUBJECT, fast_dir, states)
        assert violations == []
        assert total > 100

    @pytest.mark.parametrize("err", [errno.EIO, errno.ENOSPC], ids=["EIO", "ENOSPC"])
    def test_an_io_error_at_every_operation_fails_the_call_and_the_store_reopens(
        self, fast_dir: Path, states: dict[int, Summary], err: int
    ) -> None:
        assert io_error_sweep(self.SUBJECT, fast_dir, states, err) == []
