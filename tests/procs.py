"""Process-state checks shared by the tests that kill processes or wait for them to end."""

from __future__ import annotations

import os
import signal
import time


def is_dead(pid: int) -> bool:
    """``pid`` is no longer running: gone, or a zombie waiting to be reaped."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            # The state follows the command name, which may itself hold ") ".
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:  # no such entry, or reaped between open and read (ESRCH)
        return True


def wait_until_dead(pids: list[int], *, timeout: float = 10.0) -> list[int]:
    """Poll until every pid :func:`is_dead` or ``timeout`` passes; the ones still alive."""
    deadline = time.monotonic() + timeout
    while True:
        alive = [pid for pid in pids if not is_dead(pid)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.01)


def kill_and_wait(pid: int, *, timeout: float = 10.0) -> None:
    """SIGKILL ``pid`` and wait until :func:`is_dead` says so."""
    os.kill(pid, signal.SIGKILL)
    if wait_until_dead([pid], timeout=timeout):
        raise AssertionError(f"process {pid} did not die within {timeout} s")
