"""The checkpointed file under simulated power loss and I/O errors, checked at every operation.

A workload creates a CheckpointFile and runs transactions (a few writes at random offsets, then
``checkpoint()``) through ``FaultFS``. The oracle: the state after transaction ``t`` is known, and
a transaction is acknowledged when its ``checkpoint()`` returned. The power is cut at every
operation; the model's disk states include every mix of old and new 512-byte sectors of the
mapped file (the kernel writes mapped pages back whenever it likes) and torn or lost undo
entries. After each, opening the file with the real file system must give exactly the last
acknowledged state or the next one (a checkpoint in progress), and a second open the same.

Three more sweeps: a power cut at every operation of the rollback itself (then a rollback
again must give the same file); an I/O error at every operation (the handle stops, a reopen gives
an allowed state); and ``safely=False``, where the same oracle must find torn transactions,
which proves the sweep can fail and why ``safely`` is the default.
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
from tests.crash.faultfs import Fault, FaultFS, PowerLoss, materialize

STATES_PER_CUT = 3 * int(os.environ.get("LOGSPOOL_TORTURE", "1"))
SIZE = 4096
BLOCK = 512
TXNS = 6


def writes(t: int) -> list[tuple[int, bytes]]:
    rng = random.Random(t)
    out = []
    for _ in range(3):
        n = rng.randint(1, 1200)
        out.append((rng.randrange(SIZE - n), (b"t%d;" % t * n)[:n]))
    return out


def expected_states() -> list[bytes]:
    state = bytearray(SIZE)
    states = [bytes(state)]
    for t in range(1, TXNS + 1):
        for offset, data in writes(t):
            state[offset : offset + len(data)] = data
        states.append(bytes(state))
    return states


STATES = expected_states()


def workload(root: Path, fs: FaultFS, acked: list[int], *, safely: bool = True) -> None:
    """Creates the file and runs the transactions; ``acked`` gets each state once it is durable
    (0: the creation returned; t: transaction t's checkpoint returned)."""
    f = logspool.CheckpointFile(root / "data", size=SIZE, block_size=BLOCK, safely=safely, fs=fs)
    acked.append(0)
    for t in range(1, TXNS + 1):
        for offset, data in writes(t):
            f.write(offset, data)
        f.checkpoint()
        acked.append(t)
    f.close()


def recovered(target: Path) -> bytes | None:
    """Open the crash state with the real file system (rolling back); None if no file."""
    if not (target / "data").exists():
        return None
    with logspool.CheckpointFile(target / "data") as f:
        content = f.read(0, f.size)
    with logspool.CheckpointFile(target / "data") as f:
        assert f.last_rollback is None, "a second open rolled back again"
        assert f.read(0, f.size) == content, "a second open changed the file"
    assert not (target / "data.undo").exists()
    return content


def allowed(acked: list[int]) -> list[bytes | None]:
    if not acked:
        return [None, STATES[0]]  # the creation may or may not have become durable
    last = acked[-1]
    return STATES[last : last + 2]


def count_ops(base: Path, **kw: bool) -> int:
    (base / "count").mkdir()
    fs = FaultFS(str(base / "count"))
    workload(base / "count", fs, [], **kw)
    return fs.count


def power_sweep(base: Path, *, safely: bool, seed: int) -> tuple[int, int, list[str]]:
    """Cut the power at every operation; returns (cuts, states, violations of the oracle)."""
    total = count_ops(base, safely=safely)
    rng = random.Random(seed)
    states, violations = 0, []
    for n in range(1, total + 1):
        work = base / f"cut{n}"
        work.mkdir()
        fs = FaultFS(str(work), crash_at=n)
        acked: list[int] = []
        try:
            workload(work, fs, acked, safely=safely)
        except PowerLoss:
            pass
        finally:
            fs.release()
        assert fs.crashed, f"operation {n} of {total} was never reached"
        for k, state in enumerate(fs.crash_states(rng, STATES_PER_CUT)):
            target = base / f"after{n}.{k}"
            materialize(state, str(target))
            try:
                got = recovered(target)
            except logspool.LogspoolError as err:
                violations.append(f"cut {n}, state {k}: open failed: {err}")
                continue
            if got not in allowed(acked):
                violations.append(f"cut {n}, state {k}: not a checkpointed state (acked {acked[-1:]})")
            states += 1
            shutil.rmtree(target)
        shutil.rmtree(work)
    return total, states, violations


def test_power_loss_at_every_operation_leaves_a_checkpointed_state(fast_dir: Path) -> None:
    cuts, states, violations = power_sweep(fast_dir, safely=True, seed=1)
    assert violations == []
    assert cuts > 50 and states == cuts * STATES_PER_CUT


def test_without_safely_the_same_sweep_finds_torn_transactions(fast_dir: Path) -> None:
    """The negative control: undo entries that were never fsynced lose the race with the kernel's
    write-back of the mapped pages, and the oracle sees it."""
    _cuts, _states, violations = power_sweep(fast_dir, safely=False, seed=1)
    assert any("not a checkpointed state" in v for v in violations)


def test_power_loss_during_the_rollback_then_rollback_again_gives_the_same_file(fast_dir: Path) -> None:
    # A crash state in the middle of transaction 4: an undo log with several entries.
    total = count_ops(fast_dir)
    mid = None
    for n in range(total, 0, -1):
        work = fast_dir / f"probe{n}"
        work.mkdir()
        fs = FaultFS(str(work), crash_at=n)
        acked: list[int] = []
        with contextlib.suppress(PowerLoss):
            workload(work, fs, acked)
        fs.release()
        if (
            acked[-1:] == [3]
            and os.path.exists(work / "data.undo")
            and os.path.getsize(work / "data.undo") > 1500
        ):
            mid = next(fs.crash_states(random.Random(0), 1))  # only what was fsynced
            break
    assert mid is not None and "data.undo" in mid
    template = fast_dir / "template"
    materialize(mid, str(template))
    counter_root = fast_dir / "counter"
    shutil.copytree(template, counter_root)
    counter = FaultFS(str(counter_root))
    logspool.CheckpointFile.repair(counter_root / "data", fs=counter)
    want = (counter_root / "data").read_bytes()
    assert want == STATES[3]
    rng = random.Random(2)
    for m in range(1, counter.count + 1):
        work = fast_dir / f"rb{m}"
        shutil.copytree(template, work)
        fs = FaultFS(str(work), crash_at=m)
        with contextlib.suppress(PowerLoss):
            logspool.CheckpointFile.repair(work / "data", fs=fs)
        fs.release()
        assert fs.crashed
        for k, state in enumerate(fs.crash_states(rng, STATES_PER_CUT)):
            target = fast_dir / f"rb{m}.{k}"
            materialize(state, str(target))
            assert recovered(target) == want, f"power cut at operation {m} of the rollback, state {k}"
    assert counter.count >= 4


@pytest.mark.parametrize(
    ("err", "sticky"),
    [(errno.EIO, False), (errno.EIO, True), (errno.ENOSPC, False)],
    ids=["EIO-once", "EIO-from-then-on", "ENOSPC-once"],
)
def test_an_io_error_at_every_operation_stops_the_handle_and_a_reopen_recovers(
    fast_dir: Path, err: int, sticky: bool
) -> None:
    total = count_ops(fast_dir)
    for n in range(1, total + 1):
        work = fast_dir / f"f{n}"
        work.mkdir()
        fs = FaultFS(str(work), fault=Fault(n, err, sticky))
        acked: list[int] = []
        try:
            workload(work, fs, acked)
        except (OSError, logspool.LogspoolError) as exc:
            assert fs.faults_raised, f"operation {n}: {exc!r} without an injected fault"
        finally:
            fs.release()
        got = recovered(work)
        assert got in allowed(acked), f"I/O error at operation {n} of {total}: not a checkpointed state"
