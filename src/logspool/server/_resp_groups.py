"""Consumer groups of logspool streams (Redis's XGROUP, XREADGROUP, XACK, XPENDING, XCLAIM,
XAUTOCLAIM, XINFO): their state, kept durably beside the log, and the reads and changes those
commands make. The state itself (ops, fold, snapshot, bounds) is ``_resp_group_state.py``;
parsing and replies are ``_resp_group_commands.py``; docs/RESP.md ("Consumer groups") is the
user's view.

A little over 600 lines: the group store and the reads and changes of every group command share
one lock order and one rule of durability (the log fsynced before an op that delivers from it, an
op before a checkpoint on it); the state's codec is already apart (``_resp_group_state.py``).

**Where the state lives.** Every group of the stream ``NAME`` is in one folded store,
``DATA/groups/NAME/`` (``logspool._fold``: a ``JOURNAL`` marker of kind ``resp-groups``, the op
log ``ops/``, snapshots): each group's position (the next lsn it delivers, the last id it
delivered), its consumers, and its pending entries list (PEL: each entry delivered and not yet
acknowledged, with its consumer, last delivery time in ms and delivery count). Every change is
one op, a JSON object (``_resp_group_state.py`` specifies them and the snapshot), applied by
the fold in lsn order. With the daemon's
``--durability always`` an op is fsynced before the reply (Redis keeps its PEL in its AOF), so a
restart folds back the same groups, positions and PELs. A consumer's *seen* time (its last
command) changes in memory on every read; after a restart it is the time of its last op.

**The durable subscriber.** A group is also a durable subscriber of the log, under the group's
name (``DATA/logs/NAME/cp.<hash>``, docs/FORMAT.md §6.2), at the group's *floor*: the lowest lsn
it may still need, min(its pending lsns, its next lsn). ``logspool subscribers`` lists it, and a
retention policy ``consumed`` removes only what every group has acknowledged.
Invariant: the checkpoint is never above the floor of the group's durable state. A change that
lowers the floor (XGROUP SETID back, XCLAIM FORCE of an older entry) writes the checkpoint,
fsynced, before its op is written; one that raises it (XACK, NOACK reads) writes it after its op
is durable, fsynced (in both slots) only when it passes the start of a segment: retention removes
whole segments, so a position between two segment starts lets it remove nothing more (a power cut
may bring back the older, lower durable position: retention then keeps more, never less).
XGROUP CREATE writes its op, then the checkpoint; DESTROY removes the checkpoint, then writes its
op; a group found without a checkpoint, or above its floor (a crash between the two, or a native
``rewind_subscriber``), gets its floor written when its store is opened; so does a group left
past its log's end by a power cut without ``always`` (``_realign``: it moves back to the first
record appended after the restart).

**Names.** A group's name is a durable subscriber name (UTF-8, 1 to 1,024 bytes, not starting
with ``~``): it reaches the disk only as the hash in a checkpoint's file name, never as a path. A
consumer name is any bytes up to 256 (held as text with ``surrogateescape``).

Concurrency: the commands run in the server's thread pool. A change is one decision of the fold
(under its mutex and the op log's writer lock); its fsync comes after both are released, so the
changes of many connections share fsyncs (the fold's group commit). Checkpoint writes are made
under the mutex only: a lowering inside its decision, a raise after its op is durable, and only
if no op since lowered the floor (``_raise``), so that a late raise never covers a newer need.
Reads hold the mutex while they look and make every op they may have seen durable before their
reply (``settle``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

from .. import limits
from .._fold import MARKER, FoldedStore
from .._fs import FileSystem
from .._reader import Reader
from .._subscribers import Checkpoints
from ..errors import CorruptionError, FailedError, PositionError, SubscriberNotFoundError
from ..log import Durability, Log
from ..log._directory import list_segments
from ._resp_group_state import (
    CONSUMERS_MAX,
    GROUPS_MAX,
    OPS,
    PENDING_MAX,
    PENDING_STREAM_MAX,
    SNAPSHOT_OPS_MIN,
    SNAPSHOT_SIZE_MAX,
    STORES_OPEN_MAX,
    Group,
    GroupState,
    Id,
    NoGroupError,
    Op,
    now_ms,
)
from ._resp_kv import RedisError
from ._resp_streams import (
    STREAM_REPLY_BYTES_MAX,
    Record,
    lsn_after,
    read_after,
    read_lsns,
    read_lsns_upto,
    reader_at,
)

_logger = logging.getLogger("logspool.server.resp")

GROUPS_DIR = "groups"  # under the data directory: DATA/groups/<stream>/
# Readers kept open for '>' reads, over all the streams of the daemon (each holds a file open:
# per stream, 1,024 streams of 100 groups would hold ~100,000 files, past the fd limit).
READERS_KEPT_MAX = 256
Token = tuple[Group, int, int]  # a decision's group, lowerings counted so far, floor it left


# --- readers kept for '>' reads ---------------------------------------------------------------------
class KeptReaders:
    """Each group's reader where its last '>' read left it (a new reader parses a chunk of the
    segment to find its position: most of a one-entry read's cost), at most ``size_max`` over
    every store that shares this, the least recently used closed first. A reader taken is its
    taker's alone until it is kept again. Any thread."""

    def __init__(self, size_max: int = READERS_KEPT_MAX) -> None:
        self.size_max = size_max
        self._lock = threading.Lock()
        self._kept: OrderedDict[tuple[object, str], Reader] = OrderedDict()

    def __len__(self) -> int:
        return len(self._kept)

    def take(self, owner: object, name: str) -> Reader | None:
        with self._lock:
            return self._kept.pop((owner, name), None)

    def keep(self, owner: object, name: str, reader: Reader) -> None:
        with self._lock:
            old = self._kept.pop((owner, name), None)
            self._kept[(owner, name)] = reader
            gone = [self._kept.popitem(last=False)[1] for _ in range(max(0, len(self._kept) - self.size_max))]
        for other in [old, *gone]:  # (not in use: a reader in use is not kept)
            if other is not None and other is not reader:
                other.close()

    def drop(self, owner: object, name: str | None = None) -> None:
        """Close ``owner``'s reader of group ``name`` (None: all of its readers)."""
        with self._lock:
            keys = [k for k in self._kept if k[0] is owner and (name is None or k[1] == name)]
            gone = [self._kept.pop(k) for k in keys]
        for reader in gone:
            reader.close()


