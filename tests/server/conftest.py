"""A real daemon on 127.0.0.1: in a thread of the test process (its own event loop), or as a
``logspool serve`` process for the kill and SIGTERM tests."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from logspool.server import Server


class Running:
    """A server in a thread: ``address``, ``server``, ``stop()``."""

    def __init__(self, data: Path, **options: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.server = Server(data, **options)
        ready: Future[None] = Future()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            try:
                self.loop.run_until_complete(self.server.start())
            except BaseException as err:
                ready.set_exception(err)
                return
            ready.set_result(None)
            self.loop.run_until_complete(self.server.wait_stopped())

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        ready.result(10)
        self.address = self.server.address

    def stop(self) -> None:
        if self.thread.is_alive():
            asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(60)
            self.thread.join(10)
        self.loop.close()


@pytest.fixture
def running(tmp_path: Path) -> Iterator[Running]:
    r = Running(tmp_path / "data")
    yield r
    r.stop()


@pytest.fixture
def shared(tmp_path: Path) -> Iterator[Running]:
    """A server whose key-value stores are shared with other processes (``own_kv=False``,
    ``logspool serve --shared-kv``): embedded handles open them beside it."""
    r = Running(tmp_path / "data", own_kv=False)
    yield r
    r.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Daemon:
    """``logspool serve`` as a real process."""

    def __init__(self, data: Path, *extra: str, resp: bool = False) -> None:
        self.data = data
        self.extra = extra
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        # resp: also a RESP port (``--resp``), ``resp_port``
        self.resp_port = free_port() if resp else None
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Daemon:
        cmd = [sys.executable, "-m", "logspool.cli", "serve", "--data", str(self.data),
               "--listen", self.address, *self.extra]  # fmt: skip
        if self.resp_port is not None:
            cmd += ["--resp", f"127.0.0.1:{self.resp_port}"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                if self.resp_port is not None:
                    socket.create_connection(("127.0.0.1", self.resp_port), timeout=0.2).close()
                return self
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"the daemon exited: {self.proc.stdout.read()!r}") from None  # type: ignore[union-attr]
                time.sleep(0.05)
        raise RuntimeError("the daemon did not listen within 30 s")

    def signal(self, sig: int) -> int:
        assert self.proc is not None
        self.proc.send_signal(sig)
        return self.proc.wait(60)

    def output(self) -> str:
        assert self.proc is not None and self.proc.stdout is not None
        return self.proc.stdout.read().decode(errors="replace")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    d = Daemon(tmp_path / "data")
    yield d
    d.kill()
