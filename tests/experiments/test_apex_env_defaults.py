"""Ape-X's per-observation-family defaults (``LR_BY_FAMILY``) and MinAtar through
the job: a short serial run moves transitions and updates (no learning asserted)."""

import json
import os

import pytest

from experiments.apex import LR_BY_FAMILY, LearnConfig, run
from tests.experiments.jobs import apex_config


def _saved_lr(summary):
    with open(os.path.join(summary["run_dir"], "config.json")) as f:
        return json.load(f)["learn"]["lr"]


def test_an_unset_learning_rate_comes_from_the_observation_family(tmp_path):
    summary = run(apex_config(str(tmp_path), serial=True, max_env_steps=300), quiet=True)
    assert _saved_lr(summary) == LR_BY_FAMILY["vector"]  # CartPole: vectors


def test_a_given_learning_rate_is_kept(tmp_path):
    summary = run(apex_config(str(tmp_path), serial=True, max_env_steps=300, lr=7e-4), quiet=True)
    assert _saved_lr(summary) == 7e-4


def test_an_unresolved_learning_rate_is_a_clear_error():
    with pytest.raises(ValueError, match="--lr is unset"):
        LearnConfig().dqn_config()
    assert LearnConfig(lr=1e-3).dqn_config().lr == 1e-3


def test_minatar_runs_through_serial_apex_with_its_family_defaults(tmp_path):
    pytest.importorskip("minatar")
    summary = run(apex_config(str(tmp_path), serial=True, env_id="MinAtar/Breakout-v0", max_env_steps=400,
                              learning_starts=100, eval_every=10**6), quiet=True)
    assert summary["env_steps"] >= 400 and summary["updates"] > 0 and summary["replay_size"] > 0
    assert summary["episodes"] > 0
    assert _saved_lr(summary) == LR_BY_FAMILY["small_image"]
