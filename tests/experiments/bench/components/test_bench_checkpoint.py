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
    # Shared frames: about one distinct 84x84 frame per transition (16 env streams
    # whose first frames are the same blank one) is what the pool and the file hold.
    assert 2000 < lines[0]["frames"] <= 2000 + 16 * 6
    assert lines[0]["frames"] * 84 * 84 <= lines[0]["bytes"] < 2 * 2000 * 84 * 84
    assert lines[1]["frames"] is None and lines[1]["bytes"] < lines[0]["bytes"] // 50
    for line in lines:
        assert line["resident_mb"] >= 0 and line["restore_peak_mb"] >= line["restore_peak_anon_mb"] > 0
    assert list(tmp_path.iterdir()) == []  # its directory is removed afterwards


@pytest.mark.timeout(120)
def test_transitions_over_more_steps_than_the_stack_still_hold_a_frame_each(tmp_path, capsys):
    # DrQ's 10-step windows: obs and next_obs share no frame, and the pool still
    # holds about one frame per transition (plain rows would hold eight).
    checkpoint.main(["--quick", "--cases", "atari-100k", "--n-step", "10", "--dir", str(tmp_path)])
    (line,) = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert line["n_step"] == 10 and line["identical"] is True
    assert 2000 < line["frames"] <= 2000 + 16 * 13
    assert line["bytes"] < 2 * 2000 * 84 * 84
    with pytest.raises(SystemExit):
        checkpoint.main(["--quick", "--n-step", "0"])
