"""Smoke test of the Ape-X CartPole benchmark's --quick mode (not a measurement)."""

import json

import pytest

from experiments.bench.learning import apex_cartpole


@pytest.mark.timeout(120)
def test_quick_mode_prints_json_lines(capsys):
    # The bench's main in this process: each run's worker is a child process either way.
    # Ours as ours-1proc: the same config and job as ours but --serial (the Ape-X job's
    # local world is its own tests' business, and its start cost this test most of a run);
    # PPO against its peer covers the peer worker and the ratio (the DQN peer's worker is
    # the same protocol, _learn_sb3).
    assert apex_cartpole.main(["--quick", "--impls", "ours-1proc,ppo,sb3-ppo",
                               "--ours-flags=--hidden 32,32"]) == 0  # flags reach ours' config (a typo would fail)
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert {r["impl"] for r in records} == {"ours-1proc", "ppo", "sb3-ppo"}
    for record in records:
        assert record["bench"] == "apex_cartpole"
        assert "skipped" in record or record["case"] in ("run", "median")
    for impl in ("ours-1proc", "ppo"):  # another of our jobs on the same protocol
        runs = [r for r in records if r["impl"] == impl and r.get("case") == "run"]
        assert runs and "error" not in runs[0] and runs[0]["env_steps"] > 0, runs
    (ppo,) = [r for r in records if r["impl"] == "ppo" and r.get("case") == "median"]
    assert "ratio_vs_best_peer" in ppo  # against sb3-ppo (None when either did not solve)
