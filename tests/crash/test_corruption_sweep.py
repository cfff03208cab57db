"""The corruption sweep, a bounded sample of it: every store, clean and killed, damaged at random.

``logspool torture corrupt`` (src/logspool/cli/_sweep.py) makes a log, a job journal, a key-value
store and a checkpointed file, closed cleanly and killed with SIGKILL mid-work, then damages one
of their files per trial (bit flip, byte change, zeroed 512 bytes, truncation, garbage appended,
a block copied elsewhere) and reads everything back as a user would. Each trial is an error
raised, the exact data, a silent loss or wrong data. The suite runs 25 trials of each store in
each mode through the real CLI; the full sweep's figures are in docs/DURABILITY.md. Target: no
silent loss and no wrong data of anything acknowledged (a checkpointed file's data file, plain
bytes by design, is counted apart).
"""

from __future__ import annotations

import json

from tests.conftest import run_cli


def test_a_sample_of_the_corruption_sweep_finds_no_silent_loss_and_no_wrong_data() -> None:
    done = run_cli("torture", "corrupt", "--trials", "25", "--seed", "3", "--json", timeout=600)
    report = json.loads(done.stdout)
    assert done.returncode == 0 and report["ok"], report["examples"]
    totals = report["totals"]
    assert set(totals) == {"log", "jobs", "kv", "ckpt"}
    for store, counts in totals.items():
        assert sum(counts.values()) == 50, store
        assert counts.get("loss", 0) == counts.get("wrong", 0) == counts.get("bug", 0) == 0, store
    # The sweep can see damage: some trials of every store raised an error (it is not blind).
    assert all(counts.get("error", 0) > 0 for store, counts in totals.items() if store != "ckpt")
