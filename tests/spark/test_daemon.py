"""format("logspool").option("server", HOST:PORT): reads, streams and writes of a log that a real
``logspool serve`` process serves, on the shared local Spark; the tasks reach it over TCP only.

A batch read returns the log's records (planned as several spans, read by several tasks) with
the local read's options; a token and TLS are used; a stream resumes from its checkpoint with no
record twice and none lost; a batch write and a streaming sink land every row once, also when a
task or a batch is sent again (driven here by running the writer's task code again, as Spark
does on a retry); a task that cannot reach the daemon fails naming the address and the reason.
"""

from __future__ import annotations

import dataclasses
import itertools
import shutil
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from logspool import client
from logspool.spark import JvmError, OptionError, _daemon, load

from ..server.conftest import Daemon, free_port

COUNT = 5000


def records(address: str, name: str, **options: Any) -> list[tuple[int, int, bytes]]:
    """Every record of the log ``name`` on the daemon, read with the client (not with Spark)."""
    out: list[tuple[int, int, bytes]] = []
    with client.connect(address, **options) as c:
        pos = 0
        for _ in range(10_000):
            page, nxt = c.log(name).read_page(pos, limit=10_000)
            if not page:
                return out
            out += [(r.lsn, r.timestamp, r.payload) for r in page]
            pos = nxt
    raise AssertionError("the log did not end")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """A daemon process whose log ``events`` holds COUNT records."""
    d = Daemon(tmp_path_factory.mktemp("daemon") / "data").start()
    with client.connect(d.address) as c:
        for start in range(0, COUNT, 500):  # ten batches: ten timestamps
            c.log("events").append_many([b"event-%06d" % i for i in range(start, start + 500)])
    yield d
    d.kill()


def test_a_batch_read_returns_the_logs_records_read_by_several_tasks(spark: Any, served: Daemon) -> None:
    df = (
        spark.read.format("logspool")
        .option("server", served.address)
        .option("log", "events")
        .option("maxPartitionBytes", "20000")  # about 1,000 records a span
        .load()
    )
    assert df.rdd.getNumPartitions() > 1
    rows = df.orderBy("lsn").collect()
    assert [(r.lsn, r.payload) for r in rows] == [(r[0], r[2]) for r in records(served.address, "events")]
    assert rows[0].segment is None and rows[0].offset is None  # LOG_READ names neither
    assert rows[0].timestamp.tzinfo is None  # Spark's TimestampType, as the local read gives
    assert df.schema.names == ["lsn", "timestamp", "payload", "segment", "offset"]
    # load(NAME) names the log as well, and load() through logspool.spark.load takes the Python source
    assert spark.read.format("logspool").option("server", served.address).load("events").count() == COUNT
    assert load(spark, "events", server=served.address).count() == COUNT


def test_positions_timestamps_and_decode_bound_and_shape_the_read(spark: Any, served: Daemon) -> None:
    def read(**options: str) -> Any:
        return (
            spark.read.format("logspool").option("server", served.address).options(**options).load("events")
        )

    got = read(startingPosition="100", endingPosition="250", decode="string").orderBy("lsn").collect()
    assert [r.lsn for r in got] == list(range(100, 250)) and got[0].payload == "event-000100"
    assert read(startingOffsets="latest").count() == 0  # Kafka's spelling, as for a local log
    with client.connect(served.address) as c:
        c.log("json").append_many([b'{"n": 1, "at": "2026-11-25T16:00:00Z"}', b"not json", b'{"n": 3}'])
    parsed = (
        spark.read.format("logspool")
        .option("server", served.address)
        .option("decode", "json")
        .schema("lsn long, n long, at timestamp")
        .load("json")
        .orderBy("lsn")
        .collect()
    )
    assert [(r.lsn, r.n) for r in parsed] == [(0, 1), (1, None), (2, 3)] and parsed[0].at is not None
    stamps = records(served.address, "events")
    at = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=stamps[3000][1] // 1000)
    at_ns = stamps[3000][1] // 1000 * 1000  # what the option says, in the records' unit
    first = min(r[0] for r in stamps if r[1] >= at_ns)
    assert 0 < first <= 3000
    got_ts = read(startingTimestamp=at.isoformat()).agg({"lsn": "min"}).collect()[0][0]
    assert got_ts == first
    later = (at + timedelta(microseconds=1)).isoformat()
    assert read(endingTimestamp=later).count() == len([r for r in stamps if r[1] < at_ns + 1000])


