"""``logspool kv ...``: the key-value store from the shell (thin over ``logspool.kv`` and, with
``--server``, ``logspool.client``). docs/KV.md, "The CLI", is the user's description.

Every command takes the store as a directory (``logspool kv get DIR KEY``) or on a daemon:
``--server HOST:PORT`` with ``--store NAME`` or, as ``cat --server`` does, the store's name in
place of DIR; the token from ``--token`` or ``LOGSPOOL_TOKEN``.

Output: a string is printed as text, bytes escaped (``\\xNN`` for a byte that is not UTF-8 text
or is a control character, ``\\\\`` for a backslash; ``get --raw`` writes the bytes themselves),
integers and floats as numbers, booleans as ``true``/``false``, a void value as an empty line.
Lines of ``range``, ``match`` and ``watch`` are one entry each (KEY, a tab, the value), so their
strings are escaped as bytes are. ``--json`` (every command) prints JSON instead: bytes as
``value_base64``; ``range``, ``match`` and ``watch`` one object a line.

Exit codes: 0 ok, 1 error (message on stderr; also ``get`` of a key that holds no value, with
nothing on stdout, and ``set --nx`` of a key that holds one), 2 usage. Ctrl-C ends ``watch`` with 0.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Generator, Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from .. import limits

if TYPE_CHECKING:
    from ..kv import Value  # the store and the client are imported by the commands (CLI start-up)

_PAGE_COUNT = 1000  # keys a range or match page holds
_PAGE_BYTES_MAX = 4 * 1024 * 1024  # and bytes of keys and values (or one value)
_WATCH_POLL_S = 0.5  # a watch checks for Ctrl-C, --timeout and (locally) expiries this often
_TYPES = ("string", "bytes", "int", "float", "bool", "null")


# --- the store: a directory or a daemon's ---------------------------------------------------------
class _Target:
    """The store a command works on: ``store`` has ``kv.Store``'s calls (a ``RemoteKV`` has the
    same); ``where`` names it in messages (the directory, or HOST:PORT/NAME)."""

    def __init__(self, store: Any, where: str, client: Any = None, name: str = "") -> None:
        self.store = store
        self.where = where
        self.client = client
        self.name = name


@contextlib.contextmanager
def _open(args: argparse.Namespace, *, create: bool) -> Iterator[_Target]:
    if args.server is None:
        from .. import kv

        with kv.open(args.dir, create=create) as store:
            yield _Target(store, args.dir)
        return
    from ..client import connect

    token = args.token or os.environ.get("LOGSPOOL_TOKEN")
    with connect(args.server, token=token, timeout=30) as client:
        yield _Target(client.kv(args.dir), f"{args.server}/{args.dir}", client, args.dir)


def _words(args: argparse.Namespace, names: tuple[str, ...], optional: int = 0, more: bool = False) -> None:
    """Give the positional words their names: DIR (unless --server with --store), then ``names``,
    of which the last ``optional`` may be left out; with ``more``, the last takes the rest."""
    words = list(args.words)
    if args.store is not None:
        if args.server is None:
            args.parser.error("--store NAME names a store on a daemon: give --server HOST:PORT too")
        args.dir = args.store
    elif words:
        args.dir = words.pop(0)
    else:
        args.parser.error("give DIR (with --server: the store's name, or --store NAME)")
    least = len(names) - optional
    if len(words) < least or (len(words) > len(names) and not more):
        wanted = " ".join(n.upper() for n in names)
        args.parser.error(f"expected {wanted} after the store, got {len(words)} word(s): {words!r}")
    for i, name in enumerate(names):
        if more and i == len(names) - 1:
            setattr(args, name, words[i:])
        else:
            setattr(args, name, words[i] if i < len(words) else None)


# --- values as text and as JSON -------------------------------------------------------------------
def _escaped(text: str) -> str:
    """One line's worth: backslashes doubled, control characters and bytes that were not UTF-8
    text (surrogate escapes) as ``\\n``, ``\\t``, ``\\r`` or ``\\xNN``."""
    out = []
    for ch in text:
        code = ord(ch)
        if ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8 text
            out.append(f"\\x{code - 0xDC00:02x}")
        else:
            out.append(ch)
    return "".join(out)


def _text(value: object, *, line: bool) -> str:
    """How a value prints: see the module docstring (``line``: inside a one-entry line)."""
    if isinstance(value, bytes):
        return _escaped(value.decode("utf-8", "surrogateescape"))
    if isinstance(value, str):
        return _escaped(value) if line else value
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)  # int, float (repr: the shortest text that reads back as the same float)


def _type_of(value: object) -> str:
    from ..kv import _ops as ops

    return ops.TYPES[ops.encode_value(value)[0]]


def _value_json(value: object) -> dict[str, Any]:
    """``{"type", "value"}``, or ``{"type": "bytes", "value_base64"}``."""
    if isinstance(value, bytes):
        return {"type": "bytes", "value_base64": base64.b64encode(value).decode("ascii")}
    return {"type": _type_of(value), "value": value}


def _time(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _entry_json(v: Value) -> dict[str, Any]:
    return {
        "key": v.key,
        **_value_json(v.value),
        "size": v.size,
        "version": v.version,
        "created": _time(v.created),
        "modified": _time(v.modified),
        "expire_at": _time(v.expire_at),
        "touch": v.touch,
        "persist": v.persist,
        "locked_by": v.locked_by,
        "lock_until": _time(v.lock_until),
    }


def _print_json(obj: object) -> None:
    print(json.dumps(obj, ensure_ascii=False), flush=True)


# --- the commands ---------------------------------------------------------------------------------
def _cmd_get(args: argparse.Namespace) -> int:
    _words(args, ("key",))
    with _open(args, create=False) as t:
        found = t.store.entry(args.key)  # a read: it touches, as get does (KV.md, Touch)
    if found is None:
        print(f"logspool kv get: {t.where}: no key {args.key!r}", file=sys.stderr)
        return 1
    if args.json:
        _print_json(_entry_json(found))
    elif args.raw:
        value = found.value
        raw = value if isinstance(value, bytes) else _text(value, line=False).encode("utf-8")
        sys.stdout.buffer.write(raw)
        sys.stdout.buffer.flush()
    else:
        print(_text(found.value, line=False))
    return 0


def _parse_value(args: argparse.Namespace) -> object:
    """VALUE as ``--type`` says, or stdin's bytes (whole) when VALUE is left out."""
    kind = args.type
    if kind == "null":
        if args.value is not None:
            args.parser.error("--type null takes no VALUE")
        return None
    if args.value is None:
        raw = sys.stdin.buffer.read(limits.KV_VALUE_SIZE_MAX + 1)
        if len(raw) > limits.KV_VALUE_SIZE_MAX:
            raise ValueError(f"stdin holds more than the value limit of {limits.KV_VALUE_SIZE_MAX} bytes")
        if kind == "bytes":
            return raw
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError("stdin is not UTF-8 text: give --type bytes to store it as bytes") from None
    else:
        text = args.value
        if kind == "bytes":
            return os.fsencode(text)  # the argument's bytes, as the shell passed them
    if kind == "string":
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("VALUE is not UTF-8 text: give --type bytes to store it as bytes") from None
        return text
    try:
        if kind == "int":
            return int(text)
        if kind == "float":
            return float(text)
    except ValueError:
        args.parser.error(f"VALUE is not {'an integer' if kind == 'int' else 'a number'}: {text!r}")
    truth = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
    if text.strip().lower() not in truth:
        args.parser.error(f"VALUE is not a boolean (true or false): {text!r}")
    return truth[text.strip().lower()]


