"""The RESP stream commands on logs (XADD, XLEN, XRANGE, XREVRANGE, XREAD), parsed here and run
by ``_resp_streams.Streams``; a blocked XREAD is handed back to the connection as a ``Block``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from . import _resp_wire as w
from ._resp_commands import Block, _arity_error, _int, _stream_name, command
from ._resp_kv import RedisError
from ._resp_streams import ID_MAX, STREAM_REPLY_COUNT_MAX, Cursor, entries_reply, parse_id

if TYPE_CHECKING:
    from ._resp import Session


# --- streams --------------------------------------------------------------------------------------
@command("XADD", -5, "stream")
def _xadd(s: Session, args: list[bytes]) -> bytes:
    name = _stream_name(args[1])
    i = 2
    nomkstream = False
    while i < len(args) and args[i].upper() in (b"NOMKSTREAM", b"MAXLEN", b"MINID", b"LIMIT"):
        if args[i].upper() != b"NOMKSTREAM":
            raise RedisError("ERR logspool streams are trimmed by the log's retention (logspool retention), "
                             "not by XADD MAXLEN or MINID")  # fmt: skip
        nomkstream = True
        i += 1
    if i >= len(args):
        raise _arity_error(b"xadd")
    if args[i] != b"*":
        raise RedisError("ERR logspool assigns stream ids itself (<ms>-<lsn>): XADD takes the id '*' only")
    fields = args[i + 1 :]
    if not fields or len(fields) % 2:
        raise _arity_error(b"xadd")
    log = s.front.streams.log(name, create=not nomkstream)
    if log is None:
        return s.nil()
    entry_id = s.front.streams.add(log, fields)
    s._wrote_logs[name] = log
    return w.bulk(entry_id)


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
            count = min(max(_int(args[i + 1]), 1), STREAM_REPLY_COUNT_MAX)
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
