"""Smoke test of the single-process IMPALA benchmark's --quick mode (not a measurement)."""

import json

from experiments.bench.learning.impala_loop import main


def test_quick_mode_prints_json_lines(capsys, one_torch_thread):
    assert main(["--quick"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(lines) == 2 and lines[-1]["case"] == "median"
    run = lines[0]
    assert run["updates"] > 0 and run["env_steps"] > 0 and run["rho_mean"] is not None
