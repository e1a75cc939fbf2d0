"""Watching several children at once and raising the first failure promptly."""

from __future__ import annotations

import time
from collections.abc import Sequence
from multiprocessing.connection import wait

from rlpar.parallel.process import Process
from rlpar.parallel.thread import Thread

Child = Thread | Process

# Threads have no OS handle to wait on, so when threads are watched the wait is
# sliced; processes alone are waited on through their handles with no polling.
_THREAD_POLL_S = 0.02


def _alive(child: Child) -> bool:
    return child.is_alive()


def watch_all(
    children: Sequence[Child],
    *,
    timeout: float | None = None,
    terminate_others: bool = True,
) -> None:
    """Wait until every child ended; raise the first failure as soon as it happens.

    Raises ChildError/ChildDied for the first child that fails (the others are
    terminated first when ``terminate_others``; threads cannot be terminated) and
    TimeoutError if children are still running after ``timeout`` seconds.
    """
    if timeout is not None and timeout < 0:
        raise ValueError(f"timeout must be >= 0 or None, got {timeout}")
    for child in children:
        if not isinstance(child, (Thread, Process)):
            raise TypeError(f"watch_all expects rlpar Thread/Process, got {child!r}")
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        for child in children:
            try:
                child.watch()
            except BaseException:
                if terminate_others:
                    for other in children:
                        if other is not child and isinstance(other, Process) and _alive(other):
                            other.terminate()
                    for other in children:
                        if isinstance(other, Process):
                            other.wait(5.0)
                raise
        running = [c for c in children if _alive(c)]
        if not running:
            for child in children:
                child.watch()
            return
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            names = ", ".join(c.name for c in running)
            raise TimeoutError(f"children still running after {timeout} s: {names}")
        # Readers wake us on a report, so a failure is raised before the child exits.
        processes = [h for c in running if isinstance(c, Process) for h in c.wait_handles()]
        if any(isinstance(c, Thread) for c in running):
            slice_s = _THREAD_POLL_S if remaining is None else min(_THREAD_POLL_S, remaining)
        else:
            slice_s = remaining
        if processes:
            wait(processes, slice_s)
        else:
            time.sleep(slice_s)
