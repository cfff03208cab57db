"""The daemon's commit rounds of plain SETs written without a decision (``RedisKV.alone``,
``kv.Store._write_alone``) under simulated power loss and I/O errors, at every file-system
operation. The workload is what the RESP door does on a store it owns: rounds of plain SETs
written alone, each followed by the round's fsync (``RedisKV.sync``), and, where the store needs
a decision (a value expired, a segment full or due by age, a lock), the same round through
``RedisKV.decide``, as ``Committer._decide`` falls back; between them, decisions of other kinds.
The oracle is ``tests/crash/fold_torture.py``'s: after any cut the store opens to the fold of a
prefix of the reference run's ops at least as long as every round whose fsync returned.
"""

from __future__ import annotations

from pathlib import Path

from logspool import kv
from logspool.kv import _ops as ops
from logspool.kv._state import State
from logspool.server._resp_kv import RedisKV
from tests.clock import Clock
from tests.crash import fold_torture as torture
from tests.crash.faultfs import FaultFS
from tests.crash.fold_torture import NS
from tests.crash.test_kv_power import open_and_read, summary


def workload(root: Path, fs: FaultFS | None, acked: list[int], *, snapshots: bool) -> int:
    """``acked`` gets the store's applied lsn after every round whose fsync returned. Returns how
    many rounds were written alone (the rest fell back to a decision)."""
    clock = Clock()
    s = kv.open(
        root / "j",
        fs=fs,
        clock=clock,
        memory_max=600,
        snapshot_ops_min=10**9,
        segment_size_max=4096,
        single_writer=True,
    )
    r = RedisKV(s)
    alone = 0

    def done() -> None:
        acked.append(s._state.next_lsn)

    def round_(*pairs: tuple[str, bytes], owner: str | None = None) -> None:
        nonlocal alone
        with r.alone() as a:
            made = [a.plain_set_op(key, ops.BYTES, value, owner) for key, value in pairs]
            assert all(op is not None for op in made)
            wrote = a.write_many(made)  # type: ignore[arg-type]
        if wrote:
            alone += 1
        else:  # (the round as ``Committer._decide`` runs it then)
            with r.decide(owner) as d:
                d.write_many([d.plain_set_op(key, ops.BYTES, value, owner) for key, value in pairs])  # type: ignore[misc]
        r.sync()
        done()

    done()
    for i in range(14):  # (4 KiB segments: some of these rounds meet a rotation and fall back)
        round_((f"k{i % 5}", b"%d" % i * (30 + 20 * i)), (f"x{i}", b"v%d" % i))
    s.set("t", b"expires", ttl=5)
    done()
    s.lock("locked", "me", 60)
    done()
    round_(("locked", b"by its owner"), ("k0", b"with it"), owner="me")
    clock.ns += 10 * NS  # "t" expired: the next round falls back, its decision writes the EXPIRE op
    round_(("k1", b"after the expiry"))
    if snapshots:
        s.snapshot()
        done()
    for i in range(6):
        round_((f"k{i}", b"again %d" % i * 40))
    s.delete("k2")
    done()
    round_(("k2", b"back"), ("k3", b"x" * 300))
    s.close()
    return alone


def test_the_workload_writes_most_rounds_alone_and_falls_back_where_it_must(tmp_path: Path) -> None:
    """The sweeps below cover both ways down: most rounds alone, some by a decision (an expiry,
    a rotation)."""
    acked: list[int] = []
    alone = workload(tmp_path, None, acked, snapshots=True)
    rounds = 14 + 1 + 1 + 6 + 1
    assert rounds - 5 <= alone < rounds


SUBJECT = torture.Subject(workload, summary, State, ops.decode, open_and_read)


class TestRoundsAlone(torture.Sweeps):
    SUBJECT = SUBJECT
