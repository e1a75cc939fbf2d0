"""``experiments.a2c`` (synchronous A2C on the synchronous data-parallel program, its
learner group's all-reduce tested with PPO's): serial and repeatable for a seed,
resumed from its checkpoint, and reached as ``experiments.a3c --sync``, whose retired
flags name their replacement."""

import pytest
from jobs import a3c_config

from experiments import a2c, a3c
from experiments.a3c import A3CJobConfig
from experiments.runtime.cli import apply_overrides, parse_config, validate


def a2c_config(log_dir="none", **over):
    config = a2c.A2CJobConfig()
    apply_overrides(config, {
        "num_workers": 1, "num_envs": 2, "n_steps": 4, "max_env_steps": 400, "eval_every": 300,
        "eval_episodes": 2, "target_return": 1e9, "max_seconds": 60.0, "log_dir": log_dir,
        "status_every": 0.0, **over})
    return config


@pytest.mark.timeout(60)
def test_serial_a2c_repeats_for_a_seed_and_resumes_from_its_checkpoint(tmp_path):
    runs = [a2c.run(a2c_config(str(tmp_path / str(i))), quiet=True) for i in range(2)]
    for key in ("env_steps", "updates", "episodes", "train_return"):
        assert runs[0][key] == runs[1][key], key
    # One update per rollout of 2 envs x 4 steps.
    assert runs[0]["updates"] == runs[0]["env_steps"] // 8 and runs[0]["evaluations"] >= 1
    assert "A2C on CartPole-v1" in a2c.format_summary(runs[0])
    config = a2c.A2CJobConfig()
    config.run.resume, config.run.max_env_steps = runs[0]["run_dir"], 800
    more = a2c.run(config, quiet=True)
    assert more["resumed_from_step"] == runs[0]["env_steps"] and more["updates"] == more["env_steps"] // 8


@pytest.mark.timeout(60)
def test_a3c_sync_runs_synchronous_a2c(capsys):
    assert a3c.main(["--sync", "--num-envs", "2", "--n-steps", "4", "--max-env-steps", "80", "--eval-every",
                     "100000", "--log-dir", "none", "--status-every", "0"]) == 0
    captured = capsys.readouterr()
    assert "running python -m experiments.a2c" in captured.err and "A2C on CartPole-v1" in captured.out


def test_a3c_configs_with_sync_name_the_new_job():
    with pytest.raises(ValueError, match="python -m experiments.a2c"):
        validate(a3c_config(sync=True))
    assert parse_config(A3CJobConfig, ["--no-server-acts"]).num_actors == 0  # what rank 0 does now
