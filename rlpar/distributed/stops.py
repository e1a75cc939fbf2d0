"""This process's stop request, kept from the moment one can arrive.

A stop (Ctrl-C, SIGTERM, or the local launcher's forwarded Ctrl-C/SIGTERM: SIGUSR1/
SIGUSR2) can land before the code that acts on it is ready: a rank still importing or
joining its world. Ignored there, a Ctrl-C 2.5 s into a run was dropped and the run
went on for its whole budget. :func:`record` installs handlers that only note the
first request; the code that stops the work (``experiments.runtime.job.StopSignals``)
picks up an early one with :func:`take` and notes its own with :func:`acted`.
:class:`rlpar.distributed.World` leaves its world within :data:`LEAVE_S` once a stop
was requested (a peer may be gone: under torchrun every rank gets the SIGTERM at once).

A second request aborts (KeyboardInterrupt), except the duplicate of the first: a
terminal's Ctrl-C reaches a local rank both directly and forwarded by the launcher.
"""

from __future__ import annotations

import signal
import threading
import time
from typing import Any

FORWARDED = (signal.SIGUSR1, signal.SIGUSR2)
REASONS = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated",
           signal.SIGUSR1: "interrupted", signal.SIGUSR2: "terminated"}
# Once a stop was requested, leaving the world waits at most this long for the peers
# (instead of the RPC timeout): well inside torchrun's 30 s between SIGTERM and SIGKILL.
LEAVE_S = 5.0
# A direct signal this soon after a forwarded one is the same Ctrl-C, not a second.
_DUPLICATE_S = 1.0

_first: tuple[int, float] | None = None  # (signal number, time.monotonic())
_taken = False  # some code acted on the request (a later StopSignals must not again)


def note(signum: int) -> bool:
    """Note a stop request: True for the first, False for a duplicate of it; raises
    KeyboardInterrupt for a second request (abort)."""
    global _first
    now = time.monotonic()
    if _first is None:
        _first = (int(signum), now)
        return True
    first, at = _first
    if signum in FORWARDED or (first in FORWARDED and now - at < _DUPLICATE_S):
        return False
    raise KeyboardInterrupt


def take() -> int | None:
    """The signal of a stop request nobody has acted on yet (then it is acted on)."""
    global _taken
    if _first is None or _taken:
        return None
    _taken = True
    return _first[0]


def acted(signum: int) -> None:
    """A stop request was acted on by code with its own handler (StopSignals)."""
    global _first, _taken
    if _first is None:
        _first = (int(signum), time.monotonic())
    _taken = True


def requested() -> int | None:
    """The signal of this process's first stop request, or None."""
    return None if _first is None else _first[0]


def reason(signum: int) -> str:
    """What a stop signal means: "interrupted" (Ctrl-C) or "terminated"."""
    return REASONS[signum]


def _handle(signum: int, frame: object) -> None:
    note(signum)


def record(signals: tuple[int, ...] = (signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2)) -> dict[int, Any]:
    """Note stop requests from now on (main thread only; elsewhere a no-op); returns
    the handlers replaced, for :func:`restore`."""
    old: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in signals:
            old[sig] = signal.signal(sig, _handle)
    return old


def restore(old: dict[int, Any]) -> None:
    """Put back the handlers :func:`record` replaced, and forget the request."""
    for sig, handler in old.items():
        signal.signal(sig, handler)
    forget()


def recording(signum: int) -> bool:
    """Whether ``signum`` is noted by :func:`record`'s handler right now."""
    return signal.getsignal(signum) is _handle


def forget() -> None:
    """Forget the request (tests; a forked process starts with its own)."""
    global _first, _taken
    _first, _taken = None, False
