"""Random corruption of a log (the CKPTFile article's ``Corrupt``, applied to the log).

A log of fsynced records over several sealed segments is damaged in one way per trial, at a
random place: bit flips, a zeroed 512-byte block, a truncation, garbage appended, a 512-byte block
copied over another (a misdirected write). Then:

- a reader never returns wrong data: every record it yields is the one appended at that lsn,
  byte for byte, and when it cannot go on it raises CorruptionError naming a file of the log
  and an offset in it (also when reading from a random position, through the index);
- ``verify`` reports damage in every trial, except where the damage is indistinguishable from a
  crash state that a log legitimately has: bytes after the last record of the newest segment (a
  torn append, FORMAT.md §7) or its header not yet written, which it reports as notes;
- ``repair`` then leaves a log that verifies clean and still holds, in order, every record that
  the damage did not touch.

``LOGSPOOL_TORTURE=N`` multiplies the trials.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest

import logspool

TRIALS = 200 * int(os.environ.get("LOGSPOOL_TORTURE", "1"))
KINDS = ("bitflip", "zero-block", "truncate", "garbage", "duplicate-block")


def payload(i: int) -> bytes:
    return b"record %05d " % i + bytes([97 + i % 26]) * (i * 53 % 400)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[int, tuple[int, bytes]]]:
    path = tmp_path_factory.mktemp("corrupt") / "log"
    with logspool.open(path, segment_size_max=8192, index_interval=512) as log:
        for i in range(0, 300, 3):
            log.append_many([payload(j) for j in range(i, i + 3)])
        log.cutover()
        records = {r.lsn: (r.timestamp, r.payload) for r in log.read()}
    assert len(records) == 300
    return path, records


def damage(path: Path, kind: str, rng: random.Random) -> tuple[str, bool]:
    """Damage one file of the log; returns (what was done, whether verify must see it)."""
    segments = sorted(p for p in path.iterdir() if p.suffix == ".seg")
    # The newest segment (empty after the cutover) is damaged now and then, in the ways a crash
    # also leaves it: a torn header or a torn append.
    newest = kind in ("garbage", "truncate", "zero-block") and rng.random() < 0.15
    target = segments[-1] if newest else rng.choice(segments[:-1])
    data = bytearray(target.read_bytes())
    size = len(data)
    if kind == "bitflip":
        for _ in range(rng.randint(1, 3)):
            data[rng.randrange(size)] ^= 1 << rng.randrange(8)
    elif kind == "zero-block":
        start = rng.randrange(0, size, 512)
        data[start : start + 512] = bytes(len(data[start : start + 512]))
    elif kind == "truncate":
        del data[rng.randrange(size) :]
    elif kind == "garbage":
        data += rng.randbytes(rng.randint(1, 700))
    elif kind == "duplicate-block":
        blocks = list(range(0, size - 512, 512))
        src, dst = rng.sample(blocks, 2)
        data[dst : dst + 512] = data[src : src + 512]
    changed = bytes(data) != target.read_bytes()
    target.write_bytes(bytes(data))
    # After the newest segment's last record, any bytes are a legal torn append, and a header
    # not yet written is a legal crash state of a segment being created.
    must_see = changed and not newest
    return f"{kind} in {target.name}", must_see


def read_all(path: Path, records: dict[int, tuple[int, bytes]], start: int | str) -> int:
    """Read from ``start``; every record must be right; an error must name a file and offset."""
    got = 0
    try:
        with logspool.open(path, readonly=True) as log:
            for rec in log.read(start):
                assert records[rec.lsn] == (rec.timestamp, rec.payload), f"wrong data at lsn {rec.lsn}"
                assert isinstance(start, str) or rec.lsn >= start
                got += 1
    except logspool.CorruptionError as err:
        assert Path(err.path).parent == path and err.offset >= 0, err
        assert f"offset {err.offset}" in str(err) and err.path in str(err)
    return got


@pytest.mark.parametrize("kind", KINDS)
def test_a_damaged_log_never_reads_wrong_data_and_verify_finds_the_damage(
    template: tuple[Path, dict[int, tuple[int, bytes]]], tmp_path: Path, kind: str
) -> None:
    source, records = template
    rng = random.Random(kind)
    seen = 0
    for trial in range(TRIALS // len(KINDS) + 1):
        path = tmp_path / f"t{trial}"
        shutil.copytree(source, path)
        what, must_see = damage(path, kind, rng)
        context = f"trial {trial}: {what}"
        read_all(path, records, "earliest")
        read_all(path, records, rng.randrange(300))
        report = logspool.verify(path)
        if must_see:
            assert not report.ok, f"{context}: verify found nothing"
            seen += 1
            for problem in report.problems:
                assert Path(problem.path).parent == path and problem.offset >= 0
        fixed = logspool.repair(path)
        assert fixed.ok, f"{context}: {fixed.unrepaired}"
        assert logspool.verify(path).ok, f"{context}: not clean after repair"
        with logspool.open(path, readonly=True) as log:
            after = [(r.lsn, r.timestamp, r.payload) for r in log.read()]
        assert all(records[lsn] == (ts, p) for lsn, ts, p in after), f"{context}: repair changed a record"
        assert [lsn for lsn, _, _ in after] == sorted({lsn for lsn, _, _ in after})
        shutil.rmtree(path)
    assert seen > TRIALS // len(KINDS) // 2
