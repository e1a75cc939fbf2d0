"""The A3C job's gradient server section; what its roles build, the same in every
rank and in serial mode: the env and the A2C agent (the user's network and
subclass); and the job's resolve/check/describe hooks for the runtime."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from algorithms.a2c.config import DEFAULTS_BY_FAMILY
from experiments.runtime.cli import field, flag
from experiments.runtime.entry import job_env_fn
from experiments.runtime.envs import check_env, env_spaces, fill_by_family, target_return
from experiments.runtime.group import default_members

# Env copies per worker, by observation family (``--num-envs`` when not given):
# - vector: 8, the CartPole measurement in algorithms.a2c.config.A2CConfig (16 envs:
#   19.2k env steps to solve against 7.7k).
# - small_image: 16, measured on SpaceInvaders-v0 (bench minatar, one in-process
#   worker, 5 steps, 360 s each, one seed, 2-core machine, nothing else running):
#   8 envs ran 8.8K env steps/s at 219 updates/s and ended at 18.6 / 39.4
#   (epsilon-0.1 / greedy, best 45.7); 16 envs ran 13.3K env steps/s at 166
#   updates/s, reached the DQN paper's 45 at 121 s and ended at 71.6 / 120.6 (its
#   best). Each acting forward and each gradient pays a fixed cost that 16 envs
#   spread over twice the samples; SB3's A2C also steps 16 envs on Atari.
# - frames: 16, as OpenAI Baselines' and SB3's A2C on Atari (not measured here).
ENV_DEFAULTS_BY_FAMILY: dict[str, dict[str, int]] = {
    "vector": {"num_envs": 8},
    "small_image": {"num_envs": 16},
    "frames": {"num_envs": 16},
    "other": {"num_envs": 8},
}


@dataclasses.dataclass
class ServerConfig:
    """The gradient server and the workers' reports."""

    max_staleness: int | None = field(None, help=(
        "server drops/down-weights gradients older than this many versions ('none': accept all)"))
    staleness_policy: Literal["drop", "downweight"] = field("drop", help=(
        "what the server does with a gradient beyond --max-staleness"))
    # Evaluations start when the reported env steps pass --eval-every: at 0.5 s a
    # remote worker's steps arrived up to ~1,000 steps late. One small RPC per 0.1 s.
    report_every: float = field(0.1, help="seconds between a remote worker's progress reports to rank 0")
    # A dead worker's restart takes seconds; a round that waited this long for it
    # closes without it, and later rounds do not wait for it until it pushes again
    # (rlpar.servers.rounds). Rank 0's own evaluation delays its gradient too: past
    # this bound the round goes on without rank 0 instead of idling every worker.
    round_timeout: float = field(5.0, help=(
        "--sync: seconds a round waits for a missing worker's gradient before stepping without it"))

    def validate(self) -> None:
        if not self.round_timeout > 0:
            raise ValueError(f"{flag('round_timeout')} must be > 0, got {self.round_timeout}")
        if self.max_staleness is not None and self.max_staleness < 0:
            raise ValueError(f"{flag('max_staleness')} must be >= 0 or none, got {self.max_staleness}")
        if not self.report_every > 0:
            raise ValueError(f"{flag('report_every')} must be > 0, got {self.report_every}")


def env_fn(ctx: Any):
    return ctx.env_fn if ctx.env_fn is not None else job_env_fn(ctx.config, ctx.parts)


def target(ctx: Any) -> float:
    return target_return(ctx.config.run.target_return, env_fn(ctx))


def build_agent(ctx: Any, *, device: Any):
    """The A2C (or the user's subclass) on the user's network, else the default one."""
    from algorithms.a2c import A2C

    fill_unset(ctx)
    obs_space, act_space = env_spaces(env_fn(ctx))
    model = None if ctx.parts.network is None else ctx.parts.network(obs_space, act_space)
    return (ctx.parts.algorithm or A2C)(observation_space=obs_space, action_space=act_space,
                                       config=ctx.config.learn, model=model, device=device)


def resolve(config: Any, world_size: int | None) -> int:
    """Fill ``--num-workers 0``; the number of ranks. One local worker that rank 0
    runs anyway needs no world: it runs serially, in this process.

    A local run's workers are a learner group's members on CPU: one per core, one below
    4 cores. Measured for A3C on a 2-core machine (CartPole-v1, bench a3c_cartpole, 3
    seeds): two ranks paid 2-3 s of spawning, RPC start-up and gradient staleness (mean
    0.6-0.75 versions, more env steps to solve: 16-100k against 13-23k) and solved in
    8-33 s; one in-process worker solved in 6-9 s under the same load."""
    if world_size is not None:
        workers = world_size if config.server_acts else world_size - 1
        if workers < 1:
            raise ValueError("a world of 1 rank with --no-server-acts has no worker")
        config.num_workers = workers
        return world_size
    config.num_workers = config.num_workers or default_members("cpu")
    if config.num_workers == 1 and config.server_acts:
        config.run.serial = True
    return config.num_workers + (0 if config.server_acts else 1)


def check(config: Any, parts: Any) -> None:
    from gymnasium import spaces

    from algorithms.a2c import A2C

    parts.check(algorithm=A2C, builders=False)
    check_env(lambda: job_env_fn(config, parts), env_id=config.env.env_id, user_env=parts.env,
              actions=(spaces.Discrete, spaces.Box), job="A3C")
    if config.run.serial and not config.server_acts:
        raise ValueError(f"{flag('serial')} runs the workers in rank 0: drop --no-server-acts")


def env_defaults(config: Any, parts: Any) -> None:
    """The ``learn`` fields left unset and ``--num-envs`` when not given, by the env's
    observation family (``algorithms.a2c.config.DEFAULTS_BY_FAMILY``, ``ENV_DEFAULTS_BY_FAMILY``)."""
    fill_defaults(config, job_env_fn(config, parts))


def fill_unset(ctx: Any) -> None:
    """``env_defaults`` for a context: a no-op after prepare(); fills a context made
    without it. From ctx's env, not the id: an env registered only in the launching
    process is not in this rank's registry."""
    fill_defaults(ctx.config, env_fn(ctx))


def fill_defaults(config: Any, factory: Any) -> None:
    """The family defaults left unset in an ``A3CJobConfig``, from ``factory``'s env
    (built once: ``env_spaces`` caches it per factory)."""
    fill_by_family(config.learn, DEFAULTS_BY_FAMILY, factory)
    fill_by_family(config.env, ENV_DEFAULTS_BY_FAMILY, factory)


def describe(summary: dict[str, Any]) -> list[str]:
    server = (f"server             {summary['applied']:,} gradients applied, {summary['dropped']:,} dropped, "
              f"mean staleness {summary['mean_staleness']:.2f}")
    if summary.get("sync"):  # one optimizer step (update) per round
        server = (f"server (sync)      {summary['updates']:,} rounds of {summary['num_sources']} gradients "
                  f"({summary['short_rounds']:,} short), {summary['applied']:,} applied, "
                  f"{summary['dropped']:,} dropped")
    return [
        f"workers            {summary['num_sources']} x {summary['num_envs']} envs",
        server,
    ] + ([f"restarts           {summary['actor_restarts']} worker(s) restarted and rejoined"]
         if summary.get("actor_restarts") else [])


def load_policy(ctx: Any, state: dict[str, Any]):
    """A saved ``policy.pt`` as a greedy policy (``experiments.evaluate``)."""
    import functools

    agent = build_agent(ctx, device="cpu")
    agent.load_policy_state(state)
    return functools.partial(agent.act, explore=False)
