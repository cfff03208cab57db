"""``logspool kv`` as a shell user runs it: real processes of the CLI, on a store directory and
through a real daemon (``logspool serve``, started by the test, with a token).

Each command's output (text and ``--json``), exit codes (a missing key is 1 with nothing on
stdout; usage is 2), values of every type, pages of a range larger than one page, and watches
that see changes made by other processes, ended by ``--count`` or by Ctrl-C.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from logspool import kv
from tests.server.conftest import Daemon, free_port

TOKEN = "s3cret"


def cli(*args: str, stdin: bytes = b"", token: str | None = None) -> tuple[int, str, str]:
    """``logspool kv ARGS``: (exit code, stdout, stderr)."""
    env = {k: v for k, v in os.environ.items() if k != "LOGSPOOL_TOKEN"}
    if token is not None:
        env["LOGSPOOL_TOKEN"] = token
    r = subprocess.run([sys.executable, "-m", "logspool.cli", "kv", *args], input=stdin, capture_output=True,
                       timeout=60, env=env, check=False)  # fmt: skip
    return r.returncode, r.stdout.decode(errors="surrogateescape"), r.stderr.decode()


def start_watch(*args: str, token: str | None = None) -> subprocess.Popen[bytes]:
    """``logspool kv watch ARGS``, once it says it is watching (changes from then on are seen)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if token is not None:
        env["LOGSPOOL_TOKEN"] = token
    proc = subprocess.Popen([sys.executable, "-m", "logspool.cli", "kv", "watch", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)  # fmt: skip
    assert proc.stderr is not None
    line = proc.stderr.readline().decode()
    assert "watching" in line, (line, proc.stderr.read())
    return proc


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    d = Daemon(tmp_path / "data", "--token", TOKEN, "--shared-kv").start()  # (a process beside it too)
    yield d
    d.kill()


def test_get_set_del_and_incr_on_a_store_directory(tmp_path: Path) -> None:
    d = str(tmp_path / "kv")
    assert cli("set", d, "greeting", "h\u00e9llo") == (0, "", "")
    assert cli("get", d, "greeting")[:2] == (0, "h\u00e9llo\n")
    code, out, err = cli("get", d, "missing")
    assert (code, out) == (1, "") and f"{d}: no key 'missing'" in err  # nothing on stdout
    assert cli("get", d, "missing", "--json")[:2] == (1, "")
    # types: integers and floats print as numbers, booleans as true/false, void as an empty line
    assert cli("set", d, "n", "40", "--type", "int")[0] == 0
    assert cli("incr", d, "n")[:2] == (0, "41\n") and cli("incr", d, "n", "-3")[:2] == (0, "38\n")
    assert cli("incr", d, "f", "0.5")[:2] == (0, "0.5\n") and cli("incr", d, "f", "2")[:2] == (0, "2.5\n")
    assert json.loads(cli("incr", d, "n", "--json")[1]) == {"key": "n", "type": "integer", "value": 39}
    code, _, err = cli("incr", d, "greeting")
    assert code == 1 and "string" in err and d in err
    code, _, err = cli("incr", d, "n", "1.5")  # an integer stays an integer
    assert code == 1 and "float" in err
    assert cli("set", d, "t", "true", "--type", "bool")[0] == 0 and cli("get", d, "t")[1] == "true\n"
    assert cli("set", d, "v", "--type", "null")[0] == 0 and cli("get", d, "v")[:2] == (0, "\n")
    # bytes: escaped as text, base64 in JSON, the bytes themselves with --raw; from stdin whole
    raw = b"\x00\xffbin\\ary\n"
    assert cli("set", d, "b", "--type", "bytes", stdin=raw)[0] == 0
    assert cli("get", d, "b")[1] == "\\x00\\xffbin\\\\ary\\n\n"
    got = json.loads(cli("get", d, "b", "--json")[1])
    assert (got["type"], base64.b64decode(got["value_base64"]), got["size"]) == ("bytes", raw, len(raw))
    cmd = [sys.executable, "-m", "logspool.cli", "kv", "get", d, "b", "--raw"]
    r = subprocess.run(cmd, capture_output=True, check=False)
    assert (r.returncode, r.stdout) == (0, raw)
    assert (
        cli("set", d, "text", stdin=b"two\nlines\n")[0] == 0 and cli("get", d, "text")[1] == "two\nlines\n\n"
    )
    code, _, err = cli("set", d, "bad", stdin=b"\xff")
    assert code == 1 and "--type bytes" in err
    # --nx (--if-absent): exit 1 and the value unchanged; --ttl: gone once it passes
    code, out, err = cli("set", d, "greeting", "other", "--nx")
    assert (code, out) == (1, "") and "holds a value" in err
    assert cli("get", d, "greeting")[1] == "h\u00e9llo\n"
    assert cli("set", d, "new", "x", "--if-absent", "--json")[:2] == (0, '{"key": "new", "set": true}\n')
    assert cli("set", d, "brief", "x", "--ttl", "0.3")[0] == 0
    time.sleep(0.5)
    assert cli("get", d, "brief")[0] == 1
    got = json.loads(cli("get", d, "greeting", "--json")[1])
    assert (got["value"], got["type"], got["expire_at"], got["version"]) == ("h\u00e9llo", "string", None, 0)
    # del: how many keys held a value; a missing one is not an error
    assert cli("del", d, "greeting", "new", "nothing")[:2] == (0, "2\n")
    assert json.loads(cli("del", d, "greeting", "--json")[1]) == {"deleted": 0}
    with kv.open(d) as s:  # what the shell did is what the library sees
        assert s.get("n") == 39 and s.get("b") == raw and "greeting" not in s and s.get("v", 1) is None


def test_usage_and_errors_name_what_is_wrong(tmp_path: Path) -> None:
    d = str(tmp_path / "kv")
    code, _, err = cli("get", d)
    assert code == 2 and "expected KEY" in err
    code, _, err = cli("get", str(tmp_path / "none"), "k")
    assert code == 1 and str(tmp_path / "none") in err
    assert not (tmp_path / "none").exists()  # reading never creates a store
    code, _, err = cli("set", d, "k", "x", "--type", "int")
    assert code == 2 and "not an integer" in err
    code, _, err = cli("get", "--store", "s", "k")
    assert code == 2 and "--server" in err
    port = free_port()  # nobody listens there
    code, _, err = cli("get", "--server", f"127.0.0.1:{port}", "s", "k")
    assert code == 1 and f"cannot reach the daemon at 127.0.0.1:{port}" in err
    code, _, err = cli("set", d, "", "x")
    assert code == 1 and "key must not be empty" in err


def test_range_and_match_print_every_page_in_key_order(tmp_path: Path) -> None:
    d = str(tmp_path / "kv")
    with kv.open(d) as s:
        for i in range(2500):  # more than two pages of 1,000
            s[f"user:{i:04d}"] = i
        s.update({"a": "line\nbreak\ttab", "\u00e9": b"\x01", "\U0001f600": 1.5, "z": True})
    code, out, _ = cli("range", d)
    lines = out.splitlines()
    assert code == 0 and len(lines) == 2504
    assert lines[:2] == ["a\tline\\nbreak\\ttab", "user:0000\t0"]
    assert lines[-3:] == ["z\ttrue", "\u00e9\t\\x01", "\U0001f600\t1.5"]  # UTF-8 byte order
    assert (
        cli("range", d, "user:1000", "user:1003")[1] == "user:1000\t1000\nuser:1001\t1001\nuser:1002\t1002\n"
    )
    assert cli("range", d, "user:", "--limit", "1500", "--keys")[1].splitlines()[-1] == "user:1499"
    rows = [json.loads(line) for line in cli("range", d, "\u00e9", "--json")[1].splitlines()]
    assert rows == [{"key": "\u00e9", "type": "bytes", "value_base64": "AQ=="},
                    {"key": "\U0001f600", "type": "float", "value": 1.5}]  # fmt: skip
    assert cli("match", d, r"^user:\d\d99$")[1].splitlines() == [
        f"user:{i:02d}99\t{i * 100 + 99}" for i in range(25)
    ]
    assert cli("match", d, "user", "--limit", "3", "--keys")[1] == "user:0000\nuser:0001\nuser:0002\n"
    code, _, err = cli("match", d, "(")
    assert code == 1 and "regular expression" in err


def test_watch_prints_each_change_by_another_process_until_count(tmp_path: Path) -> None:
    d = str(tmp_path / "kv")
    with kv.open(d) as s:
        s["flag"] = False
    proc = start_watch(d, "flag", "other", "--count", "3")
    assert proc.stdout is not None
    with kv.open(d) as s:
        s["ignored"] = 1  # not watched
        s.flip("flag")
        assert proc.stdout.readline() == b"set\tflag\ttrue\n"  # (changes close together may be one)
        s["other"] = "x\ty"
        assert proc.stdout.readline() == b"set\tother\tx\\ty\n"
        del s["flag"]
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0 and out == b"del\tflag\n"


def test_ctrl_c_ends_a_watch_with_status_0(tmp_path: Path) -> None:
    d = str(tmp_path / "kv")
    cli("set", d, "k", "1")
    proc = start_watch(d, "k", "--json")
    assert proc.stdout is not None
    cli("set", d, "k", "2")
    event = json.loads(proc.stdout.readline())
    assert (event["event"], event["key"], event["value"], event["version"]) == ("set", "k", "2", 1)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=30)
    assert (proc.returncode, out) == (0, b"")


