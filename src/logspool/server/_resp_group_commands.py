"""The RESP consumer group commands (XGROUP, XREADGROUP, XACK, XPENDING, XCLAIM, XAUTOCLAIM,
XINFO): parsing and replies; the state and its durability are ``_resp_groups.GroupStore``'s.
docs/RESP.md ("Consumer groups") lists what each does here and what differs from Redis.

A little over 600 lines: one parser and one reply builder per command (seven commands, each with
Redis's options), side by side as docs/RESP.md's table lists them.

They are of kind "jobs" for the command table: they run in the server's thread pool and are
durable on their own (each change is an op of the stream's group store, fsynced before the
reply), as the Disque commands are. XREADGROUP BLOCK is handed back to the connection as a
``Block``: it waits on the event loop, holding no thread, woken by an append to the log.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..log import Log
from . import _resp_wire as w
from ._resp_commands import Block, _int, _stream_name, command
from ._resp_group_state import Group, Id, NoGroupError, consumer_bytes, consumer_name, group_name, now_ms
from ._resp_groups import GroupStore
from ._resp_kv import RedisError
from ._resp_streams import (
    ID_MAX,
    STREAM_REPLY_BYTES_MAX,
    STREAM_REPLY_COUNT_MAX,
    decode_fields,
    last_id,
    lsn_after,
    parse_id,
    strict_id,
)

if TYPE_CHECKING:
    from ._resp import Session

GroupEntry = tuple[Id, bytes | None]  # an id and its payload (None: the log no longer holds it)


def _id_text(eid: Id) -> bytes:
    return b"%d-%d" % eid


def _entry(s: Session, eid: Id, payload: bytes | None) -> bytes:
    fields = w.null_array(s.proto) if payload is None else w.bulks(decode_fields(payload))
    return w.array([w.bulk(_id_text(eid)), fields])


def _entries(s: Session, entries: Sequence[GroupEntry]) -> bytes:
    return w.array([_entry(s, eid, payload) for eid, payload in entries])


def _log(s: Session, name: str) -> Log | None:
    return s.front.streams.log(name, create=False)


def _store(s: Session, raw_key: bytes, group: str, command: str = "") -> tuple[Log, GroupStore]:
    """The stream's log and group store, or ``-NOGROUP`` as Redis answers for a missing key."""
    name = _stream_name(raw_key)
    log = _log(s, name)
    store = None if log is None else s.front.streams.groups.store(name, log, create=False)
    if log is None or store is None:
        raise NoGroupError(f"NOGROUP No such key '{name}' or consumer group '{group}'{command}")
    return log, store


def _position(log: Log, eid: Id | None) -> tuple[int, Id]:
    """The next lsn and last id of a group set to ``eid`` (None, ``$``: the end of the log).
    The log is made durable first: the end it finds may hold an XADD whose fsync is still to
    come, and a group whose position a power cut left past the log's end would never read the
    entries appended there after the restart."""
    log.sync()
    if eid is None:
        last, next_lsn = last_id(log)
        return next_lsn, last
    return lsn_after(log, eid), eid


# --- XGROUP ---------------------------------------------------------------------------------------
XGROUP_HELP = [
    "XGROUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CREATE <key> <groupname> <id|$> [MKSTREAM] [ENTRIESREAD entries_read]",
    "    Create a new consumer group (a durable subscriber of the log, same name).",
    "CREATECONSUMER <key> <groupname> <consumer>",
    "    Create a new consumer in the specified group.",
    "DELCONSUMER <key> <groupname> <consumer>",
    "    Remove the specified consumer (and its pending entries).",
    "DESTROY <key> <groupname>",
    "    Remove the specified group (and its durable subscriber).",
    "SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
    "    Set the current group ID (ENTRIESREAD is accepted and ignored: entries-read is exact).",
    "HELP",
    "    Print this help.",
]


