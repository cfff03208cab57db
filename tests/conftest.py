"""Shared fixtures: a fresh log directory per test, a helper to run the CLI in a subprocess, and
the file system after a reboot."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from logspool._fs import FileSystem


@pytest.fixture
def log_dir(tmp_path: Path) -> str:
    return str(tmp_path / "log")


def run_cli(*args: str, stdin: bytes = b"", timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    """Run ``python -m logspool.cli ARGS`` as a real process."""
    return subprocess.run(
        [sys.executable, "-m", "logspool.cli", *args],
        input=stdin,
        capture_output=True,
        timeout=timeout,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        check=False,
    )


class AfterReboot(FileSystem):
    """The real file system as a process sees it after the machine rebooted: another boot id.
    (The page cache is gone then: a log's writer no longer trusts what it held, FORMAT.md §9.)"""

    def __init__(self) -> None:
        self._boot = os.urandom(16)

    def boot_id(self) -> bytes:
        return self._boot


def append_in_batches(log: Any, payloads: list[bytes], batch: int = 8) -> list[int]:
    """Append ``payloads`` a few at a time, so that they fill segments one after another (a
    single append_many is written whole into one segment: it never spans a rotation)."""
    lsns: list[int] = []
    for i in range(0, len(payloads), batch):
        lsns += log.append_many(payloads[i : i + batch])
    return lsns


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``scripts/test`` runs ``-n 2 --dist loadgroup``): every test that uses
    the run's one local SparkSession in one group, so that one worker starts it; every other
    test in its module's group, so that a module's tests run in one worker in their order, with
    its module-scoped fixtures started once (a daemon, the standalone cluster). The workers take
    groups as they come free. Without xdist, nothing changes."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        uses = getattr(item, "fixturenames", ())
        group = "spark-session" if "spark" in uses else str(item.path)
        item.add_marker(pytest.mark.xdist_group(group))
    # The Spark tests first (a stable sort: each module's order kept): their groups are the
    # longest (the session's ~7 minutes, the cluster's ~5), and started first they run beside
    # the many short modules instead of after them, two long groups left for the end.
    spark = os.path.join("tests", "spark") + os.sep
    items.sort(key=lambda item: spark not in str(item.path))
