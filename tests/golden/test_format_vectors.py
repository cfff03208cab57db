"""docs/FORMAT.md is a specification a second implementation can trust, and the golden files
of every format version read forever.

Two ways, both from the document itself. First, logspool's own code decodes (and encodes) each
hex vector of the document as its text says. Second, ``tests/golden/spec.py`` builds a decoder
from the document's tables alone (struct layouts, ``zlib.crc32``, ``zstandard``, ``json``; no
logspool code), and decodes every hex vector and every golden file with it; each result is
compared with what logspool reads. A table that states a wrong size, offset, type or checksum
range fails them (``test_a_wrong_table_is_caught`` shows it does).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import struct
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import logspool
from logspool import _format as fmt
from logspool import _segment as seg
from logspool.jobs import _ops as jops
from tests.golden import spec

ROOT = Path(__file__).resolve().parents[2]
GOLDEN_V1 = Path(__file__).parent / "v1"
GOLDEN_V2 = Path(__file__).parent / "v2"


def vectors() -> dict[str, bytes]:
    text = (ROOT / "docs" / "FORMAT.md").read_text()
    found = re.findall(r"```hex ([a-z-]+)\n(.*?)```", text, re.S)
    return {name: bytes.fromhex(body.replace("\n", " ")) for name, body in found}


def test_crc_check_value() -> None:
    assert fmt.crc32(b"123456789") == 0xCBF43926
    assert fmt.crc32(bytes(32)) == 0x190A55AD


def test_record_vector() -> None:
    v = vectors()["record"]
    out: list[fmt.Record] = []
    infos: list[seg.RecordInfo] = []
    stop = seg.parse(v, 0, 5, 1 << 20, out, infos)
    assert stop.kind == seg.END
    assert out == [fmt.Record(5, 1795000000000000000, b"hello")]
    assert infos[0].durable_lsn == 3
    assert int.from_bytes(v[-4:], "little") == 0xF3E5C054
    assert fmt.encode_record(5, 1795000000000000000, 3, b"hello") == v


def test_seal_vector() -> None:
    stop = seg.parse(vectors()["seal"], 0, 6, 1 << 20, [])
    assert stop.kind == seg.SEAL and stop.next_lsn == 6


def test_segment_header_vector() -> None:
    h = fmt.decode_segment_header(vectors()["segment-header"], "vector")
    assert (h.version, h.base_lsn, h.created_ns) == (1, 5, 1794999999000000000)


def test_index_vectors() -> None:
    v = vectors()
    assert fmt.decode_index_header(v["index-header"], "vector") == (5, 4096)
    entries = fmt.decode_index_entries(v["index-header"] + v["index-entry"])
    assert entries == [fmt.IndexEntry(5, 1795000000000000000, 40)]


def test_sync_file_vector() -> None:
    v = vectors()["sync-file"]
    assert len(v) == fmt.SYNC_FILE_SIZE_TAIL
    assert fmt.read_sync_mark(v) == (64, 4136)
    assert fmt.read_sync_boot(v) == bytes.fromhex("02da6d0b8906484294c701432682104d")
    assert fmt.read_sync_boot(v[:24] + bytes(40)) == b""  # zeros: no boot known
    assert fmt.read_sync_boot(b"LOGSPSYN" + v[8:]) == b""  # another magic: nothing known
    assert fmt.read_sync_gather(v) == (70, 74, 9)
    assert fmt.read_sync_tail(v) == fmt.TailHint(base_lsn=64, offset=4036, lsn=73, end=4136)
    assert fmt.read_sync_tail(v[: fmt.SYNC_FILE_SIZE]) == (0, 0, 0, 0)  # an earlier release's file


def test_meta_vector() -> None:
    m = fmt.decode_meta(vectors()["meta"], "vector")
    assert (m.version, m.created_ns, m.segment_size_max, m.index_interval, m.record_size_max) == (
        1,
        1794999999000000000,
        67108864,
        4096,
        16777216,
    )
    assert m.log_id == "0123456789abcdef0123456789abcdef"
    assert fmt.encode_meta(m) == vectors()["meta"]


def test_golden_v1_log_reads_and_verifies(tmp_path: Path) -> None:
    expected = [f"golden-{i}".encode() for i in range(12)]
    assert logspool.verify(GOLDEN_V1).ok
    with logspool.open(GOLDEN_V1, readonly=True) as log:
        assert [r.payload for r in log.read()] == expected
        assert [r.lsn for r in log.read(start=7)] == list(range(7, 12))
    # A writer opens it (in a copy) and appends after it.
    work = tmp_path / "v1"
    shutil.copytree(GOLDEN_V1, work)
    with logspool.open(work) as log:
        assert log.append(b"new") == 12
    assert sorted(os.listdir(GOLDEN_V1)) == sorted(
        ["meta", "lock", fmt.segment_name(0), fmt.index_name(0), fmt.segment_name(8), fmt.index_name(8)]
    )


def test_checkpoint_vectors() -> None:
    # Version 1: read, never written.
    v = vectors()["checkpoint"]
    cp = fmt.decode_checkpoint(v, "vector")
    assert cp == fmt.Checkpoint("billing", 42, 1795000000000000000, 1794999999000000000)
    assert int.from_bytes(v[-4:], "little") == 0xD5E14725
    # Version 2: two 512-byte slots; the newer generation wins, a torn one falls back.
    a, b = vectors()["checkpoint-slot-a"], vectors()["checkpoint-slot-b"]
    created = 1794999999000000000
    assert a == fmt.encode_checkpoint_slot(fmt.Checkpoint("billing", 40, created + 10**9 + 2, created, 2))
    assert b == fmt.encode_checkpoint_slot(fmt.Checkpoint("billing", 42, created + 10**9 + 3, created, 3))
    assert (int.from_bytes(a[-4:], "little"), int.from_bytes(b[-4:], "little")) == (0x9AB05848, 0x52856897)
    assert fmt.checkpoint_slot_size("billing") == 512
    file = bytearray(1024)
    file[: len(a)] = a
    file[512 : 512 + len(b)] = b
    cp = fmt.decode_checkpoint(bytes(file), "vector")
    assert (cp.lsn, cp.generation, cp.committed_ns) == (42, 3, 1795000000000000003)
    for at in range(len(b)):  # a slot torn anywhere in its record: the other one holds
        torn = bytearray(file)
        torn[512 + at] ^= 0x10
        assert fmt.decode_checkpoint(bytes(torn), "vector").lsn == 40
    swapped = bytes(file[512:]) + bytes(file[:512])  # which slot holds which does not matter
    assert fmt.decode_checkpoint(swapped, "vector").lsn == 42
    whole = fmt.encode_checkpoint(fmt.Checkpoint("billing", 42, 1, created))
    assert len(whole) == 1024 and whole[: len(b)] != b and not any(whole[512:])
    assert fmt.decode_checkpoint(whole, "vector").generation == 1
    name = "cp.0c95c7ece1ce1a9750275ef1c6d7ad6b278f70d66592207783ffe7d58474cc01"
    assert fmt.checkpoint_name("billing") == name and fmt.is_checkpoint_name(name)


def test_gap_vector() -> None:
    v = vectors()["gap"]
    gaps: list[fmt.Gap] = []
    infos: list[seg.RecordInfo] = []
    stop = seg.parse(v, 0, 9, 1 << 20, [], infos, 0, gaps)
    assert stop.kind == seg.END and stop.lsn == 12 and infos == []
    assert gaps == [fmt.Gap(9, 12, "quarantined by repair (quarantine/x.bad)")]
    assert fmt.encode_gap(9, 12, 1795000000000000002, "quarantine/x.bad", 60) == v
    assert int.from_bytes(v[-4:], "little") == 0x96785998
    # The short form: under 8 payload bytes, the gap stands for one lsn.
    short: list[fmt.Gap] = []
    assert seg.parse(fmt.encode_gap(4, 5, 1, "", 36), 0, 4, 1 << 20, [], None, 0, short).lsn == 5
    assert short == [fmt.Gap(4, 5, "quarantined by repair")]


def test_compressed_record_vector() -> None:
    v = vectors()["compressed-record"]
    out: list[fmt.Record] = []
    infos: list[seg.RecordInfo] = []
    stop = seg.parse(v, 0, 7, 1 << 20, out, infos)
    assert stop.kind == seg.END
    assert out == [fmt.Record(7, 1795000000000000003, b"hello " * 8)]
    assert infos[0].size == len(v) == 36 + 21


def test_golden_v2_log_reads_and_verifies(tmp_path: Path) -> None:
    expected = {i: (b"golden-v2-%d " % i) * 20 for i in range(20) if i != 12}
    report = logspool.verify(GOLDEN_V2)
    assert report.ok and report.subscribers == 1
    with logspool.open(GOLDEN_V2, readonly=True) as log:
        assert (log.meta.version, log.meta.compression, log.meta.compression_level) == (2, "zstd", 3)
        reader = log.reader()
        got = {r.lsn: r.payload for r in reader}
        assert reader.gaps == [fmt.Gap(3, 4, "quarantined by repair")]
        assert [s.name for s in log.subscribers()] == ["billing"]
    assert sorted(got) == [i for i in range(20) if i != 3]
    assert len(got[12]) == 200  # stored uncompressed (incompressible)
    assert all(got[i] == expected[i] for i in got if i != 12)
    work = tmp_path / "v2"
    shutil.copytree(GOLDEN_V2, work)
    with logspool.open(work) as log:
        assert log.append(b"new " * 10) == 20
    assert logspool.repair(work).actions == []


def test_undo_log_vectors() -> None:
    v = vectors()
    header = fmt.decode_undo_header(v["undo-header"], "vector")
    assert header == fmt.UndoHeader(4096, 65536, 7, 1795000000000000000)
    assert fmt.encode_undo_header(header) == v["undo-header"]
    # Version 2: bytes 40..43 hold the CRC of the file at the checkpoint (65536 zero bytes here).
    magic, version, size, block, data, seq, created, data_crc = struct.unpack_from(
        "<8sHHIQQQI", v["undo-header-two"]
    )
    assert (magic, version, size, block, data, seq, created) == (
        b"LOGSPUND",
        2,
        48,
        4096,
        65536,
        7,
        1795000000000000000,
    )
    assert data_crc == zlib.crc32(bytes(65536)) and struct.unpack_from("<I", v["undo-header-two"], 44) == (
        zlib.crc32(v["undo-header-two"][:44]),
    )
    header = fmt.decode_undo_header(v["undo-header-two"], "vector")
    assert header == fmt.UndoHeader(4096, 65536, 7, 1795000000000000000, data_crc)
    assert fmt.encode_undo_header(header) == v["undo-header-two"]
    assert fmt.decode_undo_entry(v["undo-entry"]) == (4096, b"old!")
    assert fmt.encode_undo_entry(4096, b"old!") == v["undo-entry"]


def test_golden_checkpoint_file_v1_rolls_back(tmp_path: Path) -> None:
    """A version-1 undo log left by a crash mid-transaction: two whole entries, one torn."""
    shutil.copytree(Path(__file__).parent / "ckpt-v1", tmp_path / "c")
    with logspool.CheckpointFile(tmp_path / "c" / "data") as f:
        assert f.last_rollback is not None
        assert (f.last_rollback.entries, f.last_rollback.torn_tail) == (2, True)
        assert f.read(0, 2048) == b"checkpointed " * 157 + b"abcdefg"


def test_job_op_and_snapshot_vectors() -> None:
    v = vectors()
    put = jops.Put(
        "https://a.example/x", "a.example", b"hi", 10, 1795000000000000000, 0, jops.REPLACE, jops.KEEP
    )
    assert jops.decode(v["job-put"], "vector") == put and jops.encode(put) == v["job-put"]
    take = jops.Take(5, 1795000030000000000)
    assert jops.decode(v["job-take"], "vector") == take and jops.encode(take) == v["job-take"]
    nack = jops.Nack(5, 9, 1795000060000000000, False, "oops")
    assert jops.decode(v["job-nack"], "vector") == nack and jops.encode(nack) == v["job-nack"]
    release = jops.Release(5, 9)
    assert jops.decode(v["job-release"], "vector") == release and jops.encode(release) == v["job-release"]
    take_many = jops.TakeMany((5, 7), 1795000030000000000)
    assert jops.decode(v["job-take-many"], "vector") == take_many
    assert jops.encode(take_many) == v["job-take-many"]
    ack_many = jops.AckMany((5, 7), (589824, 589825))
    assert jops.decode(v["job-ack-many"], "vector") == ack_many and jops.encode(ack_many) == v["job-ack-many"]
    assert 9 << jops.INDEX_BITS == 589824
    put_many = jops.PutMany(
        (("https://a.example/x", "a.example", b"hi"), ("k", "", b"")),
        10, 1795000000000000000, 0, jops.REPLACE, jops.KEEP,
    )  # fmt: skip
    assert jops.decode(v["job-put-many"], "vector") == put_many
    assert jops.encode(put_many) == v["job-put-many"]
    assert [3 << jops.INDEX_BITS | i for i in range(2)] == [196608, 196609]
    snap = jops.decode_snapshot(v["job-snapshot"], "vector")
    row = jops.JobRow(
        5, "k", "", b"p", 128, jops.PENDING, 1795000000000000000, 0, 1, 0, 0,
        1795000000000000000, 1795000000000000001, "e",
    )  # fmt: skip
    assert snap == jops.Snapshot(12, 5, {"acked": 3, "put": 4}, {(10, "a.example"): 9}, [row])
    assert jops.encode_snapshot(snap) == v["job-snapshot"]


def test_golden_job_journal_v1_opens_with_its_jobs(tmp_path: Path) -> None:
    """A version-1 journal: a snapshot after the first ack, then ops (a put, a nack, an update)."""
    from logspool import jobs

    shutil.copytree(Path(__file__).parent / "jobs-v1", tmp_path / "j")
    with jobs.open(tmp_path / "j", create=False) as j:
        st = j.stats()
        assert (st.pending, st.leased, st.dead, st.max_deliveries) == (3, 0, 0, 3)
        assert st.counters["acked"] == 1 and st.counters["nacked"] == 1 and st.counters["updated"] == 1
        got = {job.key: (job.payload, job.priority, job.deliveries, job.error) for job in j.jobs()}
        assert got == {
            "https://b.example/1": (b"two-updated", 128, 1, "flaky"),
            "c:1": (b"three", 128, 0, ""),
            "https://a.example/2": (b"four", 128, 0, ""),
        }


def test_kv_op_and_snapshot_vectors(tmp_path: Path) -> None:
    from logspool import kv
    from logspool.kv import _ops as kops

    v = vectors()
    t = 1795000000000000000
    put = kops.Set("user:1", kops.STRING, b"hi", t, t + 60 * 10**9, 30 * 10**9, False)
    assert kops.decode(v["kv-set"], "vector") == put and kops.encode(put) == v["kv-set"]
    rename = kops.Rename("user:1", "user:2", t + 1)
    assert kops.decode(v["kv-rename"], "vector") == rename and kops.encode(rename) == v["kv-rename"]
    lock = kops.Lock("user:2", "w1", t + 30 * 10**9)
    assert kops.decode(v["kv-lock"], "vector") == lock and kops.encode(lock) == v["kv-lock"]
    # the snapshot vector read by the store itself, as the newest snapshot of a store
    with kv.open(tmp_path / "s") as store:
        (tmp_path / "s" / "snapshot.0000000000000009").write_bytes(v["kv-snapshot"])
        state = store._read_snapshot(str(tmp_path / "s" / "snapshot.0000000000000009"))
    entry = state.values["n"]
    assert (entry.vtype, entry.value, entry.ts, entry.created_ns, entry.modified_ns, entry.accessed_ns) == (
        kops.INTEGER, (42).to_bytes(8, "little"), t, t, t + 1, t + 2)  # fmt: skip
    assert (entry.expire_ns, entry.touch_ns, entry.version, state.next_lsn) == (0, 0, 7, 9)
    assert state.tombstones == {"gone": t + 3} and state.locks == {"n": ("w1", t + 4)}


def test_protocol_vectors() -> None:
    from logspool import _wire as p

    text = (ROOT / "docs" / "PROTOCOL.md").read_text()
    found = {
        n: bytes.fromhex(b.replace("\n", " "))
        for n, b in re.findall(r"```hex ([a-z-]+)\n(.*?)```", text, re.S)
    }
    expected = {
        "hello": p.Frame(p.REQUEST, p.HELLO, 0, 1, {"token": "s3cret"}),
        "set": p.Frame(p.REQUEST, p.KV_SET, 0, 2, {"name": "cfg", "key": "n", "value": 42, "ttl": 1.5}),
        "set-reply": p.Frame(p.REPLY, p.KV_SET, 0, 2, {"ok": True}),
        "error-reply": p.Frame(
            p.REPLY,
            p.KV_NOT,
            p.FLAG_ERROR,
            3,
            {"error": "KeyNotFoundError", "message": "no key 'b'", "args": ["cfg", "b"]},
        ),
        "event": p.Frame(p.EVENT, p.LISTEN, 0, 4, {"records": [[0, 5, b"x"]]}),
        "forget": p.Frame(p.REQUEST, p.LOG_FORGET, 0, 7, {"name": "w", "producers": ["spark:1f:0"]}),
        "forget-reply": p.Frame(p.REPLY, p.LOG_FORGET, 0, 7, {"forgotten": 1}),
    }
    assert sorted(found) == sorted(expected)
    for name, frame in expected.items():
        assert list(p.decode_frames(found[name], 1 << 20)) == [frame], name
        assert (
            p.encode_frame(frame.kind, frame.command, frame.request_id, frame.body, frame.flags)
            == found[name]
        )


GOLDEN = Path(__file__).parent


def test_golden_two_slot_checkpoints_read_and_a_commit_writes_the_other_slot(tmp_path: Path) -> None:
    """cp-v2: subscriber checkpoints as every writer writes them today (version 2, two slots)."""
    names = {"billing": 9, "s" * 600: 7}
    report = logspool.verify(GOLDEN / "cp-v2")
    assert report.ok and report.problems == [] and report.subscribers == 2
    with logspool.open(GOLDEN / "cp-v2", readonly=True) as log:
        assert {s.name: s.lsn for s in log.subscribers()} == names
        assert [r.payload for r in log.read()] == [b"cp-v2-%02d " % i * 8 for i in range(12)]
        assert log.retention == logspool.Retention(consumed=True, age_max_s=86400.0)
    slots = {}
    for name in names:
        raw = (GOLDEN / "cp-v2" / fmt.checkpoint_name(name)).read_bytes()
        assert len(raw) == 2 * fmt.checkpoint_slot_size(name)
        slots[name] = [(cp.generation, cp.lsn) if cp else None for cp in fmt.checkpoint_slots(raw, name)]
    assert slots == {"billing": [(3, 9), (2, 5)], "s" * 600: [(1, 0), (2, 7)]}
    work = tmp_path / "cp"
    shutil.copytree(GOLDEN / "cp-v2", work)
    with logspool.open(work) as log:
        sub = log.subscribe("billing")
        assert sub.next(timeout=0) is not None
        sub.commit()  # generation 4, into the slot that does not hold the newest (slot 1)
        sub.close()
    raw = (work / fmt.checkpoint_name("billing")).read_bytes()
    assert [(cp.generation, cp.lsn) if cp else None for cp in fmt.checkpoint_slots(raw, "x")] == [
        (3, 9),
        (4, 10),
    ]


def test_golden_job_journal_v4_opens_with_its_jobs(tmp_path: Path) -> None:
    """jobs-v4: a format-4 journal (every op a writer of format 4 writes, PUT_MANY included), two
    snapshots (the newer with pending, leased and dead jobs) and ops after them."""
    from logspool import jobs

    assert (GOLDEN / "jobs-v4" / "JOURNAL").read_bytes() == b'{"kind": "logspool-jobs", "version": 4}\n'
    shutil.copytree(GOLDEN / "jobs-v4", tmp_path / "j")
    with jobs.open(tmp_path / "j", create=False) as j:
        st = j.stats()
        assert (st.pending, st.leased, st.dead, st.max_deliveries, st.next_lsn) == (1, 0, 1, 2, 28)
        assert st.counters == {
            "put": 8, "updated": 0, "taken": 10, "redelivered": 1, "acked": 3, "nacked": 3,
            "extended": 1, "expired": 1, "dead": 3, "superseded": 0, "retried": 1, "purged": 1,
            "cancelled": 1, "released": 1, "ops_ignored": 0,
        }  # fmt: skip
        got = [(job.id, job.key, job.payload, job.priority, job.deliveries, job.state) for job in j.jobs()]
        assert got == [
            (65537, "https://b.example/1", b"two", 128, 0, "pending"),
            (1245185, "d:1", b"five", 3, 2, "dead"),
        ]


def test_golden_key_value_store_opens_with_its_values(tmp_path: Path) -> None:
    """kv-v1: a key-value store: a snapshot (values of every type, a tombstone, a memory-only
    key, a lock) and every op after it (RENAME, UNLOCK, SET with a TTL, EXPIRE, TOUCH)."""
    from logspool import kv

    assert (GOLDEN / "kv-v1" / "JOURNAL").read_bytes() == b'{"kind": "logspool-kv", "version": 1}\n'
    shutil.copytree(GOLDEN / "kv-v1", tmp_path / "k")
    with kv.open(tmp_path / "k", create=False) as store:
        items = dict(store.items())
        items.pop("user:2", None)  # its TTL (60 s after it was made) has passed since
        assert items == {"b": True, "f": 2.5, "n": 42, "raw": b"\x00\x01\xff", "void": None}
        state = store._state
        assert sorted(state.tombstones) == ["gone", "mem", "user:1"] and state.locks == {}
        assert state.values["user:2"].value == b"hi" and state.next_lsn == 16


def test_golden_checkpoint_file_v2_rolls_back(tmp_path: Path) -> None:
    """ckpt-v2: a version-2 undo log (the checkpoint's CRC in its header) left by a crash
    mid-transaction: two whole entries, then a torn third whose block never changed."""
    shutil.copytree(GOLDEN / "ckpt-v2", tmp_path / "c")
    with logspool.CheckpointFile(tmp_path / "c" / "data") as f:
        assert f.last_rollback is not None
        assert (f.last_rollback.entries, f.last_rollback.torn_tail, f.last_rollback.proven) == (2, True, True)
        assert f.read(0, 2048) == b"version two! " * 157 + b"1234567"


# --- the independent decoder (tests/golden/spec.py) against logspool --------------------------------
LAYOUTS_EXPECTED = {
    "segment-header", "record", "gap-payload", "index-header", "index-entry", "meta", "checkpoint-slot",
    "checkpoint-v1", "sync-file", "undo-header", "undo-entry", "job-snapshot-header", "job-counter",
    "job-fairness", "job-entry", "kv-op", "kv-snapshot-header", "kv-frame", "kv-value", "kv-tombstone",
    "kv-lock",
}  # fmt: skip
GOLDEN_LOGS = ["v1", "v2", "cp-v2", "jobs-v1/ops", "jobs-v4/ops", "kv-v1/ops"]


def _job_op_as_library(name: str, f: dict[str, Any]) -> object:
    """The library's op value for what spec.py decoded (field names are the table's)."""
    if name == "PUT":
        return jops.Put(f["key"], f["domain"], f["payload"], f["priority"], f["not_before"], f["ttl_until"],
                        f["merge"] & 3, f["merge"] >> 2)  # fmt: skip
    if name == "PUT_MANY":
        items = tuple((p["key"], p["domain"], p["payload"]) for p in f["puts"])
        return jops.PutMany(
            items, f["priority"], f["not_before"], f["ttl_until"], f["merge"] & 3, f["merge"] >> 2
        )
    simple: dict[str, Callable[[], object]] = {
        "TAKE": lambda: jops.Take(f["job_id"], f["lease_until"]),
        "ACK": lambda: jops.Ack(f["job_id"], f["token"]),
        "NACK": lambda: jops.Nack(f["job_id"], f["token"], f["not_before"], bool(f["dead"]), f["error"]),
        "EXTEND": lambda: jops.Extend(f["job_id"], f["token"], f["lease_until"]),
        "EXPIRE": lambda: jops.Expire(f["job_id"]),
        "DEAD": lambda: jops.Dead(f["job_id"], f["reason"]),
        "RETRY": lambda: jops.Retry(f["job_id"], f["not_before"]),
        "PURGE": lambda: jops.Purge(f["job_id"]),
        "CANCEL": lambda: jops.Cancel(f["job_id"]),
        "CONFIG": lambda: jops.Config(f["max_deliveries"]),
        "RELEASE": lambda: jops.Release(f["job_id"], f["token"]),
        "TAKE_MANY": lambda: jops.TakeMany(tuple(f["job_ids"]), f["lease_until"]),
        "ACK_MANY": lambda: jops.AckMany(
            tuple(a["job_id"] for a in f["acks"]), tuple(a["token"] for a in f["acks"])
        ),
    }
    return simple[name]()


def _job_snapshot(raw: bytes) -> jops.Snapshot:
    """A job snapshot file by the tables of §14.2, as the library's Snapshot value."""
    t = spec.layouts()
    head, pos = t["job-snapshot-header"].decode(raw)
    assert head["header_size"] == 52 and pos + head["body_size"] == len(raw)
    counters, fairness, jobs_ = {}, {}, []
    for _ in range(head["counter_count"]):
        c, pos = t["job-counter"].decode(raw, pos)
        assert c["name"].isascii()
        counters[c["name"]] = c["value"]
    for _ in range(head["fairness_count"]):
        e, pos = t["job-fairness"].decode(raw, pos)
        fairness[(e["priority"], e["domain"])] = e["value"]
    for _ in range(head["job_count"]):
        j, pos = t["job-entry"].decode(raw, pos)
        assert j["state"] in (0, 1, 2) and j["reserved"] == 0
        fields = ("id", "key", "domain", "payload", "priority", "state", "not_before", "ttl_until",
                  "deliveries", "token", "lease_until", "created", "updated", "error")  # fmt: skip
        jobs_.append(jops.JobRow(*(j[name] for name in fields)))
    assert pos == len(raw), "bytes after the last entry"
    assert list(counters) == sorted(counters) and list(fairness) == sorted(fairness)
    assert [j.id for j in jobs_] == sorted(j.id for j in jobs_)
    return jops.Snapshot(head["next_lsn"], head["max_deliveries"], counters, fairness, jobs_)


