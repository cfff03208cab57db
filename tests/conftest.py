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
