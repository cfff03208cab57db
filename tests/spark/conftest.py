"""One local SparkSession for the whole test session (UI off, 2 shuffle partitions, loopback only,
quiet logs), with the logspool data source registered and the JVM reader's jar loaded. Skipped,
with the reason, where PySpark or Java is missing; scripts/setup installs PySpark, and CI machines
have Java 17 with its compiler."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark", reason="PySpark is not installed (pip install 'logspool[spark]')")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java on this machine: PySpark needs Java 17 or later")
    os.environ["PYSPARK_PYTHON"] = sys.executable  # workers run this interpreter, with logspool in it
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from logspool.spark import jar, register

    session = (
        SparkSession.builder.master("local[2]")
        .appName("logspool-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.jars", jar())
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


@pytest.fixture(params=["python", "jvm"])
def read(request: pytest.FixtureRequest, spark: Any) -> Any:
    """A batch read of a log with options, by the Python source or by the JVM reader: the tests
    that take this fixture hold both to the same rows and errors."""
    from logspool.spark import load

    def read_with(path: Any, **options: str) -> Any:
        if request.param == "jvm":
            return load(spark, str(path), jvm=True, **options)
        return spark.read.format("logspool").options(**options).load(str(path))

    read_with.jvm = request.param == "jvm"  # type: ignore[attr-defined]
    return read_with


def batches_of_250(spark: Any, source: Any, first: int = 0, count: int = 700) -> Any:
    """A log at ``source`` of ``count`` records ``s-NNNN`` from ``first`` on, and a stream of
    its payloads read from the earliest in batches of 250 (the sink tests' restarts: several
    batches a run, so a run can stop between two)."""
    import logspool

    with logspool.open(source) as log:
        log.append_many([b"s-%04d" % i for i in range(first, first + count)])
    return (
        spark.readStream.format("logspool")
        .option("startingPosition", "earliest")
        .option("maxRecordsPerTrigger", "250")
        .load(str(source))
        .select("payload")
    )


def mixed_rows(spark: Any, count: int, large_at: int) -> tuple[Any, list[bytes]]:
    """A DataFrame of ``count`` payloads of mixed sizes (every seventh empty, one larger than a
    staged block's 4 MiB at ``large_at``) in 3 partitions, and its payloads in partition order
    (the order a write leaves them in)."""
    rows = [f"r{i}-" + "x" * (i % 300) if i % 7 else "" for i in range(count)]
    rows[large_at] = "L" * (4 * 1024 * 1024 + 5)
    df = spark.createDataFrame([(r, i) for i, r in enumerate(rows)], "payload string, n long")
    df = df.repartition(3, "n")
    return df, [r.payload.encode() for p in df.rdd.glom().collect() for r in p]
