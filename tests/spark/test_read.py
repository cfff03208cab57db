"""spark.read.format("logspool"): a real local Spark reading real logs.

Counts and contents against what the log's own reader returns (lsn, timestamp to the
microsecond, payload, segment and offset), partitions by segment and within segments, every
option, the decodes, damage, and the errors a user gets for bad options.
"""

from __future__ import annotations

import json
import random
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import logspool
from logspool import _format as fmt
from logspool import _segment as seg


def make_log(path: Path, n: int = 3000, segment_size_max: int = 64 * 1024) -> list[fmt.Record]:
    with logspool.open(path, segment_size_max=segment_size_max, index_interval=4096) as log:
        for i in range(0, n, 100):
            log.append_many(
                [
                    json.dumps({"key": f"k{j % 7}", "amount": j, "at": "2026-11-21T12:00:00Z"}).encode()
                    for j in range(i, i + 100)
                ]
            )
        return list(log.read())


def offsets(path: Path) -> dict[int, tuple[int, int]]:
    """lsn -> (segment, offset), from the segment files themselves."""
    out = {}
    for f in sorted(path.glob("*.seg")):
        base = int(f.stem)
        infos: list[seg.RecordInfo] = []
        seg.parse(f.read_bytes(), fmt.SEGMENT_HEADER_SIZE, base, 1 << 24, None, infos)
        out.update({i.lsn: (base, i.offset) for i in infos})
    return out


def test_batch_read_returns_every_record_with_its_place(read: Any, tmp_path: Path) -> None:
    path = tmp_path / "log"
    records = make_log(path)
    df = read(path)
    assert [f.name for f in df.schema.fields] == ["lsn", "timestamp", "payload", "segment", "offset"]
    # (the Python source: a task a segment; the JVM reader packs these five small ones into one
    # task a core of local[2], as Spark packs small files)
    assert df.rdd.getNumPartitions() == (2 if read.jvm else len(list(path.glob("*.seg"))))
    rows = sorted(df.collect(), key=lambda r: r.lsn)
    places = offsets(path)
    assert len(rows) == len(records) == 3000
    for row, rec in zip(rows, records, strict=True):
        assert (row.lsn, bytes(row.payload)) == (rec.lsn, rec.payload)
        assert row.timestamp == datetime.fromtimestamp(rec.timestamp // 1000 / 1e6, tz=UTC).replace(
            tzinfo=None
        )
        assert (row.segment, row.offset) == places[rec.lsn]


def test_big_segments_are_split_at_index_entries(read: Any, tmp_path: Path) -> None:
    path = tmp_path / "log"
    make_log(path, segment_size_max=1 << 20)
    assert len(list(path.glob("*.seg"))) == 1
    df = read(path, maxPartitionBytes="32768")
    assert df.rdd.getNumPartitions() > 3
    lsns = [r.lsn for r in df.select("lsn").collect()]
    assert sorted(lsns) == list(range(3000))


def test_positions_and_timestamps_bound_the_read(read: Any, tmp_path: Path) -> None:
    path = tmp_path / "log"
    with logspool.open(path, segment_size_max=8192) as log:
        for i in range(50):
            log.append(b"early-%d" % i)
        middle = datetime.now(UTC)
        for i in range(50):
            log.append(b"late-%d" % i)

    def lsns(**opts: str) -> list[int]:
        return sorted(r.lsn for r in read(path, **opts).select("lsn").collect())

    assert lsns(startingPosition="10", endingPosition="20") == list(range(10, 20))
    assert lsns(startingPosition="earliest", endingPosition="latest") == list(range(100))
    assert lsns(startingPosition="latest") == []
    assert lsns(startingPosition="95", endingPosition="500") == list(range(95, 100))
    stamp = middle.isoformat().replace("+00:00", "Z")
    assert lsns(startingTimestamp=stamp) == list(range(50, 100))
    assert lsns(endingTimestamp=stamp) == list(range(50))
    millis = int(middle.timestamp() * 1000)
    with logspool.open(path) as log:
        first = next(r.lsn for r in log.read() if r.timestamp >= millis * 1_000_000)
    assert first <= 50 and lsns(startingTimestamp=str(millis)) == list(range(first, 100))


def test_decode_string_gives_text_and_replaces_bytes_that_are_not_utf8(read: Any, tmp_path: Path) -> None:
    path = tmp_path / "log"
    make_log(path, n=700)
    bad = [b"caf\xc3", b"\xff\xfeok", b"a\xe2\x82b", b"\xed\xa0\x80", b"\xf0\x9f\x98\x80 fine", b"\xc0\xaf"]
    with logspool.open(path) as log:
        first_bad = log.append_many(bad)[0]
    text = read(path, decode="string")
    assert text.schema["payload"].dataType.simpleString() == "string"
    assert text.filter("lsn = 3").first().payload == json.dumps(
        {"key": "k3", "amount": 3, "at": "2026-11-21T12:00:00Z"}
    )
    rows = sorted(text.filter(f"lsn >= {first_bad}").collect())
    assert [r.payload for r in rows] == [b.decode("utf-8", "replace") for b in bad]