def _cmd_set(args: argparse.Namespace) -> int:
    _words(args, ("key", "value"), optional=1)
    value = _parse_value(args)
    with _open(args, create=True) as t:
        done = t.store.set(args.key, value, overwrite=not args.nx, ttl=args.ttl)
    if not done:
        print(f"logspool kv set: {t.where}: key {args.key!r} holds a value; not set (--nx)", file=sys.stderr)
        return 1
    if args.json:
        _print_json({"key": args.key, "set": True})
    return 0


def _cmd_del(args: argparse.Namespace) -> int:
    _words(args, ("keys",), more=True)
    with _open(args, create=False) as t:
        removed = sum(1 for key in args.keys if t.store.delete(key))
    if args.json:
        _print_json({"deleted": removed})
    else:
        print(removed)
    return 0


def _number(text: str) -> int | float:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


def _cmd_incr(args: argparse.Namespace) -> int:
    _words(args, ("key", "by"), optional=1)
    try:
        amount = 1 if args.by is None else _number(args.by)
    except argparse.ArgumentTypeError as err:
        args.parser.error(f"BY: {err}")
    with _open(args, create=True) as t:
        result = t.store.add(args.key, amount)
    if args.json:
        _print_json({"key": args.key, **_value_json(result)})
    else:
        print(_text(result, line=True))
    return 0


