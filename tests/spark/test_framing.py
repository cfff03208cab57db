"""The Spark commit's framing writes the very bytes ``Tail.append_batch`` writes.

How: the CRC fix-up (``_framing.shift``, ``record_crcs``) against ``zlib.crc32`` for random
registers, sizes (0 included) and headers, with hypothesis; ``_framing.frame`` against
``fmt.encode_record`` record by record and against the index walk of FORMAT.md §5.2; and two real
logs, one appended by ``append_batch`` from the staged rows (the path before the framing), one by
the commit's ``_append`` (staged by ``_Writer.write`` from Arrow batches, framed with numpy,
written by ``append_framed``), with the same timestamps: random sizes from 0 to 1 MiB, several
staged blocks and files, batches that seal segments and batches larger than a segment, a small
index interval, and batches split in parts. Every segment and index file must be equal byte for
byte (but the first segment's creation time). No Spark session: the tasks' and the commit's
code are called directly, on real files.
"""

from __future__ import annotations

import os
import random
import zlib
from pathlib import Path

import pytest

np = pytest.importorskip("numpy")
pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

import hypothesis.strategies as st  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from pyspark.sql.types import BinaryType, StructField, StructType  # noqa: E402

import logspool  # noqa: E402
from logspool import _format as fmt  # noqa: E402
from logspool.spark import _framing, _source  # noqa: E402

SCHEMA = StructType([StructField("payload", BinaryType())])
U32 = st.integers(0, 2**32 - 1)


def zlib_shift(v: int, n: int) -> int:
    """The CRC register ``v`` carried over ``n`` zero bytes, by zlib (which inverts before and after)."""
    return ~zlib.crc32(bytes(n), ~v & 0xFFFFFFFF) & 0xFFFFFFFF


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(U32, st.integers(0, 70_000)), min_size=1, max_size=20))
def test_shift_carries_a_register_over_zero_bytes_as_zlib_does(cases: list[tuple[int, int]]) -> None:
    v = np.array([c[0] for c in cases], np.uint32)
    n = np.array([c[1] for c in cases], np.int64)
    assert _framing.shift(v, n).tolist() == [zlib_shift(a, b) for a, b in cases]
    assert _framing.shift(v, int(n[0])).tolist() == [zlib_shift(a, int(n[0])) for a, _b in cases]


def test_shift_is_exact_up_to_the_largest_payload() -> None:
    v = np.array([0x12345678, 0xFFFFFFFF, 1], np.uint32)
    for n in (2**20 + 3, 2**28 - 1, 2**28):
        assert _framing.shift(v, n).tolist() == [zlib_shift(int(a), n) for a in v]
    mixed = np.array([2**28, 2**28 - 1, 0], np.int64)  # (sizes that differ: a table set per digit)
    assert _framing.shift(v, mixed).tolist() == [
        zlib_shift(int(a), int(n)) for a, n in zip(v, mixed, strict=True)
    ]


@settings(max_examples=200, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=300), min_size=1, max_size=40),
    equal=st.booleans(),
    lsn=st.integers(0, 2**63 - 100),
    timestamp=st.integers(0, 2**64 - 1),
    durable=st.integers(0, 2**63 - 1),
)
def test_record_crcs_are_zlibs_crc_of_each_whole_record(
    payloads: list[bytes], equal: bool, lsn: int, timestamp: int, durable: int
) -> None:
    if equal:  # (the one-size path: one shift folded into the tables)
        payloads = [p.ljust(len(payloads[0]), b"=")[: len(payloads[0])] for p in payloads]
    sizes = np.array([len(p) for p in payloads], np.uint32)
    crcs = _framing.payload_crcs(sizes, memoryview(b"".join(payloads)))
    assert crcs.tolist() == [zlib.crc32(p) for p in payloads]
    got = _framing.record_crcs(sizes, crcs, lsn=lsn, timestamp=timestamp, durable_lsn=durable)
    want = [
        zlib.crc32(fmt.RECORD_HEADER.pack(len(p), 0, lsn + i, timestamp, durable) + p)
        for i, p in enumerate(payloads)
    ]
    assert got.tolist() == want


