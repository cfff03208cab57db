"""Torture tools for the checkpointed file: pound, pummel and corrupt (the CKPTFile article's).

- ``pound`` fills the file with one 8-byte timestamp, in chunks of random size and order, then
  checkpoints, checks that the file is still one timestamp throughout, and goes again. After any
  crash and rollback the file must hold exactly one timestamp: a mix means a torn transaction.
- ``pummel`` runs pound in a child process, kills it (SIGKILL) at a random moment, opens the file
  (rolling it back) and checks it, round after round; some kills land before the child is ready,
  that is during its own rollback.
- ``corrupt`` changes random bytes of a file, to show that the checks above notice.
"""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

from .. import limits
from .._fs import REAL, FileSystem
from ..errors import CorruptionError
from ._file import CheckpointFile

WORD_SIZE = 8  # pound's timestamps
POUND_SIZE_DEFAULT = 256 * limits.KIB
READY = b"ready"
# How long pummel waits for a child to say it is ready (seconds): interpreter start and rollback.
READY_TIMEOUT_S = 60.0
# The share of pummel's kills that do not wait for "ready": they land during start or rollback.
EARLY_KILL_SHARE = 0.2


def first_mismatch(data: bytes) -> int | None:
    """The offset of the first 8-byte word that differs from the first word, or None."""
    if len(data) % WORD_SIZE:
        raise ValueError(f"pound needs a size that is a multiple of {WORD_SIZE} bytes, not {len(data)}")
    word = data[:WORD_SIZE]
    if data == word * (len(data) // WORD_SIZE):
        return None
    chunk = 64 * limits.KIB
    expected = word * (chunk // WORD_SIZE)
    for start in range(0, len(data), chunk):  # bounded by the size
        part = data[start : start + chunk]
        if part != expected[: len(part)]:
            for off in range(0, len(part), WORD_SIZE):
                if part[off : off + WORD_SIZE] != word:
                    return start + off
    raise AssertionError("unreachable: the data differs but no word does")


def check_uniform(f: CheckpointFile) -> None:
    """Raise CorruptionError unless ``f`` holds one 8-byte word throughout."""
    data = f.read(0, f.size)
    bad = first_mismatch(data)
    if bad is not None:
        found = int.from_bytes(data[bad : bad + WORD_SIZE], "little")
        first = int.from_bytes(data[:WORD_SIZE], "little")
        raise CorruptionError(
            f.path, bad, f"word {found:#018x} differs from {first:#018x} at offset 0: not one checkpoint"
        )


def pound(
    path: str,
    *,
    size: int | None = None,
    rounds: int = 0,
    safely: bool = True,
    block_size: int = limits.CKPT_BLOCK_SIZE_DEFAULT,
    seed: int | None = None,
    ready: bool = False,
) -> int:
    """Pound ``path`` for ``rounds`` rounds (0: until killed); returns the rounds done. With
    ``ready``, prints "ready" once the file is open and checked (pummel waits for it)."""
    rng = random.Random(seed)
    if size is None and not os.path.exists(path):
        size = POUND_SIZE_DEFAULT
    with CheckpointFile(path, size=size, safely=safely, block_size=block_size) as f:
        if f.size % WORD_SIZE:
            raise ValueError(f"{path}: pound needs a size that is a multiple of {WORD_SIZE}, not {f.size}")
        check_uniform(f)
        if ready:
            sys.stdout.buffer.write(READY + b"\n")
            sys.stdout.flush()
        done = 0
        while rounds == 0 or done < rounds:  # bounded by rounds, or by the kill
            previous = f.read_int(0)
            stamp = max(time.time_ns(), previous + 1)
            word = stamp.to_bytes(WORD_SIZE, "little")
            chunks = []
            pos = 0
            while pos < f.size:  # bounded: each turn moves pos forward
                n = min(f.size - pos, WORD_SIZE * rng.randint(1, 3 * block_size // WORD_SIZE))
                chunks.append((pos, n))
                pos += n
            rng.shuffle(chunks)
            for pos, n in chunks:
                f.write(pos, word * (n // WORD_SIZE))
            f.checkpoint()
            check_uniform(f)
            done += 1
    return done


@dataclass
class PummelReport:
    rounds: int = 0
    early_kills: int = 0  # kills that did not wait for "ready" (during start or rollback)
    rollbacks: int = 0  # opens after a kill that rolled back a transaction
    torn_tails: int = 0  # of those, how many ignored a torn last undo entry
    failures: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"pummel: {self.rounds} rounds ({self.early_kills} killed before ready), "
            f"{self.rollbacks} rollbacks ({self.torn_tails} with a torn tail), {len(self.failures)} failures"
        )


def pummel(
    path: str,
    *,
    rounds: int = 100,
    size: int | None = None,
    safely: bool = True,
    delay_max_s: float = 0.2,
    seed: int | None = None,
) -> PummelReport:
    """Kill a pounding child ``rounds`` times; check the file after each kill."""
    rng = random.Random(seed)
    report = PummelReport()
    size_args = ["--size", str(size)] if size is not None else []
    for _ in range(rounds):  # bounded by rounds
        cmd = [sys.executable, "-m", "logspool", "ckpt", "pound", path, "--ready", *size_args]
        cmd += [] if safely else ["--unsafely"]
        cmd += ["--seed", str(rng.randrange(1 << 30))]
        child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert child.stdout is not None
        early = rng.random() < EARLY_KILL_SHARE
        report.early_kills += early
        if early:
            time.sleep(rng.uniform(0, 0.3))
        else:
            readable, _, _ = select.select([child.stdout], [], [], READY_TIMEOUT_S)
            line = child.stdout.readline() if readable else b""
            if line.strip() != READY:
                child.kill()
                _, err = child.communicate()
                report.failures.append(
                    f"round {report.rounds + 1}: pound did not start: {err.decode().strip()}"
                )
                report.rounds += 1
                continue
            time.sleep(rng.uniform(0, delay_max_s))
        child.send_signal(signal.SIGKILL)
        _, err = child.communicate()
        report.rounds += 1
        if child.returncode != -signal.SIGKILL:
            report.failures.append(
                f"round {report.rounds}: pound exited {child.returncode}: {err.decode().strip()}"
            )
        try:
            with CheckpointFile(path) as f:
                if f.last_rollback is not None:
                    report.rollbacks += 1
                    report.torn_tails += f.last_rollback.torn_tail
                check_uniform(f)
        except (CorruptionError, OSError, ValueError) as exc:
            report.failures.append(f"round {report.rounds}: after the kill: {exc}")
    return report


def corrupt(path: str, count: int, *, seed: int | None = None, fs: FileSystem = REAL) -> list[int]:
    """Change ``count`` random bytes of ``path`` (each to a different value); returns their
    offsets. A file under test only: this is damage on purpose."""
    if count < 0:
        raise ValueError(f"count must be 0 or more, not {count}")
    rng = random.Random(seed)
    fd = fs.open(path, os.O_RDWR)
    try:
        size = fs.size(fd)
        if size == 0 and count:
            raise ValueError(f"{path}: the file is empty, there is nothing to corrupt")
        offsets = []
        for _ in range(count):  # bounded by count
            offset = rng.randrange(size)
            old = fs.pread(fd, 1, offset)[0]
            fs.pwrite(fd, bytes([old ^ rng.randrange(1, 256)]), offset)
            offsets.append(offset)
        fs.fsync(fd)
    finally:
        fs.close(fd)
    return offsets
