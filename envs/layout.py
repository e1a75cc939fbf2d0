"""Flat array layout of (possibly composite) gymnasium spaces.

Every vector env here keeps its batch in a handful of flat numpy arrays (one per
leaf of the observation/action space) so that a worker process and the parent can
share them through one block of shared memory, and so that in-process and
subprocess envs run the same stepping code on the same arrays.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces

LEAF_SPACES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)
_ALIGN = 64  # cache line: keeps two workers' rows of one array from sharing lines at the edges


@dataclass(frozen=True)
class Leaf:
    """One array-valued part of a space: where it sits (path) and its per-env shape/dtype."""

    path: tuple[Any, ...]
    shape: tuple[int, ...]
    dtype: np.dtype


def leaves_of(space: spaces.Space, name: str = "space", path: tuple = ()) -> list[Leaf]:
    """Leaves of ``space`` in a fixed order (Dict keys in the space's order)."""
    if isinstance(space, spaces.Dict):
        out: list[Leaf] = []
        for key, sub in space.spaces.items():
            out += leaves_of(sub, name, (*path, key))
        return out
    if isinstance(space, spaces.Tuple):
        out = []
        for i, sub in enumerate(space.spaces):
            out += leaves_of(sub, name, (*path, i))
        return out
    if isinstance(space, spaces.Discrete):
        return [Leaf(path, (), np.dtype(space.dtype))]
    if isinstance(space, LEAF_SPACES):
        return [Leaf(path, tuple(space.shape), np.dtype(space.dtype))]
    raise TypeError(
        f"{name} {space!r} is not supported: use Box, Discrete, MultiDiscrete, MultiBinary "
        "or Dict/Tuple of those"
    )


def flattener(space: spaces.Space) -> Callable[[Any], list[Any]]:
    """A function mapping one (nested) value of ``space`` to its list of leaf values."""
    if isinstance(space, spaces.Dict):
        subs = [(key, flattener(sub)) for key, sub in space.spaces.items()]
        return lambda value: [leaf for key, f in subs for leaf in f(value[key])]
    if isinstance(space, spaces.Tuple):
        subs_t = [flattener(sub) for sub in space.spaces]
        return lambda value: [leaf for i, f in enumerate(subs_t) for leaf in f(value[i])]
    return lambda value: [value]


def assemble(space: spaces.Space, arrays: Sequence[Any]) -> Any:
    """Rebuild the nested structure of ``space`` from its leaf values (inverse of flattener)."""
    it = iter(arrays)

    def build(sub: spaces.Space) -> Any:
        if isinstance(sub, spaces.Dict):
            return {key: build(s) for key, s in sub.spaces.items()}
        if isinstance(sub, spaces.Tuple):
            return tuple(build(s) for s in sub.spaces)
        return next(it)

    return build(space)


@dataclass(frozen=True)
class Field:
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    offset: int


class BlockSpec:
    """Byte layout of named arrays inside one flat buffer (picklable, no data)."""

    def __init__(self, arrays: Sequence[tuple[str, tuple[int, ...], Any]]) -> None:
        fields = []
        offset = 0
        for name, shape, dtype in arrays:
            dtype = np.dtype(dtype)
            fields.append(Field(name, tuple(shape), dtype, offset))
            size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            offset += -(-size // _ALIGN) * _ALIGN
        self.fields = tuple(fields)
        self.nbytes = max(offset, _ALIGN)

    def views(self, buffer: Any) -> dict[str, np.ndarray]:
        """Numpy views of every field on ``buffer`` (anything exposing the buffer protocol)."""
        raw = np.frombuffer(buffer, dtype=np.uint8, count=self.nbytes)
        out = {}
        for f in self.fields:
            size = int(np.prod(f.shape, dtype=np.int64)) * f.dtype.itemsize
            out[f.name] = raw[f.offset : f.offset + size].view(f.dtype).reshape(f.shape)
        return out


def vector_block(
    obs_space: spaces.Space, act_space: spaces.Space, num_envs: int
) -> tuple[BlockSpec, int, int]:
    """Block holding a whole vector env's batch: obs leaves, reward, flags, action leaves,
    and the per-group progress slots."""
    obs_leaves = leaves_of(obs_space, "observation space")
    act_leaves = leaves_of(act_space, "action space")
    arrays: list[tuple[str, tuple[int, ...], Any]] = []
    arrays += [
        (f"obs{i}", (num_envs, *leaf.shape), leaf.dtype) for i, leaf in enumerate(obs_leaves)
    ]
    arrays += [
        (f"act{i}", (num_envs, *leaf.shape), leaf.dtype) for i, leaf in enumerate(act_leaves)
    ]
    arrays += [
        ("reward", (num_envs,), np.float64),
        ("terminated", (num_envs,), np.bool_),
        ("truncated", (num_envs,), np.bool_),
        # Which env a group is inside (envs.runner.EnvRunner): slot ``lo`` of each group.
        ("progress", (num_envs,), np.int64),
    ]
    return BlockSpec(arrays), len(obs_leaves), len(act_leaves)
