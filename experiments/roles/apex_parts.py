"""What the Ape-X roles build, the same in every rank and in serial mode: the env,
the DQN (the user's network and subclass), the replay and its layout; and the
job's resolve/check/describe hooks for the runtime."""

from __future__ import annotations

from typing import Any

import numpy as np

from experiments.runtime.cli import flag
from experiments.runtime.envs import (
    check_env,
    env_factory,
    env_spaces,
    fill_by_family,
    is_atari,
    target_return,
)


def job_env_fn(config: Any, parts: Any):
    """The runtime's ``Job.env_fn``: made in the launching process, shipped to every rank."""
    return env_factory(config.env.env_id, parts.env)


def env_fn(ctx: Any):
    return ctx.env_fn if ctx.env_fn is not None else job_env_fn(ctx.config, ctx.parts)


def eval_env(ctx: Any, *, seed: int):
    """Greedy evaluation envs: one per episode, each env's first episode counts."""
    from envs import make_vector_env

    return make_vector_env(env_fn(ctx), num_envs=ctx.config.run.eval_episodes, num_workers=0, seed=seed)


def target(ctx: Any) -> float:
    return target_return(ctx.config.run.target_return, env_fn(ctx))


def build_dqn(ctx: Any, *, device: Any, seed: int):
    """The DQN (or the user's subclass) on the user's network, else the default one
    for the observations (MLP, MinAtar conv, Nature CNN)."""
    import torch

    from algorithms.dqn import DQN
    from algorithms.nets import q_network

    config = ctx.config
    obs_space, act_space = env_spaces(env_fn(ctx))
    # A no-op after prepare(); fills a context made without it. ctx's env, not the id:
    # an env registered only in the launching process is not in this rank's registry.
    fill_family_defaults(config, env_fn(ctx))
    torch.manual_seed(seed)
    if ctx.parts.network is not None:
        net = ctx.parts.network(obs_space, act_space)
    else:
        net = q_network(obs_space.shape, int(act_space.n), hidden=config.learn.hidden_sizes(),
                        dueling=config.learn.dueling)
    cls = ctx.parts.algorithm or DQN
    return cls(network=net, num_actions=int(act_space.n), config=config.learn.dqn_config(), device=device,
               seed=seed)


def actor_seed(run_seed: int, index: int, restarts: int = 0) -> int:
    """Actor ``index``'s env and exploration seed: its first process keeps the run's
    historical ``seed + 10000 (index + 1)``; the process that replaces it after its
    ``restarts``-th death gets a fresh one drawn from (seed, index, restarts), so it
    does not replay its predecessor's episodes."""
    if restarts < 0:
        raise ValueError(f"restarts must be >= 0, got {restarts}")
    if restarts == 0:
        return run_seed + 10_000 * (index + 1)
    return int(np.random.SeedSequence([run_seed & 0xFFFFFFFF, index, restarts]).generate_state(1)[0])


def replay_layout(ctx: Any) -> dict[str, Any]:
    """Replay keyword arguments for the env's observations: ``SharedFrames`` when
    they are uint8 frame stacks (stack axis first, as both Atari paths make them)
    that an n-step transition's obs and next_obs overlap in."""
    from rlpar.buffers import SharedFrames

    config = ctx.config
    if not (config.replay.share_frames and is_atari(config.env.env_id)) or ctx.parts.env is not None:
        return {}  # without building an env to look at its space
    obs_space, _ = env_spaces(env_fn(ctx))
    fill_family_defaults(config, env_fn(ctx))  # --n-step; a no-op after prepare(), as in build_dqn
    shape = obs_space.shape or ()
    if obs_space.dtype == np.uint8 and len(shape) == 3 and shape[0] > config.learn.n_step:
        return {"shared_frames": SharedFrames(shift=config.learn.n_step)}
    return {}


def local_replay(ctx: Any):
    from rlpar.buffers import PrioritizedReplayBuffer

    config = ctx.config
    return PrioritizedReplayBuffer(capacity=config.replay.replay_capacity,
                                   alpha=config.replay.priority_alpha, beta=config.replay.priority_beta,
                                   seed=config.run.seed, **replay_layout(ctx))


# --------------------------------------------------------------- runtime hooks


def resolve(config: Any, world_size: int | None) -> int:
    """Fill ``--num-actors 0``; the number of ranks (learner + replay + actors)."""
    from experiments.apex import default_actors

    extra = config.replay.extra_ranks()
    if world_size is None:
        config.num_actors = config.num_actors or default_actors()
        return 1 + extra + config.num_actors
    actors = world_size - 1 - extra
    if actors < 1:
        raise ValueError(f"a world of {world_size} ranks leaves no actor with {extra} replay ranks")
    config.num_actors = actors
    return world_size


def check(config: Any, parts: Any) -> None:
    from gymnasium import spaces

    from algorithms.apex import ApexActor, ApexLearner
    from algorithms.dqn import DQN

    parts.check(algorithm=DQN, actor=ApexActor, learner=ApexLearner)
    check_env(lambda: job_env_fn(config, parts), env_id=config.env.env_id,
              actions=(spaces.Discrete,), job="DQN")
    if config.run.serial and config.replay.replay_placement != "learner":
        raise ValueError(f"{flag('serial')} needs --replay-placement learner")
    if config.run.resume:
        check_resume(config)


def shard_parts(config: Any) -> list[str]:
    """The checkpoint parts of the replay shards of this config (none in the learner)."""
    from rlpar.buffers.distributed import shard_part_names

    shards = {"actors": config.num_actors, "replay-ranks": config.replay.replay_ranks}.get(
        config.replay.replay_placement, 0)
    return shard_part_names(shards)


def check_resume(config: Any) -> None:
    """Before any process starts: the run to resume has a complete checkpoint for this
    replay layout (CheckpointMismatch for shards of another count)."""
    import os

    from experiments.runtime.rundir import RunDir
    from rlpar.checkpoint import latest_checkpoint

    directory = RunDir(config.run.resume).checkpoints
    parts = shard_parts(config)
    if parts and directory and os.path.isdir(directory):  # not on a node without the run dir
        latest_checkpoint(directory, parts=parts)


def env_defaults(config: Any, parts: Any) -> None:
    """``--lr``, ``--eps-alpha``, ``--n-step`` and ``--updates-per-step`` when not given, by
    the env's observation family (``experiments.apex.DEFAULTS_BY_FAMILY``)."""
    fill_family_defaults(config, job_env_fn(config, parts))


def fill_family_defaults(config: Any, factory: Any) -> None:
    from experiments.apex import DEFAULTS_BY_FAMILY

    fill_by_family(config.learn, DEFAULTS_BY_FAMILY, factory)


def describe(summary: dict[str, Any]) -> list[str]:
    return [
        f"actors             {summary['num_actors']} (batch {summary['batch_size']}, "
        f"replay {summary['replay_size']:,} transitions)",
        f"learner waiting    {100 * summary['wait_fraction']:.1f}% of its time (for data)",
        f"learner CPU        {summary['learner_cpu_ms_per_update']:.2f} ms per update "
        f"(its thread had the CPU {100 * summary['learner_cpu_share']:.0f}% of the time)",
    ]


def load_policy(ctx: Any, state: dict[str, Any]):
    """A saved ``policy.pt`` as a greedy policy (``experiments.evaluate``)."""
    import functools

    dqn = build_dqn(ctx, device="cpu", seed=0)
    dqn.load_policy_state(state)
    return functools.partial(dqn.act, explore=False)