def test_decode_json_with_a_schema(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "log"
    make_log(path, n=700)
    with logspool.open(path) as log:
        log.append(b"not json")
    df = (
        spark.read.format("logspool")
        .option("decode", "json")
        .schema("lsn long, key string, amount long, at timestamp, missing string")
        .load(str(path))
    )
    sums = {
        r.key: r.total
        for r in df.groupBy("key").agg({"amount": "sum"}).withColumnRenamed("sum(amount)", "total").collect()
    }
    assert sums == {f"k{k}": sum(j for j in range(700) if j % 7 == k) for k in range(7)} | {None: None}
    row = df.filter("lsn = 5").first()
    assert row.at == datetime(2026, 11, 21, 12, 0) and row.missing is None
    bad = df.filter("lsn = 700").first()
    assert (bad.key, bad.amount) == (None, None)  # not JSON: every field null, the row kept


def test_damage_fails_the_read_naming_file_and_offset_unless_checksums_are_off(
    read: Any, tmp_path: Path
) -> None:
    path = tmp_path / "log"
    make_log(path, n=500, segment_size_max=1 << 20)
    with logspool.open(path) as log:
        log.cutover()  # the damage goes in a sealed segment: planning reads only the newest one
        log.append(b"after")
    segment = sorted(path.glob("*.seg"))[0]
    data = bytearray(segment.read_bytes())
    _base, offset = offsets(path)[250]
    data[offset + fmt.RECORD_HEADER_SIZE + 3] ^= 0x01  # one bit of one payload
    segment.write_bytes(bytes(data))
    df = read(path)  # planned: the damage is not where planning looks (the head)
    with pytest.raises(Exception) as info:
        df.collect()  # not count(): the JVM reader counts from headers (test_pushdown.py)
    assert f"{segment}: offset {offset}" in str(info.value)
    unchecked = read(path, verifyChecksums="false")
    assert len(unchecked.collect()) == 501  # the user chose to trust the bytes: the flipped bit is read


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"decode": "xml"}, "option decode: expected one of binary, string, json"),
        ({"decode": "json"}, "decode=json needs the payload's schema"),
        ({"startingPosition": "soon"}, "option startingPosition: expected earliest or latest or an lsn"),
        ({"startingTimestamp": "yesterday"}, "option startingTimestamp: expected RFC 3339"),
        ({"verifyChecksums": "maybe"}, "option verifyChecksums: expected true or false"),
        ({"maxPartitionBytes": "-1"}, "option maxPartitionBytes: expected a positive integer"),
        (
            {"startingPositon": "10"},
            "unknown option 'startingpositon' for a batch read of a log; the options",
        ),
        ({"maxRecordsPerTrigger": "10"}, "unknown option 'maxrecordspertrigger' for a batch read"),
        (
            {"minPartitions": "8"},
            "option minpartitions is the Kafka source's; here partitions follow segments",
        ),
        ({"kafka.bootstrap.servers": "h:9092"}, "option kafka.bootstrap.servers is the Kafka source's"),
        (
            {"startingOffsets": '{"t":{"0":5}}'},
            "a log has one lsn sequence, not Kafka's offsets by partition",
        ),
        ({"startingOffsets": "1", "startingPosition": "2"}, "give startingPosition or its Kafka spelling"),
    ],
)
def test_bad_options_are_refused_with_the_option_named(
    read: Any, tmp_path: Path, options: dict[str, str], message: str
) -> None:
    path = tmp_path / "log"
    make_log(path, n=10)
    with pytest.raises(Exception, match=message):
        read(path, **options).count()


def test_a_missing_directory_is_named(read: Any, tmp_path: Path) -> None:
    with pytest.raises(Exception, match="no such log directory"):
        read(tmp_path / "nope").count()


