"""Ours in ``experiments.bench.minatar.budget``: Ape-X (``experiments.apex``), A3C
(``experiments.a3c``), IMPALA (``experiments.impala``) and, on the synchronous
program, PPO and PQN (``experiments.ppo``, ``experiments.pqn``:
:mod:`.ours_sync`) with their default flags (plus the bench's ``--flags
IMPL=...``) on a MinAtar game, through the Python API, writing evaluation
snapshots without pausing for evaluation. A job module that this tree does not
have gives a "not available" line (:func:`.jobs.missing`), not a failed run.

The job runtime saves the policy only at the end, so the snapshots come from the
user parts the runtime already takes, defined here so every rank imports them:

- :class:`SnapshottingLearner` (Ape-X's learner class) writes the online network
  after the update at which the run passes each ``eval_every`` env steps. The
  learner does not see the coordinator's env-step count, so it uses the one Pacing
  holds it to, ``learning_starts + updates / updates_per_step``: actors and
  learner stay within Pacing's slack (1,000 env steps) of it either way.
- :class:`SnapshottingA2C` (A3C's algorithm class) counts the env steps of the
  rollouts its worker computes gradients on (exact with one worker, the default
  below 4 cores and what the bench runs) and writes the parameters it pulls back
  from the gradient server after the rollout that passes each ``eval_every``.
- :class:`SnapshottingImpalaLearner` (IMPALA's learner class) counts the env steps
  of the unrolls it has learned from (behind the actors' count by what waits in
  the queue) and writes the policy after the update that passes each ``eval_every``.

The final snapshot is the run's ``policy.pt`` with the summary's env steps.
The job's own greedy evaluations are switched off (the bench evaluates). The
evaluator plays every implementation's greedy action: argmax Q (Ape-X, PQN; with
Ape-X's ``--distributional``, of expected Q, and ``--noisy`` at the mean weights), the
mode of the policy, i.e. argmax of its logits (A3C, IMPALA, PPO).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from algorithms.a2c import A2C
from algorithms.actor_learner import Learner
from algorithms.dqn import ApexLearner
from experiments.bench.minatar import jobs
from experiments.bench.minatar.evaluation import env_id
from experiments.bench.tools.wallclock import PacedSnapshots, Snapshots


class SnapshottingLearner(PacedSnapshots, ApexLearner):
    """An Ape-X learner that writes evaluation snapshots (see the module docstring and
    :class:`~experiments.bench.tools.wallclock.PacedSnapshots`)."""


class SnapshottingA2C(Snapshots, A2C):
    """An A2C whose A3C worker writes evaluation snapshots (see the module docstring):
    after loading the server's parameters that follow the rollout passing each
    interval of its own env steps."""

    def start_snapshots(self) -> None:
        super().start_snapshots()
        self.env_steps = self.rollouts = 0

    def compute_gradients(self, batch: Any) -> Any:
        self.env_steps += math.prod(batch["rewards"].shape)  # (T, N) per rollout
        self.rollouts += 1
        return super().compute_gradients(batch)

    def load_policy_state(self, state: Any) -> None:
        super().load_policy_state(state)
        if self.rollouts:  # the server's parameters after that rollout
            self.snapshot_if_due(self.policy_state, env_steps=self.env_steps, updates=self.rollouts)


class SnapshottingImpalaLearner(Snapshots, Learner):
    """IMPALA's learner writing evaluation snapshots (see the module docstring): after
    the update passing each interval of the env steps it learned from."""

    def start_snapshots(self) -> None:
        super().start_snapshots()
        self.learned_steps = 0  # env steps of the unrolls learned from: [T, B] rewards each batch

    def learn(self, batch: Any) -> Any:
        self.learned_steps += int(np.asarray(batch["reward"]).size)
        return super().learn(batch)

    def step(self) -> dict[str, float]:
        metrics = super().step()
        self.snapshot_if_due(self.algorithm.policy_state, env_steps=self.learned_steps, updates=self.updates)
        return metrics


# ------------------------------------------------------------------- configs


def apex_config(flags: str):
    """``experiments.apex``'s config from its flags (exit 2 on a bad one)."""
    return jobs.job_config("rlpar-apex", flags)


