"""Checks for state dicts on their way back into objects (checkpoint resume).

A checkpoint is data from disk: every ``load_state_dict`` reads what it is given
through these checks first and changes nothing until all of it has passed, so a
bad state raises :class:`~rlpar.errors.StateError` naming the loader, the key path
and what is wrong, instead of a bare ``KeyError`` deep inside, a half-loaded
object, or a silent load that breaks the next sample.

Usage: ``where = StatePath.of(self)``; ``state = mapping(state, where, required=...)``;
``alpha = number(hyper["alpha"], where["hyper"]["alpha"], low=0)``.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from rlpar.errors import StateError


@dataclass(frozen=True)
class StatePath:
    """Where a value sits in a state being loaded, and who loads it (for messages)."""

    owner: str
    path: str = "state"

    @classmethod
    def of(cls, obj: Any, method: str = "load_state_dict") -> StatePath:
        return cls(f"{type(obj).__name__}.{method}")

    def __getitem__(self, key: Any) -> StatePath:
        return StatePath(self.owner, f"{self.path}[{key!r}]")

    def error(self, problem: str) -> StateError:
        return StateError(self.owner, self.path, problem)


def describe(value: Any) -> str:
    """A short description of a value that has the wrong type."""
    if isinstance(value, (torch.Tensor, np.ndarray)):
        return f"{type(value).__name__} of shape {tuple(value.shape)} and dtype {value.dtype}"
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def mapping(value: Any, where: StatePath, *, required: Collection[str] = (),
            optional: Collection[str] | None = (), hint: str = "") -> Mapping[Any, Any]:
    """``value`` if it is a mapping holding every ``required`` key and no key beyond
    ``required`` and ``optional`` (``optional=None``: any other keys)."""
    if not isinstance(value, Mapping):
        raise where.error(f"must be a mapping, got {describe(value)}")
    missing = [k for k in required if k not in value]
    if missing:
        raise where.error(f"is missing key(s) {missing}{hint}")
    if optional is not None:
        known = set(required) | set(optional)
        unexpected = [k for k in value if k not in known]
        if unexpected:
            raise where.error(f"has unexpected key(s) {unexpected}{hint}")
    return value


def sequence(value: Any, where: StatePath, *, length: int | None = None) -> Sequence[Any]:
    """``value`` if it is a list or tuple (of ``length`` items when given)."""
    if not isinstance(value, (list, tuple)):
        raise where.error(f"must be a list, got {describe(value)}")
    if length is not None and len(value) != length:
        raise where.error(f"must hold {length} items, got {len(value)}")
    return value


def _scalar(value: Any) -> Any:
    # A 0-d tensor or array stands for its number (int(t) and float(t) accept them).
    if isinstance(value, (torch.Tensor, np.ndarray)) and value.ndim == 0:
        return value.item()
    return value


def integer(value: Any, where: StatePath, *, low: int | None = 0, high: int | None = None) -> int:
    """``value`` as an int in ``[low, high]`` (None: unbounded)."""
    got = _scalar(value)
    if isinstance(got, bool) or not isinstance(got, numbers.Integral):
        raise where.error(f"must be an int, got {describe(value)}")
    got = int(got)
    if (low is not None and got < low) or (high is not None and got > high):
        bounds = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise where.error(f"must be an int {bounds}, got {got}")
    return got


def number(value: Any, where: StatePath, *, low: float = -math.inf, high: float = math.inf,
           open_low: bool = False) -> float:
    """``value`` as a finite float in ``[low, high]`` (``(low, high]`` with ``open_low``)."""
    got = _scalar(value)
    if isinstance(got, bool) or not isinstance(got, numbers.Real):
        raise where.error(f"must be a number, got {describe(value)}")
    got = float(got)
    if not math.isfinite(got) or got < low or got > high or (open_low and got == low):
        left = "(" if open_low else "["
        raise where.error(f"must be a finite number in {left}{low}, {high}], got {got}")
    return got


def array(value: Any, where: StatePath, *, ndim: int | None = None,
          dtype: np.dtype | None = None, kinds: str = "biuf") -> np.ndarray:
    """``value`` (a numpy array or CPU tensor) as a numpy array, without a copy."""
    if isinstance(value, torch.Tensor):
        got = value.detach().cpu().numpy()
    elif isinstance(value, np.ndarray):
        got = value
    else:
        raise where.error(f"must be an array, got {describe(value)}")
    if ndim is not None and got.ndim != ndim:
        raise where.error(f"must have {ndim} dimension(s), got shape {got.shape}")
    if dtype is not None and got.dtype != dtype:
        raise where.error(f"must have dtype {dtype}, got {got.dtype}")
    if got.dtype.kind not in kinds:
        raise where.error(f"must be numeric, got dtype {got.dtype}")
    return got


def module_state(value: Any, where: StatePath, module: torch.nn.Module) -> Mapping[str, Any]:
    """``value`` if ``module.load_state_dict(value)`` (strict) takes it whole: the
    module's keys, tensors of its shapes. torch checks the same, but only after it
    has copied the entries that fit, which would leave a half-loaded module."""
    own = module.state_dict()
    state = mapping(value, where, required=list(own))
    for key, mine in own.items():
        got = state[key]
        if not isinstance(got, torch.Tensor):
            raise where[key].error(f"must be a tensor, got {describe(got)}")
        if got.shape != mine.shape:
            raise where[key].error(
                f"has shape {tuple(got.shape)}, the module's is {tuple(mine.shape)}")
    return state


def optimizer_state(value: Any, where: StatePath,
                    optimizer: torch.optim.Optimizer) -> Mapping[str, Any]:
    """``value`` if it is a state of ``optimizer``'s layout: as many parameter groups
    of as many parameters, per-parameter tensors shaped like their parameter, and
    what the optimizer itself accepts (its ``check_param_group`` and
    ``check_param_state``, if it has them: ValueError, KeyError or TypeError)."""
    state = mapping(value, where, required=("state", "param_groups"))
    groups = sequence(state["param_groups"], where["param_groups"],
                      length=len(optimizer.param_groups))
    params: dict[Any, torch.Tensor] = {}
    check_group = getattr(optimizer, "check_param_group", None)
    for i, (saved, mine) in enumerate(zip(groups, optimizer.param_groups)):
        at = where["param_groups"][i]
        saved = mapping(saved, at, required=("params",), optional=None)
        ids = sequence(saved["params"], at["params"], length=len(mine["params"]))
        for j, (pid, param) in enumerate(zip(ids, mine["params"])):
            if integer(pid, at["params"][j], low=None) in params:  # torch numbers them 0, 1, ...
                raise at["params"][j].error(f"repeats parameter {pid}")
            params[pid] = param
        if check_group is not None:
            try:
                check_group(saved)
            except (TypeError, ValueError, KeyError) as exc:
                raise at.error(f"does not fit {type(optimizer).__name__}: {exc}") from None
    per_param = mapping(state["state"], where["state"], optional=None)
    check_entry = getattr(optimizer, "check_param_state", None)
    for pid, entry in per_param.items():
        at = where["state"][pid]
        if pid not in params:
            raise at.error("is the state of a parameter that no parameter group lists")
        for name, tensor in mapping(entry, at, optional=None).items():
            shape = params[pid].shape
            if isinstance(tensor, torch.Tensor) and tensor.dim() > 0 and tensor.shape != shape:
                raise at[name].error(
                    f"has shape {tuple(tensor.shape)}, its parameter's is {tuple(shape)}")
        if check_entry is not None:
            try:
                check_entry(entry, params[pid])
            except (TypeError, ValueError, KeyError) as exc:
                raise at.error(f"does not fit {type(optimizer).__name__}: {exc}") from None
    return state


def torch_loader(state: Mapping[str, Any], where: StatePath, *,
                 modules: Mapping[str, torch.nn.Module | Sequence[torch.nn.Module]] | None = None,
                 optimizers: Mapping[str, torch.optim.Optimizer] | None = None) -> Callable[[], None]:
    """Check ``state[name]`` against each named module (or list of modules) and
    optimizer now; return the function that loads them all, to call once the rest
    of ``state`` has passed too (then nothing of it can fail)."""
    loads: list[tuple[Any, Mapping[str, Any]]] = []
    for name, module in (modules or {}).items():
        if isinstance(module, torch.nn.Module):
            loads.append((module, module_state(state[name], where[name], module)))
            continue
        saved = sequence(state[name], where[name], length=len(module))
        loads += [(m, module_state(s, where[name][i], m)) for i, (m, s) in enumerate(zip(module, saved))]
    for name, optimizer in (optimizers or {}).items():
        loads.append((optimizer, optimizer_state(state[name], where[name], optimizer)))

    def load() -> None:
        for target, checked in loads:
            target.load_state_dict(checked)

    return load


def generator_state(value: Any, where: StatePath, generator: np.random.Generator) -> dict[str, Any]:
    """``value`` as a state of ``generator``'s bit generator, tried on a scratch one
    (numpy checks it there, and ``generator`` is untouched when it is not one)."""
    scratch = type(generator.bit_generator)()
    try:
        scratch.state = value
    except Exception as exc:  # numpy raises TypeError, ValueError, KeyError, OverflowError
        raise where.error(
            f"is not a {type(scratch).__name__} state ({type(exc).__name__}: {exc})") from None
    return scratch.state
