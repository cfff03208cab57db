"""The RESP door's commit rounds (the native door has a ``Committer`` of its own): every batch of
writes, from every connection, run as one decision of the key-value store and one fsync a store
written, before any of their replies goes out (group commit). ``sync_writes``, the fsync of a
round or a batch. The connections and sessions whose batches it runs are ``_resp.py``'s (and
``_native.py``'s): a batch handed to it comes back through its connection's ``_landed`` (the
fast path) or a Future.

Where a round runs:

- **On the event loop** (``Committer.gather``), as Redis runs its ``appendfsync always``: the
  batches of the fast path that arrive in one turn of the loop form a group; once the turn's
  reads are done, the group runs as a round right there, fsync included, and its replies are
  written at once. While the group is smaller than the last round, the loop turns again
  (reading the connections of that round, which are about to send) for at most
  ``COMMIT_DELAY_S`` (PostgreSQL's commit_delay): with 16 clients that each wait for their
  reply, every round holds nearly all 16. No thread hand-off, no wake-up, no GIL contention on
  a write's path. Only batches whose locks can be taken without a wait are gathered: the round
  takes the rounds' lock and each store's mutex without waiting, then the writer lock of each
  log appended to and of each store another process may write (``hold_streams``: a store the
  daemon owns holds its writer lock for the daemon's life), each only if it is free; if one is
  taken (a snapshot's fork, a read in the pool, the other door's round, another process's
  writer), the group goes to the thread: the loop never waits for a lock. Nor for another's
  fsync: the round's fsync takes a log's sync role and its sync file's flock (held by another
  process through each of its fsyncs) only if they are free (``Log.sync(wait=False)``); if one
  is not, the thread finishes the round, decided and written: its fsync and its replies
  (``_finish``).
- **On the committer thread** (``submit``): a batch that the loop cannot take (the connection's
  task path, a stream command other than a plain XADD, the RESP door's store when it is shared
  (``--resp-shared-kv``), a batch arriving while the thread has rounds queued or running, a
  group whose lock was taken), and every batch while fsyncs are slow (``LOOP_SYNC_MAX_S``, the
  mean of the last rounds'): a loop stopped for a long fsync would leave every other
  connection unread meanwhile; the thread lets the loop read and answer them while it fsyncs.

One round at a time runs, wherever it runs (``_busy``), and each gets the next number
(``rounds``) when it starts.

Durability: ``_round`` returns only after ``sync_writes``, and every reply of a round is
delivered after its round returns (``_deliver``). A read that may have seen a round's writes
waits for that round to be answered (``settled``). A round's own commands may read too (an
EXEC's XRANGE, an INCR): what they read of a store or log the round wrote is made durable by
its own fsync; what another door's round wrote, decided before it but not yet fsynced, is not.
So the replies of a round that ran any command but a plain SET wait for every round of the
other door decided before it (``_decided_before``, ``Committer.settled_through``), and, on the
committer's thread, once every log written outside a round is durable (``Stores.settle``: a job's
put, a forwarded append). Decisions take
``_ROUNDS`` one at a time, so "decided before" is one order for both doors: two rounds never
wait for each other.
"""

from __future__ import annotations

import asyncio
import bisect
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
    pool: bool = False  # ``rest`` starts with a read that would write: it runs in the pool (``NotHere``)


def sync_writes(front: RespFront, wrote_kv: bool, logs: dict[str, Any], *, wait: bool = True) -> bool:
    """fsync what batches wrote (one fsync a store, shared by them all) and wake the XREADs
    waiting on the logs appended to. No fsync here waits to gather other writers' records
    (``Log.sync``'s ``gather``): the records a round's fsync covered are its own, and their
    writers are waiting for its replies, so such a wait, after every round smaller than the
    one before, could only time out, on the loop itself for a round run there. ``wait=False``
    (on the loop): False, some not yet durable, if one would wait for another thread's or
    another process's fsync (``Log.sync``'s ``wait``): call again with ``wait=True``, on a
    thread (what is durable already costs nothing then)."""
    if wrote_kv and not front.kv.sync(gather=False, wait=wait):
        return False
    if logs:
        for log in logs.values():
            if log.durability == "always" and not log.sync(gather=False, wait=wait):
                return False
        if front.tails is not None:
            front.tails.wake_threadsafe({"logs/" + name for name in logs})
    return True


def settled_all(*committers: Committer | None) -> asyncio.Future[Any] | None:
    """After a read: a future done once every round started so far by these committers (both
    doors': a write of one door may be to a store the other reads) is durable and answered;
    None if they all are."""
    waits = [c.settled() for c in committers if c is not None]
    pending = [w for w in waits if w is not None]
    if not pending:
        return None
    return pending[0] if len(pending) == 1 else asyncio.gather(*pending)


