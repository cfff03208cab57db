"""The hex test vectors in docs/FORMAT.md decode as the document says, and the v1 golden log reads.

The vectors are parsed out of the document itself, so the specification and the code agree.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import zlib
from pathlib import Path

import logspool
from logspool import _format as fmt
from logspool import _segment as seg

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
    from logspool.jobs import _ops as jops

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
    from logspool.server import _protocol as p

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
