"""PettingZoo parallel envs by id: the mpe2 scenarios by short name, ``module:factory``
and the built-in cooperative envs.

:func:`lookup` gives an id's factory and the keyword parameters it takes, read from
its signature (for an mpe2 scenario from its ``raw_env``: the ``parallel_env`` that
builds it only shows ``**kwargs``), so a caller binds only keywords the env accepts.
:class:`ParallelEnvFactory` is the bound, picklable zero-argument factory; what it
builds is checked to follow the parallel API (an AEC env, or a gymnasium Env, is
refused with the reason).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import re
from collections.abc import Callable
from typing import Any

# Short name -> module of the installed mpe2 package (``mpe2.<module>.parallel_env``).
MPE_MODULES = {
    "simple": "simple_v3",
    "simple_adversary": "simple_adversary_v3",
    "simple_crypto": "simple_crypto_v3",
    "simple_push": "simple_push_v3",
    "simple_reference": "simple_reference_v3",
    "simple_speaker_listener": "simple_speaker_listener_v4",
    "simple_spread": "simple_spread_v3",
    "simple_tag": "simple_tag_v3",
    "simple_world_comm": "simple_world_comm_v3",
    "collect_treasure": "collect_treasure_v1",
    "simple_formation": "simple_formation_v1",
    "simple_line": "simple_line_v1",
}
BUILTIN = ("cooperative", "cooperative_hetero")


def known_ids() -> list[str]:
    """The ids :func:`lookup` knows by name (``module:factory`` works besides)."""
    return sorted(MPE_MODULES) + list(BUILTIN)


@dataclasses.dataclass(frozen=True)
class EnvEntry:
    """An id's factory; ``params``: the keywords it takes (None: it only shows ``**kwargs``)."""

    factory: Callable[..., Any]
    params: frozenset[str] | None


def keyword_params(fn: Callable[..., Any]) -> frozenset[str] | None:
    """Names ``fn`` accepts as keywords; None when its signature tells nothing
    (unreadable, or only ``**kwargs``)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    names = frozenset(p.name for p in signature.parameters.values() if p.kind in kinds)
    if not names and any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.parameters.values()):
        return None
    return names


def lookup(env_id: str) -> EnvEntry:
    """The factory of ``env_id``; ValueError with the reason (unknown id, module not
    installed or not importable, attribute missing or not callable)."""
    if env_id in BUILTIN:
        from envs.multiagent.cooperative import CooperativeEnv

        factory = functools.partial(CooperativeEnv, heterogeneous=env_id == "cooperative_hetero")
        return EnvEntry(factory, keyword_params(factory))
    if ":" in env_id:
        return _by_path(env_id)
    short = re.sub(r"_v\d+$", "", env_id)
    if short in MPE_MODULES and env_id in (short, MPE_MODULES[short]):
        try:
            module = importlib.import_module(f"mpe2.{MPE_MODULES[short]}")
        except ImportError as exc:
            raise ValueError(f"{env_id!r} is an mpe2 scenario and mpe2 is not importable ({exc}); "
                             "install the mpe extra: pip install -e '.[mpe]'") from None
        return EnvEntry(module.parallel_env, keyword_params(module.raw_env))
    raise ValueError(f"unknown env id {env_id!r}; known: {', '.join(known_ids())}, "
                     "or 'module:factory' (a callable returning a PettingZoo ParallelEnv)")


def _by_path(env_id: str) -> EnvEntry:
    module_name, _, attr = env_id.partition(":")
    if not module_name or not attr:
        raise ValueError(f"{env_id!r}: expected 'module:factory'")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"{env_id!r}: cannot import module {module_name!r} ({exc})") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"{env_id!r}: module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"{env_id!r}: {attr!r} is not callable (expected a factory of a ParallelEnv)")
    return EnvEntry(obj, keyword_params(obj))


class NotParallelEnv(TypeError):
    """A factory built something other than a PettingZoo ParallelEnv."""


def check_parallel_env(env: Any, *, source: str) -> None:
    """NotParallelEnv (a TypeError) unless ``env`` follows PettingZoo's parallel API with a fixed,
    non-empty agent set (what :class:`~envs.multiagent.ParallelEnvAdapter` needs)."""
    kind = type(env).__name__
    if callable(getattr(type(env), "last", None)) and hasattr(type(env), "agent_iter"):
        raise NotParallelEnv(f"{source} returned an AEC env ({kind}); a parallel env steps all agents "
                        "at once: give the parallel version (e.g. the module's parallel_env)")
    missing = [name for name in ("observation_space", "action_space", "reset", "step")
               if not callable(getattr(env, name, None))]
    agents = getattr(env, "possible_agents", None)
    if missing or not isinstance(agents, list | tuple):
        what = f"lacks {missing}" if missing else "has no possible_agents list"
        raise NotParallelEnv(f"{source} returned {kind}, not a PettingZoo ParallelEnv (it {what})")
    if not agents:
        raise NotParallelEnv(f"{source} returned a ParallelEnv with no possible_agents")


@dataclasses.dataclass(frozen=True)
class ParallelEnvFactory:
    """``factory(**kwargs)``, checked to be a ParallelEnv; picklable when ``factory`` is
    (cloudpickle ships it to the env workers)."""

    factory: Callable[..., Any]
    kwargs: tuple[tuple[str, Any], ...] = ()
    source: str = "the env factory"

    def __call__(self) -> Any:
        env = self.factory(**dict(self.kwargs))
        try:
            check_parallel_env(env, source=self.source)
        except NotParallelEnv:
            close = getattr(env, "close", None)
            if callable(close):
                close()
            raise
        return env
