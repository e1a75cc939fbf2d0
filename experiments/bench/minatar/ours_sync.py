"""Ours on the synchronous data-parallel program in ``experiments.bench.minatar.budget``:
PPO (``experiments.ppo``, ``rlpar-ppo``) and PQN (``experiments.pqn``, ``rlpar-pqn``)
with their default flags (plus ``--flags rlpar-ppo=...``), through the job's Python
API (``run(config, parts=Parts(algorithm=...), quiet=True)``), as
:mod:`.ours` runs the other jobs. A tree without the job module gives the
bench's "not available" line.

Snapshots come from the algorithm class the job takes as a user part:
:class:`SnapshottingPPO` / :class:`SnapshottingPQN` count the env steps of the
rollouts they update on (the rollout's ``valid`` steps, or all ``T x N``) times the
number of learner-group members (each member learns from its own rollouts of the
same size, parameters identical after every update) and write the policy after the
update that passes each ``eval_every``. The bench runs one member unless its flags
name ``--num-workers K``; with several, the first member to pass each multiple of
``eval_every`` claims its snapshot (an exclusive file), so each is written once.

The evaluator rebuilds the network from what the trainer's algorithm was built
with: each snapshotting class writes its config to ``<run>/policy-spec.pt`` when it
is constructed, before any snapshot, so the evaluator plays exactly the run's
network whatever the job's flags filled in. Greedy is the job's: argmax Q for PQN
(the evaluator's epsilon 0.01, like DQN), the policy's mode for PPO (argmax of its
logits, like A3C and IMPALA).
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import shlex
import time
from typing import Any

import numpy as np

from algorithms.ppo import PPO, PPOConfig
from algorithms.pqn import PQN, PQNConfig
from experiments.bench.minatar import jobs
from experiments.bench.minatar.evaluation import env_id, write_snapshot
from experiments.bench.tools.wallclock import Snapshots

SPEC = "policy-spec.pt"
CLAIMS = "claims"  # <run>/claims/<k>: a member writes the snapshot after k x eval_every env steps
MEMBERS_FLAG = "--num-workers"


class SnapshottingRollouts(Snapshots):
    """The snapshot half of :class:`SnapshottingPPO` and :class:`SnapshottingPQN`
    (see the module docstring); ``members``: the ranks of the run's group, each
    counting every member's env steps, one of them writing each snapshot."""

    kind: str = ""
    members: int = 1

    def start_snapshots(self) -> None:
        if self.members < 1:
            raise TypeError(f"{type(self).__name__}: members must be >= 1, got {self.members}")
        super().start_snapshots()
        self.bench_env_steps = self.bench_updates = 0
        write_spec(self.run_dir, self.kind, self.config)

    def update(self, batch: Any) -> dict[str, float]:
        metrics = super().update(batch)  # the algorithm's, next in the MRO
        self.bench_env_steps += rollout_steps(batch) * self.members
        self.bench_updates += 1
        if self._snapshot_clock.passed(self.bench_env_steps) and self._claim(self.bench_env_steps // self.every):
            write_snapshot(self.run_dir, self.policy_state(), env_steps=self.bench_env_steps,
                           wall_s=time.time() - self.started, updates=self.bench_updates)
        return metrics

    def _claim(self, interval: int) -> bool:
        """Whether this member writes the snapshot of ``interval`` (the ``eval_every``
        multiples passed): the first to ask does; members' counts may differ a little
        (a preempted rollout is shorter), their interval numbers hardly ever."""
        if self.members == 1:
            return True
        directory = os.path.join(self.run_dir, CLAIMS)
        os.makedirs(directory, exist_ok=True)
        try:
            os.close(os.open(os.path.join(directory, str(interval)), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False
        return True


class SnapshottingPPO(SnapshottingRollouts, PPO):
    kind = "ppo"


class SnapshottingPQN(SnapshottingRollouts, PQN):
    kind = "pqn"


CLASSES = {"rlpar-ppo": SnapshottingPPO, "rlpar-pqn": SnapshottingPQN}


def rollout_steps(batch: Any) -> int:
    """Env steps in a ``(T, N)`` rollout: its ``valid`` ones (a next-step autoreset
    env's reset steps are not transitions), else ``T x N``."""
    if "valid" in batch:
        return int(np.count_nonzero(np.asarray(_cpu(batch["valid"]))))
    return int(np.size(_cpu(batch["rewards"])))


def _cpu(value: Any) -> Any:
    return value.cpu() if hasattr(value, "cpu") else value


def write_spec(run_dir: str, kind: str, config: Any) -> None:
    """``<run>/policy-spec.pt``: what the evaluator rebuilds the network from."""
    import torch

    os.makedirs(run_dir, exist_ok=True)
    path = os.path.join(run_dir, SPEC)
    tmp = f"{path}.{os.getpid()}.tmp"  # members of a group write the same spec
    torch.save({"kind": kind, "config": dataclasses.asdict(config)}, tmp)
    os.replace(tmp, path)


def read_spec(run_dir: str) -> dict[str, Any]:
    import torch

    path = os.path.join(run_dir, SPEC)
    if not os.path.exists(path):
        raise RuntimeError(f"{path} is missing: the trainer never built its snapshotting algorithm")
    return torch.load(path, weights_only=True)


# ------------------------------------------------------------------ trainers


def check_flags(impl: str, config: Any, flags: str) -> str | None:
    """A message if ``--num-workers`` is given as 0 (the snapshot clock multiplies a
    member's env steps by the count, so the bench needs it), else None."""
    if _named(flags) and _workers(config) is not None and _workers(config) < 1:
        return f"give {MEMBERS_FLAG} K >= 1 (the snapshots count K members' env steps), or leave it out for 1"
    return None


def _named(flags: str) -> bool:
    return any(t == MEMBERS_FLAG or t.startswith(MEMBERS_FLAG + "=") for t in shlex.split(flags))


def _workers(config: Any) -> int | None:
    from experiments.runtime.cli import leaves

    return next((getattr(owner, f.name) for owner, f, _ in leaves(config) if f.name == "num_workers"), None)


def train(impl: str, game: str, *, flags: str, run_dir: str, seed: int, started: float, budget_s: float,
          max_env_steps: int, eval_every: int, quick: bool, variant: str = "paper") -> dict[str, Any]:
    from experiments.runtime import Parts
    from experiments.runtime.cli import apply_overrides

    module = jobs.job_module(impl)
    config = jobs.bench_config(impl, game, flags=flags, run_dir=run_dir, seed=seed, budget_s=budget_s,
                               max_env_steps=max_env_steps, variant=variant)
    members = _workers(config)
    if members is not None and not _named(flags):
        apply_overrides(config, {"num_workers": 1})  # one member on the 2-core machine
        members = 1
    algorithm = CLASSES[impl].bound(run_dir=run_dir, every=eval_every, started=started, members=members or 1)
    kwargs: dict[str, Any] = {"parts": Parts(algorithm=algorithm), "quiet": True}
    if "started" in inspect.signature(module.run).parameters:
        kwargs["started"] = started
    summary = module.run(config, **kwargs)
    jobs.final_snapshot(run_dir, summary)
    return jobs.result(summary, members=members or 1)


# ---------------------------------------------------------- evaluator policies


def policy(impl: str, flags: str, game: str, *, variant: str = "paper", run_dir: str):
    """``(load(state), scores(obs))``, the network built on the first ``load`` (the
    first snapshot exists, so the spec does) from ``<run_dir>/policy-spec.pt`` (the
    flags are in it already)."""
    built: dict[str, Any] = {}

    def load(state: Any) -> None:
        if not built:
            built["load"], built["scores"] = build_policy(read_spec(run_dir), game, variant=variant)
        built["load"](state)

    return load, lambda obs: built["scores"](obs)


def build_policy(spec: dict[str, Any], game: str, *, variant: str = "paper"):
    """``(load(state), scores(obs))`` from a spec: PQN's Q values, PPO's logits."""
    import torch

    from envs.registry import EnvFactory

    env = EnvFactory.from_id(env_id(game, variant))()
    obs_space, act_space = env.observation_space, env.action_space
    env.close()
    if spec["kind"] == "pqn":
        pqn = PQN(num_actions=int(act_space.n), observation_shape=obs_space.shape,
                  config=PQNConfig(**spec["config"]), device="cpu")
        return pqn.load_policy_state, pqn.q_values
    if spec["kind"] == "ppo":
        ppo = PPO(observation_space=obs_space, action_space=act_space, config=PPOConfig(**spec["config"]),
                  device="cpu", seed=0)
        return ppo.load_policy_state, lambda obs: ppo.model.policy(
            torch.as_tensor(np.asarray(obs, dtype=np.float32)))
    raise ValueError(f"unknown policy spec kind {spec['kind']!r}")