def test_options_that_do_not_apply_are_refused_with_their_name(
    spark: Any, served: Daemon, tmp_path: Path
) -> None:
    def fails(**options: str) -> str:
        with pytest.raises(Exception) as err:
            spark.read.format("logspool").options(**options).load("events").count()
        return str(err.value)

    assert "give server too" in fails(token="x")
    assert "jvmmapbytes does not apply with server" in fails(server=served.address, jvmMapBytes="4096")
    assert "verifyChecksums=false does not apply" in fails(server=served.address, verifyChecksums="false")
    with pytest.raises(JvmError, match="local log directories only"):
        load(spark, "events", jvm=True, server=served.address)
    with pytest.raises(OptionError, match="name the log"):
        _daemon.remote({"server": served.address})
    from logspool.spark._source import LogspoolDataSource

    source = LogspoolDataSource({"server": served.address, "log": "events", "subscriber": "s"})
    with pytest.raises(OptionError, match="subscriber does not apply with server"):
        source.streamReader(source.schema())
    with pytest.raises(OptionError, match="tlsCaFile is for tls=true"):
        _daemon.remote({"server": served.address, "log": "e", "tls": "false", "tlscafile": str(tmp_path)})


def test_a_token_and_tls_are_used_by_the_driver_and_the_tasks(spark: Any, tmp_path: Path) -> None:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command makes the test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)  # fmt: skip
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    d = Daemon(tmp_path / "data", "--token", "s3cret", "--tls-cert", str(cert), "--tls-key", str(key)).start()
    try:
        import ssl

        ctx = ssl.create_default_context(cafile=str(cert))
        with client.connect(d.address, token="s3cret", ssl_context=ctx) as c:
            c.log("secure").append_many([b"x%d" % i for i in range(100)])
        df = (
            spark.read.format("logspool")
            .option("server", d.address)
            .option("tokenFile", str(token))
            .option("tlsCaFile", str(cert))
            .option("maxPartitionBytes", "1000")
            .load("secure")
        )
        assert df.rdd.getNumPartitions() > 1 and df.count() == 100
        with pytest.raises(Exception, match="AuthError"):
            spark.read.format("logspool").option("server", d.address).option("token", "wrong").option(
                "tlsCaFile", str(cert)
            ).load("secure").count()
    finally:
        d.kill()


def test_a_task_that_cannot_reach_the_daemon_fails_naming_the_address_and_why(
    spark: Any, served: Daemon
) -> None:
    """The driver planned the read with the daemon; the task's route to it is a closed port."""
    from logspool.spark._source import LogspoolDataSource

    source = LogspoolDataSource({"server": served.address, "log": "events"})
    reader = source.reader(source.schema())
    assert isinstance(reader, _daemon.BatchReader)
    spans = list(reader.partitions())
    port = free_port()  # nothing listens there
    reader.remote = dataclasses.replace(reader.remote, address=f"127.0.0.1:{port}")

    def task(_: Any) -> Iterator[int]:
        for batch in reader.read(spans[0]):
            yield batch.num_rows

    with pytest.raises(Exception) as err:
        spark.sparkContext.parallelize([0], 1).mapPartitions(task).collect()
    text = str(err.value)
    assert f"partition 0 cannot reach the daemon serving the log 'events' at 127.0.0.1:{port}" in text
    assert "Connection refused" in text
    # the driver's own attempt says the same of itself
    with pytest.raises(Exception, match=f"the driver cannot reach the daemon .* at 127.0.0.1:{port}"):
        spark.read.format("logspool").option("server", f"127.0.0.1:{port}").load("events").count()


def stream_to_parquet(
    spark: Any, address: str, name: str, out: Path, checkpoint: Path, **options: str
) -> Any:
    query = (
        spark.readStream.format("logspool")
        .option("server", address)
        .options(**{"startingPosition": "earliest", **options})
        .load(name)
        .selectExpr("lsn", "cast(payload as string) as text")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120), "the availableNow query did not end in 120 s"
    assert query.exception() is None
    return query


