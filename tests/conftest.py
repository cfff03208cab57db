"""Shared fixtures: a fresh log directory per test, a helper to run the CLI in a subprocess, and
the file system after a reboot."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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
