"""Ape-X's per-observation-family defaults (``DEFAULTS_BY_FAMILY``) and MinAtar through
the job: a short serial run moves transitions and updates (no learning asserted)."""

import json
import os

import pytest

from experiments import apex
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
    from algorithms.dqn import DQNBuilder
    from experiments.runtime.cli import validate

    with pytest.raises(ValueError, match="--lr, --n-step, --batch-size, --tau, --hidden, --updates-per-step, "
                                         "--eps-alpha, --eps unset"):
        DQNBuilder(learn=LearnConfig(), spec=None)
    filled = apex.fill_learn(LearnConfig(adam_eps=1.5e-4), algorithm="dqn", family="vector")
    assert DQNBuilder(learn=filled, spec=None).dqn.adam_eps == 1.5e-4
    for over, message in (({"eps_alpha": -1.0}, "--eps-alpha must be >= 0"),
                          ({"adam_eps": 0.0}, "--adam-eps must be > 0")):
        with pytest.raises(ValueError, match=message):
            validate(apex_config(**over))


def test_noisy_nets_turn_epsilon_off_unless_it_is_given():
    from experiments.runtime import Parts

    def eps(**over):
        config = apex_config(**over)
        apex.env_defaults(config, Parts())
        return config.learn.eps

    assert (eps(), eps(noisy=True), eps(noisy=True, eps=0.2)) == (0.4, 0.0, 0.2)


def test_minatar_runs_through_serial_apex_with_its_family_defaults(tmp_path):
    pytest.importorskip("minatar")
    summary = run(apex_config(str(tmp_path), serial=True, env_id="MinAtar/Breakout-v0", max_env_steps=240,
                              learning_starts=100, eval_every=10**6), quiet=True)
    assert summary["env_steps"] >= 240 and summary["updates"] > 0 and summary["replay_size"] > 0
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


def test_hidden_is_sizes_and_none_leaves_it_to_the_algorithm():
    from experiments.apex import ApexJobConfig
    from experiments.runtime.cli import parse_config

    assert parse_config(ApexJobConfig, ["--hidden", "64,32"]).learn.hidden == (64, 32)
    assert parse_config(ApexJobConfig, ["--hidden", "none"]).learn.hidden is None
    td3 = apex.fill_learn(LearnConfig(), algorithm="td3", family="vector")
    assert (td3.hidden, td3.batch_size, td3.n_step) == ((256, 256), 256, 1)