@command("XGROUP", -2, "jobs")
def _xgroup(s: Session, args: list[bytes]) -> bytes:
    sub = args[1].upper()
    if sub == b"HELP" and len(args) == 2:
        return w.array([w.simple(line) for line in XGROUP_HELP])
    shapes = {
        b"CREATE": (5, 8),
        b"SETID": (5, 7),
        b"DESTROY": (4, 4),
        b"CREATECONSUMER": (5, 5),
        b"DELCONSUMER": (5, 5),
    }
    low, high = shapes.get(sub, (0, -1))
    if not low <= len(args) <= high:
        typed = args[1].decode(errors="replace")
        raise RedisError(
            f"ERR unknown subcommand or wrong number of arguments for '{typed}'. Try XGROUP HELP."
        )
    name = _stream_name(args[2])
    group = group_name(args[3])
    target = None  # CREATE's and SETID's id (None: '$'), parsed before anything is created
    if sub in (b"CREATE", b"SETID") and args[4] != b"$":
        target = _exact(args[4])
    mkstream = False
    i = 5
    while i < len(args):  # CREATE's and SETID's options
        option = args[i].upper()
        if option == b"MKSTREAM" and sub == b"CREATE":
            mkstream = True
            i += 1
        elif option == b"ENTRIESREAD" and i + 1 < len(args):
            if _int(args[i + 1]) < -1:
                raise RedisError("ERR value for ENTRIESREAD must be positive or -1")
            i += 2
        else:
            raise RedisError("ERR syntax error")
    log = s.front.streams.log(name, create=mkstream)
    if log is None:
        raise RedisError(
            "ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want "
            "to use the MKSTREAM option to create an empty stream automatically."
        )
    position = _position(log, target) if sub in (b"CREATE", b"SETID") else (0, (0, 0))
    store = s.front.streams.groups.store(name, log, create=sub == b"CREATE")
    missing = f"NOGROUP No such consumer group '{group}' for key name '{name}'"
    if sub == b"CREATE":
        assert store is not None
        if not store.create(group, *position):
            raise RedisError("BUSYGROUP Consumer Group name already exists")
        return w.OK
    if sub == b"DESTROY":
        destroyed = store is not None and store.destroy(group)
        if destroyed and s.front.tails is not None:
            s.front.tails.wake_threadsafe({"logs/" + name})  # blocked XREADGROUPs answer -NOGROUP
        return w.integer(int(destroyed))
    if store is None:
        raise NoGroupError(missing)
    consumer = consumer_name(args[4]) if sub != b"SETID" else ""
    try:
        if sub == b"SETID":
            store.set_id(group, name, *position)
            return w.OK
        if sub == b"CREATECONSUMER":
            return w.integer(int(store.add_consumer(group, name, consumer)))
        return w.integer(store.remove_consumer(group, name, consumer))
    except NoGroupError:
        raise NoGroupError(missing) from None


