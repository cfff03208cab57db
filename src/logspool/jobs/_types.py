"""What the job journal hands out: ``Job`` (an immutable copy of a job), ``Idle`` (no job ready,
and when one may be), ``JobStats``; ``domain_of``, the fairness group a key names; ``Merge``.
Shared by the embedded journal and the remote client (``logspool._remote``)."""

from __future__ import annotations

import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

Merge = Literal["replace", "keep", "earliest", "latest"]


class Job(NamedTuple):
    """A job as the journal holds it: an immutable copy, taken when the call returned (a
    NamedTuple, as ``Record``: a take builds one per lease, ~0.8 us against ~3 for a frozen
    dataclass; docs/DESIGN.md "Records are a NamedTuple").

    ``id`` is the id ``put`` returned when it created the job (ids grow with arrival order);
    ``token`` is the lease's fencing token while it is leased (0 otherwise); times are seconds
    since the epoch.
    ``state`` is "pending", "leased" or "dead"; ``error`` is the last nack's or death's reason.
    """

    id: int
    key: str
    domain: str
    payload: bytes
    priority: int
    state: str
    not_before: float
    deliveries: int
    token: int
    lease_until: float | None
    ttl_until: float | None
    created: float
    updated: float
    error: str


@dataclass(frozen=True, slots=True)
class Idle:
    """What ``take`` returns when no job is ready: falsy, with the time the next one may be.

    ``next_at`` (seconds since the epoch) is when a delayed job becomes ready or a lease expires;
    None when nothing is waiting. A new put from any process can make a job ready sooner.
    """

    next_at: float | None

    def __bool__(self) -> bool:
        return False

    @property
    def wait_s(self) -> float | None:
        """Seconds from now to ``next_at`` (0 if it has passed), or None."""
        return None if self.next_at is None else max(0.0, self.next_at - time.time())


@dataclass(frozen=True, slots=True)
class JobStats:
    """Counts now (``pending`` = ``ready`` + ``delayed`` + ``blocked``) and counters since creation."""

    pending: int
    ready: int
    delayed: int
    blocked: int  # pending behind a leased job of the same key
    leased: int
    dead: int
    keys: int
    next_at: float | None
    next_lsn: int
    max_deliveries: int
    counters: dict[str, int] = field(default_factory=dict)
    ops_lost: int = 0  # ops a repair of the op log quarantined (see docs/JOBS.md)

    def to_json(self) -> dict[str, object]:
        return {
            "pending": self.pending,
            "ready": self.ready,
            "delayed": self.delayed,
            "blocked": self.blocked,
            "leased": self.leased,
            "dead": self.dead,
            "keys": self.keys,
            "next_at": self.next_at,
            "next_lsn": self.next_lsn,
            "max_deliveries": self.max_deliveries,
            "counters": dict(self.counters),
            "ops_lost": self.ops_lost,
        }


def domain_of(key: str) -> str:
    """The domain a key names when the caller gives none: a URI's host (lower case), else the text
    before the first ``:`` or ``/`` (``user:42`` -> ``user``), else "" (one domain for all)."""
    if "://" in key:
        host = urllib.parse.urlsplit(key).hostname
        if host:
            return host
    for i, ch in enumerate(key):
        if ch in ":/":
            return key[:i]
    return ""
