"""RESP, the Redis serialization protocol: the command parser and the reply encoders. Pure: no I/O.

A client sends commands as arrays of bulk strings (``*2\\r\\n$3\\r\\nGET\\r\\n$1\\r\\nk\\r\\n``) or as
an inline line (``PING\\r\\n``, what a person types into telnet); the server answers in RESP2, or
in RESP3 after ``HELLO 3`` (nulls, maps, doubles). Specification: https://redis.io/docs/latest/
develop/reference/protocol-spec/ (docs/RESP.md says what logspool speaks of it).

Invariants of the parser (every bound is checked before anything is allocated or copied):
- a command is an array of bulk strings, as Redis requires of clients: a nested array, or any
  other type as an element, is a protocol error (so nesting is bounded at one level);
- at most ``RespLimits.args_max`` elements, each at most ``bulk_size_max`` bytes, all of them at
  most ``command_size_max``; a line (array or bulk header, inline command) at most
  ``line_size_max`` bytes; before AUTH (when a token is set), Redis's tighter bounds (10 elements
  of 16 KiB), so that an unauthenticated client cannot make the server buffer much;
- the bytes buffered for a command that is not complete yet are bounded by the same numbers: the
  parser reads a header, checks it, and only then waits for the bytes it announces.
A violation raises ``RespProtocolError`` with Redis's own wording; the connection answers
``-ERR Protocol error: ...`` and closes, as Redis does.

**hiredis.** With the ``hiredis`` package (a dependency; the parser is pure Python without
it), the complete multibulk commands of a read are built by its C reader, ten times faster than
the Python loop. It is an accelerator only: whatever it does not take whole, the Python parser
parses from the same place, and says what is wrong in Redis's words. hiredis allocates what an
aggregate header announces (``*4294967295`` is a 32 GiB list, and nested arrays allocate level
after level), so it is fed only bytes that a C-speed pre-check has bounded (``_FAST_SIZE_MAX``
bytes at most, and the counts after every byte that may start an aggregate, ``*%~>|``, summing
to at most ``args_max`` (proven at C speed when no count has three digits: then 99 a header at
most), so all it can allocate is ``args_max`` slots whatever the nesting; a
payload byte that looks like a header only sends that read to the Python parser). The commands
it returns are formatted back as a client sends them and must be the very bytes read: bulk
strings only (no nesting, no other type), each ended by CRLF (hiredis, as redis-server, skips
those two bytes unread), and where the last one ends is known without trusting hiredis. It is
fed a read's unparsed bytes whole and its state dropped after, so it holds nothing across reads.
Inline commands and everything before AUTH (when a token is set) go through the Python parser.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

try:
    import hiredis as _hiredis
except ImportError:  # pragma: no cover (a dependency; the pure-Python parser does the same)
    _hiredis = None  # type: ignore[assignment]


def _pack(args: tuple[Any, ...]) -> bytes:
    """A command as a client sends it (``*N``, then ``$len`` and the bytes of each argument):
    hiredis's ``pack_command`` (C; 0.33 us a GET against 0.56 formatted in Python). An element
    that was not sent as a bulk string comes back from the reader as another type (a list, an
    int, None, an error), which this refuses (TypeError) or formats as a bulk string: never the
    bytes it was sent as (those start with another type byte than ``$``)."""
    return _hiredis.pack_command(args)  # type: ignore[no-any-return]


class RespProtocolError(Exception):
    """The bytes a client sent are not RESP (or break a bound): its connection is closed."""


@dataclass(frozen=True, slots=True)
class RespLimits:
    """The parser's bounds (see the module docstring). Units: bytes, or elements."""

    bulk_size_max: int = 16 * 1024 * 1024  # one argument: a 15 MiB value with room to spare
    command_size_max: int = 64 * 1024 * 1024  # all the arguments of one command (an MSET)
    args_max: int = 1024 * 1024  # elements of one command
    line_size_max: int = 64 * 1024  # a header line or an inline command (Redis: 64 KiB)
    unauthenticated_args_max: int = 10  # before AUTH, when a token is set (as Redis 7)
    unauthenticated_bulk_size_max: int = 16 * 1024


_CRLF = b"\r\n"
# hiredis takes at most this many bytes at once (larger reads hold large values: the Python
# parser's cost per command is small beside them), so no bulk it returns can pass a size bound.
_FAST_SIZE_MAX = 64 * 1024
_AGGREGATE_COUNT = re.compile(rb"[*%~>|](\d{1,19})")  # (every place hiredis might read one)
_AGGREGATE_BYTES = b"*%~>|"
# ``_pack`` for many commands, called from C (``map``): no Python call a command.
_PACK: Callable[[tuple[bytes, ...]], bytes] = _hiredis.pack_command if _hiredis is not None else None  # type: ignore[assignment]
_LARGE_COUNT = re.compile(rb"[*%~>|]\d{3}")  # (a count of 100 or more)
_OTHER_AGGREGATE = re.compile(rb"[*%~>|]")  # (after a lone command's own header: see _fast_one)


