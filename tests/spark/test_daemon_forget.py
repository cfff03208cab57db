"""A batch write through the daemon leaves nothing behind in the daemon's forward table: its
producers (one a partition, kept while its tasks may run again) are forgotten once the write is
committed (log.FORGET), so a daemon that takes batch write after batch write does not keep an
entry for every partition of every write it ever took. A real ``logspool serve`` process, the
shared local Spark; the table is read from disk after the daemon stopped."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from logspool import kv

from ..server.conftest import Daemon


def test_a_committed_batch_write_leaves_no_producer_on_the_daemon(spark: Any, tmp_path: Path) -> None:
    d = Daemon(tmp_path / "data").start()
    try:
        for write in range(2):
            df = spark.createDataFrame([(f"w{write}-{i:04d}",) for i in range(600)], "payload string")
            df.repartition(3).write.format("logspool").option("server", d.address).option("log", "w").mode(
                "append"
            ).save()
        back = spark.read.format("logspool").option("server", d.address).load("w")
        assert back.count() == 1200
    finally:
        assert d.signal(signal.SIGTERM) == 0
    with kv.open(tmp_path / "data" / "forward" / "w") as table:
        assert list(table) == []
