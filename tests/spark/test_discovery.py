"""`format("logspool")` in a SparkSession that never registered it (issue 28 item 1): a fresh
`spark-submit` of a script reads, writes and queries a log by name, as a Kafka user's job would.
Spark 4 finds the top-level module `pyspark_logspool` and its `DefaultSource` by itself."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import logspool

JOB = textwrap.dedent(
    """
    import sys
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master("local[1]").appName("discovery")
             .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    log, out = sys.argv[1], sys.argv[2]
    df = spark.read.format("logspool").load(log)             # no logspool.spark.register(spark)
    print("count", df.count(), flush=True)
    df.select("payload").write.format("logspool").mode("append").save(out)
    spark.sql(f"CREATE TEMPORARY VIEW events USING logspool OPTIONS (path '{log}')")
    print("max", spark.sql("SELECT max(lsn) AS m FROM events").first()["m"], flush=True)
    spark.stop()
    """
)


def test_format_logspool_works_in_a_session_that_never_registered_it(tmp_path: Path) -> None:
    pytest.importorskip("pyspark", reason="PySpark is not installed (pip install 'logspool[spark]')")
    submit = shutil.which("spark-submit", path=os.path.dirname(sys.executable))
    if submit is None or (shutil.which("java") is None and not os.environ.get("JAVA_HOME")):
        pytest.skip("spark-submit or Java is missing")
    log, out = tmp_path / "log", tmp_path / "copy"
    with logspool.open(log) as lg:
        lg.append_many([b"e%d" % i for i in range(25)])
    script = tmp_path / "job.py"
    script.write_text(JOB)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           "SPARK_LOCAL_IP": "127.0.0.1"}  # fmt: skip
    done = subprocess.run(
        [submit, "--master", "local[1]", str(script), str(log), str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "count 25" in done.stdout and "max 24" in done.stdout
    with logspool.open(out, readonly=True) as copy:
        assert sorted(r.payload for r in copy.read()) == sorted(b"e%d" % i for i in range(25))