def test_the_jvm_reader_returns_exactly_the_python_sources_rows(spark: Any, tmp_path: Path) -> None:
    """Compressed and plain records, several segments, a gap left by repair, split partitions,
    bounds inside segments, pruned columns, and text decoding of arbitrary bytes."""
    from logspool.spark import load

    rng = random.Random(5)
    path = tmp_path / "log"
    with logspool.open(path, segment_size_max=32 * 1024, index_interval=1024, compression="zstd") as log:
        for i in range(1500):
            if i % 3 == 0:
                log.append(b"compressible %d " % i * 20)  # stored as a zstd frame
            else:
                log.append(
                    bytes(rng.choice((0x41, 0x80, 0xC3, 0xE2, 0xED, 0xF0, 0xFF)) for _ in range(i % 40))
                )
    sealed = sorted(path.glob("*.seg"))[1]
    data = bytearray(sealed.read_bytes())
    data[fmt.SEGMENT_HEADER_SIZE + fmt.RECORD_HEADER_SIZE] ^= 0xFF  # damage its first record...
    sealed.write_bytes(bytes(data))
    report = logspool.repair(path)  # ...which repair replaces by a gap record
    assert report.ok and report.actions
    with logspool.open(path) as log:
        reader = log.reader(start=0)
        while reader.next(timeout=0) is not None:
            pass
        assert reader.gaps

    def both(columns: list[str], **options: str) -> tuple[list[Any], list[Any]]:
        python = spark.read.format("logspool").options(**options).load(str(path)).select(*columns)
        jvm = load(spark, str(path), jvm=True, **options).select(*columns)
        return sorted(python.collect()), sorted(jvm.collect())

    everything = ["lsn", "timestamp", "payload", "segment", "offset"]
    python, jvm = both(everything, maxPartitionBytes="4096")
    assert len(python) == 1499 and python == jvm  # one lsn lost to the gap
    assert both(everything, startingPosition="100", endingPosition="1111") == both(
        everything, startingPosition="100", endingPosition="1111", maxPartitionBytes="2048"
    )
    python, jvm = both(["lsn", "payload"], decode="string", verifyChecksums="false")
    assert len(python) == 1499 and python == jvm
    python, jvm = both(["offset"], startingPosition="1400")
    assert len(python) == 100 and python == jvm


def test_load_chooses_the_python_source_for_json_and_refuses_what_the_jvm_cannot_do(
    spark: Any, tmp_path: Path
) -> None:
    from logspool.spark import JvmError, load

    path = tmp_path / "log"
    make_log(path, n=100)
    df = load(spark, str(path), schema="lsn long, amount long", decode="json")
    assert sorted(r.amount for r in df.collect()) == list(range(100))
    with pytest.raises(JvmError, match="decode=json reads with jvm=False"):
        load(spark, str(path), schema="lsn long, amount long", decode="json", jvm=True)
    with pytest.raises(Exception, match="a schema is only given with decode=json"):
        load(spark, str(path), schema="lsn long")
    assert load(spark, str(path), jvm=False, startingPosition=90).count() == 10
    assert load(spark, str(path), startingPosition="latest").count() == 0  # no partitions at all


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_the_jvm_reader_reads_the_golden_logs_of_each_format_version(
    spark: Any, tmp_path: Path, version: str
) -> None:
    """The committed golden logs (tests/golden): format version 1, and version 2 with compressed
    records and a gap record. The JVM reader was written from docs/FORMAT.md alone."""
    from logspool.spark import load

    golden = Path(__file__).parent.parent / "golden" / version
    path = tmp_path / version
    shutil.copytree(golden, path)  # a readonly open may not touch the committed copy
    with logspool.open(path, readonly=True) as log:
        expected = [(r.lsn, r.payload) for r in log.read()]
    rows = sorted(load(spark, str(path), jvm=True).select("lsn", "payload").collect())
    assert [(r.lsn, bytes(r.payload)) for r in rows] == expected
    assert len(expected) == (12 if version == "v1" else 19)


@pytest.mark.parametrize(
    "damage",
    ["payload", "trailer", "two", "lsn-after", "length-after", "after-zstd"],
)
def test_the_jvm_readers_checksums_of_a_batch_name_the_first_damaged_record(
    spark: Any, tmp_path: Path, damage: str
) -> None:
    """The JVM reader checks a batch's plain records with one CRC-32 call over their bytes
    (``RangeReader.settle``), the expected value chained from their lengths; any damage in the
    batch still fails the read naming the first damaged record's offset, as a check of each
    did: a payload's byte or a stored checksum's, two records (the first named), a record
    with a damaged lsn, or a length past the limit, after a damaged one (the checksum's error
    first, as the Python reader's), a plain record after a compressed one (its own check,
    chained into the batch's). With ``verifyChecksums=false`` the same read returns every
    row."""
    from logspool.spark import load

    path = tmp_path / "log"
    with logspool.open(path, compression="zstd" if damage == "after-zstd" else None) as log:
        for i in range(6000):  # (more than a batch: 4,096 rows)
            if damage == "after-zstd" and i % 100 == 99:
                log.append(b"compressible %d " % i * 20)  # (a zstd frame)
            else:
                log.append(b"record %d" % i)
    where = offsets(path)
    segment = sorted(path.glob("*.seg"))[0]
    data = bytearray(segment.read_bytes())

    def record_end(lsn: int) -> int:
        return where[lsn + 1][1] if lsn + 1 in where else len(data)

    first = 3000
    if damage in ("payload", "two", "lsn-after", "length-after", "after-zstd"):
        data[where[first][1] + fmt.RECORD_HEADER_SIZE] ^= 0x01
    if damage == "trailer":
        data[record_end(first) - 1] ^= 0x80
    if damage == "two":
        data[where[3500][1] + fmt.RECORD_HEADER_SIZE] ^= 0x01
    if damage == "lsn-after":
        data[where[first + 1][1] + 8] ^= 0x01  # (the next record's lsn: a mismatch)
    if damage == "length-after":
        data[where[3500][1] : where[3500][1] + 4] = b"\xff" * 4  # (a length past the limit)
    if damage == "after-zstd":  # (the record before it a zstd frame, itself plain)
        flags_at = fmt.RECORD_HEADER.unpack_from(data, where[first - 1][1])[1]
        assert flags_at == fmt.FLAG_ZSTD and fmt.RECORD_HEADER.unpack_from(data, where[first][1])[1] == 0
    segment.write_bytes(bytes(data))
    with pytest.raises(Exception) as info:
        load(spark, str(path), jvm=True).select("lsn", "payload").collect()
    assert f"{segment}: offset {where[first][1]}: checksum mismatch (expected" in str(info.value)
    assert "logspool.spark.RangeReader" in str(info.value)
    with pytest.raises(Exception) as info:  # (the Python reader says the same)
        spark.read.format("logspool").load(str(path)).select("lsn", "payload").collect()
    assert f"{segment}: offset {where[first][1]}: checksum mismatch (expected" in str(info.value)
    if damage not in ("lsn-after", "length-after"):
        rows = load(spark, str(path), jvm=True, verifyChecksums="false").select("lsn").collect()
        assert sorted(r.lsn for r in rows) == list(range(6000))