# Held while a commit round decides (takes its stores' locks and writes), by every Committer of
# the process (``Committer._round``).
_ROUNDS = threading.Lock()

_Queued = tuple["Session", list[list[bytes]], "asyncio.Future[_Batch] | _Connection"]
_Done = list[tuple["asyncio.Future[_Batch] | _Connection", "_Batch | BaseException"]]  # a round's outcomes
# The rounds of the other door a round's replies wait for: (that committer, its last round
# decided before this one) each (see the module docstring).
_Waits = list[tuple["Committer", int]]


@dataclass
class _Decided:
    """A round decided and written, its fsyncs not yet all done (``Committer._sync``)."""

    round_: list[_Queued]
    number: int
    done: _Done  # its outcomes, sent once it is durable
    waits: _Waits | None  # the other door's rounds its replies wait for (None: plain SETs only)
    wrote_kv: bool
    logs: dict[str, Any]
    sync_s: float = 0.0  # spent in its fsyncs so far (on the loop, before a hand-off)
    failure: Exception | None = None  # (its decision or its fsync on the loop failed)


class Committer:
    """The commit rounds of one door: a round decides the writes of every batch it holds, from
    all connections, one after another, makes them durable with one fsync a store, then answers
    them all at once (Redis's ``appendfsync always`` group commit). A round runs on the event
    loop (``gather``, ``_run_group``) or on the committer's thread (``submit``, ``_run``: a
    round takes every batch queued, at most ``ROUND_BATCHES_MAX``; while one round's fsync runs,
    the next round's batches queue up); see the module docstring for which. One thread, not one
    per connection: 16 or 50 threads contending for the GIL cost more CPU than the writes
    themselves (benchmarks/RESULTS.md).
    """

    ROUND_BATCHES_MAX = 1024
    ROUND_COMMANDS_MAX = 4096  # (a round is one decision: its ops are one write)
    # 150 us: SET x16 12.9k -> 13.5k/s, x50 15.9k -> 17.3k/s, x1 unchanged; 300 us was worse
    # (benchmarks/RESULTS.md; the prototype found the same).
    COMMIT_DELAY_S = 0.00015
    # Rounds run on the loop while the mean fsync of the last rounds is at most this; above it,
    # on the thread, which lets the loop read and answer meanwhile (a slow disk: a spinning one,
    # a network file system). 5 ms, not 1: this machine's fdatasync of a round of 30 SETs takes
    # 0.5-1.5 ms, and at 1 ms 13-83% of SET x50's rounds went to the thread, each a GIL hand-off
    # and a wake-up (0.2-0.6 futex calls a SET); on the loop, 2-12% more SETs/s in 4 of 4
    # paired runs (benchmarks/RESULTS.md, issue 34, fifteenth phase; eighth phase for 1 ms).
    LOOP_SYNC_MAX_S = 0.005
    _SYNC_WEIGHT = 0.125  # of the newest round's fsync in the mean (an exponential moving mean)

    def __init__(self, front: RespFront, loop: asyncio.AbstractEventLoop) -> None:
        self.front = front
        self.loop = loop
        self._queue: collections.deque[_Queued] = collections.deque()
        self._cond = threading.Condition()
        self._stopping = False
        self.rounds = 0  # rounds run (each: at most one fsync a store written)
        self.decided = 0  # the last round that took ``_ROUNDS`` (its decision began)
        self.batches = 0  # batches they held (INFO: batches a round, the group commit's size)
        self.delivered = 0  # the last round whose replies reached the loop
        self._last_round = 0  # batches the last round held
        self._settling: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()
        self._wanted = 1  # the queue length at which submit wakes the thread (under _cond)
        # A round runs, on the thread or on the loop, or the loop gathers one (under _cond).
        self._busy = False
        self._group: list[_Queued] = []  # the loop's group, gathered (gather)
        self._group_began = 0.0
        self._group_commands = 0  # commands the group's batches hold
        self._last_group = 1  # batches the loop's last round held
        self._sync_mean = 0.0  # the rounds' fsyncs, seconds (an exponential moving mean)
        self.rounds_here = 0  # rounds run on the loop (INFO)
        self.rounds_alone = 0  # rounds of plain SETs written without a decision (INFO; plain_round)
        # A round decided on the loop whose fsync would have waited there: the thread finishes
        # it (``_run_group``, ``_finish``; under _cond). ``handed``: how many (INFO).
        self._finishing: _Decided | None = None
        self.handed = 0
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
                while (not self._queue or self._busy) and not self._stopping and self._finishing is None:
                    self._cond.wait()
                finishing, self._finishing = self._finishing, None
                if finishing is None and not self._queue:
                    return
            if finishing is not None:
                self._finish(finishing)
                continue
            with self._cond:
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
                done, waits = self._round(round_, number)
                if waits is not None:  # (it ran more than plain SETs: it may have read the pool's writes)
                    self._settle_pool_writes(done)
            finally:
                with self._cond:
                    self._busy = False
            with contextlib.suppress(RuntimeError):  # the loop closed
                self.loop.call_soon_threadsafe(self._deliver, done, number, waits)

    def _round(self, round_: list[_Queued], number: int) -> tuple[_Done, _Waits | None]:
        """Run a round's batches as one decision and make them durable (their outcomes; an
        error reply for each command if the write or the fsync failed), and the rounds of the
        other door its replies wait for (none if it ran plain SETs only; see the module
        docstring). On the committer's thread (``_run_group`` runs a round on the loop)."""
        try:
            decided = self._decide(round_, number)
            self._sync(decided, wait=True)
        except Exception as err:  # the write or the fsync failed: nothing here is acknowledged
            return self._failed(round_, err), None
        return decided.done, decided.waits

    def _decide(
        self,
        round_: list[_Queued],
        number: int,
        taken: list[Any] | None = None,
        tails: HeldTails | None = None,
    ) -> _Decided:
        """A round's batches run as one decision, written, not yet fsynced (``_sync``).
        ``taken``: the locks the caller took for the round, ``_ROUNDS`` first (a round on the
        loop), given back as the round's own ``_ROUNDS`` is, before the fsync; ``tails``: the
        streams' writer locks it took (likewise)."""
        self.batches += len(round_)
        done: _Done = []
        waits: _Waits | None = None  # (None: the round ran plain SETs only)
        wrote_kv = False
        logs: dict[str, Any] = {}
        # One decision for the whole round: one writer lock, one catch-up, one write of
        # every op (each command is still atomic: they run one after another inside it).
        started = time.perf_counter()
        held = tails if tails is not None else HeldTails()  # (once a round a stream, not an XADD)
        # One round at a time in the process, whichever door's committer runs it: a round
        # takes its stores' locks in the order its commands come (the RESP door's key-value
        # store, then streams; the native door's stores in request order), so two rounds
        # at once could each hold a lock the other waits for. The fsyncs still overlap.
        if taken is None:
            _ROUNDS.acquire()
        try:
            self.decided = number  # (under _ROUNDS: the other door's rounds read it there)
            # SET x1, SET x16: a round of plain SETs only, on a store the daemon owns, is written
            # without a decision (``plain_round``: None if it is not one, nothing written)
            alone = self.front.plain_round(round_)
            if alone is not None:
                self.rounds_alone += 1
                wrote_kv = True
                done.extend(zip([f for _, _, f in round_], alone, strict=True))
            # (a round of XADDs only opens no decision of the key-value store: with the store
            # shared, it would wait for another process's writer lock for nothing)
            decides = alone is None and self.front.decides_kv(round_)
            deciding = self.front.kv.decide() if decides else contextlib.nullcontext()
            with deciding as d:
                i = 0 if alone is None else len(round_)  # (a round written alone is done)
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
                        # XADD x16: plain XADDs of open logs, appended under the round's locks
                        plain, appended = session.plain_xadds(round_, i, held)
                        if plain:
                            if waits is None:  # (as any command but a plain SET: see above)
                                waits = self._decided_before()
                            logs.update(appended)
                            done.extend(
                                zip([f for _, _, f in round_[i : i + len(plain)]], plain, strict=True)
                            )
                            i += len(plain)
                            continue
                    i += 1
                    if waits is None:  # (a command that may read what the other door wrote)
                        waits = self._decided_before()
                    if d is not None:
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
                for lock in reversed(taken) if taken is not None else (_ROUNDS,):
                    lock.release()
        self.decide_s += time.perf_counter() - started
        return _Decided(round_, number, done, waits, wrote_kv, logs)

    def _sync(self, decided: _Decided, *, wait: bool) -> bool:
        """A decided round's fsyncs (``sync_writes``), before any of its replies is sent.
        ``wait=False`` (on the loop): False if one would wait for another thread's or another
        process's fsync; the round's thread finishes it then (``_run_group``)."""
        began = time.perf_counter()
        synced = sync_writes(self.front, decided.wrote_kv, decided.logs, wait=wait)
        took = time.perf_counter() - began
        self.sync_s += took
        if synced and (decided.wrote_kv or decided.logs):
            self._sync_mean += (took + decided.sync_s - self._sync_mean) * self._SYNC_WEIGHT
        decided.sync_s += took
        return synced

    def _failed(self, round_: list[_Queued], err: Exception) -> _Done:
        """A round whose write or fsync failed: its other writes settled, every command of it
        answered with an error."""
        _logger.error("RESP commit round failed: %s", err)
        self._settle_failed_round()
        failed = w.error(f"ERR the write failed, the commands may or may not be applied: {err}")
        return [(fut, _Batch([failed] * len(cmds), [])) for _, cmds, fut in round_]

    def _settle_failed_round(self) -> None:
        """A round whose write failed may have written other stores and logs first (each
        store's ops are written when its decision ends, also when the round fails): they are
        applied, and a read may show them once the round is answered. Make them durable before
        its error replies go (``Stores.settle``: every log written since its last fsync). A
        failed fsync here fails its log, which stops the daemon (``Stores``' on_fail)."""
        try:
            self.front.server.stores.settle()
        except Exception as err:
            _logger.error("commit round: making a failed round's other writes durable failed: %s", err)

    def _settle_pool_writes(self, done: _Done) -> None:
        """On the committer's thread, after a round that ran more than plain SETs (an EXEC with
        an XRANGE or a QLEN in it): every log written outside a round, in the pool (a job's put,
        a forwarded append), durable before the round's replies go (``Stores.settle``). A round
        on the loop needs none: it holds key-value writes and plain XADDs and appends, whose
        replies show what the round wrote, and what was in the store's or the log's file before
        it (another process's), which the round's fsync of that file covers too."""
        try:
            self.front.server.stores.settle()
        except Exception as err:  # (a store's fsync failed: the daemon stops, no reply goes)
            _logger.error("commit round: making the pool's writes durable failed: %s", err)
            failed = w.error(f"ERR the write failed, the commands may or may not be applied: {err}")
            done[:] = [
                (fut, _Batch([failed] * len(o.replies), []) if isinstance(o, _Batch) else o)
                for fut, o in done
            ]

    def _decided_before(self) -> _Waits:
        """Under ``_ROUNDS``, in a round's decision: the last round of each other committer of
        the process (the other door's) that took ``_ROUNDS`` before this one did, if it is not
        answered yet. (This committer's own rounds run one at a time: its earlier ones are
        durable already.)"""
        return [
            (other, other.decided)
            for other in self.front.committers()
            if other is not None and other is not self and other.delivered < other.decided
        ]

    def gather(self, session: Session, cmds: list[list[bytes]], conn: _Connection) -> bool:
        """On the loop: add a batch to the loop's group, which runs as a round on the loop once
        this turn's reads are done (``_run_group``; see the module docstring). The caller gives
        only batches whose locks the round can take without a wait or fails to (then it goes
        to the thread): decisions of open key-value stores and appends to open logs
        (``hold_streams`` takes the writer locks another process may hold only if they are
        free), never a journal's call. False, nothing done, if the round must
        run on the thread (``submit``): the thread has rounds queued or running, the daemon is
        stopping, the fsyncs are slow (``LOOP_SYNC_MAX_S``), or the group holds as many batches
        or commands as a round may (``ROUND_BATCHES_MAX``, ``ROUND_COMMANDS_MAX``: the thread
        takes this one once the group's round is done)."""
        if not self._group:
            if self._sync_mean > self.LOOP_SYNC_MAX_S:
                return False
            with self._cond:
                if self._queue or self._busy or self._stopping:
                    return False
                self._busy = True  # (the thread takes no round until the group's is done)
            self._group_began = time.monotonic()
            self._group_commands = 0
            self.loop.call_soon(self._run_group)
        elif len(self._group) >= self.ROUND_BATCHES_MAX or self._group_commands >= self.ROUND_COMMANDS_MAX:
            return False
        self._group.append((session, cmds, conn))
        self._group_commands += len(cmds)
        return True

    def _run_group(self) -> None:
        """On the loop, after a turn's reads: the group's round, fsync included, and its
        replies; or, while the group is smaller than the last and its commit delay lasts, look
        again after the loop's next turn (which reads what came meanwhile)."""
        group = self._group
        if not group:  # (stop() handed it to the thread)
            return
        if len(group) < self._last_group and not self._stopping:
            waited = time.monotonic() - self._group_began
            if waited < self.COMMIT_DELAY_S:
                self.loop.call_soon(self._run_group)
                return
            self.delay_s += waited
        self._group = []
        self._last_group = len(group)
        # The locks the round takes, taken here without waiting: the rounds' lock (another
        # door's round on its thread may hold it) and each store's mutex (a snapshot's fork, a
        # read in the pool, may hold one), then the streams' writer locks (``hold_streams``).
        # If one is taken, or taking one fails, the group goes to the thread, which may wait:
        # the loop never does. The round gives them all back before its fsync.
        taken: list[Any] = []
        tails: HeldTails | None = None
        try:
            for lock in (_ROUNDS, *self.front.kv.mutexes(group)):
                if not lock.acquire(blocking=False):
                    break
                taken.append(lock)
            else:
                tails = self.front.hold_streams(group)
        except Exception:
            _logger.exception(
                "taking a commit round's locks on the loop failed; the round goes to the thread"
            )
        if tails is None:
            for lock in reversed(taken):
                lock.release()
            with self._cond:
                self._queue.extend(group)
                self._busy = False
                self._cond.notify()
            return
        self.rounds += 1  # (before the decision: see ``settled``)
        self.rounds_here += 1
        number = self.rounds
        try:
            decided = self._decide(group, number, taken, tails)
            synced = self._sync(decided, wait=False)  # (no settle: see _settle_pool_writes)
        except Exception as err:  # the write or the fsync failed: nothing here is acknowledged
            # (answered by the thread: a failed round settles the stores' other writes first,
            # and those fsyncs may wait for another process's)
            decided, synced = _Decided(group, number, [], None, False, {}, failure=err), False
        if synced:
            with self._cond:
                self._busy = False
                if self._queue:
                    self._cond.notify()
            self._deliver(decided.done, number, decided.waits)  # (outside the try: see above)
            return
        # Another process's fsync of a log the round wrote is under way (it holds the sync
        # file's lock through it), or another thread of ours fsyncs it, or the round failed:
        # the loop does not wait. The thread finishes the round (its fsyncs and replies), and
        # no other round runs meanwhile (``_busy`` stays set).
        with self._cond:
            self._finishing = decided
            self._cond.notify()
        self.handed += 1

    def _finish(self, decided: _Decided) -> None:
        """On the committer's thread: a round decided on the loop whose fsync would have waited
        there (``_run_group``): its fsyncs, then its replies, on the loop; or, if it failed
        there, its error replies, once its other writes are settled (``_failed``)."""
        try:
            try:
                if decided.failure is not None:
                    raise decided.failure
                self._sync(decided, wait=True)
                done, waits = decided.done, decided.waits
            except Exception as err:  # the fsync failed: nothing here is acknowledged
                done, waits = self._failed(decided.round_, err), None
        finally:
            with self._cond:
                self._busy = False
        with contextlib.suppress(RuntimeError):  # the loop closed
            self.loop.call_soon_threadsafe(self._deliver, done, decided.number, waits)

    def _deliver(self, done: _Done, number: int, waits: _Waits | None = None) -> None:
        """On the loop: the replies of round ``number``, whose writes are durable now (one call
        a round: the fast path's connections write theirs here, the others' tasks wake); once
        the other door's rounds in ``waits`` are answered (see the module docstring)."""
        if waits:
            pending = [f for f in (c.settled_through(n) for c, n in waits) if f is not None]
            if pending:
                both = pending[0] if len(pending) == 1 else asyncio.gather(*pending)
                both.add_done_callback(lambda _: self._deliver(done, number))
                return
        # (first: a connection going on below may read on the loop; a thread's round answered
        # after a later round of the loop leaves it as it is)
        self.delivered = max(self.delivered, number)
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
        return self.settled_through(self.rounds)

    def settled_through(self, target: int) -> asyncio.Future[None] | None:
        """On the loop: a future done once round ``target`` and every round before it are
        durable and answered (None if they are)."""
        if self.delivered >= target:
            return None
        waiter: asyncio.Future[None] = self.loop.create_future()
        if self._settling and self._settling[-1][0] > target:  # (kept in order: _deliver)
            bisect.insort(self._settling, (target, waiter), key=lambda item: item[0])
        else:
            self._settling.append((target, waiter))
        return waiter

    def stop(self) -> None:
        """Finish the batches queued, and the loop's group if one is gathered (on the loop: it
        is handed to the thread, whose rounds finish before the stores close), then end the
        thread."""
        with self._cond:
            self._stopping = True
            if self._group:
                self._queue.extend(self._group)
                self._group = []
            self._cond.notify()
        self._thread.join(60)
