"""The JVM writer: ``write`` and ``write_stream``, whose tasks stage rows on the JVM and whose
commit is the Python source's.

Measured (benchmarks/RESULTS.md, issue 28 item 3), a Python writer cannot reach 0.8x Parquet's
write rate here: Spark's Arrow handoff to a Python worker that does nothing costs 0.26 s for
1,000,000 rows of 100 bytes, against 0.34 s for Parquet's whole write, and the rows' CRC-32s cost
~0.2 us a row more in Python. ``jvm/LogSink.java`` is a DataSource V2 writer
(``format("logspool-jvm")``) whose tasks copy each row's payload out of Spark's row, compute its
CRC-32 with ``java.util.zip.CRC32`` and write the staged file the Python tasks would write
(``LSSTAGE3``): no row passes through Python. The driver's JVM calls the commit below through
Py4J's callback server (as the JVM stream calls its planner), and it is the Python writer's own:
the options checked by the same code, the log created and appended to under its writer lock,
each job or streaming batch published at once (``Tail.append_framed``), a stream's exactly-once
state keyed by the query's id (Spark hands the JVM sink the id its checkpoint holds, the one
the Python sink reads there, so a query may switch between the two).

Where the jar is loaded, ``format("logspool")`` is the jar's (``jvm/LogspoolSource.java``): the
Python source for everything, but a write's tasks run on the JVM, with this commit, once this
process registered it (``register``, ``write``, ``write_stream``: ``committer_key``). The Python
writer alone is then ``format("logspool-py")`` (``python_writer``).
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from typing import TYPE_CHECKING, Any, ClassVar

from pyspark.sql.types import StructType

from ._jvm import JVM_NAME, register_callback
from ._source import (
    NAME,
    PYTHON_ONLY_NAME,
    OptionError,
    PythonOnlySource,
    _BatchWriter,
    _options,
    _Staged,
    _StreamWriter,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.readwriter import DataFrameWriter
    from pyspark.sql.streaming.readwriter import DataStreamWriter


class _Committer:
    """The driver's half of every JVM write this process starts (WriteCommitter.java): called by
    the driver's JVM through Py4J's callback server, on its threads (one write's calls come one at
    a time; writes of several queries may come at once: ``jobs`` is locked)."""

    def __init__(self) -> None:
        self.jobs: dict[str, _BatchWriter | _StreamWriter] = {}
        self.lock = threading.Lock()

    def open(self, options: str, schema: str, queryId: str, streaming: bool) -> str:
        """A new write (the options as the Python source takes them, Spark's schema as JSON):
        the job's id and the directory its tasks stage in, as JSON."""
        lowered = _options(json.loads(options), "stream write" if streaming else "batch write")
        if "server" in lowered:
            raise OptionError(
                "the JVM writer writes local log directories only; with server, write with jvm=False"
            )
        struct = StructType.fromJson(json.loads(schema))
        writer: _BatchWriter | _StreamWriter
        if streaming:
            writer = _StreamWriter(lowered, struct, query_id=queryId)
        else:
            writer = _BatchWriter(lowered, struct)
        os.makedirs(writer.w.staging, exist_ok=True)  # before any task: tasks that miss it say why
        job = uuid.uuid4().hex
        with self.lock:
            self.jobs[job] = writer
        return json.dumps({"job": job, "staging": writer.w.staging})

    def _staged(self, messages: str) -> list[_Staged]:
        return [_Staged(int(p), str(path), int(n), int(size)) for p, path, n, size in json.loads(messages)]

    def commit(self, job: str, messages: str, batchId: int) -> None:
        """The Python writer's commit of the files the JVM tasks staged; durable on return."""
        with self.lock:
            writer = self.jobs[job]
        if isinstance(writer, _StreamWriter):
            writer.commit(list(self._staged(messages)), batchId)
            return
        writer.commit(list(self._staged(messages)))
        with self.lock:  # (a failed commit keeps the job: Spark then calls abort, which removes
            self.jobs.pop(job, None)  # the staged files)

    def abort(self, job: str, messages: str, batchId: int) -> None:
        """The write failed (a task, or the commit): its staged files are removed (a stream's
        batch keeps those its recorded intent names: ``_StreamWriter.abort``)."""
        with self.lock:
            writer = self.jobs.get(job) if batchId >= 0 else self.jobs.pop(job, None)
        if writer is None:
            return
        if isinstance(writer, _StreamWriter):
            writer.abort(list(self._staged(messages)), batchId)
        else:
            writer.abort(list(self._staged(messages)))

    class Java:
        implements: ClassVar[list[str]] = ["logspool.spark.WriteCommitter"]


_COMMITTER = _Committer()
_KEYS: dict[int, str] = {}  # by the gateway's id: the id the JVM knows this process's committer by
_KEYS_LOCK = threading.Lock()


def committer_key(spark: SparkSession, jvm: bool | None) -> str | None:
    """This process's committer registered with the session's JVM (once), or None where the JVM
    writer is not loaded and ``jvm`` allows the Python writer. Once registered, the jar's
    ``format("logspool")`` (jvm/LogspoolSource.java) runs its writes' tasks on the JVM too."""
    if jvm is False:
        return None
    gateway: Any = spark.sparkContext._gateway
    with _KEYS_LOCK:
        key = _KEYS.get(id(gateway))
        if key is not None:
            return key
        key = uuid.uuid4().hex
        if not register_callback(gateway, "registerCommitter", key, _COMMITTER, jvm, "writer"):
            return None
        _KEYS[id(gateway)] = key
        return key


def jar_loaded(spark: SparkSession) -> bool:
    """Whether the session's driver JVM has the jar (``spark.jars``), and with it the jar's
    ``format("logspool")``."""
    from py4j.java_gateway import JavaClass  # type: ignore[import-untyped]

    gateway: Any = spark.sparkContext._gateway
    return isinstance(gateway.jvm.logspool.spark.LogspoolSource, JavaClass)


def python_writer(spark: SparkSession) -> str:
    """The format name whose writes are the Python writer's in this session: ``logspool``
    without the jar; with it, ``logspool-py`` (registered here), since the jar's ``logspool``
    may run the tasks on the JVM."""
    if not jar_loaded(spark):
        return NAME
    spark.dataSource.register(PythonOnlySource)  # idempotent: a jar never has this name
    return PYTHON_ONLY_NAME


def write(df: DataFrame, jvm: bool | None = None) -> DataFrameWriter:
    """``df.write.format("logspool").mode("append")``, with the tasks on the JVM when the session
    has the jar (``spark.jars``): add options and ``.save(DIR)``. The same rows, options, errors
    and guarantees (the commit is the Python writer's: one batch published at once, durable when
    ``save`` returns), several times faster.

    ``jvm=None`` uses the JVM writer if the session loaded it, else the Python writer;
    ``jvm=True`` insists (``JvmError``); ``jvm=False`` always writes through the Python source
    (``format("logspool")`` without the jar, ``format("logspool-py")`` with it).
    The Python process must live until ``save`` returns (its commit is called from the JVM)."""
    key = committer_key(df.sparkSession, jvm)
    if key is None:
        return df.write.format(python_writer(df.sparkSession)).mode("append")
    return df.write.format(JVM_NAME).option("committer", key).mode("append")


def write_stream(df: DataFrame, jvm: bool | None = None) -> DataStreamWriter:
    """``df.writeStream.format("logspool")``, with the tasks on the JVM when the session has the
    jar, as ``write`` chooses: add ``checkpointLocation``, a trigger and ``.start(DIR)``. The same
    exactly-once state (keyed by the query's id, so a query may switch between the two sinks
    across restarts). The Python process must live as long as the query (as for
    ``foreachBatch``)."""
    key = committer_key(df.sparkSession, jvm)
    if key is None:
        return df.writeStream.format(python_writer(df.sparkSession))
    return df.writeStream.format(JVM_NAME).option("committer", key)