def _kv_op_as_library(raw: bytes) -> object:
    from logspool.kv import _ops as kops

    op, end = spec.layouts()["kv-op"].decode(raw)
    assert end == len(raw) and op["flags"] in (0, 1) and op["vtype"] in spec.kv_value_types()
    kinds: dict[int, Callable[[], object]] = {
        1: lambda: kops.Set(
            op["key"], op["vtype"], op["value"], op["t1"], op["t2"], op["t3"], bool(op["flags"])
        ),
        2: lambda: kops.Update(op["key"], op["vtype"], op["value"], op["t1"]),
        3: lambda: kops.Delete(op["key"], op["t1"]),
        4: lambda: kops.Touch(op["key"], op["t2"]),
        5: lambda: kops.Expire(op["key"]),
        6: lambda: kops.Lock(op["key"], op["second"], op["t2"]),
        7: lambda: kops.Unlock(op["key"]),
        8: lambda: kops.Rename(op["key"], op["second"], op["t1"]),
    }
    if op["op"] in (1, 2) and not (op["op"] == 1 and op["flags"]):
        spec.decode_kv_value(op["vtype"], op["value"], spec.kv_value_types())
    return kinds[op["op"]]()


def _kv_snapshot(raw: bytes) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
    """A key-value snapshot by the tables of §15.2: its header and its entries in file order."""
    t = spec.layouts()
    head, pos = t["kv-snapshot-header"].decode(raw)
    entries: list[tuple[str, dict[str, Any]]] = []
    by_kind = {1: "kv-value", 2: "kv-tombstone", 3: "kv-lock"}
    for _ in range(head["value_count"] + head["tombstone_count"] + head["lock_count"]):
        frame, pos = t["kv-frame"].decode(raw, pos)
        body = frame["body"]
        entry, end = t[by_kind[body[0]]].decode(body)
        assert end == len(body)
        if body[0] == 1:
            entry["decoded"] = spec.decode_kv_value(entry["vtype"], entry["value"], spec.kv_value_types())
        entries.append((by_kind[body[0]], entry))
    assert pos == len(raw), "bytes after the last entry"
    kinds = [k for k, _ in entries]
    assert kinds == sorted(
        kinds, key=["kv-value", "kv-tombstone", "kv-lock"].index
    )  # values, tombstones, locks
    for kind in set(kinds):
        keys = [e["key"].encode() for k, e in entries if k == kind]
        assert keys == sorted(keys), f"{kind} entries not in key order"
    return head, entries


