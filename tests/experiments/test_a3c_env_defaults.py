"""A3C's per-observation-family defaults (``DEFAULTS_BY_FAMILY``: ``--n-steps``,
``--lr``, ``--entropy-coef``, ``--value-coef``, ``--normalize-advantages``; ``ENV_DEFAULTS_BY_FAMILY``: ``--num-envs``) and the
runtime helper that fills them; MinAtar through a short serial A3C run (transitions
flow, no learning asserted)."""

import json
import os

import gymnasium as gym
import pytest

from algorithms.a2c.config import DEFAULTS_BY_FAMILY, ENV_DEFAULTS_BY_FAMILY
from experiments.a3c import A3CEnvConfig, run
from experiments.a3c import LearnConfig as A3CLearnConfig
from experiments.runtime.envs import fill_by_family
from tests.experiments.jobs import a3c_config

UNSET = {"n_steps": None, "lr": None, "entropy_coef": None, "value_coef": None, "normalize_advantages": None}


def _saved_learn(summary):
    with open(os.path.join(summary["run_dir"], "config.json")) as f:
        learn = json.load(f)["learn"]
    return {name: learn[name] for name in UNSET}


def _saved_num_envs(summary):
    with open(os.path.join(summary["run_dir"], "config.json")) as f:
        return json.load(f)["env"]["num_envs"]


def test_unset_fields_come_from_the_observation_family(tmp_path):
    summary = run(a3c_config(str(tmp_path), max_env_steps=200, num_envs=None, **UNSET), quiet=True)
    assert _saved_learn(summary) == DEFAULTS_BY_FAMILY["vector"]  # CartPole: vectors
    assert _saved_num_envs(summary) == summary["num_envs"] == ENV_DEFAULTS_BY_FAMILY["vector"]["num_envs"]


def test_given_fields_are_kept_and_only_the_unset_ones_filled(tmp_path):
    summary = run(a3c_config(str(tmp_path), max_env_steps=200, n_steps=3, lr=None, entropy_coef=0.05),
                  quiet=True)
    assert _saved_learn(summary) == {**DEFAULTS_BY_FAMILY["vector"], "n_steps": 3, "entropy_coef": 0.05}


def test_unresolved_fields_are_a_clear_error_and_bad_values_are_caught_before_any_env():
    from gymnasium import spaces

    from algorithms.a2c import A2C
    from experiments.runtime.cli import validate

    with pytest.raises(ValueError, match="--n-steps, --lr, --entropy-coef, --value-coef, --normalize-advantages unset"):
        A2C(observation_space=spaces.Box(-1, 1, (4,)), action_space=spaces.Discrete(2), config=A3CLearnConfig())
    A3CLearnConfig().validate()  # unset is fine until the job fills it
    with pytest.raises(ValueError, match="--n-steps must be >= 1"):
        validate(a3c_config(n_steps=0))
    with pytest.raises(ValueError, match="--lr"):
        validate(a3c_config(lr=-1.0))
    A3CEnvConfig().validate()
    with pytest.raises(ValueError, match="--num-envs must be >= 1"):
        A3CEnvConfig(num_envs=0).validate()
    with pytest.raises(ValueError, match="--env-step-timeout"):  # the rest is still checked
        A3CEnvConfig(env_step_timeout=1.0).validate()


def test_every_family_has_every_field():
    fields = set(DEFAULTS_BY_FAMILY["vector"])
    assert set(DEFAULTS_BY_FAMILY) == {"vector", "small_image", "frames", "other"}
    assert all(set(table) == fields for table in DEFAULTS_BY_FAMILY.values())
    assert set(ENV_DEFAULTS_BY_FAMILY) == set(DEFAULTS_BY_FAMILY)
    assert all(set(table) == {"num_envs"} for table in ENV_DEFAULTS_BY_FAMILY.values())


class _Counting:
    """An env factory that counts the envs it builds."""

    def __init__(self, shape):
        self.shape, self.built = shape, 0

    def __call__(self):
        self.built += 1
        env = gym.make("CartPole-v1")
        env.observation_space = gym.spaces.Box(0, 1, self.shape, dtype="float32")
        return env


def test_fill_by_family_picks_the_family_and_builds_no_env_when_nothing_is_unset():
    section = A3CLearnConfig(n_steps=None, lr=None, entropy_coef=0.2)
    factory = _Counting((10, 10, 4))  # MinAtar-size image
    fill_by_family(section, DEFAULTS_BY_FAMILY, factory)
    assert (section.n_steps, section.lr, section.entropy_coef) == (
        DEFAULTS_BY_FAMILY["small_image"]["n_steps"], DEFAULTS_BY_FAMILY["small_image"]["lr"], 0.2)
    built = factory.built
    fill_by_family(section, DEFAULTS_BY_FAMILY, factory)
    assert factory.built == built


def test_a_run_budget_default_becomes_the_runs_env_steps_and_needs_them():
    from types import SimpleNamespace

    from experiments.runtime.envs import RUN_BUDGET

    defaults = {"vector": {"lr_anneal_steps": 0}, "small_image": {"lr_anneal_steps": RUN_BUDGET}}
    section = SimpleNamespace(lr_anneal_steps=None)
    fill_by_family(section, defaults, _Counting((10, 10, 4)), run_budget=3_000_000)
    assert section.lr_anneal_steps == 3_000_000
    with pytest.raises(TypeError, match="run_budget"):
        fill_by_family(SimpleNamespace(lr_anneal_steps=None), defaults, _Counting((10, 10, 4)))


def test_minatar_runs_through_serial_a3c_with_its_family_defaults(tmp_path):
    pytest.importorskip("minatar")
    summary = run(a3c_config(str(tmp_path), env_id="MinAtar/Breakout-v0", max_env_steps=400,
                             eval_every=10**6, num_envs=None, **UNSET), quiet=True)
    assert summary["env_steps"] >= 400 and summary["updates"] > 0
    assert _saved_learn(summary) == DEFAULTS_BY_FAMILY["small_image"]
    assert _saved_num_envs(summary) == summary["num_envs"] == ENV_DEFAULTS_BY_FAMILY["small_image"]["num_envs"]