def a3c_config(flags: str):
    return jobs.job_config("rlpar-a3c", flags)


def impala_config(flags: str):
    return jobs.job_config("rlpar-impala", flags)


def check_flags(impl: str, config: Any, flags: str) -> str | None:
    """A message if the bench cannot run ``impl`` with the job config ``flags`` gave."""
    if impl == "rlpar-a3c" and config.num_workers not in (0, 1):
        return ("the bench runs one A3C worker (the 2-core default; its snapshots count that worker's env "
                "steps): drop --num-workers")
    return None


# ------------------------------------------------------------------ trainers


def train(impl: str, game: str, **common: Any) -> dict[str, Any]:
    """Train ``impl`` (Ape-X, A3C, IMPALA) on ``game`` under the budget, writing
    snapshots; its figures. ``common``: the trainers' keywords."""
    return {"rlpar-apex": train_apex, "rlpar-a3c": train_a3c, "rlpar-impala": train_impala}[impl](game, **common)


def train_apex(game: str, *, run_dir: str, seed: int, started: float, budget_s: float, max_env_steps: int,
               eval_every: int, quick: bool, flags: str, variant: str = "paper") -> dict[str, Any]:
    from experiments.apex import env_defaults, run
    from experiments.runtime import Parts
    from experiments.runtime.cli import apply_overrides

    config = jobs.bench_config("rlpar-apex", game, flags=flags, run_dir=run_dir, seed=seed, budget_s=budget_s,
                               max_env_steps=max_env_steps, variant=variant)
    if quick:  # a smoke test: learning starts within seconds
        apply_overrides(config, {"replay_capacity": 5_000, "learning_starts": 250})
    env_defaults(config, Parts())  # the snapshot clock needs --updates-per-step
    learner = SnapshottingLearner.bound(run_dir=run_dir, every=eval_every, started=started,
                                        learning_starts=config.learn.learning_starts,
                                        updates_per_step=config.learn.updates_per_step)
    summary = run(config, parts=Parts(learner=learner), quiet=True, started=started)
    jobs.final_snapshot(run_dir, summary)
    return jobs.result(summary, num_actors=summary["num_actors"])


def train_a3c(game: str, *, run_dir: str, seed: int, started: float, budget_s: float, max_env_steps: int,
              eval_every: int, quick: bool, flags: str, variant: str = "paper") -> dict[str, Any]:
    from experiments.a3c import run
    from experiments.runtime import Parts
    from experiments.runtime.cli import apply_overrides

    config = jobs.bench_config("rlpar-a3c", game, flags=flags, run_dir=run_dir, seed=seed, budget_s=budget_s,
                               max_env_steps=max_env_steps, variant=variant)
    apply_overrides(config, {"num_workers": 1})  # the 2-core default; snapshots count one worker
    algorithm = SnapshottingA2C.bound(run_dir=run_dir, every=eval_every, started=started)
    summary = run(config, parts=Parts(algorithm=algorithm), quiet=True, started=started)
    jobs.final_snapshot(run_dir, summary)
    return {**jobs.result(summary), "wait_fraction": None}


def train_impala(game: str, *, run_dir: str, seed: int, started: float, budget_s: float, max_env_steps: int,
                 eval_every: int, quick: bool, flags: str, variant: str = "paper") -> dict[str, Any]:
    """IMPALA with its defaults by observation family (``experiments.impala``)."""
    from experiments.impala import run
    from experiments.runtime import Parts

    config = jobs.bench_config("rlpar-impala", game, flags=flags, run_dir=run_dir, seed=seed, budget_s=budget_s,
                               max_env_steps=max_env_steps, variant=variant)
    learner = SnapshottingImpalaLearner.bound(run_dir=run_dir, every=eval_every, started=started)
    summary = run(config, parts=Parts(learner=learner), quiet=True, started=started)
    jobs.final_snapshot(run_dir, summary)
    return jobs.result(summary, num_actors=summary.get("num_actors"))


