"""Ours in ``experiments.bench.atari``: Ape-X DQN, IMPALA, PPO and PQN with their jobs'
defaults for frames (the ``frames`` observation family: ``(4, 84, 84)`` stacks pick the
Nature CNN and each job's frames settings, :func:`algorithms.nets.observation_family`)
plus the bench's ``--flags IMPL=...``, through the jobs' Python API.

The snapshotting parts are the MinAtar bench's (:mod:`experiments.bench.minatar.ours`,
:mod:`experiments.bench.minatar.ours_sync`): they are env-agnostic; only the env id
and the evaluator's networks differ here. The evaluator feeds the networks the
observations as the jobs' actors do: uint8 frames to Ape-X's and PQN's networks (their
Nature CNN scales bytes to [0, 1]), float32 to IMPALA's and PPO's (their ``_obs_tensor``).
"""

from __future__ import annotations

import inspect
import math
import os
from typing import Any

import numpy as np

from experiments.bench.atari.protocol import POLICY, VALUE
from experiments.bench.minatar import jobs

ACTING = {"rlpar-apex": VALUE, "rlpar-pqn": VALUE, "rlpar-impala": POLICY, "rlpar-ppo": POLICY}
JOBS = {impl: jobs.JOBS[impl] for impl in ACTING}
FAST = ("rlpar-apex", "rlpar-impala")  # the jobs with a --fast option (torch.compile: --fast compile)


def missing(impl: str) -> str | None:
    return jobs.missing(impl)


def overrides(env_id: str, *, run_dir: str, seed: int, budget_s: float, max_env_steps: int,
              device: str) -> dict[str, Any]:
    """What every bench run sets: the env, budget and seed; no job-side evaluation,
    status lines or checkpoints (the bench evaluates the snapshots)."""
    return {"env_id": env_id, "seed": seed, "max_seconds": budget_s, "max_env_steps": max_env_steps,
            "eval_every": jobs.NEVER, "eval_episodes": 1, "log_dir": os.path.join(run_dir, "job"),
            "status_every": 0.0, "checkpoint_every": 0.0, "device": device}


def config(impl: str, flags: str, env_id: str | None = None, **run: Any):
    """``impl``'s job config from ``flags`` (exit 2 on a bad flag), with the bench's
    overrides when ``run`` gives them."""
    from experiments.runtime.cli import apply_overrides

    cfg = jobs.job_config(impl, flags)
    if env_id is not None:
        apply_overrides(cfg, overrides(env_id, **run) if run else {"env_id": env_id})
    return cfg


def train(impl: str, env_id: str, *, flags: str, run_dir: str, seed: int, started: float, budget_s: float,
          max_env_steps: int, eval_every: int, device: str = "cpu") -> dict[str, Any]:
    """Train ``impl`` under the budget, writing snapshots; the trainer's figures."""
    from experiments.bench.minatar import ours as mo
    from experiments.bench.minatar import ours_sync
    from experiments.runtime import Parts

    module = jobs.job_module(impl)
    cfg = config(impl, flags, env_id, run_dir=run_dir, seed=seed, budget_s=budget_s,
                 max_env_steps=max_env_steps, device=device)
    extra: dict[str, Any] = {}
    if impl == "rlpar-apex":
        module.env_defaults(cfg, Parts())  # the snapshot clock needs --updates-per-step
        part = mo.SnapshottingLearner.bound(run_dir=run_dir, every=eval_every, started=started,
                                            learning_starts=cfg.learn.learning_starts,
                                            updates_per_step=cfg.learn.updates_per_step)
        parts = Parts(learner=part)
    elif impl == "rlpar-impala":
        parts = Parts(learner=mo.SnapshottingImpalaLearner.bound(run_dir=run_dir, every=eval_every, started=started))
    else:
        members = ours_sync._workers(cfg)
        if members is not None and not ours_sync._named(flags):
            from experiments.runtime.cli import apply_overrides

            apply_overrides(cfg, {"num_workers": 1})  # one member unless the flags say otherwise
            members = 1
        parts = Parts(algorithm=ours_sync.CLASSES[impl].bound(run_dir=run_dir, every=eval_every, started=started,
                                                              members=members or 1))
        extra["members"] = members or 1
    kwargs: dict[str, Any] = {"parts": parts, "quiet": True}
    if "started" in inspect.signature(module.run).parameters:
        kwargs["started"] = started
    summary = module.run(cfg, **kwargs)
    jobs.final_snapshot(run_dir, summary)
    return jobs.result(summary, num_actors=summary.get("num_actors"), **extra)


