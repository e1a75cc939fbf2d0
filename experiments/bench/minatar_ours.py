"""Ours in ``experiments.bench.minatar``: Ape-X (``experiments.apex``) and A3C
(``experiments.a3c``) with their default flags (plus ``--ours-flags`` /
``--a3c-flags``) on a MinAtar game, through the Python API, writing evaluation
snapshots without pausing for evaluation.

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

The final snapshot is the run's ``policy.pt`` with the summary's env steps.
The job's own greedy evaluations are switched off (the bench evaluates).
"""

from __future__ import annotations

import math
import os
import shlex
import shutil
import time
from typing import Any

from algorithms.a2c import A2C
from algorithms.apex import ApexLearner
from experiments.bench.minatar_eval import env_id, write_snapshot

NEVER = 2**62  # --eval-every for the job's own evaluation: the bench evaluates instead


class SnapshottingLearner(ApexLearner):
    """An Ape-X learner that writes evaluation snapshots (see the module docstring).
    Use :meth:`bound` to make the subclass a run passes as ``Parts(learner=...)``."""

    run_dir: str = ""
    every: int = 0
    started: float = 0.0
    learning_starts: int = 0
    updates_per_step: float = 1.0

    @classmethod
    def bound(cls, *, run_dir: str, every: int, started: float, learning_starts: int,
              updates_per_step: float) -> type:
        return type(cls.__name__, (cls,), {"run_dir": run_dir, "every": every, "started": started,
                                           "learning_starts": learning_starts,
                                           "updates_per_step": updates_per_step})

    def __init__(self, *, dqn: Any, buffer: Any, params: Any, config: Any) -> None:
        if not self.run_dir or self.every < 1:
            raise TypeError("use SnapshottingLearner.bound(...) to set where and how often to snapshot")
        super().__init__(dqn=dqn, buffer=buffer, params=params, config=config)
        self._next = self.every

    def env_steps(self) -> int:
        return self.learning_starts + int(self.updates / self.updates_per_step)

    def step(self) -> dict[str, Any]:
        metrics = super().step()
        steps = self.env_steps()
        if steps >= self._next:
            while self._next <= steps:
                self._next += self.every
            write_snapshot(self.run_dir, self.dqn.policy_state(), env_steps=steps,
                           wall_s=time.time() - self.started, updates=self.updates)
        return metrics


class SnapshottingA2C(A2C):
    """An A2C whose A3C worker writes evaluation snapshots (see the module
    docstring). Use :meth:`bound` to make the subclass passed as ``Parts(algorithm=...)``."""

    run_dir: str = ""
    every: int = 0
    started: float = 0.0

    @classmethod
    def bound(cls, *, run_dir: str, every: int, started: float) -> type:
        return type(cls.__name__, (cls,), {"run_dir": run_dir, "every": every, "started": started})

    def __init__(self, *, observation_space: Any, action_space: Any, config: Any = None, model: Any = None,
                 actor: Any = None, critic: Any = None, device: Any = None) -> None:
        if not self.run_dir or self.every < 1:
            raise TypeError("use SnapshottingA2C.bound(...) to set where and how often to snapshot")
        super().__init__(observation_space=observation_space, action_space=action_space, config=config,
                         model=model, actor=actor, critic=critic, device=device)
        self.env_steps = self.rollouts = 0
        self._next = self.every

    def compute_gradients(self, batch: Any) -> Any:
        self.env_steps += math.prod(batch["rewards"].shape)  # (T, N) per rollout
        self.rollouts += 1
        return super().compute_gradients(batch)

    def load_policy_state(self, state: Any) -> None:
        super().load_policy_state(state)
        if self.rollouts and self.env_steps >= self._next:  # the server's parameters after that rollout
            while self._next <= self.env_steps:
                self._next += self.every
            write_snapshot(self.run_dir, self.policy_state(), env_steps=self.env_steps,
                           wall_s=time.time() - self.started, updates=self.rollouts)


# ------------------------------------------------------------------- configs


def apex_config(flags: str):
    """``experiments.apex``'s config from its flags (exit 2 on a bad one)."""
    from experiments.apex import ApexJobConfig
    from experiments.runtime.cli import parse_config

    return parse_config(ApexJobConfig, shlex.split(flags))


def a3c_config(flags: str):
    from experiments.a3c import A3CJobConfig
    from experiments.runtime.cli import parse_config

    return parse_config(A3CJobConfig, shlex.split(flags))


def _bench_overrides(game: str, *, run_dir: str, seed: int, budget_s: float, max_env_steps: int) -> dict:
    return {"env_id": env_id(game), "seed": seed, "max_seconds": budget_s, "max_env_steps": max_env_steps,
            "eval_every": NEVER, "eval_episodes": 1, "log_dir": os.path.join(run_dir, "job"),
            "status_every": 0.0, "checkpoint_every": 0.0}


