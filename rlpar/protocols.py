"""The small interfaces algorithms and roles program against.

A local implementation (an in-memory buffer, an in-process parameter store) and a
distributed one (an RPC accessor to shards or to a server) satisfy the same
protocol with the same semantics, so algorithm code never knows which it has.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np


class Sample(NamedTuple):
    """A sampled batch: ``batch`` maps field name to an array with a leading batch
    axis; ``indices`` identify the slots (pass them back to ``update_priorities``);
    ``weights`` are importance weights (all ones for uniform replay)."""

    batch: dict[str, Any]
    indices: np.ndarray
    weights: np.ndarray


@runtime_checkable
class Buffer(Protocol):
    def add(self, batch: Mapping[str, Any], priorities: Any | None = None) -> None: ...

    def sample(self, batch_size: int) -> Sample: ...

    def update_priorities(self, indices: np.ndarray, priorities: np.ndarray) -> None: ...

    def __len__(self) -> int: ...


@runtime_checkable
class ParameterStore(Protocol):
    """Versioned parameters: ``pull(newer_than=v)`` returns ``None`` (and transfers
    nothing) unless a version newer than ``v`` exists."""

    def push(self, state: Mapping[str, Any], version: int | None = None) -> int: ...

    def pull(self, newer_than: int = -1) -> tuple[dict[str, Any], int] | None: ...


@runtime_checkable
class GradientSink(ParameterStore, Protocol):
    """A parameter store that also applies gradients computed on version ``version``."""

    def push_gradients(self, grads: Mapping[str, Any], version: int) -> bool: ...


@runtime_checkable
class ItemSink(Protocol):
    """Takes whole items (mappings of arrays, e.g. one unroll): ``put`` is False when
    the item was not taken (timed out waiting for room, or the sink is closed)."""

    def put(self, item: Mapping[str, Any], *, timeout: float | None = None) -> bool: ...


@runtime_checkable
class ItemSource(Protocol):
    """Hands out items in the order they were put: ``get(n)`` waits for ``n`` of them
    (TimeoutError after ``timeout``)."""

    def get(self, n: int = 1, *, timeout: float | None = None) -> list[Mapping[str, Any]]: ...