# --- XREADGROUP -----------------------------------------------------------------------------------
@command("XREADGROUP", -7, "jobs")
def _xreadgroup(s: Session, args: list[bytes]) -> bytes | Block:
    count = STREAM_REPLY_COUNT_MAX
    block_ms: int | None = None
    noack = False
    group: str | None = None
    consumer = ""
    i = 1
    while i < len(args) and args[i].upper() != b"STREAMS":
        option = args[i].upper()
        if option == b"GROUP" and i + 2 < len(args):
            group, consumer = group_name(args[i + 1]), consumer_name(args[i + 2])
            i += 3
            continue
        if option == b"NOACK":
            noack = True
            i += 1
            continue
        if option == b"COUNT" and i + 1 < len(args):
            wanted = _int(args[i + 1])
            count = STREAM_REPLY_COUNT_MAX if wanted <= 0 else min(wanted, STREAM_REPLY_COUNT_MAX)
        elif option == b"BLOCK" and i + 1 < len(args):
            block_ms = _int(args[i + 1])
            if block_ms < 0:
                raise RedisError("ERR timeout is negative")
        else:
            raise RedisError("ERR syntax error")
        i += 2
    rest = args[i + 1 :]
    if i >= len(args) or not rest or len(rest) % 2:
        raise RedisError(
            "ERR Unbalanced 'xreadgroup' list of streams: for each stream key an ID or '>' must be specified."
        )
    if group is None:
        raise RedisError("ERR Missing GROUP option for XREADGROUP")
    half = len(rest) // 2
    wanted_ids: list[tuple[str, Id | None]] = []  # None: '>'
    for raw_name, raw_id in zip(rest[:half], rest[half:], strict=True):
        name = _stream_name(raw_name)
        if raw_id in (b"$", b"+"):
            raise RedisError(
                f"ERR The {raw_id.decode()} ID is meaningless in the context of XREADGROUP: you want to read "
                "the history of this consumer by specifying a proper ID, or use the > ID to get new "
                "messages."
            )
        if raw_id == b">":
            wanted_ids.append((name, None))
        else:
            ms, seq = strict_id(raw_id)
            wanted_ids.append((name, (ms, 0 if seq is None else seq)))
    stores = {
        name: _store(s, name.encode(), group, " in XREADGROUP with GROUP option") for name, _ in wanted_ids
    }

    def now() -> bytes | None:
        found: list[tuple[bytes, bytes]] = []
        left = STREAM_REPLY_BYTES_MAX  # (over the streams: a stream past it is left for the next call)
        for name, after in wanted_ids:
            if left <= 0:
                break
            log, store = stores[name]
            try:
                if after is None:
                    records = store.deliver(log, group, name, consumer, count, noack, left)
                    if records:
                        entries = [((ms, lsn), payload) for lsn, ms, payload in records]
                        found.append((w.bulk(name.encode()), _entries(s, entries)))
                        left -= sum(len(payload) for _, _, payload in records)
                else:
                    history = store.history(log, group, name, consumer, after, count, left)
                    found.append((w.bulk(name.encode()), _entries(s, history)))  # (even if empty: Redis)
                    left -= sum(len(payload or b"") for _, payload in history)
            except RedisError:
                # A bound of this stream's group (or it was destroyed): the entries the streams
                # before it delivered are pending for this consumer now, so they are the reply
                # (an error would hide them); the error comes with the next read.
                if not found:
                    raise
                break
        if not found:
            return None
        if s.proto == 3:
            return w.mapping(found, 3)
        return w.array([w.array([k, v]) for k, v in found])

    reply = now()
    if reply is not None or block_ms is None or s._tx is not None:
        return w.null_array(s.proto) if reply is None else reply
    deadline = None if not block_ms else time.monotonic() + block_ms / 1000

    def retry() -> tuple[bytes | None, float | None]:
        try:
            return now(), None
        except RedisError as err:  # the group was destroyed meanwhile: as Redis, -NOGROUP
            return w.error(str(err)), None

    return Block(["logs/" + name for name in stores], retry, deadline, w.null_array(s.proto))


# --- XACK, XPENDING -------------------------------------------------------------------------------
@command("XACK", -4, "jobs")
def _xack(s: Session, args: list[bytes]) -> bytes:
    name = _stream_name(args[1])
    group = group_name(args[2])
    ids = [_exact(raw) for raw in args[3:]]  # all parsed before any is acked (as Redis)
    log = _log(s, name)
    store = None if log is None else s.front.streams.groups.store(name, log, create=False)
    return w.integer(0 if store is None else store.ack(group, ids))


def _exact(raw: bytes) -> Id:
    ms, seq = strict_id(raw)
    return ms, 0 if seq is None else seq


