"""A queue between processes whose tensor handling is chosen explicitly per queue.

``policy="copy"``: each item is serialized to bytes (cloudpickle) when ``put`` is
called. Tensors are copied into the message, so the consumer gets an independent
snapshot; there are no shared-memory file descriptors and no lifetime rules (safe
across any number of items, CUDA tensors arrive on the same device). Cost: one
copy of every tensor on each side, which dominates for large tensors.

``policy="share"``: items go through multiprocessing's pickler with torch's
reducers (torch.multiprocessing), so CPU tensors are moved to shared memory and
CUDA tensors are sent as CUDA IPC handles; only a handle crosses the pipe
(zero-copy), and producer and consumer see the same memory. Trade-offs: the
producer's tensor itself is moved to shared memory and later writes on either side
are visible to the other; with torch's default ``file_descriptor`` strategy every
shared storage in flight holds an open file descriptor (mind ``ulimit -n`` when
many small tensors are queued); a CUDA tensor must be kept alive by the producer
until the consumer is done with it. Pickling happens in the queue's feeder thread,
so a tensor changed right after ``put`` may be sent changed.

The queue never changes process-wide settings (no sharing-strategy changes); pass
it to child processes as an argument at start (like ``multiprocessing.Queue``).
"""

from __future__ import annotations

import pickle
from typing import Any

import cloudpickle

from rlpar.parallel.process import get_context
from rlpar.parallel.result import check_timeout

POLICIES = ("copy", "share")


class _Copied:
    """An item serialized by the copy policy (so ``get`` knows to deserialize it)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __reduce__(self) -> tuple[Any, tuple[bytes]]:
        return _Copied, (self.data,)


class TensorQueue:
    """Multi-producer multi-consumer queue between processes with a tensor ``policy``.

    ``start_method`` must match the processes that will use the queue.
    """

    def __init__(self, *, policy: str, maxsize: int = 0, start_method: str = "spawn") -> None:
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
        if not isinstance(maxsize, int) or maxsize < 0:
            raise ValueError(f"maxsize must be an int >= 0, got {maxsize!r}")
        if policy == "share":
            # Registers torch's tensor reducers with multiprocessing's pickler (done by
            # torch itself on import; it changes no sharing strategy).
            import torch.multiprocessing  # noqa: F401
        self.policy = policy
        self.start_method = start_method
        self._queue = get_context(start_method).Queue(maxsize)

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        check_timeout(timeout)
        if self.policy == "copy":
            item = _Copied(cloudpickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL))
        self._queue.put(item, block, timeout)

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        """Next item; raises ``queue.Empty`` if none came within ``timeout``."""
        check_timeout(timeout)
        item = self._queue.get(block, timeout)
        if isinstance(item, _Copied):
            return pickle.loads(item.data)
        return item

    def put_nowait(self, item: Any) -> None:
        self.put(item, block=False)

    def get_nowait(self) -> Any:
        return self.get(block=False)

    def empty(self) -> bool:
        return self._queue.empty()

    def qsize(self) -> int:
        """Approximate size (not available on macOS)."""
        return self._queue.qsize()

    def close(self) -> None:
        """No more puts from this process; flushes buffered items in the background."""
        self._queue.close()

    def join_thread(self) -> None:
        self._queue.join_thread()

    def cancel_join_thread(self) -> None:
        self._queue.cancel_join_thread()

    def __repr__(self) -> str:
        return f"TensorQueue(policy={self.policy!r}, start_method={self.start_method!r})"
