"""The checkpointed file's torture tools, run as a user runs them: ``logspool ckpt ...``.

``pummel`` starts ``pound`` in a child, kills it with SIGKILL at a random moment (some before it
is ready, that is during its own rollback), opens the file and checks that it holds one
checkpoint (one timestamp throughout), round after round. ``corrupt`` changes random bytes, and
``pound`` must refuse the file, naming the offset. ``LOGSPOOL_TORTURE=N`` multiplies the rounds.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROUNDS = 25 * int(os.environ.get("LOGSPOOL_TORTURE", "1"))


def ckpt(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "logspool", "ckpt", *args], capture_output=True, text=True, timeout=600
    )


def test_pummel_kills_pound_again_and_again_and_the_file_is_always_one_checkpoint(tmp_path: Path) -> None:
    done = ckpt("pummel", str(tmp_path / "f"), "--rounds", str(ROUNDS), "--size", "128K", "--seed", "7")
    assert done.returncode == 0, done.stderr
    assert f"pummel: {ROUNDS} rounds" in done.stdout and ", 0 failures" in done.stdout
    found = re.search(r"(\d+) rollbacks", done.stdout)
    assert found is not None, done.stdout
    rollbacks = int(found.group(1))
    assert rollbacks > ROUNDS // 3, done.stdout  # most kills landed inside a transaction


def test_pummel_without_safely_survives_process_kills(tmp_path: Path) -> None:
    done = ckpt("pummel", str(tmp_path / "f"), "--rounds", "8", "--size", "64K", "--unsafely", "--seed", "3")
    assert done.returncode == 0, done.stderr
    assert ", 0 failures" in done.stdout


def test_corrupt_is_caught_by_pound_and_pummel(tmp_path: Path) -> None:
    path = str(tmp_path / "f")
    assert ckpt("pound", path, "--size", "64K", "--rounds", "3").returncode == 0
    done = ckpt("corrupt", path, "5", "--seed", "1")
    assert done.returncode == 0 and done.stdout.startswith(f"changed 5 bytes of {path} at offsets ")
    first = min(int(o) for o in done.stdout.split("at offsets ")[1].split(", "))
    refused = ckpt("pound", path, "--rounds", "1")
    assert refused.returncode == 1
    # pound compares every word with word 0: damage in word 0 shows at the next word
    assert f"offset {first // 8 * 8 if first >= 8 else 8}:" in refused.stderr, refused.stderr
    assert "not one checkpoint" in refused.stderr
    report = ckpt("pummel", path, "--rounds", "2", "--seed", "1")
    assert report.returncode == 1 and "2 failures" in report.stdout


def test_repair_rolls_back_a_killed_transaction_and_says_so(tmp_path: Path) -> None:
    path = tmp_path / "f"
    code = (
        "import sys, logspool\n"
        "f = logspool.CheckpointFile(sys.argv[1], size=8192)\n"
        "f.write(0, b'x' * 5000)\n"
        "import os; os.kill(os.getpid(), 9)\n"
    )
    subprocess.run([sys.executable, "-c", code, str(path)], check=False)
    assert path.read_bytes()[:5000] == b"x" * 5000
    done = ckpt("repair", str(path))
    assert done.returncode == 0 and "rolled back 2 blocks (8192 bytes) to the last checkpoint" in done.stdout
    assert path.read_bytes() == bytes(8192)
    again = ckpt("repair", str(path))
    assert again.returncode == 0 and "nothing to do" in again.stdout
