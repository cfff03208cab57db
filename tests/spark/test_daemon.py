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
import shutil
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
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
        c.log("events").append_many([b"event-%06d" % i for i in range(COUNT)])
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
    stamps = records(served.address, "events")
    at = datetime.fromtimestamp(stamps[3000][1] / 1e9, UTC)
    first = min(r[0] for r in stamps if r[1] >= int(at.timestamp() * 1e6) * 1000)
    got_ts = read(startingTimestamp=at.isoformat()).agg({"lsn": "min"}).collect()[0][0]
    assert got_ts == first


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
