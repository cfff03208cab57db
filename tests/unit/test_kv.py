"""The key-value store as a user drives it: types, overwrite, last-writer-wins, expiry and touch,
locks, rename, add/not/truncate, ranges and regex with cursors, memory-only values, the memory
bound, snapshots, reopening, several processes, and bad input.

Real stores in tmp_path. Time is the one thing the tests move by hand: the store's ``clock`` seam
(ns since the epoch); everything else (files, the op log, fsync) is real.
"""

from __future__ import annotations

import errno
import gc
import multiprocessing
import os
import re
import sys
from collections.abc import Callable, Iterator, MutableMapping
from pathlib import Path
from typing import Any

import pytest

from logspool import kv, limits
from logspool.errors import (
    AppendError,
    CorruptionError,
    KeyExistsError,
    KeyLockedError,
    KeyNotFoundError,
    LockedError,
    NotALogError,
    ValueTypeError,
)
from logspool.kv import _ops as ops
from logspool.kv._store import _Behind
from tests.clock import START_S as NOW
from tests.clock import Clock
from tests.crash.faultfs import Fault, FaultFS


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(tmp_path: Path, clock: Clock) -> Iterator[kv.Store]:
    s = kv.open(tmp_path / "kv", clock=clock)
    yield s
    s._state.check()
    s.close()


def meta(store: kv.Store, key: str, *, data: bool = True, touch: bool = True) -> kv.Value:
    """``store.entry(key)``, which must hold a value."""
    found = store.entry(key, data=data, touch=touch)
    assert found is not None, key
    return found


def test_values_keep_their_type_across_a_reopen(tmp_path: Path) -> None:
    values = {
        "v": None,
        "b": b"\x00\xffraw",
        "s": "h\u00e9 \u2603",
        "i": -(2**63),
        "f": 2.5,
        "t": True,
        "n": False,
    }
    with kv.open(tmp_path / "kv") as s:
        for key, value in values.items():
            s.set(key, value)
        got = {k: s[k] for k in values}
        assert got == values and {k: type(v) for k, v in got.items()} == {
            k: type(v) for k, v in values.items()
        }
        assert (
            meta(s, "i").type == "integer" and meta(s, "t").type == "boolean" and meta(s, "v").type == "void"
        )
    with kv.open(tmp_path / "kv", create=False) as s:
        assert {k: s[k] for k in values} == values
        assert len(s) == len(values)


def test_get_returns_the_value_or_a_default_as_dict_get_does(store: kv.Store, clock: Clock) -> None:
    store.set("n", 7)
    store.set("b", b"raw")
    store.set("void", None)
    assert store.get("n") == 7 and store.get("b") == b"raw"
    assert store.get("missing") is None and store.get("missing", 5) == 5
    assert store.get("void", 5) is None  # a void value is a value: not the default
    assert store.entry("missing") is None
    got = meta(store, "n")
    assert (got.key, got.value, got.type, got.version) == ("n", 7, "integer", 0)
    store.set("session", "x", touch=60)
    clock.advance(50)
    assert store.get("session") == "x"  # a read: it moves the expiry (the Touch rule)
    assert meta(store, "session", touch=False).expire_at == NOW + 110
    clock.advance(50)
    assert store["session"] == "x"  # so does store[key]
    assert meta(store, "session", touch=False).expire_at == NOW + 160
    clock.advance(59)
    assert "session" in store  # a probe: no touch
    assert meta(store, "session", touch=False).expire_at == NOW + 160
    clock.advance(2)
    assert store.get("session", "gone") == "gone" and "session" not in store


def test_the_store_is_a_mutable_mapping_in_utf8_key_order(tmp_path: Path, store: kv.Store) -> None:
    assert isinstance(store, MutableMapping)
    values: dict[str, ops.Value] = {"b": 1, "a": "x", "\u00e9": b"\x00", "z": 2.5, "\U0001f600": True,
                                       "\ufb00": None, "A": -1}  # fmt: skip
    store.update(values)
    order = sorted(values, key=lambda k: k.encode("utf-8"))
    assert list(store) == order and list(store.keys()) == order and len(store) == len(values)
    assert list(store.items()) == [(k, values[k]) for k in order]
    assert list(store.values()) == [values[k] for k in order]
    assert dict(store) == values and ("a", "x") in store.items() and ("a", "y") not in store.items()
    assert "a" in store.keys() and "q" not in store  # noqa: SIM118 (the view)
    for bad in (5, b"a", "", "k" * 5000, None):
        assert bad not in store  # nothing that cannot be a key is in the store
    with pytest.raises(KeyError):
        store["q"]
    with pytest.raises(KeyError):
        del store["q"]
    assert store.pop("b") == 1 and "b" not in store
    assert store.pop("b", "dflt") == "dflt"
    with pytest.raises(KeyError):
        store.pop("b")
    assert store.setdefault("a", "other") == "x" and store.setdefault("new", 3) == 3 and store["new"] == 3
    assert store.setdefault("void") is None and "void" in store and store["void"] is None
    assert store.popitem() == ("A", -1)
    store["a"] = "y"
    del store["z"]
    with kv.open(tmp_path / "kv") as other:  # another process's handle sees the same mapping
        assert dict(other) == dict(store) and "z" not in other and other["a"] == "y"
        assert other != store and store == store and len({store, other}) == 2  # handles, by identity
    store.clear()
    assert len(store) == 0 and list(store) == [] and dict(store) == {}
    with pytest.raises(KeyError):
        store.popitem()


