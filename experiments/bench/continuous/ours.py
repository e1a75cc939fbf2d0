"""Ours in ``experiments.bench.continuous.budget``: Ape-X TD3 (or SAC, or DDPG) as ``python -m
experiments.apex --env-id ENV --algorithm td3|sac|ddpg`` runs it, a local world (learner + actors, one per
core, at least 2), through the Python API, with the bench's per-env flags
(:data:`ENV_FLAGS`) and ``--ours-flags`` after them.

Snapshots come from :class:`SnapshottingLearner`, the builder's learner class
with :class:`~experiments.bench.tools.wallclock.PacedSnapshots` (passed as
``Parts(learner=...)``; every rank imports this module). The final snapshot is the
run's ``policy.pt`` with the summary's env steps. The job's own greedy evaluations
are switched off (the bench evaluates).
"""

from __future__ import annotations

import os
import shlex
import shutil
from typing import Any

from algorithms.actor_learner import Learner
from experiments.bench.tools.wallclock import PacedSnapshots, write_snapshot

NEVER = 2**62  # --eval-every for the job's own evaluation: the bench evaluates instead

# experiments.apex flags the bench gives ours per env, before --ours-flags. Pendulum
# runs the job's defaults. MuJoCo: what the SB3 peers run with there (the zoo's 10K
# random steps before learning, a 1M-transition replay; the random start itself is the
# job's default), so all three start alike; not tuned here, and not the job's defaults.
MUJOCO_FLAGS = "--learning-starts 10000 --replay-capacity 1000000"
ENV_FLAGS: dict[str, str] = {"Pendulum-v1": "", "HalfCheetah-v5": MUJOCO_FLAGS, "Hopper-v5": MUJOCO_FLAGS}


class SnapshottingLearner(PacedSnapshots, Learner):
    """Ape-X TD3's (SAC's, DDPG's) learner writing evaluation snapshots (:class:`PacedSnapshots`)."""


def flags_for(env_id: str, flags: str) -> list[str]:
    """The bench's flags for ``env_id`` followed by the user's (later ones win)."""
    return [*shlex.split(ENV_FLAGS.get(env_id, "")), *shlex.split(flags)]


# --quick's network, in the trainer and in the evaluator that loads its snapshots.
QUICK_NET = {"hidden": "32,32"}


def apex_config(env_id: str, flags: str, *, algorithm: str = "auto"):
    """``experiments.apex``'s config for ``env_id`` from its flags (exit 2 on a bad one)."""
    from experiments.apex import ApexJobConfig
    from experiments.runtime.cli import apply_overrides, parse_config

    config = parse_config(ApexJobConfig, flags_for(env_id, flags))
    apply_overrides(config, {"env_id": env_id})
    if algorithm != "auto":
        apply_overrides(config, {"algorithm": algorithm})
    return config


def train(env_id: str, *, algorithm: str, flags: str, run_dir: str, seed: int, started: float,
          budget_s: float, max_env_steps: int, eval_every: int, quick: bool) -> dict[str, Any]:
    from experiments.apex import env_defaults, run
    from experiments.runtime import Parts
    from experiments.runtime.cli import apply_overrides

    config = apex_config(env_id, flags, algorithm=algorithm)
    apply_overrides(config, {"seed": seed, "max_seconds": budget_s, "max_env_steps": max_env_steps,
                             "eval_every": NEVER, "eval_episodes": 1, "log_dir": os.path.join(run_dir, "job"),
                             "status_every": 0.0, "checkpoint_every": 0.0})
    if quick:  # a smoke test: learning starts within a second or two
        apply_overrides(config, {"replay_capacity": 5_000, "learning_starts": 300, "batch_size": 64,
                                 **QUICK_NET})
    env_defaults(config, Parts())  # the snapshot clock needs --updates-per-step
    learner = SnapshottingLearner.bound(run_dir=run_dir, every=eval_every, started=started,
                                        learning_starts=config.learn.learning_starts,
                                        updates_per_step=config.learn.updates_per_step)
    summary = run(config, parts=Parts(learner=learner), quiet=True, started=started)
    import torch

    policy = torch.load(os.path.join(summary["run_dir"], "policy.pt"), weights_only=True)
    write_snapshot(run_dir, policy["state"], env_steps=summary["env_steps"], wall_s=summary["wall_s"],
                   updates=summary["updates"], final=True)
    shutil.rmtree(os.path.join(summary["run_dir"], "checkpoints"), ignore_errors=True)  # replay: GBs
    return {"env_steps": summary["env_steps"], "updates": summary["updates"],
            "env_steps_per_s": summary["env_steps_per_s"], "updates_per_s": summary["updates_per_s"],
            "wait_fraction": summary["wait_fraction"], "startup_s": summary["startup_s"],
            "num_actors": summary["num_actors"], "job_run_dir": summary["run_dir"],
            "settings": {**_settings(config), "num_actors": summary["num_actors"]}}


def _settings(config: Any) -> dict[str, Any]:
    """What the run ran with, for its JSON line."""
    learn, cont = config.learn, config.continuous
    settings = {"algorithm": config.algorithm, "num_actors": config.num_actors, "num_envs": config.env.num_envs,
                "lr": learn.lr, "critic_lr": cont.critic_lr, "batch_size": learn.batch_size, "n_step": learn.n_step,
                "updates_per_step": learn.updates_per_step, "learning_starts": learn.learning_starts,
                "hidden": learn.hidden, "tau": learn.tau, "gamma": learn.gamma,
                "replay_capacity": config.replay.replay_capacity, "torch_threads": config.run.torch_threads}
    if config.algorithm == "sac":  # its actors sample the policy: no exploration noise of theirs
        sac = config.sac
        settings.update(autotune=sac.autotune, alpha=sac.alpha, alpha_lr=sac.alpha_lr,
                        target_entropy=sac.target_entropy)
    else:
        settings.update(sigma=cont.sigma, sigma_alpha=cont.sigma_alpha)
    return settings


def policy(env_id: str, *, algorithm: str, flags: str, quick: bool):
    """``(load(state), act(obs))`` for the evaluator: ours' deterministic actor (TD3,
    DDPG; SAC's: the squashed mean) as the run built it, the builder's greedy policy
    (``act`` gives actions in the env's Box)."""
    from experiments.bench.tools.job_runs import apex_made
    from experiments.runtime.cli import apply_overrides

    config = apex_config(env_id, flags, algorithm=algorithm)
    if quick:
        apply_overrides(config, QUICK_NET)
    made, agent = apex_made(config)
    return agent.load_policy_state, made.greedy(agent)
