import json
import subprocess
import sys

import pytest


@pytest.mark.timeout(120)
def test_quick_bench_prints_json_lines():
    out = subprocess.run([sys.executable, "-m", "experiments.bench.learning.a3c_cartpole", "--quick"],
                         capture_output=True, text=True, timeout=110)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert lines and all(line["bench"] == "a3c_cartpole" for line in lines)
    impls = {line["impl"] for line in lines}
    assert "rlpar" in impls and "sb3" in impls  # sb3 may be a "skipped" line
    rlpar = [line for line in lines if line["impl"] == "rlpar" and line.get("case") == "seed0"]
    assert rlpar and rlpar[0]["env_steps"] >= 0