def test_iteration_reads_a_page_at_a_time_and_changes_never_break_it(
    store: kv.Store, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(25):
        store.set(f"k{i:02d}", i, ttl=100 if i % 5 == 0 else None)
    store.set("session", "x", touch=1000)
    pages: list[int] = []
    walk_page = store._walk_page

    def counted(*args: Any) -> Any:
        page = walk_page(*args)
        pages.append(len(page[0]))
        return page

    monkeypatch.setattr(store, "_walk_page", counted)
    monkeypatch.setattr(store, "ITER_PAGE_COUNT", 4)
    monkeypatch.setattr(store, "ITER_PAGE_BYTES_MAX", 3 * (3 + 8))  # pages of 3 integers and keys
    clock.advance(100)  # k00, k05... expire: never listed
    assert list(store) == [f"k{i:02d}" for i in range(25) if i % 5] + ["session"]
    assert len(pages) == 6 and max(pages) == 4
    seen = []
    for key in store:  # deleting behind and adding ahead while iterating
        seen.append(key)
        if key == "k01":
            del store["k12"]  # pages ahead read the store as it is then
            store["k99"] = 99
            store["k00"] = 0  # behind the cursor: not seen
    assert "k12" not in seen and seen[-2:] == ["k99", "session"] and "k00" not in seen
    before = meta(store, "session", touch=False).expire_at
    clock.advance(30)
    pages.clear()
    assert dict(store.items())["session"] == "x" and list(store.values())[-1] == "x"
    assert pages == [3, 3, 3, 3, 3, 3, 3, 1] * 2  # 21 integers of 8 bytes and "session", twice
    assert meta(store, "session", touch=False).expire_at == before  # ranges do not touch


def test_set_without_overwrite_leaves_an_existing_value(store: kv.Store) -> None:
    assert store.set("k", 1, overwrite=False)
    assert not store.set("k", 2, overwrite=False)
    assert store["k"] == 1
    assert store.set("k", 3)
    assert store["k"] == 3


def test_last_writer_wins_by_request_timestamp_even_across_a_delete_and_a_reopen(
    tmp_path: Path, clock: Clock
) -> None:
    with kv.open(tmp_path / "kv", clock=clock) as s:
        assert s.set("k", "t20", ts=NOW + 20)
        assert not s.set("k", "t10", ts=NOW + 10)  # older: loses
        assert s["k"] == "t20"
        assert s.set("k", "t20b", ts=NOW + 20)  # a tie goes to the later op
        assert s.delete("k", ts=NOW + 30)
        assert not s.set("k", "t25", ts=NOW + 25)  # older than the delete
        assert not s.delete("gone", ts=NOW + 40)  # no value, but the delete is remembered...
        s.snapshot()
    with kv.open(tmp_path / "kv", clock=clock) as s:
        assert not s.set("gone", "t35", ts=NOW + 35)  # ...across a snapshot and a reopen
        assert s.get("k") is None
        assert s.set("k", "t31", ts=NOW + 31)
        assert s.set("k", "now")  # no ts: stamped now (or after the last write), and wins
        assert meta(s, "k").timestamp >= NOW + 31


def test_values_expire_and_a_write_or_expire_removes_them(store: kv.Store, clock: Clock) -> None:
    store.set("short", 1, ttl=10)
    store.set("at", 2, expire_at=NOW + 20)
    store.set("forever", 3)
    assert meta(store, "short").expire_at == NOW + 10
    assert store.stats().next_expiry == NOW + 10
    clock.advance(10)
    assert store.get("short") is None and store.get("at") is not None and len(store) == 2
    assert store.stats().keys == 3  # not yet removed
    store.set("other", 4)  # a write removes what expired
    assert store.stats().keys == 3
    clock.advance(10)
    assert store.expire() == 1
    assert sorted(v.key for v in store.range()) == ["forever", "other"]


def test_a_read_extends_a_touch_ttl_and_the_extension_survives_a_reopen(tmp_path: Path, clock: Clock) -> None:
    with kv.open(tmp_path / "kv", clock=clock) as s:
        s.set("session", "x", touch=60)
        assert meta(s, "session").expire_at == NOW + 60
        clock.advance(50)
        assert meta(s, "session").expire_at == NOW + 110  # read at 50: now + 60
        clock.advance(50)
        assert meta(s, "session", touch=False).expire_at == NOW + 110  # touch=False reads only
        assert meta(s, "session", data=False).value is None  # a probe still touches
        s.set("other", 1)  # (makes the touch durable)
    with kv.open(tmp_path / "kv", clock=clock) as s:
        assert meta(s, "session", touch=False).expire_at == NOW + 160
        clock.advance(61)
        assert s.get("session") is None


def test_a_lock_keeps_other_owners_out_until_it_ends_or_is_released(store: kv.Store, clock: Clock) -> None:
    store.set("k", 1)
    until = store.lock("k", "alice", ttl=30)
    assert until == NOW + 30
    with pytest.raises(KeyLockedError) as err:
        store.set("k", 2, owner="bob")
    assert err.value.owner == "alice" and err.value.until == NOW + 30 and "alice" in str(err.value)
    changes: list[Callable[[], object]] = [
        lambda: store.delete("k"), lambda: store.add("k"), lambda: store.rename("k", "k2"),
        lambda: store.lock("k", "bob"), lambda: store.unlock("k", "bob"), lambda: store.pop("k"),
    ]  # fmt: skip
    for change in changes:
        with pytest.raises(KeyLockedError):
            change()
    assert store.add("k", 1, owner="alice") == 2
    assert meta(store, "k").locked_by == "alice"
    clock.advance(30)
    assert meta(store, "k").locked_by is None
    assert store.set("k", 5, owner="bob")  # the lock ended
    store.lock("k", "bob", ttl=30)
    assert store.unlock("k", force=True)
    assert not store.unlock("k", "bob")
    store.lock("free", "carol")  # a key with no value can be locked
    with pytest.raises(KeyLockedError):
        store.set("free", 1)


def test_rename_moves_the_value_atomically(store: kv.Store, clock: Clock) -> None:
    store.set("old", b"v" * 10, ttl=100)
    store.set("taken", 1)
    with pytest.raises(KeyExistsError):
        store.rename("old", "taken")
    with pytest.raises(KeyNotFoundError):
        store.rename("missing", "x")
    store.rename("old", "new")
    got = meta(store, "new")
    assert got.value == b"v" * 10 and got.expire_at == NOW + 100 and store.get("old") is None
    store.rename("new", "taken", overwrite=True)
    assert store["taken"] == b"v" * 10 and "new" not in store


def test_add_not_and_truncate_check_types(store: kv.Store) -> None:
    assert store.add("n") == 1 and store.add("n", 41) == 42
    assert store.add("f", 0.5) == 0.5 and store.add("f", 2) == 2.5
    with pytest.raises(ValueTypeError):
        store.add("n", 0.5)  # an integer stays an integer
    with pytest.raises(ValueError, match="64"):
        store.add("n", 2**63)
    store.set("s", "text")
    with pytest.raises(ValueTypeError) as err:
        store.add("s")
    assert err.value.value_type == "string"
    store.set("t", False)
    assert store.flip("t") is True and store.flip("t") is False
    with pytest.raises(KeyNotFoundError):
        store.flip("missing")
    with pytest.raises(ValueTypeError):
        store.flip("n")
    store.set("b", b"abcdef")
    assert store.truncate("b", 3) == 3 and store["b"] == b"abc"
    assert store.truncate("b", 5) == 5 and store["b"] == b"abc\x00\x00"
    store.set("u", "h\u00e9llo")
    with pytest.raises(ValueError, match="split a character"):
        store.truncate("u", 2)
    assert store.truncate("u", 3) == 3 and store["u"] == "h\u00e9"
    with pytest.raises(ValueError, match="grow"):
        store.truncate("u", 10)
    with pytest.raises(ValueTypeError):
        store.truncate("n", 1)


def test_ranges_page_with_a_cursor_in_key_order(store: kv.Store) -> None:
    keys = [f"user:{i:03d}" for i in range(250)] + ["a", "zz", "user:\u00e9"]
    for key in keys:
        store.set(key, key)
    seen, cursor = [], None
    for _ in range(10):
        page = store.range("user:", "user;", limit=100, cursor=cursor)
        seen += [v.key for v in page]
        cursor = page.cursor
        if cursor is None:
            break
    assert seen == sorted(k for k in keys if k.startswith("user:"))
    assert [v.key for v in store.range("user:248")] == ["user:248", "user:249", "user:\u00e9", "zz"]
    probe = store.range("a", "b", data=False).items
    assert [(v.key, v.value, v.size) for v in probe] == [("a", None, 1)]
    with pytest.raises(ValueError, match="limit"):
        store.range(limit=0)


def test_a_page_holds_at_most_bytes_max_of_values_or_one_value(store: kv.Store) -> None:
    for i in range(6):
        store.set(f"v{i}", b"x" * (3000 if i != 3 else 9000))
    sizes, cursor = [], None
    for _ in range(10):
        page = store.range("v", "w", limit=100, cursor=cursor, bytes_max=7004)
        sizes.append([v.size for v in page])
        cursor = page.cursor
        if cursor is None:
            break
    assert sizes == [[3000, 3000], [3000], [9000], [3000, 3000]]  # v3 alone: over the bound itself
    assert len(store.range("v", "w", bytes_max=4, data=False)) == 2  # a probe: keys count
    found = store.match(r"^v[0-4]$", bytes_max=7004)
    assert [v.key for v in found] == ["v0", "v1"] and found.cursor == "v1"
    found = store.match(r"^v[0-4]$", bytes_max=7004, cursor=found.cursor)
    assert [v.key for v in found] == ["v2"] and found.cursor == "v2"
    with pytest.raises(ValueError, match="bytes_max"):
        store.range(bytes_max=0)


def test_match_is_bounded_by_limit_and_continues_with_a_cursor(store: kv.Store) -> None:
    for i in range(30):
        store.set(f"k{i:02d}", i)
    page = store.match(r"^k[12]\d$", limit=5)
    assert [v.value for v in page] == [10, 11, 12, 13, 14] and page.cursor == "k14"
    rest = store.match(r"^k[12]\d$", limit=100, cursor=page.cursor)
    assert [v.value for v in rest] == list(range(15, 30)) and rest.cursor is None
    with pytest.raises(ValueError, match="regular expression"):
        store.match("(")


def test_memory_only_values_are_not_in_the_op_log(tmp_path: Path) -> None:
    with kv.open(tmp_path / "kv") as s:
        s.set("keep", "old")
        s.set("keep", "volatile", persist=False)
        assert s["keep"] == "volatile" and meta(s, "keep").persist is False
        with kv.open(tmp_path / "kv") as other:  # another process's view: the value is not there
            assert other.get("keep") is None
        ops_dir = tmp_path / "kv" / "ops"
        raw = b"".join((ops_dir / n).read_bytes() for n in os.listdir(ops_dir) if n.endswith(".seg"))
        assert b"volatile" not in raw and b"old" in raw
    with kv.open(tmp_path / "kv") as s:
        assert s.get("keep") is None  # never the older persisted value


def test_the_memory_bound_holds_and_every_value_reads_back(tmp_path: Path) -> None:
    bound = 64 * 1024
    values = {f"k{i:03d}": os.urandom(4000 + i) for i in range(120)}  # ~500 KiB
    with kv.open(tmp_path / "kv", memory_max=bound, snapshot_ops_min=50) as s:
        for key, value in values.items():
            s.set(key, value)
            assert s.stats().hot_bytes <= bound
        s.set("small", 1)
        for key, value in values.items():  # read back from the op log and from snapshots
            assert s[key] == value
            assert s.stats().hot_bytes <= bound
        s._state.check()
        with kv.open(tmp_path / "kv", memory_max=bound) as other:  # compacts under s's feet
            for i in range(3):
                other.set(f"k{i:03d}", b"changed")
                other.snapshot()
        values.update({f"k{i:03d}": b"changed" for i in range(3)})
        assert {k: s[k] for k in values} == values
    with kv.open(tmp_path / "kv", memory_max=bound) as s:
        assert s.stats().hot_bytes <= bound
        assert {k: s[k] for k in values} == values
        s._state.check()
    with kv.open(tmp_path / "kv") as s:  # no bound: everything in memory
        assert s.stats().hot_bytes >= sum(len(v) for v in values.values())


def test_snapshots_compact_the_op_log_and_a_corrupt_one_falls_back(tmp_path: Path) -> None:
    with kv.open(tmp_path / "kv", snapshot_ops_min=100, segment_size_max=4096) as s:
        for i in range(1000):
            s.set(f"k{i % 50}", i)
        s.lock("k1", "me", 3600)
    names = sorted(n for n in os.listdir(tmp_path / "kv") if n.startswith("snapshot.") and n[-1] != "k")
    assert len(names) == 2
    assert len(os.listdir(tmp_path / "kv" / "ops")) < 20  # most segments were removed
    newest = tmp_path / "kv" / names[-1]
    data = bytearray(newest.read_bytes())
    data[-5] ^= 0xFF
    newest.write_bytes(bytes(data))
    with kv.open(tmp_path / "kv") as s:  # the older snapshot and the op log above it
        assert [s[f"k{i}"] for i in range(50)] == [950 + i for i in range(50)]
        assert meta(s, "k1").locked_by == "me"
    for name in names:
        (tmp_path / "kv" / name).write_bytes(b"junk")
    with pytest.raises(CorruptionError, match="no readable snapshot"):
        kv.open(tmp_path / "kv")


def test_snapshots_in_the_background_compact_as_the_fold_does(tmp_path: Path) -> None:
    path = tmp_path / "kv"
    with kv.open(path, snapshot_ops_min=100, segment_size_max=4096, compact_in_background=True) as s:
        for i in range(1000):
            s.set(f"k{i % 50}", i)  # (decisions go on while a snapshot is written)
        s.lock("k1", "me", 3600)
    # close waited for the last one: two snapshots kept, the op log below the older compacted
    names = sorted(n for n in os.listdir(path) if n.startswith("snapshot.") and n[-1] != "k")
    assert len(names) == 2
    # Compacted: the op log starts near the older kept snapshot, not at the first of the 1,001
    # ops. How near depends on when the last background snapshot's retention ran (a loaded
    # machine left one segment more than a quiet one: a count of files failed CI), so the bound
    # is a few snapshot intervals, far from the whole log.
    older = int(names[0].removeprefix("snapshot."), 16)
    bases = sorted(int(n.removesuffix(".seg")) for n in os.listdir(path / "ops") if n.endswith(".seg"))
    assert 0 < bases[0] <= older and older - bases[0] <= 4 * 100
    with kv.open(path) as s:
        assert [s[f"k{i}"] for i in range(50)] == [950 + i for i in range(50)]
        assert meta(s, "k1").locked_by == "me"


def test_a_write_on_a_full_disk_says_to_free_the_live_state_size_and_snapshot(tmp_path: Path) -> None:
    """KV.md, "Free space to compact": deleting keys cannot make room (a delete is an op too), so
    the error says what does. ENOSPC comes through the _fs seam (tests/crash/faultfs.py)."""
    fs = FaultFS(str(tmp_path))
    with kv.open(tmp_path / "kv", fs=fs) as s:
        for i in range(20):
            s.set(f"k{i:02d}", b"x" * 1000)
        fs.fault = Fault(fs.count + 1, errno.ENOSPC, sticky=True, ops=("write", "pwrite", "allocate"))
        writes: list[Callable[[], object]] = [
            lambda: s.set("more", b"y"),
            lambda: s.delete("k01"),
            lambda: s.add("n"),
        ]
        for write in writes:
            with pytest.raises(AppendError) as err:
                write()
            text = str(err.value)
            assert "No space left on device" in text and "nothing was written" in text
            assert (
                re.search(r"free about 2[01]\.\d KiB \(its live state, ", text)
                and "then call snapshot()" in text
            )
            assert "deleting keys does not free space" in text
            found = re.search(r"its live state, (\d+) bytes", text)
            assert found is not None and 20 * 1000 < int(found.group(1)) < 20 * 1100  # values, keys, metadata
        fs.fault = Fault(fs.count + 1, errno.EIO, sticky=True, ops=("write", "pwrite", "allocate"))
        with pytest.raises(AppendError) as err:
            s.set("more", b"y")
        assert "free about" not in str(err.value)  # another failure: no advice about space
        fs.fault = None
        s.snapshot()
        assert s.set("more", b"y") and len(s) == 21


def _adder(path: str, n: int) -> None:
    with kv.open(path) as s:
        for _ in range(n):
            s.add("counter")
            s.set("last", os.getpid())


def test_several_processes_add_without_losing_an_increment(tmp_path: Path) -> None:
    path = str(tmp_path / "kv")
    kv.open(path).close()
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_adder, args=(path, 150)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    with kv.open(path) as s:
        assert s["counter"] == 600
        assert s["last"] in {p.pid for p in procs}


def test_modify_is_one_read_modify_write_that_keeps_the_expiry(store: kv.Store, clock: Clock) -> None:
    assert store.modify("m", lambda v: v + 1, default=0) == 1  # created, without expiry
    assert meta(store, "m").expire_at is None
    store.set("t", b"ab", ttl=60)
    before = meta(store, "t").expire_at
    assert store.modify("t", lambda v: v + b"c") == b"abc"
    assert store["t"] == b"abc" and meta(store, "t").expire_at == before
    assert store.modify("t", lambda v: len(v)) == 3 and store["t"] == 3  # (any type back)

    def fail(value: object) -> object:
        raise RuntimeError("no")

    with pytest.raises(RuntimeError, match="no"):
        store.modify("t", fail)
    assert store["t"] == 3  # nothing written
    store.lock("t", "alice", 60)
    seen: list[object] = []
    with pytest.raises(KeyLockedError):
        store.modify("t", seen.append)
    assert seen == []  # (fn is not called)
    assert store.modify("t", lambda v: v * 2, owner="alice") == 6
    with pytest.raises(ValueError, match="over the limit"):
        store.modify("big", lambda v: bytes(limits.KV_VALUE_SIZE_MAX + 1))
    assert "big" not in store


def test_modify_inside_a_decision_joins_it(store: kv.Store) -> None:
    """The daemon's commit round: one decision, calls made within it are part of it."""
    next_lsn = store.stats().next_lsn
    with store._change(durable=False):
        assert store.modify("a", lambda v: 1) == 1
        assert store.modify("a", lambda v: v + 1) == 2  # sees the first: the same state
        store.set("b", "x")
    store._log.sync()
    assert store["a"] == 2 and store["b"] == "x"
    assert store.stats().next_lsn == next_lsn + 3  # three ops, one decision (no second decision)


def test_expire_inside_modify_joins_its_decision(store: kv.Store, clock: Clock) -> None:
    """``expire`` called by ``modify``'s function is part of that decision, as ``set`` is (it
    failed with an internal error: a second decision on the thread that holds the first). The
    decision removes a batch of expired values as it begins; ``expire`` the rest."""
    batch = limits.KV_EXPIRE_BATCH
    for i in range(batch + 6):
        store.set(f"gone-{i}", i, ttl=1)
    store.set("kept", 1, ttl=60)
    store.set("a", 1)
    clock.advance(2)
    next_lsn = store.stats().next_lsn
    removed: list[int] = []

    def fn(value: object) -> object:
        removed.append(store.expire())
        return value + 1  # type: ignore[operator]

    assert store.modify("a", fn) == 2 and removed == [6]
    assert not [k for k in store if k.startswith("gone-")] and store["kept"] == 1 and store["a"] == 2
    assert store.stats().next_lsn == next_lsn + batch + 6 + 1  # EXPIREs and the UPDATE: one decision
    assert store.expire() == 0


def _open_briefly(path: str, out: Any) -> None:
    try:
        kv.open(path, lock_timeout_s=0.3).close()
        out.put("opened")
    except LockedError:
        out.put("locked")


def test_a_single_writer_store_shuts_other_processes_out_until_it_closes(tmp_path: Path) -> None:
    path = str(tmp_path / "kv")
    with kv.open(path) as s:  # written before by another handle: the single writer catches up
        s["before"] = 1
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    with kv.open(path, single_writer=True) as owner:
        assert owner.single_writer and owner["before"] == 1
        owner["n"] = 1
        assert owner.add("n", 2) == 3
        proc = ctx.Process(target=_open_briefly, args=(path, out))
        proc.start()
        assert out.get(timeout=60) == "locked"
        proc.join(60)
    proc = ctx.Process(target=_open_briefly, args=(path, out))  # closed: the lock is free
    proc.start()
    assert out.get(timeout=60) == "opened"
    proc.join(60)
    with kv.open(path) as s:
        assert dict(s) == {"before": 1, "n": 3}
    with pytest.raises(TypeError, match="single_writer must be True or False"):
        kv.open(path, single_writer=1)  # type: ignore[arg-type]


def test_bad_input_gets_a_clear_error(tmp_path: Path, store: kv.Store) -> None:
    with pytest.raises(ValueError, match="empty"):
        store.set("", 1)
    with pytest.raises(ValueError, match="4096"):
        store.set("k" * 5000, 1)
    with pytest.raises(TypeError, match="list"):
        store.set("k", [1])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="key must be a str"):
        store.get(b"k")  # type: ignore[call-overload]
    with pytest.raises(ValueError, match="ttl or expire_at"):
        store.set("k", 1, ttl=1, expire_at=NOW)
    with pytest.raises(ValueError, match="ttl must be > 0"):
        store.set("k", 1, ttl=-1)
    with pytest.raises(ValueError, match=r"UTF-8"):
        store.set("k", "\ud800")
    with pytest.raises(ValueError, match="memory_max"):
        kv.open(tmp_path / "m", memory_max=-1)
    with pytest.raises(NotALogError, match="not to be created"):
        kv.open(tmp_path / "none", create=False)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "file").write_bytes(b"x")
    with pytest.raises(NotALogError, match="not empty"):
        kv.open(tmp_path / "busy")
    from logspool import jobs

    jobs.open(tmp_path / "j").close()
    with pytest.raises(NotALogError, match="not a key-value store"):
        kv.open(tmp_path / "j")
    with pytest.raises(KeyNotFoundError):
        store["missing"]


