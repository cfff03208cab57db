"""The floor of a Python server on uvloop for issue 34's redis-benchmark cases: none of logspool's
code, the least such a server does. It answers every GET with one constant 100-byte value (no
parse, no lookup), and every SET and XADD with a constant reply after redis-server's own
``appendfsync always`` work: the turn's requests appended to a file with one ``write`` and one
``fdatasync`` a loop turn, replies after it. Commands are counted, not parsed: redis-benchmark
sends one command shape a connection, whose values hold no CRLF, so a connection's commands are
its CRLFs over those of its first command (``*N``: 1 + 2N). What logspool's daemon does beyond
this (parsing, the store, the op log's records and checksums, group commit across threads) is
what separates it from this floor; what separates this floor from redis-server is Python and
uvloop alone.

Run: .venv/bin/python benchmarks/resp_floor.py PORT DIR   (``bench_server.py --floor`` starts it)
"""

from __future__ import annotations

import asyncio
import os
import sys

import uvloop

_GET = b"$100\r\n" + b"x" * 100 + b"\r\n"
_REPLIES = {b"GET": _GET, b"SET": b"+OK\r\n", b"XADD": b"$15\r\n1700000000000-0\r\n", b"CONFIG": b"*0\r\n"}
_DURABLE = {b"SET", b"XADD"}


class _Floor(asyncio.Protocol):
    def __init__(self, server: _Server) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.per_command = 0  # CRLFs a command (its first's ``*N``: 1 + 2N)
        self.reply = b""
        self.durable = False
        self.crlfs = 0  # CRLFs read past the last whole command

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # (uvloop's: not asyncio's class)

    def data_received(self, data: bytes) -> None:
        if not self.per_command:  # the first command: its shape, and its reply
            head = data.split(b"\r\n", 3)
            self.per_command = 1 + 2 * int(head[0][1:])
            name = head[2].upper()
            self.reply = _REPLIES.get(name, b"-ERR unknown command\r\n")
            self.durable = name in _DURABLE
        self.crlfs += data.count(b"\r\n")
        commands, self.crlfs = divmod(self.crlfs, self.per_command)
        if not commands:
            return
        assert self.transport is not None
        if self.durable:
            self.server.held(data, self.transport, self.reply * commands)
        else:
            self.transport.write(self.reply * commands)


class _Server:
    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.data: list[bytes] = []
        self.replies: list[tuple[asyncio.Transport, bytes]] = []

    def held(self, data: bytes, transport: asyncio.Transport, reply: bytes) -> None:
        """Appended and answered at the end of the loop's turn, with the turn's others."""
        if not self.replies:
            asyncio.get_running_loop().call_soon(self.commit)
        self.data.append(data)
        self.replies.append((transport, reply))

    def commit(self) -> None:
        os.write(self.fd, b"".join(self.data))
        os.fdatasync(self.fd)
        replies, self.data, self.replies = self.replies, [], []
        for transport, reply in replies:
            transport.write(reply)


async def _main(port: int, directory: str) -> None:
    fd = os.open(os.path.join(directory, "floor.aof"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    server = _Server(fd)
    loop = asyncio.get_running_loop()
    listener = await loop.create_server(lambda: _Floor(server), "127.0.0.1", port)
    async with listener:
        await listener.serve_forever()


if __name__ == "__main__":
    uvloop.run(_main(int(sys.argv[1]), sys.argv[2]))