def _undo(raw: bytes) -> tuple[dict[str, Any] | None, list[tuple[int, bytes]], bool]:
    """An undo log by §13: (header, the entries, whether a torn tail was ignored)."""
    t = spec.layouts()
    try:
        head, pos = t["undo-header"].decode(raw)
    except spec.SpecError:
        assert not any(raw[48:]), "a header that does not decode, and bytes after it"
        return None, [], False
    assert head["version"] in (1, 2) and 512 <= head["block_size"] <= 1 << 20
    entries: list[tuple[int, bytes]] = []
    while pos < len(raw):
        try:
            e, end = t["undo-entry"].decode(raw, pos)
            assert 1 <= e["size"] <= head["block_size"] and e["reserved"] == 0
            assert e["offset"] + e["size"] <= head["data_size"]
        except (spec.SpecError, AssertionError):
            rest = raw[pos:]
            size = int.from_bytes(rest[:4], "little") if len(rest) >= 4 else 0
            torn = (
                len(rest) < 16
                or (not 0 < size <= head["block_size"] and not any(rest[4:]))
                or 20 + size > len(rest)
                or (rest[16 + size : 20 + size] == bytes(4) and not any(rest[20 + size :]))
            )
            assert torn, f"undo entry at {pos} is damage, not a torn tail"
            return head, entries, True
        entries.append((e["offset"], e["old"]))
        pos = end
    return head, entries, False