@pytest.mark.skipif(sys.implementation.name != "cpython", reason="CPython's PyObject_GC_UnTrack")
def test_a_stores_entries_are_not_walked_by_the_cyclic_collector(tmp_path: Path) -> None:
    """A full collection walks every tracked object: one a key stopped the daemon for up to a
    second under sustained writes (docs/DESIGN.md). Entries set, loaded from a snapshot, updated
    and touched stay untracked, and the values they hold read back the same."""
    from logspool.kv._state import Entry

    def tracked_entries() -> int:
        return sum(1 for o in gc.get_objects() if isinstance(o, Entry))

    with kv.open(tmp_path / "kv") as s:
        for i in range(100):
            s.set(f"k{i}", b"v%d" % i, ttl=3600)
        s.modify("k1", lambda v: v + b"+")  # an update in place
        s.set("k2", b"v2", touch=60)
        s.add("n")
        s.rename("k3", "moved")
        assert tracked_entries() == 0
        s.snapshot()
    with kv.open(tmp_path / "kv") as s:  # loaded from the snapshot
        assert tracked_entries() == 0
        assert s["k1"] == b"v1+" and s["k99"] == b"v99" and s["n"] == 1 and s["moved"] == b"v3"


def test_a_handle_left_behind_by_another_handles_compaction_writes_at_the_end(tmp_path: Path) -> None:
    """Two handles of one store: the first falls behind while the second writes on and
    snapshots twice, which compacts away the op log's segments the first last wrote in (and the
    segment after it). The first then reads a value on disk only (a memory bound of 0) and
    writes, in one decision (``modify``) and plainly: every write lands at the op log's end,
    and every handle, and a fresh open, agree. (Its write used to land in a segment made again
    under a compacted one's name, at an lsn the log had used, and the decision failed.)"""
    path = str(tmp_path / "shared")
    behind = kv.open(path, memory_max=0, segment_size_max=4096)
    ahead = kv.open(path, segment_size_max=4096)
    try:
        behind.set("cold", b"c" * 200)
        behind.set("k", b"old")
        for i in range(60):
            ahead.set(f"f{i}", b"x" * 100)
        ahead.snapshot()
        for i in range(60):
            ahead.set(f"g{i}", b"x" * 100)
        assert behind.get("k") == b"old"  # (caught up: "cold" still named by its op's lsn)
        ahead.snapshot()  # (the op log below the first snapshot goes, that op with it)
        assert behind._state.values["cold"].value is None
        assert behind.modify("cold", lambda v: v + b"!") == b"c" * 200 + b"!"  # type: ignore[operator]
        behind.set("k", b"new")
        for handle in (behind, ahead):
            assert handle.get("cold") == b"c" * 200 + b"!" and handle.get("k") == b"new"
            assert handle.get("g59") == b"x" * 100
    finally:
        behind.close()
        ahead.close()
    with kv.open(path) as fresh:
        assert fresh.get("cold") == b"c" * 200 + b"!" and fresh.get("k") == b"new"
        assert len(fresh) == 122


