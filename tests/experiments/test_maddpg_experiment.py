"""experiments.maddpg: learns the built-in cooperative task; CLI, subprocess envs, logging."""

import io
import json
import os

import numpy as np
import pytest

from experiments.cli import parse_config
from experiments.maddpg import RunConfig, evaluate, resolve_env, train

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.timeout(180)
def test_short_run_beats_random_on_the_cooperative_env():
    config = RunConfig(env="cooperative", n_agents=2, continuous=True, num_envs=8, num_workers=0,
                       total_steps=3000, buffer_size=50_000, batch_size=128, learning_starts=500,
                       train_every=8, status_every=1000.0, seed=0)
    out = io.StringIO()
    summary = train(config, stream=out)
    algo = summary.pop("algo")
    assert summary["updates"] > 300 and summary["episodes"] >= 100
    assert json.loads(out.getvalue().strip().splitlines()[-1])["steps"] == 3000
    _, env_fn = resolve_env(config)
    trained = evaluate(algo, env_fn, episodes=20)
    random = evaluate(algo, env_fn, episodes=20, random_policy=True)
    # Random play scores about -78 (2 agents x 25 steps); 3000 steps of MADDPG reach about -60.
    assert trained["team_return"] > random["team_return"] + 8.0, (trained, random)
    assert trained["landmark_distance"] < random["landmark_distance"]


@pytest.mark.timeout(120)
def test_heterogeneous_agents_ensembles_and_subprocess_envs(tmp_path):
    config = RunConfig(env="cooperative_hetero", n_agents=3, continuous=False, num_envs=4, num_workers=1,
                       total_steps=600, buffer_size=5000, batch_size=16, learning_starts=100,
                       train_every=20, ensemble_size=2, ensemble_buffers="separate",
                       log_dir=str(tmp_path / "tb"), status_every=0.0, seed=3)
    out = io.StringIO()
    summary = train(config, stream=out)
    algo = summary.pop("algo")
    assert not algo.homogeneous and [a.obs_dim for a in algo.agents] == [12, 8, 12]
    assert summary["updates"] > 0 and summary["episodes"] >= 4
    assert np.isfinite(summary["team_return_last100"])
    assert "steps=" in out.getvalue()  # status lines were printed
    assert any(name.startswith("events") for name in os.listdir(tmp_path / "tb"))
    metrics = evaluate(algo, resolve_env(config)[1], episodes=2)
    assert np.isfinite(metrics["team_return"])


def test_mpe_simple_spread_is_the_default_when_installed():
    pytest.importorskip("mpe2")
    name, fn = resolve_env(RunConfig())
    assert name == "simple_spread"
    env = fn()
    assert len(env.possible_agents) == 3
    env.close()


@pytest.mark.parametrize("argv, message", [
    (["--num-envs", "0"], "--num-envs"),
    (["--batch-size", "64", "--buffer-size", "32"], "--batch-size"),
    (["--gamma", "1.5"], "gamma"),
    (["--mode", "gpu"], "invalid choice"),
    (["--ensemble-size", "0"], "ensemble_size"),
])
def test_invalid_cli_config_rejected(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        parse_config(RunConfig, argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_train_every_below_num_envs_gives_several_updates_per_vector_step():
    config = RunConfig(env="cooperative", n_agents=2, continuous=True, num_envs=4, num_workers=0,
                       total_steps=200, buffer_size=1000, batch_size=8, learning_starts=40,
                       train_every=2, status_every=1000.0, seed=0)
    summary = train(config, stream=io.StringIO())
    summary.pop("algo").close()
    # Two updates per vector step of 4 copies from the step that reaches learning_starts
    # (36 -> 40) on: (200 - 36) / 2.
    assert summary["steps"] == 200 and summary["updates"] == 82


def test_actor_and_critic_learning_rates_override_lr():
    algo_config = parse_config(RunConfig, ["--lr", "1e-2", "--critic-lr", "3e-3"]).algo_config()
    assert (algo_config.actor_lr, algo_config.critic_lr) == (1e-2, 3e-3)
    algo_config = RunConfig(actor_reg=0.0, gumbel_temperature=0.5).algo_config()
    assert (algo_config.actor_lr, algo_config.actor_reg, algo_config.gumbel_temperature) == (1e-2, 0.0, 0.5)
    with pytest.raises(ValueError, match="critic_lr"):
        RunConfig(critic_lr=-1.0).validate()