def training_reward_clip(impl: str, flags: str) -> str:
    """How ``impl`` clips rewards in training with ``flags`` (for the JSON line):
    ``--reward-clip``, by default the frames family's."""
    from experiments.runtime.envs import REWARD_CLIP_BY_FAMILY

    clip = jobs.job_config(impl, flags).env.reward_clip
    if clip is None:
        clip = REWARD_CLIP_BY_FAMILY["frames"]["reward_clip"]
    return "none" if math.isinf(clip) else f"+-{clip:g}"


# ---------------------------------------------------------- evaluator policies


def spaces(env_id: str):
    from experiments.runtime.envs import env_factory, env_spaces

    return env_spaces(env_factory(env_id))


def policy(impl: str, flags: str, env_id: str, *, run_dir: str):
    """``(load(state), scores(obs))`` for ``impl``'s snapshots: Q values (Ape-X,
    PQN) or logits (IMPALA, PPO)."""

    obs_space, act_space = spaces(env_id)
    if impl == "rlpar-apex":
        from experiments.bench.tools.job_runs import apex_made

        # The job's own builder and defaults (its flags included, Rainbow's pieces too):
        # the network whose state the snapshots hold, and the Q values its greedy action
        # is the argmax of.
        agent = apex_made(config(impl, flags, env_id))[1]
        return agent.load_policy_state, agent.greedy_q_values
    if impl == "rlpar-impala":
        from algorithms.impala import IMPALA
        from experiments.impala import env_defaults
        from experiments.runtime import Parts

        cfg = config(impl, flags, env_id)
        env_defaults(cfg, Parts())
        agent = IMPALA(observation_space=obs_space, action_space=act_space, config=cfg.learn, device="cpu")
        return agent.load_policy_state, lambda obs: agent.model.policy(_model_obs(agent.model, obs))
    return _sync_policy(run_dir, obs_space, act_space)


def _sync_policy(run_dir: str, obs_space: Any, act_space: Any):
    """PPO's or PQN's network rebuilt, on the first snapshot, from the config the
    trainer's algorithm wrote (:func:`experiments.bench.minatar.ours_sync.write_spec`)."""
    from experiments.bench.minatar import ours_sync

    built: dict[str, Any] = {}

    def load(state: Any) -> None:
        if not built:
            built["load"], built["scores"] = build_sync(ours_sync.read_spec(run_dir), obs_space, act_space)
        built["load"](state)

    return load, lambda obs: built["scores"](obs)


def build_sync(spec: dict[str, Any], obs_space: Any, act_space: Any):
    import torch

    from algorithms.ppo import PPO, PPOConfig
    from algorithms.pqn import PQN, PQNConfig

    if spec["kind"] == "pqn":
        pqn = PQN(num_actions=int(act_space.n), observation_shape=obs_space.shape,
                  config=PQNConfig(**spec["config"]), device="cpu")
        return pqn.load_policy_state, lambda obs: pqn.q_values(torch.as_tensor(np.asarray(obs)))
    if spec["kind"] == "ppo":
        ppo = PPO(observation_space=obs_space, action_space=act_space, config=PPOConfig(**spec["config"]),
                  device="cpu", seed=0)
        return ppo.load_policy_state, lambda obs: ppo.model.policy(_model_obs(ppo.model, obs))
    raise ValueError(f"unknown policy spec kind {spec['kind']!r}")


def _model_obs(model: Any, obs: Any):
    """What IMPALA's and PPO's acting feeds their networks (``observation_tensor``'s one
    rule): uint8 frames stay bytes, which the Nature CNN scales itself. As float32
    pixel values (0-255), taken as already scaled, they saturated its logits, and every
    evaluation played one action."""
    import torch

    from algorithms.actor_critic import observation_tensor

    return observation_tensor(model, obs, torch.device("cpu"))
