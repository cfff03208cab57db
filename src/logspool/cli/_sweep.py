"""The corruption sweep (``logspool torture corrupt``): random damage to every file of every
store, each trial classified by what a user of the store would see.

For each store (a log, a job journal, a key-value store, a checkpointed file) a template is made
once per mode: ``clean`` (the work done and the store closed) and ``kill`` (a child process does
the work and is killed with SIGKILL after it reported some of it acknowledged; what it reported is
the truth). Each trial copies the template, damages one file of it, chosen at random, in one of
``KINDS`` ways, opens the store as its user would and reads everything back. The outcome is:

- ``error``: a LogspoolError (CorruptionError, DataLossError...) was raised, naming the damage;
- ``exact``: everything acknowledged came back, byte for byte (extra records a killed writer
  wrote without being told are allowed);
- ``loss``: something acknowledged is missing, and nothing said so (silent loss);
- ``wrong``: something came back different from what was acknowledged (wrong data);
- ``bug``: an exception that is not a LogspoolError (a defect of ours, reported as such).

The target is no ``loss``, ``wrong`` or ``bug``, with one stated exception: a checkpointed file's
data file is plain bytes by design (any program can map it; docs/FORMAT.md §13), so damage to it
after a clean close is not detectable, and those trials are counted apart (``unprotected``).
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import LogspoolError

STORES = ("log", "jobs", "kv", "ckpt")
MODES = ("clean", "kill")
KINDS = ("bitflip", "byte", "zero-512", "truncate", "garbage", "copy-block")
OUTCOMES = ("error", "exact", "loss", "wrong", "bug", "unprotected")
_RECORDS = 300
_KEYS = 200
_CKPT_SIZE = 16384

Truth = dict[str, bytes]


@dataclass
class SweepReport:
    """Counts of outcomes, by store, mode, file kind and damage kind; and the first few trials of
    each bad outcome, to reproduce (``seed`` and trial number)."""

    seed: int
    counts: Counter[tuple[str, str, str, str, str]] = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)

    def add(self, store: str, mode: str, file_kind: str, kind: str, outcome: str, detail: str) -> None:
        self.counts[(store, mode, file_kind, kind, outcome)] += 1
        if outcome in ("loss", "wrong", "bug") and len(self.examples) < 20:
            self.examples.append(f"{store}/{mode}: {kind} in {file_kind}: {outcome}: {detail}")

    def totals(self, store: str | None = None) -> Counter[str]:
        out: Counter[str] = Counter()
        for (s, _m, _f, _k, outcome), n in self.counts.items():
            if store is None or s == store:
                out[outcome] += n
        return out

    @property
    def ok(self) -> bool:
        """No silent loss, no wrong data, no defect."""
        totals = self.totals()
        return totals["loss"] == 0 and totals["wrong"] == 0 and totals["bug"] == 0

    def to_json(self) -> dict[str, object]:
        return {
            "seed": self.seed,
            "ok": self.ok,
            "totals": {s: dict(self.totals(s)) for s in STORES if self.totals(s)},
            "counts": [
                {"store": s, "mode": m, "file": f, "damage": k, "outcome": o, "trials": n}
                for (s, m, f, k, o), n in sorted(self.counts.items())
            ],
            "examples": self.examples,
        }

    def table(self) -> str:
        """Markdown: one row per store and mode, a column per outcome."""
        rows = [
            "| store | mode | trials | " + " | ".join(OUTCOMES) + " |",
            "|---" * (3 + len(OUTCOMES)) + "|",
        ]
        for store in STORES:
            for mode in MODES:
                c: Counter[str] = Counter()
                for (s, m, _f, _k, outcome), n in self.counts.items():
                    if s == store and m == mode:
                        c[outcome] += n
                if c:
                    cells = " | ".join(str(c[o]) for o in OUTCOMES)
                    rows.append(f"| {store} | {mode} | {sum(c.values())} | {cells} |")
        return "\n".join(rows)


# --- the work, and reading it back --------------------------------------------------------------
_WORK = textwrap.dedent(
    """
    import sys, logspool
    from logspool import jobs, kv
    store, path, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    out = sys.stdout
    if store == "log":
        with logspool.open(path, segment_size_max=4096, index_interval=512) as log:
            for i in range(count):
                lsn = log.append(b"record-%05d-" % i + bytes([97 + i % 26]) * (i * 37 % 120))
                out.write(f"{lsn}\\n"); out.flush()
    elif store == "jobs":
        with jobs.open(path, segment_size_max=8192, snapshot_ops_min=64) as j:
            for i in range(count):
                j.put(f"job-{i:04d}", b"payload-%d" % i)
                out.write(f"put job-{i:04d}\\n"); out.flush()
                if i % 3 == 2:
                    job = j.take()
                    out.write(f"acking {job.key}\\n"); out.flush()
                    j.ack(job)
                    out.write(f"ack {job.key}\\n"); out.flush()
    elif store == "kv":
        with kv.open(path, segment_size_max=8192, snapshot_ops_min=64) as s:
            for i in range(count):
                s.set(f"key-{i % 150:04d}", b"value-%d-" % i + b"v" * (i % 50))
                out.write(f"set key-{i % 150:04d} {i}\\n"); out.flush()
    else:
        f = logspool.CheckpointFile(path, size=16384, block_size=512)  # (_CKPT_SIZE)
        for i in range(count):
            f.write(0, bytes([65 + i % 26]) * 16384)
            f.checkpoint()
            out.write(f"checkpoint {i}\\n"); out.flush()
        f.write(0, b"#" * 16384)  # an unfinished transaction: never checkpointed
        out.write("unfinished\\n"); out.flush()
        import time; time.sleep(3600)
    """
)


def _truth_from(store: str, lines: list[str]) -> Truth:
    """What the work's output says was acknowledged (the last line may be cut by the kill)."""
    truth: Truth = {}
    for line in lines:
        parts = line.split()
        if store == "log" and len(parts) == 1 and parts[0].isdigit():
            i = int(parts[0])
            truth[str(i)] = b"record-%05d-" % i + bytes([97 + i % 26]) * (i * 37 % 120)
        elif store == "jobs" and len(parts) == 2 and parts[0] == "put":
            truth.setdefault(parts[1], b"payload-%d" % int(parts[1][4:]))
        elif store == "jobs" and len(parts) == 2 and parts[0] in ("acking", "ack"):
            truth[parts[1]] = b"<acked>" if parts[0] == "ack" else b"<acking>"
        elif store == "kv" and len(parts) == 3 and parts[0] == "set":
            i = int(parts[2])
            truth[parts[1]] = b"value-%d-" % i + b"v" * (i % 50)
        elif store == "ckpt" and len(parts) == 2 and parts[0] == "checkpoint":
            truth["data"] = bytes([65 + int(parts[1]) % 26]) * _CKPT_SIZE
    return truth


