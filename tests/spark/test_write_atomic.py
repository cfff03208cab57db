"""A write is seen by readers all or nothing: a reader process that polls the log (one-shot reads
from where it stood) while Spark jobs append large batches to it only ever finds whole batches.

How: three real batch writes (``df.write.format("logspool")``, several tasks each, ~8 MB of rows
a job) on the shared local Spark; a reader in another process reads the log in a loop and prints
how many records it found each time; every count must be a sum of whole jobs.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import logspool

READER = textwrap.dedent(
    """
    import sys, time, logspool
    path, total = sys.argv[1], int(sys.argv[2])
    print("ready", flush=True)
    deadline = time.monotonic() + 240
    seen = 0
    with logspool.open(path, readonly=True) as log:
        while seen < total and time.monotonic() < deadline:
            seen += len(list(log.read(start=seen)))
            print(seen, flush=True)
    """
)


def test_a_reader_in_another_process_sees_each_write_whole_or_not_at_all(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "log"
    rows, jobs = 60_000, 3  # ~8 MB a job: more than one append of the 4 MiB the sink made before
    with logspool.open(path):
        pass
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(path), str(rows * jobs)], stdout=subprocess.PIPE, text=True
    )
    assert reader.stdout is not None and reader.stdout.readline() == "ready\n"
    for job in range(jobs):
        df = spark.range(rows, numPartitions=4).selectExpr(
            f"concat('job{job}-', lpad(cast(id as string), 8, '0'), repeat('.', 90)) as payload"
        )
        df.write.format("logspool").mode("append").save(str(path))
    out, _ = reader.communicate(timeout=300)
    counts = [int(x) for x in out.split()]
    assert counts and counts[-1] == rows * jobs
    assert set(counts) <= {rows * k for k in range(jobs + 1)}, sorted(set(counts))
    with logspool.open(path, readonly=True) as log:
        got = [r.payload[:4] for r in log.read()]
    assert got == [f"job{k}".encode() for k in range(jobs) for _ in range(rows)]