def test_the_document_is_consistent() -> None:
    """Every table parses; offsets follow from sizes; each caption's size is its table's."""
    found = spec.layouts()
    assert set(found) == LAYOUTS_EXPECTED
    assert found["job-entry"].fixed_size() == 74 and found["record"].fixed_size() == 36
    ops = spec.job_ops()
    assert sorted(ops) == list(range(1, 16)) and ops[15].name == "PUT_MANY"
    assert [name for name, _ in spec.kv_value_types().values()] == [
        "void", "bytes", "string", "integer", "float", "boolean"
    ]  # fmt: skip
    text = spec.document()
    # the version tables list every journal version the code reads
    from logspool.jobs import _journal

    for version in range(2, _journal.Journal.VERSION + 1):
        assert f"| {version} | job journal (`JOURNAL` marker)" in text, version


def test_a_wrong_table_is_caught() -> None:
    """The checks can fail: a caption, an offset or a size that is wrong in the document."""
    text = spec.document()
    wrong_caption = text.replace("Job (74 bytes, then its strings):", "Job (60 bytes, then its strings):")
    with pytest.raises(spec.SpecError, match="caption says 60"):
        spec.layouts(wrong_caption)
    wrong_offset = text.replace("| 61 | 1 | u8 | state |", "| 60 | 1 | u8 | state |")
    with pytest.raises(spec.SpecError, match="state at offset 60"):
        spec.layouts(wrong_offset)
    # a size that still adds up (two fields swap widths) is caught by decoding the vectors
    swapped = text.replace("| 24 | 8 | u64 | durable_lsn |", "| 24 | 4 | u64 | durable_lsn |").replace(
        "| 32 | length | bytes | payload |", "| 28 | length | bytes | payload |"
    )
    with pytest.raises(spec.SpecError):
        spec.layouts(swapped)["record"].decode(spec.vectors()["record"])
    wrong_crc = text.replace("CRC-32 of bytes 0..35 |", "CRC-32 of bytes 0..31 |")
    with pytest.raises(spec.SpecError, match=r"CRC-32 of bytes 0\.\.31"):
        spec.layouts(wrong_crc)["segment-header"].decode(spec.vectors()["segment-header"])
    wrong_op = text.replace(
        "not_before i64, error_size u16, error text", "not_before i64, error_size u32, error text"
    )
    with pytest.raises(spec.SpecError):
        spec.decode_job_op(spec.vectors()["job-nack"], spec.job_ops(wrong_op))


