"""The RESP stream commands on logs (XADD, XTRIM, XDEL, XLEN, XRANGE, XREVRANGE, XREAD), parsed
here and run by ``_resp_streams.Streams``; a blocked XREAD is handed back to the connection as a
``Block``. The consumer group commands (XGROUP, XREADGROUP, XACK...) are in
``_resp_group_commands.py``, registered when this module is imported (at its end).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import _resp_wire as w
from ._resp_commands import Block, _arity_error, _int, _stream_name, command
from ._resp_kv import RedisError
from ._resp_streams import ID_MAX, STREAM_REPLY_COUNT_MAX, Cursor, Id, entries_reply, parse_id, strict_id

if TYPE_CHECKING:
    from ._resp import Session


# --- streams --------------------------------------------------------------------------------------
@command("XADD", -5, "stream")
def _xadd(s: Session, args: list[bytes]) -> bytes:
    name = _stream_name(args[1])
    trim, i, nomkstream = parse_trim(args, 2, xadd=True)
    if i >= len(args):
        raise _arity_error(b"xadd")
    wanted = None if args[i] == b"*" else strict_id(args[i], seq_auto=True)
    fields = args[i + 1 :]
    if not fields or len(fields) % 2:
        raise _arity_error(b"xadd")
    if wanted == (0, 0):
        raise RedisError("ERR The ID specified in XADD must be greater than 0-0")
    if wanted is not None and not s.front.streams.exists(name):
        if nomkstream:
            return s.nil()  # (no stream, none made: nil, as Redis answers, whatever the id)
        # Refused before the log is created (as Redis refuses 0-0): a new log's first lsn is 0,
        # and no entry may be stamped before the log's creation, now.
        if wanted[1] not in (None, 0):
            raise RedisError(f"ERR the sequence of this stream's next id is its next lsn, 0 {_ID_RULE}")
        if wanted[0] < time.time_ns() // 1_000_000:
            raise RedisError(f"ERR logspool cannot stamp an entry before this log's creation, now {_ID_RULE}")
    log = s.front.streams.log(name, create=not nomkstream)
    if log is None:
        return s.nil()
    held = s.tails  # (a commit round's writer locks: taken once a round a stream)
    if held is not None and trim is None:
        entry_id = s.front.streams.add(log, fields, wanted, held)
    else:
        if held is not None:
            held.release(log)  # (the trim below takes the lock itself)
        entry_id = s.front.streams.add(log, fields, wanted)
    s._wrote_logs[name] = log
    if trim is not None:
        s.front.streams.trim(log, maxlen=trim.maxlen, minid=trim.minid, limit=trim.limit)
    return w.bulk(entry_id)


@dataclass(frozen=True, slots=True)
class Trim:
    """XTRIM's or XADD's trimming: MAXLEN ~ n or MINID ~ id, LIMIT n (0: none)."""

    maxlen: int | None
    minid: Id | None
    limit: int


_ID_RULE = "(logspool assigns ids <ms>-<lsn>: give '*' only, or the id it would assign: <ms>-0 or <ms>-*)"
EXACT_TRIM = (
    "ERR logspool removes entries only a whole segment at a time (by the log's retention): trim "
    "with '~' (MAXLEN ~ n, MINID ~ id); an exact trim ('=' or no '~') is not supported"
)


def parse_trim(args: list[bytes], i: int, *, xadd: bool) -> tuple[Trim | None, int, bool]:
    """Redis's trimming options from ``args[i]`` on: the trim (None if none was given), the index
    of the first argument after them (XADD's id), and NOMKSTREAM (XADD only)."""
    maxlen: int | None = None
    minid: Id | None = None
    limit: int | None = None
    approx = False
    nomkstream = False
    for _ in range(len(args)):  # bounded: each turn takes at least one argument
        if i >= len(args):
            break
        option = args[i].upper()
        more = len(args) - i - 1
        if xadd and args[i] == b"*":
            break
        if option in (b"MAXLEN", b"MINID") and more:
            if maxlen is not None or minid is not None:
                raise RedisError(
                    "ERR syntax error, MAXLEN and MINID options at the same time are not compatible"
                )
            approx = False
            if more >= 2 and args[i + 1] in (b"~", b"="):
                approx = args[i + 1] == b"~"
                i += 1
            if option == b"MAXLEN":
                maxlen = _int(args[i + 1])
                if maxlen < 0:
                    raise RedisError("ERR The MAXLEN argument must be >= 0.")
            else:
                ms, seq = strict_id(args[i + 1])
                minid = (ms, 0 if seq is None else seq)
            i += 2
        elif option == b"LIMIT" and more:
            limit = _int(args[i + 1])
            if limit < 0:
                raise RedisError("ERR The LIMIT argument must be >= 0.")
            i += 2
        elif xadd and option == b"NOMKSTREAM":
            nomkstream = True
            i += 1
        elif xadd:
            break  # the id
        else:
            raise RedisError("ERR syntax error")
    if maxlen is None and minid is None:
        if limit is not None:
            raise RedisError("ERR syntax error, LIMIT cannot be used without specifying a trimming strategy")
        if not xadd:
            raise RedisError("ERR syntax error, XTRIM must be called with a trimming strategy")
        return None, i, nomkstream
    if limit is not None and not approx:
        raise RedisError("ERR syntax error, LIMIT cannot be used without the special ~ option")
    if not approx:
        raise RedisError(EXACT_TRIM)
    return Trim(maxlen, minid, limit or 0), i, nomkstream


@command("XTRIM", -4, "jobs")  # (kind "jobs": runs in the pool, durable on its own)
def _xtrim(s: Session, args: list[bytes]) -> bytes:
    name = _stream_name(args[1])
    trim, i, _ = parse_trim(args, 2, xadd=False)
    if i != len(args):
        raise RedisError("ERR syntax error")
    assert trim is not None
    log = s.front.streams.log(name, create=False)
    if log is None:
        return w.ZERO
    return w.integer(s.front.streams.trim(log, maxlen=trim.maxlen, minid=trim.minid, limit=trim.limit))


@command("XDEL", -3, "stream")
def _xdel(s: Session, args: list[bytes]) -> bytes:
    _stream_name(args[1])
    raise RedisError(
        "ERR logspool logs are append-only: an entry cannot be deleted alone; whole segments go "
        "by the log's retention (XTRIM key MAXLEN ~ n, MINID ~ id; logspool retention)"
    )


@command("XLEN", 2, "stream")
def _xlen(s: Session, args: list[bytes]) -> bytes:
    log = s.front.streams.log(_stream_name(args[1]), create=False)
    return w.integer(0 if log is None else s.front.streams.length(log))


def _range_count(args: list[bytes]) -> int | None:
    if len(args) == 4:
        return None
    if len(args) != 6 or args[4].upper() != b"COUNT":
        raise RedisError("ERR syntax error")
    count = _int(args[5])
    return max(count, 0)


def _xrange(s: Session, args: list[bytes], reverse: bool) -> bytes:
    name = _stream_name(args[1])
    hi_raw, lo_raw = (args[2], args[3]) if reverse else (args[3], args[2])
    start, start_excl = parse_id(lo_raw)
    end, end_excl = parse_id(hi_raw, end=True)
    count = _range_count(args)
    log = s.front.streams.log(name, create=False)
    if log is None or count == 0:
        return w.EMPTY_ARRAY
    wanted = STREAM_REPLY_COUNT_MAX + 1 if count is None else min(count, STREAM_REPLY_COUNT_MAX)
    if reverse:
        entries = s.front.streams.backward(log, end, end_excl, start, start_excl, wanted)
    else:
        entries = s.front.streams.forward(log, start, start_excl, end, end_excl, wanted)
    if count is None and len(entries) > STREAM_REPLY_COUNT_MAX:
        raise RedisError(f"ERR the range holds more than {STREAM_REPLY_COUNT_MAX} entries: give COUNT "
                         "and continue from the last id")  # fmt: skip
    return entries_reply(entries)


@command("XRANGE", -4, "stream")
def _xrange_fwd(s: Session, args: list[bytes]) -> bytes:
    return _xrange(s, args, False)


@command("XREVRANGE", -4, "stream")
def _xrevrange(s: Session, args: list[bytes]) -> bytes:
    return _xrange(s, args, True)


@command("XREAD", -4, "stream")
def _xread(s: Session, args: list[bytes]) -> bytes | Block:
    count = STREAM_REPLY_COUNT_MAX
    block_ms: int | None = None
    i = 1
    while i < len(args) and args[i].upper() != b"STREAMS":
        option = args[i].upper()
        if option == b"COUNT" and i + 1 < len(args):
            wanted = _int(args[i + 1])  # (0 or less: no count, as Redis takes it)
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
            "ERR Unbalanced 'xread' list of streams: for each stream key an ID or '$' must be specified."
        )
    half = len(rest) // 2
    cursors = []
    for raw_name, raw_id in zip(rest[:half], rest[half:], strict=True):
        name = _stream_name(raw_name)
        if raw_id == b"$":
            cursors.append(s.front.streams.last_lsn_cursor(name))
        else:
            after, _ = parse_id(raw_id)
            if after[0] == ID_MAX:
                raise RedisError("ERR Invalid stream ID specified as stream command argument")
            cursors.append(Cursor(name, after=after))
    reply = s.xread_now(cursors, count)
    if reply is not None:
        return reply
    if block_ms is None or s._tx is not None:
        return w.null_array(s.proto)
    deadline = None if not block_ms else time.monotonic() + block_ms / 1000
    watch = ["logs/" + c.name for c in cursors]
    return Block(watch, lambda: (s.xread_now(cursors, count), None), deadline, w.null_array(s.proto))


# The consumer group commands register themselves on import: the server imports this module only.
from . import _resp_group_commands  # noqa: E402, F401