def _pages(fetch: Callable[[str | None, int], Any], limit: int | None) -> Iterator[Value]:
    """The values of the pages ``fetch(cursor, count)`` gives, until the last or ``limit``."""
    left = limit
    cursor: str | None = None
    for _ in range(1 << 40):  # bounded: each turn reads a page or ends
        page = fetch(cursor, _PAGE_COUNT if left is None else min(left, _PAGE_COUNT))
        yield from page
        if left is not None:
            left -= len(page)
        if page.cursor is None or left == 0:
            return
        cursor = page.cursor
    raise AssertionError("2^40 pages and the listing goes on")


def _print_entries(values: Iterator[Value], args: argparse.Namespace) -> int:
    for v in values:
        if args.json:
            _print_json({"key": v.key} if args.keys_only else {"key": v.key, **_value_json(v.value)})
        elif args.keys_only:
            print(_escaped(v.key))
        else:
            print(f"{_escaped(v.key)}\t{_text(v.value, line=True)}")
    sys.stdout.flush()
    return 0


def _cmd_range(args: argparse.Namespace) -> int:
    _words(args, ("start", "end"), optional=2)
    data = not args.keys_only
    with _open(args, create=False) as t:

        def fetch(cursor: str | None, count: int) -> Any:
            return t.store.range(args.start or "", args.end, limit=count, cursor=cursor, data=data,
                                 bytes_max=_PAGE_BYTES_MAX)  # fmt: skip

        return _print_entries(_pages(fetch, args.limit), args)


def _cmd_match(args: argparse.Namespace) -> int:
    _words(args, ("pattern",))
    data = not args.keys_only
    with _open(args, create=False) as t:

        def fetch(cursor: str | None, count: int) -> Any:
            return t.store.match(args.pattern, limit=count, cursor=cursor, data=data, timeout=1.0,
                                 bytes_max=_PAGE_BYTES_MAX)  # fmt: skip

        return _print_entries(_pages(fetch, args.limit), args)


def _cmd_watch(args: argparse.Namespace) -> int:
    _words(args, ("keys",), more=True)
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    with _open(args, create=False) as t:
        shown = 0
        changes = _changes_remote(t, args.keys) if t.client is not None else _changes_local(t, args.keys)
        try:
            next(changes)  # (the first is None, once the versions now are known: changes come after)
            print(
                f"logspool kv watch: watching {len(args.keys)} key(s) of {t.where}",
                file=sys.stderr,
                flush=True,
            )
            for key in changes:
                if key is not None:
                    _print_change(t, key, args)
                    shown += 1
                    if args.count is not None and shown >= args.count:
                        return 0
                if deadline is not None and time.monotonic() >= deadline:
                    return 0
        except KeyboardInterrupt:
            return 0  # Ctrl-C is how a watch ends
        finally:
            changes.close()
    return 0


def _changes_local(t: _Target, keys: list[str]) -> Generator[str | None, None, None]:
    """The keys that change (any process's writes, or an expiry), as they do; None every
    ``_WATCH_POLL_S`` seconds with no change. Runs until the caller stops (Ctrl-C, --count...)."""

    def version(key: str) -> int | None:
        found = t.store.entry(key, data=False, touch=False)
        return None if found is None else int(found.version)

    seen = {key: version(key) for key in keys}
    yield None
    while True:  # (a watch runs until it is stopped)
        t.store.wait(_WATCH_POLL_S)
        changed = False
        for key in keys:
            now = version(key)
            if now != seen[key]:
                seen[key] = now
                changed = True
                yield key
        if not changed:
            yield None


