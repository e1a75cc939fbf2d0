"""The env of a job, the same in every rank: by registered id, ``module:EnvId``
(the module imported first, in every rank), ALE and MinAtar ids, or the user's
factory. Dict and Tuple observations are flattened for the default networks, and
Discrete actions numbered from 0."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping
from typing import Any

from algorithms.params import RUN_BUDGET  # the sentinel a family default may be (re-exported)
from experiments.runtime.cli import flag


def is_atari(env_id: str) -> bool:
    return env_id.startswith("ALE/") or "NoFrameskip" in env_id


def _make_atari(env_id: str):
    import gymnasium as gym

    from envs.registry import ensure_registered

    ensure_registered(env_id)
    if env_id.startswith("ALE/"):
        from envs.atari import make_atari

        # The same observations, rewards and flags as gymnasium's wrapper chain (tested
        # in tests/envs/test_atari.py) at ~170 us less CPU per env step.
        return make_atari(env_id)
    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

    env = gym.make(env_id, frameskip=1)
    env = AtariPreprocessing(env, noop_max=30, frame_skip=4, screen_size=84, grayscale_obs=True)
    return FrameStackObservation(env, 4)


@dataclasses.dataclass(frozen=True)
class Standardized:
    """A factory of the env as the default networks and action heads take it
    (picklable): Dict/Tuple observations come out flat, and a Discrete action space
    that starts elsewhere (``Discrete(3, start=1)``) is numbered from 0, the policy's
    action i being the env's ``start + i``."""

    factory: Callable[[], Any]

    def __call__(self):
        from gymnasium import spaces
        from gymnasium.wrappers import FlattenObservation

        env = self.factory()
        if isinstance(env.observation_space, spaces.Dict | spaces.Tuple):
            env = FlattenObservation(env)
        if isinstance(env.action_space, spaces.Discrete) and int(env.action_space.start) != 0:
            from envs.actions import FromZero

            env = FromZero(env)
        return env


def env_factory(env_id: str, user_env: Callable[[], Any] | None = None) -> Callable[[], Any]:
    """A picklable zero-argument factory of the job's env. For a registered id, the
    spec is captured here, so an env registered only in the launching process (a
    user's script) is rebuilt in every rank."""
    if user_env is not None:
        return Standardized(user_env)
    if is_atari(env_id):
        return functools.partial(_make_atari, env_id)
    from envs.registry import EnvFactory

    return Standardized(EnvFactory.from_id(env_id))


_SPACES: dict[Any, tuple[Any, Any, float | None]] = {}


def _spaces(factory: Callable[[], Any]) -> tuple[Any, Any, float | None]:
    # Building an env can cost (ALE: ~0.1 s); one process asks several times.
    try:
        return _SPACES[factory]
    except (KeyError, TypeError):  # TypeError: an unhashable user factory
        pass
    out = _build_spaces(factory)
    try:
        _SPACES[factory] = out
    except TypeError:
        pass
    return out


def _build_spaces(factory: Callable[[], Any]) -> tuple[Any, Any, float | None]:
    env = factory()
    try:
        spec = getattr(env, "spec", None)
        threshold = getattr(spec, "reward_threshold", None)
        return env.observation_space, env.action_space, threshold
    finally:
        env.close()


def env_spaces(factory: Callable[[], Any]) -> tuple[Any, Any]:
    """``(observation_space, action_space)`` of one env built by ``factory``."""
    obs, act, _ = _spaces(factory)
    return obs, act


def env_name(env_id: str, user_env: Any = None) -> str:
    """How errors name the job's env: the user's factory, else ``--env-id``'s id."""
    return "the env of Parts(env=...)" if user_env is not None else f"{flag('env_id')} {env_id!r}"


def check_env(factory_of: Callable[[], Callable[[], Any]], *, env_id: str, actions: tuple[type, ...],
              job: str, user_env: Any = None) -> None:
    """ValueError naming the env (:func:`env_name`) when it cannot be built or its
    spaces do not suit the job."""
    from gymnasium import spaces

    name = env_name(env_id, user_env)
    try:
        factory = factory_of()
        obs, act = env_spaces(factory)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None
    except Exception as exc:
        import gymnasium as gym

        if isinstance(exc, gym.error.Error | ImportError | ModuleNotFoundError):
            raise ValueError(f"{name}: {exc}") from None
        raise
    if not isinstance(act, actions):
        names = " or ".join(a.__name__ for a in actions)
        raise ValueError(f"{name} has action space {act}; {job} needs {names}")
    if not isinstance(obs, spaces.Box):
        raise ValueError(f"{name} has observation space {obs}; {job} needs a Box (or a Dict/Tuple, flattened)")


# --reward-clip by observation family (algorithms.nets.observation_family): 84x84 frames
# learn from rewards clipped to +-1, as the DQN papers' Atari preprocessing does (Mnih et
# al. 2015; IMPALA's "abs_one"; SB3's and CleanRL's Atari wrappers), so that one learning
# rate suits games that score 1 a point and games that score hundreds; every other family
# learns from its env's own rewards.
REWARD_CLIP_BY_FAMILY: dict[str, dict[str, float]] = {
    "vector": {"reward_clip": math.inf}, "small_image": {"reward_clip": math.inf},
    "frames": {"reward_clip": 1.0}, "other": {"reward_clip": math.inf}}


