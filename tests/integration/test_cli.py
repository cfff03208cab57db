"""The logspool command as a user runs it: real processes, exit codes, stdout and stderr."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time

import logspool
from logspool import _format as fmt
from tests.conftest import run_cli


def test_append_cat_info_verify_cutover(log_dir: str) -> None:
    done = run_cli("append", log_dir, "one", "two")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [b"0", b"1"]
    done = run_cli("append", log_dir, stdin=b"three\nfour\n")
    assert done.returncode == 0 and b"appended 2 records, lsns 2 to 3" in done.stdout
    done = run_cli("append", log_dir, "--raw", stdin=b"\xff\x00raw\nbytes")
    assert done.returncode == 0 and done.stdout.strip() == b"4"
    assert run_cli("cutover", log_dir).stdout.strip() == b"5"
    done = run_cli("cat", log_dir, "--from", "1")
    assert done.stdout == b"two\nthree\nfour\n\xff\x00raw\nbytes\n"
    lines = [json.loads(x) for x in run_cli("cat", log_dir, "--json").stdout.splitlines()]
    assert [x["lsn"] for x in lines] == [0, 1, 2, 3, 4]
    assert lines[0]["payload"] == "one" and lines[0]["timestamp"].endswith("Z")
    assert base64.b64decode(lines[4]["payload_base64"]) == b"\xff\x00raw\nbytes"
    info = json.loads(run_cli("info", log_dir, "--json").stdout)
    assert info["records"] == 5 and info["next_lsn"] == 5
    assert [s["base_lsn"] for s in info["segments"]] == [0, 5]
    assert b"records    5" in run_cli("info", log_dir).stdout
    done = run_cli("verify", log_dir)
    assert done.returncode == 0 and done.stdout.startswith(b"ok: 5 records")


def test_cat_since_a_time(log_dir: str) -> None:
    run_cli("append", log_dir, "old")
    time.sleep(0.05)
    middle = time.time()
    time.sleep(0.05)
    run_cli("append", log_dir, "new")
    assert run_cli("cat", log_dir, "--since", str(middle)).stdout == b"new\n"
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(middle - 3600)) + "Z"
    assert run_cli("cat", log_dir, "--since", iso).stdout == b"old\nnew\n"
    done = run_cli("cat", log_dir, "--since", "yesterday")
    assert done.returncode == 2 and b"not a time" in done.stderr


def test_cat_follow_prints_new_records(log_dir: str) -> None:
    run_cli("append", log_dir, "first")
    proc = subprocess.Popen(
        [sys.executable, "-m", "logspool.cli", "cat", log_dir, "--follow"], stdout=subprocess.PIPE
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"first\n"
        with logspool.open(log_dir) as log:
            log.append(b"second")
        assert proc.stdout.readline() == b"second\n"
    finally:
        proc.terminate()
        proc.wait(10)


def test_errors_exit_1_with_a_message_and_usage_exits_2(tmp_path: str, log_dir: str) -> None:
    done = run_cli("cat", os.path.join(str(tmp_path), "missing"))
    assert done.returncode == 1 and b"does not exist" in done.stderr
    done = run_cli("bogus")
    assert done.returncode == 2
    done = run_cli("cat", log_dir, "--from", "x")
    assert done.returncode == 2
    run_cli("append", log_dir, "a")
    done = run_cli("cat", log_dir, "--from", "-3")
    assert done.returncode == 2 and b"--from: must be 0 or more, not -3" in done.stderr


def test_verify_exits_1_and_names_the_damage(log_dir: str) -> None:
    with logspool.open(log_dir, segment_size_max=4096) as log:
        log.append_many([b"x" * 100] * 100)
    first = os.path.join(log_dir, fmt.segment_name(0))
    with open(first, "r+b") as f:
        f.seek(500)
        f.write(b"\x00\x01\x02")
    done = run_cli("verify", log_dir)
    assert done.returncode == 1
    assert first.encode() in done.stderr and b"DAMAGED" in done.stdout


def test_create_with_compression_then_meta_shows_it(log_dir: str) -> None:
    done = run_cli("create", log_dir, "--compression", "zstd", "--level", "7", "--segment-size", "1M")
    assert done.returncode == 0, done.stderr
    meta = json.loads(run_cli("meta", log_dir, "--json").stdout)
    assert (meta["compression"], meta["compression_level"], meta["segment_size_max"]) == ("zstd", 7, 1 << 20)
    assert meta["format_version"] == 2
    assert run_cli("append", log_dir, "x" * 500).returncode == 0
    assert run_cli("cat", log_dir).stdout == b"x" * 500 + b"\n"
    again = run_cli("create", log_dir, "--compression", "zstd")
    assert again.returncode == 1 and b"is a log already" in again.stderr
    bad = run_cli("create", log_dir + "2", "--level", "3")
    assert bad.returncode == 1 and b"compression_level was given without compression" in bad.stderr
    assert not os.path.exists(log_dir + "2")
