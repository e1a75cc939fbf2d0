"""Hyper-parameter fields that carry their own documentation.

An algorithm's config dataclass is also its job's ``learn`` section
(``experiments/<job>.py``): the command line (:mod:`experiments.runtime.cli`) makes
one flag of each :func:`param`, with its ``help``; an :func:`internal` field is the
library's only (no flag, and a job's ``config.json`` holds it only when it differs
from its default). Kept here, not in ``experiments``, since algorithms never import
the job runtime.

A field filled "by observation family" is typed ``X | None = None``: the job
resolves it before it builds the algorithm, and :func:`require` refuses one left
``None`` there, naming its flag."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any, Literal, get_args

# A family default meaning the run's own ``--max-env-steps`` (``lr_anneal_steps``: the
# rate reaches 0 as the run ends, as CleanRL anneals over its total_timesteps); the job
# (``experiments.runtime.envs.fill_by_family``) replaces it, so it never reaches a learner.
RUN_BUDGET = -1


def param(default: Any = dataclasses.MISSING, *, help: str, default_factory: Any = dataclasses.MISSING,
          allow_inf: bool = False) -> Any:
    """A field its job sets by a flag named after it, with this help text."""
    metadata = {"help": help, "allow_inf": allow_inf}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


# The torsos a config's ``cnn`` field names for ``(C, 84, 84)`` frames
# (:data:`algorithms.nets.FRAMES_CNNS` builds them); here so configs check it without torch.
Cnn = Literal["nature", "small"]
CNNS: tuple[str, ...] = get_args(Cnn)


def cnn_param() -> Any:
    """The ``cnn`` field of a config whose default networks take frames."""
    return param("nature", help=(
        "the torso for (C, 84, 84) frames: nature (Mnih et al. 2015: 3 convs, 512 features) or small "
        "(Mnih et al. 2013: 2 convs, 256 features, a third of the work); other observations ignore it"))


def check_cnn(cnn: object) -> None:
    """ValueError unless ``cnn`` names one of :data:`CNNS`."""
    if cnn not in CNNS:
        raise ValueError(f"cnn must be one of {', '.join(CNNS)}, got {cnn!r}")


def internal(default: Any = dataclasses.MISSING, *, default_factory: Any = dataclasses.MISSING) -> Any:
    """A field of the library's only: no flag."""
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata={"flag": False})
    return dataclasses.field(default=default, metadata={"flag": False})


def is_flag(f: dataclasses.Field) -> bool:
    return f.metadata.get("flag", True)


def require(config: Any, names: Iterable[str]) -> None:
    """ValueError naming the flags of ``names`` left ``None`` (filled by the job by the
    env's observation family; a library user gives them)."""
    unset = ["--" + n.replace("_", "-") for n in names if getattr(config, n) is None]
    if unset:
        raise ValueError(f"{', '.join(unset)} unset: the job fills them by the env's observations "
                         f"(env_defaults); set them when building {type(config).__name__} yourself")