def test_a_cold_value_read_inside_a_decision_after_a_compaction_keeps_the_decisions_ops(
    tmp_path: Path,
) -> None:
    """A decision that made an op (the EXPIRE of a key past its TTL), then reads a value on disk
    only whose op another handle's snapshots compacted away: the value comes from the newest
    snapshot, and the op made before stays made. (The read used to reload the handle's state
    from the snapshot and the op log, which do not hold the decision's ops not yet written: the
    EXPIRE was dropped from the state, and the next op applied at an lsn it did not have.)"""
    path = str(tmp_path / "shared")
    now = [1_000 * 10**9]
    behind = kv.open(path, memory_max=0, segment_size_max=4096, clock=lambda: now[0])
    ahead = kv.open(path, segment_size_max=4096, clock=lambda: now[0])
    try:
        behind.set("cold", b"c" * 200)
        behind.set("brief", b"b", ttl=1.0)
        behind.set("moved", b"m" * 300)
        behind.rename("moved", "there")  # (a renamed cold value: found under its new name)
        for i in range(60):
            ahead.set(f"f{i}", b"x" * 100)
        ahead.snapshot()
        for i in range(60):
            ahead.set(f"g{i}", b"x" * 100)
        assert behind.get("f0") == b"x" * 100  # (caught up: "cold" still named by its op's lsn)
        ahead.snapshot()  # (the op log below the first snapshot goes, the ops of "cold" with it)
        assert behind._state.values["cold"].value is None
        now[0] += 2 * 10**9  # "brief" is past its TTL: the next decision expires it first
        assert behind.modify("cold", lambda v: v + b"!") == b"c" * 200 + b"!"  # type: ignore[operator]
        assert behind.get("there") == b"m" * 300  # (repointed too: no second reload)
        behind.set("k", b"new")
        for handle in (behind, ahead):
            assert handle.get("cold") == b"c" * 200 + b"!" and handle.get("k") == b"new"
            assert "brief" not in handle and handle.get("there") == b"m" * 300
        assert behind.snapshot() is not None  # (the state reads back whole: every value found)
    finally:
        behind.close()
        ahead.close()
    with kv.open(path) as fresh:
        assert fresh.get("cold") == b"c" * 200 + b"!" and fresh.get("k") == b"new"
        assert "brief" not in fresh and fresh.get("there") == b"m" * 300
        assert len(fresh) == 123


