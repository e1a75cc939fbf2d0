"""A gradient server sharded over several hosts, for models too big for one reducer.

The model's trainable parameters are partitioned by name over ``num_shards`` hosts
(largest first onto the least loaded shard; every other state-dict entry goes to
shard 0). Each host runs a :class:`GradServer` over its part with its own
optimizer; every gradient push reaches every shard (in parallel), so the shards
take the same number of steps and stay in lockstep once concurrent pushes have
landed.

Version of the whole: the newest shard version. A pull returns every shard's
newest part. Because shards may be a step apart while pushes are in flight, the
accessor remembers which shard versions each pulled version stood for and tags a
gradient computed on it with those, shard by shard. Staleness bounds are not
supported here: shards deciding independently could drop different gradients and
drift apart. For the same reason the accessor checks a whole gradient for NaN/inf
once and, if it finds any, has every shard count the rejection (none applies its part).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from torch import nn

from rlpar.servers.grad import GradServer, all_finite
from rlpar.servers.model import check_newer_than
from rlpar.servers.remote import (
    DEFERRED_GRAD_SERVICES,
    RemoteGradServer,
    _check_name,
    _host,
    _unwrap,
    grad_services,
    grads_for_transfer,
)
from rlpar.servers.tensors import for_transfer

_REMEMBERED = 16  # pulled versions whose shard versions a worker can still tag


def partition(model: nn.Module, num_shards: int) -> list[list[str]]:
    """State-dict keys per shard; deterministic for a given architecture."""
    if not isinstance(num_shards, int) or isinstance(num_shards, bool) or num_shards < 1:
        raise ValueError(f"num_shards must be an int >= 1, got {num_shards!r}")
    params = [(n, p.numel()) for n, p in model.named_parameters() if p.requires_grad]
    if len(params) < num_shards:
        raise ValueError(
            f"num_shards={num_shards} exceeds the {len(params)} trainable parameters to split"
        )
    shards: list[list[str]] = [[] for _ in range(num_shards)]
    load = [0] * num_shards
    for name, size in sorted(params, key=lambda item: (-item[1], item[0])):
        i = min(range(num_shards), key=lambda k: (load[k], k))
        shards[i].append(name)
        load[i] += size
    trainable = {n for n, _ in params}
    shards[0] += [k for k in model.state_dict() if k not in trainable]
    return [sorted(keys) for keys in shards]


def _shard_name(name: str, shard: int) -> str:
    return f"{name}.shard{shard}"


class RemoteShardedGradServer:
    """Accessor of a sharded gradient server: a GradientSink, picklable."""

    def __init__(
        self,
        group,
        name: str,
        *,
        num_shards: int,
        timeout: float | None = None,
        keep_device: bool = False,
    ) -> None:
        _check_name(name)
        if not isinstance(num_shards, int) or isinstance(num_shards, bool) or num_shards < 1:
            raise ValueError(f"num_shards must be an int >= 1, got {num_shards!r}")
        self.name = name
        self.keep_device = bool(keep_device)
        self.shards = [
            RemoteGradServer(group, _shard_name(name, i), timeout=timeout, keep_device=keep_device)
            for i in range(num_shards)
        ]
        self._owner: dict[str, int] | None = None
        self._seen: OrderedDict[int, list[int]] = OrderedDict()

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_seen": OrderedDict()}

    def _owners(self) -> dict[str, int]:
        if self._owner is None:
            futs = [s._call_async("keys") for s in self.shards]
            self._owner = {k: i for i, f in enumerate(futs) for k in _unwrap(f.wait())}
        return self._owner

    def _split(self, values: Mapping[str, Any], what: str) -> list[dict[str, Any]]:
        if not isinstance(values, Mapping):
            raise TypeError(
                f"{what} must be a mapping of name to tensor, got {type(values).__name__}"
            )
        owners = self._owners()
        parts: list[dict[str, Any]] = [{} for _ in self.shards]
        for key, value in values.items():
            if key not in owners:
                raise ValueError(f"{what} has unknown key {key!r}")
            parts[owners[key]][key] = value
        return parts

    def _all(self, method: str, per_shard_args: list[tuple]) -> list[Any]:
        futs = [s._call_async(method, *args) for s, args in zip(self.shards, per_shard_args)]
        return [_unwrap(f.wait()) for f in futs]

    def push_gradients(self, grads: Mapping[str, Any], version: int) -> bool:
        parts = self._split(grads, "grads")
        if not all_finite(grads.values()):
            self._all("reject_non_finite", [()] * len(self.shards))
            return False
        tags = self._seen.get(version)
        if tags is None:
            # Not pulled through this accessor: the shards were in lockstep then.
            tags = [version] * len(self.shards)
        parts = [grads_for_transfer(p, self.keep_device) for p in parts]
        accepted = self._all("push_gradients", [(p, t) for p, t in zip(parts, tags)])
        return all(accepted)

    def pull(self, newer_than: int = -1) -> tuple[dict[str, Any], int] | None:
        check_newer_than(newer_than)
        replies = self._all("pull", [(newer_than,)] * len(self.shards))
        if all(r is None for r in replies):
            return None
        stale = [i for i, r in enumerate(replies) if r is None]
        for i, reply in zip(stale, self._all_subset("pull", stale, (-1,))):
            replies[i] = reply
        state: dict[str, Any] = {}
        for part, _ in replies:
            state.update(part)
        versions = [v for _, v in replies]
        version = max(versions)
        self._seen[version] = versions
        self._seen.move_to_end(version)
        while len(self._seen) > _REMEMBERED:
            self._seen.popitem(last=False)
        return state, version

    def _all_subset(self, method: str, shards: list[int], args: tuple) -> list[Any]:
        futs = [self.shards[i]._call_async(method, *args) for i in shards]
        return [_unwrap(f.wait()) for f in futs]

    def push(self, state: Mapping[str, Any], version: int | None = None) -> int:
        parts = self._split(state, "state")
        if version is None:
            version = self.version + 1
        parts = [for_transfer(p, keep_device=self.keep_device) for p in parts]
        return max(self._all("push", [(p, version) for p in parts]))

    @property
    def version(self) -> int:
        return max(self._all("version", [()] * len(self.shards)))

    def metrics(self) -> dict[str, Any]:
        """Counters completed on every shard (the minimum), the newest ``version``,
        and each shard's own metrics under ``shards``."""
        shards = self._all("metrics", [()] * len(self.shards))
        out: dict[str, Any] = {
            k: min(m[k] for m in shards)
            for k in ("received", "applied", "dropped", "downweighted", "rejected_non_finite",
                      "steps", "pending")
        }
        out["mean_staleness"] = sum(m["mean_staleness"] for m in shards) / len(shards)
        out["version"] = max(m["version"] for m in shards)
        out["lr"] = shards[0]["lr"]
        out["shards"] = shards
        return out