def walk_index(
    sizes: list[int], lsn: int, ts: int, offset: int, due: int, interval: int
) -> tuple[bytes, int]:
    """The index entries of FORMAT.md §5.2, record by record, as ``write_batch`` makes them."""
    out = []
    for i, n in enumerate(sizes):
        if offset >= due:
            out.append(fmt.encode_index_entry(lsn + i, ts, offset))
            due = (offset // interval + 1) * interval
        offset += n + fmt.RECORD_OVERHEAD
    return b"".join(out), due


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.sampled_from([0, 1, 5, 100, 511, 512, 3000]), min_size=1, max_size=60),
    equal=st.booleans(),
    lsn=st.integers(0, 2**40),
    offset=st.integers(fmt.SEGMENT_HEADER_SIZE, 10_000),
    due=st.integers(0, 12_000),
    interval=st.sampled_from([512, 1000, 4096]),
)
def test_frame_gives_encode_records_bytes_and_the_index_walks_entries(
    sizes: list[int], equal: bool, lsn: int, offset: int, due: int, interval: int
) -> None:
    if equal:  # (one size: the strided path)
        sizes = [sizes[0]] * len(sizes)
    rng = random.Random(len(sizes))
    payloads = [rng.randbytes(n) for n in sizes]
    data = memoryview(b"".join(payloads))
    size_array = np.array(sizes, np.uint32)
    ts = 1_795_000_000_000_000_000
    framed = _framing.frame(
        size_array,
        data,
        _framing.payload_crcs(size_array, data),
        lsn=lsn,
        timestamp=ts,
        durable_lsn=lsn // 2,
        offset=offset,
        due=due,
        interval=interval,
    )
    assert bytes(framed.data) == b"".join(
        fmt.encode_record(lsn + i, ts, lsn // 2, p) for i, p in enumerate(payloads)
    )
    assert (framed.count, framed.last_size) == (len(sizes), sizes[-1] + fmt.RECORD_OVERHEAD)
    assert (framed.index, framed.due) == walk_index(sizes, lsn, ts, offset, due, interval)


def stage(writer: _source._Writer, rows: list[bytes], per_block: int) -> _source._Staged:
    batches = (
        pa.record_batch([pa.array(rows[i : i + per_block], pa.binary())], names=["payload"])
        for i in range(0, len(rows), per_block)
    )
    return writer.write(batches)


def log_files(path: Path) -> dict[str, bytes]:
    out = {}
    for name in sorted(os.listdir(path)):
        if name.endswith((".seg", ".idx")):
            data = (path / name).read_bytes()
            if name == "0" * 20 + ".seg":  # (its creation time, and the header's CRC over it)
                data = data[:24] + data[40:]
            out[name] = data
    return out


@pytest.mark.parametrize("batch_size_max", [None, 50_000])
def test_the_commit_writes_the_bytes_append_batch_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch_size_max: int | None
) -> None:
    if batch_size_max is not None:  # every batch appended in parts, a block split between two
        monkeypatch.setattr(_source, "_BATCH_SIZE_MAX", batch_size_max)
    rng = random.Random(28)
    jobs = []
    for job in range(5):
        files = []
        for _task in range(3):
            count = rng.choice([1, 30, 200])
            rows = [rng.randbytes(rng.choice([0, 0, 1, 36, 100, 700, 5000])) for _ in range(count)]
            if job == 2 and _task == 1 and batch_size_max is None:
                rows[count // 2] = rng.randbytes(1 << 20)  # a large record, in a segment of its own
            files.append(rows)
        jobs.append(files)
    ts = 4_000_000_000_000_000_000  # (ahead of the clock: both logs get the same timestamps)
    logs = {}
    for mode in ("rows", "framed"):
        path = tmp_path / mode
        with logspool.open(path, segment_size_max=200_000, index_interval=512) as log:
            for j, files in enumerate(jobs):
                # (a writer a job, as Spark makes one: its staging directory goes when it ends)
                writer = _source._Writer(
                    {"path": str(tmp_path / "staging")}, SCHEMA, f"job-{mode}-{j}", durable=False
                )
                staged = [stage(writer, rows, per_block=rng.choice([7, 50, 1000])) for rows in files]
                paths = [m.path for m in staged]
                count = sum(m.count for m in staged)
                with log.exclusive() as tail:
                    if mode == "rows":
                        size = _source._staged_size(paths, count, _source._staged_form(paths))
                        _source._append_rows(tail, paths, size, 0, ts + j)
                    else:
                        assert not tail.compressed
                        _source._append(tail, paths, count, timestamp=ts + j, size_max=log.record_size_max)
                writer.discard()
        assert logspool.verify(path).ok
        logs[mode] = log_files(path)
    assert len(logs["rows"]) > 4  # (segments sealed by batches that did not fit)
    assert logs["framed"].keys() == logs["rows"].keys()
    for name, data in logs["rows"].items():
        assert logs["framed"][name] == data, name
    with logspool.open(tmp_path / "framed", readonly=True) as log:
        got = [r.payload for r in log.read()]
    assert got == [row for files in jobs for rows in files for row in rows]


def test_the_commit_skips_rows_and_reads_blocks_staged_before_the_crcs(tmp_path: Path) -> None:
    """A replay's ``skip`` (rows in the log already), and a file staged by the release before
    the CRCs (``LSSTAGE2``: the same blocks without them), framed as the rows path frames them."""
    rows = [b"r%d" % i * (i % 7) for i in range(100)]
    v2 = tmp_path / "v2.staged"
    sizes = np.array([len(r) for r in rows], "<u4")
    v2.write_bytes(
        _source._STAGE_MAGIC_V2
        + _source._STAGE_BLOCK.pack(len(rows), int(sizes.sum()))
        + sizes.tobytes()
        + b"".join(rows)
    )
    writer = _source._Writer({"path": str(tmp_path / "staging")}, SCHEMA, "job", durable=False)
    v3 = stage(writer, rows, per_block=9).path
    ts = 4_000_000_000_000_000_000
    logs = {}
    for mode in ("rows", "framed"):
        path = tmp_path / mode
        with logspool.open(path) as log, log.exclusive() as tail:
            files = [str(v2), v3]
            if mode == "rows":
                size = _source._staged_size(files, 200, _source._staged_form(files))
                _source._append_rows(tail, files, size, 13, ts)
            else:
                _source._append(tail, files, 200, skip=13, timestamp=ts, size_max=log.record_size_max)
        logs[mode] = log_files(path)
    assert logs["rows"] == logs["framed"]
    with logspool.open(tmp_path / "framed", readonly=True) as log:
        assert [r.payload for r in log.read()] == (rows + rows)[13:]


@pytest.mark.parametrize("where", ["a row's bytes", "a row's CRC", "a row's size"])
def test_a_staged_block_changed_after_its_task_wrote_it_fails_the_commit_and_appends_nothing(
    tmp_path: Path, where: str
) -> None:
    """The records' CRCs come from the CRCs the tasks staged, not from the bytes read back: a
    staged file changed in between (a flipped bit on disk, a file system that lost a page) must
    not be published with wrong CRCs. Each block's own CRC is checked before the publish."""
    path = tmp_path / "log"
    writer = _source._BatchWriter({"path": str(path)}, SCHEMA)
    rows = [b"row %d" % i for i in range(300)]
    staged = stage(writer.w, rows, per_block=100)
    raw = bytearray(Path(staged.path).read_bytes())
    block_head = _source._STAGE_BLOCK_V3.size
    second = len(_source._STAGE_MAGIC) + block_head + 8 * 100 + sum(map(len, rows[:100]))  # its head
    at = {
        "a row's bytes": len(raw) - 1,  # (the last block's last row: the log checks it too)
        "a row's CRC": second + block_head + 4 * 100 + 4 * 7,
        "a row's size": second + block_head + 4 * 7,
    }
    raw[at[where]] ^= 0x01
    Path(staged.path).write_bytes(bytes(raw))
    with pytest.raises(logspool.LogspoolError, match=r"checksum does not match|do not add up"):
        writer.commit([staged])
    with logspool.open(path, readonly=True) as log:
        assert list(log.read()) == []
    assert logspool.verify(path).ok
