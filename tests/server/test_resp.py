"""The RESP front door (``logspool serve --resp``) against the real Redis clients: redis-cli,
redis-py (RESP2 and RESP3) and a short redis-benchmark run, on a real ``logspool serve`` process
on 127.0.0.1. It proves that the commands answer as Redis does (docs/RESP.md), that a key set
over RESP is the same key for the native client (the daemon owns that store: an embedded
``kv.open`` is shut out while it runs), that streams are
logs (XREAD BLOCK wakes on another process's append), that AUTH guards everything, that hostile
input (random bytes, huge lengths, unterminated or nested arrays, a client that never reads)
harms only its own connection with memory bounded, that the parser takes any split of any
command stream (hypothesis), and that after a kill -9 under redis-py writers every acknowledged
SET, INCR and XADD is there, none twice. Waits are bounded polls on a condition, never sleeps."""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.backoff import NoBackoff
from redis.retry import Retry

import logspool
from logspool import client, kv
from logspool._fs import FileSystem
from logspool.errors import LockedError
from logspool.server import Limits, RespOptions, _resp
from logspool.server._resp_kv import glob_match
from logspool.server._resp_wire import RespLimits, RespParser, RespProtocolError
from tests.server.conftest import Daemon, Running, free_port

pytestmark = pytest.mark.skipif(
    shutil.which("redis-cli") is None or shutil.which("redis-benchmark") is None,
    reason="redis-tools is not installed (scripts/setup installs it)",
)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = Daemon(tmp_path_factory.mktemp("resp") / "data", resp=True).start()
    yield d
    d.kill()


@pytest.fixture
def r(daemon: Daemon) -> Iterator[redis.Redis]:
    c = redis.Redis(port=daemon.resp_port, socket_timeout=10)
    yield c
    c.close()


def no_retry(port: int | None, **options: object) -> redis.Redis:
    """A client that never resends a command (redis-py retries by default, with backoff): a resent
    XADD could be applied twice, and an auth error would take seconds of backoff to raise."""
    return redis.Redis(port=port, retry=Retry(NoBackoff(), 0), **options)  # type: ignore[arg-type]


def cli(port: int | None, *args: str, stdin: bytes | None = None) -> str:
    out = subprocess.run(["redis-cli", "-p", str(port), *args], input=stdin, capture_output=True, timeout=30)
    return out.stdout.decode()


def raw_conn(port: int | None) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port or 0), timeout=10)


def read_until_closed(sock: socket.socket, limit: int = 1 << 20) -> bytes:
    data = b""
    while len(data) < limit:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
    return data