@command("XPENDING", -3, "jobs")
def _xpending(s: Session, args: list[bytes]) -> bytes:
    if len(args) != 3 and not 6 <= len(args) <= 9:
        raise RedisError("ERR syntax error")
    min_idle = 0
    start_at = 3
    if len(args) >= 6 and args[3].upper() == b"IDLE":
        min_idle = _int(args[4])
        if len(args) < 8:
            raise RedisError("ERR syntax error")
        start_at = 5
    count = 0
    start: Id = (0, 0)
    end: Id = (ID_MAX, ID_MAX)
    only: str | None = None
    if len(args) >= 6:
        count = max(_int(args[start_at + 2]), 0)
        start, start_excl = parse_id(args[start_at])
        end, end_excl = parse_id(args[start_at + 1], end=True)
        if start_excl:
            if start == (ID_MAX, ID_MAX):
                raise RedisError("ERR invalid start ID for the interval")
            start = (start[0], start[1] + 1) if start[1] < ID_MAX else (start[0] + 1, 0)
        if end_excl:
            if end == (0, 0):
                raise RedisError("ERR invalid end ID for the interval")
            end = (end[0], end[1] - 1) if end[1] else (end[0] - 1, ID_MAX)
        if start_at + 3 < len(args):
            only = consumer_name(args[start_at + 3])
        if len(args) > start_at + 4:
            raise RedisError("ERR syntax error")
    group = group_name(args[2])
    _, store = _store(s, args[1], group)
    reply = _pending_reply(
        s, store, group, args[1], min_idle, start, end, count, only, summary=len(args) == 3
    )
    store.settle()  # (what it shows is durable before it is sent)
    return reply


def _pending_reply(s: Session, store: GroupStore, group: str, raw_key: bytes, min_idle: int, start: Id,
                   end: Id, count: int, only: str | None, *, summary: bool) -> bytes:  # fmt: skip
    """XPENDING's reply: the summary, or the entries from ``start`` to ``end``."""
    with store.lock:
        g = store.get(group)
        if g is None:
            raise NoGroupError(
                f"NOGROUP No such key '{raw_key.decode(errors='replace')}' or consumer group '{group}'"
            )
        if summary:
            if not g.pel:
                return w.array([w.ZERO, s.nil(), s.nil(), w.null_array(s.proto)])
            first, last = g.order[0], g.order[-1]
            owners = [
                w.bulks([consumer_bytes(c), b"%d" % v.pending])
                for c, v in sorted(g.consumers.items())
                if v.pending
            ]
            return w.array(
                [
                    w.integer(len(g.pel)),
                    w.bulk(_id_text((g.pel[first].ms, first))),
                    w.bulk(_id_text((g.pel[last].ms, last))),
                    w.array(owners),
                ]
            )
        if only is not None and only not in g.consumers:
            return w.EMPTY_ARRAY
        at = now_ms()
        rows: list[bytes] = []
        for lsn in g.order.islice(g.ids_from(start)):  # bounded by count
            if len(rows) >= min(count, STREAM_REPLY_COUNT_MAX):
                break
            entry = g.pel[lsn]
            if (entry.ms, lsn) > end:
                break
            if (only is not None and entry.consumer != only) or (
                min_idle and at - entry.delivered_ms < min_idle
            ):
                continue
            rows.append(
                w.array(
                    [
                        w.bulk(_id_text((entry.ms, lsn))),
                        w.bulk(consumer_bytes(entry.consumer)),
                        w.integer(max(0, at - entry.delivered_ms)),
                        w.integer(entry.count),
                    ]
                )
            )
        return w.array(rows)


