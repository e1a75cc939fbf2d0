"""What the A3C roles build, the same in every rank and in serial mode: the env
and the A2C agent (the user's network and subclass); and the job's
resolve/check/describe hooks for the runtime."""

from __future__ import annotations

from typing import Any

from experiments.runtime.cli import flag
from experiments.runtime.envs import (
    check_env,
    env_factory,
    env_spaces,
    fill_by_family,
    target_return,
)


def job_env_fn(config: Any, parts: Any):
    """The runtime's ``Job.env_fn``: made in the launching process, shipped to every rank."""
    return env_factory(config.env.env_id, parts.env)


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
                                       config=ctx.config.learn.a2c_config(), model=model, device=device)


def resolve(config: Any, world_size: int | None) -> int:
    """Fill ``--num-workers 0``; the number of ranks. One local worker that rank 0
    runs anyway needs no world: it runs serially, in this process."""
    if world_size is not None:
        workers = world_size if config.server_acts else world_size - 1
        if workers < 1:
            raise ValueError("a world of 1 rank with --no-server-acts has no worker")
        config.num_workers = workers
        return world_size
    config.num_workers = config.num_workers or type(config).default_workers()
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
    """``--n-steps``, ``--lr``, ``--entropy-coef`` and ``--num-envs`` when not given,
    by the env's observation family (the config's ``defaults_by_family`` and
    ``env_defaults_by_family``: ``experiments.a3c.DEFAULTS_BY_FAMILY``, ...)."""
    fill_defaults(config, job_env_fn(config, parts))


def fill_unset(ctx: Any) -> None:
    """``env_defaults`` for a context: a no-op after prepare(); fills a context made
    without it. From ctx's env, not the id: an env registered only in the launching
    process is not in this rank's registry."""
    fill_defaults(ctx.config, env_fn(ctx))


def fill_defaults(config: Any, factory: Any) -> None:
    """The family defaults left unset in an ``A3CJobConfig``, from ``factory``'s env
    (built once: ``env_spaces`` caches it per factory)."""
    fill_by_family(config.learn, type(config).defaults_by_family, factory)
    fill_by_family(config.env, type(config).env_defaults_by_family, factory)


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
