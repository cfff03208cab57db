"""logspool as a Spark data source (``pip install 'logspool[spark]'``, PySpark 4.2 or later).

::

    df = spark.read.format("logspool").load("events")  # found by name: lsn, timestamp, payload, ...
    q = spark.readStream.format("logspool").load("events").writeStream...
    df.write.format("logspool").mode("append").save("events")
    logspool.spark.write(df).save("events")  # the tasks on the JVM (spark.jars=jar()): faster

Every Spark worker needs logspool installed (the class is pickled by reference) and, on one
machine, ``PYSPARK_PYTHON`` set to the driver's interpreter. docs/SPARK.md has the options.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

_EXTRA = ("pyspark", "pyarrow", "pandas", "py4j")
try:
    from ._jvm import JVM_NAME, JvmError, jar, load, load_stream
    from ._jvm_write import committer_key, jar_loaded, write, write_stream
    from ._source import NAME, LogspoolDataSource, OptionError, PythonOnlySource
except ModuleNotFoundError as err:  # the extra is not installed: say how to get it
    if (err.name or "").split(".")[0] not in _EXTRA:
        raise
    raise ModuleNotFoundError(
        f"logspool.spark needs the spark extra ({err.name} is not installed): pip install 'logspool[spark]'",
        name=err.name,
    ) from err

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "JVM_NAME",
    "NAME",
    "JvmError",
    "LogspoolDataSource",
    "OptionError",
    "jar",
    "load",
    "load_stream",
    "register",
    "write",
    "write_stream",
]


def register(spark: SparkSession) -> None:
    """Make ``format("logspool")`` available in ``spark`` (idempotent). Spark 4 finds it without
    this call, through the top-level module ``pyspark_logspool``; kept for code written before.

    Where the session loaded the jar (``spark.jars``), this also hands the JVM this process's
    commit (through Py4J's callback server, which it starts), so that ``df.write.format(
    "logspool")`` and ``writeStream.format("logspool")`` run their tasks on the JVM, as
    ``write`` and ``write_stream`` do; this process must then live until such a write's ``save``
    returns, and as long as such a query runs (as for ``foreachBatch``). Reads are unchanged."""
    try:
        spark.dataSource.register(LogspoolDataSource)
    except Exception as err:
        # The jar has the name and Spark did not find pyspark_logspool for it (Spark refuses a
        # Python source under a jar's name unless it has one of that name already): register the
        # same source as logspool-py, which the jar's format("logspool") hands everything to.
        if "DATA_SOURCE_ALREADY_EXISTS" not in str(err):
            raise
        spark.dataSource.register(PythonOnlySource)
    if jar_loaded(spark):  # (without the jar, no callback server is started)
        committer_key(spark, None)
