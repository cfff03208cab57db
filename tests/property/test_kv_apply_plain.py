"""``State.apply_plain`` (the daemon's rounds of plain SETs: an overwrite takes the key's entry in
place) leaves the state exactly as ``apply`` does, for any sequence of ops (SETs kept and
memory-only, with and without expiry, over keys set, deleted and renamed before), with and
without a memory bound: every entry field for field, the sorted keys, the tombstones, the
expiry heap, the bytes held and the order values leave memory in. And an entry read before a
write keeps what it held only with ``apply``: the reason the rest of the store uses it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from logspool.kv import _ops as ops
from logspool.kv._state import Entry, State

_KEYS = st.sampled_from(["a", "b", "c", "d", "e"])
_TIME = st.integers(min_value=0, max_value=2**40)

_set = st.builds(
    ops.Set,
    key=_KEYS,
    vtype=st.sampled_from(sorted(ops.TYPES)),
    value=st.binary(max_size=48),
    ts=_TIME,
    expire_ns=st.sampled_from([0, 0, 10**12, 10**15]),
    touch_ns=st.sampled_from([0, 0, 10**9]),
    volatile=st.sampled_from([False, False, False, True]),
)
_other = st.one_of(
    st.builds(ops.Delete, key=_KEYS, ts=_TIME),
    st.builds(ops.Expire, key=_KEYS),
    st.builds(ops.Rename, key=_KEYS, new=_KEYS, ts=_TIME),
    st.builds(ops.Update, key=_KEYS, vtype=st.just(ops.BYTES), value=st.binary(max_size=48), ts=_TIME),
)
_op = st.one_of(_set, _set, _set, _other)


def _snapshot(state: State) -> object:
    entries = {
        key: tuple((name, getattr(entry, name)) for name in Entry.__slots__)
        for key, entry in state.values.items()
    }
    return (
        entries,
        list(state.order),
        dict(state.tombstones),
        sorted(state._expiring),
        state.hot_bytes,
        list(state._lru),
        state.next_lsn,
        state.last_ns,
    )


@settings(max_examples=300, deadline=None)
@given(
    st.lists(_op, max_size=40),
    st.sampled_from([None, 64, 200]),
    st.lists(st.integers(min_value=0, max_value=2**20), min_size=40, max_size=40),
)
def test_apply_plain_leaves_the_state_apply_leaves(
    history: list[ops.Op], memory_max: int | None, gaps: list[int]
) -> None:
    generic, plain = State(memory_max), State(memory_max)
    timestamp = 1
    for op, gap in zip(history, gaps, strict=False):
        timestamp += gap
        if isinstance(op, ops.Rename) and (op.key == op.new or op.key not in generic.values):
            continue  # (a rename's writer checks both: never of a missing key, never to itself)
        lsn = generic.next_lsn
        generic.apply(lsn, timestamp, op)
        plain.apply_plain(lsn, timestamp, op)
        assert _snapshot(plain) == _snapshot(generic), (lsn, op)


def test_an_entry_read_before_a_set_keeps_its_value_only_under_apply() -> None:
    first = ops.Set("k", ops.BYTES, b"old", 1, 0, 0, False)
    second = ops.Set("k", ops.BYTES, b"new", 2, 0, 0, False)
    for name, kept in (("apply", True), ("apply_plain", False)):
        state = State()
        state.apply(0, 1, first)
        held = state.values["k"]
        getattr(state, name)(1, 2, second)
        assert state.values["k"].value == b"new"
        assert (held.value == b"old") is kept, name
