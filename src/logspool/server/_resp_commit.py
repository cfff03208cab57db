"""The RESP door's commit rounds: the ``Committer`` thread that runs every batch of writes, from
every connection, as one decision of the key-value store and one fsync a store written, before
any of their replies goes out (group commit); a lone writer's round on the loop itself
(``Committer.run_here``); ``sync_writes``, the fsync of a round or a batch. The connections and
sessions whose batches it runs are ``_resp.py``'s: a batch handed to it comes back through its
connection's ``_landed`` (the fast path) or a Future.

Durability: ``_round`` returns only after ``sync_writes``, and every reply of a round is
delivered after its round returns (``_deliver`` on the loop, or ``run_here``'s ``_landed``).
A read that may have seen a round's writes waits for that round to be answered (``settled``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import errors
from . import _resp_wire as w
from ._resp_commands import Block
from ._resp_streams import HeldTails

if TYPE_CHECKING:
    from ._resp import RespFront, Session, _Connection

_logger = logging.getLogger("logspool.server.resp")


@dataclass
class _Batch:
    replies: list[bytes]
    rest: list[list[bytes]]  # commands not run yet (the batch stopped early)
    block: Block | None = None
    close: bool = False  # QUIT


def sync_writes(front: RespFront, wrote_kv: bool, logs: dict[str, Any]) -> None:
    """fsync what batches wrote (one fsync a store, shared by them all) and wake the XREADs
    waiting on the logs appended to."""
    if wrote_kv:
        front.kv.sync()
    if logs:
        for log in logs.values():
            if log.durability == "always":
                log.sync()
        if front.tails is not None:
            front.tails.wake_threadsafe({"logs/" + name for name in logs})


# Held while a commit round decides (takes its stores' locks and writes), by every Committer of
# the process (``Committer._round``).
_ROUNDS = threading.Lock()

_Queued = tuple["Session", list[list[bytes]], "asyncio.Future[_Batch] | _Connection"]
_Done = list[tuple["asyncio.Future[_Batch] | _Connection", "_Batch | BaseException"]]  # a round's outcomes


class Committer:
    """The thread that runs every batch that writes, from all connections, in arrival order: a
    round takes every batch queued (at most ``ROUND_BATCHES_MAX``), decides their writes one
    after another, makes them durable with one fsync a store, then hands all their replies to
    the event loop at once (Redis's ``appendfsync always`` group commit: while one round's fsync
    runs, the next round's batches queue up). One thread, not one per connection: 16 or 50
    threads contending for the GIL cost more CPU than the writes themselves (benchmarks/RESULTS.md).
    """

    ROUND_BATCHES_MAX = 1024
    ROUND_COMMANDS_MAX = 4096  # (a round is one decision: its ops are one write)
    # 150 us: SET x16 12.9k -> 13.5k/s, x50 15.9k -> 17.3k/s, x1 unchanged; 300 us was worse
    # (benchmarks/RESULTS.md; the prototype found the same).
    COMMIT_DELAY_S = 0.00015
    SHARED_S = 0.01  # writes of two connections this close: they share rounds (run_here)
    SHARED_HOLD_S = 0.1

    def __init__(self, front: RespFront, loop: asyncio.AbstractEventLoop) -> None:
        self.front = front
        self.loop = loop
        self._queue: collections.deque[_Queued] = collections.deque()
        self._cond = threading.Condition()
        self._stopping = False
        self.rounds = 0  # rounds run (each: at most one fsync a store written)
        self.batches = 0  # batches they held (INFO: batches a round, the group commit's size)
        self.delivered = 0  # the last round whose replies reached the loop
        self._last_round = 0  # batches the last round held
        self._settling: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()
        self._wanted = 1  # the queue length at which submit wakes the thread (under _cond)
        self._busy = False  # a round runs, on the thread or on the loop (run_here) (under _cond)
        self._writer: _Connection | None = None  # the connection that wrote last (run_here)
        self._written_at = 0.0
        self._shared_until = 0.0  # until then, writes go to the thread (run_here)
        self.rounds_here = 0  # rounds run on the loop (INFO)
        # Where the rounds' time went (INFO, seconds): the decisions (the commands and the write),
        # the fsyncs, and the commit delay's waits for the rest of a group.
        self.decide_s = self.sync_s = self.delay_s = 0.0
        self._thread = threading.Thread(target=self._run, name="logspool-resp-committer", daemon=True)
        self._thread.start()

    def submit(
        self, session: Session, cmds: list[list[bytes]], conn: _Connection | None = None
    ) -> asyncio.Future[_Batch]:
        """Queue a batch for the next round. Its outcome goes to ``conn._landed`` if given (the
        fast path: no Future, no task step), else to the Future returned. On the loop."""
        fut: asyncio.Future[_Batch] | _Connection
        fut = self.loop.create_future() if conn is None else conn
        with self._cond:
            if self._stopping:
                err = errors.ClosedError(self.front.server.data, "the daemon is stopping")
                if asyncio.isfuture(fut):
                    fut.set_exception(err)
                else:
                    self.loop.call_soon(fut._landed, err)
                return fut  # type: ignore[return-value]
            self._queue.append((session, cmds, fut))
            # Wake the thread only when it has something to do: when it waits for any batch, or
            # when the queue reaches the size its commit delay waits for (each notify is a GIL
            # hand-off to the thread, which would look and sleep again).
            if len(self._queue) >= self._wanted:
                self._cond.notify()
        return fut  # type: ignore[return-value]

    def _run(self) -> None:
        for _ in itertools.count():  # bounded by stop()
            with self._cond:
                self._wanted = 1
                while (not self._queue or self._busy) and not self._stopping:
                    self._cond.wait()
                if not self._queue:
                    return
                # Commit delay (PostgreSQL's commit_delay/commit_siblings): when the last round
                # held more batches than are queued now, the writers of the others are likely
                # about to send theirs (their replies just went out): wait for them, at most
                # COMMIT_DELAY_S, so that one fsync covers them too. A lone writer never waits.
                if self._last_round > len(self._queue) and not self._stopping:
                    self._wanted = self._last_round
                    began = time.monotonic()
                    deadline = began + self.COMMIT_DELAY_S
                    for _ in range(self._last_round):  # bounded: each turn one arrives, or time's up
                        left = deadline - time.monotonic()
                        if left <= 0 or len(self._queue) >= self._last_round:
                            break
                        self._cond.wait(left)
                    self.delay_s += time.monotonic() - began
                self._wanted = 1 << 30  # (a round runs: the next is taken when it ends)
                round_ = [self._queue.popleft()]
                commands = len(round_[0][1])
                while (
                    self._queue
                    and len(round_) < self.ROUND_BATCHES_MAX
                    and commands < self.ROUND_COMMANDS_MAX
                ):
                    round_.append(self._queue.popleft())
                    commands += len(round_[-1][1])
                self._last_round = len(round_)
                self._busy = True
            self.rounds += 1  # (before the decision: see ``settled``)
            number = self.rounds
            try:
                done = self._round(round_)
            finally:
                with self._cond:
                    self._busy = False
            with contextlib.suppress(RuntimeError):  # the loop closed
                self.loop.call_soon_threadsafe(self._deliver, done, number)

    def _round(self, round_: list[_Queued]) -> _Done:
        """Run a round's batches as one decision and make them durable (their outcomes; an
        error reply for each command if the write or the fsync failed)."""
        self.batches += len(round_)
        done: _Done = []
        wrote_kv = False
        logs: dict[str, Any] = {}
        try:
            # One decision for the whole round: one writer lock, one catch-up, one write of
            # every op (each command is still atomic: they run one after another inside it).
            started = time.perf_counter()
            held = HeldTails()  # (the logs' writer locks: once a round a stream, not an XADD)
            # One round at a time in the process, whichever door's committer runs it: a round
            # takes its stores' locks in the order its commands come (the RESP door's key-value
            # store, then streams; the native door's stores in request order), so two rounds
            # at once could each hold a lock the other waits for. The fsyncs still overlap.
            _ROUNDS.acquire()
            try:
                with self.front.kv.decide() as d:
                    i = 0
                    while i < len(round_):  # bounded: each turn takes one batch or more
                        session, cmds, fut = round_[i]
                        # SET x16: every batch plain SETs, written with one write_many
                        # (``plain_sets``: each door's own, answering none for any other batch)
                        if len(cmds) == 1:
                            session.round = d
                            try:
                                plain = session.plain_sets(round_, i)
                            finally:
                                session.round = None
                            if plain:
                                wrote_kv = True
                                done.extend(
                                    zip([f for _, _, f in round_[i : i + len(plain)]], plain, strict=True)
                                )
                                i += len(plain)
                                continue
                        i += 1
                        d.owner = session.name  # (locks are checked against each connection's name)
                        session.round, session.tails = d, held
                        try:
                            done.append((fut, session.run(cmds, sync=False)))
                        except BaseException as err:  # (run answers each command's error itself)
                            done.append((fut, err))
                        finally:
                            session.round = session.tails = None
                        kv_written, logs_written = session.take_writes()
                        wrote_kv |= kv_written
                        logs.update(logs_written)
            finally:
                try:
                    held.close()  # (before the fsync: every record of the round is written)
                finally:
                    _ROUNDS.release()
            decided = time.perf_counter()
            sync_writes(self.front, wrote_kv, logs)  # before any reply of the round is sent
            self.decide_s += decided - started
            self.sync_s += time.perf_counter() - decided
        except Exception as err:  # the write or the fsync failed: nothing here is acknowledged
            _logger.error("RESP commit round failed: %s", err)
            failed = w.error(f"ERR the write failed, the commands may or may not be applied: {err}")
            done = [(fut, _Batch([failed] * len(cmds), [])) for _, cmds, fut in round_]
        return done

    def run_here(self, session: Session, cmds: list[list[bytes]], conn: _Connection) -> bool:
        """On the loop: run a lone writer's batch as a round right here, fsync included, and
        answer it (``conn._landed``, soon). False (nothing done) unless this connection is the
        only one that wrote in the last ``SHARED_S`` and the thread is idle with nothing queued.
        A lone writer gains two thread hand-offs a write (the committer's wake-up, the loop's);
        the loop stops for its fsync, as Redis's does, and no one else's write waits for it.
        A write of another connection within SHARED_S sends every write to the thread for
        ``SHARED_HOLD_S``, where they share fsyncs (here each would wait for the last)."""
        now = time.monotonic()
        if conn is not self._writer and now - self._written_at < self.SHARED_S:
            self._shared_until = now + self.SHARED_HOLD_S
        self._writer, self._written_at = conn, now
        if now < self._shared_until:
            return False
        with self._cond:
            if self._queue or self._busy or self._stopping:
                return False
            self._busy = True  # (the thread takes no round until this one is done)
        self.rounds_here += 1
        try:
            [(_, outcome)] = self._round([(session, cmds, conn)])
        finally:
            with self._cond:
                self._busy = False
                if self._queue:
                    self._cond.notify()
        self.loop.call_soon(conn._landed, outcome)  # (soon: no recursion through _serve_now)
        return True

    def _deliver(self, done: _Done, number: int) -> None:
        """On the loop: the replies of round ``number``, whose writes are durable now (one call
        a round: the fast path's connections write theirs here, the others' tasks wake)."""
        self.delivered = number  # (first: a connection going on below may read on the loop)
        for fut, outcome in done:
            if not asyncio.isfuture(fut):
                fut._landed(outcome)
                continue
            if fut.done():
                continue
            if isinstance(outcome, BaseException):
                fut.set_exception(outcome)
            else:
                fut.set_result(outcome)
        while self._settling and self._settling[0][0] <= number:
            _, waiter = self._settling.popleft()
            if not waiter.done():
                waiter.set_result(None)

    def settled(self) -> asyncio.Future[None] | None:
        """On the loop, after a read: a future done once every round started so far is durable
        and answered (None if they all are). A reply must wait for it: the read may have seen a
        round's writes, decided but not yet fsynced, and a reply must never show a write that a
        crash could still take back (Redis answers after its fsync too)."""
        target = self.rounds
        if self.delivered >= target:
            return None
        waiter: asyncio.Future[None] = self.loop.create_future()
        self._settling.append((target, waiter))
        return waiter

    def stop(self) -> None:
        """Finish the batches queued, then end the thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join(60)
