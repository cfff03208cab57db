"""Shared fixtures: a fresh log directory per test, and a helper to run the CLI in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


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
