"""Spark 4 finds Python data sources by itself in top-level modules named ``pyspark_*`` that
expose a ``DefaultSource`` (pyspark.sql.worker.lookup_data_sources): with logspool installed
with its spark extra, ``spark.read.format("logspool")``, ``readStream``, ``write`` and
``spark.sql(...)`` work in any SparkSession (spark-submit jobs, notebooks), with no call to
``logspool.spark.register``, as a Kafka user expects. This module is only that name.

Spark imports every such module it finds and fails every lookup if one raises: without the
spark extra (pyarrow, pandas) this module defines nothing, and Spark passes it by.
"""

try:
    from logspool.spark._source import LogspoolDataSource as DefaultSource
except ModuleNotFoundError:  # logspool without its spark extra: not a data source here
    __all__: list[str] = []
else:
    __all__ = ["DefaultSource"]
