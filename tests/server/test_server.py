"""The daemon as clients use it, on 127.0.0.1: every command, TTL and touch, locks, rename,
watches and tails (woken by other processes), pipelining, auth, TLS, limits and hostile frames.

A real server (tests/server/conftest.py) and the real client; stores are real directories.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import ssl
import struct
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import logspool
from logspool import _wire as p
from logspool import client, jobs, kv
from logspool.errors import (
    KeyExistsError,
    KeyLockedError,
    KeyNotFoundError,
    LeaseExpiredError,
    RemoteError,
    ValueTypeError,
)
from logspool.server import Limits, Server
from tests.server.conftest import Running


def test_every_kv_command_over_the_wire(shared: Running) -> None:
    with client.connect(shared.address) as c:
        k = c.kv("cfg")
        assert k.set("i", 1) and k.add("i", 41) == 42 and k.get("i") == 42
        assert k.set("f", 1.5) and k.add("f", 1) == 2.5
        assert k.set("b", True) and k.flip("b") is False
        assert k.set("raw", b"abcdef") and k.truncate("raw", 2) == 2 and k.get("raw") == b"ab"
        assert k.set("v", None) and k.entry("v").type == "void"
        assert not k.set("i", 0, overwrite=False)
        assert not k.set("i", 0, ts=1.0)  # last writer wins
        probe = k.entry("raw", data=False)
        assert probe.value is None and probe.size == 2 and probe.type == "bytes"
        with pytest.raises(ValueTypeError):
            k.flip("i")
        with pytest.raises(KeyNotFoundError):
            k.flip("missing")
        assert k.rename("raw", "raw2") and k.get("raw") is None
        with pytest.raises(KeyExistsError):
            k.rename("raw2", "i")
        until = k.lock("i", "alice", ttl=60)
        assert until > time.time()
        with pytest.raises(KeyLockedError) as err:
            k.add("i")
        assert err.value.owner == "alice"
        assert k.add("i", owner="alice") == 43
        assert k.unlock("i", "alice")
        assert k.delete("i") and k.get("i") is None and not k.delete("i")
        for n in range(30):
            k.set(f"r{n:02d}", n)
        page = k.range("r0", "r9", limit=20)
        assert [v.value for v in page] == list(range(20)) and page.cursor == "r19"
        assert [v.value for v in k.range("r0", "r9", cursor=page.cursor)] == list(range(20, 30))
        assert [v.key for v in k.match(r"^r2[5-9]$")] == ["r25", "r26", "r27", "r28", "r29"]
        assert k.stats().keys == 34  # f, b, raw2, v and r00..r29
        with pytest.raises(ValueError, match="key must not be empty"):
            k.set("", 1)
        with pytest.raises(ValueError, match="name must match"):
            c.kv("../escape").get("x")
    # the daemon's store is an ordinary store: embedded users see the same data
    with kv.open(shared.server.data + "/kv/cfg") as s:
        assert s["r05"] == 5


def test_the_remote_store_reads_as_the_embedded_one_get_entry_and_mapping_calls(shared: Running) -> None:
    with client.connect(shared.address) as c:
        k = c.kv("map")
        k.set("void", None)
        assert k.get("missing") is None and k.get("missing", 5) == 5 and k.get("void", 5) is None
        assert k.entry("missing") is None and k.entry("void").type == "void"
        k["b"] = b"\x00raw"
        k["a"] = 1
        k["\u00e9"] = "text"
        assert k["a"] == 1 and k["b"] == b"\x00raw" and k.get("\u00e9") == "text"
        with pytest.raises(KeyError) as err:
            k["missing"]
        assert str(err.value) == f"{shared.address}/map: no key 'missing'"
        with pytest.raises(KeyError):
            del k["missing"]
        del k["void"]
        assert "a" in k and "void" not in k and 5 not in k and "" not in k
        k.ITER_PAGE_COUNT = 2  # pages of two keys: four round trips for four keys
        for n in range(1, 3):
            k[f"n{n}"] = n
        order = ["a", "b", "n1", "n2", "\u00e9"]  # UTF-8 byte order
        assert list(k) == order and list(k.keys()) == order
        assert list(k.items()) == [("a", 1), ("b", b"\x00raw"), ("n1", 1), ("n2", 2), ("\u00e9", "text")]
        assert list(k.values()) == [1, b"\x00raw", 1, 2, "text"]
    with kv.open(shared.server.data + "/kv/map") as s:
        assert dict(s) == {"a": 1, "b": b"\x00raw", "n1": 1, "n2": 2, "\u00e9": "text"}


def test_a_page_of_large_values_stays_within_a_frame(running: Running) -> None:
    """The daemon bounds a kv.RANGE or kv.MATCH reply to 8 MiB of keys and values (or one value),
    whatever ``limit`` asks: three 5 MiB values come a page each, not in one 15 MiB frame."""
    big = {f"big{i}": bytes([65 + i]) * (5 * 1024 * 1024) for i in range(3)}
    with client.connect(running.address) as c:
        k = c.kv("large")
        for key, value in big.items():
            k[key] = value
        page = k.range(limit=100)
        assert [v.key for v in page] == ["big0"] and page.cursor == "big0"
        found = k.match("big", limit=100, bytes_max=11 * 1024 * 1024)  # (the daemon's bound is lower)
        assert [v.key for v in found] == ["big0"] and found.cursor == "big0"
        assert dict(k.items()) == big
        assert [v.key for v in k.range(limit=100, data=False)] == list(big)  # probes: keys only


def test_ttl_touch_and_memory_only_values_over_the_wire(running: Running) -> None:
    with client.connect(running.address) as c:
        k = c.kv("cache")
        k.set("gone", 1, ttl=0.3)
        k.set("kept", 1, touch=0.6)
        k.set("mem", "volatile", persist=False)
        for _ in range(5):  # reads keep the touched value alive past its first expiry
            time.sleep(0.2)
            assert k.get("kept") is not None
        assert k.get("gone") is None
        assert k.get("mem") == "volatile" and k.entry("mem").persist is False
        time.sleep(0.8)
        assert k.get("kept") is None


def test_jobs_over_the_wire(running: Running) -> None:
    with client.connect(running.address) as c:
        j = c.jobs("work")
        one = j.put("http://a.example/1", b"one", priority=1)
        j.put("http://b.example/2", b"two", priority=2)
        first = j.take(lease=30)
        assert first.key == "http://a.example/1" and first.payload == b"one" and first.domain == "a.example"
        assert first.id == one, "put returns the job's id"
        assert j.extend(first, 60).lease_until > time.time() + 50
        j.ack(first)
        with pytest.raises(LeaseExpiredError):
            j.ack(first)
        second = j.take(lease=30)
        j.nack(second, delay=100, error="later")
        idle = j.take()
        assert not idle and idle.next_at > time.time() + 90
        assert [x.state for x in j.get("http://b.example/2")] == ["pending"]
        assert j.stats().pending == 1 and j.stats().counters["acked"] == 1


def test_jobs_in_batches_over_the_wire(running: Running) -> None:
    with client.connect(running.address) as c:
        j = c.jobs("batch")
        for i in range(5):
            j.put(f"k{i}", b"%d" % i)
        first = j.take_many(3, lease=30)
        assert [x.key for x in first] == ["k0", "k1", "k2"] and all(x.state == "leased" for x in first)
        second = j.take_many(3, ack=first)
        assert [x.payload for x in second] == [b"3", b"4"] and j.stats().counters["acked"] == 3
        with pytest.raises(LeaseExpiredError):
            j.ack_many([second[0], first[0]])  # first[0] is acked already: all or none
        assert j.stats().counters["acked"] == 3
        j.ack_many(second)
        assert j.take_many(3) == [] and j.stats().counters["acked"] == 5
        j.put("r", b"back")
        [r] = j.take_many(1)
        j.release(r)  # given back unstarted: pending again, the delivery not counted
        [back] = j.get("r")
        assert back.state == "pending" and back.deliveries == 0 and j.stats().counters["released"] == 1
        with pytest.raises(LeaseExpiredError):
            j.release_many([r])
        out = c.pipeline(
            [
                (p.JOB_TAKE_MANY, {"name": "batch"}),
                (p.JOB_TAKE_MANY, {"name": "batch", "count": 0}),
                (p.JOB_ACK_MANY, {"name": "batch", "jobs": [[1, "x"]]}),
            ]
        )
        assert isinstance(out[0], ValueError) and "'count' is missing" in str(out[0])
        assert isinstance(out[1], ValueError) and "count must be an integer" in str(out[1])
        assert isinstance(out[2], TypeError) and "[id, token] pairs" in str(out[2])


def test_log_append_read_and_a_tail_woken_by_another_process(running: Running) -> None:
    with client.connect(running.address) as c:
        lg = c.log("events")
        assert lg.append(b"a") == 0 and lg.append_many([b"b", b"c"]) == [1, 2]
        records, nxt = lg.read_page(1)
        assert [(r.lsn, r.payload) for r in records] == [(1, b"b"), (2, b"c")] and nxt == 3
        assert lg.info()["next_lsn"] == 3
        sub = c.subscribe("events", start=0)
        assert [r.payload for r in sub.records(5)] == [b"a", b"b", b"c"]
        path = running.server.data + "/logs/events"
        script = f"import logspool; logspool.open({path!r}).append(b'from-outside')"
        started = time.monotonic()
        subprocess.run([__import__("sys").executable, "-c", script], check=True)
        got = sub.records(5)
        assert [r.payload for r in got] == [b"from-outside"] and time.monotonic() - started < 5
        sub.close()
        assert sub.next(0.5) is None and sub.ended


def test_watch_tells_of_a_change_to_an_owned_store(running: Running) -> None:
    """The daemon's default: it owns the store (no other process writes it); a WATCH tells of
    a change made by another connection, as soon as its round is durable."""
    with client.connect(running.address) as c, client.connect(running.address) as other:
        c.kv("cfg").set("flag", False)
        watch = c.watch("cfg", ["flag"])
        other.kv("cfg").flip("flag")
        event = watch.next(30)
        assert event is not None and event["key"] == "flag" and event["version"] > 0
        watch.close()


def test_watch_tells_of_a_change_by_any_process(shared: Running) -> None:
    with client.connect(shared.address) as c:
        c.kv("cfg").set("flag", False)
        watch = c.watch("cfg", ["flag", "other"])
        with kv.open(shared.server.data + "/kv/cfg") as s:  # another writer than the daemon
            s.flip("flag")
        event = watch.next(5)
        assert event is not None and event["key"] == "flag" and event["version"] > 0
        c.kv("cfg").set("other", 1)
        event = watch.next(5)
        assert event is not None and event["key"] == "other"
        watch.close()


def test_pipelined_requests_are_all_answered_by_id(running: Running) -> None:
    with client.connect(running.address) as c:
        calls = [(p.KV_ADD, {"name": "pipe", "key": "n", "amount": 1}) for _ in range(300)]
        calls.append((p.KV_GET, {"name": "pipe", "key": "missing"}))
        calls.append((p.KV_NOT, {"name": "pipe", "key": "missing"}))
        replies = c.pipeline(calls)
        assert sorted(r["value"] for r in replies[:300]) == list(range(1, 301))
        assert replies[300] == {"value": None} and isinstance(replies[301], KeyNotFoundError)

        errors: list[BaseException] = []

        def worker(n: int) -> None:
            try:
                for i in range(50):
                    assert c.kv("pipe").set(f"t{n}-{i}", i)
                    assert c.kv("pipe").get(f"t{n}-{i}") == i
            except BaseException as err:
                errors.append(err)

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []


def test_the_async_client_pipelines_with_gather(running: Running) -> None:
    async def go() -> list[int]:
        c = await client.connect_async(running.address)
        async with c:
            k = c.kv("async")
            results = await asyncio.gather(*(k.add("n") for _ in range(100)))
            assert await k.get("n") == 100 and (await k.entry("n")).version > 0
            assert await k.get("missing", "dflt") == "dflt"
            await k.set("m", b"x")
            assert [key async for key in k] == ["m", "n"] and [x async for x in k.keys()] == ["m", "n"]  # noqa: SIM118
            assert [x async for x in k.items()] == [("m", b"x"), ("n", 100)]
            assert [x async for x in k.values()] == [b"x", 100]
            for sync_only in (lambda: k["n"], lambda: "n" in k, lambda: list(k)):
                with pytest.raises(TypeError, match="async"):
                    sync_only()
            job_id = await c.jobs("aj").put("key", b"x")
            assert [j.id for j in await c.jobs("aj").get("key")] == [job_id]
            return sorted(results)

    assert asyncio.run(go()) == list(range(1, 101))


def test_a_token_is_required_when_set(tmp_path: Path) -> None:
    r = Running(tmp_path / "data", token="s3cret")
    try:
        with pytest.raises(RemoteError, match="AuthError"):
            client.connect(r.address)
        with pytest.raises(RemoteError, match="AuthError"):
            client.connect(r.address, token="wrong")
        with client.connect(r.address, token="s3cret") as c:
            assert c.kv("k").set("a", 1)
        # a raw request before HELLO is refused and the connection closed
        with socket.create_connection(("127.0.0.1", r.server.port)) as s:
            s.sendall(p.encode_frame(p.REQUEST, p.KV_GET, 7, {"name": "k", "key": "a"}))
            reply = read_frame(s)
            assert reply.flags & p.FLAG_ERROR and reply.body["error"] == "AuthError" and reply.request_id == 7
            assert s.recv(1) == b""
    finally:
        r.stop()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="the openssl command makes the test certificate")
def test_tls(tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                    "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)  # fmt: skip
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(str(cert), str(key))
    r = Running(tmp_path / "data", ssl_context=server_ctx)
    try:
        client_ctx = ssl.create_default_context(cafile=str(cert))
        with client.connect(r.address, ssl_context=client_ctx) as c:
            assert c.kv("k").set("a", b"secret") and c.kv("k").get("a") == b"secret"
        with pytest.raises((ssl.SSLError, OSError, RemoteError)):  # a plain client gets nowhere
            client.connect(r.address, timeout=2)
    finally:
        r.stop()


def read_frame(s: socket.socket) -> p.Frame:
    data = b""
    while len(data) < p.HEADER_SIZE:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    head = p.decode_header(data[: p.HEADER_SIZE], 1 << 30)
    while len(data) < p.HEADER_SIZE + head.size:
        data += s.recv(65536)
    return p.Frame(head.kind, head.command, head.flags, head.request_id, p.decode_body(data[p.HEADER_SIZE :]))


def raw(body: bytes, *, kind: int = p.REQUEST, flags: int = 0, size: int | None = None) -> bytes:
    """A frame with this body's bytes as they are (and the size given, if one is)."""
    return (
        struct.pack(">2sBBHHII", b"LS", 1, kind, p.PING, flags, 1, len(body) if size is None else size) + body
    )


