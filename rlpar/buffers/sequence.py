"""Sequences as replay items: fixed-length stretches of steps, stored whole.

A buffer's storage is generic over named fields with any per-item shape
(:mod:`rlpar.buffers.spec`), so a sequence is one item whose *step* fields carry a
leading time axis of ``length`` steps, beside *start* fields without one (for
example a recurrent state taken at the sequence's first step) and a boolean
``mask`` of its valid steps (a sequence that ends early is padded). Every buffer
then holds, samples, prioritizes, shards, hosts and checkpoints sequences as it does
any item: :class:`~rlpar.buffers.PrioritizedReplayBuffer` locally,
:class:`~rlpar.buffers.DistributedPrioritizedReplayBuffer` over shards, with the
same semantics (R2D2's replay: Kapturowski et al. 2019, "Recurrent Experience
Replay in Distributed Reinforcement Learning", ICLR).

:func:`sequence_spec` declares such a layout up front, so that every shard allocates
the same columns and a wrong sequence fails at its ``add``; :func:`mix_priorities`
turns per-step priorities into one per sequence (R2D2 sec. 2.3: a mix of the
sequence's largest and mean per-step priority).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rlpar.buffers.spec import FieldSpec, as_array, normalize_spec

MASK = "mask"


def sequence_spec(
    *,
    length: int,
    steps: Mapping[str, Any],
    start: Mapping[str, Any] | None = None,
    mask: str = MASK,
) -> dict[str, FieldSpec]:
    """The spec of sequences of ``length`` steps: each of ``steps`` (per-step shape and
    dtype, as a :class:`FieldSpec` or ``(shape, dtype)``) gets a leading time axis,
    ``start`` fields are stored once per sequence as given, and ``mask`` is a
    ``(length,)`` bool field of the valid steps."""
    if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length < 1:
        raise ValueError(f"length must be an int >= 1, got {length!r}")
    per_step = normalize_spec(steps)
    once = normalize_spec(start) if start else {}
    clash = sorted(set(per_step) & set(once))
    if clash:
        raise ValueError(f"fields {clash} are both step and start fields")
    if mask in per_step or mask in once:
        raise ValueError(f"the mask field {mask!r} is also a step or start field")
    spec = {k: FieldSpec((int(length), *f.shape), f.dtype) for k, f in per_step.items()}
    spec.update(once)
    spec[mask] = FieldSpec((int(length),), np.bool_)
    return spec


def mix_priorities(per_step: Any, mask: Any, *, eta: float) -> np.ndarray:
    """One priority per sequence, ``eta * max_t p_t + (1 - eta) * mean_t p_t`` over the
    steps where ``mask`` is set (R2D2's ``eta = 0.9``). ``per_step`` and ``mask`` are
    ``(sequences, steps)``; a sequence without a masked step gets 0. float64."""
    p = np.asarray(as_array(per_step), dtype=np.float64)
    m = np.asarray(as_array(mask), dtype=bool)
    if p.ndim != 2 or m.shape != p.shape:
        raise ValueError(f"per_step and mask must be (sequences, steps) of one shape, got "
                         f"{p.shape} and {m.shape}")
    if not 0.0 <= eta <= 1.0:
        raise ValueError(f"eta must be in [0, 1], got {eta}")
    if m.any() and not (p[m].min() >= 0.0 and p[m].max() < np.inf):
        raise ValueError("per_step priorities must be finite and >= 0 where mask is set")
    masked = np.where(m, p, 0.0)  # priorities are >= 0: 0 never wins a max over masked ones
    count = m.sum(axis=1)
    mean = masked.sum(axis=1) / np.maximum(count, 1)
    return eta * masked.max(axis=1, initial=0.0) + (1.0 - eta) * mean
