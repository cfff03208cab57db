"""The demos never delete what they did not make.

``logspool demo --dir DIR`` and the pipeline demo replace their output directory on each run;
they must refuse a non-empty directory that no demo made (``--dir ~`` must not delete a home
directory), accept a new, an empty or a previous demo's directory, and replace anything only
with ``--force``. Real CLI processes on real directories.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from logspool.demo import DEMO_MARKER, DemoDirError, prepare_output_dir
from tests.conftest import run_cli


def test_the_log_demo_refuses_a_directory_it_did_not_make(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "thesis.tex").write_text("years of work")
    res = run_cli("demo", "--dir", str(home), "--writers", "1", "--records", "10")
    assert res.returncode != 0 and b"no demo made" in res.stderr and b"--force" in res.stderr
    assert (home / "thesis.tex").read_text() == "years of work"
    res = run_cli("demo", "--dir", str(tmp_path / "out" / "log"), "--writers", "1", "--records", "50")
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "out" / DEMO_MARKER).exists() and (tmp_path / "out" / "log" / DEMO_MARKER).exists()
    res = run_cli("demo", "--dir", str(tmp_path / "out" / "log"), "--writers", "1", "--records", "50")
    assert res.returncode == 0, res.stderr  # a demo's own directory is replaced


def test_prepare_output_dir_rules(tmp_path: Path) -> None:
    prepare_output_dir(str(tmp_path / "new" / "deeper"))
    assert (tmp_path / "new" / DEMO_MARKER).exists()
    (tmp_path / "new" / "deeper" / "old-output").write_text("x")
    prepare_output_dir(str(tmp_path / "new" / "deeper"))  # marked: replaced
    assert not (tmp_path / "new" / "deeper" / "old-output").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    prepare_output_dir(str(empty))
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "keep").write_text("x")
    with pytest.raises(DemoDirError, match="'keep'"):
        prepare_output_dir(str(mine))
    assert (mine / "keep").exists()
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(DemoDirError, match="not a directory"):
        prepare_output_dir(str(tmp_path / "a-file"))
    prepare_output_dir(str(mine), force=True)
    assert not (mine / "keep").exists()
