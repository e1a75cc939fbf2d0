"""Each of ours learns a few hundred Pong steps from the CLI in one process (--serial),
with flags that bring its first update within them (the frames defaults otherwise:
PQN's first rollout alone is 4,096 steps); and an Atari run resumes from its
checkpoint."""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("ale_py")

from experiments.bench.atari.budget import SMOKE_FLAGS  # noqa: E402


def job(module, *flags, log_dir):
    out = subprocess.run([sys.executable, "-m", f"experiments.{module}", "--env-id", "ALE/Pong-v5", "--serial",
                          "--log-dir", str(log_dir), "--status-every", "0", "--eval-every", str(2**62), *flags],
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    (run,) = [os.path.join(log_dir, d) for d in os.listdir(log_dir)]
    with open(os.path.join(run, "summary.json")) as f:
        return run, json.load(f)


@pytest.mark.timeout(250)
@pytest.mark.parametrize("impl", ["rlpar-apex", "rlpar-ppo", "rlpar-pqn"])  # IMPALA: the bench's own tests
def test_each_job_learns_a_few_hundred_pong_steps_serially(tmp_path, impl):
    flags = SMOKE_FLAGS[impl].replace("--num-actors 1 ", "").split()
    _, summary = job(impl.removeprefix("rlpar-"), *flags, "--max-env-steps", "300", log_dir=tmp_path)
    assert summary["env_steps"] >= 300 and summary["updates"] >= 1


@pytest.mark.timeout(250)
def test_an_atari_run_resumes_from_its_checkpoint(tmp_path):
    flags = SMOKE_FLAGS["rlpar-impala"].replace("--num-actors 1 ", "").split()
    run, first = job("impala", *flags, "--max-env-steps", "200", log_dir=tmp_path)
    assert first["checkpoints"] >= 1
    _, more = job("impala", "--resume", run, "--max-env-steps", "400", log_dir=tmp_path)
    assert more["resumed_from_step"] == first["env_steps"] and more["env_steps"] >= 400
