"""Per-log zstd compression (format version 2): chosen at creation, recorded in the meta file and in
each record's flags, transparent to readers, and checked like everything else on disk."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import logspool
from logspool import _format as fmt
from logspool import _segment as seg

TEXT = b'{"user": 1234, "event": "click", "page": "/home/index.html", "ok": true}' * 8


def raw_records(log_dir: str, base: int = 0) -> list[seg.RecordInfo]:
    data = open(os.path.join(log_dir, fmt.segment_name(base)), "rb").read()  # noqa: SIM115
    infos: list[seg.RecordInfo] = []
    seg.parse(data, fmt.SEGMENT_HEADER_SIZE, base, 1 << 24, None, infos)
    return infos


def record_flags(log_dir: str) -> list[int]:
    data = open(os.path.join(log_dir, fmt.segment_name(0)), "rb").read()  # noqa: SIM115
    return [fmt.RECORD_HEADER.unpack_from(data, i.offset)[1] for i in raw_records(log_dir)]


def test_compressible_payloads_are_stored_smaller_and_read_back_whole(log_dir: str) -> None:
    noise = os.urandom(600)
    with logspool.open(log_dir, compression="zstd", durability="os") as log:
        assert log.append(TEXT) == 0
        assert log.append(noise) == 1
        assert log.append_many([TEXT, b"", noise]) == [2, 3, 4]
        with log.exclusive() as tail:
            tail.append(TEXT)
        got = [r.payload for r in log.read()]
    assert got == [TEXT, noise, TEXT, b"", noise, TEXT]
    # Compressed only where smaller: incompressible and empty payloads are stored as they are.
    z = fmt.FLAG_ZSTD
    assert record_flags(log_dir) == [z, 0, z, 0, 0, z]
    sizes = [i.size - fmt.RECORD_OVERHEAD for i in raw_records(log_dir)]
    assert sizes[0] < len(TEXT) // 4 and sizes[1] == len(noise)


def test_the_setting_is_in_the_meta_file_and_fixed_at_creation(log_dir: str) -> None:
    with logspool.open(log_dir, compression="zstd", compression_level=9) as log:
        assert (log.meta.compression, log.meta.compression_level, log.meta.version) == ("zstd", 9, 2)
        log.append(TEXT)
    with logspool.open(log_dir) as log:  # no need to say it again
        assert log.meta.compression == "zstd"
        log.append(TEXT)
        assert record_flags(log_dir) == [fmt.FLAG_ZSTD] * 2
    with pytest.raises(ValueError, match="created with compression='zstd' \\(level 9\\)"):
        logspool.open(log_dir, compression="zstd", compression_level=3)
    header = fmt.decode_segment_header(open(os.path.join(log_dir, fmt.segment_name(0)), "rb").read(40), "s")  # noqa: SIM115
    assert header.version == 2


def test_an_uncompressed_log_stays_version_1(log_dir: str) -> None:
    with logspool.open(log_dir) as log:
        log.append(TEXT)
        assert log.meta.version == 1 and log.meta.compression is None
    header = open(os.path.join(log_dir, fmt.segment_name(0)), "rb").read(40)  # noqa: SIM115
    assert fmt.decode_segment_header(header, "s").version == 1
    assert record_flags(log_dir) == [0]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"compression": "lz4"}, "compression must be one of"),
        ({"compression": "zstd", "compression_level": 99}, "compression_level must be an integer from"),
        ({"compression": "zstd", "compression_level": "3"}, "compression_level must be an integer"),
        ({"compression_level": 3}, "compression_level was given without compression"),
    ],
)
def test_bad_settings_are_refused_by_name(log_dir: str, options: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        logspool.open(log_dir, **options)
    assert not os.path.exists(log_dir)


def rewrite_payload(log_dir: str, lsn: int, payload: bytes) -> None:
    """Replace record ``lsn``'s payload (same length) and fix its CRC: damage a CRC cannot see."""
    path = os.path.join(log_dir, fmt.segment_name(0))
    info = next(i for i in raw_records(log_dir) if i.lsn == lsn)
    with open(path, "r+b") as f:
        f.seek(info.offset)
        head = f.read(fmt.RECORD_HEADER_SIZE)
        length, flags, rlsn, ts, durable = fmt.RECORD_HEADER.unpack(head)
        assert len(payload) == length
        f.seek(info.offset)
        f.write(fmt.encode_record(rlsn, ts, durable, payload, flags))


def test_a_frame_that_does_not_decompress_is_reported_as_corruption(log_dir: str) -> None:
    with logspool.open(log_dir, compression="zstd") as log:
        log.append_many([TEXT, TEXT])
    size = raw_records(log_dir)[1].size - fmt.RECORD_OVERHEAD
    rewrite_payload(log_dir, 1, b"\x28\xb5\x2f\xfd" + bytes(size - 4))
    with logspool.open(log_dir, readonly=True) as log:
        reader = log.reader()
        assert reader.next(timeout=0).payload == TEXT  # type: ignore[union-attr]
        with pytest.raises(logspool.CorruptionError, match="compressed record at lsn 1"):
            reader.next(timeout=0)
    report = logspool.verify(log_dir)
    assert not report.ok
    assert any("compressed record at lsn 1" in p.message for p in report.problems)


def test_a_frame_claiming_more_than_the_record_limit_is_refused_before_allocating(log_dir: str) -> None:
    import zstandard

    with logspool.open(log_dir, compression="zstd", record_size_max=4096) as log:
        log.append(os.urandom(100) * 40)  # compresses to ~130 bytes
    size = raw_records(log_dir)[0].size - fmt.RECORD_OVERHEAD
    bomb = zstandard.ZstdCompressor().compress(bytes(1 << 20))  # 1 MiB of zeros: a few dozen bytes
    assert len(bomb) <= size
    rewrite_payload(log_dir, 0, bomb + bytes(size - len(bomb)))
    with (
        logspool.open(log_dir, readonly=True) as log,
        pytest.raises(logspool.CorruptionError, match="above the limit 4096"),
    ):
        list(log.read())


def test_without_zstandard_a_compressed_log_names_the_missing_extra(log_dir: str) -> None:
    with logspool.open(log_dir, compression="zstd") as log:
        log.append(TEXT)
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["zstandard"] = None  # as if it were not installed
        import logspool
        with logspool.open({log_dir!r}, readonly=True) as log:
            try:
                list(log.read())
            except logspool.CodecMissingError as err:
                print("read:", err)
        try:
            logspool.open({log_dir!r})
        except logspool.CodecMissingError as err:
            print("open:", err)
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert "read: this log uses zstd compression" in out
    assert "open: this log uses zstd compression" in out
    assert "pip install 'logspool[zstd]'" in out
