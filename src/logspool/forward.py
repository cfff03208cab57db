"""Store and forward: records appended to a local log reach a log on a daemon, exactly once.

``logspool forward --from DIR --to HOST:PORT/NAME``. Producers append to the local log ``DIR``
(fast, no network, durable by its own fsync). The forwarder reads it through a durable
subscriber (``forward-NAME``) and sends batches with LOG_FORWARD; it commits the subscriber only
when the daemon replies that the batch is in the target log (durably: the daemon's reply follows
its fsync). While the daemon is down, records accumulate locally; after a crash of either side the
forwarder resends from its committed position and the daemon drops what it already has (by
producer id and source lsn), so nothing is lost and nothing is written twice. A local append
wakes the forwarder at once (the log's tail wake-up).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from dataclasses import dataclass

from . import _wire as p
from .client import Client, connect
from .errors import LogspoolError, RemoteError
from .log import Log

_logger = logging.getLogger("logspool.forward")


@dataclass
class ForwardStats:
    sent: int = 0  # records the daemon appended
    skipped: int = 0  # records the daemon had already (resent after a failure)
    batches: int = 0
    reconnects: int = 0
    gaps: int = 0  # records the local log lost (retention) before they were forwarded
    position: int = 0  # the committed local lsn


def default_producer(source: str) -> str:
    """A producer id that stays the same across restarts: this host and the log's real path."""
    return f"{socket.gethostname()}:{os.path.realpath(source)}"


def split_target(target: str) -> tuple[str, str]:
    """``HOST:PORT/NAME`` -> (address, name)."""
    address, sep, name = target.partition("/")
    if not sep or not name:
        raise ValueError(f"target must be HOST:PORT/NAME, not {target!r}")
    return address, name


class Forwarder:
    """Forward the log at ``source`` to the log ``name`` on the daemon at ``address``."""

    def __init__(
        self,
        source: str | os.PathLike[str],
        address: str,
        name: str,
        *,
        producer: str | None = None,
        token: str | None = None,
        batch: int = 1000,
        batch_bytes: int = 4 * 1024 * 1024,
        timeout: float = 30.0,
    ) -> None:
        self.source = os.fspath(source)
        self.address = address
        self.name = name
        self.producer = producer or default_producer(self.source)
        self._token = token
        self._batch = batch
        self._batch_bytes = batch_bytes
        self._timeout = timeout
        self.stats = ForwardStats()
        self._stop = threading.Event()
        self._log = Log(self.source)
        # records retention removed before they were forwarded are counted (gaps) and logged
        self._sub = self._log.subscribe(f"forward-{name}", "earliest", on_data_loss="skip")
        self.stats.position = self._sub.position
        self._client: Client | None = None

    def stop(self) -> None:
        self._stop.set()

    def _connected(self) -> Client:
        backoff = 0.05
        while self._client is None:
            try:
                self._client = connect(
                    self.address, token=self._token, timeout=self._timeout, reconnect=False
                )
            except (OSError, RemoteError) as err:
                if self._stop.is_set():
                    raise
                why = f"cannot reach {self.address} ({err}); retrying in {backoff:.2f} s"
                _logger.warning("%s: %s", self.source, why)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)
                self.stats.reconnects += 1
        return self._client

    def _read_batch(self, wait_s: float) -> tuple[int, list[bytes]]:
        """(source lsn of the first, payloads): up to a batch, waiting up to ``wait_s`` for one."""
        rec = self._sub.next(timeout=wait_s)
        if rec is None:
            return self._sub.position, []
        first, payloads, size = rec.lsn, [rec.payload], len(rec.payload)
        if self._sub.gaps:
            lost = sum(g.next_lsn - g.first_lsn for g in self._sub.gaps)
            _logger.error("%s: %d records were removed before they were forwarded", self.source, lost)
            self.stats.gaps += lost
            self._sub.gaps.clear()
        while len(payloads) < self._batch and size < self._batch_bytes:
            rec = self._sub.next(timeout=0)
            if rec is None or rec.lsn != first + len(payloads):
                if rec is not None:  # (a gap inside the batch: send it in the next one)
                    self._sub.seek(rec.lsn)
                break
            payloads.append(rec.payload)
            size += len(rec.payload)
        return first, payloads

    def _send(self, first: int, payloads: list[bytes]) -> None:
        """Send until the daemon has the batch; then commit the local position after it."""
        body = {"name": self.name, "producer": self.producer, "first": first, "records": payloads}
        while True:
            client = self._connected()
            try:
                reply = client._request(p.LOG_FORWARD, body, lambda b: b)
                break
            except RemoteError as err:
                if err.kind != "ConnectionLost":
                    raise
                _logger.warning("%s: %s; resending", self.source, err)
                client.close()
                self._client = None
                if self._stop.wait(0.05):
                    raise
        self.stats.sent += reply["appended"]
        self.stats.skipped += len(payloads) - reply["appended"]
        self.stats.batches += 1
        end = first + len(payloads)
        self._sub.commit(end)
        self.stats.position = end

    def run(self, *, idle_exit: float | None = None) -> ForwardStats:
        """Forward until ``stop()`` (or until nothing new came for ``idle_exit`` seconds)."""
        idle_since = time.monotonic()
        while not self._stop.is_set():
            first, payloads = self._read_batch(0.5)
            if payloads:
                self._send(first, payloads)
                idle_since = time.monotonic()
            elif idle_exit is not None and time.monotonic() - idle_since >= idle_exit:
                break
        return self.stats

    def close(self) -> None:
        self._sub.close()
        self._log.close()
        if self._client is not None:
            self._client.close()


def forward(source: str, target: str, **options: object) -> Forwarder:
    """A ``Forwarder`` from ``source`` to ``HOST:PORT/NAME``."""
    address, name = split_target(target)
    return Forwarder(source, address, name, **options)  # type: ignore[arg-type]


__all__ = ["ForwardStats", "Forwarder", "LogspoolError", "default_producer", "forward", "split_target"]