# --- XCLAIM, XAUTOCLAIM ---------------------------------------------------------------------------
@command("XCLAIM", -6, "jobs")
def _xclaim(s: Session, args: list[bytes]) -> bytes:
    group = group_name(args[2])
    log, store = _store(s, args[1], group)
    consumer = consumer_name(args[3])
    min_idle = _number(args[4], "Invalid min-idle-time argument for XCLAIM")
    ids: list[Id] = []
    i = 5
    while i < len(args):  # the ids, then the options
        try:
            ids.append(_exact(args[i]))
        except RedisError:
            break
        i += 1
    at = now_ms()
    delivered: int | None = None
    retry: int | None = None
    force = justid = False
    last: Id | None = None
    while i < len(args):
        option = args[i].upper()
        more = i + 1 < len(args)
        if option == b"FORCE":
            force = True
        elif option == b"JUSTID":
            justid = True
        elif option == b"IDLE" and more:
            i += 1
            delivered = at - _number(args[i], "Invalid IDLE option argument for XCLAIM")
        elif option == b"TIME" and more:
            i += 1
            delivered = _number(args[i], "Invalid TIME option argument for XCLAIM")
        elif option == b"RETRYCOUNT" and more:
            i += 1
            retry = max(0, _number(args[i], "Invalid RETRYCOUNT option argument for XCLAIM"))
        elif option == b"LASTID" and more:
            i += 1
            last = _exact(args[i])
        else:
            raise RedisError(f"ERR Unrecognized XCLAIM option '{args[i].decode(errors='replace')}'")
        i += 1
    claimed = store.claim(
        log,
        group,
        args[1].decode(),
        consumer,
        max(min_idle, 0),
        ids,
        delivered_ms=delivered,
        retry=retry,
        force=force,
        justid=justid,
        last=last,
    )
    if justid:
        return w.bulks([_id_text(eid) for eid, _ in claimed])
    return _entries(s, list(claimed))


def _number(raw: bytes, message: str) -> int:
    try:
        return _int(raw)
    except RedisError:
        raise RedisError(f"ERR {message}") from None


@command("XAUTOCLAIM", -6, "jobs")
def _xautoclaim(s: Session, args: list[bytes]) -> bytes:
    min_idle = max(0, _number(args[4], "Invalid min-idle-time argument for XAUTOCLAIM"))
    start, excl = parse_id(args[5])
    if excl:
        start = (start[0], start[1] + 1)
    count = 100
    justid = False
    i = 6
    while i < len(args):
        option = args[i].upper()
        if option == b"COUNT" and i + 1 < len(args):
            count = _int(args[i + 1])
            if count < 1:
                raise RedisError("ERR COUNT must be > 0")
            # (more is looked at no further than the bound: the reply's cursor says where to go on)
            count = min(count, STREAM_REPLY_COUNT_MAX)
            i += 2
        elif option == b"JUSTID":
            justid = True
            i += 1
        else:
            raise RedisError("ERR syntax error")
    group = group_name(args[2])
    log, store = _store(s, args[1], group)
    consumer = consumer_name(args[3])
    next_start, claimed, deleted = store.autoclaim(
        log, group, args[1].decode(), consumer, min_idle, start, count, justid
    )
    body = w.bulks([_id_text(eid) for eid, _ in claimed]) if justid else _entries(s, claimed)
    return w.array([w.bulk(_id_text(next_start)), body, w.bulks([_id_text(eid) for eid in deleted])])


# --- XINFO ----------------------------------------------------------------------------------------
XINFO_HELP = [
    "XINFO <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CONSUMERS <key> <groupname>",
    "    Show consumers of <groupname>.",
    "GROUPS <key>",
    "    Show the stream consumer groups.",
    "STREAM <key> [FULL [COUNT <count>]",
    "    Show information about the stream.",
    "HELP",
    "    Print this help.",
]


def _map(s: Session, pairs: list[tuple[bytes, bytes]]) -> bytes:
    """A reply map (RESP3) or flat array (RESP2) of field names to encoded values."""
    return w.mapping([(w.bulk(k), v) for k, v in pairs], s.proto)