def test_the_jvm_reader_checks_a_batch_across_its_mapping_windows_from_any_start(
    spark: Any, tmp_path: Path
) -> None:
    """A window smaller than a batch, a read starting inside a window: the records checked
    together are those of one window each (the check is made before the window moves), and a
    read of an undamaged log returns every row. (A check left pending across a window's move
    would compare another window's bytes: a checksum error on a sound log.)"""
    from logspool.spark import load

    path = tmp_path / "log"
    with logspool.open(path) as log:
        for i in range(3000):
            log.append(b"r%05d" % i + b"." * 150)
    for start in (37, 1000, 2500):
        rows = load(spark, str(path), jvm=True, jvmMapBytes="4096", startingPosition=str(start))
        assert sorted(r.lsn for r in rows.select("lsn").collect()) == list(range(start, 3000)), start


def test_the_jvm_reader_moves_its_mapping_window_through_a_segment(spark: Any, tmp_path: Path) -> None:
    """A window far smaller than the segment, and records larger than the window: every record
    is read whole, and damage past the first window is still named at its file offset."""
    from logspool.spark import load

    path = tmp_path / "log"
    payloads = [bytes([i % 251]) * (i * 37 % 9000) for i in range(400)]
    with logspool.open(path, segment_size_max=1 << 24) as log:
        log.append_many(payloads)
        log.cutover()  # damage in a sealed segment: planning reads only the newest one
        log.append(b"after")
    rows = sorted(load(spark, str(path), jvm=True, jvmMapBytes="4096").select("lsn", "payload").collect())
    assert [bytes(r.payload) for r in rows] == [*payloads, b"after"]
    with pytest.raises(Exception, match="option jvmMapBytes: expected a positive integer"):
        load(spark, str(path), jvm=True, jvmMapBytes="0")
    segment = sorted(path.glob("*.seg"))[0]
    _base, offset = offsets(path)[333]
    data = bytearray(segment.read_bytes())
    data[offset + fmt.RECORD_HEADER_SIZE] ^= 0x01
    segment.write_bytes(bytes(data))
    with pytest.raises(Exception) as info:
        load(spark, str(path), jvm=True, jvmMapBytes="4096").select("payload").collect()
    assert f"{segment}: offset {offset}: checksum mismatch" in str(info.value)
    assert "logspool.spark.RangeReader" in str(info.value)  # raised by the JVM reader's task


def test_kafka_spellings_are_aliases_and_a_start_below_the_first_lsn_is_data_loss(
    read: Any, tmp_path: Path
) -> None:
    """startingOffsets / endingOffsets read as startingPosition / endingPosition (earliest,
    latest, an lsn); a batch read asked to start below what retention left fails with
    DataLossError, as a stream does, unless failOnDataLoss=false (before, it was clamped in
    silence)."""
    path = tmp_path / "log"
    with logspool.open(path, segment_size_max=4096) as log:
        for i in range(60):
            log.append(b"r%03d" % i + b"." * 100)
        log.set_retention(logspool.Retention(size_max=8192))
        log.cutover()
        first = log.info().first_lsn
    assert first > 0

    def lsns(**options: str) -> list[int]:
        return sorted(r["lsn"] for r in read(path, **options).select("lsn").collect())

    assert lsns(startingOffsets="earliest", endingOffsets=str(first + 3)) == list(range(first, first + 3))
    assert lsns(startingOffsets=str(first + 1), endingOffsets=str(first + 2)) == [first + 1]
    with pytest.raises(Exception, match=r"DataLossError|were removed|lost"):
        read(path, startingPosition="0").count()
    assert lsns(startingPosition="0", failOnDataLoss="false")[0] == first


