"""The README's main job, small: producers, a cutover, the streaming aggregation, the extract."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from logspool.spark import demo


def test_the_pipeline_demo_runs_and_its_totals_agree(spark: Any, tmp_path: Path, capsys: Any) -> None:
    assert demo.run(str(tmp_path / "demo"), master="local[2]", producers=2, events=300, spark=spark) == 0
    out = capsys.readouterr().out
    assert "agree" in out and "DISAGREE" not in out
    assert "daily extract of 2026-11-20: 600 events from lsns 0..599" in out
    assert (tmp_path / "demo" / "aggregates.svg").read_text().startswith("<svg")
    assert any((tmp_path / "demo" / "aggregates").iterdir())