def _left_behind(path: str, values: dict[str, bytes]) -> tuple[kv.Store, kv.Store]:
    """Two handles of one store: ``behind`` (a memory bound of 0: every value on disk only)
    sets ``values``, named by their ops' lsns, which ``ahead``'s two snapshots compact away."""
    behind = kv.open(path, memory_max=0, segment_size_max=4096)
    ahead = kv.open(path, segment_size_max=4096)
    for key, value in values.items():
        behind.set(key, value)
    for turn in range(2):
        for i in range(60):
            ahead.set(f"f{turn}.{i}", b"x" * 100)
        assert len(behind) == len(values) + 60 * (turn + 1)  # (caught up: its reader past its ops)
        ahead.snapshot()  # (the second compacts away the op log below the first)
    assert all(behind._state.values[key].value is None for key in values)
    return behind, ahead


def test_a_snapshot_by_a_handle_left_behind_by_compaction_holds_its_values_on_disk(tmp_path: Path) -> None:
    """A handle whose values are on disk only (a memory bound of 0), named by ops another
    handle's snapshots compacted away, writes a snapshot: it holds every value, read from where
    they are now. (Its snapshot read them at the ops' lsns and failed with a PositionError.)"""
    path = str(tmp_path / "shared")
    behind, ahead = _left_behind(path, {f"cold{i}": bytes([65 + i]) * 300 for i in range(5)})
    try:
        lsn = behind.snapshot()
        assert lsn is not None and os.path.exists(os.path.join(path, f"snapshot.{lsn:016x}"))
    finally:
        behind.close()
        ahead.close()
    with kv.open(path) as fresh:
        assert [fresh.get(f"cold{i}") for i in range(5)] == [bytes([65 + i]) * 300 for i in range(5)]
        assert len(fresh) == 125


