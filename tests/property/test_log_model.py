"""The log behaves as a list: a hypothesis state machine appends, cuts over, reopens and reads.

Every step is checked against a plain Python list of payloads; small segments make rotations
frequent, and random payload sizes cross index intervals and read chunks.
"""

from __future__ import annotations

import shutil
import tempfile

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import logspool
from logspool.log._directory import to_ns

payload = st.binary(max_size=600)


class LogModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="logspool-model-")
        self.path = self.dir + "/log"
        self.model: list[bytes] = []
        self.log = logspool.open(self.path, durability="os", segment_size_max=4096, index_interval=512)

    @rule(data=payload)
    def append(self, data: bytes) -> None:
        assert self.log.append(data) == len(self.model)
        self.model.append(data)

    @rule(items=st.lists(payload, max_size=20))
    def append_many(self, items: list[bytes]) -> None:
        assert self.log.append_many(items) == list(range(len(self.model), len(self.model) + len(items)))
        self.model.extend(items)

    @rule()
    def cutover(self) -> None:
        self.log.cutover()

    @rule()
    def reopen(self) -> None:
        self.log.close()
        self.log = logspool.open(self.path, durability="os")

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data())
    def read_from(self, data: st.DataObject) -> None:
        start = data.draw(st.integers(0, len(self.model)))
        got = [(r.lsn, r.payload) for r in self.log.read(start=start)]
        assert got == list(enumerate(self.model))[start:]

    @precondition(lambda self: bool(self.model))
    @rule(pick=st.integers(0, 10**6))
    def read_since(self, pick: int) -> None:
        recs = list(self.log.read())
        since = recs[pick % len(recs)].timestamp / 1e9  # seconds: loses the nanoseconds
        since_ns = to_ns(since)
        expected = [r.lsn for r in recs if r.timestamp >= since_ns]
        assert [r.lsn for r in self.log.read(since=since)] == expected

    @invariant()
    def tail_matches(self) -> None:
        assert self.log.info().next_lsn == len(self.model)

    def teardown(self) -> None:
        self.log.close()
        assert logspool.verify(self.path).ok
        with logspool.open(self.path, readonly=True) as log:
            assert [r.payload for r in log.read()] == self.model
        shutil.rmtree(self.dir)


TestLogModel = LogModel.TestCase
TestLogModel.settings = settings(max_examples=100, stateful_step_count=40, deadline=None)