def _count(line: bytes | bytearray, what: str) -> int:
    """A decimal count of a header line: digits, optionally a minus sign; 19 digits at most."""
    if 0 < len(line) <= 20 and (line.isdigit() or (line[:1] == b"-" and line[1:].isdigit())):
        return int(line)
    raise RespProtocolError(f"invalid {what}")


class RespParser:
    """Turns the bytes a connection received into commands: ``feed`` then ``commands``. One per
    connection; not shared between threads."""

    def __init__(self, limits: RespLimits, *, fast: bool = True) -> None:
        """``fast``: parse complete commands with hiredis when it is installed (see the module
        docstring); False: the pure-Python parser only."""
        self.limits = limits
        self._reader: Any = _hiredis.Reader() if fast and _hiredis is not None else None
        self._buf = bytearray()
        self._pos = 0  # the start of the first command not parsed yet
        self.authenticated = True  # False: the unauthenticated bounds apply
        self._error: RespProtocolError | None = None  # found after commands still to be answered

    @property
    def buffered(self) -> int:
        """Bytes received and not yet part of a parsed command."""
        return len(self._buf) - self._pos

    @property
    def failed(self) -> bool:
        """Whether a protocol error was found (behind commands already returned)."""
        return self._error is not None

    def feed(self, data: bytes) -> None:
        if self._pos and self._pos == len(self._buf):
            self._buf.clear()
            self._pos = 0
        self._buf += data

    def commands(self, count_max: int) -> list[list[bytes]]:
        """The complete commands received (at most ``count_max``: the rest stay buffered);
        RespProtocolError if the bytes break the protocol or a bound."""
        if self._error is not None:
            raise self._error
        out: list[list[bytes]] = []
        buf = self._buf
        end = len(buf)
        fast = self._reader is not None and self.authenticated
        try:
            while self._pos < end and len(out) < count_max:
                if fast and buf[self._pos] == 42:
                    if self._fast(buf, end, count_max, out):
                        continue
                    fast = False  # (not again in this call: each try copies and scans the rest)
                # "*": a multibulk array; anything else: an inline command
                cmd = self._multibulk(buf, end) if buf[self._pos] == 42 else self._inline(buf, end)
                if cmd is None:
                    break
                if cmd:
                    out.append(cmd)
        except RespProtocolError as err:
            self._error = err  # raised again by every later call: the connection is done
            if not out:
                raise
            # (the commands before it are answered first, as Redis does)
        finally:
            if self._pos > 65536 and self._pos * 2 > len(buf):  # reclaim the consumed prefix
                del buf[: self._pos]
                self._pos = 0
        return out

    def _fast(self, buf: bytearray, end: int, count_max: int, out: list[list[bytes]]) -> bool:
        """hiredis parses the complete multibulk commands from ``_pos`` on (see the module
        docstring). False if it took none: the Python parser goes on from ``_pos``."""
        start = self._pos
        if end - start > _FAST_SIZE_MAX:
            return False
        if buf.find(b"*", start + 1, end) < 0:
            return self._fast_one(buf, start, end, out)
        chunk = bytes(buf[start:end])
        # The bound on what hiredis may allocate, at C speed: when no count after an aggregate
        # byte has three digits, the counts sum to at most 99 a header (a pipeline of GETs: 16
        # headers of *2); else each count is summed (a third of a pipelined GET's parse).
        headers = len(chunk) - len(chunk.translate(None, _AGGREGATE_BYTES))
        # (one command costs less in Python than hiredis's fixed cost and the checks below)
        if headers < 2:
            return False
        bounded = headers * 99 <= self.limits.args_max and not _LARGE_COUNT.search(chunk)
        if not bounded and sum(map(int, _AGGREGATE_COUNT.findall(chunk))) > self.limits.args_max:
            return False
        reader = self._reader
        reader.feed(chunk)
        try:
            # (bounded: hiredis returns False once the bytes fed hold no complete reply)
            got: list[list[bytes]] = list(iter(reader.gets, False))
        except _hiredis.ProtocolError:
            self._reader = _hiredis.Reader()
            return False  # (the Python parser answers the commands before it, then the error)
        if len(got) > count_max - len(out):
            del got[count_max - len(out) :]  # (their bytes stay buffered: fed again next time)
            self._reader = _hiredis.Reader()
        elif reader.has_data():  # (a command not complete yet: fed again next time)
            self._reader = _hiredis.Reader()
        if not all(got):
            return False  # an empty or null array (ignored, as Redis does: the Python parser)
        # The commands as a client must have sent them, against the bytes: hiredis skips the two
        # bytes after a bulk string unread (as redis-server does) and this parser wants a CRLF
        # there; and a command of anything but bulk strings (nesting) fails to format.
        try:
            sent = b"".join(map(_PACK, map(tuple, got)))
        except TypeError:
            return False  # nesting, or another type: the Python parser says which
        if not chunk.startswith(sent):
            return False  # (a bulk string not ended by CRLF: the Python parser says so)
        out.extend(got)
        self._pos = start + len(sent)
        return bool(got)

    def _fast_one(self, buf: bytearray, start: int, end: int, out: list[list[bytes]]) -> bool:
        """``_fast`` for a read that holds one command (no second ``*``: a SET or GET of one
        client waiting for each reply), with a cheaper pre-check: the array's count, read here
        and bounded, is the only aggregate header in the bytes (no ``%~>|`` anywhere after it),
        so all hiredis can allocate is that many slots. 2.0 us a SET of 100 bytes against 5.9
        for the Python parser (the pre-check of several commands costs more than it saves
        here). The command is formatted back and must be the very bytes read, as in ``_fast``."""
        nl = buf.find(_CRLF, start + 1, min(end, start + 22))
        if nl < 0:
            return False
        digits = buf[start + 1 : nl]
        if not digits.isdigit() or int(digits) > self.limits.args_max:
            return False  # (the Python parser says what is wrong)
        chunk = bytes(buf[start:end])
        if _OTHER_AGGREGATE.search(chunk, nl - start):
            return False
        reader = self._reader
        reader.feed(chunk)
        try:
            cmd = reader.gets()
        except _hiredis.ProtocolError:
            self._reader = _hiredis.Reader()
            return False
        if reader.has_data():  # (not complete yet, or bytes after it: fed again next time)
            self._reader = _hiredis.Reader()
        if not cmd:
            return False  # (incomplete; or an empty array, which the Python parser skips)
        try:
            sent = _pack(tuple(cmd))
        except TypeError:
            return False  # (nesting, or another type)
        if not chunk.startswith(sent):
            return False  # (a bulk string not ended by CRLF, a length spelled otherwise)
        out.append(cmd)
        self._pos = start + len(sent)
        return True

    def _line_end(self, buf: bytearray, start: int, end: int, what: str) -> int:
        """Where the CRLF ending the line at ``start`` is, or -1 if it has not arrived."""
        nl = buf.find(_CRLF, start, min(end, start + self.limits.line_size_max + 2))
        if nl < 0 and end - start > self.limits.line_size_max:
            raise RespProtocolError(f"too big {what} string")
        return nl

    def _multibulk(self, buf: bytearray, end: int) -> list[bytes] | None:
        limits = self.limits
        pos = self._pos
        nl = self._line_end(buf, pos, end, "mbulk count")
        if nl < 0:
            return None
        count = _count(buf[pos + 1 : nl], "multibulk length")
        args_max = limits.args_max if self.authenticated else limits.unauthenticated_args_max
        if count > args_max:
            what = "multibulk length" if self.authenticated else "unauthenticated multibulk length"
            raise RespProtocolError(f"invalid {what}")
        pos = nl + 2
        if count <= 0:  # Redis ignores an empty or null array
            self._pos = pos
            return []
        bulk_max = limits.bulk_size_max if self.authenticated else limits.unauthenticated_bulk_size_max
        line_max = limits.line_size_max
        total = 0
        args: list[bytes] = []
        find = buf.find
        # (the hot loop of every command: the line search and the count written out, no calls)
        for _ in range(count):
            if pos >= end:
                return None
            if buf[pos] != 36:  # "$"
                raise RespProtocolError(f"expected '$', got '{chr(buf[pos])}'")
            nl = find(_CRLF, pos, min(end, pos + line_max + 2))
            if nl < 0:
                if end - pos > line_max:
                    raise RespProtocolError("too big bulk count string")
                return None
            digits = buf[pos + 1 : nl]
            if not digits.isdigit() or len(digits) > 19:  # (no sign: a negative length is invalid)
                what = "bulk length" if self.authenticated else "unauthenticated bulk length"
                raise RespProtocolError(f"invalid {what}")
            size = int(digits)
            if size > bulk_max:
                what = "bulk length" if self.authenticated else "unauthenticated bulk length"
                raise RespProtocolError(f"invalid {what}")
            total += size
            if total > limits.command_size_max:
                raise RespProtocolError("command too large (more than command_size_max bytes)")
            start = nl + 2
            stop = start + size
            if end < stop + 2:
                return None
            if buf[stop] != 13 or buf[stop + 1] != 10:
                raise RespProtocolError("bulk string not terminated by CRLF")
            args.append(bytes(buf[start:stop]))
            pos = stop + 2
        self._pos = pos
        return args

    def _inline(self, buf: bytearray, end: int) -> list[bytes] | None:
        pos = self._pos
        nl = buf.find(b"\n", pos, min(end, pos + self.limits.line_size_max + 1))
        if nl < 0:
            if end - pos > self.limits.line_size_max:
                raise RespProtocolError("too big inline request")
            return None
        line = bytes(buf[pos:nl]).rstrip(b"\r")
        self._pos = nl + 1
        args = split_inline(line)
        if len(args) > (self.limits.args_max if self.authenticated else self.limits.unauthenticated_args_max):
            raise RespProtocolError("invalid multibulk length")
        return args


