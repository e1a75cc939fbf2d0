"""RPC-hosted servers: one member of an RpcGroup hosts, every member uses an accessor.

A server named ``name`` registers services ``name/<method>`` in the group. The
accessors are small picklable objects (group, name, timeout) whose methods have the
same signatures and semantics as the local classes: bad input raises the same
ValueError/TypeError/KeyError (re-raised here as the same type), a lost
compare-and-set raises VersionConflict, and a host that is gone or silent raises
PeerUnavailable within ``timeout``. In the hosting process the accessor calls the
local object directly, without RPC.

CUDA tensors are moved to CPU before they travel unless ``keep_device=True``, which
is only valid when TensorPipe device maps are configured in both directions.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Hashable, Mapping
from typing import Any

import torch
from torch.distributed import DistError

from rlpar.errors import NonFiniteGradients, PeerUnavailable
from rlpar.servers.grad import GradServer
from rlpar.servers.kv import KeyValueStore, VersionConflict, check_version_args
from rlpar.servers.model import ModelStore, check_newer_than
from rlpar.servers.tensors import for_transfer

# (group name, server name) -> (world, services) for the servers this process hosts.
_hosted: dict[tuple[str, str], tuple[Any, Mapping[str, Callable]]] = {}
_hosted_lock = threading.Lock()
_PASS_THROUGH = (ValueError, TypeError, KeyError, VersionConflict, NonFiniteGradients)


class _Raised:
    """An input error raised by the hosted object, sent back to be re-raised as the
    same type (RPC would otherwise turn it into a generic RemoteError)."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def __reduce__(self):
        return (_Raised, (self.exc,))


def _guard(fn: Callable) -> Callable:
    def service(*args: Any) -> Any:
        try:
            return fn(*args)
        except _PASS_THROUGH as exc:
            return _Raised(exc)

    return service


def _current_world():
    from rlpar.distributed import current_world

    return current_world()


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not name or "/" in name:
        raise ValueError(f"server name must be a non-empty string without '/', got {name!r}")


def _guard_deferred(fn: Callable) -> Callable:
    def service(*args: Any) -> torch.futures.Future:
        try:
            return fn(*args)
        except _PASS_THROUGH as exc:
            fut: torch.futures.Future = torch.futures.Future()
            fut.set_result(_Raised(exc))
            return fut

    return service


def _host(group, name: str, methods: Mapping[str, Callable], deferred: Collection[str] = ()) -> None:
    """Register ``methods`` as ``name/<method>``; those in ``deferred`` return a Future
    (answered when it completes, holding no RPC thread meanwhile)."""
    _check_name(name)
    for method, fn in methods.items():
        if method in deferred:
            group.register(f"{name}/{method}", _guard_deferred(fn), deferred=True)
        else:
            group.register(f"{name}/{method}", _guard(fn))
    with _hosted_lock:
        _hosted[(group.name, name)] = (_current_world(), dict(methods))


def _transfer_value(value: Any, keep_device: bool) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach() if keep_device or not value.is_cuda else value.detach().cpu()
    if isinstance(value, Mapping) and any(isinstance(v, torch.Tensor) for v in value.values()):
        return for_transfer(value, keep_device=keep_device)
    return value


class _Accessor:
    def __init__(
        self, group, name: str, *, timeout: float | None = None, keep_device: bool = False
    ) -> None:
        _check_name(name)
        if timeout is not None and not (isinstance(timeout, (int, float)) and timeout > 0):
            raise ValueError(f"timeout must be > 0 seconds or None, got {timeout!r}")
        self.group = group
        self.name = name
        self.timeout = timeout
        self.keep_device = bool(keep_device)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(group={self.group.name!r}, name={self.name!r})"

    def _local(self) -> Mapping[str, Callable] | None:
        entry = _hosted.get((self.group.name, self.name))
        if entry is not None and entry[0] is _current_world():
            return entry[1]
        return None

    def _call(self, method: str, *args: Any) -> Any:
        local = self._local()
        if local is not None:
            return local[method](*args)
        try:
            result = self.group.call(f"{self.name}/{method}", *args, timeout=self.timeout)
        except DistError as exc:
            raise self._store_lost(exc) from exc
        return _unwrap(result)

    def _store_lost(self, exc: BaseException) -> PeerUnavailable:
        # Looking the host up again after a failed call reads the rendezvous store;
        # when the host was also the store's owner (rank 0), that read fails too.
        return PeerUnavailable(
            f"server {self.name!r} of group {self.group.name!r} is unreachable: "
            f"the rendezvous store failed: {exc}"
        )

    def _call_async(self, method: str, *args: Any) -> torch.futures.Future:
        """Like ``_call``, started now; ``_unwrap(fut.wait())`` gives the result."""
        local = self._local()
        if local is None:
            try:
                return self.group.call_async(f"{self.name}/{method}", *args, timeout=self.timeout)
            except DistError as exc:
                raise self._store_lost(exc) from exc
        fut: torch.futures.Future = torch.futures.Future()
        try:
            fut.set_result(local[method](*args))
        except Exception as exc:
            fut.set_exception(exc)
        return fut


