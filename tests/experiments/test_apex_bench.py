"""Smoke test of the Ape-X CartPole benchmark's --quick mode (not a measurement)."""

import json
import subprocess
import sys

import pytest


@pytest.mark.timeout(120)
def test_quick_mode_prints_json_lines():
    out = subprocess.run(
        [sys.executable, "-m", "experiments.bench.apex_cartpole", "--quick", "--impls", "ours,sb3",
         "--ours-flags=--hidden 32,32"],  # flags reach ours' config (a typo would fail the run)
        capture_output=True, text=True, timeout=115)
    assert out.returncode == 0, out.stderr
    records = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    assert {r["impl"] for r in records} == {"ours", "sb3"}
    for record in records:
        assert record["bench"] == "apex_cartpole"
        assert "skipped" in record or record["case"] in ("run", "median")
    ours = [r for r in records if r["impl"] == "ours" and r.get("case") == "run"]
    assert ours and "error" not in ours[0], ours