@command("XINFO", -2, "jobs")
def _xinfo(s: Session, args: list[bytes]) -> bytes:
    sub = args[1].upper()
    if sub == b"HELP" and len(args) == 2:
        return w.array([w.simple(line) for line in XINFO_HELP])
    shapes = {b"CONSUMERS": (4, 4), b"GROUPS": (3, 3), b"STREAM": (3, 6)}
    low, high = shapes.get(sub, (0, -1))
    if not low <= len(args) <= high:
        typed = args[1].decode(errors="replace")
        raise RedisError(
            f"ERR unknown subcommand or wrong number of arguments for '{typed}'. Try XINFO HELP."
        )
    name = _stream_name(args[2])
    group = group_name(args[3]) if sub == b"CONSUMERS" else ""
    log = _log(s, name)
    if log is None:
        raise RedisError("ERR no such key")
    store = s.front.streams.groups.store(name, log, create=False)
    if sub == b"STREAM":
        reply = _xinfo_stream(s, log, store, args[3:])
    elif store is None:
        if sub == b"CONSUMERS":
            raise NoGroupError(f"NOGROUP No such consumer group '{group}' for key name '{name}'")
        reply = w.EMPTY_ARRAY
    else:
        head = log.info().next_lsn
        with store.lock:
            if sub == b"GROUPS":
                reply = w.array([_group_map(s, gname, g, head) for gname, g in store.groups()])
            else:
                reply = _consumers(s, name, group, store.get(group))
    if store is not None:
        store.settle()  # (what it shows is durable before it is sent)
    return reply


def _consumers(s: Session, name: str, group: str, g: Group | None) -> bytes:
    """XINFO CONSUMERS' reply (the caller holds the store's lock)."""
    if g is None:
        raise NoGroupError(f"NOGROUP No such consumer group '{group}' for key name '{name}'")
    at = now_ms()
    consumers = []
    for c, v in sorted(g.consumers.items()):
        inactive = at - v.active_ms if v.active_ms >= 0 else -1
        consumers.append(_map(s, [(b"name", w.bulk(consumer_bytes(c))), (b"pending", w.integer(v.pending)),
                                  (b"idle", w.integer(max(0, at - v.seen_ms))),
                                  (b"inactive", w.integer(inactive))]))  # fmt: skip
    return w.array(consumers)


def _group_map(s: Session, name: str, g: Group, head: int) -> bytes:
    """XINFO GROUPS' map of one group: entries-read is exact here (the group's next lsn)."""
    return _map(s, [(b"name", w.bulk(name.encode())), (b"consumers", w.integer(len(g.consumers))),
                    (b"pending", w.integer(len(g.pel))), (b"last-delivered-id", w.bulk(_id_text(g.last))),
                    (b"entries-read", w.integer(g.next_lsn)),
                    (b"lag", w.integer(max(0, head - g.next_lsn)))])  # fmt: skip