def test_a_producer_killed_mid_record_leaves_a_readable_log(read: Any, tmp_path: Path) -> None:
    """A half-written record and the preallocated zeros after it at the tail of the newest
    segment (a producer with durability os killed mid-write, no writer since): the end of what
    is readable, for Spark as for log.read (before, every read failed with a checksum mismatch
    until some process opened the log as a writer)."""
    path = tmp_path / "log"
    with logspool.open(path, durability="os") as log:
        log.append_many([b"r%d" % i for i in range(40)])
        end = log.info().segments[-1].size
    newest = path / fmt.segment_name(0)
    record = fmt.encode_record(40, 1, 0, b"x" * 200)
    with open(newest, "r+b") as f:
        f.seek(end)
        f.write(record[:-40] + bytes(40) + bytes(4096))  # cut mid-payload, then zeros
    assert read(path).count() == 40


def test_a_task_that_cannot_see_the_log_says_why(tmp_path: Path) -> None:
    """An executor without the driver's mount: the error names the segment and the cause,
    not a bare FileNotFoundError."""
    from logspool.spark import _partition as part

    missing = part.Range(str(tmp_path / "elsewhere"), 0, 0, 10)
    with pytest.raises(logspool.LogspoolError, match="mount at the same path"):
        list(part.read_range(missing, 1 << 20, True))
    path = tmp_path / "log"
    make_log(path, n=10)
    gone = part.Range(str(path), 1 << 20, 1 << 20, (1 << 20) + 1)
    with pytest.raises(logspool.LogspoolError, match="removed"):
        list(part.read_range(gone, 1 << 20, True))


def test_the_planners_head_is_the_logs_next_lsn_in_every_state(tmp_path: Path) -> None:
    """The source finds the head from the newest segment's last index entry, not its start
    (info() parses the whole segment: 400 ms for a full one): the same lsn as log.info() with no
    segment, one, several, a torn tail after a killed producer, and a missing or garbage index."""
    from logspool.log import Log
    from logspool.spark._source import _head

    def head(path: Path) -> tuple[int, int]:
        with Log(str(path), readonly=True) as log:
            return _head(log), log.info().next_lsn

    path = tmp_path / "log"
    with logspool.open(path, segment_size_max=64 * 1024, index_interval=1024, durability="os") as log:
        assert head(path) == (0, 0)
        log.append_many([b"r%d" % i for i in range(10)])
        assert head(path) == (10, 10)
        for _ in range(30):
            log.append_many([b"x" * 100 for _ in range(100)])
        end = log.info().segments[-1].size
    assert len(list(path.glob("*.seg"))) > 3 and head(path) == (3010, 3010)
    newest = sorted(path.glob("*.seg"))[-1]
    with open(newest, "r+b") as f:  # a producer killed mid-record: half a record, then zeros
        f.seek(end)
        f.write(fmt.encode_record(3010, 1, 0, b"y" * 200)[:-40] + bytes(4096))
    assert head(path) == (3010, 3010)
    index = newest.with_suffix(".idx")
    index.write_bytes(index.read_bytes()[:40] + b"\xff" * 64)  # entries past the first damaged
    assert head(path) == (3010, 3010)
    index.unlink()
    assert head(path) == (3010, 3010)


def test_each_planned_range_starts_at_the_last_index_entry_at_or_before_it(tmp_path: Path) -> None:
    """The driver's plan reads each segment's index once for all its ranges (``start_points``):
    every range starts at the last index entry at or before its first lsn (or the segment's
    first record), and a task reading from there returns exactly the range's records."""
    from logspool.spark import _partition as part

    path = tmp_path / "log"
    with logspool.open(path, segment_size_max=1 << 20) as log:
        for n in range(30):  # (one by one: a batch goes into one segment)
            log.append_many([b"%06d" % (n * 1000 + i) + b"." * 94 for i in range(1000)])
        assert len(log.info().segments) >= 3
        ranges = part.plan(log, 123, 29_876, 64 * 1024)
    assert len(ranges) > 3 * len({r.segment for r in ranges})  # (several ranges a segment)
    for r, got in zip(ranges, part.start_points(ranges), strict=True):
        entries = fmt.decode_index_entries((path / fmt.index_name(r.segment)).read_bytes())
        before = [(e.offset, e.lsn) for e in entries if e.lsn <= r.start]
        assert got == (before[-1] if before else (fmt.SEGMENT_HEADER_SIZE, r.segment)) == part.start_point(r)
        lsns = [lsn for batch in part.read_range(r, 1 << 20, True) for lsn in batch[0]]
        assert lsns == list(range(r.start, r.end))