def wait_for(condition: object, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


# --- redis-cli ------------------------------------------------------------------------------------
def test_redis_cli_speaks_to_the_daemon(daemon: Daemon) -> None:
    port = daemon.resp_port
    assert cli(port, "PING") == "PONG\n"
    assert cli(port, "SET", "cli:a", "hello world") == "OK\n"
    assert cli(port, "GET", "cli:a") == "hello world\n"
    assert cli(port, "INCR", "cli:n") == "1\n"
    assert cli(port, "INCRBY", "cli:n", "41") == "42\n"
    assert cli(port, "GET", "cli:missing") == "\n"
    assert cli(port, "NOSUCH", "x").startswith("ERR unknown command 'NOSUCH'")
    assert cli(port, "GET").startswith("ERR wrong number of arguments for 'get' command")
    assert cli(port, "XADD", "cli-stream", "*", "payload", "one").strip().endswith("-0")
    # several commands through one connection (redis-cli reads them from stdin)
    assert cli(port, stdin=b"SET cli:b 1\nINCR cli:b\nGET cli:b\n") == "OK\n2\n2\n"
    assert "redis_version:" in cli(port, "INFO", "server")


def test_serve_runs_on_the_event_loop_it_is_told(tmp_path: Path) -> None:
    """``serve`` runs on uvloop where it is installed (a Linux dependency) and on asyncio's own
    loop with ``--event-loop asyncio``: the same commands answer the same on both, and INFO
    says which loop runs."""
    try:
        import uvloop  # noqa: F401

        default = "uvloop"
    except ImportError:
        default = "asyncio"
    for choice, expected in (("asyncio", "asyncio"), ("auto", default)):
        d = Daemon(tmp_path / choice, "--event-loop", choice, resp=True).start()
        try:
            port = d.resp_port
            assert cli(port, "SET", "loop:k", "v") == "OK\n"
            assert cli(port, stdin=b"INCR loop:n\nINCR loop:n\nGET loop:k\n") == "1\n2\nv\n"
            assert f"logspool_event_loop:{expected}" in cli(port, "INFO", "server")
        finally:
            d.kill()


# --- redis-py, RESP2 ------------------------------------------------------------------------------
def test_strings_as_redis_answers_them(r: redis.Redis) -> None:
    assert r.set("s:a", b"\x00\xff binary") and r.get("s:a") == b"\x00\xff binary"
    assert r.set("s:a", "x", nx=True) is None and r.set("s:a", "y", xx=True)
    assert r.set("s:a", "z", get=True) == b"y"
    assert r.set("s:num", "010") and r.get("s:num") == b"010"  # not canonical: kept as bytes
    with pytest.raises(redis.ResponseError, match="not an integer"):
        r.incr("s:num")  # as in Redis
    assert r.set("s:c", 5) and r.incr("s:c") == 6 and r.decr("s:c") == 5
    assert r.incrby("s:c", 10) == 15 and r.decrby("s:c", 20) == -5 and r.get("s:c") == b"-5"
    assert r.incrbyfloat("s:f", 10.5) == 10.5 and r.incrbyfloat("s:f", 0.1) == 10.6
    assert r.get("s:f") == b"10.6"
    with pytest.raises(redis.ResponseError, match="not an integer"):
        r.incr("s:a")
    with pytest.raises(redis.ResponseError, match="overflow"):
        r.set("s:big", 2**63 - 1)
        r.incr("s:big")
    assert r.append("s:ap", "ab") == 2 and r.append("s:ap", "cd") == 4 and r.strlen("s:ap") == 4
    assert r.getrange("s:ap", 1, -2) == b"bc" and r.getrange("s:ap", 5, 9) == b""
    assert r.setrange("s:ap", 6, "zz") == 8 and r.get("s:ap") == b"abcd\x00\x00zz"
    # (read-modify-writes through Store.modify: a canonical integer is one again, a TTL is kept)
    assert r.set("s:n", 10) and r.append("s:n", "5") == 3 and r.incr("s:n") == 106
    assert r.set("s:t", "a", ex=100) and r.append("s:t", "b") == 2 and r.setrange("s:t", 2, "c") == 3
    assert r.incrbyfloat("s:n", 0.5) == 106.5 and 0 < r.ttl("s:t") <= 100 and r.get("s:t") == b"abc"
    assert r.setrange("s:new", 2, "x") == 3 and r.get("s:new") == b"\x00\x00x" and r.ttl("s:new") == -1
    assert r.mset({"s:m1": "1", "s:m2": "2"}) and r.mget(["s:m1", "s:m2", "s:none"]) == [b"1", b"2", None]
    assert r.exists("s:m1", "s:m2", "s:none") == 2
    assert r.delete("s:m1", "s:none") == 1 and r.unlink("s:m2") == 1 and r.exists("s:m1") == 0
    assert r.type("s:ap") == b"string" and r.type("s:none") == b"none"
    assert r.getdel("s:ap") == b"abcd\x00\x00zz" and r.get("s:ap") is None
    assert r.setnx("s:nx", 1) and not r.setnx("s:nx", 2)
    assert r.getset("s:nx", 3) == b"1"
    # expiry
    assert r.ttl("s:nx") == -1 and r.ttl("s:none") == -2
    assert r.expire("s:nx", 100) and 99 <= r.ttl("s:nx") <= 100 and 0 < r.pttl("s:nx") <= 100_000
    assert not r.expire("s:nx", 200, nx=True) and r.expire("s:nx", 200, gt=True)
    assert r.persist("s:nx") and r.ttl("s:nx") == -1
    assert r.set("s:ex", "v", px=100_000) and r.ttl("s:ex") > 0
    assert r.set("s:ex", "w", keepttl=True) and r.ttl("s:ex") > 0
    assert r.set("s:ex", "u") and r.ttl("s:ex") == -1
    assert r.getex("s:ex", ex=50) == b"u" and r.ttl("s:ex") == 50
    assert r.getex("s:ex", persist=True) == b"u" and r.ttl("s:ex") == -1
    assert r.set("s:gone", "v", px=1) is True
    wait_for(lambda: r.get("s:gone") is None)
    assert r.pexpire("s:ex", -1) and r.get("s:ex") is None  # a time in the past deletes
    assert r.expireat("s:nx", int(time.time()) + 60) and r.ttl("s:nx") > 0
    # renames
    assert r.rename("s:nx", "s:nx2") and r.get("s:nx2") == b"3"
    assert r.set("s:other", 1) and not r.renamenx("s:nx2", "s:other")
    with pytest.raises(redis.ResponseError, match="no such key"):
        r.rename("s:none", "s:x")
    # keys that logspool cannot hold
    with pytest.raises(redis.ResponseError, match="UTF-8"):
        r.set(b"\xff\xfe", "v")
    with pytest.raises(redis.ResponseError, match="not empty"):
        r.set("", "v")


def test_scan_keys_dbsize_and_flushdb_refused(r: redis.Redis) -> None:
    for i in range(30):
        r.set(f"scan:{i:02d}", i)
    found = set(r.scan_iter(match="scan:*", count=7))
    assert found == {f"scan:{i:02d}".encode() for i in range(30)}
    assert set(r.scan_iter(match="scan:1?")) == {f"scan:1{i}".encode() for i in range(10)}
    assert list(r.scan_iter(match="scan:*", _type="stream")) == []
    assert sorted(r.keys("scan:2[0-3]")) == [b"scan:20", b"scan:21", b"scan:22", b"scan:23"]
    assert r.dbsize() >= 30
    with pytest.raises(redis.ResponseError, match="disabled"):
        r.flushdb()
    with pytest.raises(redis.ResponseError, match="invalid cursor"):
        r.scan(cursor=987654321)


def test_connection_commands(r: redis.Redis) -> None:
    assert r.ping() and r.echo("hi") == b"hi"
    assert r.client_setname("worker-1") and r.client_getname() == "worker-1"
    assert isinstance(r.client_id(), int)
    assert r.execute_command("SELECT", 0)
    with pytest.raises(redis.ResponseError, match="DB index"):
        r.execute_command("SELECT", 1)
    assert r.info()["redis_version"]
    assert r.execute_command("AUTH", "default", "anything")  # no token: Redis's nopass default user
    with pytest.raises(redis.AuthenticationError, match="without any password configured"):
        no_retry(r.connection_pool.connection_kwargs["port"]).execute_command("AUTH", "anything")
    assert r.command_count() > 40
    assert r.config_get("appendonly") == {"appendonly": "yes"}
    with pytest.raises(redis.ResponseError, match="unknown command"):
        r.execute_command("NOSUCHCOMMAND", "a")
    assert r.ping()  # the connection survived the error


def test_locks_not_and_truncate(r: redis.Redis) -> None:
    assert r.set("ls:k", "abcdef")
    assert r.execute_command("LS.LOCK", "ls:k", "alice", "30") > time.time() * 1000
    with pytest.raises(redis.ResponseError, match="LOCKED"):
        r.set("ls:k", "x")
    other = r.client()
    other.client_setname("alice")  # a connection named as the owner may write
    assert other.set("ls:k", "owned") and other.execute_command("LS.UNLOCK", "ls:k") == 1
    other.close()
    assert r.set("ls:k", "abcdef") and r.execute_command("LS.TRUNCATE", "ls:k", 3) == 3
    assert r.get("ls:k") == b"abc"
    assert r.set("ls:b", 0) and r.execute_command("LS.NOT", "ls:b") == 1 and r.get("ls:b") == b"1"
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        r.execute_command("LS.NOT", "ls:k")


def test_transactions_are_one_decision(r: redis.Redis, daemon: Daemon) -> None:
    pipe = r.pipeline(transaction=True)
    pipe.set("tx:a", 1).incr("tx:a").get("tx:a").incr("tx:nonint-later")
    assert pipe.execute() == [True, 2, b"2", 1]
    with pytest.raises(redis.ResponseError, match="discarded because of previous errors"):
        r.execute_command("MULTI")
        with contextlib.suppress(redis.ResponseError):
            r.execute_command("GET")  # wrong arity: queued as an error
        r.execute_command("EXEC")

    # WATCH: a change by anyone between WATCH and EXEC aborts the transaction (redis-py retries)
    other = redis.Redis(port=daemon.resp_port)
    attempts = []

    def add_one(pipe: redis.client.Pipeline) -> None:
        value = int(pipe.get("tx:w") or 0)
        if not attempts:
            other.incr("tx:w")  # a concurrent writer
        attempts.append(value)
        pipe.multi()
        pipe.set("tx:w", value + 1)

    r.set("tx:w", 10)
    r.transaction(add_one, "tx:w")
    assert attempts == [10, 11] and r.get("tx:w") == b"12"
    other.close()


# --- RESP3 ----------------------------------------------------------------------------------------
def test_resp3_through_hello_3(daemon: Daemon) -> None:
    r3 = redis.Redis(port=daemon.resp_port, protocol=3)
    assert r3.set("r3:a", "v") and r3.get("r3:a") == b"v" and r3.get("r3:none") is None
    assert r3.config_get("appendonly") in ({"appendonly": "yes"}, {b"appendonly": b"yes"})
    r3.xadd("r3-stream", {"payload": "x"})
    got = r3.xread({"r3-stream": "0"}, count=1)
    assert list(got) == [b"r3-stream"]  # a map in RESP3
    hello = r3.execute_command("HELLO", "3")
    assert hello[b"proto"] == 3 and hello[b"server"] == b"redis"
    r3.close()


# --- shared with the native protocol and embedded users -------------------------------------------
def test_one_store_for_resp_native_and_embedded(r: redis.Redis, daemon: Daemon) -> None:
    r.set("shared:resp", "from resp")
    r.set("shared:count", 7)
    with client.connect(daemon.address, timeout=10) as c:
        store = c.kv("default")
        assert store.get("shared:resp") == b"from resp"
        assert store.get("shared:count") == 7  # an integer for everyone
        store.set("shared:native", "text")
        store.add("shared:count", 1)
    assert r.get("shared:native") == b"text" and r.incr("shared:count") == 9
    # The daemon owns the store its RESP door serves (its writer lock until it stops): opening it
    # in another process (an open recovers under that lock) waits for the lock, then gives up.
    with pytest.raises(LockedError):
        kv.open(daemon.data / "kv" / "default", lock_timeout_s=0.5)
    r.set("shared:embedded", 1.5)
    assert r.incrbyfloat("shared:embedded", 1) == 2.5


def test_a_shared_resp_store_is_read_and_written_by_embedded_processes(tmp_path: Path) -> None:
    d = Daemon(tmp_path / "data", "--resp-shared-kv", resp=True).start()
    try:
        r = redis.Redis(port=d.resp_port)
        r.set("from:resp", "x")
        r.set("n", 1)
        with kv.open(d.data / "kv" / "default", lock_timeout_s=30) as store:
            assert store.get("from:resp") == b"x"  # (a Redis string is bytes)
            store.set("from:embedded", b"y")
            store.add("n", 41)
        assert r.get("from:embedded") == b"y" and r.incr("n") == 43
        r.close()
    finally:
        d.kill()


def test_a_shared_resp_store_shares_the_native_doors_stores_too(tmp_path: Path) -> None:
    """``Server(resp=RespOptions(own_kv=False))`` and ``own_kv`` not said: every key-value store
    is shared, the native door's as the RESP door's (an embedded open of each works beside the
    daemon); ``own_kv=False`` with the RESP door's store owned shares only the native door's."""
    for resp_own, own, native_shared, resp_shared in ((False, None, True, True), (True, False, True, False)):
        data = tmp_path / f"data-{resp_own}"
        r = Running(data, resp=RespOptions(host="127.0.0.1", port=0, own_kv=resp_own), own_kv=own)
        try:
            assert r.server.resp is not None
            with client.connect(r.address) as c:
                c.kv("native").set("k", 1)
            redis.Redis(port=r.server.resp.options.port, socket_timeout=10).set("k", "v")
            for name, shared in (("native", native_shared), ("default", resp_shared)):
                try:
                    with kv.open(data / "kv" / name, lock_timeout_s=0.5) as embedded:
                        assert shared and embedded.get("k") is not None
                except LockedError:
                    assert not shared, name
        finally:
            r.stop()


def test_owning_every_store_and_sharing_the_resp_doors_store_is_refused(tmp_path: Path) -> None:
    """``--own-kv`` with ``--shared-kv`` (or its older spelling ``--resp-shared-kv``; one of
    them would be ignored): refused by the command, naming both, and by ``Server``."""
    for shared in ("--shared-kv", "--resp-shared-kv"):
        done = subprocess.run(
            [sys.executable, "-m", "logspool.cli", "serve", "--data", str(tmp_path / "data"),
             "--resp", "127.0.0.1:6399", "--own-kv", shared],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode != 0
        assert "--own-kv" in done.stderr and f"{shared} (shared" in done.stderr, done.stderr
    with pytest.raises(ValueError, match="own_kv"):
        logspool.server.Server(tmp_path / "data", resp=RespOptions(port=0, own_kv=False), own_kv=True)


def test_a_lone_get_is_answered_as_any_get(daemon: Daemon) -> None:
    """A read that is one whole ``GET key`` is answered without the parser (``_lone_get``, GET
    x1's path); every case it does not take falls to the common path. Each GET is sent alone on
    a raw socket and must get the reply Redis gives: a string, a missing key (RESP2 and RESP3),
    an integer value and a value of another type (held as such: the common path formats them),
    a key that is not UTF-8, a length with a leading zero, a length that lies, a GET inside
    MULTI, a GET split over two sends and one followed by another command in the same send."""
    setup = redis.Redis(port=daemon.resp_port, socket_timeout=10)
    try:
        assert setup.set("lone:s", b"v" * 100) and setup.set("lone:n", 42) and setup.set("lone:f", "1.5")
        # (sizes on each side of the bulk headers ``gets`` keeps ready: 4,096)
        assert setup.set("lone:4095", b"a" * 4095) and setup.set("lone:4096", b"b" * 4096)
        # (a key holding the bytes a read of whole GETs is cut at: ``_whole_gets``)
        assert setup.set(b"lone:*2\r\n$3\r\nGET\r\n$1\r\nx", b"cut")
        assert setup.set("lone:e", "gone", px=1)
        deadline = time.monotonic() + 30
        while setup.pttl("lone:e") != -2:  # (bounded: a 1 ms TTL)
            assert time.monotonic() < deadline
    finally:
        setup.close()
    s = raw_conn(daemon.resp_port)
    reader = s.makefile("rb")

    def get(key: bytes, length: bytes | None = None) -> bytes:
        s.sendall(b"*2\r\n$3\r\nGET\r\n$%b\r\n%b\r\n" % (length or b"%d" % len(key), key))
        first = reader.readline()
        return first + (reader.readline() if first.startswith(b"$") and first != b"$-1\r\n" else b"")

    try:
        assert get(b"lone:s") == b"$100\r\n" + b"v" * 100 + b"\r\n"
        assert get(b"lone:missing") == b"$-1\r\n"
        assert get(b"lone:e") == b"$-1\r\n"  # expired
        assert get(b"lone:n") == b"$2\r\n42\r\n"
        assert get(b"lone:f") == b"$3\r\n1.5\r\n"
        assert get(b"lone:\xff").startswith(b"-ERR logspool keys are UTF-8")
        assert get(b"lone:s", b"06") == b"$100\r\n" + b"v" * 100 + b"\r\n"  # (the parser's)
        s.sendall(b"*2\r\n$3\r\nGET\r\n$6\r\nlone:sAB")  # a bulk string not ended by CRLF
        assert reader.readline().startswith(b"-ERR Protocol error")
        assert reader.readline() == b""  # (and the connection with it)
    finally:
        reader.close()
        s.close()
    s = raw_conn(daemon.resp_port)
    reader = s.makefile("rb")
    try:
        s.sendall(b"*1\r\n$5\r\nMULTI\r\n")
        assert reader.readline() == b"+OK\r\n"
        assert get(b"lone:s") == b"+QUEUED\r\n"
        s.sendall(b"*1\r\n$4\r\nEXEC\r\n")
        assert [reader.readline() for _ in range(3)] == [b"*1\r\n", b"$100\r\n", b"v" * 100 + b"\r\n"]
        whole = b"*2\r\n$3\r\nGET\r\n$6\r\nlone:s\r\n"
        s.sendall(whole[:20])
        s.sendall(whole[20:])
        assert reader.readline() + reader.readline() == b"$100\r\n" + b"v" * 100 + b"\r\n"
        # A whole GET read behind a command not complete yet is that command's argument (each
        # part sent once the daemon has read the last: another connection's INFO counts bytes in).
        setup = redis.Redis(port=daemon.resp_port, socket_timeout=10)
        info = len(b"*2\r\n$4\r\nINFO\r\n$5\r\nstats\r\n")  # (each INFO's own bytes count too)

        def send_read(data: bytes) -> None:
            before = int(setup.info("stats")["total_net_input_bytes"])
            s.sendall(data)
            for calls in itertools.count(1):  # bounded below
                if int(setup.info("stats")["total_net_input_bytes"]) >= before + calls * info + len(data):
                    return
                assert calls < 100_000

        send_read(b"*2\r\n$4\r\nECHO\r\n$%d\r\n" % len(whole))
        send_read(whole)
        setup.close()
        s.sendall(b"\r\n")
        echoed = b"$%d\r\n%b\r\n" % (len(whole), whole)
        assert reader.read(len(echoed)) == echoed
        # A read of GETs only is answered in one loop (``gets``); any GET it does not take sends
        # the batch to ``run``, which answers each as above.
        for keys, replies in [
            ([b"lone:s", b"lone:missing", b"lone:s"], [b"$100", b"v" * 100, b"$-1", b"$100", b"v" * 100]),
            (
                [b"lone:missing", b"lone:n", b"lone:e", b"lone:f"],
                [b"$-1", b"$2", b"42", b"$-1", b"$3", b"1.5"],
            ),
            (
                [b"lone:4095", b"lone:4096", b"lone:s"],
                [b"$4095", b"a" * 4095, b"$4096", b"b" * 4096, b"$100", b"v" * 100],
            ),
        ]:
            s.sendall(b"".join(b"*2\r\n$3\r\nGET\r\n$%d\r\n%b\r\n" % (len(k), k) for k in keys))
            assert [reader.readline() for _ in replies] == [r + b"\r\n" for r in replies]
        # A read of whole GETs is taken without the parser (``_whole_gets``) only when every
        # piece is a GET as clients send it; else the parser answers, the same replies.
        odd = b"lone:*2\r\n$3\r\nGET\r\n$1\r\nx"
        s.sendall(b"*2\r\n$3\r\nGET\r\n$6\r\nlone:s\r\n*2\r\n$3\r\nGET\r\n$%d\r\n%b\r\n" % (len(odd), odd))
        assert [reader.readline() for _ in range(4)] == [
            b"$100\r\n",
            b"v" * 100 + b"\r\n",
            b"$3\r\n",
            b"cut\r\n",
        ]
        s.sendall(
            b"*2\r\n$3\r\nGET\r\n$6\r\nlone:s\r\n*2\r\n$3\r\nGET\r\n$06\r\nlone:n\r\n"
        )  # (a zero first)
        assert [reader.readline() for _ in range(4)] == [
            b"$100\r\n",
            b"v" * 100 + b"\r\n",
            b"$2\r\n",
            b"42\r\n",
        ]
        s.sendall(b"*2\r\n$3\r\nGET\r\n$6\r\nlone:n\r\n*2\r\n$3\r\nGET\r\n$6\r\nlone:sXY")  # no CRLF
        assert reader.readline() + reader.readline() == b"$2\r\n42\r\n"
        assert reader.readline().startswith(b"-ERR Protocol error")
        assert reader.readline() == b""  # (and the connection with it)
        reader.close()
        s.close()
        s = raw_conn(daemon.resp_port)
        reader = s.makefile("rb")
        s.sendall(whole + b"*1\r\n$4\r\nPING\r\n")
        assert [reader.readline() for _ in range(3)] == [b"$100\r\n", b"v" * 100 + b"\r\n", b"+PONG\r\n"]
        s.sendall(b"*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n")
        assert reader.readline().startswith(b"%")
        for _ in range(100):  # (the rest of HELLO's map: read until the next reply)
            s.sendall(b"*2\r\n$3\r\nGET\r\n$12\r\nlone:missing\r\n")
            if reader.readline() == b"_\r\n":
                break
        else:
            raise AssertionError("no RESP3 null for a missing key")
    finally:
        reader.close()
        s.close()


# --- streams --------------------------------------------------------------------------------------
@contextlib.contextmanager
def _raw_conns(port: int, n: int) -> Iterator[tuple[list[socket.socket], list[Any]]]:
    """``n`` raw connections to the RESP port and a line reader of each, closed at the end."""
    socks = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(n)]
    readers = [sock.makefile("rb") for sock in socks]
    try:
        yield socks, readers
    finally:
        for f in readers:
            f.close()
        for sock in socks:
            sock.close()


def test_plain_sets_of_many_connections_at_once_answer_each_as_alone(daemon: Daemon) -> None:
    """A commit round writes the plain SETs of its connections with one write (``plain_sets``),
    each still checked against its own connection: 16 raw connections send their SETs at once,
    round after round: a key locked by another owner is refused to every connection but the
    owner's (its SET lands), an integer is stored as one (INCR works on it), a key that is not
    UTF-8 gets its error (logspool's keys are text) and takes no one else's SET with it; every
    other SET lands, and what each key holds at the end is the last value its connection set."""
    setup = redis.Redis(port=daemon.resp_port, socket_timeout=10)
    try:
        assert setup.set("round:locked", "before")
        assert setup.execute_command("LS.LOCK", "round:locked", "owner-7", "60")
    finally:
        setup.close()
    with _raw_conns(daemon.resp_port, 16) as (socks, readers):

        def send(i: int, *args: bytes) -> None:
            socks[i].sendall(b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%b\r\n" % (len(a), a) for a in args))

        def line(i: int) -> bytes:
            return readers[i].readline()

        send(7, b"CLIENT", b"SETNAME", b"owner-7")
        assert line(7) == b"+OK\r\n"
        for turn in range(40):  # each turn: 16 SETs sent before any reply is read
            for i in range(16):
                if i == 3:
                    send(i, b"SET", b"round:int", b"%d" % (turn * 10))
                elif i == 5:
                    send(i, b"SET", b"round:\xff%d" % turn, b"x")
                elif i in (7, 9):
                    send(i, b"SET", b"round:locked", b"by-%d-%d" % (i, turn))
                else:
                    send(i, b"SET", b"round:%d" % i, b"v-%d-%d" % (i, turn))
            for i in range(16):
                reply = line(i)
                if i == 9:
                    assert reply.startswith(b"-LOCKED"), reply
                elif i == 5:
                    assert reply.startswith(b"-ERR logspool keys are UTF-8"), reply
                else:
                    assert reply == b"+OK\r\n", (i, turn, reply)
    check = redis.Redis(port=daemon.resp_port, socket_timeout=10)
    try:
        assert check.get("round:locked") == b"by-7-39"
        assert check.incr("round:int") == 391
        for i in set(range(16)) - {3, 5, 7, 9}:
            assert check.get(f"round:{i}") == b"v-%d-39" % i
    finally:
        check.close()


def test_plain_xadds_of_many_connections_at_once_answer_each_as_alone(daemon: Daemon) -> None:
    """A commit round appends the plain XADDs of its connections without the command's dispatch
    (``plain_xadds``), each still checked against its own connection: 16 raw connections send an
    XADD each at once, round after round, to two streams; among them a connection in MULTI (its
    XADD is queued, then run by EXEC), a stream key that is not a log name (its error), a new
    stream each turn (not open yet: the common path creates it), an explicit id and a trim
    (the parser's path). Every reply is the id its entry has, in order within each stream, and
    every entry holds what its connection sent."""
    sent: dict[bytes, bytes] = {}  # id -> value
    with _raw_conns(daemon.resp_port, 16) as (socks, readers):

        def send(i: int, *args: bytes) -> None:
            socks[i].sendall(b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%b\r\n" % (len(a), a) for a in args))

        def bulk(i: int) -> bytes:
            head = readers[i].readline()
            assert head.startswith(b"$"), (i, head)
            return readers[i].readline()[:-2]

        send(4, b"MULTI")
        assert readers[4].readline() == b"+OK\r\n"
        for turn in range(30):  # each turn: 16 XADDs sent before any reply is read
            for i in range(16):
                value = b"v-%d-%d" % (i, turn)
                if i == 5:
                    send(i, b"XADD", b"bad:key", b"*", b"f", value)
                elif i == 6:
                    send(i, b"XADD", b"new-%d" % turn, b"*", b"f", value)
                elif i == 8:
                    send(i, b"XADD", b"plain-a", b"MAXLEN", b"~", b"100000", b"*", b"f", value)
                else:
                    send(i, b"XADD", b"plain-%s" % (b"a" if i % 2 else b"b"), b"*", b"f", value)
            for i in range(16):
                value = b"v-%d-%d" % (i, turn)
                if i == 4:
                    assert readers[i].readline() == b"+QUEUED\r\n"
                elif i == 5:
                    assert readers[i].readline().startswith(b"-ERR logspool stream keys are log names")
                elif i == 6:
                    bulk(i)
                else:
                    sent[b"%s %s" % (b"a" if i % 2 or i == 8 else b"b", bulk(i))] = value
        send(4, b"EXEC")
        assert readers[4].readline() == b"*30\r\n"
        for turn in range(30):
            sent[b"b " + bulk(4)] = b"v-4-%d" % turn
    check = redis.Redis(port=daemon.resp_port, socket_timeout=10)
    try:
        for stream in (b"a", b"b"):
            entries = check.xrange(b"plain-" + stream)
            ids = [entry_id for entry_id, _ in entries]
            assert ids == sorted(ids, key=lambda x: tuple(map(int, x.split(b"-"))))
            assert {entry_id: fields[b"f"] for entry_id, fields in entries} == {
                k.split(b" ")[1]: v for k, v in sent.items() if k.startswith(stream + b" ")
            }
        assert [check.xlen(f"new-{turn}") for turn in range(30)] == [1] * 30
    finally:
        check.close()


def test_xadds_of_a_round_share_the_lock_and_other_stream_commands_still_run(daemon: Daemon) -> None:
    """A commit round takes a stream's writer lock once for all its XADDs and gives it back
    before any command that takes it itself (an XADD with a trim, XLEN inside a transaction whose
    EXEC runs in a round): 8 clients adding to two streams at once, some of them in MULTI/EXEC with
    those commands, get every entry once, with ids that grow within each stream."""
    names = ["held-a", "held-b"]
    failures: list[BaseException] = []
    per_client = 60

    def client_work(n: int, out: list[tuple[str, bytes]]) -> None:
        c = redis.Redis(port=daemon.resp_port, socket_timeout=30)
        try:
            for i in range(per_client):
                name = names[(n + i) % 2]
                if i % 10 == 9:
                    # One command a round trip, so that EXEC arrives alone and runs in a round
                    # (a read holding XLEN would run in the pool).
                    assert c.execute_command("MULTI") == b"OK"
                    for cmd in (("XADD", name, "*", "payload", f"{n}-{i}"), ("XLEN", name),
                                ("XADD", name, "MAXLEN", "~", "100000", "*", "payload", f"{n}-{i}-t"),
                                ("XLEN", name)):  # fmt: skip
                        assert c.execute_command(*cmd) == b"QUEUED"
                    got = c.execute_command("EXEC")
                    assert isinstance(got[1], int) and got[3] >= got[1] + 1, got
                    out.extend([(name, got[0]), (name, got[2])])
                else:
                    out.append((name, c.xadd(name, {"payload": f"{n}-{i}"})))
        except BaseException as err:
            failures.append(err)
        finally:
            c.close()

    results: list[list[tuple[str, bytes]]] = [[] for _ in range(8)]
    threads = [threading.Thread(target=client_work, args=(n, results[n])) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads) and not failures, failures
    given = [i for out in results for i in out]  # (an id is unique within its stream)
    assert len(given) == len(set(given)) == 8 * (per_client + per_client // 10)
    r = redis.Redis(port=daemon.resp_port, socket_timeout=30)
    try:
        stored = {name: [i for i, _ in r.xrange(name)] for name in names}
    finally:
        r.close()
    for ids in stored.values():
        keys = [tuple(int(x) for x in i.split(b"-")) for i in ids]
        assert keys == sorted(keys) and len(set(keys)) == len(keys)
    assert sorted(given) == sorted((name, i) for name, ids in stored.items() for i in ids)


def test_streams_are_logs(r: redis.Redis, daemon: Daemon) -> None:
    first = r.xadd("events", {"payload": "one"})
    second = r.xadd("events", {"a": "1", "b": "2"})
    ms, lsn = (int(x) for x in first.split(b"-"))
    assert abs(ms - time.time() * 1000) < 60_000 and second.endswith(b"-%d" % (lsn + 1))
    assert r.xlen("events") == 2
    assert r.xrange("events") == [(first, {b"payload": b"one"}), (second, {b"a": b"1", b"b": b"2"})]
    assert r.xrevrange("events", count=1) == [(second, {b"a": b"1", b"b": b"2"})]
    assert r.xrange("events", min=f"({first.decode()}") == [(second, {b"a": b"1", b"b": b"2"})]
    assert r.xrange("events", min=str(ms + 10**9)) == []
    assert r.xread({"events": first}) == [[b"events", [(second, {b"a": b"1", b"b": b"2"})]]]
    # the log is an ordinary logspool log: Log.append records read as "payload"
    with logspool.Log(daemon.data / "logs" / "events") as log:
        assert next(rec.payload for rec in log.read()) == b"one"
    assert r.xlen("nostream") == 0 and r.xrange("nostream") == []
    assert not (daemon.data / "logs" / "nostream").exists()  # reading never creates
    for bad in ("../escape", "a/b", ".hidden", "x" * 200):
        with pytest.raises(redis.ResponseError, match="log names"):
            r.xadd(bad, {"payload": "x"})
    with pytest.raises(redis.ResponseError, match="'\\*' only"):
        r.xadd("events", {"payload": "x"}, id="1-1")
    assert r.xread({"events": "$"}, block=50) == []  # times out: nil


def test_xread_count_0_is_no_count(r: redis.Redis) -> None:
    for i in range(3):
        r.xadd("counted", {"f": str(i)})
    for count in (0, -1):  # (redis-py refuses them itself: sent as they are)
        reply = r.execute_command("XREAD", "COUNT", count, "STREAMS", "counted", "0")
        entries = reply[b"counted"][0] if isinstance(reply, dict) else reply[0][1]  # (RESP3, RESP2)
        assert len(entries) == 3
    [[_, entries]] = r.xread({"counted": "0"}, count=2)  # type: ignore[misc]
    assert len(entries) == 2


def test_an_xadd_refused_for_a_new_stream_makes_no_stream(r: redis.Redis, daemon: Daemon) -> None:
    """An explicit id before now for a stream that does not exist (a new log is stamped from its
    creation): refused before the log is made, so the key stays free (no stream, no log)."""
    with pytest.raises(redis.ResponseError, match="before this log's creation"):
        r.xadd("never", {"f": "v"}, id="1-0")
    assert r.type("never") == b"none" and not (daemon.data / "logs" / "never").exists()
    assert r.xadd("never", {"f": "v"}, id="1-0", nomkstream=True) is None  # (as Redis: nil, whatever the id)
    with pytest.raises(redis.ResponseError, match="requires the key to exist"):
        r.xgroup_create("never", "g", id="0")
    later = f"{time.time_ns() // 1_000_000 + 60_000}-0"  # (a minute ahead: taken)
    assert r.xadd("never", {"f": "v"}, id=later) == later.encode()


def test_xread_block_wakes_on_another_process_append(daemon: Daemon) -> None:
    r = redis.Redis(port=daemon.resp_port, socket_timeout=30)
    r.xadd("tail", {"payload": "before"})
    got: list[object] = []
    started = threading.Event()

    def reader() -> None:
        started.set()
        got.append(r.xread({"tail": "$"}, block=20_000))

    t = threading.Thread(target=reader)
    t.start()
    started.wait(5)
    deadline = time.monotonic() + 20
    # another process appends (the test process, through an embedded handle)
    with logspool.Log(daemon.data / "logs" / "tail") as log:
        while not got and time.monotonic() < deadline:
            log.append(b"wake")
            t.join(0.2)
    t.join(10)
    assert got and got[0][0][1][0][1] == {b"payload": b"wake"}  # type: ignore[index]
    r.close()


# --- no reply shows a write before it is durable ----------------------------------------------------
class _HeldKvFsyncs(FileSystem):
    """Once ``hold`` is set, every fsync of the default key-value store's op log says it began
    (``syncing``) and waits until ``release`` (at most 30 s)."""

    def __init__(self) -> None:
        self.hold = threading.Event()
        self.syncing = threading.Event()
        self.release = threading.Event()

    def fdatasync(self, fd: int) -> None:
        if self.hold.is_set() and "kv/default/ops" in os.readlink(f"/proc/self/fd/{fd}"):
            self.syncing.set()
            self.release.wait(30)
        super().fdatasync(fd)

    fsync = fdatasync


def test_a_read_never_shows_a_write_before_its_fsync(tmp_path: Path) -> None:
    """A SET whose fsync is held back: a GET from another connection may read the value, but its
    reply waits until that fsync is done and the SET answered (as Redis answers after its fsync)."""
    fs = _HeldKvFsyncs()
    running = Running(tmp_path / "data", resp=RespOptions(port=0), fs=fs)
    try:
        port = running.server.resp.options.port  # type: ignore[union-attr]
        writer, reader = raw_conn(port), raw_conn(port)
        writer.sendall(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$3\r\nold\r\n")
        assert writer.recv(100) == b"+OK\r\n"
        fs.hold.set()
        writer.sendall(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$3\r\nnew\r\n")
        assert fs.syncing.wait(10)  # decided, applied, its fsync held back
        reader.sendall(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n")
        reader.settimeout(0.3)  # (a bound for a reply that must not come)
        with pytest.raises(TimeoutError):
            reader.recv(100)
        fs.release.set()
        reader.settimeout(10)
        assert writer.recv(100) == b"+OK\r\n"
        assert reader.recv(100) == b"$3\r\nnew\r\n"
        writer.close()
        reader.close()
    finally:
        fs.release.set()
        running.stop()


# --- Disque's commands on job journals -----------------------------------------------------------
def disque(r: redis.Redis, *args: object) -> object:
    return r.execute_command(*args)


def test_disque_commands_on_a_job_journal(r: redis.Redis, daemon: Daemon) -> None:
    first = disque(r, "ADDJOB", "mail", "to-alice", 0)
    disque(r, "ADDJOB", "mail", "to-bob", 0, "PRIORITY", 200)
    assert isinstance(first, bytes) and first.startswith(b"D-") and first.endswith(b"-0-mail")
    assert disque(r, "QLEN", "mail") == 2
    assert [job[2] for job in disque(r, "QPEEK", "mail", 10)] == [b"to-alice", b"to-bob"]  # type: ignore[attr-defined]
    [[queue, job_id, body]] = disque(r, "GETJOB", "NOHANG", "FROM", "mail")  # type: ignore[misc]
    assert (queue, body) == (b"mail", b"to-alice") and job_id != first  # (the lease's token in it)
    show = disque(r, "SHOW", job_id)  # a map: a dict in RESP3 (redis-py 8's default), pairs in RESP2
    fields = show if isinstance(show, dict) else dict(zip(show[::2], show[1::2], strict=True))  # type: ignore[index]
    assert fields[b"state"] == b"active"
    assert disque(r, "WORKING", job_id) == 300
    assert disque(r, "ACKJOB", job_id) == 1 and disque(r, "ACKJOB", job_id) == 0
    [[_, bob, body]] = disque(r, "GETJOB", "COUNT", 5, "FROM", "nothing", "mail")  # type: ignore[misc]
    assert body == b"to-bob" and disque(r, "NACK", bob) == 1  # back in the queue at once
    [job] = disque(r, "GETJOB", "WITHCOUNTERS", "FROM", "mail")  # type: ignore[misc]
    again, body = job[1], job[2]
    assert body == b"to-bob" and job[3:] == [b"nacks", 1, b"additional-deliveries", 0]
    assert disque(r, "ACKJOB", again) == 1 and disque(r, "QLEN", "mail") == 0
    assert disque(r, "GETJOB", "TIMEOUT", 50, "FROM", "mail") is None
    # the journal is an ordinary one: an embedded handle sees RESP's jobs and the other way round
    with logspool.jobs.open(daemon.data / "jobs" / "mail") as journal:
        journal.put("native-key", b"from-python")
    [[_, native, body]] = disque(r, "GETJOB", "NOHANG", "FROM", "mail")  # type: ignore[misc]
    assert body == b"from-python" and disque(r, "ACKJOB", native) == 1
    with pytest.raises(redis.ResponseError, match="queue names"):
        disque(r, "ADDJOB", "../escape", "x", 0)
    with pytest.raises(redis.ResponseError, match="BADID"):
        disque(r, "ACKJOB", "not-an-id")


def test_ackjob_and_nack_check_every_id_before_acting_on_any(r: redis.Redis) -> None:
    """An ACKJOB or NACK with one id that is not a job id answers -BADID and changes nothing:
    the valid ids before it are not acked (the client, told of an error, would retry them)."""
    disque(r, "ADDJOB", "checked", "a", 0)
    [[_, leased, _]] = disque(r, "GETJOB", "NOHANG", "FROM", "checked")  # type: ignore[misc]
    queued = disque(r, "ADDJOB", "checked", "b", 0)
    for command, bad in (("ACKJOB", b"garbage"), ("NACK", b"D-1-0-../escape")):
        with pytest.raises(redis.ResponseError, match=r"BADID|queue names"):
            disque(r, command, leased, queued, bad)
        assert disque(r, "QLEN", "checked") == 1  # (b still queued: not removed by the ACKJOB)
        fields = disque(r, "SHOW", leased)
        shown = fields if isinstance(fields, dict) else dict(zip(fields[::2], fields[1::2], strict=True))  # type: ignore[index]
        assert shown[b"state"] == b"active"  # (still leased: neither acked nor given back)
    assert disque(r, "ACKJOB", leased, queued) == 2 and disque(r, "QLEN", "checked") == 0


def test_addjob_maxlen_admits_no_more_than_maxlen_at_once(daemon: Daemon) -> None:
    """16 connections send ``ADDJOB q body 0 MAXLEN 1`` together to an empty queue: one job is
    admitted, the others answer -MAXLEN (the look at the queue and the put are one step)."""
    clients = [redis.Redis(port=daemon.resp_port, socket_timeout=30) for _ in range(16)]
    try:
        assert all(c.ping() for c in clients)
        go = threading.Barrier(16)
        outcomes: list[object] = []

        def add(c: redis.Redis) -> None:
            go.wait(30)
            try:
                outcomes.append(disque(c, "ADDJOB", "bounded", "x", 0, "MAXLEN", 1))
            except redis.ResponseError as err:
                outcomes.append(err)

        threads = [threading.Thread(target=add, args=(c,)) for c in clients]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        added = [o for o in outcomes if isinstance(o, bytes)]
        refused = [o for o in outcomes if isinstance(o, redis.ResponseError) and str(o).startswith("MAXLEN")]
        assert len(added) == 1 and len(refused) == 15, outcomes
        assert disque(clients[0], "QLEN", "bounded") == 1
    finally:
        for c in clients:
            c.close()


def test_getjob_blocks_without_a_thread_until_a_job_comes(daemon: Daemon) -> None:
    r = redis.Redis(port=daemon.resp_port, socket_timeout=30)
    disque(r, "ADDJOB", "later", "seed", 0)  # the journal exists
    assert disque(r, "ACKJOB", disque(r, "GETJOB", "FROM", "later")[0][1]) == 1  # type: ignore[index]
    got: list[object] = []
    t = threading.Thread(target=lambda: got.append(disque(r, "GETJOB", "TIMEOUT", 20_000, "FROM", "later")))
    t.start()
    deadline = time.monotonic() + 20
    with logspool.jobs.open(daemon.data / "jobs" / "later") as journal:  # another process puts
        for i in range(1000):
            if got or time.monotonic() > deadline:
                break
            journal.put(f"k{i}", b"wake")
            t.join(0.2)
    t.join(10)
    assert got and got[0][0][2] == b"wake"  # type: ignore[index]
    # a delayed job: no write wakes the waiter; the time the journal names does
    other = redis.Redis(port=daemon.resp_port, socket_timeout=30)
    disque(other, "ADDJOB", "delayed", "soon", 0, "DELAY", 1)
    started = time.monotonic()
    [[_, _, body]] = disque(other, "GETJOB", "TIMEOUT", 10_000, "FROM", "delayed")  # type: ignore[misc]
    assert body == b"soon" and 0.5 < time.monotonic() - started < 8
    r.close()
    other.close()


# --- redis-benchmark ------------------------------------------------------------------------------
def test_redis_benchmark_runs_without_errors(daemon: Daemon) -> None:
    out = subprocess.run(
        ["redis-benchmark", "-p", str(daemon.resp_port), "-n", "2000", "-c", "8", "-r", "1000", "-q",
         "-t", "set,get,incr,mset", "--csv"],
        capture_output=True, timeout=120,
    )  # fmt: skip
    text = out.stdout.decode() + out.stderr.decode()
    assert out.returncode == 0, text
    assert "error" not in text.lower(), text
    tests = {line.split(",")[0].strip('"') for line in out.stdout.decode().splitlines()[1:]}
    assert {"SET", "GET", "INCR"} <= tests and any(t.startswith("MSET") for t in tests), text
    pipelined = subprocess.run(
        ["redis-benchmark", "-p", str(daemon.resp_port), "-n", "2000", "-c", "4", "-P", "16", "-q",
         "-t", "get"],
        capture_output=True, timeout=120,
    )  # fmt: skip
    assert pipelined.returncode == 0 and b"GET:" in pipelined.stdout


def test_a_lone_set_is_run_as_any_set(daemon: Daemon) -> None:
    """A read that is one whole ``SET key value`` goes to the commit round without the parser
    (``_lone_write``, SET x16's path); every case it does not take falls to the common path. Each
    SET is sent alone on a raw socket and must do what Redis does: an empty value, a value and a
    key holding CRLF and the bytes of a SET's header, a length with a leading zero, a length
    that lies, a SET inside MULTI, a SET split over two sends, two SETs in one send."""
    s = raw_conn(daemon.resp_port)
    reader = s.makefile("rb")

    def send(key: bytes, value: bytes, lengths: tuple[bytes, bytes] | None = None) -> bytes:
        k, v = lengths or (b"%d" % len(key), b"%d" % len(value))
        s.sendall(b"*3\r\n$3\r\nSET\r\n$%b\r\n%b\r\n$%b\r\n%b\r\n" % (k, key, v, value))
        return reader.readline()

    check = redis.Redis(port=daemon.resp_port, socket_timeout=10)
    try:
        assert send(b"ls:a", b"v" * 100) == b"+OK\r\n" and check.get("ls:a") == b"v" * 100
        assert send(b"ls:empty", b"") == b"+OK\r\n" and check.get("ls:empty") == b""
        odd = b"ls:\r\n*3\r\n$3\r\nSET\r\n$1\r\nx"
        assert send(odd, b"a\r\nb") == b"+OK\r\n" and check.get(odd) == b"a\r\nb"
        assert send(b"ls:zero", b"12", (b"07", b"02")) == b"+OK\r\n" and check.get("ls:zero") == b"12"
        s.sendall(b"*1\r\n$5\r\nMULTI\r\n")
        assert reader.readline() == b"+OK\r\n"
        assert send(b"ls:m", b"in multi") == b"+QUEUED\r\n"
        s.sendall(b"*1\r\n$4\r\nEXEC\r\n")
        assert [reader.readline() for _ in range(2)] == [b"*1\r\n", b"+OK\r\n"]
        assert check.get("ls:m") == b"in multi"
        whole = b"*3\r\n$3\r\nSET\r\n$6\r\nls:cut\r\n$5\r\nparts\r\n"
        s.sendall(whole[:25])
        s.sendall(whole[25:])
        assert reader.readline() == b"+OK\r\n" and check.get("ls:cut") == b"parts"
        s.sendall(whole.replace(b"parts", b"one!!") + whole.replace(b"parts", b"two!!"))
        assert [reader.readline() for _ in range(2)] == [b"+OK\r\n", b"+OK\r\n"]
        assert check.get("ls:cut") == b"two!!"
        assert send(b"ls:lie", b"abc", (b"4", b"3")).startswith(b"-ERR Protocol error")
        assert reader.readline() == b""  # (and the connection with it)
        assert check.get("ls:lie") is None
    finally:
        check.close()
        reader.close()
        s.close()


def test_a_lone_xadd_is_run_as_any_xadd(daemon: Daemon) -> None:
    """A read that is one whole ``XADD key * field value`` goes to the commit round without the
    parser (``_lone_write``, XADD x16's path); every case it does not take falls to the common
    path. Each XADD is sent alone on a raw socket and must do what Redis does: its id, its entry
    read back; an empty value; a field and a value holding CRLF and an XADD's header; an
    explicit id (not ``*``), which the lone path leaves to the parser; an XADD inside MULTI; one
    split over two sends; two in one send; a length that lies."""
    s = raw_conn(daemon.resp_port)
    reader = s.makefile("rb")

    def send(
        key: bytes, field: bytes, value: bytes, entry_id: bytes = b"*", lie: bytes | None = None
    ) -> bytes:
        v = lie or b"%d" % len(value)
        s.sendall(b"*5\r\n$4\r\nXADD\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n$%b\r\n%b\r\n"
                  % (len(key), key, len(entry_id), entry_id, len(field), field, v, value))  # fmt: skip
        head = reader.readline()
        return head + reader.readline() if head.startswith(b"$") else head

    check = redis.Redis(port=daemon.resp_port, socket_timeout=10)
    try:
        got = send(b"lx.a", b"payload", b"v" * 100)
        assert got.startswith(b"$")
        first = got.split(b"\r\n")[1]
        assert check.xrange("lx.a") == [(first, {b"payload": b"v" * 100})]
        assert send(b"lx.a", b"f", b"").startswith(b"$")
        odd = b"a\r\n*5\r\n$4\r\nXADD\r\n$1\r\nx"
        assert send(b"lx.a", odd, odd).startswith(b"$")
        assert [fields for _, fields in check.xrange("lx.a")][1:] == [{b"f": b""}, {odd: odd}]
        wanted = b"%d-3" % (int(first.split(b"-")[0]) + 60_000)  # (its lsn, a later time: honoured)
        assert send(b"lx.a", b"f", b"x", entry_id=wanted) == b"$%d\r\n%b\r\n" % (len(wanted), wanted)
        s.sendall(b"*1\r\n$5\r\nMULTI\r\n")
        assert reader.readline() == b"+OK\r\n"
        assert send(b"lx.m", b"f", b"in multi") == b"+QUEUED\r\n"
        s.sendall(b"*1\r\n$4\r\nEXEC\r\n")
        assert reader.readline() == b"*1\r\n" and reader.readline().startswith(b"$")
        reader.readline()
        assert [fields for _, fields in check.xrange("lx.m")] == [{b"f": b"in multi"}]
        whole = b"*5\r\n$4\r\nXADD\r\n$6\r\nlx.cut\r\n$1\r\n*\r\n$1\r\nf\r\n$5\r\nparts\r\n"
        s.sendall(whole[:30])
        s.sendall(whole[30:])
        assert reader.readline().startswith(b"$") and reader.readline()
        s.sendall(whole.replace(b"parts", b"one!!") + whole.replace(b"parts", b"two!!"))
        assert all(reader.readline() for _ in range(4))
        assert [fields[b"f"] for _, fields in check.xrange("lx.cut")] == [b"parts", b"one!!", b"two!!"]
        assert send(b"lx.lie", b"f", b"abc", lie=b"2").startswith(b"-ERR Protocol error")
        assert reader.readline() == b""  # (and the connection with it)
        assert check.exists("lx.lie") == 0
    finally:
        check.close()
        reader.close()
        s.close()


# --- AUTH -----------------------------------------------------------------------------------------
def test_auth_with_a_token(tmp_path: Path) -> None:
    d = Daemon(tmp_path / "data", "--token", "s3cret", resp=True).start()
    try:
        port = d.resp_port
        with pytest.raises(redis.AuthenticationError):
            no_retry(port).get("a")
        with pytest.raises(redis.AuthenticationError):
            no_retry(port, password="wrong").get("a")
        ok = redis.Redis(port=port, password="s3cret")
        assert ok.set("a", 1) and ok.get("a") == b"1"
        assert redis.Redis(port=port, password="s3cret", protocol=3).get("a") == b"1"  # HELLO 3 AUTH
        assert cli(port, "GET", "a").startswith("NOAUTH")
        assert ok.set("text", "a string")
        s = raw_conn(port)
        with s.makefile("rb") as reader:
            for _ in range(3):  # (after the first, each read is one whole GET: ``_lone_get``'s)
                s.sendall(b"*2\r\n$3\r\nGET\r\n$4\r\ntext\r\n")
                assert reader.readline().startswith(b"-NOAUTH")
                s.sendall(b"*3\r\n$3\r\nSET\r\n$4\r\ntext\r\n$1\r\nx\r\n")  # (``_lone_write``'s)
                assert reader.readline().startswith(b"-NOAUTH")
                s.sendall(b"*5\r\n$4\r\nXADD\r\n$1\r\ns\r\n$1\r\n*\r\n$1\r\nf\r\n$1\r\nv\r\n")
                assert reader.readline().startswith(b"-NOAUTH")
        s.close()
        assert ok.get("text") == b"a string"
        assert cli(port, "-a", "s3cret", "--no-auth-warning", "GET", "a") == "1\n"
        # before AUTH the parser's bounds are Redis's unauthenticated ones
        s = raw_conn(port)
        s.sendall(b"*1000\r\n")
        assert read_until_closed(s).startswith(
            b"-ERR Protocol error: invalid unauthenticated multibulk length"
        )
        s.close()
    finally:
        d.kill()


def test_resp_from_the_config_file_alone(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "serve.toml"
    config.write_text(f'data = "{tmp_path / "data"}"\nresp = "127.0.0.1:{port}"\nresp_kv = "cache"\n')
    proc = subprocess.Popen([sys.executable, "-m", "logspool.cli", "serve", "--config", str(config)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    try:

        def up() -> bool:
            try:
                return bool(no_retry(port).ping())
            except redis.ConnectionError:
                assert proc.poll() is None, proc.stdout.read() if proc.stdout else b""  # type: ignore[union-attr]
                return False

        wait_for(up, 30)
        assert no_retry(port).set("from-config", 1)
        assert (tmp_path / "data" / "kv" / "cache").is_dir()  # --resp-kv's store
    finally:
        proc.kill()
        proc.wait(30)
    assert b"listening on" not in (proc.stdout.read() if proc.stdout else b"")  # RESP only: no native port


def test_tls_on_the_resp_port(tmp_path: Path) -> None:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command makes the test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)  # fmt: skip
    d = Daemon(tmp_path / "data", "--tls-cert", str(cert), "--tls-key", str(key), resp=True).start()
    try:
        c = redis.Redis(host="127.0.0.1", port=d.resp_port, ssl=True, ssl_ca_certs=str(cert))
        assert c.set("secure", "yes") and c.get("secure") == b"yes"
        c.close()
        plain = raw_conn(d.resp_port)
        plain.sendall(b"PING\r\n")
        assert read_until_closed(plain) != b"+PONG\r\n"  # no plain text on a TLS port
        plain.close()
    finally:
        d.kill()


def test_sigterm_answers_what_is_in_flight_and_loses_nothing(tmp_path: Path) -> None:
    d = Daemon(tmp_path / "data", resp=True).start()
    acked: dict[str, bytes] = {}
    lock = threading.Lock()

    def writer(n: int) -> None:
        c = no_retry(d.resp_port, socket_timeout=10)
        try:
            for i in range(1 << 30):
                c.set(f"t{n}-{i}", b"%d" % i)
                with lock:
                    acked[f"t{n}-{i}"] = b"%d" % i
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            return  # the daemon stopped: what was not answered is not acknowledged
        finally:
            c.close()

    try:
        threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        wait_for(lambda: len(acked) >= 200, 30)
        assert d.signal(signal.SIGTERM) == 0
        for t in threads:
            t.join(30)
        assert "stopped" in d.output()
        d.start()
        c = redis.Redis(port=d.resp_port)
        missing = [k for k, v in acked.items() if c.get(k) != v]
        assert not missing, f"{len(missing)} acknowledged SETs are missing after SIGTERM, e.g. {missing[:3]}"
        c.close()
    finally:
        d.kill()


# --- hostile input --------------------------------------------------------------------------------
def _alive(port: int | None) -> bool:
    c = redis.Redis(port=port, socket_timeout=5)
    try:
        return bool(c.ping())
    finally:
        c.close()


@pytest.mark.parametrize(
    ("payload", "reply"),
    [
        (b"*1\r\n" * 50 + b"$4\r\nPING\r\n", b"-ERR Protocol error: expected '$', got '*'"),  # nesting
        (b"*2\r\n$3\r\nGET\r\n$99999999999\r\n", b"-ERR Protocol error: invalid bulk length"),
        (b"*99999999999\r\n", b"-ERR Protocol error: invalid multibulk length"),
        (b"*1\r\n$x\r\n", b"-ERR Protocol error: invalid bulk length"),
        (b"*1\r\n$4\r\nPINGxx", b"-ERR Protocol error: bulk string not terminated by CRLF"),
        (b"*1\r\n$" + b"9" * 70_000, b"-ERR Protocol error: too big bulk count string"),
        (b"A" * 70_000, b"-ERR Protocol error: too big inline request"),
        (b'SET "unbalanced\r\n', b"-ERR Protocol error: unbalanced quotes in request"),
    ],
)
def test_a_protocol_error_closes_only_its_connection(daemon: Daemon, payload: bytes, reply: bytes) -> None:
    bystander = redis.Redis(port=daemon.resp_port)
    bystander.set("host:b", "still here")
    s = raw_conn(daemon.resp_port)
    s.sendall(payload)
    assert read_until_closed(s).startswith(reply)
    s.close()
    assert bystander.get("host:b") == b"still here"
    bystander.close()


def test_commands_before_a_protocol_error_are_answered(daemon: Daemon) -> None:
    s = raw_conn(daemon.resp_port)
    s.sendall(b"*1\r\n$4\r\nPING\r\nECHO hi\r\n*1\r\n$-5\r\n*1\r\n$4\r\nPING\r\n")
    assert read_until_closed(s) == b"+PONG\r\n$2\r\nhi\r\n-ERR Protocol error: invalid bulk length\r\n"
    s.close()


def test_random_bytes_and_unterminated_arrays_harm_no_one_else(daemon: Daemon) -> None:
    rng = random.Random(34)
    held = []
    for _ in range(20):
        s = raw_conn(daemon.resp_port)
        s.sendall(rng.randbytes(rng.randrange(1, 4096)))
        s.shutdown(socket.SHUT_WR)
        read_until_closed(s)  # an error reply or replies, then the close: never a hang
        s.close()
    for _ in range(10):  # unterminated: the server waits for the rest, holding nothing else up
        s = raw_conn(daemon.resp_port)
        s.sendall(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$100\r\nabc")
        held.append(s)
    s = raw_conn(daemon.resp_port)
    s.sendall(b"PING\r\nNOSUCH a b\r\n*1\r\n$4\r\nPING\r\n")  # inline, unknown, multibulk
    data = b""
    while data.count(b"\r\n") < 3:
        data += s.recv(4096)
    assert data.startswith(b"+PONG\r\n-ERR unknown command 'NOSUCH'") and data.endswith(b"+PONG\r\n")
    s.close()
    assert _alive(daemon.resp_port)
    for s in held:
        s.close()


def test_connections_past_the_limit_are_refused_as_redis_does(tmp_path: Path) -> None:
    running = Running(tmp_path / "data", resp=RespOptions(port=0), limits=Limits(connections_max=8))
    try:
        port = running.server.resp.options.port  # type: ignore[union-attr]
        held = [raw_conn(port) for _ in range(8)]
        for s in held:  # each is served (and so counted) before the next connects
            s.sendall(b"PING\r\n")
            assert s.recv(100) == b"+PONG\r\n"
        extra = raw_conn(port)
        assert read_until_closed(extra) == b"-ERR max number of clients reached\r\n"
        extra.close()
        held.pop().close()
        wait_for(lambda: running.server.connection_count() < 8)
        again = redis.Redis(port=port)
        assert again.ping()
        again.close()
        for s in held:
            s.close()
    finally:
        running.stop()


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_a_client_that_never_reads_cannot_grow_server_memory(daemon: Daemon) -> None:
    r = redis.Redis(port=daemon.resp_port)
    r.set("big", b"x" * (1 << 20))  # 1 MiB
    assert daemon.proc is not None
    before = _rss_kib(daemon.proc.pid)
    s = raw_conn(daemon.resp_port)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    command = b"*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n"
    s.setblocking(False)
    sent = 0
    deadline = time.monotonic() + 10
    while sent < 400 * len(command) and time.monotonic() < deadline:  # asks for 400 MiB of replies
        try:
            sent += s.send(command * 50)
        except BlockingIOError:
            time.sleep(0.01)  # the server stopped reading: TCP pushes back
    grown_mib = (_rss_kib(daemon.proc.pid) - before) / 1024
    assert grown_mib < 64, f"the daemon grew by {grown_mib:.0f} MiB"
    assert _alive(daemon.resp_port)  # others are served meanwhile
    assert r.get("host:none") is None
    s.close()
    r.close()


# --- the parser, fuzzed ---------------------------------------------------------------------------
LIMITS = RespLimits(bulk_size_max=1 << 12, command_size_max=1 << 14, args_max=64, line_size_max=256)


def _encode(cmd: list[bytes]) -> bytes:
    return b"*%d\r\n" % len(cmd) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in cmd)


commands = st.lists(st.lists(st.binary(max_size=40), min_size=1, max_size=6), max_size=12)


@settings(max_examples=200, deadline=None)
@given(commands, st.lists(st.integers(1, 64), max_size=20))
def test_parser_returns_every_command_whatever_the_split(cmds: list[list[bytes]], cuts: list[int]) -> None:
    data = b"".join(_encode(c) for c in cmds)
    parser = RespParser(LIMITS)
    got: list[list[bytes]] = []
    pos = 0
    for cut in [*cuts, len(data)]:
        parser.feed(data[pos : pos + cut])
        pos += cut
        got += parser.commands(1000)
    parser.feed(data[pos:])
    got += parser.commands(1000)
    assert got == cmds and parser.buffered == 0


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2048))
def test_parser_on_any_bytes_yields_commands_or_a_protocol_error(data: bytes) -> None:
    parser = RespParser(LIMITS)
    parser.feed(data)
    try:
        for cmd in parser.commands(10_000):
            assert cmd and len(cmd) <= LIMITS.args_max
            assert sum(map(len, cmd)) <= max(LIMITS.command_size_max, LIMITS.line_size_max)
    except RespProtocolError:
        pass
    assert parser.buffered <= len(data)


def _parse_all(parser: RespParser, pieces: list[bytes]) -> tuple[list[list[bytes]], str | None]:
    got: list[list[bytes]] = []
    for piece in pieces:
        parser.feed(piece)
        try:
            got += parser.commands(1000)
        except RespProtocolError as err:
            return got, str(err)
    return got, None


# Commands, and the bytes that break them or hiredis's bounds: nesting, huge counts, null and
# empty arrays, a bulk string not ended by CRLF, non-canonical lengths, inline commands.
_pieces = st.lists(
    st.one_of(
        commands.map(lambda cmds: b"".join(_encode(c) for c in cmds)),
        st.sampled_from(
            [
                b"*1\r\n*1\r\n$4\r\nPING\r\n",
                b"*1048577\r\n",
                b"*2\r\n*999999\r\n",
                b"*0\r\n",
                b"*-1\r\n",
                b"*1\r\n$4\r\nPINGxx",
                b"*1\r\n$04\r\nPING\r\n",
                b"PING\r\n",
                b"*1\r\n:1\r\n",
                b"%1\r\n$1\r\na\r\n$1\r\nb\r\n",
                b"*1\r\n$-1\r\n",
            ]
        ),
        st.binary(max_size=64),
    ),
    max_size=8,
)


@pytest.mark.parametrize("limits", [LIMITS, RespLimits()], ids=["args-64", "default"])
def test_hiredis_takes_a_pipeline_whole(limits: RespLimits) -> None:
    parser = RespParser(limits)
    parser.feed(b"".join(_encode([b"GET", b"k%d" % i]) for i in range(16)))
    out: list[list[bytes]] = []
    assert parser._fast(parser._buf, len(parser._buf), 1000, out)
    assert out == [[b"GET", b"k%d" % i] for i in range(16)] and parser.buffered == 0


def test_hiredis_is_never_fed_counts_past_the_bound() -> None:
    """Counts that sum past ``args_max`` send a read to the Python parser, whether one count has
    three digits or many small ones add up (the quick bound refuses both); the Python parser
    then answers the commands before them and parses the rest."""
    limits = RespLimits(args_max=300)
    many = b"".join(_encode([b"K"] * 60) for _ in range(6))  # 6 headers of 60: 360 > 300
    big = _encode([b"GET", b"a"]) + _encode([b"K"] * 299)  # a count of three digits: 301 > 300
    for data, n in ((many, 6), (big, 2)):
        parser = RespParser(limits)
        parser.feed(data)
        out: list[list[bytes]] = []
        assert not parser._fast(parser._buf, len(parser._buf), 1000, out) and out == []
        assert len(parser.commands(1000)) == n and parser.buffered == 0


# The pre-check's two ways to bound hiredis's allocations: LIMITS (64 elements) always sums the
# counts; 1,000 elements take the quick bound (no count of three digits, headers * 99 <= 1,000)
# for reads of at most ten headers, and sum the counts past it.
WIDE = RespLimits(bulk_size_max=1 << 12, command_size_max=1 << 14, args_max=1000, line_size_max=256)


@pytest.mark.parametrize("limits", [LIMITS, WIDE], ids=["args-64", "args-1000"])
@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            _pieces.map(b"".join), st.sampled_from([b"*99\r\n", b"*100\r\n", b"*1001\r\n", b"*2\r\n*98\r\n"])
        ),
        max_size=4,
    ),
    st.lists(st.integers(1, 64), max_size=20),
)
def test_hiredis_parses_as_the_python_parser(
    limits: RespLimits, pieces: list[bytes], cuts: list[int]
) -> None:
    """The hiredis path (with its pre-check) gives the same commands and the same error as the
    pure-Python parser, however the bytes are split into reads."""
    data = b"".join(pieces)
    reads, pos = [], 0
    for cut in cuts:
        reads.append(data[pos : pos + cut])
        pos += cut
    reads.append(data[pos:])
    fast, slow = RespParser(limits), RespParser(limits, fast=False)
    assert fast._reader is not None  # (hiredis is a dependency: this tests it)
    assert _parse_all(fast, reads) == _parse_all(slow, reads)
    assert fast.buffered == slow.buffered


# Reads of GETs and SETs as clients send them, and the bytes that make a read something else: a
# key holding a command's header, a lying or zero-led length, junk, a command cut short.
_gets_and_sets = st.lists(
    st.one_of(
        st.binary(max_size=12).map(lambda k: _encode([b"GET", k])),
        st.sampled_from([99, 999, 9_999, 99_999, 100_000]).map(lambda n: _encode([b"GET", b"k" * n])),
        st.tuples(st.binary(max_size=12), st.binary(max_size=20)).map(lambda kv: _encode([b"SET", *kv])),
        st.sampled_from(
            [
                _encode([b"GET", b"k*2\r\n$3\r\nGET\r\n$1\r\nx"]),
                _encode([b"SET", b"*3\r\n$3\r\nSET\r\n$1\r\nx", b"v"]),
                b"*2\r\n$3\r\nGET\r\n$02\r\nab\r\n",
                b"*2\r\n$3\r\nGET\r\n$3\r\nab\r\n",
                b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$00\r\n\r\n",
                b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\nvXY",
                b"*3\r\n$3\r\nSET\r\n$1\r\nkXY$1\r\nv\r\n",
                b"*2\r\n$3\r\nGET\r\n$1\r\nkX\r\n",
                b"*2\r\n$3\r\nGET\r\n$1\r\nkXY",
                b"*2\r\n$3\r\nGET\r\n$",
                b"\r\n",
                _encode([b"XADD", b"s", b"*", b"f", b"*5\r\n$4\r\nXADD\r\n$1\r\ns"]),
                _encode([b"XADD", b"s", b"0-1", b"f", b"v"]),
                _encode([b"XADD", b"s", b"*", b"f", b"v", b"g", b"w"]),
                b"*5\r\n$4\r\nXADD\r\n$1\r\ns\r\n$1\r\n*\r\n$01\r\nf\r\n$1\r\nv\r\n",
                b"*5\r\n$4\r\nXADD\r\n$1\r\ns\r\n$1\r\n*\r\n$1\r\nf\r\n$2\r\nvXY",
            ]
        ),
        st.tuples(st.binary(max_size=6), st.binary(max_size=6), st.binary(max_size=12)).map(
            lambda kfv: _encode([b"XADD", kfv[0], b"*", kfv[1], kfv[2]])
        ),
        st.binary(max_size=8),
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=500, deadline=None)
@given(_gets_and_sets)
def test_the_parser_free_reads_parse_as_the_parser(pieces: list[bytes]) -> None:
    """A read the daemon takes without the parser (``_whole_gets``: GETs only, GET -P16;
    ``_whole_set``: one SET, SET x16; ``_whole_xadd``: one XADD of one field, XADD x16) is one the
    parser reads whole into the same commands; any other read is left to the parser."""
    data = b"".join(pieces)
    parser = RespParser(RespLimits())
    got, error = _parse_all(parser, [data])
    keys = _resp._whole_gets(data) if data.startswith(_resp._LONE_GET) else None
    if keys is not None:
        assert error is None and parser.buffered == 0 and got == [[b"GET", k] for k in keys]
    found = _resp._whole_set(data) if data.startswith(_resp._LONE_SET) else None
    if found is not None:
        assert error is None and parser.buffered == 0 and got == [[b"SET", *found]]
    if len(got) == 1 and got[0][0] == b"SET" and got[0][1] and data == _encode(got[0]):
        assert found == (got[0][1], got[0][2])  # (a SET as clients send it is taken; an empty key not)
    xadd = _resp._whole_xadd(data) if data.startswith(_resp._LONE_XADD) else None
    if xadd is not None:
        assert error is None and parser.buffered == 0 and got == [[b"XADD", *xadd]]
    if len(got) == 1 and got[0][:1] == [b"XADD"] and len(got[0]) == 5 and got[0][2] == b"*":
        assert xadd == (got[0][1:] if data == _encode(got[0]) else None)  # (as clients send it: taken)
    if got[:1] and got[0][:1] == [b"XADD"] and (len(got[0]) != 5 or got[0][2] != b"*"):
        assert xadd is None  # (an explicit id, an option, more fields: the parser's, then the thread's)
    if got and all(c[0] == b"GET" and c[1] for c in got) and data == b"".join(map(_encode, got)):
        # GETs as clients send them are taken, unless a key holds bytes a GET's header starts
        # with (``_GET_HEADS`` matches elsewhere than at each command's start)
        starts = list(itertools.accumulate(len(_encode(c)) for c in got[:-1]))
        if [m.start() for m in _resp._GET_HEADS.finditer(data)] == [0, *starts]:
            assert keys == [c[1] for c in got]


def test_a_read_of_more_gets_than_a_batch_holds_goes_to_the_parser() -> None:
    """``_whole_gets`` takes a read of at most ``BATCH_COMMANDS_MAX`` GETs (a batch's bound);
    one more and the parser takes the read, which bounds each batch itself."""
    gets = [_encode([b"GET", b"k%d" % i]) for i in range(_resp.BATCH_COMMANDS_MAX + 1)]
    taken = _resp._whole_gets(b"".join(gets[:-1]))
    assert taken is not None and len(taken) == _resp.BATCH_COMMANDS_MAX
    assert _resp._whole_gets(b"".join(gets)) is None


@settings(max_examples=200, deadline=None)
@given(st.text("ab*?[]^-\\", max_size=12), st.text("ab-]", max_size=12))
def test_glob_is_fnmatch_on_simple_patterns(pattern: str, text: str) -> None:
    import fnmatch
    import re

    if "[" in pattern or "\\" in pattern:
        return  # (bracket and escape rules differ between fnmatch and Redis)
    expected = re.fullmatch(fnmatch.translate(pattern), text, re.S) is not None
    assert glob_match(pattern.encode(), text.encode()) == expected


# --- kill -9 under redis-py writers ---------------------------------------------------------------
@pytest.mark.parametrize("writers", [4, 1])  # (1: a lone writer's rounds run on the loop)
def test_kill_9_loses_no_acknowledged_write(tmp_path: Path, writers: int) -> None:
    d = Daemon(tmp_path / "data", resp=True)
    acked_sets: dict[str, bytes] = {}
    acked_ids: dict[bytes, bytes] = {}  # payload -> id
    acked_jobs: dict[bytes, bytes] = {}  # payload -> Disque job id
    counts = {"acked": 0, "sent": 0}
    lock = threading.Lock()
    stop = threading.Event()

    def writer(n: int, round_: int) -> None:
        c = no_retry(d.resp_port, socket_timeout=10)
        try:
            for i in range(1 << 30):
                if stop.is_set():
                    return
                key, value = f"k{round_}-{n}-{i}", b"v%d" % i
                c.set(key, value)
                with lock:
                    acked_sets[key] = value
                    counts["sent"] += 1
                c.incr("counter")
                with lock:
                    counts["acked"] += 1
                payload = b"r%d-%d-%d" % (round_, n, i)
                entry_id = c.xadd("stream", {"payload": payload})
                with lock:
                    acked_ids[payload] = entry_id
                job_id = c.execute_command("ADDJOB", "work", payload, 0)
                with lock:
                    acked_jobs[payload] = job_id
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            return  # the daemon died: what was in flight is not acknowledged
        finally:
            c.close()

    try:
        for round_ in range(2):
            d.start()
            stop.clear()
            target = counts["acked"] + 150
            threads = [threading.Thread(target=writer, args=(n, round_)) for n in range(writers)]
            for t in threads:
                t.start()
            wait_for(lambda target=target: counts["acked"] >= target, 30)  # type: ignore[misc]
            d.kill()  # kill -9 with writes in flight
            stop.set()
            for t in threads:
                t.join(30)
            d.start()
            c = redis.Redis(port=d.resp_port)
            missing = [k for k, v in acked_sets.items() if c.get(k) != v]
            assert not missing, f"{len(missing)} acknowledged SETs are missing, e.g. {missing[:3]}"
            counter = int(c.get("counter") or 0)
            assert counts["acked"] <= counter <= counts["sent"], (counts, counter)
            entries = []
            last = "0"
            for _ in range(1000):
                page = c.xread({"stream": last}, count=5000)
                if not page:
                    break
                entries += page[0][1]
                last = page[0][1][-1][0].decode()
            payloads = [fields[b"payload"] for _, fields in entries]
            assert len(payloads) == len(set(payloads)), "an entry appears twice"
            ids = {fields[b"payload"]: eid for eid, fields in entries}
            lost = [p for p, eid in acked_ids.items() if ids.get(p) != eid]
            assert not lost, f"{len(lost)} acknowledged XADDs are missing or renumbered, e.g. {lost[:3]}"
            queued = {job[2]: job[1] for job in c.execute_command("QPEEK", "work", 1000)}
            lost = [p for p, jid in acked_jobs.items() if queued.get(p) != jid]
            assert not lost, f"{len(lost)} acknowledged ADDJOBs are missing, e.g. {lost[:3]}"
            assert c.execute_command("QLEN", "work") == len(queued)  # (none twice: one job each)
            c.close()
            d.kill()
        assert len(acked_ids) >= 200  # (two rounds of at least 150 INCRs, most with their XADD)
    finally:
        stop.set()
        d.kill()
    assert os.path.isdir(tmp_path / "data" / "logs" / "stream")