# ---------------------------------------------------------- evaluator policies


def policy(impl: str, flags: str, game: str, *, variant: str = "paper", run_dir: str = ""):
    """``(load(state), scores(obs))`` for ``impl``'s snapshots (see
    :func:`experiments.bench.minatar.evaluation.evaluator_main`)."""
    return {"rlpar-apex": apex_policy, "rlpar-a3c": a3c_policy,
            "rlpar-impala": impala_policy}[impl](flags, game, variant=variant)


def apex_agent(flags: str, game: str, *, variant: str = "paper"):
    """Ours' Ape-X algorithm for ``game`` as ``experiments.apex`` with ``flags`` builds it:
    the job's own defaults and builder, so any of its flags (``--dueling``,
    ``--distributional``, ``--noisy``: Rainbow's pieces) give the network whose
    ``state_dict`` the run's snapshots hold."""
    from experiments.bench.tools.job_runs import apex_made
    from experiments.runtime.cli import apply_overrides

    config = apex_config(flags)
    apply_overrides(config, {"env_id": env_id(game, variant)})
    return apex_made(config)[1]


def apex_network(flags: str, game: str, *, variant: str = "paper"):
    """Ours' Q network (the torch module) for ``game`` as ``experiments.apex`` with
    ``flags`` builds it (see :func:`apex_agent`)."""
    return apex_agent(flags, game, variant=variant).network


def apex_policy(flags: str, game: str, *, variant: str = "paper"):
    """``(load(state), scores(obs))``: ours' Q network as ``experiments.apex`` builds it;
    the scores are the Q values the job's greedy action is the argmax of (C51's expected
    Q, noisy layers at their mean weights)."""
    agent = apex_agent(flags, game, variant=variant)
    return agent.load_policy_state, agent.greedy_q_values


def a3c_agent(flags: str, game: str, *, variant: str = "paper") -> A2C:
    """Ours' actor-critic for ``game`` as ``experiments.a3c`` with ``flags`` builds it."""
    from envs.registry import EnvFactory
    from experiments.a3c import fill_defaults

    config = a3c_config(flags)
    factory = EnvFactory.from_id(env_id(game, variant))
    fill_defaults(config, factory)  # the job's own fill: the same net as the run's
    env = factory()
    agent = A2C(observation_space=env.observation_space, action_space=env.action_space,
                config=config.learn, device="cpu")
    env.close()
    return agent


def a3c_policy(flags: str, game: str, *, variant: str = "paper"):
    """``(load(state), scores(obs))``: ours' actor-critic; the scores are its logits."""
    agent = a3c_agent(flags, game, variant=variant)
    return agent.load_policy_state, lambda obs: agent.model.policy(_float_obs(obs))


def impala_agent(flags: str, game: str, *, variant: str = "paper"):
    """Ours' IMPALA for ``game`` as ``experiments.impala`` with ``flags`` builds it
    (its defaults by observation family filled the job's way)."""
    from algorithms.impala import IMPALA
    from envs.registry import EnvFactory
    from experiments.impala import env_defaults
    from experiments.runtime import Parts
    from experiments.runtime.cli import apply_overrides

    config = impala_config(flags)
    apply_overrides(config, {"env_id": env_id(game, variant)})
    env_defaults(config, Parts())
    env = EnvFactory.from_id(env_id(game, variant))()
    agent = IMPALA(observation_space=env.observation_space, action_space=env.action_space,
                   config=config.learn, device="cpu")
    env.close()
    return agent


def impala_policy(flags: str, game: str, *, variant: str = "paper"):
    """``(load(state), scores(obs))``: ours' IMPALA policy; the scores are its logits
    (their argmax is the job's greedy action, the mode)."""
    agent = impala_agent(flags, game, variant=variant)
    return agent.load_policy_state, lambda obs: agent.model.policy(_float_obs(obs))


def _float_obs(obs: Any):
    import torch

    return torch.as_tensor(np.asarray(obs, dtype=np.float32))
