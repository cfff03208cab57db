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


def _snapshotter(path: str, ready: Any, stop: Any) -> None:
    """A small write and a snapshot, again and again (an ordinary compacting writer)."""
    with kv.open(path) as s:
        turn = 0
        while not stop.is_set():
            turn += 1
            s.set("w", turn)
            s.snapshot()
            if turn == 3:
                ready.set()


def test_a_page_read_while_another_process_snapshots_on_and_on_reads_every_value(tmp_path: Path) -> None:
    """A handle with every value on disk only reads a page (900 values from the op log, then one
    whose op was compacted away) while another process snapshots again and again, each
    snapshot past the reader's state. The value compacted away is unchanged: it is found where
    the newest snapshot holds it, and the read ends. (Found by review: the read stopped and was
    made again from the state caught up, and again, until its retries ran out: each retry's
    read of that value met a newer snapshot.)"""
    path = str(tmp_path / "s")
    # 1 MiB segments: the filler values (in the active segment) stay readable from the op log,
    # the first value's segment is compacted away.
    reader = kv.open(path, memory_max=0, segment_size_max=1 << 20)
    with kv.open(path, segment_size_max=1 << 20) as other:
        reader.set("zz", b"z" * 200)  # lsn 0: its segment will be compacted away
        for i in range(6):  # fill the first segment so that it is sealed
            other.set(f"junk{i}", b"j" * 200_000)
        for i in range(6):
            other.delete(f"junk{i}")
        other.snapshot()
        other.set("w", 0)
        other.snapshot()  # compacts the sealed segment below the first snapshot
        for i in range(FILLER):
            other.set(f"a{i:04d}", bytes([97 + i % 26]) * 200)
        assert len(reader) == FILLER + 2  # (caught up: every value on disk only, "zz" at lsn 0)
        assert reader._state.values["zz"].value is None and reader._state.values["zz"].where == 0
    ctx = multiprocessing.get_context("fork")
    ready, stop = ctx.Event(), ctx.Event()
    snapshotter = ctx.Process(target=_snapshotter, args=(path, ready, stop))
    snapshotter.start()
    try:
        assert ready.wait(60)  # (3 snapshots past the reader's state)
        values = list(reader.values())  # (iteration: a public read)
        assert len(values) == FILLER + 2 and values[-1] == b"z" * 200
        assert values[:FILLER] == [bytes([97 + i % 26]) * 200 for i in range(FILLER)]
    finally:
        stop.set()
        snapshotter.join(60)
        reader.close()
    assert snapshotter.exitcode == 0
