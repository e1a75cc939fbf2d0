"""The A3C job's gradient server section; what its roles build, the same in every
rank and in serial mode: the env and the A2C agent (the user's network and
subclass); and the job's resolve/check/describe hooks for the runtime."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from algorithms.a2c.config import DEFAULTS_BY_FAMILY, ENV_DEFAULTS_BY_FAMILY  # noqa: F401  (public here before)
from experiments.runtime.cli import field, flag
from experiments.runtime.entry import job_env_fn
from experiments.runtime.envs import check_env, env_spaces, fill_by_family, target_return
from experiments.runtime.group import default_members


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
    # Retired with the reduce rounds: synchronous A2C (experiments.a2c) all-reduces.
    round_timeout: float | None = field(None, help=(
        "retired: --sync is now experiments.a2c, whose learner group all-reduces every gradient (no round "
        "waits; a member's death restarts the world from its checkpoint)"))

    def validate(self) -> None:
        if self.round_timeout is not None:
            raise ValueError(f"{flag('round_timeout')} is retired: synchronous A2C is python -m experiments.a2c "
                             "(--sync points there), whose members all-reduce their gradients and wait for no "
                             "round; a member's death restarts the world from the newest checkpoint")
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
