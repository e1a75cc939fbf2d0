"""Env ids in any process: one place that turns a user's env id into an env.

A user names an env the way gymnasium does, and every rank of a job must understand
the name, including ranks started fresh (forkserver, spawn, torchrun) that never saw
the registrations the user's script made:

* ``"CartPole-v1"``: a registered id;
* ``"module:EnvId"``: gymnasium's form for an env registered by importing ``module``;
* ``"ALE/Pong-v5"``, ``"PongNoFrameskip-v4"``: registered by importing ``ale_py``
  (the ``atari`` extra);
* ``"MinAtar/Breakout-v0"`` (all 6 actions: the protocol of Young & Tian 2019, "MinAtar:
  An Atari-Inspired Testbed for Thorough and Reproducible Reinforcement Learning
  Experiments", arXiv 1903.03176) and ``-v1`` (minimal action set), for Asterix,
  Breakout, Freeway, Seaquest and SpaceInvaders (the ``minatar`` extra): the ids
  ``minatar.gym.register_envs()`` would register, on :class:`envs.minatar.MinAtarEnv`
  (MinAtar's gym env with exact, faster engines for some games; an id a user already
  registered with MinAtar's own entry point is left as it is). gymnasium 1.x does not
  load MinAtar's plugin entry point, so nothing else registers them. Both keep MinAtar's
  defaults: sticky actions with probability 0.1, difficulty ramping, no episode cap;
* ``"rlpar/StatelessCartPole-v1"``: CartPole without its velocities (:mod:`envs.partial`),
  a partially observed test env for recurrent agents;
* ``"MinAtar/Breakout-gymnax-v0"`` (and the other four games): MinAtar as gymnax runs
  it (Lange 2022, the JAX ports PQN's authors trained on): the minimal action set,
  ``sticky_action_prob=0``, and a cap of 1,000 steps (Freeway: 2,500, gymnax's, which
  is also where MinAtar's Freeway ends its episodes itself), a truncation here (gymnax
  counts it as an episode end). Registered with the other MinAtar ids.

:func:`ensure_registered` makes an id known in this process; :func:`env_spec` and
:func:`make_env` use it. :class:`EnvFactory` captures the :class:`EnvSpec` in the parent,
so a child builds the same env from the spec (its entry point travels with it) even when
the id was registered only in the parent's ``__main__``.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec
from gymnasium.wrappers import FlattenObservation

_MINATAR_ENTRY_POINT = "envs.minatar:MinAtarEnv"
# MinAtar's games: the id's name and minatar's module (minatar.gym's naming).
MINATAR_GAMES = {"Asterix": "asterix", "Breakout": "breakout", "Freeway": "freeway", "Seaquest": "seaquest",
                 "SpaceInvaders": "space_invaders"}
# The gymnax variant (see the module docstring): gymnax's episode caps, its action set.
GYMNAX_EPISODE_STEPS = {"Asterix": 1000, "Breakout": 1000, "Freeway": 2500, "Seaquest": 1000,
                        "SpaceInvaders": 1000}
GYMNAX_KWARGS = {"use_minimal_action_set": True, "sticky_action_prob": 0.0}
_lock = threading.Lock()


def ensure_registered(env_id: str) -> str:
    """Make ``env_id`` known to ``gym.make`` in this process; return the bare id.

    ``"module:EnvId"`` imports ``module`` (whose import registers the env) and returns
    ``"EnvId"``; ALE and MinAtar ids register their package's envs. Other ids are
    returned as they are, registered or not (:func:`env_spec` reports unknown ones).
    Cheap on repeat calls: a dict lookup, plus a ``sys.modules`` lookup for the module
    form. A missing module or package is a ``ValueError`` naming the id and the fix.
    """
    if not isinstance(env_id, str) or not env_id.strip():
        raise ValueError(f"an env id must be a non-empty string, got {env_id!r}")
    bare = env_id
    if ":" in env_id:
        module, bare = env_id.split(":", 1)
        if not module or not bare:
            raise ValueError(f"env id {env_id!r}: the 'module:EnvId' form needs both parts")
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ValueError(f"env id {env_id!r}: cannot import module {module!r} ({exc}); "
                             "it must be importable in every process that builds the env") from exc
    if bare in gym.registry:
        return bare
    namespace = bare.split("/", 1)[0] if "/" in bare else None
    if namespace == "ALE" or "NoFrameskip" in bare:
        _register_ale(env_id)
    elif namespace == "MinAtar":
        _register_minatar(env_id)
    elif namespace == "rlpar":
        _register_rlpar(env_id)
    return bare


def _register_rlpar(env_id: str) -> None:
    from envs.partial import IDS

    with _lock:
        for name, (entry_point, steps, threshold) in IDS.items():
            if name not in gym.registry:
                gym.register(id=name, entry_point=entry_point, max_episode_steps=steps, reward_threshold=threshold)


def _register_ale(env_id: str) -> None:
    try:
        import ale_py  # importing it registers the ALE/... and ...NoFrameskip ids
    except ImportError as exc:
        raise ValueError(f"env id {env_id!r} is an Atari game but ale-py is not installed "
                         "(pip install 'rlpar[atari]')") from exc
    gym.register_envs(ale_py)


def _register_minatar(env_id: str) -> None:
    from envs.minatar_import import import_minatar

    try:
        import_minatar()  # the extra is installed: envs.minatar builds on it
    except ImportError as exc:
        raise ValueError(f"env id {env_id!r} is a MinAtar game but minatar is not installed "
                         "(pip install 'rlpar[minatar]')") from exc
    with _lock:
        for game, module in MINATAR_GAMES.items():
            # minatar.gym.register_envs()'s ids (v0: all six actions, v1: the minimal set).
            for version, minimal in (("v0", False), ("v1", True)):
                _register_once(f"MinAtar/{game}-{version}", game=module, use_minimal_action_set=minimal)
            _register_once(minatar_id(game, "gymnax"), game=module, **GYMNAX_KWARGS,
                           max_episode_steps=GYMNAX_EPISODE_STEPS[game])


def _register_once(env_id: str, *, max_episode_steps: int | None = None, **kwargs: Any) -> None:
    if env_id not in gym.registry:  # a user's registration (minatar's own, say) stays
        gym.register(id=env_id, entry_point=_MINATAR_ENTRY_POINT, kwargs=kwargs,
                     max_episode_steps=max_episode_steps)


def minatar_id(game: str, variant: str = "paper") -> str:
    """The id of a MinAtar game (``"Breakout"``, ...): ``"paper"``, all six actions
    (``-v0``, Young & Tian's protocol), or ``"gymnax"`` (see the module docstring)."""
    if game not in MINATAR_GAMES:
        raise ValueError(f"unknown MinAtar game {game!r}; choose from {list(MINATAR_GAMES)}")
    if variant == "paper":
        return f"MinAtar/{game}-v0"
    if variant == "gymnax":
        return f"MinAtar/{game}-gymnax-v0"
    raise ValueError(f"unknown MinAtar variant {variant!r}; choose 'paper' or 'gymnax'")


def env_spec(env_id: str) -> EnvSpec:
    """The registered :class:`EnvSpec` of ``env_id`` (any form :func:`ensure_registered`
    takes); an unknown id is a ``ValueError`` carrying gymnasium's suggestion."""
    bare = ensure_registered(env_id)
    try:
        return gym.spec(bare)
    except gym.error.Error as exc:
        raise ValueError(f"unknown env id {env_id!r}: {exc}") from None


def make_env(env_id: str, **kwargs: Any) -> gym.Env:
    """``gym.make`` for any form of id; ``kwargs`` go to ``gym.make`` (and from there to
    the env's constructor, which rejects unknown names).

    The env is built from its spec, so gymnasium's "a newer version exists" warning is
    not raised: MinAtar's v0 is the paper's protocol, not an outdated version of v1.
    """
    return gym.make(env_spec(env_id), **kwargs)


def flatten_observations(env: gym.Env) -> gym.Env:
    """``env`` with its observations flattened into one vector (gymnasium's
    ``FlattenObservation``: Discrete parts one-hot, Dict/Tuple parts concatenated) so
    the MLP networks can take them. Box observations are left as they are (images stay
    images); a space with no fixed-size flat form (Sequence, Graph) is a ``ValueError``."""
    if isinstance(env.observation_space, gym.spaces.Box):
        return env
    try:
        flat = gym.spaces.flatten_space(env.observation_space)
    except NotImplementedError:
        flat = None
    if not isinstance(flat, gym.spaces.Box):
        raise ValueError(f"observation space {env.observation_space} has no fixed-size flat "
                         "form; wrap the env to give it a Box observation space")
    return FlattenObservation(env)


@dataclass(frozen=True, kw_only=True)
class EnvFactory:
    """A picklable zero-argument env factory for vector-env workers and remote ranks.

    ``spec`` is captured where the factory is made (:meth:`from_id`), and the env is built
    with ``gym.make(spec)``: a child process needs no registration of its own, only the
    spec's entry point. A string entry point (``"pkg.module:Class"``) is imported there; a
    callable one travels inside the pickle, by value when it was defined in ``__main__``
    (cloudpickle, as the vector envs and ``rlpar.parallel`` send factories), so an env
    that the user's script registered with ``gym.register(id=..., entry_point=SomeClass)``
    is rebuilt in a rank that never ran that script's registration.
    """

    env_id: str
    spec: EnvSpec = field(hash=False)
    env_kwargs: Mapping[str, Any] = field(default_factory=dict, hash=False)
    flatten: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.spec, EnvSpec):
            raise TypeError(f"spec must be a gymnasium EnvSpec, got {type(self.spec).__name__}")
        bare = self.env_id.split(":", 1)[-1] if isinstance(self.env_id, str) else None
        if bare != self.spec.id:
            raise ValueError(f"env_id {self.env_id!r} does not name spec {self.spec.id!r}")
        if not isinstance(self.env_kwargs, Mapping):
            raise TypeError(f"env_kwargs must be a mapping, got {type(self.env_kwargs).__name__}")
        if not isinstance(self.flatten, bool):
            raise TypeError(f"flatten must be a bool, got {self.flatten!r}")

    @classmethod
    def from_id(cls, env_id: str, *, env_kwargs: Mapping[str, Any] | None = None,
                flatten: bool = False) -> EnvFactory:
        """Register ``env_id`` here (any form :func:`ensure_registered` takes) and capture
        its spec; ``env_kwargs`` are passed to ``gym.make`` on every build."""
        return cls(env_id=env_id, spec=env_spec(env_id), env_kwargs=dict(env_kwargs or {}),
                   flatten=flatten)

    def __call__(self) -> gym.Env:
        env = gym.make(self.spec, **self.env_kwargs)
        return flatten_observations(env) if self.flatten else env
