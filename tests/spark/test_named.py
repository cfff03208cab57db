"""format("logspool") in a session that loaded the jar (jvm/LogspoolSource.java): the jar has the
name, hands everything to the Python source, and runs a write's tasks on the JVM once the driver's
Python registered its commit (``register``, ``write``, ``write_stream``; conftest's session calls
``register``).

How it is proved, in the suite's real local Spark with the jar: the physical plan Spark records
for a write (its status store, kept with the UI off) names the writer, "logspool JVM writer DIR"
for the JVM tasks (LogSink) and the Python source's name for the Python writer; a stream's last
plan names its MicroBatchWrite's writer the same way. The logs written are compared record by
record with the Python writer's (``format("logspool-py")``, the Python source alone). Reads and
streams by the name are compared with ``format("logspool-py")`` row by row, and refusals by their
messages. A session without the jar, and one that never registered the commit, run in a fresh
``spark-submit`` (test_discovery.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import logspool
from logspool.spark import _jvm_write, _source, write
from tests.spark.conftest import batches_of_250, mixed_rows

JVM_WRITER = "logspool JVM writer"


def records(path: Path) -> list[tuple[int, bytes]]:
    with logspool.open(path, readonly=True) as log:
        return [(r.lsn, r.payload) for r in log.read()]


def last_write(spark: Any) -> str:
    """The "Arguments" line of the last SQL execution's write node: which writer ran."""
    executions = spark._jsparkSession.sharedState().statusStore().executionsList()
    plan = executions.apply(executions.size() - 1).physicalPlanDescription()
    node = plan[plan.rindex(") AppendData ") :]  # the node's details: its name, Input, Arguments
    return next(line for line in node.splitlines() if line.startswith("Arguments:"))


@pytest.fixture
def python_name(spark: Any) -> str:
    """The Python source alone in this session (registered as logspool-py, the jar having logspool)."""
    name = _jvm_write.python_writer(spark)
    assert name == _source.PYTHON_ONLY_NAME
    return name


def test_a_batch_write_by_name_runs_its_tasks_on_the_jvm(
    spark: Any, tmp_path: Path, python_name: str
) -> None:
    """Rows of mixed sizes (empty ones, one larger than a staged block) in 3 partitions: the
    write by name is the JVM writer's, and leaves the records the Python writer leaves."""
    df, expected = mixed_rows(spark, 12_000, 5_432)
    named, python = tmp_path / "named", tmp_path / "python"
    df.write.format("logspool").mode("append").save(str(named))
    assert last_write(spark) == f"Arguments: {JVM_WRITER} {named}"
    df.write.format(python_name).mode("append").save(str(python))
    assert last_write(spark) == f"Arguments: {python_name}"
    assert [p for _, p in records(named)] == expected
    assert records(named) == records(python)
    assert logspool.verify(named).ok
    assert not any((named / _source.STAGING_DIR).iterdir())


def test_a_stream_by_name_is_written_by_the_jvm_sink_once(
    spark: Any, tmp_path: Path, python_name: str
) -> None:
    """writeStream.format("logspool"): the JVM sink's plan, each row once across a restart, and
    one state with the Python sink's (a query may move between them, as with write_stream)."""
    source, sink = tmp_path / "source", tmp_path / "sink"
    rows = batches_of_250(spark, source)

    def run(name: str) -> str:
        query = (
            rows.writeStream.format(name)
            .option("checkpointLocation", str(tmp_path / "cp"))
            .trigger(availableNow=True)
            .start(str(sink))
        )
        query.awaitTermination(120)
        assert query.exception() is None
        return str(query._jsq.explainInternal(False))

    assert f"writer: {JVM_WRITER} {sink}" in run("logspool")
    with logspool.open(source) as log:
        log.append_many([b"s-%04d" % i for i in range(700, 900)])
    assert JVM_WRITER not in run(python_name)
    with logspool.open(source) as log:
        log.append_many([b"s-%04d" % i for i in range(900, 1000)])
    assert JVM_WRITER in run("logspool")
    assert [p for _, p in records(sink)] == [b"s-%04d" % i for i in range(1000)]
    assert len(list((sink / _source.SINKS_DIR).iterdir())) == 1


def test_reads_and_streams_by_name_are_the_python_sources(
    spark: Any, tmp_path: Path, python_name: str
) -> None:
    """The jar's name reads what the Python source reads: the same rows and schema, with options
    and decodes (json with a given schema too), the same plan's scan, the same stream."""
    path = tmp_path / "log"
    with logspool.open(path) as log:
        log.append_many([b'{"n": %d, "s": "v%d"}' % (i, i) for i in range(500)])
    reads = [
        {},
        {"startingPosition": "100", "endingPosition": "321", "decode": "string"},
        {"startingOffsets": "earliest", "maxPartitionBytes": "4096"},
    ]
    for options in reads:
        named = spark.read.format("logspool").options(**options).load(str(path))
        python = spark.read.format(python_name).options(**options).load(str(path))
        assert named.schema == python.schema
        assert named.collect() == python.collect()
    named = spark.read.format("logspool").option("decode", "json").schema("lsn long, n long, s string")
    python = spark.read.format(python_name).option("decode", "json").schema("lsn long, n long, s string")
    assert named.load(str(path)).collect() == python.load(str(path)).collect()
    plan = spark.read.format("logspool").load(str(path))._jdf.queryExecution().executedPlan().toString()
    assert "BatchScan logspool" in plan and "logspool-jvm" not in plan

    def stream(name: str) -> list[Any]:
        query = (
            spark.readStream.format(name)
            .option("startingPosition", "10")
            .option("maxRecordsPerTrigger", "200")
            .load(str(path))
            .writeStream.format("memory")
            .queryName(f"by_{name.replace('-', '_')}")
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None
        return sorted(spark.sql(f"SELECT * FROM by_{name.replace('-', '_')}").collect())

    assert stream("logspool") == stream(python_name)


def test_refusals_by_name_keep_their_messages(spark: Any, tmp_path: Path) -> None:
    """Through the jar's name: the Python source's refusals of reads, streams and writes, and
    the JVM writer's of a null payload (the Python writer's words); a served log's write is the
    Python writer's, which tries the daemon."""
    path = str(tmp_path / "log")
    with logspool.open(path) as log:
        log.append(b"x")
    with pytest.raises(Exception, match="unknown option 'startingpositon' for a batch read"):
        spark.read.format("logspool").option("startingPositon", "0").load(path).collect()
    with pytest.raises(Exception, match="subscribe"):
        spark.readStream.format("logspool").option("subscribe", "t").load(path).writeStream.format(
            "memory"
        ).queryName("refused").start().awaitTermination(60)
    ok = spark.createDataFrame([("x",)], "payload string")
    with pytest.raises(Exception, match="unknown option 'startingposition' for a batch write"):
        ok.write.format("logspool").mode("append").option("startingPosition", "0").save(path)
    nulls = spark.createDataFrame([("a",), ("b",), (None,)], "payload string").coalesce(1)
    with pytest.raises(Exception, match="row 2 of partition 0: payload is null"):
        nulls.write.format("logspool").mode("append").save(path)
    with pytest.raises(Exception) as served:
        ok.write.format("logspool").option("server", "127.0.0.1:1").option("log", "x").mode("append").save()
    assert "local log directories only" not in str(served.value)
    assert records(Path(path)) == [(0, b"x")]
    write(ok, jvm=True).save(path)  # (and the explicit JVM writer is unchanged)
    assert records(Path(path)) == [(0, b"x"), (1, b"x")]