def test_set_get_of_a_compacted_cold_value_in_a_round_answers_the_old_value(tmp_path: Path) -> None:
    """A commit round's plain SET, then ``SET cold new GET`` of a value on disk only whose op
    was compacted away: the new SET replaces the key's entry first, then the old entry's bytes
    are read. The old entry is found where it is now (the newest snapshot), though no longer in
    the state. (Found by review: relocation repointed the state's entries only, and the read
    failed after 4 tries.) Then a RENAME of it in a decision, and a read of the new name in the
    same decision: relocation replays the RENAME."""
    from logspool.kv import _ops as kv_ops
    from logspool.server._resp_kv import RedisKV

    path = str(tmp_path / "shared")
    behind, ahead = _left_behind(path, {"cold": b"c" * 200})
    try:
        r = RedisKV(behind)
        with r.decide() as d:
            d.write_many([d.plain_set_op("k", kv_ops.BYTES, b"v", None)])  # (the round's plain SET)
            done, old = r.set(d, "cold", b"new")  # type: ignore[misc]
            assert done and old is not None and d.value(old) == b"c" * 200
        assert behind.get("cold") == b"new" and ahead.get("cold") == b"new"
    finally:
        behind.close()
        ahead.close()
    behind, ahead = _left_behind(str(tmp_path / "renamed"), {"cold": b"c" * 200})
    try:

        def fn(value: object) -> bytes:
            behind.rename("cold", "there")  # (part of modify's decision)
            return behind.modify("there", lambda old: old + b"!")[-2:]  # type: ignore[operator,index,no-any-return]

        assert behind.modify("a", fn) == b"c!"
        assert behind.get("there") == b"c" * 200 + b"!" and "cold" not in behind
        assert behind.snapshot() is not None
    finally:
        behind.close()
        ahead.close()
    with kv.open(path) as fresh:
        assert fresh.get("cold") == b"new" and fresh.get("k") == b"v"
    with kv.open(tmp_path / "renamed") as fresh:
        assert fresh.get("there") == b"c" * 200 + b"!" and "cold" not in fresh


def test_a_value_made_in_a_decision_and_out_of_memory_at_once_reads_back_in_it(tmp_path: Path) -> None:
    """A memory bound of 0: a value set inside a decision leaves memory at once, before its op
    is written (at the decision's end). A read of it later in the decision comes from the
    decision's own unwritten op. (Found by review: it was looked for in the op log, at an lsn
    not written yet, and failed.)"""
    path = str(tmp_path / "s")
    with kv.open(path, memory_max=0) as s:
        s.set("a", b"start")

        def fn(value: object) -> bytes:
            s.set("big", b"z" * 200)  # (part of modify's decision: applied, not written, evicted)
            assert s._state.values["big"].value is None
            return s.modify("big", lambda old: old + b"!")[:4]  # type: ignore[operator,index,no-any-return]

        assert s.modify("a", fn) == b"zzzz"
        assert s.get("big") == b"z" * 200 + b"!"
    with kv.open(path) as fresh:
        assert fresh.get("big") == b"z" * 200 + b"!" and fresh.get("a") == b"zzzz"


def test_a_read_inside_a_decision_after_its_first_op_keeps_the_ops(tmp_path: Path) -> None:
    """``modify``'s function makes an op (a nested ``set``: part of the decision), then reads
    through the public API: the read sees the op, and the decision writes both. (Found by
    review: the read's catch-up took the decision's unwritten op for a failed write's and
    loaded the state anew, dropping it; the decision's write then failed.)"""
    path = str(tmp_path / "s")
    with kv.open(path) as s:
        s.set("a", b"1")

        def fn(value: object) -> bytes:
            s.set("b", b"2")
            assert s.get("b") == b"2" and len(s) == 2
            return b"x"

        assert s.modify("a", fn) == b"x"
    with kv.open(path) as fresh:
        assert fresh.get("a") == b"x" and fresh.get("b") == b"2"


@pytest.mark.parametrize("change", ["retyped", "deleted", "memory-only"])
def test_a_read_behind_another_processs_newest_snapshot_is_made_again(tmp_path: Path, change: str) -> None:
    """A page of values on disk only is being read (the state caught up once, at its start)
    when another handle compacts their ops away, changes one of them (a value of another type,
    a delete, a memory-only value) and snapshots past this handle's state: the read of that
    value stops (``_Behind``) with the handle's state untouched, the others, unchanged, are
    read where the newer state holds them, and the public read made again from the state
    caught up gives the changed key as it is now. (Found by review: the bytes of the new
    value were decoded with the old entry's type and size, a wrong value returned silently; a
    memory-only one failed an assertion; a deleted one failed the page.)"""
    path = str(tmp_path / "shared")
    behind, ahead = _left_behind(path, {f"d{i}": bytes([97 + i]) * 200 for i in range(5)})
    try:
        if change == "retyped":
            ahead.set("d4", 123456789)
        elif change == "deleted":
            ahead.delete("d4")
        else:
            ahead.set("z", b"1")
        ahead.snapshot()  # (past this handle's state)
        if change == "memory-only":
            ahead.set("d4", b"v" * 200, persist=False)
        with behind._mutex:  # (as a page read holds it: the state caught up at its start)
            state = behind._state
            entries = [state.values[f"d{i}"] for i in range(5)]
            assert all(e.value is None for e in entries)
            with pytest.raises(_Behind):
                behind._bytes(entries[4])
            assert behind._state is state and len(state.values) == 125
            assert [e.value for e in entries] == [None] * 5
            # (the values unchanged since are found where the newer state holds them)
            assert [behind._bytes(e) for e in entries[:4]] == [bytes([97 + i]) * 200 for i in range(4)]
        now = {"retyped": 123456789, "deleted": None, "memory-only": None}[change]
        assert behind.get("d4") == now and behind.get("d0") == b"a" * 200
        page = behind.range(start="d", end="e")
        assert [(v.key, v.value) for v in page.items] == [
            (f"d{i}", bytes([97 + i]) * 200) for i in range(4)
        ] + ([("d4", now)] if now is not None else [])
    finally:
        behind.close()
        ahead.close()


