"""Smoke test of the gradient-averaging benchmark: --quick runs every mode in a world
of two ranks and prints well-formed JSON lines."""

import json
import subprocess
import sys

import pytest


@pytest.mark.timeout(120)
def test_quick_sync_allreduce_bench_measures_every_mode():
    out = subprocess.run([sys.executable, "-m", "experiments.bench.sync_allreduce", "--quick"],
                         capture_output=True, text=True, timeout=110)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert [r["mode"] for r in lines[:-1]] == ["alone", "flat", "per_tensor", "ddp"]
    assert all(r["median_ms"] > 0 for r in lines[:-1]) and "loadavg_after" in lines[-1]