def test_every_vector_decodes_by_the_tables_as_logspool_reads_it() -> None:
    from logspool.kv import _ops as kops

    t, v = spec.layouts(), spec.vectors()
    checked = set()

    def record(name: str) -> dict[str, Any]:
        rec, end = t["record"].decode(v[name])
        assert end == len(v[name])
        checked.add(name)
        return rec

    rec = record("record")
    out: list[fmt.Record] = []
    infos: list[seg.RecordInfo] = []
    seg.parse(v["record"], 0, rec["lsn"], 1 << 20, out, infos)
    assert out == [fmt.Record(rec["lsn"], rec["timestamp"], rec["payload"])] and rec["flags"] == 0
    assert infos[0].durable_lsn == rec["durable_lsn"] == 3
    seal = record("seal")
    stop = seg.parse(v["seal"], 0, seal["lsn"], 1 << 20, [])
    assert (seal["flags"], seal["length"], stop.kind, stop.next_lsn) == (1, 0, seg.SEAL, seal["lsn"])
    gap = record("gap")
    payload, _ = t["gap-payload"].decode(gap["payload"], 0, {"length": gap["length"]})
    gaps: list[fmt.Gap] = []
    stop = seg.parse(v["gap"], 0, gap["lsn"], 1 << 20, [], None, 0, gaps)
    note = payload["note"].rstrip(b"\0").decode()
    assert gaps == [fmt.Gap(gap["lsn"], payload["next_lsn"], f"quarantined by repair ({note})")]
    assert (gap["flags"], gap["durable_lsn"], stop.lsn) == (2, 0, payload["next_lsn"])
    zrec = record("compressed-record")
    out = []
    seg.parse(v["compressed-record"], 0, zrec["lsn"], 1 << 20, out)
    assert out[0].payload == spec._decompress(zrec["payload"], 1 << 20) and zrec["flags"] == 4

    def struct_(layout: str, name: str) -> dict[str, Any]:
        fields, end = t[layout].decode(v[name])
        assert end == len(v[name]), name
        checked.add(name)
        return fields

    h = struct_("segment-header", "segment-header")
    assert fmt.decode_segment_header(v["segment-header"], "v") == fmt.SegmentHeader(
        h["version"], h["base_lsn"], h["created_ns"]
    )
    ih = struct_("index-header", "index-header")
    assert fmt.decode_index_header(v["index-header"], "v") == (ih["base_lsn"], ih["interval"])
    ie = struct_("index-entry", "index-entry")
    assert fmt.decode_index_entries(v["index-header"] + v["index-entry"]) == [
        fmt.IndexEntry(ie["lsn"], ie["timestamp"], ie["offset"])
    ]
    sync = struct_("sync-file", "sync-file")
    assert fmt.read_sync_mark(v["sync-file"]) == (sync["mark_base"], sync["mark_offset"])
    assert fmt.read_sync_boot(v["sync-file"]) == sync["boot_id"]
    assert fmt.read_sync_gather(v["sync-file"]) == (
        sync["gather_covered"],
        sync["gather_target"],
        sync["gather_epoch"],
    )
    assert fmt.read_sync_tail(v["sync-file"]) == (
        sync["tail_base"],
        sync["tail_offset"],
        sync["tail_lsn"],
        sync["tail_end"],
    )
    checked.add("meta")
    version, body = spec.read_json_framed(v["meta"], b"LOGSPOOL")
    spec.check_meta(body, version)
    m = fmt.decode_meta(v["meta"], "v")
    keys = ("created_ns", "segment_size_max", "index_interval", "record_size_max", "log_id")
    assert (m.version, m.created_ns, m.segment_size_max, m.index_interval, m.record_size_max, m.log_id) == (
        version, *(body[k] for k in keys)
    )  # fmt: skip
    for name in ("checkpoint-slot-a", "checkpoint-slot-b"):
        slot = struct_("checkpoint-slot", name)
        assert slot["generation"] >= 1 and slot["version"] == 2
    v1 = struct_("checkpoint-v1", "checkpoint")
    assert fmt.decode_checkpoint(v["checkpoint"], "v") == fmt.Checkpoint(
        v1["name"], v1["lsn"], v1["committed_ns"], v1["created_ns"]
    )
    a, b = v["checkpoint-slot-a"], v["checkpoint-slot-b"]
    two = a + bytes(512 - len(a)) + b + bytes(512 - len(b))
    name = "cp." + hashlib.sha256(b"billing").hexdigest()
    best, _slots = spec.read_checkpoint(two, name)
    cp = fmt.decode_checkpoint(two, "v")
    assert (cp.name, cp.lsn, cp.generation, cp.committed_ns, cp.created_ns) == (
        best["name"], best["lsn"], best["generation"], best["committed_ns"], best["created_ns"],
    )  # fmt: skip
    for name in ("undo-header", "undo-header-two"):
        uh = struct_("undo-header", name)
        assert fmt.decode_undo_header(v[name], "v") == fmt.UndoHeader(
            uh["block_size"], uh["data_size"], uh["sequence"], uh["created_ns"],
            None if uh["version"] == 1 else uh["data_crc"],
        )  # fmt: skip
    ue = struct_("undo-entry", "undo-entry")
    assert fmt.decode_undo_entry(v["undo-entry"]) == (ue["offset"], ue["old"])
    ops = spec.job_ops()
    for name in [n for n in v if n.startswith("job-") and n != "job-snapshot"]:
        op_name, fields = spec.decode_job_op(v[name], ops)
        assert jops.decode(v[name], name) == _job_op_as_library(op_name, fields), name
        checked.add(name)
    assert jops.decode_snapshot(v["job-snapshot"], "v") == _job_snapshot(v["job-snapshot"])
    checked.add("job-snapshot")
    for name in ("kv-set", "kv-rename", "kv-lock"):
        assert kops.decode(v[name], name) == _kv_op_as_library(v[name]), name
        checked.add(name)
    head, entries = _kv_snapshot(v["kv-snapshot"])
    lib = kops.decode_snapshot_header(v["kv-snapshot"], "v")
    assert (lib.next_lsn, lib.values, lib.tombstones, lib.locks) == (
        head["next_lsn"], head["value_count"], head["tombstone_count"], head["lock_count"],
    )  # fmt: skip
    pos = lib.size
    for _kind, entry in entries:
        size, _crc = kops.FRAME.unpack_from(v["kv-snapshot"], pos)
        entry_body = v["kv-snapshot"][pos + 8 : pos + 8 + size]
        kind, content, value_at = kops.decode_entry(entry_body, "v", pos)
        if kind == kops.ENTRY_VALUE:
            assert isinstance(content, kops.ValueRow)
            assert (content.key, content.vtype, entry_body[value_at:], content.version) == (
                entry["key"], entry["vtype"], entry["value"], entry["version"]
            )  # fmt: skip
            assert kops.decode_value(content.vtype, entry_body[value_at:], "v") == entry["decoded"]
        elif kind == kops.ENTRY_TOMBSTONE:
            assert content == (entry["key"], entry["ts"])
        else:
            assert content == (entry["key"], entry["owner"], entry["until"])
        pos += 8 + size
    checked.add("kv-snapshot")
    assert checked == set(v), f"vectors no independent decoder checks: {set(v) - checked}"


