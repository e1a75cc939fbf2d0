"""Waiting on any or all of several events, without patching ``threading.Event``.

Design choice: a condition-variable OrEvent/AndEvent needs every ``set()`` to
notify a shared condition, which means either monkeypatching ``threading.Event`` or
requiring callers to use a special event class; neither works for events we do not
own, such as ``multiprocessing.Event`` from another library. So ``wait_all`` blocks
on each event in turn (no polling at all), and ``wait_any`` blocks on one event for
a short slice that grows from 0.1 ms to 5 ms, then checks the rest. That costs at
most a few milliseconds of latency and almost no CPU, and works for any object
with ``is_set()`` and ``wait(timeout)``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Protocol


class EventLike(Protocol):
    def is_set(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> Any: ...


_FIRST_SLICE_S = 1e-4
_MAX_SLICE_S = 5e-3


def _check(events: Sequence[EventLike], timeout: float | None) -> list[EventLike]:
    events = list(events)
    if not events:
        raise ValueError("events must not be empty")
    for event in events:
        if not (callable(getattr(event, "is_set", None)) and callable(getattr(event, "wait", None))):
            raise TypeError(f"expected an event with is_set() and wait(), got {event!r}")
    if timeout is not None and timeout < 0:
        raise ValueError(f"timeout must be >= 0 or None, got {timeout}")
    return events


def _set_indices(events: Sequence[EventLike]) -> list[int]:
    return [i for i, event in enumerate(events) if event.is_set()]


def wait_any(events: Sequence[EventLike], timeout: float | None = None) -> list[int]:
    """Block until at least one event is set; return the indices of the set events.

    Returns an empty list (falsy) if none was set within ``timeout`` seconds.
    """
    events = _check(events, timeout)
    deadline = None if timeout is None else time.monotonic() + timeout
    slice_s = _FIRST_SLICE_S
    turn = 0
    while True:
        ready = _set_indices(events)
        if ready:
            return ready
        wait_s = slice_s
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            wait_s = min(wait_s, remaining)
        # Blocking on an event (instead of sleeping) wakes at once if that one is set;
        # rotating which one spreads that benefit over all of them.
        events[turn % len(events)].wait(wait_s)
        turn += 1
        slice_s = min(slice_s * 2, _MAX_SLICE_S)


def wait_all(events: Sequence[EventLike], timeout: float | None = None) -> bool:
    """Block until every event is set at once; False if that did not happen in time."""
    events = _check(events, timeout)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        for event in events:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not event.wait(remaining):
                return False
        # An event may have been cleared while we waited on a later one.
        if len(_set_indices(events)) == len(events):
            return True
        if deadline is not None and time.monotonic() >= deadline:
            return False


class MultiEvent:
    """An event that is set when any (``mode="any"``) or all (``mode="all"``) of
    several underlying events are set. It is read-only: set the underlying events."""

    def __init__(self, *, events: Sequence[EventLike], mode: str = "any") -> None:
        if mode not in ("any", "all"):
            raise ValueError(f"mode must be 'any' or 'all', got {mode!r}")
        self.events = _check(events, None)
        self.mode = mode

    def is_set(self) -> bool:
        ready = _set_indices(self.events)
        return bool(ready) if self.mode == "any" else len(ready) == len(self.events)

    def wait(self, timeout: float | None = None) -> bool:
        if self.mode == "any":
            return bool(wait_any(self.events, timeout))
        return wait_all(self.events, timeout)

    def set_indices(self) -> list[int]:
        """Indices of the underlying events that are set now."""
        return _set_indices(self.events)
