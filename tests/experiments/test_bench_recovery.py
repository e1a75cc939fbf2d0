import json
import subprocess
import sys

import pytest


@pytest.mark.timeout(300)
def test_quick_recovery_bench_prints_one_line_per_case():
    out = subprocess.run([sys.executable, "-m", "experiments.bench.recovery", "--quick", "--cases", "actor"],
                         capture_output=True, text=True, timeout=280)
    assert out.returncode == 0, out.stderr[-2000:]
    (line,) = [json.loads(x) for x in out.stdout.splitlines() if x.startswith("{")]
    # The actor rejoined alone: the world was not restarted.
    assert line["case"] == "actor" and line["restarts"] == 0 and line["actor_restarts"] == 1
    assert line["env_steps"] >= 6000 and line["env_steps_lost"] == 0
    assert line["learner_recovery_s"] is not None and line["checkpoint_bytes"] > 0
