"""``logspool serve`` (the daemon), ``logspool forward`` (a local log's records to a daemon's
log) and ``logspool stats --server ADDR`` (a running daemon's counters).

Invariants: the command line's settings override the config file's (``serve --config``), and
an unknown setting there is an error, not ignored; the daemon, the client, the forwarder and
asyncio are imported only by the command that runs them (CLI start-up, issue 29).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from typing import Any

# The daemon and the client are imported by the commands that use them (CLI start-up, issue 29).


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    """The command line over the config file (TOML; keys as the long options, with _)."""
    import tomllib

    conf: dict[str, Any] = {}
    if args.config:
        with open(args.config, "rb") as f:
            conf = tomllib.load(f)
        known = {"data", "listen", "token", "token_file", "tls_cert", "tls_key", "durability",
                 "connections_max", "in_flight_max", "frame_size_max", "threads", "metrics", "resp",
                 "resp_kv", "resp_flushdb", "resp_shared_kv", "stores_max", "event_loop",
                 "own_kv", "shared_kv"}  # fmt: skip
        unknown = sorted(set(conf) - known)
        if unknown:
            raise SystemExit(
                f"logspool serve: unknown settings in {args.config}: {unknown} (known: {sorted(known)})"
            )
    from_line = _kv_sharing(vars(args), "the command line")
    # (the command line's say over the file's, whatever the file says of them; neither: owned)
    from_file = _kv_sharing(conf, f"{args.config}") if from_line is None else None
    for key, value in vars(args).items():
        if value is not None and key not in ("config", "func", "command"):
            conf[key] = value
    if not conf.get("data"):
        raise SystemExit("logspool serve: --data DIR (or data in --config) is required")
    for key in _OWNERSHIP:
        conf.pop(key, None)
    conf["shared_kv"], conf["resp_shared_kv"] = from_line or from_file or (False, False)
    return conf


# The settings that say whether the daemon owns the key-value stores it serves or shares them:
# ``shared_kv`` (every one shared), ``resp_shared_kv`` (its older spelling, from when only the
# RESP door owned its store) and ``own_kv`` (false: the native door's shared, as it was then).
_OWNERSHIP = ("own_kv", "shared_kv", "resp_shared_kv")


def _kv_sharing(settings: dict[str, Any], where: str) -> tuple[bool, bool] | None:
    """Whether ``settings`` (a config file's, or the command line's) share the native door's
    key-value stores and the RESP door's: None if they say nothing of it. ``shared_kv`` or
    ``resp_shared_kv`` true: both; ``own_kv`` false: the native door's (a config written when
    that was the default keeps its meaning); false for the others says nothing. SystemExit
    naming the settings if one is not true or false, or for ``own_kv`` true with a share."""
    said = {key: settings[key] for key in _OWNERSHIP if settings.get(key) is not None}
    if not said:
        return None
    for key, value in said.items():
        if type(value) is not bool:
            raise SystemExit(f"logspool serve: {key} in {where} is true or false, not {value!r}")
    shared = [key for key in ("shared_kv", "resp_shared_kv") if said.get(key)]
    if shared and said.get("own_kv"):
        named = ["--" + k.replace("_", "-") if where == "the command line" else f"{k} = true"
                 for k in ("own_kv", *shared)]  # fmt: skip
        raise SystemExit(
            f"logspool serve: {named[0]} (every key-value store owned by the daemon) and "
            f"{', '.join(named[1:])} (shared with other processes) in {where} contradict each "
            "other: choose one"
        )
    return bool(shared) or said.get("own_kv") is False, bool(shared)


def _cmd_serve(args: argparse.Namespace) -> int:
    import asyncio
    import logging
    import ssl

    from ..client import parse_address
    from ..server import Limits, RespOptions, Server

    conf = _settings(args)
    # (the native door's key-value stores shared, the RESP door's: see _kv_sharing)
    shared_kv, resp_shared_kv = conf["shared_kv"], conf["resp_shared_kv"]
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # a client that went away is an error, not death
    # --resp alone serves RESP only; with --listen (or neither) the native port too.
    native = conf.get("listen") is not None or conf.get("resp") is None
    host, port = parse_address(conf.get("listen", "127.0.0.1:7070"))
    resp = None
    if conf.get("resp") is not None:
        resp_host, resp_port = parse_address(conf["resp"])
        resp = RespOptions(resp_host, resp_port, kv=conf.get("resp_kv", "default"),
                           flushdb=bool(conf.get("resp_flushdb", False)),
                           own_kv=not resp_shared_kv)  # fmt: skip
    token = conf.get("token")
    if conf.get("token_file"):
        with open(conf["token_file"]) as f:
            token = f.read().strip()
    token = token or os.environ.get("LOGSPOOL_TOKEN") or None
    context = None
    if conf.get("tls_cert"):
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(conf["tls_cert"], conf.get("tls_key"))
    limits = Limits()
    for name in ("connections_max", "in_flight_max", "frame_size_max", "threads", "stores_max"):
        if conf.get(name) is not None:
            setattr(limits, name, int(conf[name]))
    for bound in ([host] if native else []) + ([resp.host] if resp is not None else []):
        if bound not in ("127.0.0.1", "::1", "localhost") and token is None:
            print(f"logspool serve: warning: listening on {bound} without a token", file=sys.stderr)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    _open_files_limit(limits.connections_max, limits.stores_max)

    async def run() -> int:
        server = Server(conf["data"], host=host, port=port if native else None, token=token,
                        ssl_context=context, limits=limits, durability=conf.get("durability", "always"),
                        resp=resp, own_kv=not shared_kv)  # fmt: skip
        await server.start()
        if conf.get("metrics"):
            m_host, m_port = parse_address(conf["metrics"])
            m_port = await server.start_metrics(m_host, m_port)
            print(f"logspool serve: Prometheus metrics at http://{m_host}:{m_port}/metrics", flush=True)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, lambda: asyncio.ensure_future(server.stop()))
        if native:
            print(f"logspool serve: listening on {server.address} (data {server.data})", flush=True)
        if server.resp is not None:
            o = server.resp.options
            print(f"logspool serve: RESP on {o.host}:{o.port} (key-value store {o.kv!r}, data {server.data})",
                  flush=True)  # fmt: skip
        await server.wait_stopped()
        if server.failure is not None:
            print(f"logspool serve: stopped: an fsync failed ({server.failure}); restart the daemon to "
                  "recover what the disk holds", file=sys.stderr, flush=True)  # fmt: skip
            return 1
        print("logspool serve: stopped", flush=True)
        return 0

    with asyncio.Runner(loop_factory=_loop_factory(conf.get("event_loop", "auto"))) as runner:
        return int(runner.run(run()))


FDS_A_STORE = 8  # files a served store holds open (a key-value store 7: its op log's 5, snapshots)
FDS_RESERVED = 64  # the daemon's own: listeners, the loop's, the stores' directory watches...


def _open_files_limit(connections_max: int, stores_max: int) -> None:
    """Raise the process's limit on open files (its soft RLIMIT_NOFILE, up to the hard one) to
    what the daemon may hold at its bounds: a socket a connection, the files of every store it
    may open, and a reserve. A common default of 1,024 runs out at ~120 stores, and then every
    open, accept and snapshot of the daemon fails with EMFILE. As Redis does for its clients:
    raise it, and if the hard limit is lower, say so once, with what to change."""
    import resource

    wanted = connections_max + stores_max * FDS_A_STORE + FDS_RESERVED
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return
    raised = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if raised > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
            soft = raised
        except (ValueError, OSError) as err:  # (a container may forbid it)
            print(f"logspool serve: warning: cannot raise the open files limit from {soft}: {err}",
                  file=sys.stderr)  # fmt: skip
    if soft < wanted:
        print(f"logspool serve: warning: at most {soft} files open (ulimit -n; hard limit {hard}); "
              f"{connections_max} connections and {stores_max} stores may need {wanted}: raise the "
              "limit (ulimit -Hn, systemd's LimitNOFILE) or lower --stores-max / --connections-max",
              file=sys.stderr, flush=True)  # fmt: skip


def _loop_factory(choice: str) -> Any:
    """The event loop ``serve`` runs on: uvloop (libuv, C) where it is installed (a Linux
    dependency), else asyncio's own; ``--event-loop asyncio`` or ``uvloop`` to choose.
    uvloop costs less a socket event and a write: the RESP door's server CPU a durable SET
    46-52 us against 56-65 on asyncio's loop (16 clients), 37-38 against 44 (50 clients), in
    the same runs (benchmarks/RESULTS.md, issue 34). The daemon uses no loop internals: both
    run every test."""
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise SystemExit("logspool serve: --event-loop uvloop, but uvloop is not installed") from None
        return None
    return uvloop.new_event_loop


def _cmd_stats(args: argparse.Namespace) -> int:
    from ..client import connect

    token = args.token or os.environ.get("LOGSPOOL_TOKEN")
    with connect(args.server, token=token, timeout=10) as c:
        stats = c.stats()
    if args.json:
        print(json.dumps(stats, indent=2, sort_keys=True))
        return 0
    for key in sorted(stats):
        print(f"{key:18} {stats[key]}")
    return 0


def _cmd_forward(args: argparse.Namespace) -> int:
    import logging

    from ..forward import forward

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    token = args.token or os.environ.get("LOGSPOOL_TOKEN")
    fwd = forward(args.source, args.to, producer=args.producer, token=token, batch=args.batch)
    signal.signal(signal.SIGTERM, lambda *_: fwd.stop())
    try:
        stats = fwd.run(idle_exit=args.idle_exit)
    except KeyboardInterrupt:
        stats = fwd.stats
    finally:
        fwd.close()
    print(json.dumps(stats.__dict__, sort_keys=True), flush=True)
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("serve", help="the daemon: serve logs, job journals and key-value stores over TCP")
    p.add_argument("--data", metavar="DIR", help="where the stores live (DIR/logs, DIR/jobs, DIR/kv)")
    p.add_argument("--listen", metavar="HOST:PORT", help="address (default 127.0.0.1:7070)")
    p.add_argument("--config", metavar="FILE", help="a TOML file with these settings")
    p.add_argument("--token", help="a shared secret clients send in HELLO (or LOGSPOOL_TOKEN)")
    p.add_argument("--token-file", dest="token_file", metavar="FILE", help="read the token from FILE")
    p.add_argument("--tls-cert", dest="tls_cert", metavar="PEM", help="serve TLS with this certificate")
    p.add_argument("--tls-key", dest="tls_key", metavar="PEM", help="its private key")
    p.add_argument(
        "--durability", choices=["always", "interval", "os"], help="of the stores (default always)"
    )
    p.add_argument("--connections-max", dest="connections_max", type=int)
    p.add_argument("--in-flight-max", dest="in_flight_max", type=int, help="requests per connection at once")
    p.add_argument("--frame-size-max", dest="frame_size_max", type=int)
    p.add_argument("--threads", type=int, help="store calls at once")
    p.add_argument("--stores-max", dest="stores_max", type=int, help="stores open at once (default 4096)")
    p.add_argument("--resp", metavar="HOST:PORT", help="also speak Redis's protocol here (docs/RESP.md)")
    p.add_argument("--resp-kv", dest="resp_kv", metavar="NAME", help="the RESP key-value store (default)")
    p.add_argument("--resp-flushdb", dest="resp_flushdb", action="store_true", default=None,
                   help="let RESP clients FLUSHDB (delete every key); refused otherwise")  # fmt: skip
    p.add_argument("--shared-kv", dest="shared_kv", action="store_true", default=None,
                   help="share the key-value stores served with other processes (embedded kv.open "
                        "beside the daemon) instead of owning them (owning is faster: the default; "
                        "kv.open of an owned store elsewhere waits until the daemon stops)")  # fmt: skip
    p.add_argument("--resp-shared-kv", dest="resp_shared_kv", action="store_true", default=None,
                   help="the older spelling of --shared-kv")  # fmt: skip
    p.add_argument("--own-kv", dest="own_kv", action="store_true", default=None,
                   help="own every key-value store served (the default)")  # fmt: skip
    p.add_argument("--metrics", metavar="HOST:PORT", help="serve Prometheus text at http://HOST:PORT/metrics")
    p.add_argument("--event-loop", dest="event_loop", choices=["auto", "uvloop", "asyncio"],
                   help="uvloop, or asyncio's own loop (default auto: uvloop where installed)")  # fmt: skip
    p.set_defaults(func=_cmd_serve)

    p = sub.add_parser("forward", help="send a local log's records to a daemon's log, exactly once")
    p.add_argument("--from", dest="source", required=True, metavar="DIR", help="the local log")
    p.add_argument("--to", required=True, metavar="HOST:PORT/NAME", help="the daemon and its log")
    p.add_argument("--producer", help="this source's id at the daemon (default: host and real path)")
    p.add_argument("--token", help="the daemon's token (or LOGSPOOL_TOKEN)")
    p.add_argument("--batch", type=int, default=1000, help="records per request (default 1000)")
    p.add_argument("--idle-exit", dest="idle_exit", type=float, help="stop after this many idle seconds")
    p.set_defaults(func=_cmd_forward)

    p = sub.add_parser("stats", help="a running daemon's counters: --server HOST:PORT")
    p.add_argument("--server", required=True, metavar="HOST:PORT")
    p.add_argument("--token", help="the daemon's token (or LOGSPOOL_TOKEN)")
    p.add_argument("--json", action="store_true", help="JSON output")
    p.set_defaults(func=_cmd_stats)