def _xinfo_stream(s: Session, log: Log, store: GroupStore | None, options: list[bytes]) -> bytes:
    count = 10
    if options:
        if (
            options[0].upper() != b"FULL"
            or len(options) == 2
            or (len(options) == 3 and options[1].upper() != b"COUNT")
        ):
            raise RedisError("ERR syntax error")
        if len(options) == 3:
            count = _int(options[2])
            count = 10 if count < 0 else count
    info = log.info()
    streams = s.front.streams
    first = streams.forward(log, (0, 0), False, (ID_MAX, ID_MAX), False, 1)
    last = streams.backward(log, (ID_MAX, ID_MAX), False, (0, 0), False, 1)
    last_generated = last[0][0] if last else b"0-%d" % (info.next_lsn - 1) if info.next_lsn else b"0-0"
    pairs = [
        (b"length", w.integer(info.next_lsn - info.first_lsn)),
        (b"radix-tree-keys", w.integer(len(info.segments))),  # (here: the log's segments)
        (b"radix-tree-nodes", w.integer(len(info.segments))),
        (b"last-generated-id", w.bulk(last_generated)),
        # (the ms of records retention removed is not kept: their last lsn, at ms 0)
        (b"max-deleted-entry-id", w.bulk(b"0-%d" % (info.first_lsn - 1) if info.first_lsn else b"0-0")),
        (b"entries-added", w.integer(info.next_lsn)),
        (b"recorded-first-entry-id", w.bulk(first[0][0] if first else b"0-0")),
    ]
    if not options:
        with store.lock if store is not None else contextlib.nullcontext():
            group_count = 0 if store is None else sum(1 for _ in store.groups())
        pairs.append((b"groups", w.integer(group_count)))
        for title, found in ((b"first-entry", first), (b"last-entry", last)):
            pairs.append((title, w.array([w.bulk(found[0][0]), w.bulks(found[0][1])]) if found else s.nil()))
        return _map(s, pairs)
    wanted = STREAM_REPLY_COUNT_MAX if count == 0 else min(count, STREAM_REPLY_COUNT_MAX)
    entries = streams.forward(log, (0, 0), False, (ID_MAX, ID_MAX), False, wanted)
    pairs.append((b"entries", w.array([w.array([w.bulk(e), w.bulks(f)]) for e, f in entries])))
    rows_left = [FULL_PEL_ROWS_MAX]  # (over the reply's groups and consumers)
    with store.lock if store is not None else contextlib.nullcontext():
        groups = (
            []
            if store is None
            else [_full_group(s, n, g, wanted, info.next_lsn, rows_left) for n, g in store.groups()]
        )
    pairs.append((b"groups", w.array(groups)))
    return _map(s, pairs)


# PEL entries one XINFO STREAM FULL reply lists, over its groups and their consumers: with COUNT
# 0 (all) 100 groups of 100,000 pending entries would be ~20,000,000 rows built in memory.
FULL_PEL_ROWS_MAX = STREAM_REPLY_COUNT_MAX


def _full_group(s: Session, name: str, g: Group, wanted: int, head: int, rows_left: list[int]) -> bytes:
    """XINFO STREAM FULL's map of one group (the caller holds the store's lock), with at most
    ``rows_left[0]`` PEL entries in its lists (taken from it)."""
    shown = min(wanted, rows_left[0], len(g.order))
    rows_left[0] -= shown
    pel = [w.array([w.bulk(_id_text((g.pel[n].ms, n))), w.bulk(consumer_bytes(g.pel[n].consumer)),
                    w.integer(g.pel[n].delivered_ms), w.integer(g.pel[n].count)])
           for n in g.order[:shown]]  # fmt: skip
    held: dict[str, list[int]] = {}  # each consumer's first pending lsns: one pass over the PEL
    for n in g.order:
        mine = held.setdefault(g.pel[n].consumer, [])
        if len(mine) < wanted:
            mine.append(n)
    consumers = []
    for c, v in sorted(g.consumers.items()):
        mine = held.get(c, [])[: rows_left[0]]
        rows_left[0] -= len(mine)
        own = [w.array([w.bulk(_id_text((g.pel[n].ms, n))), w.integer(g.pel[n].delivered_ms),
                        w.integer(g.pel[n].count)]) for n in mine]  # fmt: skip
        consumers.append(_map(s, [(b"name", w.bulk(consumer_bytes(c))), (b"seen-time", w.integer(v.seen_ms)),
                                  (b"active-time", w.integer(v.active_ms)),
                                  (b"pel-count", w.integer(v.pending)),
                                  (b"pending", w.array(own))]))  # fmt: skip
    return _map(s, [(b"name", w.bulk(name.encode())), (b"last-delivered-id", w.bulk(_id_text(g.last))),
                    (b"entries-read", w.integer(g.next_lsn)), (b"lag", w.integer(max(0, head - g.next_lsn))),
                    (b"pel-count", w.integer(len(g.pel))), (b"pending", w.array(pel)),
                    (b"consumers", w.array(consumers))])  # fmt: skip
