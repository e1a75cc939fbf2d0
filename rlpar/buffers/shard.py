"""One shard of a distributed replay buffer and the clients that reach it.

A shard is a local buffer behind a lock (the owning actor adds while RPC threads
sample and update). Every reply to ``sample_at`` carries the shard's size, total
sampling mass and minimum mass, so a sampler always knows how to split its next
batch and how to weight this one without a separate stats round trip.

Clients hide the transport: :class:`LocalShardClient` calls a shard in this
process (also used to host several shards behind a fake transport in tests),
:class:`RpcShardClient` calls one through an :class:`~rlpar.distributed.RpcGroup`.
Both return ``torch.futures.Future`` objects so a sampler can talk to all shards
at once.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from rlpar.buffers.frames import SharedFrames
from rlpar.buffers.replay import ReplayBuffer


@dataclass
class ShardReply:
    """What a shard answers to ``sample_at``: rows, their serials and masses, stats."""

    batch: dict[str, Any]
    serials: np.ndarray
    mass: np.ndarray
    size: int
    total: float
    min_mass: float
    shared: SharedFrames | None = None  # batch holds shared frames as stored: split it


class ReplayShard:
    """A thread-safe local buffer that answers positional samples."""

    def __init__(self, buffer: ReplayBuffer) -> None:
        self.buffer = buffer
        self.lock = threading.Lock()

    def add(self, batch: Mapping[str, Any], priorities: Any | None = None) -> None:
        with self.lock:
            self.buffer.add(batch, priorities)

    def sample_at(self, fractions: Any) -> ShardReply:
        fractions = np.asarray(fractions, dtype=np.float64)
        with self.lock:
            buf = self.buffer
            if fractions.size:
                if len(buf) == 0:
                    raise ValueError("cannot sample from an empty replay shard")
                slots, mass = buf.draw(fractions)
                batch = buf.storage.gather(slots, split=False)
                serials = buf.storage.serials_of(slots)
            else:
                batch, serials, mass = {}, np.empty(0, np.int64), np.empty(0)
            return ShardReply(
                batch, serials, mass, len(buf), buf.total_mass, buf.min_mass, buf.storage.shared
            )

    def update(self, serials: Any, priorities: Any) -> None:
        with self.lock:
            self.buffer.update_priorities(serials, priorities)

    def stats(self) -> ShardReply:
        return self.sample_at(np.empty(0))

    def state_dict(self) -> dict[str, Any]:
        with self.lock:
            return self.buffer.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        with self.lock:
            self.buffer.load_state_dict(state)

    def save(self, directory: str, *, step: int, part: str, kind: str,
             meta: Mapping[str, Any] | None = None) -> int:
        """Write this shard as ``part`` of checkpoint ``step`` in ``directory`` (see
        :func:`rlpar.checkpoint.save_part`); returns the bytes written."""
        from rlpar.checkpoint import save_part

        return save_part(directory, self.state_dict(), kind=kind, step=step, part=part,
                         meta=meta).stat().st_size

    def load(self, checkpoint: str, *, part: str, kind: str,
             meta: Mapping[str, Any] | None = None) -> int:
        """Load ``part`` of the checkpoint whose main file is ``checkpoint``; returns
        the shard's size after."""
        from rlpar.checkpoint import load_part

        state, _ = load_part(checkpoint, part, kind=kind, expect_meta=meta)
        self.load_state_dict(state)
        return len(self)

    def __len__(self) -> int:
        return len(self.buffer)


def _done(value: Any) -> torch.futures.Future:
    fut: torch.futures.Future = torch.futures.Future()
    fut.set_result(value)
    return fut


def _failed(exc: BaseException) -> torch.futures.Future:
    fut: torch.futures.Future = torch.futures.Future()
    fut.set_exception(exc)
    return fut


class LocalShardClient:
    """Calls a shard in this process; results come back as completed futures."""

    def __init__(self, shard: ReplayShard, name: str) -> None:
        self.shard, self.name = shard, name

    def sample_at(self, fractions: np.ndarray) -> torch.futures.Future:
        try:
            return _done(self.shard.sample_at(fractions))
        except Exception as exc:
            return _failed(exc)

    def update(self, serials: np.ndarray, priorities: np.ndarray) -> torch.futures.Future:
        try:
            return _done(self.shard.update(serials, priorities))
        except Exception as exc:
            return _failed(exc)

    def add(self, batch: Mapping[str, Any], priorities: Any | None) -> None:
        self.shard.add(batch, priorities)

    def save(self, directory: str, *, step: int, part: str, kind: str,
             meta: Mapping[str, Any] | None = None) -> torch.futures.Future:
        try:
            return _done(self.shard.save(directory, step=step, part=part, kind=kind, meta=meta))
        except Exception as exc:
            return _failed(exc)

    def load(self, checkpoint: str, *, part: str, kind: str,
             meta: Mapping[str, Any] | None = None) -> torch.futures.Future:
        try:
            return _done(self.shard.load(checkpoint, part=part, kind=kind, meta=meta))
        except Exception as exc:
            return _failed(exc)