class ShardedGradServer:
    """Host one shard of, or reach, a gradient server split over several members.

    Every shard host calls ``host(group, name, shard=i, num_shards=n, model=...)``
    with the same architecture (the partition is computed from it)."""

    @staticmethod
    def host(
        group,
        name: str,
        *,
        shard: int,
        num_shards: int,
        model: nn.Module,
        optimizer_factory: Callable,
        mode: str = "async",
        reduce_batch_size: int = 1,
        max_non_finite: int | None = 100,
        lr_scheduler_factory: Callable | None = None,
        timeout: float | None = None,
        keep_device: bool = False,
    ) -> RemoteShardedGradServer:
        _check_name(name)
        keys = partition(model, num_shards)
        if not isinstance(shard, int) or not 0 <= shard < num_shards:
            raise ValueError(f"shard must be an int in [0, {num_shards}), got {shard!r}")
        server = GradServer(
            model=model,
            optimizer_factory=optimizer_factory,
            mode=mode,
            reduce_batch_size=reduce_batch_size,
            max_non_finite=max_non_finite,
            lr_scheduler_factory=lr_scheduler_factory,
            pull_device=None if keep_device else "cpu",
            shard_keys=keys[shard],
        )
        services = grad_services(server)
        services["keys"] = lambda: keys[shard]
        _host(group, _shard_name(name, shard), services, deferred=DEFERRED_GRAD_SERVICES)
        return RemoteShardedGradServer(
            group, name, num_shards=num_shards, timeout=timeout, keep_device=keep_device
        )

    @staticmethod
    def connect(
        group,
        name: str,
        *,
        num_shards: int,
        timeout: float | None = None,
        keep_device: bool = False,
    ) -> RemoteShardedGradServer:
        return RemoteShardedGradServer(
            group, name, num_shards=num_shards, timeout=timeout, keep_device=keep_device
        )
