"""A Ctrl-C sent to this process (the launcher, here a pytest worker) from a thread.

A KeyboardInterrupt that leaves a test ends the whole session (xdist takes the
worker for interrupted and stops every worker), so a launch that lets one through, or
a signal that lands after its test ended, must fail that test alone: the fixture
cancels a signal not yet sent and swallows one sent at the test's last moment, and
``contained`` turns an interrupt out of the launch into the test's failure."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator

import pytest


class CtrlC:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cancelled = threading.Event()
        self._threads: list[threading.Thread] = []

    def when(self, ready: Callable[[], bool], *, after: float = 0.0) -> None:
        """SIGINT this process once ``ready()`` holds and ``after`` more seconds passed."""
        def send() -> None:
            while not ready():
                if self._cancelled.wait(0.005):
                    return
            if self._cancelled.wait(after):
                return
            with self._lock:
                if not self._cancelled.is_set():
                    os.kill(os.getpid(), signal.SIGINT)

        thread = threading.Thread(target=send, daemon=True)
        thread.start()
        self._threads.append(thread)

    @contextlib.contextmanager
    def contained(self) -> Iterator[None]:
        """A KeyboardInterrupt out of the block fails the test (pytest would end the
        session on it)."""
        try:
            yield
        except KeyboardInterrupt as exc:
            pytest.fail(f"a KeyboardInterrupt escaped: {exc!r}")

    def cancel(self) -> None:
        with self._lock:
            self._cancelled.set()
        for thread in self._threads:
            thread.join(timeout=5)


@pytest.fixture
def ctrl_c():
    """SIGINT raises KeyboardInterrupt here, as in a terminal (a shell without job
    control starts background commands, a CI runner's, with SIGINT ignored, and Python
    keeps it ignored); ``ctrl_c.when(ready, after=s)`` sends one from a thread, and
    ``with ctrl_c.contained():`` runs what it reaches."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    sender = CtrlC()
    yield sender
    try:
        sender.cancel()
    except KeyboardInterrupt:
        pass  # sent just before the cancel: the test was over
    finally:
        signal.signal(signal.SIGINT, old)