def test_a_plan_reads_an_index_as_it_is_now_though_it_keeps_the_last_decoded(tmp_path: Path) -> None:
    """The planner keeps each index's entries as last decoded (a stream plans every micro-batch
    from them), and uses them only while the file holds the same bytes: an index that grew, was
    damaged, rewritten or removed is read again."""
    from logspool.spark import _partition as part

    path = tmp_path / "log"
    _share_log(path, 5_000)
    index = path / fmt.index_name(0)

    def fresh() -> tuple[fmt.IndexEntry, ...]:
        raw = index.read_bytes() if index.exists() else b""
        return tuple(fmt.decode_index_entries(raw)) if raw else ()

    first = part._index_entries(str(path), 0)
    assert first == fresh() and len(first) > 10
    assert part._index_entries(str(path), 0) is first  # (the same bytes: decoded once)
    with logspool.open(path, index_interval=4096) as log:
        log.append_many([b"%08d" % j + b"." * 92 for j in range(5_000, 6_000)])
    grown = part._index_entries(str(path), 0)
    assert grown == fresh() and len(grown) > len(first)
    raw = bytearray(index.read_bytes())
    raw[fmt.INDEX_HEADER_SIZE + 10 * fmt.INDEX_ENTRY_SIZE + 3] ^= 0xFF  # the eleventh entry damaged
    index.write_bytes(bytes(raw))
    assert part._index_entries(str(path), 0) == fresh() == grown[:10]
    index.write_bytes(index.read_bytes()[: fmt.INDEX_HEADER_SIZE - 1])  # the header cut short
    assert part._index_entries(str(path), 0) == ()
    index.unlink()
    assert part._index_entries(str(path), 0) == ()
    with logspool.open(path, index_interval=4096) as log:  # (the writer rebuilds it)
        pass
    assert index.exists()
    assert part._index_entries(str(path), 0) == fresh()


def test_the_kept_index_entries_hold_under_threads_planning_at_once(tmp_path: Path) -> None:
    """The planner's Py4J callbacks may run on several threads (two streams' micro-batches):
    each gets every index's entries as the file holds them while a writer grows the newest,
    and the entries kept stay within their bound, their bytes counted right."""
    import threading

    from logspool.spark import _partition as part

    path = tmp_path / "log"
    with logspool.open(path, segment_size_max=64 * 1024, index_interval=1024) as log:
        for i in range(0, 30_000, 500):
            log.append_many([b"%08d" % j + b"." * 92 for j in range(i, i + 500)])
        bases = [int(f.stem) for f in sorted(path.glob("*.idx"))]
        assert len(bases) > 40
        failures: list[BaseException] = []
        stop = threading.Event()

        def plan_again() -> None:
            try:
                for _ in range(15):
                    for base in bases[:-1]:  # (sealed: their indexes do not change)
                        raw = (path / fmt.index_name(base)).read_bytes()
                        assert part._index_entries(str(path), base) == tuple(fmt.decode_index_entries(raw))
                    part._index_entries(str(path), bases[-1])
            except BaseException as err:
                failures.append(err)

        threads = [threading.Thread(target=plan_again) for _ in range(4)]
        for t in threads:
            t.start()
        n = 30_000
        while any(t.is_alive() for t in threads) and not stop.is_set():  # bounded: the threads end
            log.append_many([b"%08d" % j + b"." * 92 for j in range(n, n + 20)])
            n += 20
        for t in threads:
            t.join()
    assert not failures, failures[0]
    with part._DECODED_LOCK:
        kept = sum(len(raw) for raw, _ in part._DECODED.values())
        assert part._decoded_bytes == kept <= part._DECODED_BYTES_MAX


def _share_log(path: Path, n: int = 20_000) -> None:
    """One segment of ``n`` records of 100 bytes (about 2.7 MB), an index entry every 4 KiB."""
    with logspool.open(path, index_interval=4096) as log:
        for i in range(0, n, 1000):
            log.append_many([b"%08d" % j + b"." * 92 for j in range(i, i + 1000)])
        assert len(log.info().segments) == 1


def _covers(ranges: list[Any], start: int, end: int) -> list[int]:
    """The lsn counts of ranges that cover [start, end) once, in order (else the test fails)."""
    assert [r.start for r in ranges] == [start] + [r.end for r in ranges[:-1]]
    assert ranges[-1].end == end
    return [r.end - r.start for r in ranges]