@pytest.mark.parametrize("name", GOLDEN_LOGS)
def test_golden_logs_decode_by_the_tables_as_logspool_reads_them(name: str) -> None:
    path = GOLDEN / name
    content = spec.read_log(path)
    with logspool.open(path, readonly=True) as log:
        reader = log.reader()
        records = [(r.lsn, r.timestamp, r.payload) for r in reader]
        assert records == [(r["lsn"], r["timestamp"], r["payload"]) for r in content.records]
        assert [(g.first_lsn, g.next_lsn) for g in reader.gaps] == [(a, b) for a, b, _n, _o in content.gaps]
        assert log.next_lsn == content.next_lsn
        meta = log.meta
        assert (meta.version, meta.created_ns, meta.record_size_max, meta.log_id, meta.compression) == (
            content.meta_version, content.meta["created_ns"], content.meta["record_size_max"],
            content.meta["log_id"], content.meta.get("compression"),
        )  # fmt: skip
        subscribers = {s.name: s.lsn for s in log.subscribers()}
        policy = log.retention
    # §5.2: every index is exactly what the walk over the segment's records gives
    for base, expected in content.index_expected.items():
        header, entries = spec.read_index((path / fmt.index_name(base)).read_bytes())
        assert (header["base_lsn"], header["interval"]) == (base, content.meta["index_interval"])
        assert entries == expected and fmt.decode_index_entries(
            (path / fmt.index_name(base)).read_bytes()
        ) == [fmt.IndexEntry(*e) for e in expected]
    # §4.3: seals as writers write them
    for s in content.seals:
        before = [r["timestamp"] for r in content.records if r["lsn"] < s["lsn"]]
        assert s["durable_lsn"] <= s["lsn"] and s["timestamp"] >= max(before)
        assert content.headers[s["lsn"]]["created_ns"] == s["timestamp"]
    # §6.2: checkpoints
    found = {}
    for cp_file in sorted(path.glob("cp.*")):
        best, slots = spec.read_checkpoint(cp_file.read_bytes(), cp_file.name)
        found[best["name"]] = best["lsn"]
        lib = fmt.decode_checkpoint(cp_file.read_bytes(), str(cp_file))
        assert (lib.name, lib.lsn, lib.generation or None) == (
            best["name"],
            best["lsn"],
            best.get("generation"),
        )
        if slots:
            assert len(cp_file.read_bytes()) == 2 * (-(-(52 + len(best["name"].encode())) // 512) * 512)
            lib_slots = fmt.checkpoint_slots(cp_file.read_bytes(), str(cp_file))
            assert [(c.generation, c.lsn) if c else None for c in lib_slots] == [
                (c["generation"], c["lsn"]) if c else None for c in slots
            ]
    assert found == subscribers
    # §6.3: the retention file
    if (path / "retention").exists():
        version, body = spec.read_json_framed((path / "retention").read_bytes(), b"LOGSPRET")
        assert version == 1 and sorted(body) == ["age_max_s", "consumed", "size_max", "subscriber_idle_max_s"]
        assert policy == logspool.Retention(**body)
    else:
        assert policy is None
    # §8.1: the sync file, if there is one (earlier releases wrote 64 bytes)
    if (path / "sync").exists():
        raw = (path / "sync").read_bytes()
        sync = spec.read_sync(raw)
        assert fmt.read_sync_mark(raw) == (sync["mark_base"], sync["mark_offset"])
        assert (sync["mark_base"], sync["mark_offset"]) <= (max(content.headers), 1 << 62)


@pytest.mark.parametrize("name", ["jobs-v1", "jobs-v4"])
def test_golden_job_journals_decode_by_the_tables_as_logspool_reads_them(name: str) -> None:
    path = GOLDEN / name
    marker = json.loads((path / "JOURNAL").read_bytes())
    assert marker["kind"] == "logspool-jobs" and (path / "JOURNAL").read_bytes().endswith(b"}\n")
    ops = spec.job_ops()
    content = spec.read_log(path / "ops")
    kinds = set()
    for rec in content.records:
        op_name, fields = spec.decode_job_op(rec["payload"], ops)
        kinds.add(op_name)
        assert jops.decode(rec["payload"], name) == _job_op_as_library(op_name, fields)
    # the marker's version is the lowest that holds the ops (§14, §11)
    needs = {"RELEASE": 2, "TAKE_MANY": 3, "ACK_MANY": 3, "PUT_MANY": 4}
    assert marker["version"] >= max((needs.get(k, 1) for k in kinds), default=1)
    snapshots = sorted(path.glob("snapshot.*[0-9a-f]"))
    assert snapshots and all(re.fullmatch(r"snapshot\.[0-9a-f]{16}", s.name) for s in snapshots)
    for snap in snapshots:
        raw = snap.read_bytes()
        mine = _job_snapshot(raw)
        assert mine == jops.decode_snapshot(raw, str(snap))
        assert mine.next_lsn == int(snap.name[9:], 16)


def test_golden_key_value_store_decodes_by_the_tables_as_logspool_reads_it(tmp_path: Path) -> None:
    from logspool import kv
    from logspool.kv import _ops as kops

    path = GOLDEN / "kv-v1"
    assert json.loads((path / "JOURNAL").read_bytes()) == {"kind": "logspool-kv", "version": 1}
    content = spec.read_log(path / "ops")
    for rec in content.records:
        assert kops.decode(rec["payload"], "golden") == _kv_op_as_library(rec["payload"])
    (snap,) = sorted(path.glob("snapshot.*[0-9a-f]"))
    head, entries = _kv_snapshot(snap.read_bytes())
    assert head["next_lsn"] == int(snap.name[9:], 16)
    shutil.copytree(path, tmp_path / "k")
    with kv.open(tmp_path / "k", create=False) as store:
        state = store._read_snapshot(str(tmp_path / "k" / snap.name))
    values = {e["key"]: e for k, e in entries if k == "kv-value"}
    assert sorted(state.values) == sorted(values)
    for key, e in state.values.items():
        mine = values[key]
        times = (e.ts, e.created_ns, e.modified_ns, e.accessed_ns, e.expire_ns, e.touch_ns)
        assert (e.vtype, *times, e.version) == (
            mine["vtype"], mine["ts"], mine["created"], mine["modified"], mine["accessed"], mine["expire_at"],
            mine["touch_ns"], mine["version"],
        )  # fmt: skip
        assert kops.decode_value(e.vtype, e.value or b"", "v") == mine["decoded"]
    assert state.tombstones == {e["key"]: e["ts"] for k, e in entries if k == "kv-tombstone"}
    assert state.locks == {e["key"]: (e["owner"], e["until"]) for k, e in entries if k == "kv-lock"}


@pytest.mark.parametrize("name", ["ckpt-v1", "ckpt-v2"])
def test_golden_undo_logs_decode_by_the_tables_and_roll_back_as_logspool_does(
    name: str, tmp_path: Path
) -> None:
    path = GOLDEN / name
    data = (path / "data").read_bytes()
    head, entries, torn = _undo((path / "data.undo").read_bytes())
    assert head is not None and head["data_size"] == len(data) and torn
    restored = bytearray(data)
    seen = set()
    for offset, old in entries:  # §13.3 step 5: the first entry per offset wins
        if offset not in seen:
            seen.add(offset)
            restored[offset : offset + len(old)] = old
    if head["version"] == 2:  # step 4: the rollback gives back the checkpoint
        assert zlib.crc32(restored) == head["data_crc"]
    shutil.copytree(path, tmp_path / "c")
    with logspool.CheckpointFile(tmp_path / "c" / "data") as f:
        assert f.last_rollback is not None and f.last_rollback.entries == len(seen)
        assert f.read(0, len(data)) == bytes(restored)


def test_a_writer_seals_and_gaps_as_the_document_says(tmp_path: Path) -> None:
    """§4.3 and §4.5 on what a writer and repair write now: a seal's timestamp is not below the
    records before it and is the next segment's created_ns; its durable_lsn is at most its lsn;
    a gap record's timestamp keeps timestamps from going back, and its durable_lsn is 0."""
    work = tmp_path / "log"
    with logspool.open(work, durability="os", segment_size_max=4096, index_interval=512) as log:
        for i in range(40):
            log.append_many([b"%03d" % i * 40, b"x" * 30])
        log.cutover()
        log.append(b"after the cutover")
    content = spec.read_log(work)
    assert len(content.seals) >= 3
    for s in content.seals:
        before = [r["timestamp"] for r in content.records if r["lsn"] < s["lsn"]]
        after = [r["timestamp"] for r in content.records if r["lsn"] >= s["lsn"]]
        assert max(before) <= s["timestamp"] <= min(after)
        assert content.headers[s["lsn"]]["created_ns"] == s["timestamp"] and s["durable_lsn"] <= s["lsn"]
    victim = next(r for r in content.records[3:] if r["length"] > 8 + 43)  # the note fits
    seg_file = work / fmt.segment_name(victim["base"])
    raw = bytearray(seg_file.read_bytes())
    raw[victim["offset"] + 40] ^= 0xFF
    seg_file.write_bytes(bytes(raw))
    logspool.repair(work)
    repaired = spec.read_log(work)
    assert [(a, b) for a, b, _n, _o in repaired.gaps] == [(victim["lsn"], victim["lsn"] + 1)]
    (_first, _next, note, offset) = repaired.gaps[0]
    assert (
        offset == victim["offset"] and note == f"quarantine/{fmt.segment_name(victim['base'])}.{offset}.bad"
    )
    assert (work / note).read_bytes() == bytes(raw[offset : offset + 36 + victim["length"]])


@pytest.mark.parametrize("single_writer", [False, True])
def test_plain_appends_write_records_as_the_document_says(tmp_path: Path, single_writer: bool) -> None:
    """The append's hot path frames a record itself (log/_writer.py, ``fmt.encode_record``
    written out): what it writes decodes by the document's tables, checksums included."""
    work = tmp_path / "log"
    payloads = [b"p%d" % i * (i % 7) for i in range(300)]
    with logspool.open(work, durability="os", single_writer=single_writer, index_interval=512) as log:
        lsns = [log.append(p) for p in payloads]
    content = spec.read_log(work)
    assert lsns == list(range(300))
    assert [(r["lsn"], r["payload"]) for r in content.records] == list(enumerate(payloads))
