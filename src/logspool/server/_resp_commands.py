"""The RESP command registry and the commands of a connection (PING, HELLO, AUTH, CLIENT, INFO,
MULTI/EXEC...). A handler takes the connection's ``Session`` and the command's arguments (the name
first) and returns the encoded reply; it raises ``RedisError`` for an error reply. Every command
has Redis's arity (``n``: exactly, ``-n``: at least), a kind, and from it a place where a batch
holding it runs (``places``). The string commands are in ``_resp_strings.py``, the stream commands
in ``_resp_stream_commands.py``; docs/RESP.md lists them all.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .. import _wire, limits
from . import _resp_wire as w
from ._resp_kv import NOT_INTEGER, RedisError, canonical_int, glob_match, key_of

if TYPE_CHECKING:
    from ._resp import Session

REDIS_VERSION = "7.0.0"  # the Redis whose commands and replies this follows (HELLO, INFO)


@dataclass
class Block:
    """A blocking command that found nothing yet (XREAD BLOCK, GETJOB): the connection waits on
    the event loop, holding no thread, and runs ``retry`` in the pool after each wake-up."""

    watch: list[str]  # directories under the data directory whose change may end the wait
    retry: Callable[[], tuple[bytes | None, float | None]]  # (the reply, or None and when to look again)
    deadline: float | None  # time.monotonic(); None: no end
    timeout_reply: bytes  # the reply if the deadline passes


Handler = Callable[["Session", list[bytes]], "bytes | Block"]


@dataclass(frozen=True, slots=True)
class Command:
    handler: Handler
    arity: int  # Redis's: n exactly, or -n at least n (the name counts)
    kind: str  # "conn": no store; "read"; "write": a kv decision; "stream"


COMMANDS: dict[bytes, Command] = {}


def command(name: str, arity: int, kind: str) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        COMMANDS[name.encode()] = Command(fn, arity, kind)
        return fn

    return register


INLINE, WRITER, POOL = 0, 1, 2  # where a batch runs (``_Connection._execute``)
SET_NAMES = (b"SET", b"set")  # a plain SET's spellings on its fast paths (another: the common path)
# Reads that take the store's state as it is, with no disk but a catch-up with the op log: run
# on the event loop. Commands that may take long (a scan of every key, a range of a log, a
# blocking read) run in the pool; every other write runs in a commit round (``_resp_commit.py``).
_SLOW = {b"SCAN", b"KEYS", b"XLEN", b"XRANGE", b"XREVRANGE", b"XREAD"}
# Writes that may take long (every key deleted): in a commit round, on the committer's thread.
SLOW_WRITES = frozenset({b"FLUSHDB", b"FLUSHALL"})


def places() -> dict[bytes, int]:
    places = {}
    for name, spec in COMMANDS.items():
        if name in _SLOW or spec.kind == "jobs":  # (a journal call syncs on its own)
            places[name] = POOL
        elif spec.kind in ("write", "stream") or name == b"EXEC":
            places[name] = WRITER
        else:
            places[name] = INLINE
    return places


def _arity_error(name: bytes) -> RedisError:
    return RedisError(f"ERR wrong number of arguments for '{name.decode(errors='replace').lower()}' command")


def _int(raw: bytes) -> int:
    number = canonical_int(raw)
    if number is None:
        raise RedisError(NOT_INTEGER)
    return number


def _stream_name(raw: bytes) -> str:
    text = raw.decode("ascii", "replace")
    if not _wire.NAME_RE.fullmatch(text):
        raise RedisError(
            "ERR logspool stream keys are log names: [A-Za-z0-9][A-Za-z0-9._-]{0,127} (no '/', no '..')"
        )
    return text


# --- connection commands ------------------------------------------------------------------------
@command("PING", -1, "conn")
def _ping(s: Session, args: list[bytes]) -> bytes:
    if len(args) > 2:
        raise _arity_error(b"ping")
    return w.bulk(args[1]) if len(args) == 2 else w.PONG


@command("ECHO", 2, "conn")
def _echo(s: Session, args: list[bytes]) -> bytes:
    return w.bulk(args[1])


@command("QUIT", -1, "conn")
def _quit(s: Session, args: list[bytes]) -> bytes:
    s.closing = True  # the batch ends with this reply and the connection closes
    return w.OK


@command("AUTH", -2, "conn")
def _auth(s: Session, args: list[bytes]) -> bytes:
    if len(args) > 3:
        raise RedisError("ERR syntax error")
    _authenticate(s, args[1] if len(args) == 2 else args[2], None if len(args) == 2 else args[1])
    return w.OK


def _authenticate(s: Session, password: bytes, user: bytes | None) -> None:
    """AUTH's check, as Redis 7 makes it: without a token the user ``default`` takes any password
    (Redis's ``nopass``), and only the one-argument form is an error."""
    if s.front.server._token is None:
        if user == b"default":
            return
        if user is not None:
            raise RedisError("WRONGPASS invalid username-password pair or user is disabled.")
        raise RedisError(
            "ERR AUTH <password> called without any password configured for the default user. "
            "Are you sure your configuration is correct?"
        )
    if (user is not None and user != b"default") or not s.front.check_token(password):
        raise RedisError("WRONGPASS invalid username-password pair or user is disabled.")
    s.authed = True
    s.conn.parser.authenticated = True  # (the parser is the loop's; a bool store is atomic)


@command("HELLO", -1, "conn")
def _hello(s: Session, args: list[bytes]) -> bytes:
    proto = s.proto
    i = 1
    if len(args) > 1:
        try:
            proto = int(args[1])
        except ValueError:
            raise RedisError("ERR Protocol version is not an integer or out of range") from None
        if proto not in (2, 3):
            raise RedisError("NOPROTO unsupported protocol version")
        i = 2
    name = None
    while i < len(args):
        option = args[i].upper()
        if option == b"AUTH" and i + 2 < len(args):
            _authenticate(s, args[i + 2], args[i + 1])
            i += 3
        elif option == b"SETNAME" and i + 1 < len(args):
            name = _client_name(args[i + 1])
            i += 2
        else:
            raise RedisError(f"ERR Syntax error in HELLO option '{args[i].decode(errors='replace')}'")
    if not s.authed:
        raise RedisError(
            "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO "
            "<proto> AUTH <user> <pass> option can be used to authenticate the client and select the "
            "RESP protocol version at the same time"
        )
    if name is not None:
        s.name = name or None
    s.proto = proto
    from .. import __version__

    pairs = [
        (w.bulk(b"server"), w.bulk(b"redis")),
        (w.bulk(b"version"), w.bulk(REDIS_VERSION.encode())),
        (w.bulk(b"proto"), w.integer(proto)),
        (w.bulk(b"id"), w.integer(s.id)),
        (w.bulk(b"mode"), w.bulk(b"standalone")),
        (w.bulk(b"role"), w.bulk(b"master")),
        (w.bulk(b"modules"), w.EMPTY_ARRAY),
        (w.bulk(b"logspool"), w.bulk(__version__.encode())),
    ]
    return w.mapping(pairs, proto)


def _client_name(raw: bytes) -> str:
    if any(c <= 32 or c >= 127 for c in raw) or len(raw) > limits.KV_OWNER_SIZE_MAX:
        raise RedisError("ERR Client names cannot contain spaces, newlines or special characters.")
    return raw.decode("ascii")


@command("SELECT", 2, "conn")
def _select(s: Session, args: list[bytes]) -> bytes:
    if _int(args[1]) != 0:
        raise RedisError("ERR DB index is out of range")
    return w.OK


@command("CLIENT", -2, "conn")
def _client(s: Session, args: list[bytes]) -> bytes:
    sub = args[1].upper()
    if sub == b"SETNAME" and len(args) == 3:
        s.name = _client_name(args[2]) or None
        return w.OK
    if sub == b"GETNAME" and len(args) == 2:
        return s.maybe(None if s.name is None else s.name.encode())
    if sub == b"ID" and len(args) == 2:
        return w.integer(s.id)
    if sub == b"SETINFO" and len(args) == 4:
        return w.OK
    if sub in (b"NO-EVICT", b"NO-TOUCH") and len(args) == 3:
        return w.OK
    if sub in (b"INFO", b"LIST"):
        line = f"id={s.id} addr={s.conn.peer} name={s.name or ''} db=0 resp={s.proto}\n"
        return w.bulk(line.encode())
    typed = sub.decode(errors="replace").lower()
    raise RedisError(f"ERR unknown subcommand or wrong number of arguments for 'client|{typed}'")


@command("COMMAND", -1, "conn")
def _command(s: Session, args: list[bytes]) -> bytes:
    sub = args[1].upper() if len(args) > 1 else b""
    if sub == b"COUNT":
        return w.integer(len(COMMANDS))
    if sub == b"DOCS":
        return w.mapping([], s.proto)
    if sub == b"INFO":
        names = [a.upper() for a in args[2:]] or sorted(COMMANDS)
        return w.array([_command_info(n) if n in COMMANDS else w.null_array(s.proto) for n in names])
    if sub == b"LIST":
        return w.bulks([n.lower() for n in sorted(COMMANDS)])
    if sub == b"":
        return w.array([_command_info(n) for n in sorted(COMMANDS)])
    raise RedisError(f"ERR unknown subcommand '{sub.decode(errors='replace').lower()}'")


def _command_info(name: bytes) -> bytes:
    spec = COMMANDS[name]
    keyed = spec.kind in ("read", "write", "stream") and abs(spec.arity) >= 2
    flags = [b"write"] if spec.kind == "write" else [b"readonly"] if spec.kind == "read" else []
    return w.array([
        w.bulk(name.lower()), w.integer(spec.arity),
        w.array([w.simple(f.decode()) for f in flags]),
        w.integer(1 if keyed else 0), w.integer(1 if keyed else 0), w.integer(1 if keyed else 0),
    ])  # fmt: skip


@command("INFO", -1, "conn")
def _info(s: Session, args: list[bytes]) -> bytes:
    from .. import __version__

    server = s.front.server
    c = server.counters
    committer = s.front.committer
    with s.view() as v:
        keys = s.front.kv.dbsize(v)
    sections: dict[str, list[tuple[str, object]]] = {
        "server": [("redis_version", REDIS_VERSION), ("logspool_version", __version__),
                   ("redis_mode", "standalone"), ("process_id", os.getpid()),
                   ("tcp_port", s.front.options.port),
                   # uvloop, or asyncio's own loop (``serve --event-loop``)
                   ("logspool_event_loop", "uvloop" if type(s.conn.loop).__module__.startswith("uvloop")
                    else "asyncio"),
                   ("uptime_in_seconds", int(time.time() - server.started))],
        "clients": [("connected_clients", c.connections)],
        "persistence": [("aof_enabled", int(server.stores.durability == "always")),
                        ("logspool_durability", server.stores.durability)],
        "stats": [("total_connections_received", c.connections_total),
                  ("total_commands_processed", sum(s.front.requests.values())),
                  ("rejected_connections", c.refused), ("total_net_input_bytes", c.bytes_in),
                  ("total_net_output_bytes", c.bytes_out), ("total_error_replies", c.errors),
                  ("logspool_commit_rounds", committer.rounds if committer else 0),
                  ("logspool_commit_batches", committer.batches if committer else 0),
                  ("logspool_commit_rounds_on_loop", committer.rounds_here if committer else 0),
                  ("logspool_commit_rounds_alone", committer.rounds_alone if committer else 0),
                  ("logspool_commit_rounds_handed", committer.handed if committer else 0),
                  ("logspool_commit_decide_us", int(committer.decide_s * 1e6) if committer else 0),
                  ("logspool_commit_sync_us", int(committer.sync_s * 1e6) if committer else 0),
                  ("logspool_commit_delay_us", int(committer.delay_s * 1e6) if committer else 0)],
        "keyspace": [("db0", f"keys={keys},expires=0,avg_ttl=0")] if keys else [],
    }  # fmt: skip
    wanted = {a.decode(errors="replace").lower() for a in args[1:]}
    lines = []
    for title, fields in sections.items():
        if wanted and not wanted & {title, "all", "everything", "default"}:
            continue
        lines.append(f"# {title.capitalize()}")
        lines += [f"{k}:{v}" for k, v in fields]
        lines.append("")
    return w.bulk("\r\n".join(lines).encode())


@command("CONFIG", -2, "conn")
def _config(s: Session, args: list[bytes]) -> bytes:
    sub = args[1].upper()
    if sub == b"GET" and len(args) >= 3:
        always = s.front.server.stores.durability == "always"
        known = {b"appendonly": b"yes" if always else b"no", b"save": b"", b"databases": b"1",
                 b"appendfsync": b"always" if always else b"everysec"}  # fmt: skip
        pairs = [
            (w.bulk(k), w.bulk(v))
            for k, v in known.items()
            if any(glob_match(p.lower(), k) for p in args[2:])
        ]
        return w.mapping(pairs, s.proto)
    if sub == b"RESETSTAT":
        return w.OK
    raise RedisError(
        "ERR logspool's settings are its command line (logspool serve --help); CONFIG SET is not supported"
    )


@command("TIME", 1, "conn")
def _time(s: Session, args: list[bytes]) -> bytes:
    now = time.time_ns() // 1000
    return w.bulks([b"%d" % (now // 1_000_000), b"%d" % (now % 1_000_000)])


# --- transactions ---------------------------------------------------------------------------------
@command("MULTI", 1, "conn")
def _multi(s: Session, args: list[bytes]) -> bytes:
    if s.multi is not None:
        raise RedisError("ERR MULTI calls can not be nested")
    s.multi = []
    s.multi_failed = False
    return w.OK


@command("DISCARD", 1, "conn")
def _discard(s: Session, args: list[bytes]) -> bytes:
    if s.multi is None:
        raise RedisError("ERR DISCARD without MULTI")
    s.multi = None
    s.watched = {}
    return w.OK


@command("WATCH", -2, "read")
def _watch(s: Session, args: list[bytes]) -> bytes:
    if s.multi is not None:
        raise RedisError("ERR WATCH inside MULTI is not allowed")
    with s.view() as v:
        for raw in args[1:]:
            key = key_of(raw)
            entry = v.live(key)
            s.watched[key] = None if entry is None else entry.version
    return w.OK


@command("UNWATCH", 1, "conn")
def _unwatch(s: Session, args: list[bytes]) -> bytes:
    s.watched = {}
    return w.OK


@command("EXEC", 1, "conn")
def _exec(s: Session, args: list[bytes]) -> bytes:
    """The queued commands, in one decision of the key-value store: atomic for every process and
    written in one write (stream commands in it run in order but are not part of the decision)."""
    if s.multi is None:
        raise RedisError("ERR EXEC without MULTI")
    queued, s.multi = s.multi, None
    watched, s.watched = s.watched, {}
    if s.multi_failed:
        raise RedisError("EXECABORT Transaction discarded because of previous errors.")
    with s.decide() as d:  # (the committer's round, if this runs in one)
        for key, version in watched.items():
            entry = d.live(key)
            if (None if entry is None else entry.version) != version:
                return w.null_array(s.proto)
        s._tx = d
        try:
            replies = []
            for cmd in queued:
                reply = s.execute(cmd)
                replies.append(w.null_array(s.proto) if isinstance(reply, Block) else reply)
        finally:
            s._tx = None
    return w.array(replies)
