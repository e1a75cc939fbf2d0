"""Remote calls whose result stays with the callee until someone fetches it.

:meth:`RpcGroup.remote` runs a service like :meth:`RpcGroup.call` but returns a
:class:`Handle` at once; the result is kept by the service's host (as Machin's
``registered_remote`` kept it in an RRef) until :meth:`Handle.value` fetches it. A
handle is picklable: passed to a third rank, it fetches the value straight from the
host, with no copy through the caller (a coordinator can start work on one rank and
hand its result to another).

Why not torch's RRef: an RRef's value is fetched by a message that carries only the
RRef's id (its creator's worker id and a counter, both guessable), not a pickled
call, so the run secret cannot refuse it (:mod:`rlpar.distributed.sealed`): any
process that reaches the host's port could read the value. Here every step (start,
fetch, release, peek) is an ordinary pickled call, signed and checked like any other,
and a value is named by 128 random bits drawn by the caller, so no two callers'
handles collide and the handle exists before the host has seen the call.

Lifetime: a value is kept until fetched once (a :class:`Handle` object caches what it
fetched, so its own ``value()`` may be called again), released with
:meth:`Handle.release`, or its host's World shuts down. An unfetched, unreleased
value stays on the host: release what you will not fetch.
"""

from __future__ import annotations

import collections
import functools
import secrets
import threading
from typing import Any

import torch
import torch.distributed.rpc as rpc

from rlpar.distributed.rpc_dispatch import _dispatch, _dispatch_deferred, _Failure, _transport_error

_GONE = "HandleGone"  # _Failure kind: fetched or released already
_KEEP_GONE = 65536  # how many fetched/released names a host remembers (to say so)
_kept: dict[str, torch.futures.Future] = {}
_gone: collections.OrderedDict[str, None] = collections.OrderedDict()
_lock = threading.Lock()
_MISSING = object()


def forget() -> None:
    """Drop every value this process keeps (its World shuts down)."""
    with _lock:
        _kept.clear()
        _gone.clear()


def _forget_one(token: str) -> None:  # holding _lock
    _kept.pop(token, None)
    _gone[token] = None
    if len(_gone) > _KEEP_GONE:
        _gone.popitem(last=False)


def _entry(token: str) -> torch.futures.Future | None:
    # A fetch may arrive before the start (they travel on different connections):
    # whichever comes first makes the entry the other completes or waits on.
    with _lock:
        if token in _gone:
            return None
        entry = _kept.get(token)
        if entry is None:
            entry = _kept[token] = torch.futures.Future()
        return entry


def _fill(token: str, result: Any) -> bool:
    entry = _entry(token)
    if entry is not None:  # None: released before the service finished
        entry.set_result(result)  # outside the lock: it runs the fetchers' callbacks
    return True


def _start(sid: str, token: str, /, *args: Any, **kwargs: Any) -> bool:
    return _fill(token, _dispatch(sid, *args, **kwargs))


def _filled(token: str, fut: torch.futures.Future) -> bool:
    return _fill(token, fut.value())


@rpc.functions.async_execution
def _start_deferred(sid: str, token: str, /, *args: Any, **kwargs: Any) -> torch.futures.Future:
    # _dispatch_deferred called in-process: its Future of the outcome (never raises).
    return _dispatch_deferred(sid, *args, **kwargs).then(functools.partial(_filled, token))


def _deliver(token: str, fut: torch.futures.Future) -> Any:
    with _lock:
        _forget_one(token)
    return fut.value()


@rpc.functions.async_execution
def _take(token: str) -> torch.futures.Future:
    # No RPC thread waits for a value still being computed: the reply goes when it is.
    entry = _entry(token)
    if entry is None:
        done: torch.futures.Future = torch.futures.Future()
        done.set_result(_Failure(rpc.get_worker_info().name, _GONE, ""))
        return done
    return entry.then(functools.partial(_deliver, token))


def _release(token: str) -> None:
    with _lock:
        _forget_one(token)


def _peek(token: str) -> bool:
    with _lock:
        entry = _kept.get(token)
        return token in _gone if entry is None else entry.done()


class Handle:
    """The result of :meth:`RpcGroup.remote`, kept by its host until fetched."""

    def __init__(self, *, group, key: str, host: str, token: str,
                 started: torch.futures.Future | None = None) -> None:
        self.group, self.key, self.host = group, key, host
        self._token = token
        self._started = started  # the start call's reply; only in the caller's own handle
        self._value: Any = _MISSING

    def __reduce__(self):
        # A copy fetches from the host itself; what this object fetched stays here.
        return (_rebuild, (self.group, self.key, self.host, self._token))

    def __repr__(self) -> str:
        return f"Handle(key={self.key!r}, host={self.host!r}, group={self.group.name!r})"

    def _error(self, exc: BaseException, what: str) -> BaseException:
        self.group._hosts.pop(self.key, None)  # look the host up again next time
        return _transport_error(exc, self.host, f"{what} of {self.key!r}")

    def done(self) -> bool:
        """Whether the service has finished (its value or error is ready). The
        caller's own handle knows without a message; a copy asks the host."""
        if self._value is not _MISSING:
            return True
        if self._started is not None:
            return self._started.done()
        try:
            return rpc.rpc_sync(self.host, _peek, args=(self._token,),
                                timeout=self.group._timeout(None))
        except Exception as exc:
            raise self._error(exc, "done") from exc

    def value(self, timeout: float | None = None) -> Any:
        """The service's result, fetched from its host (waiting for it to finish).
        Raises what :meth:`RpcGroup.call` raises: RemoteError (with the remote
        traceback) if the service raised, PeerUnavailable if the host is gone or the
        fetch takes more than ``timeout`` seconds (default: the World's rpc_timeout),
        ServiceNotFound if nobody hosts the key; ValueError if the value was fetched
        (by another copy) or released already."""
        if self._value is not _MISSING:
            return self._value
        seconds = self.group._timeout(timeout)
        if self._started is not None:
            try:
                self._started.wait()  # a start that failed never fills the value
            except Exception as exc:
                raise self._error(exc, "remote call") from exc
        try:
            value = rpc.rpc_async(self.host, _take, args=(self._token,), timeout=seconds).wait()
        except Exception as exc:
            raise self._error(exc, "value") from exc
        if type(value) is _Failure:
            if value.kind == _GONE:
                raise ValueError(f"the value of {self!r} was fetched or released already")
            raise self.group._failure(self.key, value)
        self._value = value
        return value

    def release(self) -> bool:
        """Let the host drop the value unfetched; False if the host is unreachable
        (then there is nothing to free)."""
        self._value = _MISSING
        try:
            rpc.rpc_sync(self.host, _release, args=(self._token,), timeout=self.group._timeout(None))
        except Exception:
            return False
        return True


def _rebuild(group, key: str, host: str, token: str) -> Handle:
    return Handle(group=group, key=key, host=host, token=token)


def start(group, route: tuple, key: str, args: tuple, kwargs: dict, timeout: float) -> Handle:
    """Send the start of ``key`` to its host (``route`` as RpcGroup caches it)."""
    host, sid, _, dispatch = route
    token = secrets.token_hex(16)
    fn = _start if dispatch is _dispatch else _start_deferred
    started = rpc.rpc_async(host, fn, args=(sid, token, *args), kwargs=kwargs, timeout=timeout)
    return Handle(group=group, key=key, host=host, token=token, started=started)
