"""experiments.bench.continuous.posture: the share of an episode spent upside down, read from a
MuJoCo-like state (a stand-in env here; the real HalfCheetah where mujoco is installed),
and clear errors for runs it cannot read."""

import importlib.util
import json
import math

import numpy as np
import pytest
import torch

from experiments.bench.continuous import posture


class _Joint:
    def __init__(self, address):
        self.qposadr = np.array([address])


class _Model:
    def joint(self, name):
        if name != "rooty":
            raise KeyError(name)
        return _Joint(2)


class _Data:
    def __init__(self):
        self.qpos = np.zeros(4)


class TippingEnv:
    """A planar body whose pitch turns by the action each step (10 steps an episode)."""

    def __init__(self):
        self.model, self.data, self.t = _Model(), _Data(), 0

    @property
    def unwrapped(self):
        return self

    def reset(self, *, seed=None):
        self.data.qpos[:] = 0.0
        self.t = 0
        return np.zeros(3, dtype=np.float32), {}

    def step(self, action):
        self.data.qpos[2] += float(action[0])
        self.t += 1
        return np.full(3, self.t, dtype=np.float32), 1.0, False, self.t >= 10, {}


def test_counts_the_steps_past_a_right_angle_either_way():
    # pitch after each step: 0.5, 1.0, ..., 5.0; past pi/2 from the 4th step (2.0) on: 7 of 10
    out = posture.posture(lambda obs: np.full((len(obs), 1), 0.5), TippingEnv(), env_id="tipping", seed=0)
    assert out["return"] == 10.0 and out["steps"] == 10
    assert out["upside_down"] == pytest.approx(0.7)
    # the same backwards: the absolute pitch counts
    back = posture.posture(lambda obs: np.full((len(obs), 1), -0.5), TippingEnv(), env_id="tipping", seed=0)
    assert back["upside_down"] == pytest.approx(0.7)
    assert back["mean_abs_pitch"] == pytest.approx(np.mean(np.arange(1, 11) * 0.5), abs=1e-3)
    upright = posture.posture(lambda obs: np.zeros((len(obs), 1)), TippingEnv(), env_id="tipping", seed=0)
    assert upright["upside_down"] == 0.0 and upright["mean_abs_pitch"] < math.pi / 2


def test_an_env_without_a_root_pitch_joint_is_named():
    import gymnasium as gym

    env = gym.make("Pendulum-v1")
    try:
        with pytest.raises(ValueError, match="Pendulum-v1 has no MuJoCo root joint 'rooty'"):
            posture.pitch_reader(env, "Pendulum-v1")
    finally:
        env.close()


def test_cli_errors_name_the_run(tmp_path, capsys):
    empty = tmp_path / "HalfCheetah-v5" / "rlpar-td3-seed0"
    empty.mkdir(parents=True)
    with pytest.raises(SystemExit) as exit_info:
        posture.main([str(empty)])
    assert exit_info.value.code == 2 and "no snapshots" in capsys.readouterr().err
    stranger = tmp_path / "HalfCheetah-v5" / "sb3-td3-seed0"
    stranger.mkdir(parents=True)
    with pytest.raises(SystemExit):
        posture.main([str(stranger)])
    assert "cannot tell whose run it is" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        posture.main([str(empty), "--every", "0"])
    assert "--every must be >= 1" in capsys.readouterr().err


def _write_snapshot(run_dir, state, env_steps):
    from experiments.bench.tools.wallclock import write_snapshot

    write_snapshot(str(run_dir), state, env_steps=env_steps, wall_s=1.0, updates=0)


def test_a_pendulum_run_is_refused_before_any_snapshot_loads(tmp_path, capsys):
    run = tmp_path / "Pendulum-v1" / "rlpar-td3-seed0"
    run.mkdir(parents=True)
    _write_snapshot(run, {"unused": torch.zeros(1)}, 1000)
    with pytest.raises(SystemExit):
        posture.main([str(run)])
    assert "no MuJoCo root joint 'rooty'" in capsys.readouterr().err


@pytest.mark.skipif(importlib.util.find_spec("mujoco") is None, reason="the mujoco extra is not installed")
@pytest.mark.timeout(60)
def test_halfcheetah_snapshots_of_a_fresh_policy(tmp_path, capsys):
    run = tmp_path / "HalfCheetah-v5" / "rlpar-td3-seed0"
    run.mkdir(parents=True)
    state = _fresh_td3_state()
    for steps in (10_000, 20_000, 30_000):
        _write_snapshot(run, state, steps)
    assert posture.main([str(run), "--every", "2"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["env_steps"] for r in rows] == [10_000, 30_000]  # every 2nd, and the last
    assert all(r["steps"] == 1000 and 0.0 <= r["upside_down"] <= 1.0 for r in rows)


def _fresh_td3_state():
    import gymnasium as gym

    from algorithms.builder import EnvSpec
    from experiments.apex import builder_class, fill_learn
    from experiments.bench.continuous.ours import apex_config

    config = apex_config("HalfCheetah-v5", "", algorithm="td3")
    fill_learn(config.learn, algorithm="td3", family="vector")
    env = gym.make("HalfCheetah-v5")
    spec = EnvSpec(observation_space=env.observation_space, action_space=env.action_space)
    env.close()
    agent = builder_class("td3")(algorithm_name="td3", learn=config.learn, continuous=config.continuous,
                                 spec=spec).make_algorithm(device="cpu", seed=0)
    return agent.policy_state()
