"""Corrupting a nested state dict at one place, for the tests that check what a
``load_state_dict`` does with a state that is not the one it saved."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import torch

DELETE = object()  # put in place of a value: remove its key (or list item)


def paths(value: Any, prefix: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    """Every place in a nested state: (path to it, the value there)."""
    yield prefix, value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from paths(v, (*prefix, k))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from paths(v, (*prefix, i))


def replaced(value: Any, path: tuple, new: Any) -> Any:
    """A copy of nested ``value`` with the item at ``path`` replaced by ``new`` (or
    removed, for ``DELETE``); nothing shared with the original is modified, so a
    state whose arrays are views of a live buffer can be corrupted safely."""
    if not path:
        return new
    head, rest = path[0], path[1:]
    out = dict(value) if isinstance(value, dict) else list(value)
    if rest or new is not DELETE:
        out[head] = replaced(value[head], rest, new)
    else:
        del out[head]
    return out if isinstance(value, dict) else type(value)(out)


def corruptions(value: Any) -> list[Any]:
    """What may be put where ``value`` was: junk of every type, and near misses
    (a truncated, retyped or negated tensor, a number off by one)."""
    out = [DELETE, None, -1, 2**70, math.nan, -0.5, 1.5, "junk", [], {}, True]
    if isinstance(value, torch.Tensor) and value.dim() > 0:
        out += [value[:-1], value.to(torch.float64), value.to(torch.int32), -value.to(torch.float32),
                value.reshape(-1)[:1], torch.full_like(value.float(), math.nan)]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        out += [value + 1, value - 1, -value, float(value)]
    return out