def _store_path(root: str, store: str) -> str:
    return os.path.join(root, "data" if store == "ckpt" else store)


def make_template(root: str, store: str, mode: str, rng: random.Random) -> Truth:
    """Do the store's work under ``root`` (a child process: clean exit, or SIGKILL in ``kill``
    mode after it reported some work acknowledged) and return what was acknowledged."""
    path = _store_path(root, store)
    count = {"log": _RECORDS, "jobs": 90, "kv": _KEYS, "ckpt": 5}[store]
    if mode == "clean" and store != "ckpt":
        done = subprocess.run(
            [sys.executable, "-c", _WORK, store, path, str(count)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"the {store} work failed: {done.stderr[-2000:]}")
        return _truth_from(store, done.stdout.splitlines())
    child = subprocess.Popen(
        [sys.executable, "-c", _WORK, store, path, str(count * (1 if store == "ckpt" else 100))],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    lines: list[str] = []
    want = count + 2 if store == "ckpt" else rng.randint(count // 2, count)  # (ckpt: until "unfinished")
    for _ in range(10 * count + 10):  # bounded: the child writes a line per unit of work
        line = child.stdout.readline()
        if not line:
            break
        lines.append(line)
        if (store == "ckpt" and line.startswith("unfinished")) or len(lines) >= want:
            break
    if store == "ckpt" and mode == "clean":
        child.send_signal(signal.SIGKILL)  # (after a clean checkpoint: roll the unfinished one back)
        child.communicate()
        from ..ckpt import CheckpointFile

        CheckpointFile(path).close()
    else:
        child.send_signal(signal.SIGKILL)
        child.communicate()
    return _truth_from(store, lines)


def read_back(store: str, path: str) -> Truth:
    """Open the store as its user would and read everything it holds (LogspoolError on damage)."""
    import logspool
    from logspool import jobs, kv

    got: Truth = {}
    if store == "log":
        with logspool.open(path) as log:
            for rec in log.read():
                got[str(rec.lsn)] = rec.payload
    elif store == "jobs":
        with jobs.open(path) as j:
            for job in j.jobs():
                got[job.key] = job.payload
    elif store == "kv":
        with kv.open(path) as s:
            cursor = None
            for _ in range(1000):  # bounded: pages of the whole store
                page = s.range("", None, limit=1000, cursor=cursor)
                for v in page:
                    got[v.key] = v.value if isinstance(v.value, bytes) else repr(v.value).encode()
                cursor = page.cursor
                if cursor is None:
                    break
    else:
        with logspool.CheckpointFile(path) as f:
            got["data"] = f.read(0, f.size)
    return got


def classify(store: str, truth: Truth, got: Truth) -> tuple[str, str]:
    """(outcome, detail) of a read that raised nothing."""
    if store == "jobs":
        for key, payload in truth.items():
            if payload == b"<acked>":
                if key in got:
                    return "wrong", f"{key} was acked, and is pending again"
            elif payload == b"<acking>":
                continue  # acked or not: the kill came between the ack and its report
            elif key not in got:
                return "loss", f"{key} was put and not acked, and is gone"
            elif got[key] != payload:
                return "wrong", f"{key}: payload {got[key][:20]!r}"
        return "exact", ""
    for key, value in truth.items():
        if key not in got:
            return "loss", f"{key} is gone"
        if got[key] != value:
            return "wrong", f"{key}: {got[key][:20]!r}, expected {value[:20]!r}"
    return "exact", ""


# --- damage ---------------------------------------------------------------------------------------
def _files(root: str) -> list[str]:
    out = []
    for directory, _dirs, names in os.walk(root):
        out += [os.path.join(directory, n) for n in names if not n.startswith(".")]
    return sorted(out)


def file_kind(store: str, path: str) -> str:
    """A name for what the file is, for the tables: ``seg``, ``idx``, ``meta``, ``snapshot``..."""
    name = os.path.basename(path)
    if store == "ckpt":
        return "undo log" if name.endswith(".undo") else "data file"
    for suffix in (".seg", ".idx"):
        if name.endswith(suffix):
            return suffix[1:]
    if name.startswith("cp."):
        return "checkpoint"
    if name.startswith("snapshot."):
        return "snapshot"
    return name


def damage(path: str, kind: str, rng: random.Random) -> None:
    with open(path, "rb") as f:
        data = bytearray(f.read())
    size = len(data)
    if kind == "garbage":
        data += rng.randbytes(rng.randint(1, 700))
    elif size == 0:
        data += rng.randbytes(rng.randint(1, 64))
    elif kind == "bitflip":
        data[rng.randrange(size)] ^= 1 << rng.randrange(8)
    elif kind == "byte":
        at = rng.randrange(size)
        data[at] = (data[at] + rng.randrange(1, 256)) % 256
    elif kind == "zero-512":
        at = rng.randrange(0, size, 512) if size > 512 else 0
        data[at : at + 512] = bytes(len(data[at : at + 512]))
    elif kind == "truncate":
        del data[rng.randrange(size) :]
    else:  # copy-block: a misdirected write
        src, dst = rng.randrange(size), rng.randrange(size)
        block = data[src : src + 512]
        data[dst : dst + len(block)] = block
    with open(path, "wb") as f:
        f.write(bytes(data))


def sweep(
    trials: int,
    *,
    seed: int = 0,
    stores: tuple[str, ...] = STORES,
    modes: tuple[str, ...] = MODES,
    workdir: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> SweepReport:
    """``trials`` damaged copies of each store in each mode (see the module doc)."""
    rng = random.Random(seed)
    report = SweepReport(seed)
    logger = logging.getLogger("logspool")
    level = logger.level
    logger.setLevel(logging.ERROR)  # (each cut tail and skipped snapshot is logged: noise here)
    try:
        _sweep(report, rng, trials, stores, modes, workdir, progress)
    finally:
        logger.setLevel(level)
    return report


def _sweep(
    report: SweepReport,
    rng: random.Random,
    trials: int,
    stores: tuple[str, ...],
    modes: tuple[str, ...],
    workdir: str | None,
    progress: Callable[[str], None] | None,
) -> None:
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        for store in stores:
            for mode in modes:
                template = os.path.join(tmp, f"{store}-{mode}")
                os.makedirs(template)
                truth = make_template(template, store, mode, rng)
                files = [p for p in _files(template) if not os.path.basename(p).startswith("lock")]
                for trial in range(trials):
                    work = os.path.join(tmp, "trial")
                    shutil.rmtree(work, ignore_errors=True)
                    shutil.copytree(template, work)
                    target = rng.choice(files)
                    kind = rng.choice(KINDS)
                    copy = os.path.join(work, os.path.relpath(target, template))
                    damage(copy, kind, rng)
                    fkind = file_kind(store, target)
                    try:
                        outcome, detail = classify(store, truth, read_back(store, _store_path(work, store)))
                    except LogspoolError as err:
                        outcome, detail = "error", str(err)
                    except Exception as err:
                        outcome, detail = "bug", f"{type(err).__name__}: {err}"
                    if store == "ckpt" and fkind == "data file" and outcome in ("wrong", "loss"):
                        outcome = "unprotected"
                    report.add(store, mode, fkind, kind, outcome, f"trial {trial}: {detail}"[:300])
                if progress is not None:
                    done: Counter[str] = Counter()
                    for (s, m, _f, _k, outcome), n in report.counts.items():
                        if (s, m) == (store, mode):
                            done[outcome] += n
                    progress(f"{store}/{mode}: {dict(done)}")


def main_json(report: SweepReport) -> str:
    return json.dumps(report.to_json(), indent=2)
