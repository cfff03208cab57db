"""`format("logspool")` in a SparkSession that never registered it (issue 28 item 1): a fresh
`spark-submit` of a script reads, writes and queries a log by name, as a Kafka user's job would.
Spark 4 finds the top-level module `pyspark_logspool` and its `DefaultSource` by itself.

The job runs without the jar, and with it (`--jars`, where the jar has the name `logspool` and
hands it to the Python source, jvm/LogspoolSource.java): by name, the rows read are the same and
a write is the Python writer's until the driver's Python registers its commit
(`logspool.spark.register`), after which, with the jar only, a write's tasks run on the JVM. The
writer that ran is read from the plan Spark records for the write. A third run hides
`pyspark_logspool` from Spark's lookup (a module of that name earlier on the Python path, with no
`DefaultSource`): with the jar, a read by name then says what is missing, and `register` registers
the source as `logspool-py`, which the jar's name hands everything to.
"""

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

    def writer():  # the Arguments of the last write's node, in the plan Spark recorded
        executions = spark._jsparkSession.sharedState().statusStore().executionsList()
        plan = executions.apply(executions.size() - 1).physicalPlanDescription()
        node = plan[plan.rindex(") AppendData "):]
        return next(line for line in node.splitlines() if line.startswith("Arguments:"))

    try:
        df = spark.read.format("logspool").load(log)             # no logspool.spark.register(spark)
        print("count", df.count(), flush=True)
        df.select("payload").write.format("logspool").mode("append").save(out)
        print("writer", writer(), flush=True)
        spark.sql(f"CREATE TEMPORARY VIEW events USING logspool OPTIONS (path '{log}')")
        print("max", spark.sql("SELECT max(lsn) AS m FROM events").first()["m"], flush=True)
    except Exception as err:
        print("failed", str(err).splitlines()[0], flush=True)
    from logspool.spark import register
    register(spark)
    df = spark.read.format("logspool").load(log)
    print("registered count", df.count(), flush=True)
    df.select("payload").write.format("logspool").mode("append").save(out)
    print("registered writer", writer(), flush=True)
    spark.stop()
    """
)


@pytest.mark.parametrize("case", ["no-jar", "jar", "jar-hidden"])
def test_format_logspool_works_in_a_session_that_never_registered_it(tmp_path: Path, case: str) -> None:
    pytest.importorskip("pyspark", reason="PySpark is not installed (pip install 'logspool[spark]')")
    submit = shutil.which("spark-submit", path=os.path.dirname(sys.executable))
    if submit is None or (shutil.which("java") is None and not os.environ.get("JAVA_HOME")):
        pytest.skip("spark-submit or Java is missing")
    from logspool.spark import jar

    log, out = tmp_path / "log", tmp_path / "copy"
    with logspool.open(log) as lg:
        lg.append_many([b"e%d" % i for i in range(25)])
    script = tmp_path / "job.py"
    script.write_text(JOB)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           "SPARK_LOCAL_IP": "127.0.0.1"}  # fmt: skip
    if case == "jar-hidden":  # Spark's lookup imports this module first: no DefaultSource in it
        (tmp_path / "hide" / "pyspark_logspool.py").parent.mkdir()
        (tmp_path / "hide" / "pyspark_logspool.py").write_text("__all__: list[str] = []\n")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tmp_path / "hide"), env.get("PYTHONPATH")) if p)
    jars = [] if case == "no-jar" else ["--jars", jar()]
    done = subprocess.run(
        [submit, "--master", "local[1]", *jars, str(script), str(log), str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    if case == "jar-hidden":
        assert any(
            line.startswith("failed [DATA_SOURCE_NOT_FOUND]") and "logspool.spark.register(spark)" in line
            for line in lines
        ), lines
        rounds = 1
    else:
        assert "count 25" in lines and "max 24" in lines, lines
        assert "writer Arguments: logspool" in lines  # by name, no commit registered: the Python writer
        rounds = 2
    assert "registered count 25" in lines
    registered = next(line for line in lines if line.startswith("registered writer"))
    if case == "no-jar":
        assert registered == "registered writer Arguments: logspool"
    else:
        assert registered == f"registered writer Arguments: logspool JVM writer {out}"
    with logspool.open(out, readonly=True) as copy:
        assert sorted(r.payload for r in copy.read()) == sorted([b"e%d" % i for i in range(25)] * rounds)
