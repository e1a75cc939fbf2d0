"""A run's peak memory: the proportional set size (PSS) of a process and every process
under it, summed, sampled while it runs.

A job is many processes (a local world's ranks, env workers, replay servers), forked
from one warm parent, so they share most of their pages (torch's libraries, shared
memory of the vector envs). Summing their resident sizes counts each shared page once
per process; PSS splits a shared page among the processes that map it, so the sum is
what the job holds. Linux only (``/proc/<pid>/smaps_rollup``); elsewhere the sampler
reports None.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found.extend(int(c) for c in f.read().split())
        except OSError:
            continue
    return found


def tree(pid: int) -> list[int]:
    """``pid`` and every live process under it."""
    seen, stack = [], [pid]
    while stack:
        p = stack.pop()
        if p in seen:
            continue
        seen.append(p)
        stack.extend(_children(p))
    return seen


def pss_kb(pid: int) -> int:
    """The PSS of one process in KiB (0 if it is gone or unreadable)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def tree_pss_mb(pid: int) -> float:
    """The summed PSS of ``pid`` and its descendants, in MiB."""
    return sum(pss_kb(p) for p in tree(pid)) / 1024.0


def status_mb(pid: int | str, field: str) -> float:
    """A memory figure of one process from ``/proc/<pid>/status`` (``VmRSS``, ``VmHWM``,
    ``RssAnon``: resident pages that are no file's), in MiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    raise RuntimeError(f"no {field} in /proc/{pid}/status")


def _reads(measure: Callable[[int], float]) -> bool:
    """Whether ``measure`` reads a figure of this process where it runs: the measure
    knows what it reads (:func:`pss_kb` answers 0 where it cannot, :func:`status_mb`
    raises)."""
    try:
        return measure(os.getpid()) > 0
    except (OSError, RuntimeError, ValueError):
        return False


class PeakMemory:
    """Samples ``measure(pid)`` (default :func:`tree_pss_mb`) every ``interval_s`` in a
    thread until :meth:`stop`; :attr:`peak_mb` is the largest value seen (None where
    ``measure`` cannot read this process, e.g. no ``/proc/<pid>/smaps_rollup`` for the
    default), :attr:`samples` how many were taken."""

    def __init__(self, pid: int, *, interval_s: float = 2.0,
                 measure: Callable[[int], float] = tree_pss_mb) -> None:
        if not interval_s > 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self.pid, self.interval_s, self.measure = pid, interval_s, measure
        self.supported = _reads(measure)
        self.peak_mb: float | None = None
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="peak-memory", daemon=True)

    def start(self) -> PeakMemory:
        if self.supported:
            self._thread.start()
        return self

    def sample(self) -> None:
        now = self.measure(self.pid)
        self.samples += 1
        if now > 0 and (self.peak_mb is None or now > self.peak_mb):
            self.peak_mb = now

    def _run(self) -> None:
        while True:
            self.sample()
            if self._stop.wait(self.interval_s):
                return

    def stop(self) -> float | None:
        """Stop sampling; the peak in MiB, rounded to 0.1 (None if unsupported)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        return None if self.peak_mb is None else round(self.peak_mb, 1)
