"""The key-value store applies an op it writes as it is, without decoding it back from its own
bytes, only when the op is "exact" (``Store._exact``: a SET of a kept value, every field of its
own type): for every such op, the bytes decode to the same op, field for field and type for
type, and applying either gives the same entry. Ops that are not exact (a memory-only SET, whose
bytes carry no value; a field of another type) are decoded back as before."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from logspool import kv
from logspool.kv import _ops as ops
from logspool.kv._state import Entry, State

_exact = kv.Store._exact
_INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)

_kept = st.builds(
    ops.Set,
    key=st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=40),
    vtype=st.sampled_from(sorted(ops.TYPES)),
    value=st.binary(max_size=64),
    ts=_INT64,
    expire_ns=_INT64,
    touch_ns=_INT64,
    volatile=st.just(False),
)
# One field of another kind, or none: a memory-only value, a value that is not bytes, a time
# that is a bool, a flag that is an int.
_ODD = {
    "volatile": st.just(True),
    "value": st.binary(max_size=8).map(bytearray),
    "ts": st.booleans(),
    "expire_ns": st.booleans(),
    "touch_ns": st.booleans(),
    "volatile0": st.just(0),
}


@st.composite
def sets(draw: st.DrawFn) -> ops.Set:
    op = draw(_kept)
    odd = draw(st.sampled_from([None, *_ODD]))
    if odd is None:
        return op
    return op._replace(**{odd.removesuffix("0"): draw(_ODD[odd])})


def _fields(entry: Entry) -> list[tuple[str, object, type]]:
    return [(name, getattr(entry, name), type(getattr(entry, name))) for name in Entry.__slots__]


@settings(max_examples=400, deadline=None)
@given(sets(), st.integers(min_value=0, max_value=2**40), st.integers(min_value=0, max_value=2**62))
def test_an_exact_op_is_what_its_bytes_decode_to(op: ops.Set, lsn: int, timestamp: int) -> None:
    decoded = ops.decode(ops.encode(op), "test")
    if not _exact(None, op):  # type: ignore[arg-type]
        return
    assert decoded == op
    assert [type(x) for x in decoded] == [type(x) for x in op]
    as_is, read_back = State(), State()
    as_is.next_lsn = read_back.next_lsn = lsn
    as_is.apply(lsn, timestamp, op)
    read_back.apply(lsn, timestamp, decoded)
    assert _fields(as_is.values[op.key]) == _fields(read_back.values[op.key])


def test_what_is_exact_and_what_is_not() -> None:
    kept = ops.Set("k", ops.BYTES, b"v", 5, 0, 0, False)
    assert _exact(None, kept)  # type: ignore[arg-type]
    for other in (
        kept._replace(volatile=True),  # a memory-only value: its bytes carry none
        kept._replace(value=bytearray(b"v")),
        kept._replace(ts=True),
        kept._replace(volatile=0),
        kept._replace(vtype=200),
        ops.Update("k", ops.BYTES, b"v", 5),
        ops.Delete("k", 5),
    ):
        assert not _exact(None, other), other  # type: ignore[arg-type]