def test_a_stream_resumes_from_its_checkpoint_with_no_record_twice(spark: Any, tmp_path: Path) -> None:
    d = Daemon(tmp_path / "data").start()
    try:
        with client.connect(d.address) as c:
            c.log("s").append_many([b"a-%05d" % i for i in range(3000)])
        out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
        q = stream_to_parquet(spark, d.address, "s", out, checkpoint, maxRecordsPerTrigger="1000")
        assert q.lastProgress["sources"][0]["endOffset"] == '{"lsn": 3000}'
        assert spark.read.parquet(str(out)).count() == 3000
        batches = len(list((checkpoint / "commits").iterdir()))
        assert batches >= 3  # admission control split the backlog
        with client.connect(d.address) as c:
            c.log("s").append_many([b"b-%05d" % i for i in range(1500)])
        stream_to_parquet(spark, d.address, "s", out, checkpoint, maxRecordsPerTrigger="1000")
        got = spark.read.parquet(str(out)).orderBy("lsn").collect()
        assert [r.lsn for r in got] == list(range(4500))
        assert [r.text.encode() for r in got] == [r[2] for r in records(d.address, "s")]
    finally:
        d.kill()


def test_a_stream_checks_its_start_against_the_first_lsn(tmp_path: Path) -> None:
    """A checkpointed offset below the daemon's first lsn is data loss (as for a local log), or,
    with failOnDataLoss=false, the stream goes on from the first lsn."""
    from logspool.errors import DataLossError
    from logspool.spark._source import LogspoolDataSource

    d = Daemon(tmp_path / "data").start()
    try:
        with client.connect(d.address) as c:
            c.log("s").append_many([b"x"] * 10)
        options = {"server": d.address, "log": "s", "maxBytesPerTrigger": "1"}
        source = LogspoolDataSource(options)
        reader = source.streamReader(source.schema())
        assert isinstance(reader, _daemon.StreamReader)
        assert reader.initialOffset() == {"lsn": 10}  # latest, as Kafka's default
        assert reader.latestOffset({"lsn": 2}, reader.getDefaultReadLimit()) == {"lsn": 3}  # one record
        assert reader._checked_start(9, 7) == 9
        with pytest.raises(DataLossError):
            reader._checked_start(3, 7)
        lenient = LogspoolDataSource({**options, "failOnDataLoss": "false"})
        assert lenient.streamReader(source.schema())._checked_start(3, 7) == 7  # type: ignore[attr-defined]
    finally:
        d.kill()


def test_a_batch_write_lands_every_row_once_and_reads_back(spark: Any, tmp_path: Path) -> None:
    d = Daemon(tmp_path / "data").start()
    try:
        df = spark.createDataFrame([(f"row-{i:05d}",) for i in range(3000)], "payload string").repartition(3)
        df.write.format("logspool").option("server", d.address).option("log", "w").mode("append").save()
        back = spark.read.format("logspool").option("server", d.address).load("w")
        assert sorted(r.payload for r in back.collect()) == [b"row-%05d" % i for i in range(3000)]
        assert [r[0] for r in records(d.address, "w")] == list(range(3000))
    finally:
        d.kill()


