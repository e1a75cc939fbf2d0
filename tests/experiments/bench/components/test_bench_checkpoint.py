"""Smoke test: the checkpoint benchmark's --quick mode runs and prints parseable JSON lines."""

from __future__ import annotations

import json

import pytest

from experiments.bench.components import checkpoint


@pytest.mark.timeout(120)
def test_checkpoint_bench_quick_prints_one_line_per_case(tmp_path, capsys):
    checkpoint.main(["--quick", "--dir", str(tmp_path)])  # in this process: a Python start is no part of it
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert [line["case"] for line in lines] == ["atari-100k", "cartpole-100k"]
    for line in lines:
        assert line["bench"] == "checkpoint" and line["capacity"] == 2000
        assert line["save_s"] >= 0 and line["load_s"] >= 0 and line["restore_s"] >= 0
        assert line["identical"] is True
    # Shared frames: 7 distinct 84x84 frames per slot are what the file holds.
    assert lines[0]["bytes"] >= 2000 * 7 * 84 * 84
    assert lines[1]["bytes"] < lines[0]["bytes"] // 100
    assert list(tmp_path.iterdir()) == []  # its directory is removed afterwards