def test_a_value_renamed_then_replaced_in_one_decision_reads_its_old_bytes(tmp_path: Path) -> None:
    """One decision: RENAME of a value on disk only whose op was compacted away, then ``SET new
    value GET`` of the new name: the old value is the renamed entry, whose key and version are
    the state's only between the two ops. It is found there, in the replay. (Found by review:
    it was looked for before and after the replay only: a false CorruptionError.)"""
    from logspool.server._resp_kv import RedisKV

    path = str(tmp_path / "shared")
    behind, ahead = _left_behind(path, {"cold": b"c" * 200})
    try:
        r = RedisKV(behind)
        with r.decide() as d:
            behind.rename("cold", "k")  # (part of the round's decision)
            done, old = r.set(d, "k", b"new")  # type: ignore[misc]
            assert done and old is not None and d.value(old) == b"c" * 200
        assert behind.get("k") == b"new" and ahead.get("k") == b"new" and "cold" not in ahead
    finally:
        behind.close()
        ahead.close()


def test_a_snapshot_inside_a_decision_is_refused(tmp_path: Path) -> None:
    """``snapshot()`` called inside a decision of the same store (``modify``'s function, after
    an op made in it) is refused with a RuntimeError: the state holds the decision's ops, not
    written yet, and a snapshot of it would hold ops the op log does not (and compact past its
    end). The decision goes on and writes its ops. (Found by review: the snapshot was written,
    and a crash before the decision's write left a snapshot that later opens trusted.)"""
    path = str(tmp_path / "s")
    with kv.open(path) as s:
        s.set("a", b"1")
        refused = []

        def fn(value: object) -> bytes:
            s.set("b", b"2")
            with pytest.raises(RuntimeError, match="inside a decision"):
                s.snapshot()
            refused.append(True)
            return b"x"

        assert s.modify("a", fn) == b"x" and refused == [True]
        assert s.snapshot() == 3  # (after the decision: lsns 0..2 written)
    assert not [
        n
        for n in os.listdir(path)
        if n.startswith("snapshot.") and n != "snapshot.lock" and n != "snapshot.0000000000000003"
    ]
    with kv.open(path) as fresh:
        assert fresh.get("a") == b"x" and fresh.get("b") == b"2"


# --- a daemon's rounds of plain SETs written without a decision (``RedisKV.alone``) ---------------
def _round_alone(s: kv.Store, pairs: list[tuple[str, bytes]], owner: str | None = None) -> bool:
    from logspool.server._resp_kv import RedisKV

    with RedisKV(s).alone() as a:
        made = [a.plain_set_op(key, ops.BYTES, value, owner) for key, value in pairs]
        assert all(op is not None for op in made)
        return a.write_many(made)  # type: ignore[arg-type]


def _round_decided(s: kv.Store, pairs: list[tuple[str, bytes]], owner: str | None = None) -> None:
    from logspool.server._resp_kv import RedisKV

    with RedisKV(s).decide(owner) as d:
        d.write_many([d.plain_set_op(key, ops.BYTES, value, owner) for key, value in pairs])  # type: ignore[misc]


def _ops_of(path: str) -> list[bytes]:
    import logspool

    with logspool.open(os.path.join(path, "ops"), readonly=True) as log:
        return [rec.payload for rec in log.read()]


def test_a_round_alone_writes_and_applies_what_its_decision_would(tmp_path: Path) -> None:
    """The same rounds of plain SETs (new keys, overwrites, integers, a key locked by the
    round's owner), written alone in one store and by decisions in another, on the same clock:
    the op logs hold the same ops, byte for byte, and the states are the same, before a reopen
    and after it."""
    from logspool.server._resp_kv import from_bytes

    clock = Clock()
    alone = kv.open(tmp_path / "alone", single_writer=True, clock=clock)
    decided = kv.open(tmp_path / "decided", single_writer=True, clock=clock)
    try:
        for s in (alone, decided):
            s.lock("mine", "me", 60)
        rounds = [
            [(f"k{i % 7}", b"value %d" % i * (i % 3 + 1)), (f"n{i}", from_bytes(b"%d" % (i * 1000))[1])]
            for i in range(40)
        ]
        for i, pairs in enumerate(rounds):
            if i % 9 == 8:
                pairs = [*pairs, ("mine", b"the owner's %d" % i)]
            assert _round_alone(alone, pairs, owner="me")
            _round_decided(decided, pairs, owner="me")
            clock.advance(0.001)
        assert _ops_of(alone.path) == _ops_of(decided.path)

        def state(s: kv.Store, *, times: bool = False) -> list[tuple[object, ...]]:
            """Each entry's fields; with ``times``, also the records' timestamps an op was applied
            with (the two stores' records are stamped by the wall clock, each its own)."""
            st = s._state
            st.check()
            rows = [
                (k, e.vtype, s._bytes(e), e.ts, e.version, e.expire_ns, e.where)
                + ((e.created_ns, e.modified_ns) if times else ())
                for k, e in st.values.items()
            ]
            return [(st.next_lsn, st.last_ns if times else 0), *sorted(rows)]

        assert state(alone) == state(decided)
        expected = state(alone, times=True)
    finally:
        alone.close()
        decided.close()
    with kv.open(tmp_path / "alone") as fresh:  # (every field as the ops' records give it)
        assert state(fresh, times=True) == expected