def test_a_task_sent_again_after_a_partial_send_leaves_each_row_once(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The task code runs twice for one partition, as on a Spark retry: the first attempt dies
    after some of its LOG_FORWARD batches landed; the second sends everything again."""
    from pyspark.sql.types import Row

    from logspool.spark._source import LogspoolDataSource

    monkeypatch.setattr(_daemon, "FORWARD_BYTES", 1000)  # a request every ~40 rows
    d = Daemon(tmp_path / "data").start()
    try:
        rows = [Row(payload=b"p-%05d" % i) for i in range(2000)]
        source = LogspoolDataSource({"server": d.address, "log": "r"})
        writer = source.writer(spark.createDataFrame(rows[:1]).schema, False)

        def dies_after(n: int) -> Iterator[Row]:
            yield from rows[:n]
            raise RuntimeError("the executor died")

        with pytest.raises(RuntimeError):
            writer.write(dies_after(1234))
        landed = len(records(d.address, "r"))
        assert 0 < landed <= 1234
        assert writer.write(iter(rows)) == _daemon.Sent(0, 2000)
        assert writer.write(iter(rows)) == _daemon.Sent(0, 2000)  # and once more: nothing new
        assert [r[2] for r in records(d.address, "r")] == [r.payload for r in rows]
    finally:
        d.kill()


def test_a_streaming_sink_through_the_daemon_writes_each_row_once_across_restarts_and_replays(
    spark: Any, tmp_path: Path
) -> None:
    import logspool
    from logspool.spark import _source

    d = Daemon(tmp_path / "data").start()
    source = tmp_path / "source"
    with logspool.open(source) as log:
        log.append_many([b"s-%05d" % i for i in range(2500)])
    checkpoint = tmp_path / "checkpoint"

    def run() -> None:
        query = (
            spark.readStream.format("logspool")
            .option("startingPosition", "earliest")
            .option("maxRecordsPerTrigger", "1000")
            .load(str(source))
            .select("payload")
            .writeStream.format("logspool")
            .option("server", d.address)
            .option("log", "sink")
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(120), "the availableNow query did not end in 120 s"
        assert query.exception() is None

    try:
        run()
        with logspool.open(source) as log:
            log.append_many([b"s-%05d" % i for i in range(2500, 4000)])
        run()  # a restart from the checkpoint
        expected = [b"s-%05d" % i for i in range(4000)]
        assert sorted(r[2] for r in records(d.address, "sink")) == expected
        # Spark replays a batch after the driver died before committing it: the task code runs
        # again for that batch id and query, and the daemon drops every row it has.
        sink = _source.LogspoolDataSource(
            {"server": d.address, "log": "sink", "checkpointLocation": str(checkpoint)}
        ).streamWriter(spark.createDataFrame([(b"x",)], "payload binary").schema, False)
        assert isinstance(sink, _daemon.StreamWriter)
        spark.sparkContext.setLocalProperty(_daemon.BATCH_ID_PROPERTY, "0")
        try:
            rdd = spark.sparkContext.parallelize([(p,) for p in expected[:1000]], 1)
            sent = rdd.mapPartitions(lambda it: [sink.write(iter(it))]).collect()
        finally:
            spark.sparkContext.setLocalProperty(_daemon.BATCH_ID_PROPERTY, None)
        assert sent == [_daemon.Sent(0, 1000)]
        assert sorted(r[2] for r in records(d.address, "sink")) == expected
    finally:
        d.kill()


def test_records_retention_removed_are_data_loss_as_for_a_local_log(tmp_path: Path) -> None:
    """Before the planning: a start below the first lsn fails, or with failOnDataLoss=false
    starts at the first lsn. After it: the task whose span is gone fails, naming the lsns."""
    import logspool
    from logspool.errors import PositionError
    from logspool.spark._source import LogspoolDataSource

    local = tmp_path / "data" / "logs" / "kept"  # the daemon's log, written and trimmed in place
    with logspool.open(local, segment_size_max=4096) as log:
        for start in range(0, 600, 20):  # a batch is not split: segments of about 4 KiB
            log.append_many([b"k-%04d" % i for i in range(start, start + 20)])
    d = Daemon(tmp_path / "data").start()
    try:
        options = {"server": d.address, "log": "kept", "maxPartitionBytes": "2000"}
        source = LogspoolDataSource(options)
        reader = source.reader(source.schema())
        assert isinstance(reader, _daemon.BatchReader)
        spans = list(reader.partitions())
        assert len(spans) > 2 and reader.start == 0
        with logspool.open(local) as log:
            assert log.enforce_retention(logspool.Retention(size_max=8192)).removed
            first = log.info().first_lsn
        assert 0 < first < spans[-1].start
        with pytest.raises(PositionError):  # the span planned before retention ran
            list(reader.read(spans[0]))
        assert sum(b.num_rows for b in reader.read(spans[-1])) == spans[-1].end - spans[-1].start
        with pytest.raises(PositionError, match="removed by retention"):
            LogspoolDataSource({**options, "startingPosition": "0"}).reader(source.schema())
        lenient = LogspoolDataSource({**options, "startingPosition": "0", "failOnDataLoss": "false"})
        assert lenient.reader(source.schema()).start == first  # type: ignore[attr-defined]
    finally:
        d.kill()


def test_spans_follow_the_daemons_segments_each_by_its_own_record_size(spark: Any, tmp_path: Path) -> None:
    """log.INFO names each segment's first lsn and size; the driver cuts each segment's lsns by
    that segment's mean record size, so no span crosses a segment and a segment of records ten
    times larger gets about ten times as many spans for its records. Spark reads them all."""
    import logspool

    local = tmp_path / "data" / "logs" / "mixed"  # the daemon's log, written in place first
    with logspool.open(local, segment_size_max=64 * 1024) as log:
        for i in range(0, 1500, 50):  # small records, then large ones, then small again
            size = 1000 if 500 <= i < 1000 else 100
            log.append_many([b"%06d" % j + b"x" * (size - 6) for j in range(i, i + 50)])
        segments = log.info().segments
    d = Daemon(tmp_path / "data").start()
    try:
        with client.connect(d.address) as c:
            info = c.log("mixed").info()
        assert info["bases"] == [s.base_lsn for s in segments] and len(info["bases"]) > 3
        assert info["sizes"][:-1] == [s.size for s in segments][:-1]
        spans = _daemon.plan(info, 0, info["next_lsn"], 16 * 1024)
        assert [(s.start, s.end) for s in spans] == sorted((s.start, s.end) for s in spans)
        assert spans[0].start == 0 and spans[-1].end == info["next_lsn"]
        assert all(a.end == b.start for a, b in itertools.pairwise(spans))  # contiguous
        bounds = [*info["bases"][1:], info["next_lsn"]]
        for span in spans:  # within one segment each
            assert sum(span.start < b < span.end for b in bounds) == 0, (span, bounds)
        large = [s.end - s.start for s in spans if 500 <= s.start < 1000 and s.end <= 1000]
        small = [s.end - s.start for s in spans if s.end <= 500]
        # (~15 against ~120 records a span; a segment that holds both sizes is in between)
        assert sorted(large)[len(large) // 2] * 5 < sorted(small)[len(small) // 2]
        df = (
            spark.read.format("logspool")
            .option("server", d.address)
            .option("log", "mixed")
            .option("maxPartitionBytes", str(16 * 1024))
            .load()
        )
        assert df.rdd.getNumPartitions() == len(spans)
        assert [r.lsn for r in df.select("lsn").orderBy("lsn").collect()] == list(range(1500))
        # A daemon before log.INFO named segments: the planner cuts by the log's mean record size
        old = {k: v for k, v in info.items() if k not in ("bases", "sizes")}
        assert _daemon.plan(old, 0, 1500, 16 * 1024)[-1].end == 1500
    finally:
        d.kill()


def test_a_young_log_is_cut_by_its_records_not_its_preallocated_file(spark: Any, tmp_path: Path) -> None:
    """A log the daemon writes has one segment whose file holds zeros preallocated after its
    records: log.INFO's ``end`` says where they end, and the driver cuts by that (by the file's
    size, 3,000 records of 6 bytes in spans of 4 KiB were 273 tasks, not ~27). A daemon before
    ``end``: by the file's size, as before."""
    from logspool import _format as fmt

    d = Daemon(tmp_path / "data").start()
    try:
        with client.connect(d.address) as c:
            for start in range(0, 3000, 500):
                c.log("young").append_many([b"e%05d" % i for i in range(start, start + 500)])
            info = c.log("young").info()
        records = 3000 * (fmt.RECORD_OVERHEAD + 6)
        assert len(info["bases"]) == 1 and info["end"] == fmt.SEGMENT_HEADER_SIZE + records
        assert info["sizes"][-1] > info["end"] * 4  # (the preallocated zeros)
        assert _daemon.written_size(info) == info["end"]
        spans = _daemon.plan(info, 0, 3000, 4096)
        assert len(spans) == -(-3000 // (4096 // (info["end"] // 3000)))  # ~27: by the records
        assert spans[0].start == 0 and spans[-1].end == 3000
        assert all(a.end == b.start for a, b in itertools.pairwise(spans))
        old = {k: v for k, v in info.items() if k != "end"}
        assert len(_daemon.plan(old, 0, 3000, 4096)) > 4 * len(spans)  # by the file: many more
        df = spark.read.format("logspool").option("server", d.address).option("maxPartitionBytes", "4096")
        df = df.load("young")
        assert df.rdd.getNumPartitions() == len(spans)
        assert [r.payload for r in df.select("payload").orderBy("lsn").collect()] == [
            b"e%05d" % i for i in range(3000)
        ]
    finally:
        d.kill()
