"""A damaged undo log never opens as a torn checkpointed file.

A checkpoint of 8 KiB of ``A``, then a transaction writing ``B`` over all of it, killed (SIGKILL:
the page cache keeps both files). Storage damage then cuts or changes the undo log, a state a
crash alone cannot leave: entries of blocks that did change are gone. Before, opening restored
what was left and raised nothing (37 of 220 random damages gave a file half checkpoint, half
uncommitted transaction). The undo log's header now carries the checkpoint's CRC (undo format
2), so each damage either opens as exactly the checkpoint or raises CorruptionError naming the
undo log with both files left as they were; ``logspool ckpt repair`` refuses it too, and only
``--force`` restores what is there, saying the result is unproven. Real processes and files.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import logspool
from tests.conftest import run_cli

SIZE = 8192
WRITER = textwrap.dedent(
    """
    import os, signal, sys, logspool
    f = logspool.CheckpointFile(sys.argv[1], size=8192, block_size=512)
    f.write(0, b"A" * 8192)
    f.checkpoint()
    f.write(0, b"B" * 8192)  # the transaction, never checkpointed
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def _killed_mid_transaction(path: Path) -> bytes:
    """The undo log a writer killed mid-transaction left (the file holds all B now)."""
    done = subprocess.run([sys.executable, "-c", WRITER, str(path)], capture_output=True, check=False)
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert path.read_bytes() == b"B" * SIZE
    return Path(str(path) + ".undo").read_bytes()


def test_an_undo_log_cut_in_half_is_damage_not_a_torn_file(tmp_path: Path) -> None:
    data = tmp_path / "data"
    undo = Path(str(data) + ".undo")
    full = _killed_mid_transaction(data)
    undo.write_bytes(full[: len(full) // 2 + 7])  # the disk lost the second half
    with pytest.raises(logspool.CorruptionError, match="does not restore the checkpoint") as err:
        logspool.CheckpointFile(data)
    assert err.value.path == str(undo)
    assert data.read_bytes() == b"B" * SIZE and undo.exists()  # both left as they were
    refused = run_cli("ckpt", "repair", str(data))
    assert refused.returncode != 0 and b"--force" in refused.stderr
    forced = run_cli("ckpt", "repair", "--force", str(data))
    assert forced.returncode == 1 and b"may hold part" in forced.stderr
    assert not undo.exists()
    with logspool.CheckpointFile(data) as f:
        assert f.last_rollback is None


def test_random_damage_to_the_undo_log_never_gives_a_torn_file(tmp_path: Path) -> None:
    rng = random.Random(33)
    template = tmp_path / "template"
    full = _killed_mid_transaction(template)
    killed = template.read_bytes()
    outcomes = {"checkpoint": 0, "error": 0}
    for trial in range(220):
        data = tmp_path / f"d{trial}"
        undo = Path(str(data) + ".undo")
        data.write_bytes(killed)
        damaged = bytearray(full)
        kind = rng.choice(["truncate", "zero-512", "flip"])
        if kind == "truncate":
            del damaged[rng.randrange(48, len(damaged)) :]
        elif kind == "zero-512":
            at = rng.randrange(48, len(damaged))
            damaged[at : at + 512] = bytes(len(damaged[at : at + 512]))
        else:
            damaged[rng.randrange(48, len(damaged))] ^= 1 << rng.randrange(8)
        undo.write_bytes(bytes(damaged))
        try:
            with logspool.CheckpointFile(data) as f:
                got = f.read(0, SIZE)
        except logspool.CorruptionError as err:
            assert err.path == str(undo), f"trial {trial} ({kind})"
            assert data.read_bytes() == killed, f"trial {trial} ({kind}): the file was changed"
            outcomes["error"] += 1
            continue
        assert got == b"A" * SIZE, f"trial {trial} ({kind}): a torn file opened"
        outcomes["checkpoint"] += 1
    assert outcomes["error"] > 50, outcomes
