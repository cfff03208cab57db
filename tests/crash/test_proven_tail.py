"""What was proven durable is never cut: damage below the proof is reported, never taken for a
crash state (the README's promise: logspool "never cuts acknowledged data silently").

The proof is the sync mark (FORMAT.md §8.1, §9): every byte below it was fsynced, and writers
make it durable on a clean close, at each rotation and at most a second after they raise it.
Each test damages the files of a cleanly closed log (a flipped byte, a zeroed or cut tail) the
way storage damage does, then checks every tool a user has: ``verify`` exits 1, the opening
writer and ``append`` refuse (nothing is cut), a reader raises CorruptionError naming the file,
``repair`` quarantines the damaged bytes and keeps the intact records after them, and no lsn a
reader may have seen is given to a new record. The same for the op logs of a key-value store and
a job journal. Real files, real CLI processes.
"""

from __future__ import annotations

import glob
import os
from pathlib import Path

import pytest

import logspool
from logspool import jobs, kv
from tests.conftest import run_cli


def _newest_segment(path: str | Path) -> Path:
    return Path(sorted(glob.glob(os.path.join(path, "*.seg")))[-1])


def test_a_damaged_record_inside_an_fsynced_batch_is_reported_and_quarantined_never_cut(
    tmp_path: Path,
) -> None:
    log = str(tmp_path / "A")
    # (zero-padded: "record-2" followed by a CRC byte 0x30 would read as "record-20")
    records = b"".join(b"record-%03d\n" % i for i in range(1, 51))
    done = run_cli("append", log, stdin=records)  # one batch: 50 records, one fsync
    assert done.returncode == 0, done.stderr
    segment = _newest_segment(log)
    data = bytearray(segment.read_bytes())
    at = data.index(b"record-020")
    data[at + 4] ^= 0x01
    segment.write_bytes(bytes(data))

    verified = run_cli("verify", log)
    assert verified.returncode == 1, verified.stdout
    assert b"sync mark proves" in verified.stdout + verified.stderr
    dry = run_cli("repair", "--dry-run", log)
    assert b"never acknowledged" not in dry.stdout + dry.stderr
    refused = run_cli("append", log, stdin=b"after\n")
    assert refused.returncode != 0 and b"offset" in refused.stderr
    assert segment.read_bytes() == bytes(data)  # nothing was cut
    with logspool.open(log, readonly=True) as handle, pytest.raises(logspool.CorruptionError) as err:
        list(handle.read())
    assert err.value.path == str(segment)

    repaired = run_cli("repair", log)
    assert repaired.returncode == 0, repaired.stderr
    with logspool.open(log, readonly=True) as handle:
        reader = handle.reader(start="earliest")
        got = {r.lsn: r.payload for r in reader}
        assert [(g.first_lsn, g.next_lsn) for g in reader.gaps] == [(19, 20)]
    assert got == {i - 1: b"record-%03d" % i for i in range(1, 51) if i != 20}
    appended = run_cli("append", log, stdin=b"after\n")
    assert appended.returncode == 0 and b"lsns 50 to 50" in appended.stdout
    assert run_cli("verify", log).returncode == 0


@pytest.mark.parametrize("damage", ["zero-100", "cut-100", "zero-last-2"])
def test_the_acknowledged_tail_of_a_closed_log_is_never_cut_silently(tmp_path: Path, damage: str) -> None:
    """50 records appended one durable call each, a clean close, then the end of the segment
    damaged: zeroed (a checksum mismatch), cut short (the file ends early) or zeroed exactly over
    its last two records (zeros to the end, which look like preallocated space)."""
    log = tmp_path / "log"
    payloads = [b"acknowledged-%02d-" % i + b"x" * 20 for i in range(50)]
    with logspool.open(log, durability="always") as handle:
        for p in payloads:
            handle.append(p)
    segment = _newest_segment(log)
    data = segment.read_bytes()
    if damage == "zero-100":
        data = data[:-100] + bytes(100)
    elif damage == "cut-100":
        data = data[:-100]
    else:
        start = data.index(payloads[48]) - 32  # the header of lsn 48
        data = data[:start] + bytes(len(data) - start)
    segment.write_bytes(data)

    assert not logspool.verify(log).ok
    assert run_cli("verify", str(log)).returncode == 1
    with pytest.raises(logspool.CorruptionError, match="sync mark proves"):
        logspool.open(log)
    assert segment.read_bytes() == data  # nothing was cut
    with logspool.open(log, readonly=True) as handle, pytest.raises(logspool.CorruptionError):
        list(handle.read())

    report = logspool.repair(log)
    assert not report.unrepaired
    with logspool.open(log) as handle:
        lsn = handle.append(b"new")
        got = {r.lsn: r.payload for r in handle.read()}
    assert lsn >= 50, f"lsn {lsn} given again: a reader may have seen the record it named"
    assert all(got[i] == p for i, p in enumerate(payloads) if i in got)  # nothing changed
    assert got[lsn] == b"new"
    assert logspool.verify(log).ok


def test_a_key_value_store_and_a_job_journal_refuse_an_op_log_whose_acknowledged_tail_is_gone(
    tmp_path: Path,
) -> None:
    with kv.open(tmp_path / "kv") as store:
        for i in range(20):
            store.set(f"key-{i}", b"v" * 30)
    with jobs.open(tmp_path / "jobs") as journal:
        for i in range(20):
            journal.put(f"job-{i}", b"p" * 30)
    for path in (tmp_path / "kv" / "ops", tmp_path / "jobs" / "ops"):
        segment = _newest_segment(path)
        data = segment.read_bytes()
        segment.write_bytes(data[:-100] + bytes(100))
    with pytest.raises(logspool.CorruptionError, match="sync mark proves"):
        kv.open(tmp_path / "kv")
    with pytest.raises(logspool.CorruptionError, match="sync mark proves"):
        jobs.open(tmp_path / "jobs")
