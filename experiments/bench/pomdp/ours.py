"""Ours in ``experiments.bench.pomdp.budget``: ``python -m experiments.apex --algorithm
r2d2`` (recurrent) and ``--algorithm dqn`` (feed-forward) on a partially observed env, a
local world (learner + actors, one per core, at least 2) through the Python API, the
job's defaults by observation family plus the bench's ``--flags IMPL=...``.

Snapshots come from the builder's learner class with
:class:`~experiments.bench.tools.wallclock.PacedSnapshots` (``Parts(learner=...)``;
every rank imports this module); the final one is the run's ``policy.pt``
(:func:`experiments.bench.minatar.jobs.final_snapshot`). The job's own evaluations are
off (the bench evaluates). The evaluator plays the builder's own greedy policy
(:meth:`algorithms.builder.Builder.greedy`): R2D2's keeps one recurrent state per
episode, zeroed when its episode starts.
"""

from __future__ import annotations

import os
import shlex
from typing import Any

from algorithms.actor_learner import Learner
from algorithms.dqn import ApexLearner
from experiments.bench.minatar import jobs
from experiments.bench.tools.wallclock import PacedSnapshots

ALGORITHMS = {"rlpar-r2d2": "r2d2", "rlpar-dqn": "dqn"}
# --quick: learning starts within a second or two, small networks.
QUICK = {"r2d2": {"replay_capacity": 2_000, "learning_starts": 200, "batch_size": 8, "hidden": "32",
                  "lstm_size": 16},
         "dqn": {"replay_capacity": 5_000, "learning_starts": 200, "batch_size": 32, "hidden": "32,32"}}


class SnapshottingR2D2Learner(PacedSnapshots, Learner):
    """R2D2's learner writing evaluation snapshots."""


class SnapshottingDQNLearner(PacedSnapshots, ApexLearner):
    """Ape-X DQN's learner writing evaluation snapshots."""


LEARNERS = {"r2d2": SnapshottingR2D2Learner, "dqn": SnapshottingDQNLearner}


def apex_config(impl: str, env_id: str, flags: str, *, quick: bool):
    """``experiments.apex``'s config for ``impl`` on ``env_id`` (exit 2 on a bad flag)."""
    from experiments.runtime.cli import apply_overrides

    algorithm = ALGORITHMS[impl]
    config = jobs.job_config("rlpar-apex", flags)
    if config.algorithm not in ("auto", algorithm):
        raise ValueError(f"--flags {impl}: runs --algorithm {algorithm}, got --algorithm {config.algorithm}")
    apply_overrides(config, {"env_id": env_id, "algorithm": algorithm})
    if quick:
        given = set(shlex.split(flags))
        apply_overrides(config, {k: v for k, v in QUICK[algorithm].items()
                                 if f"--{k.replace('_', '-')}" not in given})
    return config


def train(impl: str, env_id: str, *, flags: str, run_dir: str, seed: int, started: float, budget_s: float,
          max_env_steps: int, eval_every: int, quick: bool) -> dict[str, Any]:
    from experiments.apex import env_defaults, run
    from experiments.runtime import Parts
    from experiments.runtime.cli import apply_overrides

    config = apex_config(impl, env_id, flags, quick=quick)
    apply_overrides(config, {"seed": seed, "max_seconds": budget_s, "max_env_steps": max_env_steps,
                             "eval_every": jobs.NEVER, "eval_episodes": 1, "log_dir": os.path.join(run_dir, "job"),
                             "status_every": 0.0, "checkpoint_every": 0.0})
    env_defaults(config, Parts())  # the snapshot clock needs --updates-per-step
    learner = LEARNERS[config.algorithm].bound(
        run_dir=run_dir, every=eval_every, started=started, learning_starts=config.learn.learning_starts,
        updates_per_step=config.learn.updates_per_step)
    summary = run(config, parts=Parts(learner=learner), quiet=True, started=started)
    jobs.final_snapshot(run_dir, summary)
    return {**jobs.result(summary, num_actors=summary["num_actors"]),
            "settings": settings(config, num_actors=summary["num_actors"])}


def settings(config: Any, *, num_actors: int) -> dict[str, Any]:
    """What the run ran with, for its JSON line."""
    learn = config.learn
    out = {"algorithm": config.algorithm, "num_actors": num_actors, "num_envs": config.env.num_envs,
           "lr": learn.lr, "batch_size": learn.batch_size, "n_step": learn.n_step,
           "updates_per_step": learn.updates_per_step, "learning_starts": learn.learning_starts,
           "hidden": learn.hidden, "replay_capacity": config.replay.replay_capacity}
    if config.algorithm == "r2d2":
        r2d2 = config.r2d2
        out.update(burn_in=r2d2.burn_in, unroll=r2d2.unroll, period=r2d2.period, lstm_size=r2d2.lstm_size,
                   last_action_reward=r2d2.last_action_reward, train_episode_starts=r2d2.train_episode_starts,
                   lr_anneal_steps=r2d2.lr_anneal_steps)
    return out


def policy(impl: str, env_id: str, *, flags: str, quick: bool):
    """``(load(state), act)`` for the evaluator: the builder's greedy policy on the
    network the run built (``act.episodes_started`` for R2D2's recurrent state)."""
    from experiments.bench.tools.job_runs import apex_made

    made, agent = apex_made(apex_config(impl, env_id, flags, quick=quick))
    return agent.load_policy_state, made.greedy(agent)
