"""Each of ours learns a few hundred Pong steps from its CLI (``main(argv)``, in this
process: --serial), with flags that bring its first update within them (the frames
defaults otherwise: PQN's first rollout alone is 4,096 steps); PPO's run stops half
way and resumes from its checkpoint. Ape-X and PPO learn on the small CNN (``--cnn
small``), which a resume may not change. IMPALA: the bench's own tests
(test_bench_atari.py) run it on Pong."""

import importlib
import json
import os

import pytest

pytest.importorskip("ale_py")

from experiments.bench.atari.budget import SMOKE_FLAGS  # noqa: E402


def job(module, *flags, log_dir):
    main = importlib.import_module(f"experiments.{module}").main
    # No evaluation, and one eval env (not --eval-episodes of them, each a ROM load of
    # ~0.3 s, built at the start either way), as the bench's own runs of ours.
    status = main(["--env-id", "ALE/Pong-v5", "--serial", "--log-dir", str(log_dir), "--status-every", "0",
                   "--eval-every", str(2**62), "--eval-episodes", "1", *flags])
    assert status == 0
    (run,) = [os.path.join(log_dir, d) for d in os.listdir(log_dir)]
    with open(os.path.join(run, "summary.json")) as f:
        return run, json.load(f)


@pytest.mark.timeout(250)
@pytest.mark.parametrize("impl", ["rlpar-apex", "rlpar-ppo", "rlpar-pqn"])  # IMPALA: the bench's own tests
def test_each_job_learns_a_few_hundred_pong_steps_serially(tmp_path, capsys, impl):
    flags = SMOKE_FLAGS[impl].replace("--num-actors 1 ", "").split()
    if impl != "rlpar-pqn":
        flags += ["--cnn", "small"]
    name = impl.removeprefix("rlpar-")
    # PPO (the cheapest) learns the first half, then an Atari run resumes from its checkpoint.
    first_steps = 150 if impl == "rlpar-ppo" else 300
    run, summary = job(name, *flags, "--max-env-steps", str(first_steps), log_dir=tmp_path)
    assert summary["env_steps"] >= first_steps and summary["updates"] >= 1
    assert summary["checkpoints"] >= 1
    with open(os.path.join(run, "config.json")) as f:
        assert json.load(f)["learn"]["cnn"] == ("nature" if impl == "rlpar-pqn" else "small")
    if impl == "rlpar-ppo":
        capsys.readouterr()
        main = importlib.import_module("experiments.ppo").main
        assert main(["--resume", run, "--cnn", "nature", "--log-dir", str(tmp_path)]) == 2
        assert "--cnn cannot change when resuming" in capsys.readouterr().err
        _, more = job(name, "--resume", run, "--max-env-steps", "300", log_dir=tmp_path)
        assert more["resumed_from_step"] == summary["env_steps"] and more["env_steps"] >= 300
        assert more["updates"] > summary["updates"]
    assert "Pong" in capsys.readouterr().out  # the summary box
