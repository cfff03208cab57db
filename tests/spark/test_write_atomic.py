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
import threading
from pathlib import Path
from typing import Any

import pytest

import logspool
from logspool import _format as fmt
from logspool.spark._source import LogspoolDataSource

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


def _plan_and_read(path: Path, verify: str) -> list[bytes]:
    """Plan a batch read of the Python source now and read its partitions (no Spark job: the
    source's own reader, as Spark's Python worker drives it)."""
    source = LogspoolDataSource({"path": str(path), "verifyChecksums": verify})
    reader = source.reader(source.schema())
    return [
        payload
        for partition in reader.partitions()
        for arrow in reader.read(partition)
        for payload in arrow.column("payload").to_pylist()
    ]


@pytest.mark.parametrize("verify", ["true", "false"])
def test_a_read_planned_during_a_batch_sees_none_of_it_even_unchecked(tmp_path: Path, verify: str) -> None:
    """A batch read planned while a batch is written but not published (its first chunk in the
    segment, its first record's CRC complemented) reads none of the batch, also with
    ``verifyChecksums=false``, whose planning once parsed past the unpublished head without
    checksums and read records that a failed batch then cut (review of issue 28)."""
    path = tmp_path / "log"
    with logspool.open(path) as log:
        log.append_many([b"before-%03d" % i for i in range(10)])
    middle, go = threading.Event(), threading.Event()
    failure: list[BaseException] = []

    def chunks() -> Any:
        yield [b"batch-%05d" % i for i in range(1000)]
        middle.set()  # the first chunk is written; the batch is not published
        assert go.wait(60)
        raise RuntimeError("the job failed")  # the batch is cut, never readable

    def write() -> None:
        try:
            with logspool.open(path) as log, log.exclusive() as tail:
                tail.append_batch(chunks(), size=2000 * (fmt.RECORD_OVERHEAD + 11))
        except RuntimeError:
            pass
        except BaseException as err:  # pragma: no cover (reported by the assertion below)
            failure.append(err)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        assert middle.wait(60), "the writer did not reach the middle of its batch"
        assert _plan_and_read(path, verify) == [b"before-%03d" % i for i in range(10)]
    finally:
        go.set()
        writer.join(60)
    assert not failure, failure
    with logspool.open(path, readonly=True) as log:
        assert len(list(log.read())) == 10


def test_an_unchecked_read_reads_past_damage_at_the_newest_segments_end(tmp_path: Path) -> None:
    """With checksums off, damage that a checked read reports in the newest segment (a record
    below the sync mark fails its CRC) does not stop the planning: every record is read."""
    path = tmp_path / "log"
    with logspool.open(path) as log:
        log.append_many([b"r%05d" % i for i in range(500)])
    segment = sorted(path.glob("*.seg"))[-1]
    data = bytearray(segment.read_bytes())
    data[fmt.SEGMENT_HEADER_SIZE + 250 * (fmt.RECORD_OVERHEAD + 6) + fmt.RECORD_HEADER_SIZE + 2] ^= 1
    segment.write_bytes(bytes(data))
    with pytest.raises(logspool.CorruptionError, match="lsn 250"):
        _plan_and_read(path, "true")
    got = _plan_and_read(path, "false")
    assert len(got) == 500 and got[250] != b"r00250" and got[251] == b"r00251"
