import json

import pytest

from experiments.bench.learning import a3c_cartpole


@pytest.mark.timeout(120)
def test_quick_bench_prints_json_lines(capsys):
    a3c_cartpole.main(["--quick"])  # in this process: a Python start is no part of what it checks
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert lines and all(line["bench"] == "a3c_cartpole" for line in lines)
    impls = {line["impl"] for line in lines}
    assert "rlpar" in impls and "sb3" in impls  # sb3 may be a "skipped" line
    rlpar = [line for line in lines if line["impl"] == "rlpar" and line.get("case") == "seed0"]
    # --quick ends each run at 1,000 env steps: ours trained (its budget counted the
    # imports twice once, and the run ended before its first step).
    assert rlpar and 1_000 <= rlpar[0]["env_steps"] < 2_000 and rlpar[0]["updates"] > 0, rlpar
