"""The source on a real Spark standalone cluster (issue 28 item 5): a master and two workers on
127.0.0.1 started from the installed PySpark, so every task runs in an executor JVM and a Python
worker of its own, never in the driver. One driver process (spark-submit) runs the batch read,
the JVM read, a stream stopped and restarted into the streaming sink, and batch writes (by name
before and after the driver registered its commit: with the jar given by --jars, the second runs
its tasks on the JVM); another runs the demo with --master. (The test session's own local
SparkSession cannot join a cluster: one SparkContext a process.)"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import logspool

JOB = textwrap.dedent(
    """
    import sys
    from pyspark.sql import SparkSession
    from logspool.spark import load, write, write_stream
    master, log, sink, copy, cp = sys.argv[1:6]
    spark = (SparkSession.builder.master(master).appName("on-a-cluster")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.ui.enabled", "false").getOrCreate())  # the JVM reader: --jars
    spark.sparkContext.setLogLevel("ERROR")
    df = spark.read.format("logspool").option("maxPartitionBytes", "4096").load(log)
    print("python", df.count(), df.rdd.getNumPartitions(), flush=True)
    print("jvm", load(spark, log, jvm=True, maxPartitionBytes=4096).count(), flush=True)
    def stream(jvm=False):
        rows = (spark.readStream.format("logspool").option("startingPosition", "earliest")
                .option("maxRecordsPerTrigger", "700").load(log).select("payload"))
        to = write_stream(rows, jvm=True) if jvm else rows.writeStream.format("logspool")
        suffix = "-jvm" if jvm else ""
        q = (to.option("checkpointLocation", cp + suffix).trigger(availableNow=True).start(sink + suffix))
        q.awaitTermination(300)
    stream()
    print("streamed", flush=True)
    stream()  # restarted from its checkpoint: nothing again
    df.select("payload").write.format("logspool").mode("append").save(copy)
    print("written", flush=True)
    stream(jvm=True)  # the JVM writer: the executors' JVMs stage, the driver's Python commits
    stream(jvm=True)
    write(df.select("payload"), jvm=True).save(copy + "-jvm")
    print("written on the jvm", flush=True)
    # By name, now that write_stream registered this process's commit: the jar's JVM tasks too.
    df.select("payload").write.format("logspool").mode("append").save(copy + "-named")
    executions = spark._jsparkSession.sharedState().statusStore().executionsList()
    plan = executions.apply(executions.size() - 1).physicalPlanDescription()
    print("written by name", "logspool JVM writer" in plan, flush=True)
    spark.stop()
    """
)


@pytest.fixture(scope="module")
def master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    pytest.importorskip("pyspark", reason="PySpark is not installed (pip install 'logspool[spark]')")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java on this machine: Spark needs Java 17 or later")
    from logspool.spark.cluster import StandaloneCluster

    with StandaloneCluster(workers=2, work_dir=str(tmp_path_factory.mktemp("cluster"))) as url:
        yield url


def _env() -> dict[str, str]:
    return {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": "127.0.0.1"}  # fmt: skip


def test_reads_a_stream_and_writes_on_a_standalone_cluster(master: str, tmp_path: Path) -> None:
    log = tmp_path / "log"
    with logspool.open(log, segment_size_max=16 * 1024) as lg:
        for start in range(0, 3000, 500):
            lg.append_many([b"e%05d" % i for i in range(start, start + 500)])
    script = tmp_path / "job.py"
    script.write_text(JOB)
    submit = os.path.join(os.path.dirname(sys.executable), "spark-submit")
    from logspool.spark import jar  # a spark-submit job is given the JVM reader as users do: --jars

    args = [str(p) for p in (log, tmp_path / "sink", tmp_path / "copy", tmp_path / "cp")]
    done = subprocess.run(
        [submit, "--master", master, "--jars", jar(), str(script), master, *args],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    lines = done.stdout.splitlines()
    python = next(line.split() for line in lines if line.startswith("python "))
    assert python[1] == "3000" and int(python[2]) > 2  # many tasks, spread over the executors
    assert "jvm 3000" in lines and "streamed" in lines and "written" in lines
    want = [b"e%05d" % i for i in range(3000)]
    with logspool.open(tmp_path / "sink", readonly=True) as sink:
        assert [r.payload for r in sink.read()] == want  # once, across the restart
    with logspool.open(tmp_path / "copy", readonly=True) as copy:
        assert sorted(r.payload for r in copy.read()) == want
    assert "written on the jvm" in lines
    with logspool.open(tmp_path / "sink-jvm", readonly=True) as sink:
        assert [r.payload for r in sink.read()] == want
    with logspool.open(tmp_path / "copy-jvm", readonly=True) as copy:
        assert sorted(r.payload for r in copy.read()) == want
    assert "written by name True" in lines
    with logspool.open(tmp_path / "copy-named", readonly=True) as copy:
        assert sorted(r.payload for r in copy.read()) == want


SERVED_JOB = textwrap.dedent(
    """
    import sys
    from pyspark.sql import SparkSession
    master, address = sys.argv[1:3]
    spark = (SparkSession.builder.master(master).appName("served-on-a-cluster")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.ui.enabled", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    df = spark.read.format("logspool").option("server", address).option("maxPartitionBytes", "4096")
    df = df.load("events")
    print("served", df.count(), df.rdd.getNumPartitions(), flush=True)
    df.select("payload").write.format("logspool").option("server", address).mode("append").save("copy")
    print("written", flush=True)
    spark.stop()
    """
)


def test_a_log_served_by_the_daemon_is_read_and_written_by_executors(master: str, tmp_path: Path) -> None:
    """Item 6 on a real cluster: each task runs in an executor of its own and reaches the log only
    through the daemon's port (the log's directory is never named to Spark)."""
    from logspool import client
    from tests.server.conftest import Daemon

    daemon = Daemon(tmp_path / "data").start()
    try:
        with client.connect(daemon.address) as c:
            for start in range(0, 3000, 500):
                c.log("events").append_many([b"e%05d" % i for i in range(start, start + 500)])
        script = tmp_path / "served.py"
        script.write_text(SERVED_JOB)
        submit = os.path.join(os.path.dirname(sys.executable), "spark-submit")
        done = subprocess.run(
            [submit, "--master", master, str(script), master, daemon.address],
            capture_output=True,
            text=True,
            env=_env(),
            timeout=600,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-4000:]
        served = next(line.split() for line in done.stdout.splitlines() if line.startswith("served "))
        assert served[1] == "3000" and int(served[2]) > 2
        assert "written" in done.stdout.splitlines()
        with client.connect(daemon.address) as c:
            got: list[bytes] = []
            pos = 0
            for _ in range(100):  # bounded: pages of 1,000
                page, pos = c.log("copy").read_page(pos, limit=1000)
                if not page:
                    break
                got += [r.payload for r in page]
        assert sorted(got) == [b"e%05d" % i for i in range(3000)]
    finally:
        daemon.kill()


def test_the_demo_runs_on_a_standalone_cluster(master: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "logspool.spark.demo", "--master", master, "--dir", str(tmp_path / "demo"),
         "--events", "300"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=600,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    assert "agree" in done.stdout
