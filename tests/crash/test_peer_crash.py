"""A peer's crash is a normal event, never corruption, for the handles that live on.

A writer is stopped dead at every step of a rotation (and of creating a log's files) through
the I/O seam: ``FaultFS(crash_at=N)`` raises at its Nth mutating operation, before the operation
happens, and nothing the victim did afterwards reaches the files, which stay as the real file
system holds them (what SIGKILL leaves: the page cache is kept). Another handle, opened before
the crash and on the plain file system, and another process then append, append under
``exclusive()`` and rotate on: each must work at the first try, keep every record at its lsn,
and leave a log that ``verify`` finds whole, with every index starting with its header (a writer
never appends to an index whose header it has not checked). tests/crash/test_writer_kill.py
does the same with real processes and SIGKILL at random moments.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import logspool
from logspool import _format as fmt

from .faultfs import FaultFS, PowerLoss

OPTIONS = {"segment_size_max": 4096, "index_interval": 512, "durability": "always"}
# Another process: appends two records (one would do; two cross more of the victim's leftovers).
PEER = textwrap.dedent(
    """
    import sys, logspool
    with logspool.open(sys.argv[1], segment_size_max=4096, index_interval=512) as log:
        for _ in range(2):
            log.append(b"r%d:" % log.next_lsn + b"." * 100)
    """
)


def _payload(n: int) -> bytes:
    return b"r%d:" % n + b"." * 100


def _kill_during_cutover(path: Path, step: int) -> bool:
    """Open a victim writer on the seam, append, then stop it dead at the ``step``-th mutating
    operation of a cutover. False if the cutover finished before that step (no more steps)."""
    fs = FaultFS(str(path))
    victim = logspool.open(path, fs=fs, **OPTIONS)  # type: ignore[arg-type]
    victim.append(_payload(victim.next_lsn))
    fs.crash_at = fs.count + step
    try:
        victim.cutover()
    except PowerLoss:
        fs.release()  # what the kernel does for a killed process: its fds close, its locks go
        return True
    fs.crash_at = 0
    victim.close()
    fs.release()
    return False


def test_a_writer_killed_at_each_step_of_rotation_leaves_the_others_working(tmp_path: Path) -> None:
    steps = 0
    for step in range(1, 100):  # bounded: a cutover is a few dozen operations
        path = tmp_path / f"log{step}"
        other = logspool.open(path, **OPTIONS)  # type: ignore[arg-type]
        other.append_many([_payload(n) for n in range(3)])
        if not _kill_during_cutover(path, step):
            other.close()
            break
        steps += 1
        # The survivor's very next calls work: no CorruptionError for a peer's crash; and so do
        # another process's, appending beside it.
        other.append(_payload(other.next_lsn))
        peer = subprocess.run([sys.executable, "-c", PEER, str(path)], capture_output=True, check=False)
        assert peer.returncode == 0, (step, peer.stderr[-800:])
        with other.exclusive() as tail:
            tail.append(_payload(tail.next_lsn))
        for _ in range(60):  # across more rotations, through the index the victim left
            other.append(_payload(other.next_lsn))
        records = list(other.read())
        other.close()
        assert [r.lsn for r in records] == list(range(len(records))), f"step {step}: lsns not contiguous"
        assert all(r.payload == _payload(r.lsn) for r in records), f"step {step}: a record moved"
        report = logspool.verify(path)
        assert report.ok, (step, [str(p) for p in report.problems])
        for idx in sorted(path.glob("*" + fmt.INDEX_SUFFIX)):
            raw = idx.read_bytes()
            if raw:  # (a missing or empty index is derived data to rebuild, never damage)
                base, _interval = fmt.decode_index_header(raw, str(idx))
                assert fmt.index_name(base) == idx.name, f"step {step}: {idx.name} names {base}"
        with logspool.open(path, **OPTIONS) as reopened:  # type: ignore[arg-type]
            assert reopened.next_lsn == len(records)
    assert steps >= 5, f"a cutover had only {steps} steps to stop at"


def test_a_writer_killed_before_the_new_segment_has_its_header_is_not_damage_to_readers(
    tmp_path: Path,
) -> None:
    """The states a crash while creating a segment leaves (0-byte segment, missing or empty
    index) read as the end of the log, not as damage, for a reader and for ``verify``."""
    for step in range(1, 100):
        path = tmp_path / f"log{step}"
        logspool.open(path, **OPTIONS).close()  # type: ignore[arg-type]
        if not _kill_during_cutover(path, step):
            break
        with logspool.open(path, readonly=True) as log:
            assert [r.payload for r in log.read()] == [_payload(0)], f"step {step}"
        report = logspool.verify(path)
        assert report.ok, (step, [str(p) for p in report.problems])
