"""The JVM reader: building its jar; ``load`` and ``load_stream``, which plan in Python and read on
the JVM.

The Python Data Source API hands every row from a Python worker to the JVM as Arrow. Measured
here (benchmarks/bench_spark.py), a source that parses nothing and yields prebuilt batches reaches
0.9x to 1.05x of Spark's Parquet scan, but the log's Python parser (about 2 us a record a core)
brings the source to 0.17x: meeting 0.8x needs compiled parsing. ``jvm/*.java``
is a DataSource V2 reader written from docs/FORMAT.md that parses segment ranges in the executors'
JVMs. The driver's planning (positions, timestamps, the head, partition splits) stays in one place,
the Python source: a batch read receives the planned ranges as an option; a stream calls the Python
stream reader for each batch's offsets and ranges through Py4J's callback server (``_Planner``).

The jar is compiled from the source shipped in the package with the machine's ``javac``, against
PySpark's own jars, once per source and Spark version, into a cache directory.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import tempfile
import threading
import uuid
import zipfile
from collections.abc import Sequence
from importlib import resources
from typing import TYPE_CHECKING, Any, ClassVar

from py4j.protocol import Py4JError  # type: ignore[import-untyped]
from pyspark.sql.datasource import InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable

from ..errors import LogspoolError
from . import _partition as part
from ._source import (
    NAME,
    LogspoolDataSource,
    OptionError,
    _BatchReader,
    _options,
    _positive,
    _Scan,
    _StreamReader,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_logger = logging.getLogger("logspool.spark")

JVM_NAME = "logspool-jvm"
JVM_CLASS = "logspool.spark.LogspoolJvmSource"
# format("logspool") where the jar is loaded: the Python source, with JVM tasks for writes whose
# commit the driver's Python registered (jvm/LogspoolSource.java).
NAMED_CLASS = "logspool.spark.LogspoolSource"
_SERVICES = JVM_CLASS + "\n" + NAMED_CLASS + "\n"  # the jar's DataSourceRegisters
_SERVICE = "META-INF/services/org.apache.spark.sql.sources.DataSourceRegister"


class JvmError(LogspoolError):
    """The JVM reader cannot be built or is not loaded in the session; the message says why."""


def _cache_dir() -> str:
    explicit = os.environ.get("LOGSPOOL_CACHE_DIR")
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "logspool")


def _spark_jars() -> str:
    """The directory of Spark's jars: SPARK_HOME's, or the pip-installed PySpark's."""
    home = os.environ.get("SPARK_HOME")
    candidates = [os.path.join(home, "jars")] if home else []
    try:
        import pyspark

        candidates.append(os.path.join(os.path.dirname(pyspark.__file__), "jars"))
    except ImportError:
        pass
    for directory in candidates:
        if os.path.isdir(directory) and any(n.startswith("spark-sql_") for n in os.listdir(directory)):
            return directory
    raise JvmError("the JVM reader is compiled against Spark's jars: install pyspark or set SPARK_HOME")


def _javac() -> str:
    home = os.environ.get("JAVA_HOME")
    found = os.path.join(home, "bin", "javac") if home else None
    if found and os.access(found, os.X_OK):
        return found
    found = shutil.which("javac")
    if found:
        return found
    raise JvmError(
        "the JVM reader needs a JDK to compile it (javac, Java 17 or later; on Debian: "
        "apt-get install openjdk-17-jdk-headless); logspool.spark.load(..., jvm=False) reads without it"
    )


