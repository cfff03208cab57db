"""Many clients and slow ones on the RESP port (issue 34's hostile input): thousands of connections
at once, and clients that send a command a byte at a time (slowloris), each harm only themselves:
every other client is answered meanwhile, and the slow ones are answered when their command is
whole. Real sockets and redis-py against a daemon on 127.0.0.1; nothing is timed.
"""

from __future__ import annotations

import socket
from pathlib import Path

import redis

from logspool.server import Limits, RespOptions
from tests.server.conftest import Running

CONNECTIONS = 2000


def _connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def _read_exactly(s: socket.socket, size: int) -> bytes:
    got = b""
    while len(got) < size:  # bounded by the socket's timeout
        chunk = s.recv(size - len(got))
        if not chunk:
            raise ConnectionError(f"closed after {got!r}")
        got += chunk
    return got


def test_thousands_of_connections_are_each_served(tmp_path: Path) -> None:
    running = Running(
        tmp_path / "data", resp=RespOptions(port=0), limits=Limits(connections_max=CONNECTIONS + 16)
    )
    try:
        port = running.server.resp.options.port  # type: ignore[union-attr]
        r = redis.Redis(port=port, socket_timeout=60)
        conns = [_connect(port) for _ in range(CONNECTIONS)]
        for i, s in enumerate(conns):  # every connection is open and waiting when the next speaks
            s.sendall(b"*3\r\n$3\r\nSET\r\n$%d\r\nk%d\r\n$1\r\nv\r\n" % (len(b"k%d" % i), i))
        for s in conns:
            assert _read_exactly(s, 5) == b"+OK\r\n"
        assert r.dbsize() == CONNECTIONS
        assert r.get("k1999") == b"v"
        for s in conns:
            s.sendall(b"PING\r\n")
        assert all(_read_exactly(s, 7) == b"+PONG\r\n" for s in conns)
        for s in conns:
            s.close()
        assert r.ping()
        r.close()
    finally:
        running.stop()


def test_clients_sending_a_byte_at_a_time_hold_up_no_one_else(tmp_path: Path) -> None:
    running = Running(tmp_path / "data", resp=RespOptions(port=0))
    try:
        port = running.server.resp.options.port  # type: ignore[union-attr]
        slow = [_connect(port) for _ in range(50)]
        command = b"*3\r\n$3\r\nSET\r\n$4\r\nslow\r\n$2\r\nok\r\n"
        for s in slow:  # every slow client is mid-command from here on
            s.sendall(command[:7])
        r = redis.Redis(port=port, socket_timeout=60)
        for i in range(7, len(command) - 1):
            for s in slow:
                s.sendall(command[i : i + 1])
            assert r.set(f"fast{i}", i)  # answered while every slow command is still partial
        for s in slow:
            s.sendall(command[-1:])
        assert [int(r.get(f"fast{i}") or 0) for i in range(7, len(command) - 1)] == list(
            range(7, len(command) - 1)
        )
        for s in slow:  # now whole: each is answered
            assert _read_exactly(s, 5) == b"+OK\r\n"
            s.close()
        assert r.get("slow") == b"ok"
        r.close()
    finally:
        running.stop()