def test_a_plan_that_knows_the_cores_cuts_one_share_of_the_span_a_core(tmp_path: Path) -> None:
    """As Spark cuts files (``FilePartition.maxSplitBytes``): a span is cut into one share of its
    bytes a core, each at least the floor (Spark's openCostInBytes) and at most the partition
    size; without the cores (the Python source's own plan), by the partition size alone."""
    from logspool.spark import _partition as part

    path = tmp_path / "log"
    _share_log(path)
    with logspool.open(path, readonly=True) as log:
        whole = 1 << 30

        def counts(start: int, end: int, size: int, shares: Any) -> list[int]:
            return _covers(part.plan(log, start, end, size, shares), start, end)

        two = counts(0, 20_000, whole, part.Shares(2, 64 * 1024))
        assert len(two) == 2 and all(9_000 <= c <= 11_000 for c in two)  # (cut at an index entry)
        assert len(counts(0, 20_000, whole, part.Shares(4, 64 * 1024))) == 4
        assert counts(0, 20_000, whole, part.Shares(2, 4 << 20)) == [20_000]  # the floor: one task
        assert len(counts(0, 20_000, whole, None)) == 1  # the partition size alone
        capped = counts(0, 20_000, 256 * 1024, part.Shares(2, 64 * 1024))  # the size caps a share
        assert 9 <= len(capped) <= 12
        assert capped == counts(0, 20_000, 256 * 1024, None)
        tail = counts(15_000, 20_000, whole, part.Shares(2, 64 * 1024))  # the span's bytes, not the log's
        assert len(tail) == 2 and all(2_000 <= c <= 3_000 for c in tail)


def test_a_plan_shares_the_bytes_the_span_holds_in_later_segments_and_of_any_size(tmp_path: Path) -> None:
    """The bytes shared are those of the span itself, from the offsets of its first and last
    records: a span in a later segment, and records ten times larger at the tail of a segment
    than before them (a micro-batch after producers changed), are cut into one range a core,
    with no sliver of a range left over."""
    from logspool.spark import _partition as part

    path = tmp_path / "log"
    with logspool.open(path, index_interval=4096) as log:
        for i in range(0, 20_000, 1000):
            log.append_many([b"%08d.." % j for j in range(i, i + 1000)])  # 10 bytes
        for i in range(20_000, 22_000, 500):
            log.append_many([b"%08d" % j + b"." * 992 for j in range(i, i + 500)])  # 1,000 bytes
    with logspool.open(path, readonly=True) as log:
        shares = part.Shares(2, 64 * 1024)
        tail = _covers(part.plan(log, 20_000, 22_000, 1 << 30, shares), 20_000, 22_000)
        assert len(tail) == 2 and all(800 <= c <= 1_200 for c in tail)
        assert len(part.plan(log, 0, 22_000, 1 << 30, shares)) == 2  # (no third range of a few records)

    later = tmp_path / "later"
    with logspool.open(later, segment_size_max=1 << 20, index_interval=4096) as log:
        for i in range(0, 40_000, 1000):
            log.append_many([b"%08d" % j + b"." * 92 for j in range(i, i + 1000)])
        bases = [s.base_lsn for s in log.info().segments]
    assert len(bases) >= 4
    with logspool.open(later, readonly=True) as log:
        lo, hi = bases[2] + 100, bases[3]  # inside the third segment, sealed
        inside = _covers(part.plan(log, lo, hi, 1 << 30, part.Shares(2, 16 * 1024)), lo, hi)
        assert len(inside) == 2 and abs(inside[0] - inside[1]) <= 200


def test_a_plan_that_knows_the_cores_says_about_how_many_bytes_each_range_holds(tmp_path: Path) -> None:
    """The sizes the JVM reader packs ranges by (``plan_sized``): each range's bytes from the
    offsets of its ends, together the bytes of the segments' records, within a few percent."""
    from logspool.spark import _partition as part

    path = tmp_path / "log"
    with logspool.open(path, segment_size_max=64 * 1024, index_interval=4096) as log:
        for i in range(0, 20_000, 250):
            log.append_many([b"%08d" % j + b"." * 92 for j in range(i, i + 250)])
        assert len(log.info().segments) > 30
    records = 20_000 * (100 + fmt.RECORD_OVERHEAD)
    with logspool.open(path, readonly=True) as log:
        sized = part.plan_sized(log, 0, 20_000, 1 << 30, part.Shares(2, 64 * 1024))
        assert _covers([r for r, _ in sized], 0, 20_000)
        assert abs(sum(size for _, size in sized) - records) < records * 0.05
        assert all(abs(size - (r.end - r.start) * (100 + fmt.RECORD_OVERHEAD)) < 2_000 for r, size in sized)


