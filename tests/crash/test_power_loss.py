"""Simulated power loss at every operation of a workload, checked by an oracle.

A workload appends records (single and batched, across rotations and a cutover) through
``FaultFS``, and notes each record as acknowledged only after the call that makes it durable
returned: ``append`` with durability "always", ``sync()`` with "os". The power is cut at operation
N, for every N from the first to the last of the workload; for each cut, several disk states the
model allows (only what was fsynced; torn appends; zero-filled extensions) are written out, and
then, with the real file system:

- recovery (opening the log) must succeed;
- the records must be a prefix of those appended, in order, with no garbage and no duplicates,
  and must contain every acknowledged one;
- verify must find no damage, and a second open must give the same records.

``LOGSPOOL_TORTURE=N`` multiplies the crash states tried per cut (by hand: the long form).
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

import logspool
from tests.crash.faultfs import Fault, FaultFS, PowerLoss, materialize

STATES_PER_CUT = 3 * int(os.environ.get("LOGSPOOL_TORTURE", "1"))


def payload(i: int) -> bytes:
    return b"rec-%04d:" % i + bytes([65 + i % 26]) * (40 + (i * 37) % 300)


Workload = Callable[[str, FaultFS, list[bytes], list[bytes]], None]


def appends(durability: str, n: int = 40, *, single_writer: bool = False) -> Workload:
    """Appends ``n`` records; ``attempted`` gets each payload before its call, ``acked`` after the
    call that made it durable returned."""

    def run(path: str, fs: FaultFS, attempted: list[bytes], acked: list[bytes]) -> None:
        log = logspool.open(
            path,
            fs=fs,
            durability=durability,
            segment_size_max=4096,
            index_interval=512,
            single_writer=single_writer,
        )
        i = 0
        while i < n:
            batch = [payload(j) for j in range(i, min(n, i + (3 if i % 4 == 1 else 1)))]
            attempted.extend(batch)
            if len(batch) > 1:
                log.append_many(batch)
            else:
                log.append(batch[0])
            i += len(batch)
            if durability == "always":
                acked[:] = attempted
            elif i % 6 == 0:
                log.sync()
                acked[:] = attempted
            if i == 20:
                log.cutover()
        log.close()

    return run


def two_handles(n: int = 36) -> Workload:
    """Two handles on one log (as two processes: separate flocks), appending in turns with
    durability "always": each finds the other's records by the header at its end offset, in
    preallocated space, and may skip its fsync on the word of the sync mark the other raised."""

    def run(path: str, fs: FaultFS, attempted: list[bytes], acked: list[bytes]) -> None:
        opts: dict[str, object] = {"fs": fs, "segment_size_max": 4096, "index_interval": 512}
        a = logspool.open(path, **opts)
        b = logspool.open(path, **opts)
        for i in range(n):
            attempted.append(payload(i))
            (a if i % 3 else b).append(payload(i))
            acked[:] = attempted
        b.close()
        a.close()

    return run


def check_state(path: str, attempted: list[bytes], acked: list[bytes]) -> None:
    with logspool.open(path) as log:
        got = [(r.lsn, r.payload) for r in log.read()]
    payloads = [p for _lsn, p in got]
    assert [lsn for lsn, _p in got] == list(range(len(got))), "lsns are not 0, 1, 2, ..."
    assert payloads == attempted[: len(payloads)], "not a prefix of the appended records"
    assert len(payloads) >= len(acked), f"acknowledged records lost: {len(payloads)} < {len(acked)}"
    report = logspool.verify(path)
    assert report.ok, [str(p) for p in report.problems]
    with logspool.open(path) as log:
        assert [(r.lsn, r.payload) for r in log.read()] == got, "a second open changed the records"


def sweep(workload: Workload, base: Path, seed: int) -> tuple[int, int]:
    """Cut the power at every operation of ``workload``; returns (cuts, crash states checked)."""
    clean = base / "clean"
    fs = FaultFS(str(clean))
    workload(str(clean / "log"), fs, [], [])
    total = fs.count
    rng = random.Random(seed)
    states = 0
    for n in range(1, total + 1):
        work = base / f"cut{n}"
        work.mkdir()
        fs = FaultFS(str(work), crash_at=n)
        attempted: list[bytes] = []
        acked: list[bytes] = []
        try:
            workload(str(work / "log"), fs, attempted, acked)
        except PowerLoss:
            pass
        finally:
            fs.release()
        assert fs.crashed, f"operation {n} of {total} was never reached"
        for k, state in enumerate(fs.crash_states(rng, STATES_PER_CUT)):
            target = base / f"after{n}.{k}"
            materialize(state, str(target))  # the log directory is absent if its name was not durable
            try:
                check_state(str(target / "log"), attempted, acked)
            except AssertionError as err:
                raise AssertionError(f"power cut at operation {n} of {total}, state {k}: {err}") from err
            states += 1
    return total, states


@pytest.mark.parametrize(
    ("durability", "single_writer"),
    [("always", False), ("os", False), ("always", True), ("os", True)],
    ids=["always", "os", "always-single-writer", "os-single-writer"],
)
def test_power_loss_at_every_operation_keeps_every_acknowledged_record(
    fast_dir: Path, durability: str, single_writer: bool
) -> None:
    cuts, states = sweep(appends(durability, single_writer=single_writer), fast_dir, seed=1)
    assert cuts > 60 and states == cuts * STATES_PER_CUT


def test_power_loss_with_two_handles_appending_in_turns(fast_dir: Path) -> None:
    cuts, states = sweep(two_handles(), fast_dir, seed=2)
    assert cuts > 60 and states == cuts * STATES_PER_CUT


# --- I/O errors at every operation ---------------------------------------------------------------
def faulty_appends(path: str, fs: FaultFS, n: int = 30) -> list[tuple[bytes, str]]:
    """Appends ``n`` records through ``fs``, reopening the log after a failed handle; returns each
    payload with what the caller was told: "acked", "absent" (AppendError: nothing written, or
    never attempted because the open failed) or "unknown" (the handle failed mid-way)."""
    told: list[tuple[bytes, str]] = []
    log: logspool.Log | None = None
    for i in range(n):
        p = payload(i)
        try:
            if log is None:
                log = logspool.open(path, fs=fs, segment_size_max=4096, index_interval=512, lock_timeout_s=1)
        except (OSError, logspool.LogspoolError):
            told.append((p, "absent"))
            continue
        try:
            log.append(p)
            told.append((p, "acked"))
        except logspool.AppendError:
            told.append((p, "absent"))
        except (OSError, logspool.LogspoolError):
            told.append((p, "unknown"))
            with contextlib.suppress(OSError, logspool.LogspoolError):
                log.close()
            log = None
    if log is not None:
        with contextlib.suppress(OSError, logspool.LogspoolError):
            log.close()
    return told


def check_told(path: str, told: list[tuple[bytes, str]]) -> None:
    with logspool.open(path) as log:
        got = [(r.lsn, r.payload) for r in log.read()]
    assert [lsn for lsn, _p in got] == list(range(len(got)))
    it = iter(told)
    for _lsn, p in got:  # the records are the attempts in order, minus some
        for q, status in it:
            if q == p:
                assert status != "absent", f"{p!r} was reported not appended, but is in the log"
                break
            assert status != "acked", f"acknowledged {q!r} is missing"
        else:
            raise AssertionError(f"{p!r} is in the log but was never appended (or is out of order)")
    assert all(status != "acked" for _q, status in it), "acknowledged records missing at the end"
    assert logspool.verify(path).ok


@pytest.mark.parametrize(
    ("err", "sticky"),
    [(errno.EIO, False), (errno.EIO, True), (errno.ENOSPC, False), (errno.ENOSPC, True)],
    ids=["EIO-once", "EIO-from-then-on", "ENOSPC-once", "ENOSPC-from-then-on"],
)
def test_an_io_error_at_every_operation_loses_nothing_acknowledged(
    fast_dir: Path, err: int, sticky: bool
) -> None:
    clean = FaultFS(str(fast_dir / "clean"))
    faulty_appends(str(fast_dir / "clean" / "log"), clean)
    total = clean.count
    faults = 0
    for n in range(1, total + 1):
        work = fast_dir / f"f{n}"
        work.mkdir()
        fs = FaultFS(str(work), fault=Fault(n, err, sticky))
        try:
            told = faulty_appends(str(work / "log"), fs)
        finally:
            fs.release()
        faults += fs.faults_raised > 0
        try:
            check_told(str(work / "log"), told)
        except AssertionError as e:
            raise AssertionError(f"{os.strerror(err)} at operation {n} of {total}: {e}") from e
    assert total > 60 and faults == total


# --- subscribers, retention and repair under power loss -------------------------------------------
@pytest.mark.parametrize("mixed", [False, True], ids=["durable-commits", "mixed-commits"])
def test_power_loss_during_checkpoints_and_retention(fast_dir: Path, mixed: bool) -> None:
    """Appends, a subscriber committing, and retention of consumed segments, cut at every
    operation. After the crash the checkpoint is the last durable one acknowledged, or one
    written after it (the one in flight, or with ``mixed`` a ``durable=False`` commit that made
    it to disk), and every record at or after it is still in the log: retention never removed
    what the durable checkpoint had not passed."""
    commits: dict[str, int] = {}
    allowed: set[int] = set()
    # mixed: a name of 600 bytes, so that each checkpoint slot spans two sectors and can tear
    name = "billing" + ("-" * 600 if mixed else "")

    def run(path: str, fs: FaultFS, attempted: list[bytes], acked: list[bytes]) -> None:
        log = logspool.open(path, fs=fs, segment_size_max=4096, index_interval=512)
        commits["acked"] = 0
        allowed.clear()
        allowed.add(0)
        sub = log.subscribe(name, start="earliest")
        for i in range(40):
            attempted.append(payload(i))
            log.append(payload(i))
            acked[:] = attempted
            if mixed and i % 5 in (1, 2):
                allowed.add(i - 1)
                sub.commit(i - 1, durable=False)
            if i % 5 == 4:
                allowed.add(i - 2)
                sub.commit(i - 2)
                commits["acked"] = i - 2
                allowed.intersection_update({i - 2})
            if i % 10 == 9 or (mixed and i % 10 == 7):  # 7: right after non-durable commits
                log.enforce_retention(logspool.Retention(consumed=True))
        log.close()

    def check(path: str, attempted: list[bytes], acked: list[bytes]) -> None:
        with logspool.open(path) as log:
            got = [(r.lsn, r.payload) for r in log.read()]
            subs = {s.name: s.lsn for s in log.subscribers()}
        if not acked:
            return  # the crash came before anything was acknowledged
        cp = subs[name]
        assert cp in allowed, (cp, commits, allowed)
        first = got[0][0] if got else len(attempted)
        assert first <= cp, f"retention removed lsns {first}..{cp} the subscriber had not committed"
        assert [lsn for lsn, _p in got] == list(range(first, first + len(got)))
        assert all(p == attempted[lsn] for lsn, p in got), "a record is not what was appended there"
        assert first + len(got) >= len(acked), "acknowledged records lost"
        assert logspool.verify(path).ok

    clean = FaultFS(str(fast_dir / "clean"))
    run(str(fast_dir / "clean" / "log"), clean, [], [])
    rng = random.Random(3)
    for n in range(1, clean.count + 1):
        work = fast_dir / f"cut{n}"
        work.mkdir()
        fs = FaultFS(str(work), crash_at=n)
        attempted: list[bytes] = []
        acked: list[bytes] = []
        with contextlib.suppress(PowerLoss):
            run(str(work / "log"), fs, attempted, acked)
        fs.release()
        for k, state in enumerate(fs.crash_states(rng, STATES_PER_CUT)):
            target = fast_dir / f"after{n}.{k}"
            materialize(state, str(target))
            try:
                check(str(target / "log"), attempted, acked)
            except AssertionError as err:
                raise AssertionError(
                    f"power cut at operation {n} of {clean.count}, state {k}: {err}"
                ) from err
    assert clean.count > 150


def test_power_loss_during_repair_then_repair_again_gives_the_same_log(fast_dir: Path) -> None:
    template = fast_dir / "template"
    with logspool.open(template, segment_size_max=4096, index_interval=512) as log:
        for i in range(0, 120, 4):
            log.append_many([payload(j) for j in range(i, i + 4)])
    bases = sorted(int(n[:20]) for n in os.listdir(template) if n.endswith(".seg"))
    for base in bases[1:-1:2]:  # damage a record in every other old segment
        seg_file = template / f"{base:020d}.seg"
        data = bytearray(seg_file.read_bytes())
        data[200] ^= 0xFF
        seg_file.write_bytes(bytes(data))
    (template / f"{bases[2]:020d}.idx").unlink()
    expected_dir = fast_dir / "expected"
    shutil.copytree(template, expected_dir)
    assert logspool.repair(expected_dir).ok
    with logspool.open(expected_dir, readonly=True) as log:
        reader = log.reader()
        want = ([(r.lsn, r.payload) for r in reader], reader.gaps)
    counter = FaultFS(str(fast_dir / "count"))
    shutil.copytree(template, fast_dir / "count" / "log")
    counter.snapshot_all()
    logspool.repair(fast_dir / "count" / "log", fs=counter)
    rng = random.Random(5)
    for n in range(1, counter.count + 1):
        work = fast_dir / f"cut{n}"
        shutil.copytree(template, work / "log")
        fs = FaultFS(str(work), crash_at=n)
        with contextlib.suppress(PowerLoss):
            logspool.repair(work / "log", fs=fs)
        fs.release()
        for k, state in enumerate(fs.crash_states(rng, STATES_PER_CUT)):
            target = fast_dir / f"after{n}.{k}"
            materialize(state, str(target))
            report = logspool.repair(target / "log")
            assert report.ok, (n, k, report.unrepaired)
            with logspool.open(target / "log", readonly=True) as log:
                reader = log.reader()
                got = ([(r.lsn, r.payload) for r in reader], reader.gaps)
            assert got == want, f"power cut at operation {n} of {counter.count}, state {k}"
            assert logspool.verify(target / "log").ok
    assert counter.count > 20