def jar() -> str:
    """The path of the JVM reader's jar, compiled on first use (a few seconds) and then cached.

    Pass it to Spark when the session is built: ``.config("spark.jars", logspool.spark.jar())``.
    """
    packaged = resources.files(__package__).joinpath("jvm")
    sources = {f.name: f.read_bytes() for f in packaged.iterdir() if f.name.endswith(".java")}
    sources = dict(sorted(sources.items()))
    jars = _spark_jars()
    versions = sorted(n for n in os.listdir(jars) if n.startswith(("spark-sql_", "zstd-jni-")))
    digest = hashlib.sha256()
    for name, text in sources.items():
        digest.update(name.encode() + b"\0" + text + b"\0")
    digest.update(_SERVICES.encode())
    key = hashlib.sha256(digest.digest() + "\0".join(versions).encode()).hexdigest()[:16]
    out_dir = _cache_dir()
    path = os.path.join(out_dir, f"logspool-spark-{key}.jar")
    if os.path.exists(path):
        return path
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="logspool-jvm-", dir=out_dir) as work:
        paths = []
        for name, text in sources.items():
            paths.append(os.path.join(work, name))
            with open(paths[-1], "wb") as f:
                f.write(text)
        classes = os.path.join(work, "classes")
        done = subprocess.run(
            [_javac(), "--release", "17", "-nowarn", "-cp", os.path.join(jars, "*"), "-d", classes, *paths],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise JvmError(f"compiling the JVM reader failed:\n{done.stdout}{done.stderr}")
        staged = os.path.join(work, "out.jar")
        with zipfile.ZipFile(staged, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\nCreated-By: logspool\r\n\r\n")
            z.writestr(_SERVICE, _SERVICES)
            for root, _dirs, files in sorted(os.walk(classes)):
                for name in sorted(files):
                    full = os.path.join(root, name)
                    z.write(full, os.path.relpath(full, classes))
        os.replace(staged, path)  # whole or absent: a concurrent builder writes the same bytes
    return path


def _ranges(partitions: Sequence[InputPartition]) -> str:
    """Planned partitions as the JVM source's ``ranges`` option (LogspoolJvmSource.java): each
    ``segment,offset,offset_lsn,start,end,bytes`` (bytes: about how many it holds, for packing;
    0 if not planned with the session's shares), joined by ``;``."""
    found = [(p.range, p.size) for p in partitions]  # type: ignore[attr-defined]
    starts = part.start_points([r for r, _ in found])
    return ";".join(
        f"{r.segment},{offset},{offset_lsn},{r.start},{r.end},{size}"
        for (r, size), (offset, offset_lsn) in zip(found, starts, strict=True)
    )


def _packing(reader: _Scan) -> dict[str, str]:
    """The JVM source's options that pack small ranges into tasks as Spark packs small files
    (``Ranges.pack``, after the ranges are cut to pushed filters), if ``plan_as_spark`` gave
    ``reader`` the session's shares; none otherwise (a task a range)."""
    if reader.shares is None:
        return {}
    return {
        "packTasks": str(reader.shares.parallelism),
        "packOpenCost": str(reader.shares.floor),
        "packMaxBytes": str(reader.partition_size),
    }


def plan_as_spark(spark: SparkSession, reader: _Scan, options: dict[str, str]) -> None:
    """Plan ``reader``'s ranges as Spark splits a scan of files (``part.Shares``), with the
    session's own settings: at most ``spark.sql.files.maxPartitionBytes`` bytes a task unless
    the read says ``maxPartitionBytes``, one share of the span for each of
    ``spark.sql.files.minPartitionNum`` tasks or else of the session's leaf-node parallelism
    (``spark.sql.leafNodeDefaultParallelism``, else its cores), at least
    ``spark.sql.files.openCostInBytes``. Left as it is (``maxPartitionBytes`` alone, 32 MiB by
    default) where the session's JVM cannot be asked."""
    try:
        session: Any = spark._jsparkSession
        conf = session.sessionState().conf()
        wanted = conf.filesMinPartitionNum()  # (a Scala Option)
        tasks = int(wanted.get()) if wanted.isDefined() else int(session.leafNodeDefaultParallelism())
        shares = part.Shares(tasks, int(conf.filesOpenCostInBytes()))
        cap = int(conf.filesMaxPartitionBytes())
    except (AttributeError, Py4JError) as err:
        _logger.debug("planning as the session's scans: the session's settings are not at hand: %s", err)
        return
    reader.shares = shares
    if "maxpartitionbytes" not in options:
        reader.partition_size = cap


def _local_only(options: dict[str, str], jvm: bool | None) -> bool | None:
    """The JVM reader reads local files only: a log the daemon serves (``server``) is read by the
    Python source, whose tasks read it over the network."""
    if "server" not in options:
        return jvm
    if jvm:
        raise JvmError(
            "the JVM reader reads local log directories only; with server the Python source reads (jvm=False)"
        )
    return False


def load(
    spark: SparkSession,
    path: str,
    schema: Any = None,
    jvm: bool | None = None,
    **options: Any,
) -> DataFrame:
    """``spark.read.format("logspool").load(path)`` with the same options and rows, read by the
    JVM reader when the session has it (``spark.jars``): several times faster.

    ``jvm=None`` uses the JVM reader if the session loaded it and the read allows it (``decode``
    binary or string), else the Python source; ``jvm=True`` insists (``JvmError`` if it cannot);
    ``jvm=False`` always uses the Python source. ``schema`` is for ``decode=json``, which the JVM
    reader does not take. Only the JVM reader pushes filters on lsn and timestamp down to the
    index, and counts from record headers (docs/SPARK.md says why the Python source does neither).
    """
    text = {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in options.items()}
    lowered = _options({**text, "path": path}, "batch read")  # checked as format("logspool") checks
    decode = lowered.get("decode", "binary")
    jvm = _local_only(lowered, jvm)
    if schema is None:
        fixed = LogspoolDataSource(lowered).schema()  # the Python source's errors for bad decodes
    elif decode != "json":
        raise OptionError("a schema is only given with decode=json (the other decodes have a fixed schema)")
    if jvm is not False and decode == "json":
        if jvm:
            raise JvmError("the JVM reader takes decode binary or string; decode=json reads with jvm=False")
        jvm = False
    if jvm is not False:
        reader = _BatchReader(lowered, fixed)
        plan_as_spark(spark, reader, lowered)
        planned = (
            spark.read.format(JVM_NAME)
            .option("ranges", _ranges(reader.partitions()))
            .option("recordSizeMax", str(reader.size_max))
            .option("verifyChecksums", str(reader.verify).lower())
            .option("decode", decode)
            .options(**_packing(reader))
        )
        if "jvmmapbytes" in lowered:
            planned = planned.option("windowBytes", str(_positive(lowered, "jvmMapBytes")))
        try:
            return planned.load(reader.path)
        except Exception as err:
            if "DATA_SOURCE_NOT_FOUND" not in str(err):
                raise
            if jvm:
                raise JvmError(
                    "the JVM reader is not loaded in this session: build the session with "
                    '.config("spark.jars", logspool.spark.jar())'
                ) from None
    builder = spark.read.format(NAME).options(**text)
    if schema is not None:
        builder = builder.schema(schema)
    return builder.load(path)


class _Planner:
    """One streaming query's planning for the JVM stream (StreamPlanner.java, called by the
    driver's JVM through Py4J's callback server): the Python stream reader's own methods, so the
    options, offsets, subscriber commits and data-loss rules are the Python stream's."""

    def __init__(self, reader: _StreamReader) -> None:
        self.reader = reader

    def initialOffset(self) -> str:
        return json.dumps(self.reader.initialOffset())

    def latestOffset(self, start: str, all_available: bool) -> str:
        limit = ReadAllAvailable() if all_available else self.reader.getDefaultReadLimit()
        return json.dumps(self.reader.latestOffset(json.loads(start), limit))

    def reportLatestOffset(self) -> str:
        return json.dumps(self.reader.reportLatestOffset())

    def prepareForTriggerAvailableNow(self) -> None:
        self.reader.prepareForTriggerAvailableNow()

    def ranges(self, start: str, end: str) -> str:
        return _ranges(self.reader.partitions(json.loads(start), json.loads(end)))

    def commit(self, end: str) -> None:
        self.reader.commit(json.loads(end))

    class Java:
        implements: ClassVar[list[str]] = ["logspool.spark.StreamPlanner"]


class _Planners:
    """A streaming DataFrame's planners: a new one (a new stream reader) for each query."""

    def __init__(self, spark: SparkSession, options: dict[str, str], schema: Any) -> None:
        self.spark = spark
        self.options = options
        self.schema = schema
        self.opened: list[_Planner] = []  # kept: the JVM holds only proxies of them
        self.lock = threading.Lock()

    def open(self) -> _Planner:
        reader = _StreamReader(self.options, self.schema)
        plan_as_spark(self.spark, reader, self.options)  # (the session's settings as the query starts)
        planner = _Planner(reader)
        with self.lock:
            self.opened.append(planner)
        return planner

    class Java:
        implements: ClassVar[list[str]] = ["logspool.spark.StreamPlanners"]


_REGISTERED: dict[str, _Planners] = {}  # the JVM holds proxies; these keep the Python objects alive


def register_callback(
    gateway: Any, method: str, key: str, target: Any, insist: bool | None, what: str
) -> bool:
    """Hand ``target`` (a Python object implementing a Java interface, called back through Py4J's
    callback server, started here) to ``LogspoolJvmSource.<method>`` under ``key``: True; False if
    the jar is not loaded in the session and ``insist`` is not True (JvmError naming the JVM
    ``what`` if it is)."""
    from pyspark.java_gateway import ensure_callback_server_started

    try:
        source: Any = gateway.jvm.logspool.spark.LogspoolJvmSource
        ensure_callback_server_started(gateway)  # type: ignore[no-untyped-call]
        getattr(source, method)(key, target)
    except Exception as err:
        if "does not exist in the JVM" not in str(err) and method not in str(err):
            raise
        if insist:
            raise JvmError(
                f"the JVM {what} is not loaded in this session: build the session with "
                '.config("spark.jars", logspool.spark.jar())'
            ) from None
        return False
    return True


def load_stream(
    spark: SparkSession,
    path: str,
    schema: Any = None,
    jvm: bool | None = None,
    **options: Any,
) -> DataFrame:
    """``spark.readStream.format("logspool").load(path)`` with the same options, offsets and rows,
    read by the JVM reader when the session has it (``spark.jars``), as ``load`` chooses.

    The driver's Python process plans each micro-batch (the Python stream reader's own code,
    called from the JVM through Py4J's callback server, which this starts) and the executors read
    the ranges on the JVM. Offsets are the Python stream's, so a query's checkpoint can be resumed
    by either. The Python process must live as long as the query (as for ``foreachBatch``).
    ``jvm`` and ``schema`` as for ``load``.
    """
    text = {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in options.items()}
    lowered = _options({**text, "path": path}, "stream read")
    decode = lowered.get("decode", "binary")
    jvm = _local_only(lowered, jvm)
    if schema is None:
        fixed = LogspoolDataSource(lowered).schema()
    elif decode != "json":
        raise OptionError("a schema is only given with decode=json (the other decodes have a fixed schema)")
    if jvm is not False and decode == "json":
        if jvm:
            raise JvmError("the JVM reader takes decode binary or string; decode=json reads with jvm=False")
        jvm = False
    if jvm is not False:
        planners = _Planners(spark, lowered, fixed)
        reader = _StreamReader(lowered, fixed)  # checks the options now, as readStream would
        plan_as_spark(spark, reader, lowered)
        key = uuid.uuid4().hex
        if register_callback(spark.sparkContext._gateway, "registerPlanners", key, planners, jvm, "reader"):
            _REGISTERED[key] = planners
            stream = (
                spark.readStream.format(JVM_NAME)
                .option("planner", key)
                .option("recordSizeMax", str(reader.size_max))
                .option("verifyChecksums", str(reader.verify).lower())
                .option("decode", decode)
                .options(**_packing(reader))
            )
            if reader.max_records is not None:
                stream = stream.option("maxRows", str(reader.max_records))
            elif reader.max_bytes is not None:
                stream = stream.option("maxBytes", str(reader.max_bytes))
            return stream.load(reader.path)
    builder = spark.readStream.format(NAME).options(**text)
    if schema is not None:
        builder = builder.schema(schema)
    return builder.load(path)