def split_inline(line: bytes) -> list[bytes]:
    """The arguments of an inline command: split on spaces, with "double quotes" (and \\n, \\t,
    \\xHH escapes) and 'single quotes', as redis-cli and Redis (sdssplitargs) read them."""
    args: list[bytes] = []
    i, n = 0, len(line)
    while i < n:  # bounded: every turn consumes at least one byte
        while i < n and line[i] in b" \t":
            i += 1
        if i >= n:
            break
        arg = bytearray()
        quote = line[i] if line[i] in b"\"'" else 0
        if quote:
            i += 1
            while True:
                if i >= n:
                    raise RespProtocolError("unbalanced quotes in request")
                c = line[i]
                if c == quote:
                    i += 1
                    if i < n and line[i] not in b" \t":
                        raise RespProtocolError("unbalanced quotes in request")
                    break
                if c == 92 and i + 1 < n:  # backslash
                    nxt = line[i + 1]
                    if quote == 34 and nxt == 120 and i + 3 < n:  # \xHH
                        try:
                            arg.append(int(line[i + 2 : i + 4], 16))
                            i += 4
                            continue
                        except ValueError:
                            pass
                    if quote == 34:
                        arg.append({110: 10, 114: 13, 116: 9, 98: 8, 97: 7}.get(nxt, nxt))
                        i += 2
                        continue
                    if nxt == 39:
                        arg.append(39)
                        i += 2
                        continue
                arg.append(c)
                i += 1
        else:
            while i < n and line[i] not in b" \t":
                arg.append(line[i])
                i += 1
        args.append(bytes(arg))
    return args


