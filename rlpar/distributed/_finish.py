"""The end of a :func:`rlpar.distributed.launch`: ranks still running once the lead
(rank 0) has returned its result are given ``finish_grace`` seconds, then killed and
named with what they were doing (their main thread's innermost frames, dumped by
faulthandler on ``DUMP_SIGNAL``; see ``_zygote``), so that a hung rank (an actor
stuck in its env, say) does not hold the run until the launch's timeout."""

from __future__ import annotations

import logging
import os
import pickle
import re
import time
from collections.abc import Callable
from typing import Any

from rlpar.distributed._child import DUMP_SIGNAL, PID_FILE, STACK_FILE

log = logging.getLogger("rlpar.distributed.launch")  # the launch's warnings, under its name


def read_result(path: str) -> tuple[str, Any] | None:
    """A rank's outcome, ("ok", value) or ("error", ...); None if not written yet."""
    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    except (OSError, EOFError, pickle.UnpicklingError):
        return None


class Finish:
    """``finish_grace``: how long the other ranks may run once rank 0 returned."""

    def __init__(self, grace: float | None, labels: list[str]) -> None:
        self.grace, self.labels = grace, labels
        self.lead_done: float | None = None  # when rank 0's result was first seen

    def name(self, rank: int) -> str:
        return f"rank {rank}" + (f" ({self.labels[rank]})" if rank < len(self.labels) else "")

    def expired(self, tmp: str, results: dict[int, Any]) -> bool:
        if self.grace is None:
            return False
        if self.lead_done is None:
            # Its result file, not its exit: a lead leaving its world waits for the
            # others, and the grace is theirs.
            outcome = results.get(0) if 0 in results else read_result(os.path.join(tmp, "result0.pkl"))
            if 0 in results or (outcome is not None and outcome[0] == "ok"):
                self.lead_done = time.monotonic()
            return False
        return time.monotonic() - self.lead_done > self.grace

    def give_up(self, tmp: str, nprocs: int, results: dict[int, Any], *, stop: Callable[[], None]) -> list:
        """Kill the ranks still running (``stop``); the results of those that returned one."""
        late = []
        for rank in range(nprocs):
            if rank in results:
                continue
            outcome = read_result(os.path.join(tmp, f"result{rank}.pkl"))
            if outcome is not None and outcome[0] == "ok":
                results[rank] = outcome[1]  # returned, and was still leaving its world
            else:
                late.append(rank)
        stacks = _dump_stacks(tmp, late)
        stop()
        for rank in late:
            results[rank] = None
            log.warning("%s had not finished %g s after the lead (rank 0) returned; killed it. Its main thread "
                        "was in: %s", self.name(rank), self.grace, stacks.get(rank) or "(no stack dump)")
        return [results[r] for r in range(nprocs)]


def _dump_stacks(tmp: str, ranks: list[int], wait: float = 1.0) -> dict[int, str]:
    """Ask ``ranks`` to dump their threads' stacks (faulthandler, see _zygote) and
    return each one's main thread, innermost frames first."""
    asked = []
    for rank in ranks:
        try:
            with open(os.path.join(tmp, PID_FILE.format(rank=rank))) as f:
                os.kill(int(f.read()), DUMP_SIGNAL)  # not yet reaped: still this rank's pid
            asked.append(rank)
        except (OSError, ValueError):
            pass
    stacks: dict[int, str] = {}
    deadline = time.monotonic() + wait
    while asked and time.monotonic() < deadline:
        time.sleep(0.05)  # faulthandler writes the whole dump at once, from the signal handler
        for rank in list(asked):
            try:
                with open(os.path.join(tmp, STACK_FILE.format(rank=rank))) as f:
                    text = f.read()
            except OSError:
                text = ""
            if text:
                stacks[rank] = _main_thread(text)
                asked.remove(rank)
    return stacks


def _main_thread(dump: str, frames: int = 4) -> str:
    """The innermost ``frames`` of the last thread in a faulthandler dump (CPython
    lists threads newest first, so the main thread comes last)."""
    block = dump.strip().split("\n\n")[-1].splitlines()[1:]
    shown = []
    for line in block[:frames]:
        match = re.match(r'\s*File "(.*)", line (\d+) in (.*)', line)
        shown.append(f"{match[3]} ({os.path.basename(match[1])}:{match[2]})" if match else line.strip())
    return " <- ".join(shown)