KEY_K = b"\x08\x00\x00\x00\x01\x00\x01k"  # a map of one entry, key "k", then its value
HOSTILE = {
    "bad magic": b"XX" + raw(b"\x08\x00\x00\x00\x00")[2:],
    "bad version": b"LS\x09" + raw(b"\x08\x00\x00\x00\x00")[3:],
    "huge size": raw(b"", size=2**31),
    "unknown flags": raw(b"\x08\x00\x00\x00\x00", flags=0x80),
    "reply from a client": raw(b"\x08\x00\x00\x00\x00", kind=p.REPLY),
    "body not a map": raw(b"\x00"),
    "count past the end": raw(b"\x08\xff\xff\xff\xff"),
    "deep nesting": raw(KEY_K + b"\x07\x00\x00\x00\x01" * 38 + b"\x00"),
    "bad utf-8": raw(KEY_K + b"\x02\x00\x00\x00\x01\xff"),
    "unknown tag": raw(KEY_K + b"\x63"),
    "bytes after the map": raw(b"\x08\x00\x00\x00\x00\x00"),
    "duplicate key": raw(b"\x08\x00\x00\x00\x02\x00\x01k\x00\x00\x01k\x00"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_frame_closes_that_connection_only(tmp_path: Path, name: str) -> None:
    r = Running(tmp_path / "data", limits=Limits(frame_size_max=1 << 20))
    try:
        with client.connect(r.address) as bystander:
            bystander.kv("k").set("x", 1)
            with socket.create_connection(("127.0.0.1", r.server.port), timeout=10) as s:
                s.sendall(HOSTILE[name])
                reply = read_frame(s)
                assert reply.flags & p.FLAG_ERROR and reply.body["error"] == "ProtocolError", reply
                assert s.recv(1) == b""  # closed
            assert bystander.kv("k").add("x") == 2  # everyone else is served as before
            assert r.server.counters.protocol_errors == 1
    finally:
        r.stop()


def test_an_unknown_command_or_a_bad_field_is_an_error_reply_not_a_closed_connection(
    running: Running,
) -> None:
    with client.connect(running.address) as c:
        out = c.pipeline([(999, {}), (p.KV_SET, {"name": "k", "key": 5}), (p.KV_GET, {"name": "k"}),
                          (p.PING, {})])  # fmt: skip
        assert isinstance(out[0], ValueError) and "unknown command" in str(out[0])
        assert isinstance(out[1], TypeError) and "'key'" in str(out[1])
        assert isinstance(out[2], ValueError) and "missing" in str(out[2])
        assert "time" in out[3]


def test_connection_limit(tmp_path: Path) -> None:
    r = Running(tmp_path / "data", limits=Limits(connections_max=2))
    try:
        a, b = client.connect(r.address), client.connect(r.address)
        with pytest.raises(RemoteError, match="TooManyConnections"):
            client.connect(r.address, reconnect=False)
        a.close()
        time.sleep(0.2)
        with client.connect(r.address) as c:
            assert c.ping() > 0
        b.close()
        assert r.server.counters.refused == 1
    finally:
        r.stop()


def test_the_server_survives_a_client_that_vanishes_mid_request(running: Running) -> None:
    for _ in range(20):
        with socket.create_connection(("127.0.0.1", running.server.port)) as s:
            frame = p.encode_frame(p.REQUEST, p.KV_SET, 1, {"name": "k", "key": "x", "value": b"v" * 10000})
            s.sendall(frame[: len(frame) // 2])
    with client.connect(running.address) as c:
        assert c.kv("k").get("x") is None and c.ping() > 0
    assert logspool.__version__
    assert jobs.Job is not None


def test_prometheus_metrics(running: Running) -> None:
    async def start() -> int:
        return await running.server.start_metrics()

    port = asyncio.run_coroutine_threadsafe(start(), running.loop).result(10)
    with client.connect(running.address) as c:
        c.kv("m").set("a", 1)
        c.kv("m").get("a")
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    assert 'logspool_requests_total{command="kv.set"} 1' in text
    assert "# TYPE logspool_connections gauge" in text and "logspool_connections_total 1" in text
    with pytest.raises(urllib.error.HTTPError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=10)


def test_waiting_takes_and_listens_hold_no_thread_of_the_pool(tmp_path: Path) -> None:
    """A daemon with 2 pool threads: 6 workers wait in jobs.TAKE (wait 30 s) and 6 subscribers
    (3 log LISTENs, 3 kv LISTENs) wait for events, all at once; the producer's puts and appends
    are still served at once, every worker gets a job long before its wait ends, and every
    subscriber gets its event. (A waiting take or a LISTEN held a pool thread: the puts queued
    behind the first two takes, until their 30 s ran out empty.)"""
    r = Running(tmp_path / "data", limits=Limits(threads=2))
    try:
        got: list[object] = []
        failures: list[BaseException] = []

        def worker() -> None:
            try:
                with client.connect(r.address, timeout=60) as c:
                    got.append(c.jobs("work").take(lease=30, wait=30))
            except BaseException as err:
                failures.append(err)

        with client.connect(r.address, timeout=60) as c:
            c.jobs("work").put("warm", b"w")  # (the journal exists: the takes watch its op log)
            assert isinstance(c.jobs("work").take(lease=30), jobs.Job)
            c.kv("cfg").set("flag", 0)
            c.log("events").append(b"before")
            subs = [c.subscribe("events") for _ in range(3)] + [c.watch("cfg", ["flag"]) for _ in range(3)]
            workers = [threading.Thread(target=worker) for _ in range(6)]
            for t in workers:
                t.start()
            started = time.monotonic()
            deadline = started + 20
            while time.monotonic() < deadline and r.server.counters.requests.get("jobs.take", 0) < 7:
                time.sleep(0.01)  # (bounded: until the six takes reached the daemon)
            for i in range(6):
                c.jobs("work").put(f"job-{i}", b"x")
            c.log("events").append(b"after")
            c.kv("cfg").set("flag", 1)
            for t in workers:
                t.join(60)
            assert not failures, failures
            assert len(got) == 6 and all(isinstance(j, jobs.Job) for j in got), got
            assert time.monotonic() - started < 25  # (long before the takes' 30 s)
            for sub in subs[:3]:
                event = sub.next(10)
                assert event is not None and [rec[2] for rec in event["records"]] == [b"after"]
            for sub in subs[3:]:
                event = sub.next(10)
                assert event is not None and event["key"] == "flag"
            for sub in subs:
                sub.close()
    finally:
        r.stop()


@pytest.mark.parametrize(
    ("bound", "value"),
    [
        ("in_flight_max", 0),
        ("connections_max", -1),
        ("frame_size_max", 0),
        ("threads", 0),
        ("stores_max", 1.5),
    ],
)
def test_a_limit_that_is_not_a_positive_integer_is_refused_naming_it(
    tmp_path: Path, bound: str, value: object
) -> None:
    """A daemon whose limit could never be met (in_flight_max 0 paused every connection before its
    first request, for ever, while a lone SET still went through) is refused before it makes
    anything, the error naming the limit and its value."""
    limits = Limits()
    setattr(limits, bound, value)
    with pytest.raises(ValueError, match=rf"limit {bound} must be a positive integer, not {value!r}"):
        Server(tmp_path / "data", port=0, limits=limits)
    assert not (tmp_path / "data").exists()
