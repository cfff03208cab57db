"""Judging damage a chunk at a time decides exactly what judging it over the whole tail did.

``_segment.judge_damage_in`` (and the search of FORMAT.md §9.3 under it, ``durable_proof_in``)
reads the bytes after a failed record in chunks (review of issue 28: they were read whole, three
times the size of a 4 GiB batch in memory). How: thousands of generated segment tails (valid
records, unpublished batch heads, torn and flipped records, zero holes, garbage, payloads full of
fake lsn needles past the search's 1024 tries, seals, gap records) are judged by the code as it
was before the change, kept here verbatim as the oracle over one buffer, and by the new code with
chunks so small (37 bytes up) that every record, header and needle crosses a boundary somewhere;
the outcome (the cut offset, or the CorruptionError's text) must be the same, and no read may be
larger than a chunk plus 7 bytes or a record.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from logspool import _format as fmt
from logspool import _segment as seg
from logspool import limits
from logspool.errors import CorruptionError

SIZE_MAX = 4096


# --- the oracle: the code before the change, over one buffer ---------------------------------------
def _old_durable_proof_after(buf: bytes, pos: int, lsn: int, size_max: int) -> int:
    for later in range(lsn + 1, lsn + 1 + limits.RECOVERY_RESYNC_LSNS):
        needle = later.to_bytes(8, "little")
        at = buf.find(needle, pos + 1)
        tries = 0
        while at >= 0 and tries < 1024:
            start = at - 8
            if start > pos:
                infos: list[seg.RecordInfo] = []
                stop = seg.parse(buf, start, later, size_max, None, infos)
                if infos or stop.kind == seg.SEAL:
                    return max([0, *(i.durable_lsn for i in infos)])
            at = buf.find(needle, at + 1)
            tries += 1
    return -1


def _old_judge_damage(
    path: str,
    buf: bytes,
    stop: seg.Stop,
    durable_known: int,
    size_max: int,
    base: int,
    *,
    proven_end: int = 0,
    same_boot: bool = False,
) -> int:
    if stop.kind == seg.BAD:
        raise CorruptionError(path, stop.pos, stop.reason)
    why = stop.reason or stop.kind
    if stop.pos < proven_end:
        raise CorruptionError(
            path,
            stop.pos,
            f"{why} at lsn {stop.lsn}, below offset {min(proven_end, len(buf) + base)} that the "
            "sync mark proves fsynced: an acknowledged record is damaged",
        )
    if durable_known > stop.lsn:
        raise CorruptionError(path, stop.pos, f"{why} in a record fsynced before (lsn {stop.lsn})")
    later = _old_durable_proof_after(buf, stop.pos - base, stop.lsn, size_max)
    if later > stop.lsn:
        raise CorruptionError(
            path, stop.pos, f"{why} at lsn {stop.lsn}, and a later record proves it was fsynced"
        )
    if seg.unpublished_batch_head(buf, stop.pos - base, stop.lsn, size_max):
        return stop.pos
    if same_boot and later >= 0:
        raise CorruptionError(
            path,
            stop.pos,
            f"{why} at lsn {stop.lsn}, followed by valid records: no crash within a boot leaves "
            "that, so the record was damaged after it was written",
        )
    return stop.pos


# --- generated segments -----------------------------------------------------------------------------
def _record(rng: random.Random, lsn: int, durable_max: int, needles: list[int]) -> bytes:
    """A valid record; its payload may hold the 8 bytes of lsns that follow (fake candidates)."""
    payload = bytearray(rng.randbytes(rng.choice([0, 1, 5, 30, 100, 700])))
    for m in needles:
        at = rng.randrange(len(payload) + 1)
        payload[at:at] = m.to_bytes(8, "little")
    return fmt.encode_record(lsn, 1000 + lsn, rng.randrange(durable_max + 1), bytes(payload))


def _damaged(rng: random.Random, lsn: int) -> bytes:
    """What stands where lsn ``lsn`` was expected: not a valid record."""
    rec = bytearray(_record(rng, lsn, lsn, []))
    kind = rng.randrange(7)
    if kind == 0:  # an unpublished batch's head: CRC complemented, maybe in part
        mask = [0xFF if rng.random() < 0.7 else 0 for _ in range(4)]
        if not any(mask):
            mask[0] = 0xFF
        rec[-4:] = bytes(b ^ m for b, m in zip(rec[-4:], mask, strict=True))
    elif kind == 1:  # a flipped byte
        rec[rng.randrange(len(rec))] ^= 1 << rng.randrange(8)
    elif kind == 2:  # torn: only its start
        rec = rec[: rng.randrange(1, len(rec))]
    elif kind == 3:  # a zero header (a hole), what follows it kept
        rec[: fmt.RECORD_HEADER_SIZE] = bytes(fmt.RECORD_HEADER_SIZE)
    elif kind == 4:  # a length above the limit
        rec[:4] = (SIZE_MAX + 1 + rng.randrange(1 << 20)).to_bytes(4, "little")
    elif kind == 5:  # garbage
        rec = bytearray(rng.randbytes(rng.randrange(1, 300)))
    else:  # a wrong lsn with a right CRC (BAD)
        rec = bytearray(_record(rng, lsn + 3, lsn, []))
    return bytes(rec)


def _after(rng: random.Random, lsn: int) -> bytes:
    """What follows the damage: records of later lsns (not always the next), fake needles, a
    seal, a gap record, zeros, garbage, in some order."""
    out = bytearray()
    next_lsn = lsn + rng.choice([1, 1, 1, 2, 7, 63, 64, 65])
    for _ in range(rng.randrange(6)):
        part = rng.randrange(8)
        if part <= 2:
            fakes = [lsn + 1 + rng.randrange(70) for _ in range(rng.randrange(4))]
            for _ in range(rng.randrange(1, 5)):
                out += _record(rng, next_lsn, next_lsn + rng.choice([0, 0, 5]), fakes)
                next_lsn += 1
        elif part == 3:
            out += bytes(rng.randrange(1, 200))
        elif part == 4:
            out += rng.randbytes(rng.randrange(1, 200))
        elif part == 5:
            out += fmt.encode_record(next_lsn + 10, 5, next_lsn + 9, b"", fmt.FLAG_SEAL)
        elif part == 6:
            gap = fmt.encode_gap(next_lsn, next_lsn + 3, 5, "quarantine/x", fmt.GAP_RECORD_SIZE_MIN + 8)
            out += gap
            next_lsn += 3
        else:  # more fake needles of one lsn than the search tries (1024)
            out += (lsn + 1 + rng.randrange(3)).to_bytes(8, "little") * rng.choice([5, 1030])
    return bytes(out)


def _case(rng: random.Random) -> tuple[bytes, seg.Stop]:
    base = rng.choice([0, 7, 255, 1 << 16])
    buf = bytearray(fmt.encode_segment_header(base, 1))
    lsn = base
    for _ in range(rng.randrange(4)):
        buf += _record(rng, lsn, lsn, [])
        lsn += 1
    buf += _damaged(rng, lsn) + _after(rng, lsn)
    if rng.random() < 0.3:
        buf += bytes(rng.randrange(1, 500))
    stop = seg.parse(bytes(buf), fmt.SEGMENT_HEADER_SIZE, base, SIZE_MAX, None)
    return bytes(buf), stop


class _Reads:
    """A ``Read`` over ``buf`` that remembers the largest read asked for."""

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.largest = 0

    def __call__(self, offset: int, count: int) -> bytes:
        assert offset >= 0 and count >= 0
        self.largest = max(self.largest, count)
        return self.buf[offset : offset + count]


def _outcome(judge: Callable[..., int], *args: Any, **kwargs: Any) -> tuple[str, object]:
    try:
        return "cut", judge(*args, **kwargs)
    except CorruptionError as err:
        return "corrupt", str(err)


@pytest.mark.parametrize("seed", range(6))
def test_judging_in_chunks_decides_as_judging_the_whole_tail(seed: int) -> None:
    rng = random.Random(seed)
    judged = 0
    for _ in range(300):
        buf, stop = _case(rng)
        if stop.kind in (seg.END, seg.SEAL):
            continue  # a clean stop: nothing to judge
        from_ = rng.choice([0, stop.pos, rng.randrange(stop.pos + 1)])  # where the caller's read began
        facts = {
            "proven_end": rng.choice([0, 0, 0, stop.pos, stop.pos + 1]),
            "same_boot": rng.random() < 0.5,
        }
        durable_known = rng.choice([0, 0, stop.lsn, stop.lsn + 1])
        expected = _outcome(
            _old_judge_damage, "p", buf[from_:], stop, durable_known, SIZE_MAX, from_, **facts
        )
        for chunk in (37, 101, 1000, seg.SCAN_CHUNK):
            read = _Reads(buf)
            got = _outcome(
                seg.judge_damage_in, "p", read, len(buf), stop, durable_known, SIZE_MAX, chunk=chunk, **facts
            )
            assert got == expected, f"seed {seed}, chunk {chunk}, stop {stop}"
            assert read.largest <= max(chunk + 7, fmt.RECORD_OVERHEAD + SIZE_MAX)
        # The buffer form (repair, verify) is the same function.
        got = _outcome(seg.judge_damage, "p", buf[from_:], stop, durable_known, SIZE_MAX, from_, **facts)
        assert got == expected
        judged += 1
    assert judged > 200


@pytest.mark.parametrize("fakes", [1022, 1023, 1024, 1025])
@pytest.mark.parametrize("chunk", [37, 1000, seg.SCAN_CHUNK])
def test_the_search_examines_the_first_1024_offsets_of_an_lsn(fakes: int, chunk: int) -> None:
    """A proof standing after ``fakes`` false occurrences of its lsn is found if it is among the
    first 1024 (FORMAT.md §9.3), in any chunking: CorruptionError up to 1023 fakes, a cut after.
    (The case the random tails seldom hit exactly, at the boundary of the bound.)"""
    torn = bytearray(fmt.encode_record(0, 2, 0, b"x" * 50))
    torn[-1] ^= 0x10
    # (no other 8 bytes of lsn 1 before its lsn field: the proof is occurrence fakes + 1)
    proof = fmt.encode_record(1, 2, 5, b"yy")  # durable_lsn 5 > 0: lsn 0 was fsynced
    buf = fmt.encode_segment_header(0, 1) + bytes(torn) + (1).to_bytes(8, "little") * fakes + proof
    stop = seg.parse(buf, fmt.SEGMENT_HEADER_SIZE, 0, SIZE_MAX, None)
    assert stop.kind == seg.TORN

    expected = _outcome(_old_judge_damage, "p", buf, stop, 0, SIZE_MAX, 0)
    assert (
        _outcome(seg.judge_damage_in, "p", _Reads(buf), len(buf), stop, 0, SIZE_MAX, chunk=chunk) == expected
    )
    assert expected[0] == ("corrupt" if fakes + 1 <= 1024 else "cut")


@pytest.mark.parametrize("seed", range(4))
def test_parsing_in_chunks_stops_where_parsing_the_whole_buffer_does(seed: int) -> None:
    rng = random.Random(100 + seed)
    for _ in range(300):
        buf, _stop = _case(rng)
        start = rng.randrange(fmt.SEGMENT_HEADER_SIZE, len(buf))
        lsn = int.from_bytes(buf[start + 8 : start + 16].ljust(8, b"\0"), "little")
        infos: list[seg.RecordInfo] = []
        stop = seg.parse(buf, start, lsn, SIZE_MAX, None, infos)
        expected = (bool(infos), max([0, *(i.durable_lsn for i in infos)]), stop)
        for chunk in (37, 64, 101, 1000):
            got = seg.parse_in(_Reads(buf), len(buf), start, lsn, SIZE_MAX, chunk)
            assert got == expected, f"seed {seed}, chunk {chunk}, start {start}"
