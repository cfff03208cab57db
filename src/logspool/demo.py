"""The log demo: writer processes append while a reader tails, with a cutover, then info and verify.

Run it with ``logspool demo``. It shows the guarantees rather than describing them: every record
of every writer arrives at the tailing reader exactly once, in each writer's order, and the log
verifies clean after a cutover made while writers were running.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import time

from ._verify import verify
from .log import Log


def _writer(path: str, writer: int, count: int) -> None:
    with Log(path, durability="always") as log:
        for i in range(0, count, 50):  # batches of 50: one fsync each, shared by group commit
            batch = [
                json.dumps({"writer": writer, "seq": j, "amount_cents": (j * 37) % 10_000}).encode()
                for j in range(i, min(i + 50, count))
            ]
            log.append_many(batch)


DEMO_MARKER = ".logspool-demo"  # in every directory a demo made: it may replace what is there


class DemoDirError(ValueError):
    """The directory given to a demo holds something the demo did not make."""


def prepare_output_dir(path: str, *, force: bool = False, mark_later: bool = False) -> None:
    """Make ``path`` an empty directory for a demo's output, with the marker that lets the next
    run replace it. A directory that exists is emptied only if a demo made it (it holds the
    marker), it is empty, or ``force`` is given; anything else raises DemoDirError naming it,
    so that ``--dir ~`` can never delete a home directory. ``mark_later``: the caller marks
    ``path`` itself once it holds what it must (a log is created in an empty directory only)."""
    path = os.path.abspath(path)
    if os.path.lexists(path) and not os.path.isdir(path):
        raise DemoDirError(f"{path}: not a directory; give --dir a new or empty directory")
    if os.path.isdir(path):
        entries = os.listdir(path)
        if entries and DEMO_MARKER not in entries and not force:
            raise DemoDirError(
                f"{path}: exists and holds {len(entries)} entries that no demo made (e.g. "
                f"{sorted(entries)[0]!r}); give --dir a new or empty directory, or --force to "
                "delete what it holds"
            )
        for name in entries:
            target = os.path.join(path, name)
            if os.path.isdir(target) and not os.path.islink(target):
                shutil.rmtree(target)
            else:
                os.unlink(target)
    created: list[str] = []
    parent = path
    while not os.path.exists(parent):  # bounded by the path's depth
        created.append(parent)
        parent = os.path.dirname(parent)
    os.makedirs(path, exist_ok=True)
    for directory in created[1:] if mark_later else {path, *created}:
        mark_demo_dir(directory)  # the marker in every directory a demo made


def mark_demo_dir(path: str) -> None:
    """Put the marker that lets the next demo run replace ``path``."""
    with open(os.path.join(path, DEMO_MARKER), "w") as f:
        f.write("made by a logspool demo: the next demo run may replace this directory\n")


def run(path: str, *, writers: int, records: int, force: bool = False) -> int:
    prepare_output_dir(path, force=force, mark_later=True)
    total = writers * records
    print(f"demo: {writers} writer processes x {records} records into {path}")
    with Log(path, segment_size_max=256 * 1024) as log:
        mark_demo_dir(path)
        reader = log.reader("earliest")
        ctx = multiprocessing.get_context("spawn")
        procs = [ctx.Process(target=_writer, args=(path, w, records)) for w in range(writers)]
        started = time.monotonic()
        for p in procs:
            p.start()
        last_seq = [-1] * writers
        seen = 0
        cut_at = None
        while seen < total:
            rec = reader.next(timeout=30)
            if rec is None:
                print("demo: no record for 30 s; a writer is stuck")
                return 1
            event = json.loads(rec.payload)
            w, seq = event["writer"], event["seq"]
            if seq != last_seq[w] + 1:
                print(f"demo: writer {w} record {seq} arrived after {last_seq[w]}: ORDER BROKEN")
                return 1
            last_seq[w] = seq
            seen += 1
            if cut_at is None and seen >= total // 2:
                cut_at = log.cutover()
                print(f"demo: cutover while writers run: new segment starts at lsn {cut_at}")
        elapsed = time.monotonic() - started
        for p in procs:
            p.join()
            if p.exitcode != 0:
                print(f"demo: writer exited with {p.exitcode}")
                return 1
        reader.close()
        print(
            f"demo: the tailing reader got all {seen} records, each writer's in order, "
            f"in {elapsed:.2f} s ({seen / elapsed:,.0f} durable records/s)"
        )
        info = log.info()
        print(
            f"demo: info: lsn {info.first_lsn} to {info.next_lsn - 1}, {info.size} bytes, "
            f"{len(info.segments)} segments"
        )
    report = verify(path)
    print(f"demo: verify: {'ok' if report.ok else 'DAMAGED'}, {report.records} records checked")
    for problem in report.problems:
        print(f"demo:   {problem}")
    return 0 if report.ok and report.records == total else 1
