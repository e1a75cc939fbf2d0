"""RpcGroup: named services and paired values hosted by the members of a group.

A service is called (:meth:`RpcGroup.call`, ``call_async``) or started remotely
(:meth:`RpcGroup.remote`: its result stays with its host until fetched, see
:mod:`rlpar.distributed.remote`).

A service ``key`` is a callable registered by the one member that hosts it; its host's
name is written to the c10d store under the group's namespace. Callers read the store
once per key and cache the host, so a call is one RPC round trip to a module-level
dispatcher that looks the callable up in a process-local table.

A *deferred* service returns a ``torch.futures.Future`` and is answered when that
completes (torch's ``async_execution``): while it is pending no RPC thread waits, so a
service that must wait for something (room in a queue) cannot starve the host's RPC
thread pool. The store entry says which dispatcher a caller must use.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed.rpc as rpc

from rlpar.distributed.rpc_dispatch import (
    _DEFERRED,
    _barrier_rounds,
    _dispatch,
    _dispatch_deferred,
    _Failure,
    _paired,
    _services,
    _services_by_sid,
    _sid,
    _table_lock,
    _transport_error,
)
from rlpar.errors import PeerUnavailable, RemoteError, ServiceNotFound

if TYPE_CHECKING:
    from rlpar.distributed.remote import Handle

class _Raise:
    """The value of a call_async future that failed: its unwrap function raises
    ``error`` from ``wait()``/``value()``. A ``then`` callback cannot set an exception
    on its child (one raised there comes out as a RuntimeError), hence this marker."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


def _unwrap(value: Any) -> Any:
    if type(value) is _Raise:
        raise value.error
    return value


def _settle(group: RpcGroup, key: str, host: str, raw: torch.futures.Future) -> Any:
    """``then`` callback of call_async: maps the raw RPC outcome to rlpar's errors.
    Module-level (no closure per call) and builds no error objects on success."""
    try:
        value = raw.value()
    except BaseException as exc:  # noqa: B036 - handed to whoever waits
        group._hosts.pop(key, None)  # look the host up again next time
        return _Raise(_transport_error(exc, host, f"call {key!r}"))
    if type(value) is _Failure:
        return _Raise(group._failure(key, value))
    return value


def _fetch_paired(group: str, key: str) -> rpc.RRef | _Failure:
    rref = _paired.get((group, key))
    if rref is None:
        return _Failure(rpc.get_worker_info().name, "ServiceNotFound", "")
    return rref


def forget_world(world) -> None:
    """Drop everything this process hosted (called by World.shutdown)."""
    from rlpar.distributed import remote

    remote.forget()
    with _table_lock:
        _services.clear()
        _services_by_sid.clear()
        _paired.clear()
        _barrier_rounds.clear()


def _rebuild(name: str, members: list[str]) -> RpcGroup:
    from rlpar.distributed.current import current_world

    return current_world().create_rpc_group(name, members)


