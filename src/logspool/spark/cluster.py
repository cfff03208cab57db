"""A Spark standalone cluster on this machine, from the installed PySpark: a master and workers
bound to 127.0.0.1, for the tests and ``scripts/demo --cluster`` (issue 28).

Each task of a job run on it (``--master spark://127.0.0.1:PORT``) runs in an executor JVM and a
Python worker of its own, in another process than the driver: what a job on a real cluster
does, so a source that only works when the driver's objects are at hand fails here too.

::

    with StandaloneCluster(workers=2) as master:   # "spark://127.0.0.1:PORT"
        spark = SparkSession.builder.master(master).getOrCreate()

The master and the workers are stopped (SIGTERM, then SIGKILL) when the block ends, whatever
happened; their logs are in ``work_dir`` (a temporary directory unless given).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from types import TracebackType

from ..errors import LogspoolError

_START_S = 120.0  # a master and its workers register within this (JVM start-up, a loaded machine)


class ClusterError(LogspoolError):
    """The cluster could not be started; the message says why and where the logs are."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spark_home() -> str:
    """SPARK_HOME, or the installed PySpark's directory (which holds bin/spark-class and jars)."""
    home = os.environ.get("SPARK_HOME")
    if home:
        return home
    import pyspark

    return os.path.dirname(pyspark.__file__)


class StandaloneCluster:
    """A master and ``workers`` workers of ``cores`` cores and ``memory`` each, on 127.0.0.1."""

    def __init__(
        self, workers: int = 2, *, cores: int = 1, memory: str = "1g", work_dir: str | None = None
    ) -> None:
        if workers < 1 or cores < 1:
            raise ValueError(f"a cluster needs at least one worker of one core, not {workers} of {cores}")
        self.workers, self.cores, self.memory = workers, cores, memory
        self._own_dir = work_dir is None
        self.work_dir = work_dir or tempfile.mkdtemp(prefix="logspool-spark-cluster-")
        self.port = _free_port()
        self.ui_port = _free_port()
        self.master = f"spark://127.0.0.1:{self.port}"
        self._procs: list[subprocess.Popen[bytes]] = []

    def _spawn(self, name: str, *args: str) -> None:
        java_class = os.path.join(spark_home(), "bin", "spark-class")
        if not os.path.exists(java_class):
            raise ClusterError(f"{java_class}: missing (is PySpark installed? pip install 'logspool[spark]')")
        if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
            raise ClusterError("no Java on this machine: Spark needs Java 17 or later")
        env = {
            **os.environ,
            "SPARK_HOME": spark_home(),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
            # No REST submission server (a fixed port, 6066, that a second cluster would collide on).
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
            "SPARK_WORKER_DIR": os.path.join(self.work_dir, name),
        }
        log = open(os.path.join(self.work_dir, f"{name}.log"), "wb")  # noqa: SIM115 (the child's)
        try:
            self._procs.append(
                subprocess.Popen([java_class, *args], stdout=log, stderr=subprocess.STDOUT, env=env)
            )
        finally:
            log.close()

    def _state(self) -> dict[str, object] | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=2) as answer:
                state = json.loads(answer.read())
        except (OSError, ValueError):
            return None
        return state if isinstance(state, dict) else None

    def start(self) -> str:
        """Start the master and the workers; returns the master URL once every worker is ALIVE."""
        self._spawn("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                    "--port", str(self.port), "--webui-port", str(self.ui_port))  # fmt: skip
        for n in range(self.workers):
            self._spawn(f"worker-{n}", "org.apache.spark.deploy.worker.Worker", self.master,
                        "--host", "127.0.0.1", "--cores", str(self.cores), "--memory", self.memory,
                        "--webui-port", str(_free_port()))  # fmt: skip
        deadline = time.monotonic() + _START_S
        while time.monotonic() < deadline:
            dead = [p for p in self._procs if p.poll() is not None]
            if dead:
                self.stop()
                raise ClusterError(f"a cluster process exited at start; its logs are in {self.work_dir}")
            state = self._state()
            if state is not None and state.get("aliveworkers") == self.workers:
                return self.master
            time.sleep(0.2)
        self.stop()
        raise ClusterError(
            f"the cluster did not start within {_START_S:g} s; its logs are in {self.work_dir}"
        )

    def stop(self) -> None:
        """Stop every process (SIGTERM, then SIGKILL after 10 s)."""
        for proc in self._procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self._procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        self._procs = []

    def __enter__(self) -> str:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
        if self._own_dir and kind is None:
            shutil.rmtree(self.work_dir, ignore_errors=True)
