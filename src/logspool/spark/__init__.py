"""logspool as a Spark data source (``pip install 'logspool[spark]'``, PySpark 4.2 or later).

::

    from logspool.spark import register
    register(spark)                                   # once per SparkSession
    df = spark.read.format("logspool").load("events")  # lsn, timestamp, payload, segment, offset
    q = spark.readStream.format("logspool").load("events").writeStream...
    df.write.format("logspool").mode("append").save("events")

Every Spark worker needs logspool installed (the class is pickled by reference) and, on one
machine, ``PYSPARK_PYTHON`` set to the driver's interpreter. docs/SPARK.md has the options.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._jvm import JVM_NAME, JvmError, jar, load
from ._source import NAME, LogspoolDataSource, OptionError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["JVM_NAME", "NAME", "JvmError", "LogspoolDataSource", "OptionError", "jar", "load", "register"]


def register(spark: SparkSession) -> None:
    """Make ``format("logspool")`` available in ``spark`` (idempotent)."""
    spark.dataSource.register(LogspoolDataSource)