# --- replies -----------------------------------------------------------------------------------
OK = b"+OK\r\n"
QUEUED = b"+QUEUED\r\n"
PONG = b"+PONG\r\n"
NULL2 = b"$-1\r\n"
NULL3 = b"_\r\n"
NULL_ARRAY2 = b"*-1\r\n"
EMPTY_ARRAY = b"*0\r\n"
ZERO = b":0\r\n"
ONE = b":1\r\n"


def bulk(value: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(value), value)


def simple(text: str) -> bytes:
    return b"+" + _one_line(text) + _CRLF


def error(text: str) -> bytes:
    """An error reply; ``text`` starts with its code (``ERR``, ``WRONGTYPE``, ``NOAUTH``...)."""
    return b"-" + _one_line(text) + _CRLF


def integer(value: int) -> bytes:
    return b":%d\r\n" % value


def array(items: list[bytes]) -> bytes:
    """An array of replies already encoded."""
    return b"*%d\r\n%s" % (len(items), b"".join(items))


def bulks(values: list[bytes]) -> bytes:
    return b"*%d\r\n%s" % (len(values), b"".join([b"$%d\r\n%s\r\n" % (len(v), v) for v in values]))


def null(proto: int) -> bytes:
    return NULL3 if proto == 3 else NULL2


def null_array(proto: int) -> bytes:
    return NULL3 if proto == 3 else NULL_ARRAY2


def mapping(pairs: list[tuple[bytes, bytes]], proto: int) -> bytes:
    """A map of encoded keys to encoded values: RESP3 ``%``, a flat array in RESP2."""
    head = b"%%%d\r\n" % len(pairs) if proto == 3 else b"*%d\r\n" % (2 * len(pairs))
    return head + b"".join(k + v for k, v in pairs)


def _one_line(text: str) -> bytes:
    """A status or error line: no CR or LF inside (they would end it early)."""
    return text.replace("\r", " ").replace("\n", " ").encode("utf-8", "replace")