def test_every_command_through_the_daemon(daemon: Daemon) -> None:
    server = ("--server", daemon.address)
    assert cli("set", *server, "cfg", "n", "5", "--type", "int", "--token", TOKEN)[0] == 0
    assert cli("get", *server, "cfg", "n", token=TOKEN)[:2] == (0, "5\n")  # the token from LOGSPOOL_TOKEN
    assert cli("get", *server, "--store", "cfg", "n", token=TOKEN)[:2] == (0, "5\n")
    code, out, err = cli("get", *server, "cfg", "missing", token=TOKEN)
    assert (code, out) == (1, "") and f"{daemon.address}/cfg: no key 'missing'" in err
    assert cli("incr", *server, "cfg", "n", "2", token=TOKEN)[1] == "7\n"
    assert cli("set", *server, "cfg", "b", "--type", "bytes", stdin=b"\xfe", token=TOKEN)[0] == 0
    assert cli("set", *server, "cfg", "n", "9", "--nx", token=TOKEN)[0] == 1
    assert cli("range", *server, "cfg", token=TOKEN)[1] == "b\t\\xfe\nn\t7\n"
    assert cli("match", *server, "cfg", "^n$", "--json", token=TOKEN)[1] == (
        '{"key": "n", "type": "integer", "value": 7}\n'
    )
    proc = start_watch(*server, "--store", "cfg", "n", "--count", "2", token=TOKEN)
    assert proc.stdout is not None
    assert cli("incr", *server, "cfg", "n", token=TOKEN)[0] == 0
    assert proc.stdout.readline() == b"set\tn\t8\n"
    with kv.open(daemon.data / "kv" / "cfg") as s:  # a process beside the daemon
        s["n"] = "from beside"
    watched, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0 and watched == b"set\tn\tfrom beside\n"
    assert cli("del", *server, "cfg", "n", "b", token=TOKEN)[1] == "2\n"
    assert cli("range", *server, "cfg", token=TOKEN)[:2] == (0, "")
    code, _, err = cli("get", *server, "cfg", "n", token="wrong")
    assert code == 1 and "AuthError" in err and daemon.address in err
