"""The state of a stream's consumer groups, as the fold of its op log builds it: the ops (JSON
objects, one a record), the fold step, the snapshot, the names and the bounds. Where the state
lives, how it is made durable and how it stays beside the log's durable subscribers is
``_resp_groups.py``'s.

**Ops.** Each record of ``DATA/groups/NAME/ops/`` is a UTF-8 JSON object with ``op`` (one of
``OPS``), ``g`` (the group) and the keys ``OPS`` lists. Times are ms since the epoch, chosen by
the decision that wrote the op (so the fold is deterministic); ids are ``[ms, lsn]``; consumer
names are text with ``surrogateescape`` (any bytes). An op that names a group that does not
exist changes nothing. **Snapshot**: one JSON object, ``format`` 1, ``next_lsn`` (the first op
it does not hold) and ``groups``: name -> ``created``, ``next``, ``last``, ``consumers`` ([name,
seen ms, active ms]) and ``pel`` ([lsn, ms, the consumer's index in ``consumers``, delivered
ms, count], by lsn).

Not thread-safe by itself: used under the store's mutex (``_fold.FoldedStore``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sortedcontainers import SortedList

from .. import limits
from .._subscribers import check_name, is_transient
from ._resp_kv import RedisError

# Bounds, so that a stream's groups fit in memory (a PEL entry takes ~200 bytes) and in one
# snapshot (checked below).
GROUPS_MAX = 100  # consumer groups of one stream
CONSUMERS_MAX = 1_000  # consumers of one group
PENDING_MAX = 100_000  # entries in one group's PEL
PENDING_STREAM_MAX = 1_000_000  # entries in the PELs of all the groups of one stream
CONSUMER_NAME_SIZE_MAX = 256  # bytes
STORES_OPEN_MAX = 1024  # group stores (one per stream with groups) open at once
SNAPSHOT_OPS_MIN = 10_000  # ops folded before a snapshot compacts the op log
SNAPSHOT_SIZE_MAX = 1 << 30  # bytes of one snapshot
MS_MAX = (1 << 63) // 1_000_000  # a record's timestamp is u64 ns: ids' ms stay below this

Id = tuple[int, int]  # (ms, lsn): a stream id
Op = dict[str, Any]

# Each op's keys (besides "op"), checked when an op is read back (JSON types: lists for ids).
OPS: dict[str, tuple[str, ...]] = {
    "create": ("g", "next", "last", "at"),  # a group at a position
    "destroy": ("g",),
    "setid": ("g", "next", "last"),  # a new position; the PEL stays
    "consumer": ("g", "c", "at"),  # a consumer with nothing pending
    "delconsumer": ("g", "c"),  # a consumer and its pending entries
    "deliver": ("g", "c", "at", "ids", "next", "last", "noack"),  # read with '>': ids [ms, lsn]
    "redeliver": ("g", "c", "at", "lsns"),  # read again from the consumer's own history
    "ack": ("g", "lsns"),
    # items [lsn, ms, delivered ms, count] owned by c from now on; drop: lsns gone from the log;
    # last/next: the group's new position (XCLAIM LASTID), or null
    "claim": ("g", "c", "at", "items", "drop", "last", "next"),
}


# The largest snapshot the bounds allow: a consumer's name as JSON (each byte that is not UTF-8
# is a 6-character escape) with its two times; a PEL entry as five integers of at most 20 digits;
# a group's name (1 KiB, escaped) and position.
_CONSUMER_JSON_MAX = 6 * CONSUMER_NAME_SIZE_MAX + 2 * 21 + 8
_GROUP_JSON_MAX = 6 * limits.SUBSCRIBER_NAME_SIZE_MAX + 200
assert (
    GROUPS_MAX * (_GROUP_JSON_MAX + CONSUMERS_MAX * _CONSUMER_JSON_MAX) + PENDING_STREAM_MAX * 5 * 21
    < SNAPSHOT_SIZE_MAX
), "a stream's groups at their bounds would not fit in one snapshot"
assert PENDING_MAX <= PENDING_STREAM_MAX


class NoGroupError(RedisError):
    """The stream has no group of that name (Redis's ``-NOGROUP``)."""


def group_name(raw: bytes) -> str:
    """A group name, or a Redis error saying what a valid one is."""
    try:
        name = check_name(raw.decode("utf-8"))
        if is_transient(name):
            raise ValueError("transient")
    except (UnicodeDecodeError, ValueError):
        raise RedisError(
            "ERR logspool consumer group names are durable subscriber names: UTF-8, 1 to "
            f"{limits.SUBSCRIBER_NAME_SIZE_MAX} bytes, not starting with '~'"
        ) from None
    return name


def consumer_name(raw: bytes) -> str:
    if len(raw) > CONSUMER_NAME_SIZE_MAX:
        raise RedisError(f"ERR logspool consumer names are at most {CONSUMER_NAME_SIZE_MAX} bytes")
    return raw.decode("utf-8", "surrogateescape")


def consumer_bytes(name: str) -> bytes:
    return name.encode("utf-8", "surrogateescape")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# --- the state ------------------------------------------------------------------------------------
@dataclass(slots=True)
class Pending:
    ms: int  # the entry's id is (ms, its lsn)
    consumer: str
    delivered_ms: int
    count: int


@dataclass(slots=True)
class Consumer:
    seen_ms: int  # its last command (in memory; on disk, its last op)
    active_ms: int  # its last delivery or claim; -1: none
    pending: int = 0


@dataclass(slots=True)
class Group:
    created_ms: int
    next_lsn: int  # the next lsn '>' delivers
    last: Id  # the last id delivered (or set by CREATE/SETID)
    consumers: dict[str, Consumer]
    pel: dict[int, Pending]  # by lsn
    # The PEL's lsns, ascending. A SortedList: an XACK of the oldest entry of a list kept sorted
    # moved every lsn after it (O(n) an ack: ~0.5 ms an XACK with 1,000,000 pending).
    order: SortedList[int]

    def floor(self) -> int:
        """The lowest lsn the group may still need (its durable subscriber's position)."""
        return min(self.order[0], self.next_lsn) if self.order else self.next_lsn

    def consumer(self, name: str, at: int) -> Consumer:
        found = self.consumers.get(name)
        if found is None:
            found = self.consumers[name] = Consumer(at, -1)
        found.seen_ms = max(found.seen_ms, at)
        return found

    def put(self, lsn: int, entry: Pending) -> None:
        self.drop(lsn)
        self.pel[lsn] = entry
        self.order.add(lsn)
        self.consumer(entry.consumer, entry.delivered_ms).pending += 1

    def drop(self, lsn: int) -> bool:
        entry = self.pel.pop(lsn, None)
        if entry is None:
            return False
        self.order.remove(lsn)
        owner = self.consumers.get(entry.consumer)
        if owner is not None:
            owner.pending -= 1
        return True

    def ids_from(self, start: Id) -> int:
        """The index in ``order`` of the first pending entry whose id is >= ``start`` (ids grow
        with lsns: an entry's id is its record's time in ms, never decreasing along a log, and
        its lsn)."""
        pel, order = self.pel, self.order
        low, high = 0, len(order)
        while low < high:  # bounded: log2 of the PEL's size
            middle = (low + high) // 2
            lsn = order[middle]
            if (pel[lsn].ms, lsn) < start:
                low = middle + 1
            else:
                high = middle
        return low

    def pending_id(self, eid: Id) -> Pending | None:
        entry = self.pel.get(eid[1])
        return entry if entry is not None and entry.ms == eid[0] else None


class GroupState:
    """The groups of one stream, folded from the op log (see ``OPS``)."""

    def __init__(self) -> None:
        self.next_lsn = 0
        self.groups: dict[str, Group] = {}

    def apply(self, lsn: int, timestamp_ns: int, op: Op) -> None:
        self.next_lsn = lsn + 1
        kind, name = op["op"], op["g"]
        if kind == "create":
            if name not in self.groups:
                self.groups[name] = Group(op["at"], op["next"], tuple(op["last"]), {}, {}, SortedList())
            return
        if kind == "destroy":
            self.groups.pop(name, None)
            return
        g = self.groups.get(name)
        if g is None:
            return  # (an op of a group destroyed since: never written, but harmless)
        if kind == "setid":
            g.next_lsn, g.last = op["next"], tuple(op["last"])
        elif kind == "consumer":
            g.consumer(op["c"], op["at"])
        elif kind == "delconsumer":
            for lsn_ in [lsn_ for lsn_ in g.order if g.pel[lsn_].consumer == op["c"]]:
                g.drop(lsn_)
            g.consumers.pop(op["c"], None)
        elif kind == "deliver":
            at, consumer = op["at"], op["c"]
            g.consumer(consumer, at).active_ms = at
            if not op["noack"]:
                for ms, lsn_ in op["ids"]:
                    g.put(lsn_, Pending(ms, consumer, at, 1))
            g.next_lsn, g.last = op["next"], tuple(op["last"])
        elif kind == "redeliver":
            g.consumer(op["c"], op["at"])
            for lsn_ in op["lsns"]:
                entry = g.pel.get(lsn_)
                if entry is not None:
                    entry.delivered_ms = op["at"]
                    entry.count += 1
        elif kind == "ack":
            for lsn_ in op["lsns"]:
                g.drop(lsn_)
        elif kind == "claim":
            at, consumer = op["at"], op["c"]
            owner = g.consumer(consumer, at)
            for lsn_ in op["drop"]:
                g.drop(lsn_)
            for lsn_, ms, delivered, count in op["items"]:
                g.put(lsn_, Pending(ms, consumer, delivered, count))
            if op["items"]:
                owner.active_ms = at
            if op["last"] is not None:
                g.next_lsn, g.last = op["next"], tuple(op["last"])

    # --- snapshots ----------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        groups = {}
        for name, g in self.groups.items():
            index = {c: i for i, c in enumerate(g.consumers)}  # (a PEL entry names its consumer by index)
            groups[name] = {
                "created": g.created_ms,
                "next": g.next_lsn,
                "last": list(g.last),
                "consumers": [[c, v.seen_ms, v.active_ms] for c, v in g.consumers.items()],
                "pel": [[n, (p := g.pel[n]).ms, index[p.consumer], p.delivered_ms, p.count] for n in g.order],
            }
        return {"format": 1, "next_lsn": self.next_lsn, "groups": groups}

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> GroupState:
        state = cls()
        state.next_lsn = int(body["next_lsn"])
        for name, raw in body["groups"].items():
            g = state.groups[name] = Group(
                raw["created"], raw["next"], tuple(raw["last"]), {}, {}, SortedList()
            )
            names = []
            for c, seen, active in raw["consumers"]:
                g.consumers[c] = Consumer(seen, active)
                names.append(c)
            for lsn, ms, owner, delivered, count in raw["pel"]:
                g.put(lsn, Pending(ms, names[owner], delivered, count))
        return state

    def pending(self) -> int:
        """Entries pending in all the groups of the stream."""
        return sum(len(g.pel) for g in self.groups.values())
