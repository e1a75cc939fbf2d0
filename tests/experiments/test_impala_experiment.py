"""The IMPALA job on the actor-learner program: unrolls flow through the queue, the
learner updates, evaluations keep the evaluated network, a checkpoint resumes, and
the same job runs in one process (serial) and in a local world."""

import json
import os

import pytest
from jobs import impala_config

from experiments import evaluate, impala


@pytest.mark.timeout(120)
def test_serial_run_flows_unrolls_updates_and_resumes(tmp_path):
    summary = impala.run(impala_config(str(tmp_path), serial=True, max_env_steps=1000, eval_every=500),
                         quiet=True)
    assert summary["updates"] > 0 and summary["data"] == "queue" and summary["evaluations"] >= 1
    # Every update took batch_size unrolls of unroll_length x num_envs steps.
    assert summary["env_steps"] >= summary["updates"] * 2 * 5 * 2
    run_dir = summary["run_dir"]
    saved = json.load(open(os.path.join(run_dir, "config.json")))
    assert saved["learn"]["lr"] == 2e-3 and saved["learn"]["unroll_length"] == 5  # filled, given
    resumed = impala.run(impala_config(str(tmp_path), resume=run_dir, serial=True, max_env_steps=1500), quiet=True)
    assert resumed["resumed_from_step"] == summary["env_steps"]
    assert resumed["updates"] > summary["updates"] and resumed["env_steps"] >= 1500
    # The best evaluation's network replays its recorded return exactly.
    out = evaluate.evaluate_run(run_dir, which="best")
    assert out["matches_recorded"], out


@pytest.mark.timeout(120)
def test_a_local_world_of_two_actors_learns_from_their_unrolls():
    summary = impala.run(impala_config(max_env_steps=1500, eval_every=750), quiet=True)
    assert summary["num_actors"] == 2 and summary["updates"] > 10 and summary["evaluations"] >= 1
    assert summary["env_steps"] >= 1500 and summary["stop_reason"] == "env step budget"


def test_bad_flags_are_named():
    with pytest.raises(ValueError, match="--unroll-length must be >= 1"):
        impala.run(impala_config(serial=True, unroll_length=0))
    with pytest.raises(ValueError, match="--queue-capacity must be >= 1"):
        impala.run(impala_config(serial=True, queue_capacity=0))
    with pytest.raises(ValueError, match="--lr-anneal-steps must be >= 0"):
        impala.run(impala_config(serial=True, lr_anneal_steps=-1))
    with pytest.raises(ValueError, match="--entropy-coef must be"):
        impala.run(impala_config(serial=True, entropy_coef=-1.0))


def test_the_annealing_is_counted_in_updates_of_every_learners_batch():
    from algorithms.impala import IMPALABuilder

    learn = impala.LearnConfig(lr=1e-3, lr_anneal_steps=96_000, unroll_length=20, batch_size=3,
                               entropy_coef=0.01)
    # An update takes 3 unrolls x 20 steps x 8 envs = 480 env steps on each of 2 learners.
    builder = IMPALABuilder(learn=learn, num_envs=8, learners=2, spec=None)
    assert builder.config.lr_anneal_updates == 100 and builder.config.lr == 1e-3
    constant = IMPALABuilder(learn=impala.LearnConfig(lr=1e-3, lr_anneal_steps=0, unroll_length=20, batch_size=3,
                                                         entropy_coef=0.01),
                             num_envs=8, spec=None)
    assert constant.config.lr_anneal_updates is None


def filled_learn(**over):
    """IMPALA's learn section after the job fills its unset fields for ``over``'s env."""
    from experiments.runtime import Parts
    from experiments.runtime.cli import apply_overrides

    config = impala.ImpalaJobConfig()
    apply_overrides(config, over)
    impala.env_defaults(config, Parts())
    return config.learn


def test_minatar_fills_a_larger_entropy_bonus_unless_given():
    """Small images get 0.05 (experiments/tuning.md, "IMPALA on MinAtar"), CartPole 0.01; a
    given value is kept, and an unfilled config names the missing flag."""
    assert filled_learn(env_id="MinAtar/Breakout-v0").entropy_coef == 0.05
    assert filled_learn(env_id="MinAtar/Breakout-v0", entropy_coef=0.02).entropy_coef == 0.02
    assert filled_learn().entropy_coef == 0.01
    from algorithms.impala import IMPALABuilder

    unfilled = IMPALABuilder(learn=impala.LearnConfig(lr=1e-3, lr_anneal_steps=0), num_envs=1, spec=None)
    with pytest.raises(ValueError, match="--unroll-length, --batch-size, --entropy-coef unset"):
        unfilled.config  # noqa: B018


def test_frames_take_the_papers_rate_and_short_unrolls_unless_given():
    """Atari frames: the paper's lr 6e-4 and entropy 0.01, with MinAtar's unrolls of 5 in
    batches of 2 (experiments/tuning.md, "IMPALA on Pong": the paper's 20 x 4 made too few
    updates on 2 cores to leave a random policy's level in an hour); given values are kept."""
    learn = filled_learn(env_id="ALE/Pong-v5")
    assert (learn.lr, learn.entropy_coef, learn.unroll_length, learn.batch_size, learn.lr_anneal_steps) == \
        (6e-4, 0.01, 5, 2, 0)
    given = filled_learn(env_id="ALE/Pong-v5", unroll_length=20, batch_size=4)
    assert (given.unroll_length, given.batch_size) == (20, 4)


def test_minatar_anneals_the_learning_rate_over_the_runs_budget_unless_given():
    """Small images anneal to 0 over the run's --max-env-steps (experiments/tuning.md,
    "IMPALA on MinAtar"), CartPole keeps a constant rate; a given value is kept."""
    assert filled_learn(env_id="MinAtar/Breakout-v0").lr_anneal_steps == 5_000_000
    assert filled_learn(env_id="MinAtar/Breakout-v0", max_env_steps=2_000_000).lr_anneal_steps == 2_000_000
    assert filled_learn(env_id="MinAtar/Breakout-v0", lr_anneal_steps=0).lr_anneal_steps == 0
    assert filled_learn().lr_anneal_steps == 0
