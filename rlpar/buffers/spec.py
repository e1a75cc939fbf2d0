"""Field specs: the shape and dtype of one column of transitions.

A spec is declared up front or inferred from the first batch added; every later
batch is checked against it so that a wrong shape or dtype fails loudly at the
``add`` that caused it instead of corrupting a column silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class FieldSpec:
    """Per-item shape (without the batch axis) and numpy dtype of one field."""

    shape: tuple[int, ...]
    dtype: Any

    def __post_init__(self) -> None:
        shape = tuple(int(s) for s in self.shape)
        if any(s < 0 for s in shape):
            raise ValueError(f"FieldSpec shape must be non-negative, got {self.shape!r}")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", np.dtype(self.dtype))

    @property
    def item_bytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


def as_array(value: Any) -> np.ndarray:
    """A numpy view of ``value`` (numpy array, torch tensor on any device, or sequence)."""
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # torch.Tensor, without importing torch
        return value.detach().cpu().numpy()
    return np.asarray(value)


def infer_spec(batch: Mapping[str, Any]) -> dict[str, FieldSpec]:
    """Spec of a batch whose arrays all carry a leading batch axis."""
    if not isinstance(batch, Mapping) or not batch:
        raise ValueError("batch must be a non-empty mapping of field name to array")
    spec = {}
    for name, value in batch.items():
        arr = as_array(value)
        if arr.ndim == 0:
            raise ValueError(f"field {name!r} has no leading batch axis (got a scalar)")
        if arr.dtype == object:
            raise ValueError(
                f"field {name!r} has dtype object; only numeric/bool arrays are stored"
            )
        spec[name] = FieldSpec(arr.shape[1:], arr.dtype)
    return spec


def normalize_spec(spec: Mapping[str, Any]) -> dict[str, FieldSpec]:
    """Accept FieldSpec values or ``(shape, dtype)`` pairs."""
    if not isinstance(spec, Mapping) or not spec:
        raise ValueError("spec must be a non-empty mapping of field name to FieldSpec")
    out = {}
    for name, field in spec.items():
        if not isinstance(name, str):
            raise TypeError(f"spec field names must be str, got {name!r}")
        if isinstance(field, FieldSpec):
            out[name] = field
        elif isinstance(field, tuple) and len(field) == 2:
            out[name] = FieldSpec(tuple(field[0]), field[1])
        else:
            raise TypeError(f"spec[{name!r}] must be a FieldSpec, got {field!r}")
    return out


def check_batch(
    spec: Mapping[str, FieldSpec], batch: Mapping[str, Any]
) -> tuple[dict[str, np.ndarray], int]:
    """Validate ``batch`` against ``spec``; return its arrays and the batch size.

    Safe casts (for example Python floats to float32, int64 actions to int32) are
    allowed because callers build batches from mixed sources; unsafe ones (floats
    into an integer column) are errors.
    """
    if not isinstance(batch, Mapping):
        raise TypeError(
            f"batch must be a mapping of field name to array, got {type(batch).__name__}"
        )
    missing = [k for k in spec if k not in batch]
    if missing:
        raise ValueError(f"batch is missing fields {missing}; expected {sorted(spec)}")
    extra = [k for k in batch if k not in spec]
    if extra:
        raise ValueError(f"batch has unknown fields {extra}; expected {sorted(spec)}")
    arrays: dict[str, np.ndarray] = {}
    n = -1
    for name, field in spec.items():
        arr = as_array(batch[name])
        if arr.shape[1:] != field.shape or arr.ndim != len(field.shape) + 1:
            raise ValueError(
                f"field {name!r} has shape {arr.shape}; expected (batch, *{field.shape})"
            )
        if arr.dtype != field.dtype and not _castable(arr.dtype, field.dtype):
            raise ValueError(
                f"field {name!r} has dtype {arr.dtype}, which cannot be stored as {field.dtype}"
            )
        if n < 0:
            n = arr.shape[0]
        elif arr.shape[0] != n:
            raise ValueError(
                f"field {name!r} has batch size {arr.shape[0]} but other fields have {n}"
            )
        arrays[name] = arr
    return arrays, n


def _castable(src: np.dtype, dst: np.dtype) -> bool:
    # "same_kind" accepts float64 -> float32 and int64 -> uint8 on purpose (callers
    # build batches from Python scalars) but refuses float -> int and int -> bool.
    return bool(np.can_cast(src, dst, casting="same_kind"))
