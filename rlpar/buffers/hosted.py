"""A buffer hosted in one process and filled by others over RPC.

``HostedBuffer.host(group, name, buffer)`` serves ``<name>/add`` and ``<name>/size``
on ``group`` and returns the host's own handle (every call under one lock: RPC
threads add while the host samples). ``HostedBuffer.connect(group, name)`` returns
the add-only handle of a remote process: adds are asynchronous, with at most
``max_in_flight`` outstanding (back-pressure instead of unbounded memory).
Both are :class:`~rlpar.protocols.Buffer` s.

Arrays travel as tensors, whose bytes TensorPipe moves without pickling them (as
the replay shards' do). Pickled numpy arrays were copied into and out of the RPC
message under the host's GIL: with 32 actors adding Atari batches (128 frame-stacked
transitions, 7 MB) as fast as they could, the host took 14.7K transitions/s and the
learner in that process drew 19 batches of 512 a second; as tensors, 65K and 158
(at the paper's 12.5K/s: an add blocked its actor 41 ms at the median, now 1 ms;
``python -m experiments.bench.scale.apex --cases ingest``).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Mapping
from typing import Any

from rlpar.buffers.shard import from_wire, to_wire
from rlpar.protocols import Sample


class HostedBuffer:
    """The host's handle: a lock around ``buffer``; ``added`` counts rows."""

    def __init__(self, buffer: Any) -> None:
        self.buffer = buffer
        self.added = 0
        self._lock = threading.Lock()

    @classmethod
    def host(cls, group: Any, name: str, buffer: Any) -> HostedBuffer:
        hosted = cls(buffer)
        group.register(f"{name}/add", hosted._add_wired)
        group.register(f"{name}/size", hosted.__len__)
        return hosted

    @staticmethod
    def connect(group: Any, name: str, *, max_in_flight: int = 4) -> RemoteAdder:
        return RemoteAdder(group, name, max_in_flight=max_in_flight)

    def add(self, batch: Mapping[str, Any], priorities: Any | None = None) -> None:
        with self._lock:
            self.buffer.add(batch, priorities)
            self.added += len(next(iter(batch.values())))

    def _add_wired(self, batch: Mapping[str, Any], priorities: Any | None) -> None:
        self.add(from_wire(batch), from_wire(priorities))

    def sample(self, batch_size: int) -> Sample:
        with self._lock:
            return self.buffer.sample(batch_size)

    def update_priorities(self, indices: Any, priorities: Any) -> None:
        with self._lock:
            self.buffer.update_priorities(indices, priorities)

    def state_dict(self) -> dict[str, Any]:
        with self._lock:
            return self.buffer.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        with self._lock:
            self.buffer.load_state_dict(state)

    def __len__(self) -> int:
        return len(self.buffer)


class RemoteAdder:
    """Add-only handle of a hosted buffer in another process."""

    def __init__(self, group: Any, name: str, *, max_in_flight: int = 4) -> None:
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
        self.group, self.name, self.max_in_flight = group, name, max_in_flight
        self._futures: deque = deque()

    def add(self, batch: Mapping[str, Any], priorities: Any | None = None) -> None:
        """Send ``batch`` without waiting for it to be applied. Its arrays are sent
        from where they lie, not copied: leave them unchanged until :meth:`wait`."""
        while len(self._futures) >= self.max_in_flight:
            self._futures.popleft().wait()
        self._futures.append(self.group.call_async(f"{self.name}/add", to_wire(dict(batch)),
                                                   to_wire(priorities)))

    def wait(self) -> None:
        """Block until every add sent so far has been applied (or raise its error)."""
        while self._futures:
            self._futures.popleft().wait()

    def sample(self, batch_size: int) -> Sample:
        raise NotImplementedError(f"{self.name}: a remote handle only adds; the host samples")

    def update_priorities(self, indices: Any, priorities: Any) -> None:
        raise NotImplementedError(f"{self.name}: a remote handle only adds; the host updates priorities")

    def __len__(self) -> int:
        return int(self.group.call(f"{self.name}/size"))