def test_the_jvm_reader_packs_small_ranges_into_tasks_after_its_filters(spark: Any, tmp_path: Path) -> None:
    """Many small segments: the JVM reader packs them as Spark packs small files, a task a core
    of local[2], each task's ranges read one after another, the tasks and their rows in lsn
    order; a pushed filter packs what it keeps (still a task a core, not the planned tasks
    emptied); the rows are the Python source's (a task a segment). A small last segment rides
    with a full one rather than start a third task once both ended."""
    from pyspark.sql import functions as F

    from logspool.spark import load

    path = tmp_path / "log"
    records = make_log(path, n=6000, segment_size_max=16 * 1024)
    segments = len(list(path.glob("*.seg")))
    assert segments > 30
    jvm = load(spark, str(path), jvm=True)
    python = spark.read.format("logspool").load(str(path))
    assert (jvm.rdd.getNumPartitions(), python.rdd.getNumPartitions()) == (2, segments)
    columns = ["lsn", "timestamp", "payload", "segment", "offset"]
    got = sorted(tuple(r) for r in jvm.select(*columns).collect())
    assert got == sorted(tuple(r) for r in python.select(*columns).collect())
    assert [r[0] for r in got] == [rec.lsn for rec in records]
    assert [r.lsn for r in jvm.select("lsn").collect()] == list(range(6000))  # (in lsn order)

    def spans(df: Any) -> list[tuple[int, int, int]]:
        found = df.groupBy(F.spark_partition_id().alias("task")).agg(F.min("lsn"), F.max("lsn"), F.count("*"))
        return sorted((r[1], r[2], r[3]) for r in found.collect())

    assert spans(jvm)[0][0] == 0
    kept = jvm.where("lsn >= 4500")
    assert kept.rdd.getNumPartitions() == 2
    halves = spans(kept)
    assert len(halves) == 2 and halves[0][0] == 4500 and halves[0][1] + 1 == halves[1][0]
    assert sum(n for _, _, n in halves) == 1500

    tail = tmp_path / "tail"
    with logspool.open(tail, segment_size_max=1 << 20, index_interval=4096) as log:
        n = 0
        while len(log.info().segments) < 3 or n < log.info().segments[-1].base_lsn + 300:  # bounded: n grows
            log.append_many([b"%08d" % j + b"." * 92 for j in range(n, n + 100)])
            n += 100
        assert len(log.info().segments) == 3  # two full segments and a small last one
    assert load(spark, str(tail), jvm=True).rdd.getNumPartitions() == 2


def test_the_jvm_reader_and_stream_plan_with_the_sessions_file_settings(spark: Any, tmp_path: Path) -> None:
    """``load`` and ``load_stream`` (the JVM reader's plans, made in the driver) cut a log as the
    session cuts files: one share a core (local[2]: two), at least
    ``spark.sql.files.openCostInBytes``, at most ``spark.sql.files.maxPartitionBytes`` or the
    read's own ``maxPartitionBytes``; the rows are the same whatever the cut."""
    from logspool.spark import _jvm, load

    path = tmp_path / "log"
    _share_log(path)
    settings = {"spark.sql.files.openCostInBytes": "65536", "spark.sql.files.maxPartitionBytes": "134217728"}
    before = {key: spark.conf.get(key) for key in settings}
    try:
        for key, value in settings.items():
            spark.conf.set(key, value)

        def tasks(**options: str) -> int:
            df = load(spark, str(path), jvm=True, **options)
            assert sorted(df.agg({"lsn": "sum"}).collect()[0]) == [sum(range(20_000))]
            return int(df.rdd.getNumPartitions())

        assert tasks() == 2
        spark.conf.set("spark.sql.files.minPartitionNum", "4")
        try:
            assert tasks() == 4  # the session's minimum, over its cores
        finally:
            spark.conf.unset("spark.sql.files.minPartitionNum")
        # (the Python source's own plan, in a worker: one range, 2.7 MB under its 32 MiB)
        assert spark.read.format("logspool").load(str(path)).rdd.getNumPartitions() == 1
        assert 9 <= tasks(maxPartitionBytes="262144") <= 12  # the read's own size caps a share
        spark.conf.set("spark.sql.files.maxPartitionBytes", "524288")
        assert 5 <= tasks() <= 6  # the session's cap
        spark.conf.set("spark.sql.files.openCostInBytes", str(64 << 20))
        assert tasks() in (5, 6)  # (the cap comes first, as Spark's)
        spark.conf.set("spark.sql.files.maxPartitionBytes", "134217728")
        assert tasks() == 1  # the floor
        assert tasks(maxPartitionBytes="262144") >= 9  # (a smaller size than the floor is the read's word)

        spark.conf.set("spark.sql.files.openCostInBytes", "65536")
        options = _jvm._options({"path": str(path), "startingPosition": "earliest"}, "stream read")
        planner = _jvm._Planners(spark, options, _jvm.LogspoolDataSource(options).schema()).open()
        start = planner.initialOffset()
        end = planner.latestOffset(start, True)
        ranges = planner.ranges(start, end).split(";")
        assert len(ranges) == 2  # the stream's micro-batch, cut the same way
    finally:
        for key, value in before.items():
            spark.conf.set(key, value)
