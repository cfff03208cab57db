"""The CLI's subscriber, retention, meta and monitor commands, run as real processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from tests.conftest import append_in_batches, run_cli


def _ok(*args: str) -> str:
    res = run_cli(*args)
    assert res.returncode == 0, res.stderr.decode()
    return res.stdout.decode()


def test_subscriber_commands(log_dir: str) -> None:
    _ok("append", log_dir, "a", "b", "c", "d")
    assert "at lsn 1" in _ok("subscriber", "add", log_dir, "billing", "--from", "1")
    assert "at lsn 4" in _ok("subscriber", "add", log_dir, "../escape", "--from", "latest")
    subs = json.loads(_ok("subscriber", "list", log_dir, "--json"))
    assert [(s["name"], s["lsn"], s["records_behind"]) for s in subs] == [
        ("../escape", 4, 0),
        ("billing", 1, 3),
    ]
    assert "now at lsn 0" in _ok("subscriber", "rewind", log_dir, "billing", "--to", "earliest")
    assert "at lsn 0" in _ok("subscriber", "copy", log_dir, "billing", "audit")
    _ok("subscriber", "remove", log_dir, "billing")
    text = _ok("subscriber", "list", log_dir)
    assert "'audit'" in text and "'billing'" not in text
    info = json.loads(_ok("info", log_dir, "--json"))
    assert [s["name"] for s in info["subscribers"]] == ["../escape", "audit"]
    assert not os.path.exists(os.path.join(os.path.dirname(log_dir), "escape"))

    res = run_cli("subscriber", "remove", log_dir, "billing")
    assert res.returncode == 1 and b"no subscriber named 'billing'" in res.stderr
    res = run_cli("subscriber", "add", log_dir, "audit")
    assert res.returncode == 1 and b"exists already" in res.stderr
    res = run_cli("subscriber", "add", log_dir, "x" * 2000)
    assert res.returncode == 1 and b"at most 1024 bytes" in res.stderr
    res = run_cli("subscriber", "add", log_dir, "far", "--from", "99")
    assert res.returncode == 1 and b"lsn 99 is not in the log" in res.stderr
    res = run_cli("subscriber", "add", log_dir, "neg", "--from", "-1")
    assert res.returncode == 2


def test_retention_commands(log_dir: str) -> None:
    from logspool import open as open_log

    with open_log(log_dir, durability="os", segment_size_max=4096) as log:
        append_in_batches(log, [b"x" * 200] * 100)
        segments = len(log.info().segments)
    out = _ok("retention", log_dir, "--max-size", "8K", "--dry-run")
    assert "would remove" in out and "over the size bound" in out
    assert len(json.loads(_ok("info", log_dir, "--json"))["segments"]) == segments
    _ok("subscriber", "add", log_dir, "reader", "--from", "50")
    out = _ok("retention", log_dir, "--consumed")  # looking never deletes
    assert "would remove" in out and "--apply" in out
    assert len(json.loads(_ok("info", log_dir, "--json"))["segments"]) == segments
    out = _ok("retention", log_dir, "--consumed", "--apply")
    assert "removed" in out
    info = json.loads(_ok("info", log_dir, "--json"))
    assert info["first_lsn"] <= 50 < info["next_lsn"]
    out = _ok("retention", log_dir, "--consumed", "--max-age", "7d", "--set")
    assert "stored" in out
    assert json.loads(_ok("info", log_dir, "--json"))["retention"] == {
        "consumed": True,
        "age_max_s": 604800.0,
        "size_max": None,
        "subscriber_idle_max_s": None,
    }
    assert "retention  consumed=True, age_max_s=604800.0" in _ok("info", log_dir)
    # The bare command shows the stored policy and what it would remove, and removes nothing.
    _ok(
        "subscriber",
        "rewind",
        log_dir,
        "reader",
        "--to",
        str(json.loads(_ok("info", log_dir, "--json"))["next_lsn"]),
    )
    before = json.loads(_ok("info", log_dir, "--json"))["segments"]
    out = _ok("retention", log_dir)
    assert "policy (stored): consumed=True" in out and "would remove" in out
    assert json.loads(_ok("info", log_dir, "--json"))["segments"] == before
    _ok("retention", log_dir, "--clear")
    assert json.loads(_ok("info", log_dir, "--json"))["retention"] is None
    res = run_cli("retention", log_dir, "--max-size", "lots")
    assert res.returncode == 2 and b"not a size" in res.stderr


def test_meta_and_monitor(log_dir: str) -> None:
    _ok("append", log_dir, "one")
    meta = json.loads(_ok("meta", log_dir, "--json"))
    assert meta["format_version"] == 1 and meta["segment_size_max"] == 64 * 1024 * 1024
    _ok("subscriber", "add", log_dir, "lagging")
    out = _ok("monitor", log_dir, "--frames", "2", "--interval", "0.05")
    assert out.count("append rate") == 2 and "'lagging'" in out and "lag        1 records" in out


def test_monitor_ends_cleanly_on_ctrl_c(log_dir: str) -> None:
    _ok("append", log_dir, "one")
    proc = subprocess.Popen(
        [sys.executable, "-m", "logspool.cli", "monitor", log_dir, "--interval", "0.05"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        # A shell running the suite in the background ignores SIGINT, and the child would inherit
        # that (Python then installs no KeyboardInterrupt handler): give it Ctrl-C back.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    assert b"head lsn" in out and b"Traceback" not in err