# --- the store ------------------------------------------------------------------------------------
class GroupStore(FoldedStore[GroupState, Op]):
    """The groups of one stream (see the module docstring).

    Durability: every change (create ... autoclaim) returns after its op is fsynced (with
    ``durability="always"``), and after the group's checkpoint is where the module docstring
    says; a read (``settle``) after what it saw is. Concurrency: any thread; every method takes
    the fold's mutex itself, and a caller that reads a ``Group`` holds ``lock`` meanwhile."""

    KIND = "resp-groups"
    WHAT = "consumer group store"
    SNAPSHOT_SIZE_MAX = SNAPSHOT_SIZE_MAX

    def __init__(
        self, path: str, log: Log, durability: Durability, *, fs: FileSystem | None = None,
        readers: KeptReaders | None = None,
    ) -> None:  # fmt: skip
        """Open (or create) the groups of the stream ``log`` at ``path``; ``fs``: the I/O seam
        for the store and the checkpoints (the log has its own), for fault injection;
        ``readers``: where its '>' readers are kept (shared by the daemon's stores)."""
        self._open_store(
            path,
            create=True,
            durability=durability,
            segment_size_max=None,
            snapshot_ops_min=SNAPSHOT_OPS_MIN,
            lock_timeout_s=limits.LOCK_TIMEOUT_S_DEFAULT,
            fs=fs,
            clock=None,
        )
        # Held while a command reads a Group (the fold's mutex: decisions take it too).
        self.lock = self._mutex
        self.log_path = log.path
        self._checkpoints = Checkpoints(log.path, self._fs, log.record_size_max)
        self._cp: dict[str, int] = {}  # each group's checkpoint as last written
        self._cp_durable: dict[str, int] = {}  # each group's checkpoint as last fsynced
        self._lowers: dict[str, int] = {}  # ops that lowered each group's floor (``_lower``)
        self._readers = KeptReaders() if readers is None else readers
        try:
            with self._mutex:
                self._catch_up()
                for name, g in self._state.groups.items():  # repair what a crash left (see above)
                    cp = self._checkpoints.read(name)
                    if cp is None or cp.lsn > g.floor():
                        self._write_checkpoint(name, g, durable=True)
                    else:
                        # (the first write opens the file with an fdatasync: what it holds is durable)
                        self._cp[name] = self._cp_durable[name] = cp.lsn
            self._realign(log)
        except BaseException:
            self.close()
            raise

    def _realign(self, log: Log) -> None:
        """On open: bring back each group that is past its log's history. Without ``durability
        "always"`` a group's op and the records it delivered are fsynced at different times, so
        a power cut can keep the op and lose the records: the log then ends below the group's
        position, and the records appended after the restart take the lost lsns, which '>' would
        never deliver. A group's last id ``(ms, lsn)`` tells: if the log no longer has that
        record (past its end, or another record under that lsn, appended later, so with a later
        time), the group moves back to the first record whose id follows its last id (the first
        one appended after the restart, or the log's end), and its pending entries from there
        on, whose records are gone, are dropped. One op of each kind, fsynced with "always"."""
        for name, g in sorted(self._state.groups.items()):
            if g.next_lsn == 0:
                continue
            expected = lsn_after(log, g.last)
            if g.next_lsn <= expected:
                continue
            gone = list(g.order.irange(minimum=expected))
            before = read_lsns(log, [expected - 1]).get(expected - 1) if expected else None
            last = [before[0] if before is not None else 0, max(expected - 1, 0)]
            _logger.warning(
                "%s: group %r was at lsn %d, past what its log holds after a power cut (the "
                "records from lsn %d on were lost): it delivers from lsn %d again, and %d pending "
                "entries of lost records are dropped", self.path, name, g.next_lsn, expected,
                expected, len(gone),
            )  # fmt: skip
            with self._decide() as w:
                self._lower(name, min(g.order[0], expected) if g.order else expected)
                if gone:
                    w.write({"op": "ack", "g": name, "lsns": gone})
                w.write({"op": "setid", "g": name, "next": expected, "last": last})
                token = self._token(name)
            self._raise(name, token)

    def close(self) -> None:
        with self._mutex:
            super().close()
            self._checkpoints.close()
            self._readers.drop(self)

    # --- FoldedStore's hooks ------------------------------------------------------------------------
    def _new_state(self, snapshot: bytes | None, path: str) -> GroupState:
        if snapshot is None:
            return GroupState()
        try:
            return GroupState.from_json(json.loads(snapshot))
        except (ValueError, KeyError, TypeError) as err:
            raise CorruptionError(path, 0, f"not a consumer group snapshot: {err}") from err

    def _encode_op(self, op: Op) -> bytes:
        return json.dumps(op, separators=(",", ":")).encode()

    def _decode_op(self, payload: bytes, where: str) -> Op:
        try:
            op = json.loads(payload)
            keys = OPS[op["op"]]
            if not isinstance(op["g"], str) or any(k not in op for k in keys):
                raise ValueError(f"an op {op['op']!r} needs {keys}")
        except (ValueError, KeyError, TypeError) as err:
            raise CorruptionError(where, 0, f"not a consumer group op: {err}") from err
        return op  # type: ignore[no-any-return]

    def _freeze(self, in_place: bool = False) -> tuple[int, object]:
        return self._state.next_lsn, self._state.to_json()

    def _encode_snapshot(self, frozen: object) -> bytes:
        return json.dumps(frozen, separators=(",", ":")).encode()

    def _state_size(self) -> int:
        return sum(1 + len(g.consumers) + len(g.pel) for g in self._state.groups.values())

    # --- the durable subscriber ---------------------------------------------------------------------
    def _write_checkpoint(self, name: str, g: Group, *, durable: bool, lsn: int | None = None) -> None:
        """Under ``_mutex``: every checkpoint write is, so they never interleave."""
        floor = g.floor() if lsn is None else lsn
        self._checkpoints.write(name, floor, g.created_ms * 1_000_000, durable=durable)
        self._cp[name] = floor
        if durable:
            self._cp_durable[name] = floor

    def _lower(self, name: str, floor: int) -> None:
        """Inside a decision, before it makes an op that may take the group's floor down to
        ``floor`` (a lower bound of it): move the checkpoint there first, fsynced (before the op
        is made, not after: a decision writes the ops it made even if it fails later), and count
        the lowering, so that no raise decided before it is written after it (``_raise``)."""
        g = self._state.groups[name]
        if floor < g.floor():
            self._lowers[name] = self._lowers.get(name, 0) + 1
        if floor < self._cp.get(name, -1):
            self._write_checkpoint(name, g, durable=True, lsn=floor)

    def _token(self, name: str) -> Token | None:
        """Inside a decision, after its ops: what ``_raise`` needs once they are durable."""
        g = self._state.groups.get(name)
        return None if g is None else (g, self._lowers.get(name, 0), g.floor())

    def _raise(self, name: str, token: Token | None) -> None:
        """After a decision's ops are durable (and every op before them): move the checkpoint
        up to the floor they left, unless an op since lowered the floor (that op's own raise
        will move it) or the group is gone. Retention removes a segment on the lower of the
        checkpoint's two slots (docs/FORMAT.md §6.2), and only whole segments: so a raise that
        passes the start of a segment since the last fsync is written twice, fsynced, so that
        both slots hold it and retention may remove what it frees at once; any other raise is
        written to the page cache only (a power cut takes it back to the last fsynced position,
        which is lower: safe). Without ``durability="always"``, the op log is fsynced before
        such a checkpoint (once a segment, not once an op)."""
        if token is None:
            return
        g, lowers, floor = token
        with self._mutex:
            if self._closed or self._state.groups.get(name) is not g or self._lowers.get(name, 0) != lowers:
                return
            if floor <= self._cp.get(name, -1):
                return
            durable_lsn = self._cp_durable.get(name, -1)
            try:
                passes = any(durable_lsn < base <= floor for base in list_segments(self._fs, self.log_path))
                if passes and not self._always:
                    # Without "always" the op is not fsynced yet: it must be before a durable
                    # checkpoint that rests on it (a power cut would leave the checkpoint above
                    # entries still pending, or a subscriber with no group).
                    self._log.sync()
                self._write_checkpoint(name, g, durable=passes, lsn=floor)
                if passes:
                    self._write_checkpoint(name, g, durable=True, lsn=floor)  # (the second slot)
            except (OSError, FailedError) as err:  # the op is made and answered; a lower checkpoint is safe
                _logger.error("%s: group %r: its checkpoint was not raised: %s", self.path, name, err)

    def _group(self, name: str, key: str, command: str = "") -> Group:
        g = self._state.groups.get(name)
        if g is None:
            raise NoGroupError(f"NOGROUP No such key '{key}' or consumer group '{name}'{command}")
        return g

    # --- reading ------------------------------------------------------------------------------------
    def groups(self) -> Iterator[tuple[str, Group]]:
        """The groups now, by name (the caller holds ``lock`` while it reads them)."""
        with self._mutex:
            self._catch_up()
        return iter(sorted(self._state.groups.items()))

    def get(self, name: str) -> Group | None:
        """The group now (the caller holds ``lock`` while it reads it)."""
        with self._mutex:
            self._catch_up()
        return self._state.groups.get(name)

    def settle(self) -> None:
        """Before a reply that shows the groups: every op made so far durable (a read may see an
        op decided by another thread whose fsync is still under way; no reply shows a change a
        crash could take back). Returns at once if an fsync covered them already."""
        if self._always:
            self._log.sync()

    # --- changes ------------------------------------------------------------------------------------
    def create(self, name: str, next_lsn: int, last: Id) -> bool:
        """A new group at ``next_lsn``; False if one of that name exists. RedisError if a
        durable subscriber of that name exists that is not a group."""
        with self._decide() as w:
            if name in self._state.groups:
                return False
            if len(self._state.groups) >= GROUPS_MAX:
                raise RedisError(f"ERR a logspool stream has at most {GROUPS_MAX} consumer groups")
            if self._checkpoints.read(name) is not None:
                raise RedisError(
                    "BUSYGROUP Consumer Group name already exists (as a durable subscriber of "
                    "this log, not a group: logspool subscribers)"
                )
            w.write({"op": "create", "g": name, "next": next_lsn, "last": list(last), "at": now_ms()})
            token = self._token(name)
        self._raise(name, token)  # its checkpoint, after the op (see the module docstring)
        return True

    def destroy(self, name: str) -> bool:
        with self._decide() as w:
            if name not in self._state.groups:
                return False
            with contextlib.suppress(SubscriberNotFoundError):  # (a crash left none)
                self._checkpoints.remove(name)  # before the op (see the module docstring)
            self._cp.pop(name, None)
            self._cp_durable.pop(name, None)
            self._readers.drop(self, name)
            w.write({"op": "destroy", "g": name})
        return True

    def set_id(self, name: str, key: str, next_lsn: int, last: Id) -> None:
        with self._decide() as w:
            g = self._group(name, key)
            self._lower(name, min(g.order[0], next_lsn) if g.order else next_lsn)
            w.write({"op": "setid", "g": name, "next": next_lsn, "last": list(last)})
            token = self._token(name)
        self._raise(name, token)

    def add_consumer(self, name: str, key: str, consumer: str) -> bool:
        with self._decide() as w:
            g = self._group(name, key)
            if consumer in g.consumers:
                return False
            self._check_consumers(g)
            w.write({"op": "consumer", "g": name, "c": consumer, "at": now_ms()})
            return True

    def _check_consumers(self, g: Group) -> None:
        if len(g.consumers) >= CONSUMERS_MAX:
            raise RedisError(f"ERR a logspool consumer group has at most {CONSUMERS_MAX} consumers")

    def remove_consumer(self, name: str, key: str, consumer: str) -> int:
        """Remove a consumer and its pending entries; how many it had."""
        with self._decide() as w:
            found = self._group(name, key).consumers.get(consumer)
            if found is None:
                return 0
            pending = found.pending
            w.write({"op": "delconsumer", "g": name, "c": consumer})
            token = self._token(name)
        self._raise(name, token)
        return pending

    def deliver(
        self, log: Log, name: str, key: str, consumer: str, count: int, noack: bool, size_max: int
    ) -> list[Record]:
        """XREADGROUP ``>``: up to ``count`` records after the group's position, now pending for
        ``consumer`` (unless ``noack``). Durable on return (one op); [] if there are none."""
        token = None
        with self._decide() as w:
            g = self._group(name, key, " in XREADGROUP with GROUP option")
            at = now_ms()
            if consumer not in g.consumers:
                self._check_consumers(g)
            if not noack:
                room = min(PENDING_MAX - len(g.pel), PENDING_STREAM_MAX - self._state.pending())
                if room <= 0:
                    raise RedisError(
                        f"ERR the group's pending entries list holds {len(g.pel)} entries (and the "
                        f"stream's groups {self._state.pending()}), logspool's limit (docs/RESP.md): "
                        "XACK (or XCLAIM and XACK) some before reading more"
                    )
                count = min(count, room)
            # A reader kept per group, where the last delivery left it: a new reader parses a
            # chunk of the segment to find its position (most of a one-entry read's cost).
            reader = reader_at(log, g.next_lsn, self._readers.take(self, name))
            try:
                try:
                    records = read_after(reader, count, size_max)
                except PositionError:  # retention removed what it was to read next: look again
                    reader = reader_at(log, g.next_lsn, reader)
                    records = read_after(reader, count, size_max)
            finally:
                self._readers.keep(self, name, reader)
            if records:
                if self._always:
                    # The records may be an XADD's whose fsync is still to come (a reader sees
                    # the page cache): durable before the op that delivers them can be, or a
                    # power cut could leave the group past the log's end, and the entries
                    # appended under the lost lsns after the restart would never reach it.
                    log.sync()
                lsn, ms, _ = records[-1]
                w.write({"op": "deliver", "g": name, "c": consumer, "at": at,
                         "ids": [[m, n] for n, m, _ in records], "next": lsn + 1, "last": [ms, lsn],
                         "noack": noack})  # fmt: skip
                token = self._token(name)  # (NOACK, or records past a gap retention left: it rose)
            elif consumer not in g.consumers:
                w.write({"op": "consumer", "g": name, "c": consumer, "at": at})
            else:
                g.consumers[consumer].seen_ms = at  # (memory only: no op for an empty read)
        if token is not None:
            self._raise(name, token)
        else:
            self.settle()  # ("nothing new" may rest on another consumer's delivery: durable first)
        return records

    def history(
        self, log: Log, name: str, key: str, consumer: str, after: Id, count: int, size_max: int
    ) -> list[tuple[Id, bytes | None]]:
        """XREADGROUP with an id: ``consumer``'s pending entries after ``after`` (None for one
        the log no longer holds), with at most ``size_max`` bytes of payloads (but one at
        least); each one found counts as delivered again."""
        with self._decide() as w:
            g = self._group(name, key, " in XREADGROUP with GROUP option")
            at = now_ms()
            ids: list[Id] = []
            for lsn in g.order.islice(g.ids_from((after[0], after[1] + 1))):  # bounded by count
                entry = g.pel[lsn]
                if entry.consumer == consumer:
                    ids.append((entry.ms, lsn))
                    if len(ids) >= count:
                        break
            found, stop = read_lsns_upto(log, [lsn for _, lsn in ids], size_max)
            if stop is not None:  # (the rest in the next call: the client goes on from the last)
                ids = [eid for eid in ids if eid[1] < stop]
            again = [lsn for ms, lsn in ids if found.get(lsn, (-1,))[0] == ms]
            if again:
                w.write({"op": "redeliver", "g": name, "c": consumer, "at": at, "lsns": again})
            elif consumer not in g.consumers:
                self._check_consumers(g)
                w.write({"op": "consumer", "g": name, "c": consumer, "at": at})
            else:
                g.consumers[consumer].seen_ms = at
        self.settle()
        out: list[tuple[Id, bytes | None]] = []
        for ms, lsn in ids:
            rec = found.get(lsn)
            out.append(((ms, lsn), rec[1] if rec is not None and rec[0] == ms else None))
        return out

    def ack(self, name: str, ids: list[Id]) -> int:
        """XACK: remove these ids from the PEL; how many were in it (0 without the group)."""
        token = None
        with self._decide() as w:
            g = self._state.groups.get(name)
            if g is None:
                return 0
            lsns = [eid[1] for eid in dict.fromkeys(ids) if g.pending_id(eid) is not None]
            if lsns:
                w.write({"op": "ack", "g": name, "lsns": lsns})
                token = self._token(name)
        if token is not None:
            self._raise(name, token)
        else:
            self.settle()
        return len(lsns)

    def claim(
        self, log: Log, name: str, key: str, consumer: str, min_idle_ms: int, ids: list[Id], *,
        delivered_ms: int | None, retry: int | None, force: bool, justid: bool, last: Id | None,
    ) -> list[tuple[Id, bytes]]:  # fmt: skip
        """XCLAIM: the pending entries among ``ids`` idle for at least ``min_idle_ms`` (and with
        ``force`` those not pending that the log holds) become ``consumer``'s; entries the log
        no longer holds leave the PEL. Returns what was claimed, with payloads."""
        token = None
        with self._decide() as w:
            g = self._group(name, key)
            at = now_ms()
            when = at if delivered_ms is None or not 0 <= delivered_ms <= at else delivered_ms
            wanted = list(dict.fromkeys(ids))
            # Only the records it may claim are read: the pending ids, and with FORCE as many
            # others as the PEL has room for (a million ids of nothing cost no million seeks).
            room = min(PENDING_MAX - len(g.pel), PENDING_STREAM_MAX - self._state.pending())
            look = [lsn for ms, lsn in wanted if g.pending_id((ms, lsn)) is not None]
            if force:
                look += [lsn for ms, lsn in wanted if g.pending_id((ms, lsn)) is None][: max(room, 0)]
            found, stop = read_lsns_upto(log, look, STREAM_REPLY_BYTES_MAX)
            items: list[list[Any]] = []
            drop: list[int] = []
            out: list[tuple[Id, bytes]] = []
            forced = 0
            for ms, lsn in wanted:
                if stop is not None and lsn >= stop:
                    continue  # (not looked at: the reply's bytes are bounded; it stays as it is)
                entry = g.pending_id((ms, lsn))
                rec = found.get(lsn)
                if rec is None or rec[0] != ms:
                    if entry is not None:
                        drop.append(lsn)
                    continue
                if entry is None:
                    if not force or forced >= room:
                        continue
                    forced += 1
                    count = 1  # (Redis's count for a PEL entry FORCE makes, before this claim)
                elif min_idle_ms and at - entry.delivered_ms < min_idle_ms:
                    continue
                else:
                    count = entry.count
                count = retry if retry is not None else count if justid else count + 1
                items.append([lsn, ms, when, count])
                out.append(((ms, lsn), rec[1]))
            new_last: Id | None = last if last is not None and last > g.last else None
            if consumer not in g.consumers:
                self._check_consumers(g)
            if items or drop or new_last is not None or consumer not in g.consumers:
                if self._always and (items or new_last is not None):
                    log.sync()  # (what it read of the log durable before the op: see ``deliver``)
                self._lower(name, min([g.floor()] + [item[0] for item in items]))  # (FORCE)
                w.write({"op": "claim", "g": name, "c": consumer, "at": at, "items": items, "drop": drop,
                         "last": None if new_last is None else list(new_last),
                         "next": None if new_last is None else lsn_after(log, new_last)})  # fmt: skip
                token = self._token(name)
            else:
                g.consumers[consumer].seen_ms = at
        if token is not None:
            self._raise(name, token)
        else:
            self.settle()
        return out

    def autoclaim(
        self, log: Log, name: str, key: str, consumer: str, min_idle_ms: int, start: Id, count: int,
        justid: bool,
    ) -> tuple[Id, list[tuple[Id, bytes | None]], list[Id]]:  # fmt: skip
        """XAUTOCLAIM: scan the PEL from ``start`` (at most ``count`` x 10 entries), claim up to
        ``count`` idle ones; entries the log no longer holds leave the PEL and are listed.
        Returns the next start ((0, 0): the scan reached the end), the claimed, the removed."""
        token = None
        with self._decide() as w:
            g = self._group(name, key)
            at = now_ms()
            first = log.info().first_lsn
            i = g.ids_from(start)
            looked: list[int] = []  # the entries it claims or finds gone, in order
            seen = 0
            for lsn in g.order[i : i + count * 10]:
                if len(looked) >= count:
                    break
                seen += 1
                if lsn < first or not min_idle_ms or at - g.pel[lsn].delivered_ms >= min_idle_ms:
                    looked.append(lsn)
            rest = g.order[i + seen : i + seen + 1]
            next_start = (g.pel[rest[0]].ms, rest[0]) if rest else (0, 0)
            # The records, read here (what is gone leaves the PEL), payloads bounded in bytes:
            # past the bound, the rest waits for the next call (the cursor points at it).
            found, stop = read_lsns_upto(log, [lsn for lsn in looked if lsn >= first], STREAM_REPLY_BYTES_MAX)
            if stop is not None:
                looked = [lsn for lsn in looked if lsn < stop]
                next_start = (g.pel[stop].ms, stop)
            items: list[list[Any]] = []
            deleted: list[Id] = []
            claimed: list[tuple[Id, bytes | None]] = []
            for lsn in looked:
                entry = g.pel[lsn]
                rec = found.get(lsn)
                if rec is None or rec[0] != entry.ms:
                    deleted.append((entry.ms, lsn))
                else:
                    items.append([lsn, entry.ms, at, entry.count if justid else entry.count + 1])
                    claimed.append(((entry.ms, lsn), None if justid else rec[1]))
            if consumer not in g.consumers:
                self._check_consumers(g)
            if items or deleted or consumer not in g.consumers:
                w.write({"op": "claim", "g": name, "c": consumer, "at": at, "items": items,
                         "drop": [lsn for _, lsn in deleted], "last": None, "next": None})  # fmt: skip
                token = self._token(name)
            else:
                g.consumers[consumer].seen_ms = at
        if token is not None:
            self._raise(name, token)
        else:
            self.settle()
        return next_start, claimed, deleted


