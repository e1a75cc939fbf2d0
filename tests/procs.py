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


def kill_and_wait(pid: int, *, timeout: float = 10.0) -> None:
    """SIGKILL ``pid`` and wait until :func:`is_dead` says so."""
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while not is_dead(pid):
        if time.monotonic() > deadline:
            raise AssertionError(f"process {pid} did not die within {timeout} s")
        time.sleep(0.01)