# --------------------------------------------------------------------- RPC wire
# numpy arrays travel as tensors: TensorPipe sends tensor storage without pickling
# its bytes, which matters for frames (256 x 2 x 28 KB per Atari batch).


def to_wire(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(value))
    if isinstance(value, dict):
        return {k: to_wire(v) for k, v in value.items()}
    if isinstance(value, ShardReply):
        return ShardReply(
            to_wire(value.batch),
            to_wire(value.serials),
            to_wire(value.mass),
            value.size,
            value.total,
            value.min_mass,
            value.shared,
        )
    return value


def from_wire(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.numpy()
    if isinstance(value, dict):
        return {k: from_wire(v) for k, v in value.items()}
    if isinstance(value, ShardReply):
        return ShardReply(
            from_wire(value.batch),
            from_wire(value.serials),
            from_wire(value.mass),
            value.size,
            value.total,
            value.min_mass,
            value.shared,
        )
    return value


SHARD_OPS = ("sample", "update", "add", "save", "load")


def service_keys(buffer_name: str, member: str) -> dict[str, str]:
    return {op: f"replay/{buffer_name}/{op}@{member}" for op in SHARD_OPS}


def register_shard(group: Any, buffer_name: str, shard: ReplayShard, *, member: str | None = None,
                   replace: bool = False) -> None:
    """Host ``shard`` in ``group`` under ``member``'s service keys (default: this
    member's; another's, with ``replace``, to take over the shard of one that died)."""
    keys = service_keys(buffer_name, group.current_member if member is None else member)
    services = {
        "sample": lambda fractions: to_wire(shard.sample_at(from_wire(fractions))),
        "update": lambda s, p: shard.update(from_wire(s), from_wire(p)),
        "add": lambda b, p: shard.add(from_wire(b), from_wire(p)),
        "save": shard.save,
        "load": shard.load,
    }
    for op, fn in services.items():
        group.register(keys[op], fn, replace=replace)


class RpcShardClient:
    """Calls the shard hosted by ``member`` of ``group``; every call has ``timeout``."""

    def __init__(self, group: Any, buffer_name: str, member: str, timeout: float) -> None:
        self.group, self.name, self.timeout = group, member, timeout
        self.keys = service_keys(buffer_name, member)

    def sample_at(self, fractions: np.ndarray) -> torch.futures.Future:
        try:
            fut = self.group.call_async(
                self.keys["sample"], to_wire(fractions), timeout=self.timeout
            )
        except Exception as exc:  # e.g. ServiceNotFound raised before any call is made
            return _failed(exc)
        out: torch.futures.Future = torch.futures.Future()

        def settle(done: torch.futures.Future) -> None:
            # Not fut.then(): it would wrap PeerUnavailable & co. into RuntimeError.
            try:
                value = from_wire(done.wait())
            except BaseException as exc:  # noqa: B036 - handed to whoever waits
                out.set_exception(exc)
                return
            out.set_result(value)

        fut.add_done_callback(settle)
        return out

    def update(self, serials: np.ndarray, priorities: np.ndarray) -> torch.futures.Future:
        try:
            return self.group.call_async(
                self.keys["update"], to_wire(serials), to_wire(priorities), timeout=self.timeout
            )
        except Exception as exc:
            return _failed(exc)

    def add(self, batch: Mapping[str, Any], priorities: Any | None) -> None:
        self.group.call(
            self.keys["add"], to_wire(dict(batch)), to_wire(priorities), timeout=self.timeout
        )

    def save(self, directory: str, *, step: int, part: str, kind: str,
             meta: Mapping[str, Any] | None = None) -> torch.futures.Future:
        # Writing a large shard takes longer than a sample: the world's timeout, not
        # the sampling one.
        try:
            return self.group.call_async(self.keys["save"], directory, step=step, part=part,
                                         kind=kind, meta=dict(meta or {}))
        except Exception as exc:
            return _failed(exc)

    def load(self, checkpoint: str, *, part: str, kind: str,
             meta: Mapping[str, Any] | None = None) -> torch.futures.Future:
        try:
            return self.group.call_async(self.keys["load"], checkpoint, part=part, kind=kind,
                                         meta=dict(meta or {}))
        except Exception as exc:
            return _failed(exc)