class Groups:
    """The group stores of the daemon's streams, opened on first use (at most
    ``STORES_OPEN_MAX``). Any thread."""

    def __init__(
        self,
        data: str,
        durability: Durability,
        make_dir: Callable[[str], None],
        adopt: Callable[[Log], None] | None = None,
        fs: FileSystem | None = None,
    ) -> None:
        self.data = data
        self.durability = durability
        self._fs = fs  # the I/O seam (the daemon's: tests fault it)
        self._adopt = adopt  # (the daemon's ``Stores.adopt``: each store's log watched as theirs)
        self._make_dir = make_dir  # (``Stores.make_dir``: DATA/groups made durable, or the daemon stops)
        self._open: dict[str, GroupStore] = {}
        self._lock = threading.Lock()
        self.readers = KeptReaders()  # (shared by the stores: one bound for the daemon)

    def store(self, name: str, log: Log, *, create: bool) -> GroupStore | None:
        """The groups of the stream ``name`` (a valid log name, checked by the caller), or None
        if it has none and ``create`` is False."""
        with self._lock:
            found = self._open.get(name)
            if found is not None:
                return found
            root = os.path.join(self.data, GROUPS_DIR)
            path = os.path.join(root, name)
            if not create and not os.path.exists(os.path.join(path, MARKER)):
                return None
            if len(self._open) >= STORES_OPEN_MAX:
                raise RedisError(f"ERR {STORES_OPEN_MAX} streams' consumer groups are open already")
            self._make_dir(root)
            found = self._open[name] = GroupStore(
                path, log, self.durability, fs=self._fs, readers=self.readers
            )
            if self._adopt is not None:
                self._adopt(found._log)
            return found

    def close(self) -> None:
        with self._lock:
            for store in self._open.values():
                store.close()
            self._open.clear()