def fill_reward_clip(env_config: Any, factory: Callable[[], Any]) -> None:
    """``--reward-clip`` left unset: by the observation family of ``factory``'s env
    (each program's check before a run; a section without the field, MADDPG's, is left
    as it is)."""
    if hasattr(env_config, "reward_clip"):
        fill_by_family(env_config, REWARD_CLIP_BY_FAMILY, factory)


def learning_rewards(env: Any, env_config: Any) -> Any:
    """The vector env ``env`` as a job's roles step it: rewards clipped to ``+-``
    ``env_config.reward_clip`` (``--reward-clip``; None, inf or a section without it, as
    MADDPG's: ``env`` itself), the game's own kept in each step's infos
    (:data:`algorithms.rollout.GAME_REWARD`) for the episode returns."""
    bound = reward_bound(env_config)
    return env if math.isinf(bound) else ClippedRewards(env, bound=bound)


def reward_bound(env_config: Any) -> float:
    """``env_config.reward_clip``: inf where it is None (a config saved before the
    flag) or the section has none (MADDPG's)."""
    bound = getattr(env_config, "reward_clip", None)
    return math.inf if bound is None else float(bound)


class ClippedRewards:
    """A vector env whose step gives rewards clipped to ``+-bound`` and keeps the game's
    in ``infos[GAME_REWARD]``; everything else is the wrapped env's (its attributes too:
    a subprocess env's ``crash_count``). Clipped here, in the process that steps the
    envs, not in each env: an env's infos would then cross the process boundary on
    every step."""

    def __init__(self, env: Any, *, bound: float) -> None:
        if not bound > 0:
            raise ValueError(f"{flag('reward_clip')} must be > 0, got {bound}")
        self.env, self.bound = env, float(bound)

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        import numpy as np

        from algorithms.rollout import GAME_REWARD

        obs, reward, terminated, truncated, infos = self.env.step(actions)
        game = np.asarray(reward)
        infos = {**infos, GAME_REWARD: game, f"_{GAME_REWARD}": np.ones(game.shape, dtype=bool)}
        return obs, np.clip(game, -self.bound, self.bound), terminated, truncated, infos

    def __getattr__(self, name: str) -> Any:
        if name == "env":  # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.env, name)


def vector_env_options(config: Any) -> dict[str, Any]:
    """The keywords of ``make_vector_env`` / ``MultiAgentVectorEnv`` that every job's
    actor (worker) env takes from its config: ``--env-workers`` N is N subprocesses
    with every env in one of them, so each env is isolated, restartable and timed
    (against the actor's process stepping a share, measured on 2 busy cores with 8
    envs: CartPole the same, MPE 35% faster, a 200 us env 20% slower); a worker
    killed from outside (the OOM killer) is replaced up to ``--max-restarts`` times,
    while one killed for hanging past ``--env-step-timeout`` ends the run naming the
    env (it would likely hang again)."""
    from experiments.runtime.config import effective_step_timeout

    workers = config.env.env_workers
    return {"num_workers": workers, "step_in_parent": False,
            "step_timeout": effective_step_timeout(config.env.env_step_timeout, workers),
            "restart_on_crash": workers > 0, "restart_on_timeout": False,
            "max_restarts": config.run.max_restarts}


def target_return(given: float | None, factory: Callable[[], Any]) -> float:
    """``--target-return``, else the env's reward threshold, else never."""
    if given is not None:
        return float(given)
    threshold = _spaces(factory)[2]
    return math.inf if threshold is None else float(threshold)


def fill_by_family(section: Any, defaults: Mapping[str, Mapping[str, Any]],
                   factory: Callable[[], Any], *, run_budget: int | None = None) -> None:
    """Set the fields of the config ``section`` left ``None`` to
    ``defaults[family][field]``, where ``family`` is the observation family of the
    env ``factory`` makes (:func:`algorithms.nets.observation_family`: the rule that
    also picks the default network); a default of :data:`RUN_BUDGET` becomes
    ``run_budget`` (the run's ``--max-env-steps``). The env is built only when a field
    is unset."""
    unset = [name for name in next(iter(defaults.values())) if getattr(section, name) is None]
    if not unset:
        return
    from algorithms.nets import observation_family

    obs_space, _ = env_spaces(factory)
    fill_family(section, defaults, observation_family(obs_space.shape or ()), run_budget=run_budget)


def fill_family(section: Any, defaults: Mapping[str, Mapping[str, Any]], family: str, *,
                run_budget: int | None = None) -> None:
    """:func:`fill_by_family` where the observation ``family`` is known: the fields of
    ``section`` left ``None`` set to ``defaults[family]``'s (:data:`RUN_BUDGET`:
    ``run_budget``)."""
    for name, value in defaults[family].items():
        if getattr(section, name) is not None:
            continue
        if value == RUN_BUDGET:
            if run_budget is None:
                raise TypeError(f"the {family} default of {name} is the run's budget: pass run_budget")
            value = run_budget
        setattr(section, name, value)