def _unwrap(result: Any) -> Any:
    if type(result) is _Raised:
        raise result.exc
    return result


class RemoteKeyValueStore(_Accessor):
    """Accessor of a hosted :class:`KeyValueStore` (same methods)."""

    def push(self, key: Hashable, value: Any, prev_version: int | None) -> int:
        return self._call("push", key, _transfer_value(value, self.keep_device), prev_version)

    def pull(
        self, key: Hashable, version: int | None = None, newer_than: int | None = None
    ) -> tuple[Any, int] | None:
        check_version_args(version, newer_than)
        return self._call("pull", key, version, newer_than)

    def version(self, key: Hashable) -> int:
        return self._call("version", key)

    def keys(self) -> list[Hashable]:
        return self._call("keys")


class RemoteModelStore(_Accessor):
    """Accessor of a hosted :class:`ModelStore`: a ParameterStore."""

    def push(self, state: Mapping[str, Any], version: int | None = None) -> int:
        if self._local() is not None:
            return self._call("push", state, version)
        if not isinstance(state, Mapping):
            raise TypeError(
                f"state must be a mapping of name to tensor, got {type(state).__name__}"
            )
        # RPC delivers a fresh copy: the host stores it without copying again.
        return self._call("push_owned", for_transfer(state, keep_device=self.keep_device), version)

    def pull(self, newer_than: int = -1) -> tuple[dict[str, Any], int] | None:
        check_newer_than(newer_than)
        return self._call("pull", newer_than)

    def stats(self) -> dict[str, int]:
        return self._call("stats")

    @property
    def version(self) -> int:
        return self._call("version")


