"""The multi-agent inference benchmark's --quick mode runs and prints JSON lines."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(120)
def test_quick_mode_prints_json_for_every_mode():
    proc = subprocess.run([sys.executable, "-m", "experiments.bench.multiagent_inference", "--quick", "--torch-threads", "1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=110)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    assert lines[0]["config"] and lines[0]["torch_threads"] == 1
    results = [x for x in lines if "mode" in x]
    assert {x["mode"] for x in results} == {"loop", "threads", "jit_fork", "batched", "batched_vmap", "auto"}
    assert {x["op"] for x in results} == {"act", "update"}
    assert all(x["ms"] > 0 for x in results)
    assert all(x["gflop"] > 0 and x["gflops"] > 0 for x in results if x["op"] == "update")
    summaries = [x for x in lines if x.get("summary")]
    assert summaries and all(x["auto_mode"].startswith("actors=batched") for x in summaries)
    assert all("speedup_vs_threads" in x for x in summaries)
