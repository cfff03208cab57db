"""The key-value store read by one process while another writes, compacts and snapshots it."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path
from typing import Any

from logspool import kv

FILLER = 900  # values read before the changing ones in each page: the window a compaction hits
CHANGING = 10


def _writer(path: str, ready: Any, stop: Any) -> None:
    """Changes ``d0``..``d9`` round after round, each between 200 bytes and an integer, and
    snapshots after each round (which compacts the op log below the snapshot before)."""
    with kv.open(path, segment_size_max=4096) as s:
        s.update({f"b{j:03d}": b"b" * 200 for j in range(FILLER)})
        s.update({f"d{i}": bytes([97 + i]) * 200 for i in range(CHANGING)})
        ready.set()
        turn = 0
        while not stop.is_set():
            turn += 1
            for i in range(CHANGING):  # (each key's type changes every turn)
                s.set(f"d{i}", i * 10**9 + turn if (turn + i) % 2 else bytes([97 + i]) * 200)
            s.snapshot()


def _check(value: kv.Value) -> None:
    """A value the writer set for its key, with its own type and size: never the bytes of one
    read with the metadata of another."""
    if value.key.startswith("b"):
        assert value.value == b"b" * 200 and value.type == "bytes", value
        return
    i = int(value.key[1:])
    if value.type == "bytes":
        assert value.value == bytes([97 + i]) * 200 and value.size == 200, value
    else:
        assert value.type == "integer" and isinstance(value.value, int), value
        assert value.value // 10**9 == i and value.size == 8, value


def test_pages_read_while_another_process_changes_and_compacts_hold_whole_values(tmp_path: Path) -> None:
    """Torture: a handle with every value on disk only (a memory bound of 0) reads pages of
    values while another process changes some of them, between two types, and snapshots after
    each round, so that a page's values are compacted away, changed and snapshotted past the
    reader while it reads. Every value read is one the writer set, with its own type and size
    (a read that meets such a value is made again from the state caught up: ``_reads_anew``);
    the test runs until that has happened 3 times (a few seconds here), within 120 s."""
    path = str(tmp_path / "s")
    kv.open(path, segment_size_max=4096).close()
    ctx = multiprocessing.get_context("fork")
    ready, stop = ctx.Event(), ctx.Event()
    writer = ctx.Process(target=_writer, args=(path, ready, stop))
    writer.start()
    reader = kv.open(path, memory_max=0, segment_size_max=4096)
    pages = 0
    try:
        assert ready.wait(60)
        deadline = time.monotonic() + 120
        while reader._reads_again < 3 and time.monotonic() < deadline:
            page = reader.range(limit=FILLER + CHANGING)
            assert len(page.items) == FILLER + CHANGING
            for value in page.items:
                _check(value)
            pages += 1
            assert writer.is_alive()
        assert reader._reads_again >= 1, f"no read met a value moved past it in {pages} pages"
    finally:
        stop.set()
        writer.join(60)
        reader.close()
    assert writer.exitcode == 0
