"""The process-local half of RPC services: what this process hosts, the dispatchers a
caller's RPC lands in, and how a failure travels back. :mod:`.rpc_group` (the
:class:`~rlpar.distributed.rpc_group.RpcGroup` API) and :mod:`.remote` (handles) are
built on it, each importing only this, so neither imports the other's insides."""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed.rpc as rpc

from rlpar.errors import PeerUnavailable, RemoteError

# (group name, key) -> callable / RRef, for what this process hosts.
_services: dict[tuple[str, str], Callable] = {}
# The same callables keyed by _sid(group, key): what _dispatch looks up per call.
_services_by_sid: dict[str, Callable] = {}
_paired: dict[tuple[str, str], rpc.RRef] = {}
_barrier_rounds: dict[str, int] = {}
_table_lock = threading.Lock()


class _Failure:
    """What the dispatcher returns when the service raised: the remote traceback as text
    (the exception object itself may not unpickle on the caller)."""

    __slots__ = ("host", "kind", "text")

    def __init__(self, host: str, kind: str, text: str) -> None:
        self.host, self.kind, self.text = host, kind, text

    def __reduce__(self):
        return (_Failure, (self.host, self.kind, self.text))


def _dispatch(sid: str, /, *args: Any, **kwargs: Any) -> Any:
    # One string key and the caller's own args on the wire, as close as possible to a
    # raw rpc to ``fn`` itself: the group layer's cost is paid per call.
    fn = _services_by_sid.get(sid)
    if fn is None:
        return _Failure(rpc.get_worker_info().name, "ServiceNotFound", "")
    try:
        return fn(*args, **kwargs)
    except BaseException as exc:  # noqa: B036 - every failure goes back to the caller
        return _Failure(rpc.get_worker_info().name, type(exc).__name__, traceback.format_exc())


def _failed_now(failure: _Failure) -> torch.futures.Future:
    fut: torch.futures.Future = torch.futures.Future()
    fut.set_result(failure)
    return fut


def _deferred_outcome(fut: torch.futures.Future) -> Any:
    try:
        return fut.value()
    except BaseException as exc:  # noqa: B036 - the caller gets it as a RemoteError
        text = "".join(traceback.format_exception(exc))
        return _Failure(rpc.get_worker_info().name, type(exc).__name__, text)


@rpc.functions.async_execution
def _dispatch_deferred(sid: str, /, *args: Any, **kwargs: Any) -> torch.futures.Future:
    # The service returns a Future; torch answers the caller when it completes and
    # frees this RPC thread at once.
    fn = _services_by_sid.get(sid)
    if fn is None:
        return _failed_now(_Failure(rpc.get_worker_info().name, "ServiceNotFound", ""))
    try:
        fut = fn(*args, **kwargs)
        if not isinstance(fut, torch.futures.Future):
            raise TypeError(f"a deferred service must return a torch Future, got {type(fut).__name__}")
    except BaseException as exc:  # noqa: B036 - every failure goes back to the caller
        return _failed_now(_Failure(rpc.get_worker_info().name, type(exc).__name__,
                                    traceback.format_exc()))
    return fut.then(_deferred_outcome)


# Store value of a deferred service: its host's name then this marker.
_DEFERRED = "\x00deferred"


def _sid(group: str, key: str) -> str:
    return f"{group}\x00{key}"


def _transport_error(exc: BaseException, host: str, what: str) -> BaseException:
    text = str(exc)
    if "On WorkerInfo" in text and not isinstance(exc, RuntimeError):
        # The remote side failed before our dispatcher ran (e.g. an argument that
        # does not unpickle there): torch re-raises it here with the remote traceback.
        return RemoteError(f"{what} failed on {host}: {type(exc).__name__}",
                           child_name=host, child_traceback=text)
    if "timeout" not in text:
        # A broken connection, not a slow peer: shutdown will not wait for it.
        from rlpar.distributed import current

        world = current.get()
        if world is not None:
            world.unreachable.add(host)
    return PeerUnavailable(f"{what}: peer {host!r} is unavailable or did not answer in time: {text}")
