"""Smoke test of the single-process PPO benchmark's --quick mode (not a measurement)."""

import json

import pytest

from experiments.bench.learning import ppo_single


@pytest.mark.parametrize("task", ["cartpole", "minatar"])
def test_quick_bench_prints_json_lines(task, capsys):
    assert ppo_single.main([task, "--quick"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert all(line["bench"] == "ppo_single" for line in lines)
    summary = next(line for line in lines if line.get("summary"))
    assert summary["config"]["num_envs"] == 8 and "loadavg_before" in lines[-1]
