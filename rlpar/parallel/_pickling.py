"""Shipping callables and arguments to child processes with cloudpickle.

cloudpickle handles lambdas and closures, which the standard pickler refuses. Plain
cloudpickle, however, does not know multiprocessing's own reducers (pipes, queues,
and torch's shared-memory tensors are registered on ``ForkingPickler``), so objects
that are only meant to be pickled while a child is being spawned would be copied
wrongly. ``SpawnPayload`` pickles its content with a cloudpickle pickler that also
uses those reducers, and it does so lazily, inside multiprocessing's own spawning
step, where file descriptors can be handed to the child.
"""

from __future__ import annotations

import io
import pickle
from collections import ChainMap
from multiprocessing.reduction import ForkingPickler
from typing import Any

import cloudpickle


class _SpawnPickler(cloudpickle.Pickler):
    # ForkingPickler keeps its extra reducers in a private class dict; there is no
    # public accessor, and copying it once at import would miss reducers that torch
    # registers later, so the ChainMap reads it live.
    dispatch_table = ChainMap(
        ForkingPickler._extra_reducers,  # noqa: SLF001
        cloudpickle.Pickler.dispatch_table,
    )


def dumps_for_spawn(obj: Any) -> bytes:
    """cloudpickle ``obj``, honouring multiprocessing's reducers."""
    buffer = io.BytesIO()
    _SpawnPickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buffer.getvalue()


def _load_payload(data: bytes) -> SpawnPayload:
    return SpawnPayload(pickle.loads(data))


class SpawnPayload:
    """Holds an object that travels to a child; under ``fork`` it is simply inherited."""

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __reduce__(self) -> tuple[Any, tuple[bytes]]:
        return _load_payload, (dumps_for_spawn(self.obj),)