def _final_snapshot(run_dir: str, summary: dict[str, Any]) -> None:
    """``policy.pt`` as the last snapshot; the job's checkpoint (replay included) is
    not needed afterwards."""
    import torch

    policy = torch.load(os.path.join(summary["run_dir"], "policy.pt"), weights_only=True)
    write_snapshot(run_dir, policy["state"], env_steps=summary["env_steps"], wall_s=summary["wall_s"],
                   updates=summary["updates"], final=True)
    shutil.rmtree(os.path.join(summary["run_dir"], "checkpoints"), ignore_errors=True)


# ------------------------------------------------------------------ trainers


def train_apex(game: str, *, run_dir: str, seed: int, started: float, budget_s: float, max_env_steps: int,
               eval_every: int, quick: bool, flags: str) -> dict[str, Any]:
    from experiments.apex import env_defaults, run
    from experiments.runtime import Parts
    from experiments.runtime.cli import apply_overrides

    config = apex_config(flags)
    apply_overrides(config, _bench_overrides(game, run_dir=run_dir, seed=seed, budget_s=budget_s,
                                             max_env_steps=max_env_steps))
    if quick:  # a smoke test: learning starts within seconds
        apply_overrides(config, {"replay_capacity": 5_000, "learning_starts": 500})
    env_defaults(config, Parts())  # the snapshot clock needs --updates-per-step
    learner = SnapshottingLearner.bound(run_dir=run_dir, every=eval_every, started=started,
                                        learning_starts=config.learn.learning_starts,
                                        updates_per_step=config.learn.updates_per_step)
    summary = run(config, parts=Parts(learner=learner), quiet=True, started=started)
    _final_snapshot(run_dir, summary)
    return {"env_steps": summary["env_steps"], "updates": summary["updates"],
            "env_steps_per_s": summary["env_steps_per_s"], "updates_per_s": summary["updates_per_s"],
            "wait_fraction": summary["wait_fraction"], "startup_s": summary["startup_s"],
            "num_actors": summary["num_actors"], "job_run_dir": summary["run_dir"]}


def train_a3c(game: str, *, run_dir: str, seed: int, started: float, budget_s: float, max_env_steps: int,
              eval_every: int, quick: bool, flags: str) -> dict[str, Any]:
    from experiments.a3c import run
    from experiments.runtime import Parts
    from experiments.runtime.cli import apply_overrides

    config = a3c_config(flags)
    apply_overrides(config, _bench_overrides(game, run_dir=run_dir, seed=seed, budget_s=budget_s,
                                             max_env_steps=max_env_steps))
    apply_overrides(config, {"num_workers": 1})  # the 2-core default; snapshots count one worker
    algorithm = SnapshottingA2C.bound(run_dir=run_dir, every=eval_every, started=started)
    summary = run(config, parts=Parts(algorithm=algorithm), quiet=True, started=started)
    _final_snapshot(run_dir, summary)
    return {"env_steps": summary["env_steps"], "updates": summary["updates"],
            "env_steps_per_s": summary["env_steps_per_s"], "updates_per_s": summary["updates_per_s"],
            "wait_fraction": None, "startup_s": summary["startup_s"], "job_run_dir": summary["run_dir"]}


# ---------------------------------------------------------- evaluator policies


def apex_network(flags: str, game: str):
    """Ours' Q network for ``game`` as ``experiments.apex`` with ``flags`` builds it."""
    from algorithms.nets import observation_family, q_network
    from envs.registry import EnvFactory
    from experiments.apex import fill_learn

    config = apex_config(flags)
    env = EnvFactory.from_id(env_id(game))()
    fill_learn(config.learn, algorithm="dqn", family=observation_family(env.observation_space.shape))
    net = q_network(env.observation_space.shape, int(env.action_space.n), hidden=config.learn.hidden_sizes(),
                    dueling=config.learn.dueling)
    env.close()
    return net


def apex_policy(flags: str, game: str):
    """``(load(state), scores(obs))``: ours' Q network as ``experiments.apex`` builds it."""
    import numpy as np
    import torch

    net = apex_network(flags, game)
    return net.load_state_dict, lambda obs: net(torch.as_tensor(np.asarray(obs)))


def a3c_agent(flags: str, game: str) -> A2C:
    """Ours' actor-critic for ``game`` as ``experiments.a3c`` with ``flags`` builds it."""
    from envs.registry import EnvFactory
    from experiments.roles.a3c_parts import fill_defaults

    config = a3c_config(flags)
    factory = EnvFactory.from_id(env_id(game))
    fill_defaults(config, factory)  # the job's own fill: the same net as the run's
    env = factory()
    agent = A2C(observation_space=env.observation_space, action_space=env.action_space,
                config=config.learn.a2c_config(), device="cpu")
    env.close()
    return agent


def a3c_policy(flags: str, game: str):
    """``(load(state), scores(obs))``: ours' actor-critic; the scores are its logits."""
    import numpy as np
    import torch

    agent = a3c_agent(flags, game)
    return agent.load_policy_state, lambda obs: agent.model.policy(torch.as_tensor(np.asarray(obs)).float())
