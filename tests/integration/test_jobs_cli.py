"""``logspool jobs`` as a shell user runs it: real processes, real journal directories."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_cli


def cli(*args: str, stdin: bytes = b"") -> tuple[int, str, str]:
    r = run_cli("jobs", *args, stdin=stdin)
    return r.returncode, r.stdout.decode(), r.stderr.decode()


def test_put_take_ack_nack_list_stats_dead_from_the_shell(tmp_path: Path) -> None:
    d = str(tmp_path / "j")
    assert cli("put", d, "https://a.example/x", "hello", "--priority", "3")[:2] == (0, "0\n")
    # stdin's lines are one put_many, the PUT_MANY op at lsn 1: ids (1 << 16) | i
    assert cli("put", d, stdin=b"k1\tv1\nk2\t\xff\n")[:2] == (0, "65536\n65537\n")
    code, out, _ = cli("list", d, "--json")
    listed = json.loads(out)
    assert [j["key"] for j in listed] == ["https://a.example/x", "k1", "k2"]
    assert listed[2]["payload_base64"] == "/w=="
    code, out, _ = cli("take", d, "--json", "--lease", "60")
    job = json.loads(out)
    assert (code, job["key"], job["payload"], job["state"]) == (0, "https://a.example/x", "hello", "leased")
    assert cli("ack", d, str(job["id"]), str(job["token"]))[0] == 0
    code, _, err = cli("ack", d, str(job["id"]), str(job["token"]))
    assert code == 1 and "no longer valid" in err
    code, out, _ = cli("take", d)
    job_id, token = out.split("\t")[:2]
    assert cli("nack", d, job_id, token, "--error", "broken", "--delay", "100")[0] == 0
    code, out, _ = cli("stats", d, "--json")
    stats = json.loads(out)
    assert (stats["pending"], stats["delayed"], stats["counters"]["acked"]) == (2, 1, 1)
    assert cli("take", d)[0] == 0
    code, out, err = cli("take", d, "--json")
    assert code == 3 and json.loads(out)["idle"] is True
    assert cli("dead", d, "--json")[1].strip() == "[]"
    assert cli("cancel", d, "k1")[1].strip() == "cancelled"


def test_take_count_leases_a_batch(tmp_path: Path) -> None:
    d = str(tmp_path / "j")
    assert cli("put", d, stdin=b"a\t1\nb\t2\nc\t3\n")[0] == 0
    code, out, _ = cli("take", d, "--count", "2", "--json", "--lease", "60")
    batch = json.loads(out)
    assert code == 0 and [(j["key"], j["state"]) for j in batch] == [("a", "leased"), ("b", "leased")]
    code, out, _ = cli("take", d, "--count", "5")
    assert code == 0 and [line.split("\t")[5] for line in out.splitlines()] == ["c"]
    assert cli("take", d, "--count", "5", "--json")[:2] == (3, "[]\n")
    code, _, err = cli("take", d, "--count", "0")
    assert code == 2 and "not a count from 1 to" in err
    assert cli("release", d, str(batch[1]["id"]), str(batch[1]["token"]))[0] == 0  # b, not started
    code, out, _ = cli("list", d, "b", "--json")
    assert [(j["state"], j["deliveries"]) for j in json.loads(out)] == [("pending", 0)]


def test_bad_arguments_are_refused_clearly(tmp_path: Path) -> None:
    d = str(tmp_path / "j")
    code, _, err = cli("put", d, "k", "--priority", "300")
    assert code == 1 and "priority must be an integer from 0 to 255" in err
    code, _, err = cli("take", str(tmp_path / "missing"))
    assert code == 1 and "no job journal here" in err
    code, _, err = cli("put", d, "k", "--delay", "soon")
    assert code == 2 and "not a number of seconds" in err


def test_text_output_has_one_style_a_header_on_listings(tmp_path: Path) -> None:
    """A listing starts with a header naming its tab-separated columns; a taken job is one line
    of the same columns; stats are `name value` lines as `logspool info` prints them."""
    d = str(tmp_path / "j")
    assert cli("put", d, "k1", "has\ta tab", "--priority", "7")[0] == 0
    out = cli("list", d)[1]
    header, row = out.splitlines()
    assert header.split("\t") == ["id", "token", "state", "priority", "lease_until", "key", "payload"]
    assert row.split("\t", 6) == ["0", "0", "pending", "7", "-", "k1", "has\ta tab"]
    out = cli("take", d, "--lease", "60")[1]
    fields = out.rstrip("\n").split("\t", 6)
    assert fields[2:4] == ["leased", "7"] and fields[4].endswith("Z") and fields[5] == "k1"
    assert cli("dead", d)[1].splitlines() == [header]
    out = cli("stats", d)[1]
    lines = dict(line.split(None, 1) for line in out.splitlines())
    assert lines["leased"] == "1" and lines["counters.taken"] == "1"
