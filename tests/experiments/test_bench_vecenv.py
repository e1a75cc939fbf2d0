"""Smoke test: the vecenv benchmark's --quick mode runs and prints parseable JSON lines."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.timeout(120)
def test_vecenv_bench_quick_prints_json_lines():
    proc = subprocess.run(
        [sys.executable, "-m", "experiments.bench.vecenv", "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    assert lines and all(line["bench"] == "vecenv" for line in lines)
    measured = [line for line in lines if "steps_per_s" in line]
    impls = {line["impl"] for line in measured}
    assert {"rlpar_subproc", "rlpar_inprocess", "gym_sync", "gym_async"} <= impls
    assert all(line["steps_per_s"] > 0 for line in measured)
    ours = [line for line in measured if line["impl"].startswith("rlpar")]
    assert all("ratio_vs_gym_async" in line and "ratio_vs_best_peer" in line for line in ours)