class RemoteGradServer(_Accessor):
    """Accessor of a hosted :class:`GradServer`: a GradientSink. With ``source`` (a
    worker index) its pushes name it, and ``push_gradients_and_pull`` answers once
    the round holding the gradient has closed (reduce mode; at once in async mode)."""

    def __init__(self, group, name: str, *, timeout: float | None = None, keep_device: bool = False,
                 source: int | None = None) -> None:
        super().__init__(group, name, timeout=timeout, keep_device=keep_device)
        if source is not None and (not isinstance(source, int) or isinstance(source, bool) or source < 0):
            raise ValueError(f"source must be None or an int >= 0, got {source!r}")
        self.source = source

    def push(self, state: Mapping[str, Any], version: int | None = None) -> int:
        if not isinstance(state, Mapping):
            raise TypeError(
                f"state must be a mapping of name to tensor, got {type(state).__name__}"
            )
        return self._call("push", for_transfer(state, keep_device=self.keep_device), version)

    def _grads_payload(self, grads: Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(grads, Mapping):
            raise TypeError(
                f"grads must be a mapping of parameter name to tensor, got {type(grads).__name__}"
            )
        return grads_for_transfer(grads, self.keep_device)

    def push_gradients(self, grads: Mapping[str, Any], version: int) -> bool:
        return self._call("push_gradients", self._grads_payload(grads), version, self.source)

    def push_gradients_and_pull(
        self, grads: Mapping[str, Any], version: int, newer_than: int = -1
    ) -> tuple[bool, tuple[dict[str, Any], int] | None]:
        """One round trip: push ``grads``, get the parameters if newer than ``newer_than``
        (with a ``source``: once the gradient's round has closed)."""
        payload = self._grads_payload(grads)
        check_newer_than(newer_than)
        if self.source is None:
            return self._call("push_gradients_and_pull", payload, version, newer_than)
        answer = self._call("push_gradients_and_wait", payload, version, newer_than, self.source)
        # In the host's own process the service's Future comes back as it is.
        return _unwrap(answer.wait()) if isinstance(answer, torch.futures.Future) else answer

    def pull(self, newer_than: int = -1) -> tuple[dict[str, Any], int] | None:
        check_newer_than(newer_than)
        return self._call("pull", newer_than)

    def metrics(self) -> dict[str, float]:
        return self._call("metrics")

    @property
    def version(self) -> int:
        return self._call("version")


DEFERRED_GRAD_SERVICES = ("push_gradients_and_wait",)


def grad_services(server: GradServer) -> dict[str, Callable]:
    return {
        "push": server.push,
        "pull": server.pull,
        "push_gradients": server.push_gradients,
        "push_gradients_and_pull": server.push_gradients_and_pull,
        "push_gradients_and_wait": server.push_gradients_and_wait,
        "reject_non_finite": server.reject_non_finite,
        "metrics": server.metrics,
        "version": lambda: server.version,
    }


def grads_for_transfer(grads: Mapping[str, Any], keep_device: bool) -> dict[str, Any]:
    return {n: None if g is None else _transfer_value(g, keep_device) for n, g in grads.items()}


class KeyValueServer:
    """Host or reach a :class:`KeyValueStore` by name in an RpcGroup."""

    @staticmethod
    def host(
        group,
        name: str,
        *,
        history: int = 4,
        timeout: float | None = None,
        keep_device: bool = False,
    ) -> RemoteKeyValueStore:
        store = KeyValueStore(history=history)
        _host(
            group,
            name,
            {"push": store.push, "pull": store.pull, "version": store.version, "keys": store.keys},
        )
        return RemoteKeyValueStore(group, name, timeout=timeout, keep_device=keep_device)

    @staticmethod
    def connect(
        group, name: str, *, timeout: float | None = None, keep_device: bool = False
    ) -> RemoteKeyValueStore:
        return RemoteKeyValueStore(group, name, timeout=timeout, keep_device=keep_device)


class PushPullModelServer:
    """Host or reach a :class:`ModelStore` by name in an RpcGroup: the learner
    pushes, actors ``pull(newer_than=their_version)``."""

    @staticmethod
    def host(
        group, name: str, *, timeout: float | None = None, keep_device: bool = False
    ) -> RemoteModelStore:
        store = ModelStore(device=None if keep_device else "cpu")
        _host(
            group,
            name,
            {
                "push": store.push,
                "push_owned": store._push_owned,
                "pull": store.pull,
                "stats": store.stats,
                "version": lambda: store.version,
            },
        )
        return RemoteModelStore(group, name, timeout=timeout, keep_device=keep_device)

    @staticmethod
    def connect(
        group, name: str, *, timeout: float | None = None, keep_device: bool = False
    ) -> RemoteModelStore:
        return RemoteModelStore(group, name, timeout=timeout, keep_device=keep_device)


class PushPullGradServer:
    """Host or reach a :class:`GradServer` by name in an RpcGroup. ``host`` takes the
    GradServer's keyword arguments (the model lives in the hosting process)."""

    @staticmethod
    def host(
        group,
        name: str,
        *,
        model: torch.nn.Module,
        optimizer_factory: Callable,
        mode: str = "async",
        reduce_batch_size: int = 1,
        max_staleness: int | None = None,
        staleness_policy: str = "drop",
        max_non_finite: int | None = 100,
        round_timeout: float | None = None,
        lr_scheduler_factory: Callable | None = None,
        timeout: float | None = None,
        keep_device: bool = False,
    ) -> RemoteGradServer:
        server = GradServer(
            model=model,
            optimizer_factory=optimizer_factory,
            mode=mode,
            reduce_batch_size=reduce_batch_size,
            max_staleness=max_staleness,
            staleness_policy=staleness_policy,
            max_non_finite=max_non_finite,
            round_timeout=round_timeout,
            lr_scheduler_factory=lr_scheduler_factory,
            pull_device=None if keep_device else "cpu",
        )
        _host(group, name, grad_services(server), deferred=DEFERRED_GRAD_SERVICES)
        accessor = RemoteGradServer(group, name, timeout=timeout, keep_device=keep_device)
        accessor.server = server  # the host's own object (checkpoints)
        return accessor

    @staticmethod
    def connect(
        group, name: str, *, timeout: float | None = None, keep_device: bool = False,
        source: int | None = None,
    ) -> RemoteGradServer:
        return RemoteGradServer(group, name, timeout=timeout, keep_device=keep_device, source=source)
