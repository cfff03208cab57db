"""Fixtures of the crash harness."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def fast_dir() -> Iterator[Path]:
    """Under /dev/shm when there is one: the power-loss model decides durability, not the disk,
    so the real fsyncs need not be slow."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="logspool-crash-", dir=base) as d:
        yield Path(d)