class RpcGroup:
    """A named subset of the world's processes that host and call services.

    Get one from :meth:`World.create_rpc_group`. Picklable: a copy sent to another
    process resolves to that process's World.
    """

    def __init__(self, *, world, name: str, members: list[str]) -> None:
        self._world = world
        self.name = name
        self.members = list(members)
        self.size = len(self.members)
        self.current_member = world.name
        # key -> (host, service id, then-callback of call_async, dispatcher), built
        # once per key.
        self._hosts: dict[str, tuple[str, str, Callable, Callable]] = {}
        self._prefix = f"svc/{name}/"

    def __reduce__(self):
        return (_rebuild, (self.name, self.members))

    def __repr__(self) -> str:
        return f"RpcGroup(name={self.name!r}, members={self.members})"

    @property
    def rpc_timeout(self) -> float:
        """The timeout of a call given none: the world's ``rpc_timeout``."""
        return self._world.rpc_timeout

    # --------------------------------------------------------------- hosting

    def _require_member(self, action: str) -> None:
        if self.current_member not in self.members:
            raise ValueError(
                f"{action}: {self.current_member!r} is not a member of group {self.name!r} "
                f"({self.members})"
            )

    def _claim(self, slot: str, key: str, replace: bool = False, deferred: bool = False) -> None:
        if not isinstance(key, str) or not key:
            raise ValueError(f"key must be a non-empty string, got {key!r}")
        me = (self.current_member + (_DEFERRED if deferred else "")).encode()
        if replace:
            self._world.store.set(self._prefix + slot + key, me)
            return
        holder = self._world.store.compare_set(self._prefix + slot + key, b"", me)
        if holder != me or (self.name, key) in (_services if slot == "s/" else _paired):
            raise ValueError(
                f"key {key!r} is already registered in group {self.name!r} by "
                f"{holder.decode().removesuffix(_DEFERRED)!r}"
            )

    def register(self, key: str, fn: Callable, *, replace: bool = False,
                 deferred: bool = False) -> None:
        """Host service ``key`` in this process; a key already hosted in the group is a
        ValueError unless ``replace`` (e.g. a restarted process taking over the key of
        one that died). Register before others call (then :meth:`barrier`, or callers
        use :meth:`wait_registered`). ``deferred``: ``fn`` returns a
        ``torch.futures.Future`` whose value answers the call, and no RPC thread waits
        for it meanwhile (callers call it as any other service)."""
        if not callable(fn):
            raise TypeError(f"service {key!r}: fn must be callable, got {fn!r}")
        self._require_member(f"register({key!r})")
        with _table_lock:
            self._claim("s/", key, replace, deferred)
            _services[(self.name, key)] = fn
            _services_by_sid[_sid(self.name, key)] = fn
        self._hosts.pop(key, None)

    def deregister(self, key: str) -> None:
        """Stop hosting ``key`` (ServiceNotFound if this process does not host it)."""
        with _table_lock:
            if _services.pop((self.name, key), None) is None:
                raise ServiceNotFound(
                    f"service {key!r} is not hosted by {self.current_member!r} in group {self.name!r}"
                )
            _services_by_sid.pop(_sid(self.name, key), None)
            self._world.store.delete_key(self._prefix + "s/" + key)
        self._hosts.pop(key, None)

    def forget_hosts(self, keys: Sequence[str]) -> None:
        """Look up the hosts of ``keys`` in the store again on their next call: their
        services moved to another member (e.g. a replay shard that another process
        took over with ``register(replace=True)``), and this process may still have
        the old host cached, which it must not call."""
        for key in keys:
            self._hosts.pop(key, None)

    def is_registered(self, key: str) -> bool:
        """Whether any member hosts ``key`` now (asks the store)."""
        return self._world.store.check([self._prefix + "s/" + key])

    def wait_registered(self, key: str, timeout: float | None = None) -> None:
        """Block until some member hosts ``key`` (ServiceNotFound after ``timeout``)."""
        seconds = self._timeout(timeout)
        deadline = time.monotonic() + seconds
        pause = 0.0005
        while not self.is_registered(key):
            if time.monotonic() > deadline:
                raise ServiceNotFound(
                    f"no member of group {self.name!r} registered service {key!r} "
                    f"within {seconds} s"
                )
            time.sleep(pause)
            pause = min(pause * 2, 0.01)

    # --------------------------------------------------------------- calling

    def _host_of(self, slot: str, key: str) -> str:
        store_key = self._prefix + slot + key
        store = self._world.store
        try:
            if not store.check([store_key]):
                what = "service" if slot == "s/" else "paired value"
                raise ServiceNotFound(f"no member of group {self.name!r} hosts {what} {key!r}")
            return store.get(store_key).decode()
        except (RuntimeError, OSError) as exc:
            # The store lives on rank 0: if rank 0 died, the lookup itself fails, and
            # callers should see the same error as for any other dead peer.
            raise PeerUnavailable(
                f"cannot look up {key!r} in group {self.name!r}: the rendezvous store "
                f"(hosted by rank 0) is unavailable: {exc}"
            ) from exc

    def _timeout(self, timeout: float | None) -> float:
        if timeout is None:
            return self._world.rpc_timeout
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
        return timeout

    def _route(self, key: str) -> tuple[str, str, Callable, Callable]:
        entry = self._host_of("s/", key)
        host = entry.removesuffix(_DEFERRED)
        route = self._hosts[key] = (host, _sid(self.name, key),
                                    functools.partial(_settle, self, key, host),
                                    _dispatch if host == entry else _dispatch_deferred)
        return route

    def call_async(self, key: str, *args: Any, timeout: float | None = None,
                   **kwargs: Any) -> torch.futures.Future:
        """Start a call of service ``key``; the Future's ``wait()`` returns its result or
        raises RemoteError / PeerUnavailable / ServiceNotFound like :meth:`call`."""
        route = self._hosts.get(key) or self._route(key)
        raw = rpc.rpc_async(route[0], route[3], args=(route[1], *args), kwargs=kwargs,
                            timeout=self._world.rpc_timeout if timeout is None
                            else self._timeout(timeout))
        # One C++-made child future and no Python Future/closure per call; a failure
        # becomes a _Raise value that the unwrap function raises on wait()/value().
        out = raw.then(route[2])
        out._set_unwrap_func(_unwrap)
        return out

    def call(self, key: str, *args: Any, timeout: float | None = None, **kwargs: Any) -> Any:
        """Call service ``key`` with ``args``/``kwargs`` on its host; one round trip."""
        host, sid, _, dispatch = self._hosts.get(key) or self._route(key)
        fut = rpc.rpc_async(host, dispatch, args=(sid, *args), kwargs=kwargs,
                            timeout=self._world.rpc_timeout if timeout is None else self._timeout(timeout))
        try:
            value = fut.wait()
        except Exception as exc:
            self._hosts.pop(key, None)  # look the host up again next time
            raise _transport_error(exc, host, f"call {key!r}") from exc
        if type(value) is _Failure:
            raise self._failure(key, value)
        return value

    def remote(self, key: str, *args: Any, timeout: float | None = None, **kwargs: Any) -> Handle:
        """Start service ``key`` like :meth:`call_async`, but leave its result with its
        host: the :class:`~rlpar.distributed.remote.Handle` returned at once fetches it
        later (``value()``), from any process it is passed to. ``timeout`` bounds
        the service's run. See :mod:`rlpar.distributed.remote` (Machin's
        ``registered_remote``, without an RRef)."""
        from rlpar.distributed import remote

        route = self._hosts.get(key) or self._route(key)
        return remote.start(self, route, key, args, kwargs,
                            self._world.rpc_timeout if timeout is None else self._timeout(timeout))

    def _failure(self, key: str, failure: _Failure) -> Exception:
        if failure.kind == "ServiceNotFound" and not failure.text:
            self._hosts.pop(key, None)  # stale cache: the host deregistered it
            return ServiceNotFound(
                f"service {key!r} is no longer hosted by {failure.host!r} in group {self.name!r}"
            )
        return RemoteError(
            f"service {key!r} in group {self.name!r} raised {failure.kind} on {failure.host!r}",
            child_name=failure.host, child_traceback=failure.text,
        )

    # --------------------------------------------------------------- paired values

    def pair(self, key: str, value: Any) -> None:
        """Share ``value`` (owned by this process) under ``key``; peers get an RRef."""
        self._require_member(f"pair({key!r})")
        with _table_lock:
            self._claim("p/", key)
            _paired[(self.name, key)] = rpc.RRef(value)

    def get_paired(self, key: str, *, timeout: float | None = None) -> rpc.RRef:
        """The RRef of the value paired under ``key`` (ServiceNotFound if none)."""
        local = _paired.get((self.name, key))
        if local is not None:
            return local
        host = self._host_of("p/", key)
        try:
            value = rpc.rpc_sync(host, _fetch_paired, args=(self.name, key),
                                 timeout=self._timeout(timeout))
        except Exception as exc:
            raise _transport_error(exc, host, f"get_paired {key!r}") from exc
        if type(value) is _Failure:
            raise ServiceNotFound(f"no paired value {key!r} on {host!r} in group {self.name!r}")
        return value

    # --------------------------------------------------------------- sync

    def barrier(self, timeout: float | None = None) -> None:
        """Block until every member reached this barrier; PeerUnavailable naming the
        members missing on timeout, or sooner once every missing member is lost (no
        heartbeat for ``liveness.lost_s()``: its process or machine is gone)."""
        from rlpar.distributed.liveness import lost_s, wait_for

        self._require_member("barrier")
        seconds = self._timeout(timeout)
        with _table_lock:
            round_ = _barrier_rounds.get(self.name, 0)
            _barrier_rounds[self.name] = round_ + 1
        store = self._world.store
        key = f"barrier/{self.name}/{round_}/"
        store.set(key + self.current_member, "1")
        names = self._world.names
        arrival = wait_for(store, {names.index(m): key + m for m in self.members}, timeout=seconds,
                           known_lost=self._world._known_lost)
        if arrival.complete:
            return
        missing = [names[r] for r in arrival.missing]
        lost = [names[r] for r in arrival.lost]
        if len(lost) == len(missing):
            raise PeerUnavailable(f"barrier of group {self.name!r}: members {lost} are lost (no heartbeat "
                                  f"for {min(lost_s(), seconds):g} s)")
        raise PeerUnavailable(
            f"barrier of group {self.name!r}: only {self.size - len(missing)}/{self.size} members "
            f"arrived within {seconds} s; missing {missing}" + (f" ({lost} lost)" if lost else ""))
