"""``Journal.work``'s loop: jobs one after another, acked as the next is asked for, nacked on an
exception (with a backoff), and, with ``batch`` > 1, leased and acked a batch at a time."""

from __future__ import annotations

import collections
import contextlib
import logging
import time
from types import TracebackType
from typing import TYPE_CHECKING

from ..errors import LeaseExpiredError
from ._types import Job

if TYPE_CHECKING:
    from ._journal import Journal

_logger = logging.getLogger("logspool.jobs")


class Work:
    """The iterator of ``Journal.work``: also a context manager (see there)."""

    def __init__(
        self, journal: Journal, lease_s: float, idle_timeout_s: float | None, backoff_s: float, batch: int = 1
    ) -> None:
        self._journal = journal
        self._lease_s = lease_s
        self._idle_timeout_s = idle_timeout_s
        self._backoff_s = backoff_s
        self._batch = batch
        self._current: Job | None = None
        self._held: collections.deque[Job] = collections.deque()  # leased, not yet handed out
        self._finished: list[Job] = []  # done, to be acked with the next step
        self._done = False
        self.done_count = 0
        self.failed_count = 0

    def __iter__(self) -> Work:
        return self

    def __next__(self) -> Job:
        previous, self._current = self._current, None
        if previous is not None and previous.token not in self._journal._settled:
            self._finished.append(previous)  # (acked by the caller otherwise)
        if self._done:
            self._ack_finished()
            raise StopIteration
        if self._held:
            self._current = self._held.popleft()
            return self._current
        idle_since = time.monotonic()
        for _ in range(1 << 40):  # bounded by idle_timeout, or by the caller leaving the loop
            wait = 3600.0
            if self._idle_timeout_s is not None:
                wait = max(0.0, self._idle_timeout_s - (time.monotonic() - idle_since))
            acks, self._finished = self._finished, []
            try:  # the finished jobs are acked in the same durable step as the next take
                got = self._journal.take_many(self._batch, self._lease_s, wait=min(wait, 3600.0), ack=acks)
            except LeaseExpiredError:
                self._ack_each(acks)  # all or none above: ack those whose lease holds
                got = self._journal.take_many(self._batch, self._lease_s, wait=min(wait, 3600.0))
            except BaseException:
                self._finished[:0] = acks  # not acked: the next step (or leaving the loop) tries again
                raise
            else:
                self.done_count += len(acks)
            if got:
                self._held.extend(got[1:])
                self._current = got[0]
                return got[0]
            if self._idle_timeout_s is not None and time.monotonic() - idle_since >= self._idle_timeout_s:
                break
        else:
            raise AssertionError("work() waited 2^40 times for a job")
        self._done = True
        raise StopIteration

    def _ack_each(self, jobs_: list[Job]) -> None:
        for job in jobs_:
            try:
                self._journal.ack(job)
                self.done_count += 1
            except LeaseExpiredError as err:
                _logger.warning("%s: a job finished after its lease was lost: %s", self._journal.path, err)

    def _ack_finished(self) -> None:
        acks, self._finished = self._finished, []
        if not acks:
            return
        try:
            self._journal.ack_many(acks)
            self.done_count += len(acks)
        except LeaseExpiredError:
            self._ack_each(acks)

    def _settle(self, error: BaseException | None, *, backoff: bool = True) -> None:
        """Ack (no error) or nack the current job, unless the caller already did; ack the finished
        jobs and give back the ones not started."""
        job, self._current = self._current, None
        if job is not None and job.token not in self._journal._settled:
            if error is None:
                self._finished.append(job)
            else:
                delay = min(3600.0, self._backoff_s * 2 ** max(0, job.deliveries - 1)) if backoff else 0.0
                try:
                    self._journal.nack(job, delay=delay, error=repr(error))
                    self.failed_count += 1
                except LeaseExpiredError as err:
                    _logger.warning(
                        "%s: job %d failed after its lease was lost: %s", self._journal.path, job.id, err
                    )
        self._ack_finished()
        held, self._held = list(self._held), collections.deque()
        try:
            self._journal.release_many(held)
        except LeaseExpiredError:  # all or none: release those whose lease holds
            for job in held:
                with contextlib.suppress(LeaseExpiredError):  # (its lease ran out: it is back anyway)
                    self._journal.release(job)

    def close(self) -> None:
        """Give the current job back (nack, no delay) and stop."""
        self._done = True
        if not self._journal._closed and (self._current is not None or self._held or self._finished):
            self._settle(RuntimeError("the worker left the loop"), backoff=False)

    def __enter__(self) -> Work:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._done = True
        if not self._journal._closed:
            self._settle(error)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()