def _changes_remote(t: _Target, keys: list[str]) -> Generator[str | None, None, None]:
    """As ``_changes_local``, from the daemon's kv LISTEN (PROTOCOL.md §4: ``{key, version}``)."""
    watch = t.client.watch(t.name, keys)  # replies once the daemon knows the versions now
    try:
        yield None
        while True:  # (a watch runs until it is stopped)
            event = watch.next(timeout=_WATCH_POLL_S)
            if event is None and watch.ended:
                return
            yield None if event is None else str(event["key"])
    finally:
        with contextlib.suppress(Exception):  # (the connection may be gone: nothing to end then)
            watch.close()


def _print_change(t: _Target, key: str, args: argparse.Namespace) -> None:
    """The key as it is now: ``set KEY VALUE`` or ``del KEY``. A watch does not touch."""
    found = t.store.entry(key, touch=False)
    if args.json:
        if found is None:
            _print_json({"event": "del", "key": key, "version": None})
        else:
            _print_json({"event": "set", "key": key, "version": found.version, **_value_json(found.value)})
    elif found is None:
        print(f"del\t{_escaped(key)}", flush=True)
    else:
        print(f"set\t{_escaped(key)}\t{_text(found.value, line=True)}", flush=True)


# --- the parser -----------------------------------------------------------------------------------
def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, not {text!r}")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {value}")
    return value


_TARGET = "(DIR | --server HOST:PORT NAME | --server HOST:PORT --store NAME)"


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "kv",
        help="the key-value store: get, set, del, incr, range, match, watch (a directory, or --server)",
        description="The key-value store (docs/KV.md) in a directory, or on a daemon with --server. "
        "Exit 0 ok, 1 error or (get) no such key, 2 usage.",
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")

    def action(name: str, words: str, help: str, func: Callable[[argparse.Namespace], int]) -> Any:
        a = actions.add_parser(
            name,
            help=help,
            description=help,
            usage=f"logspool kv {name} [options] {_TARGET} {words}",
        )
        a.add_argument(
            "words", nargs="*", metavar="ARG", help=f"the store (DIR, or NAME with --server), {words}"
        )
        a.add_argument("--server", metavar="HOST:PORT", help="the store NAME on this daemon (logspool serve)")
        a.add_argument("--store", metavar="NAME", help="with --server: the store's name (else the first ARG)")
        a.add_argument("--token", help="the daemon's token (or LOGSPOOL_TOKEN)")
        a.add_argument("--json", action="store_true", help="JSON output (bytes as value_base64)")
        a.set_defaults(func=func, parser=a)
        return a

    a = action("get", "KEY", "print KEY's value (exit 1, nothing on stdout, if it holds none)", _cmd_get)
    a.add_argument("--raw", action="store_true", help="write the value's bytes as they are, no newline")
    a = action("set", "KEY [VALUE]", "set KEY to VALUE (left out: stdin, whole)", _cmd_set)
    a.add_argument("--type", choices=_TYPES, default="string", help="of the value (default string)")
    a.add_argument("--ttl", type=_seconds, help="seconds until the value expires")
    a.add_argument(
        "--nx", "--if-absent", dest="nx", action="store_true", help="only if KEY holds no value (else exit 1)"
    )
    action("del", "KEY...", "delete keys; print how many held a value", _cmd_del)
    action("incr", "KEY [BY]", "add BY (default 1; an integer or a float) and print the sum", _cmd_incr)
    for name, words, what, func in (
        ("range", "[START [END]]", "keys from START (included) to END (excluded), in key order", _cmd_range),
        ("match", "PATTERN", "keys in which the regular expression matches, in key order", _cmd_match),
    ):
        a = action(name, words, what + ": KEY<TAB>VALUE lines", func)
        a.add_argument("--limit", type=_count, help="print at most N keys (default all)")
        a.add_argument("--keys", dest="keys_only", action="store_true", help="print the keys only")
    a = action(
        "watch", "KEY...", "print changes to the keys as they happen: set KEY VALUE, del KEY", _cmd_watch
    )
    a.add_argument("--count", type=_count, help="stop after N changes")
    a.add_argument("--timeout", type=_seconds, help="stop after this many seconds")
