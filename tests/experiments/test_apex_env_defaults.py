"""Ape-X's per-observation-family defaults (``DEFAULTS_BY_FAMILY``) and MinAtar through
the job: a short serial run moves transitions and updates (no learning asserted)."""

import json
import os

import pytest

from experiments.apex import DEFAULTS_BY_FAMILY, LearnConfig, run
from tests.experiments.jobs import apex_config

FAMILY_FIELDS = ("lr", "eps_alpha", "n_step", "updates_per_step")


def _saved_learn(summary):
    with open(os.path.join(summary["run_dir"], "config.json")) as f:
        return json.load(f)["learn"]


def test_unset_family_defaults_come_from_the_observation_family(tmp_path):
    summary = run(apex_config(str(tmp_path), serial=True, max_env_steps=300), quiet=True)
    learn = _saved_learn(summary)
    assert {k: learn[k] for k in FAMILY_FIELDS} == DEFAULTS_BY_FAMILY["vector"]  # CartPole


def test_given_values_are_kept(tmp_path):
    config = apex_config(str(tmp_path), serial=True, max_env_steps=300, lr=7e-4)
    config.learn.eps_alpha = 5.0
    config.learn.n_step = 2
    config.learn.updates_per_step = 0.5
    learn = _saved_learn(run(config, quiet=True))
    assert (learn["lr"], learn["eps_alpha"], learn["n_step"], learn["updates_per_step"]) == (7e-4, 5.0, 2, 0.5)


def test_every_family_has_every_default():
    assert set(DEFAULTS_BY_FAMILY) == {"vector", "small_image", "frames", "other"}
    assert {frozenset(d) for d in DEFAULTS_BY_FAMILY.values()} == {frozenset(FAMILY_FIELDS)}
    # Every field filled by family is left unset by LearnConfig, so the family decides.
    assert all(getattr(LearnConfig(), name) is None for name in FAMILY_FIELDS)


def test_unresolved_family_defaults_are_a_clear_error():
    with pytest.raises(ValueError, match="--lr is unset"):
        LearnConfig().dqn_config()
    with pytest.raises(ValueError, match="--tau is unset"):
        LearnConfig(lr=1e-3).dqn_config()
    assert LearnConfig(lr=1e-3, tau=1.0).dqn_config().lr == 1e-3
    with pytest.raises(ValueError, match="--eps-alpha is unset"):
        LearnConfig().apex_config()
    with pytest.raises(ValueError, match="--n-step is unset"):
        LearnConfig(eps_alpha=3.0).apex_config()
    with pytest.raises(ValueError, match="--batch-size is unset"):
        LearnConfig(eps_alpha=3.0, n_step=1).apex_config()
    assert LearnConfig(eps_alpha=3.0, n_step=1, batch_size=32).apex_config().eps_alpha == 3.0
    with pytest.raises(ValueError, match="--eps-alpha must be >= 0"):
        LearnConfig(eps_alpha=-1.0).validate()
    assert LearnConfig(lr=1e-3, tau=1.0, adam_eps=1.5e-4).dqn_config().adam_eps == 1.5e-4
    with pytest.raises(ValueError, match="--adam-eps must be > 0"):
        LearnConfig(adam_eps=0.0).validate()


def test_minatar_runs_through_serial_apex_with_its_family_defaults(tmp_path):
    pytest.importorskip("minatar")
    summary = run(apex_config(str(tmp_path), serial=True, env_id="MinAtar/Breakout-v0", max_env_steps=400,
                              learning_starts=100, eval_every=10**6), quiet=True)
    assert summary["env_steps"] >= 400 and summary["updates"] > 0 and summary["replay_size"] > 0
    assert summary["episodes"] > 0
    learn = _saved_learn(summary)
    assert {k: learn[k] for k in FAMILY_FIELDS} == DEFAULTS_BY_FAMILY["small_image"]


def test_pacing_needs_the_filled_family_defaults():
    from experiments.apex import ApexJobConfig, pacing

    with pytest.raises(ValueError, match="--n-step"):
        pacing(ApexJobConfig())
    config = ApexJobConfig()
    config.learn.n_step = 3
    with pytest.raises(ValueError, match="--updates-per-step"):
        pacing(config)
    config.learn.updates_per_step = 0.5
    with pytest.raises(ValueError, match="--batch-size"):
        pacing(config)
    config.learn.batch_size = 128
    assert pacing(config).updates_per_step == 0.5
