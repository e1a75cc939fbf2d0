"""A sleeping env whose steps are slower in one rank: the straggler of DD-PPO's claim
(Wijmans et al. 2020: preempting the last members' rollouts keeps stragglers' cost low).

``--env-id experiments.bench.tools.straggler_env:StragglerSleep-v0`` imports this module in
every rank (which registers the id). Its settings come from the environment, which a
launched rank inherits: ``RLPAR_BENCH_STEP_S`` (seconds per step, default 0.005),
``RLPAR_BENCH_SLOW_RANK`` (the rank whose steps take ``RLPAR_BENCH_SLOW_FACTOR``
times as long; unset: none).
"""

from __future__ import annotations

import os

import gymnasium as gym

from experiments.bench.tools.sleeping_env import SleepingEnv

ENV_ID = "StragglerSleep-v0"


def step_seconds(environ: dict[str, str] | None = None) -> float:
    """This process's step time: slower in the straggler's rank."""
    environ = os.environ if environ is None else environ
    step_s = float(environ.get("RLPAR_BENCH_STEP_S", "0.005"))
    slow = environ.get("RLPAR_BENCH_SLOW_RANK", "")
    if slow and environ.get("RANK", "0") == slow:
        step_s *= float(environ.get("RLPAR_BENCH_SLOW_FACTOR", "3"))
    return step_s


def make() -> SleepingEnv:
    return SleepingEnv(step_s=step_seconds(), episode_length=100, num_actions=2)


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=make)