def test_a_round_alone_writes_nothing_where_the_store_needs_a_decision(tmp_path: Path) -> None:
    """``write_many`` says False, nothing written, nothing applied: on a store other processes
    may write (no ``single_writer``), with a value expired (its EXPIRE op is a decision's), and
    when the records would rotate the op log's segment. The decision then writes the round, and
    the next round is written alone again."""
    clock = Clock()
    shared = kv.open(tmp_path / "shared", clock=clock)
    try:
        assert not _round_alone(shared, [("a", b"1")])
        assert shared._state.next_lsn == 0 and "a" not in shared
    finally:
        shared.close()
    with kv.open(tmp_path / "own", single_writer=True, clock=clock, segment_size_max=4096) as s:
        s.set("t", b"x", ttl=1)
        clock.advance(2)
        lsn = s._state.next_lsn
        assert not _round_alone(s, [("a", b"1")])
        assert s._state.next_lsn == lsn and "a" not in s
        _round_decided(s, [("a", b"1")])  # (writes the EXPIRE op, then the SET)
        assert s._state.next_lsn == lsn + 2 and s.get("a") == b"1" and "t" not in s
        assert _round_alone(s, [("a", b"2")])
        segments = len(os.listdir(os.path.join(s.path, "ops")))
        refused = 0
        for i in range(60):  # (4 KiB segments: 300-byte rounds fill one every dozen)
            pairs = [(f"r{i}", b"v" * 300)]
            if not _round_alone(s, pairs):
                refused += 1
                lsn = s._state.next_lsn
                assert f"r{i}" not in s
                _round_decided(s, pairs)  # (rotates the segment)
                assert s._state.next_lsn == lsn + 1
        assert refused >= 3 and len(os.listdir(os.path.join(s.path, "ops"))) > segments
        expected = {f"r{i}": b"v" * 300 for i in range(60)}
        assert {k: s.get(k) for k in expected} == expected
    with kv.open(tmp_path / "own", clock=clock) as fresh:
        assert {k: fresh.get(k) for k in expected} == expected and fresh.get("a") == b"2"


def test_a_failed_write_alone_changes_nothing_and_the_next_one_writes(tmp_path: Path) -> None:
    """An I/O error on the round's write (through the ``_fs`` seam): an AppendError, the state
    and the op log as before (the ops are applied only once written); the next round, the disk
    well again, is written alone, and a reopen finds it and not the failed one."""
    fs = FaultFS(str(tmp_path))
    with kv.open(tmp_path / "kv", single_writer=True, fs=fs) as s:
        assert _round_alone(s, [("a", b"1"), ("b", b"1")])
        fs.fault = Fault(fs.count + 1, errno.EIO, sticky=True, ops=("write", "pwrite"))
        with pytest.raises(AppendError):
            _round_alone(s, [("a", b"2"), ("c", b"2")])
        assert s.get("a") == b"1" and "c" not in s and s._state.next_lsn == 2
        fs.fault = None
        assert _round_alone(s, [("b", b"3")])
        assert (s.get("a"), s.get("b"), s.get("c")) == (b"1", b"3", None)
    with kv.open(tmp_path / "kv") as fresh:
        assert (fresh.get("a"), fresh.get("b"), fresh.get("c")) == (b"1", b"3", None)
        assert fresh._state.next_lsn == 3


def test_a_round_alone_refuses_a_full_segment_before_writing(tmp_path: Path) -> None:
    """A round whose records would not fit in the op log's active segment is refused with the
    segment as it was (nothing written into it, no rotation); the decision rotates."""
    with kv.open(tmp_path / "kv", single_writer=True, segment_size_max=4096) as s:
        i = 0
        while _round_alone(s, [(f"k{i}", b"v" * 300)]):  # bounded: 4 KiB fill in a dozen
            i += 1
            assert i < 20
        ops_dir = os.path.join(s.path, "ops")
        before = {n: os.path.getsize(os.path.join(ops_dir, n)) for n in os.listdir(ops_dir)}
        lsn = s._state.next_lsn
        assert s._log.next_lsn == lsn and f"k{i}" not in s
        assert {n: os.path.getsize(os.path.join(ops_dir, n)) for n in os.listdir(ops_dir)} == before
        _round_decided(s, [(f"k{i}", b"v" * 300)])
        assert len(os.listdir(ops_dir)) > len(before) and s.get(f"k{i}") == b"v" * 300
        # The new segment has room: the round after it is written alone once the store's reader
        # is past the decision's records (a decision that rotated leaves them for it to read:
        # the first round refuses, its decision catches the reader up).
        if not _round_alone(s, [("next", b"x")]):
            _round_decided(s, [("next", b"x")])
        assert _round_alone(s, [("then", b"y")]) and (s.get("next"), s.get("then")) == (b"x", b"y")


def test_a_round_alone_refuses_while_the_op_log_needs_a_recovery(tmp_path: Path) -> None:
    """A rotation whose new segment could not be created (EIO through the ``_fs`` seam) leaves
    the op log to be recovered by its next write: a round alone refuses, even with the state
    rebuilt (a read), and the decision that follows recovers the log and writes; the rounds
    after it are written alone again, and a reopen finds them all."""
    import logspool

    fs = FaultFS(str(tmp_path))
    with kv.open(tmp_path / "kv", single_writer=True, fs=fs, segment_size_max=4096) as s:
        i = 0
        while _round_alone(s, [(f"k{i}", b"v" * 300)]):
            i += 1
            assert i < 20
        fs.fault = Fault(fs.count + 1, errno.EIO, sticky=True, ops=("open_create",))
        with pytest.raises(AppendError):
            _round_decided(s, [(f"k{i}", b"v" * 300)])  # (the seal written, the next segment not)
        fs.fault = None
        assert s.get("k0") == b"v" * 300 and f"k{i}" not in s  # (the state rebuilt from the log)
        assert s._log._active.needs_recovery
        lsn = s._state.next_lsn
        assert not _round_alone(s, [("after", b"x")])
        assert s._state.next_lsn == lsn and "after" not in s
        _round_decided(s, [("after", b"x")])
        assert not s._log._active.needs_recovery
        if not _round_alone(s, [("again", b"y")]):  # (as after any rotation: see above)
            _round_decided(s, [("again", b"y")])
        assert _round_alone(s, [("more", b"z")])
    with kv.open(tmp_path / "kv") as fresh:
        assert (fresh.get("after"), fresh.get("again"), fresh.get("k0")) == (b"x", b"y", b"v" * 300)
    report = logspool.verify(tmp_path / "kv" / "ops")
    assert report.ok, report


def test_rounds_alone_snapshot_the_store_as_decisions_do(tmp_path: Path) -> None:
    """A store written by rounds alone only is snapshotted when its op log grows past the
    snapshot's threshold (the round's end checks, as a decision's does), and compacted: its
    op log does not grow without bound."""
    with kv.open(tmp_path / "kv", single_writer=True, snapshot_ops_min=50) as s:
        for i in range(400):
            assert _round_alone(s, [(f"k{i % 20}", b"%d" % i * 20)])  # (every one: no decision)
        snapshots = [n for n in os.listdir(s.path) if n.startswith("snapshot.") and n[9:].isalnum()]
        assert snapshots and s._snapshot_lsn >= 300
    with kv.open(tmp_path / "kv") as fresh:
        assert [fresh.get(f"k{i}") for i in range(20)] == [b"%d" % (380 + i) * 20 for i in range(20)]
