"""The handle of a task submitted to a pool."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

_PENDING = object()


def check_timeout(timeout: float | None) -> None:
    if timeout is not None and timeout < 0:
        raise ValueError(f"timeout must be >= 0 or None, got {timeout}")


class AsyncResult:
    """Result of one pool task: ``get(timeout)``, ``wait(timeout)``, ``ready()``,
    ``successful()``. ``get`` re-raises the task's failure (ChildError with the
    worker's traceback, or ChildDied if the worker process died running it)."""

    def __init__(self, *, description: str = "task") -> None:
        self.description = description
        self._done = threading.Event()
        self._value: Any = _PENDING
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[AsyncResult], None]] = []
        self._lock = threading.Lock()

    def _finish(self, value: Any = None, error: BaseException | None = None) -> None:
        with self._lock:
            if self._done.is_set():
                return  # first outcome wins (e.g. a result racing a terminate)
            self._value, self._error = value, error
            self._done.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(self)

    def set_result(self, value: Any) -> None:
        self._finish(value=value)

    def set_error(self, error: BaseException) -> None:
        self._finish(error=error)

    def add_done_callback(self, callback: Callable[[AsyncResult], None]) -> None:
        """Call ``callback(self)`` once the task finished (at once if it already has)."""
        with self._lock:
            if not self._done.is_set():
                self._callbacks.append(callback)
                return
        callback(self)

    def ready(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        check_timeout(timeout)
        return self._done.wait(timeout)

    def successful(self) -> bool:
        if not self.ready():
            raise ValueError(f"{self.description} is not ready yet")
        return self._error is None

    def get(self, timeout: float | None = None) -> Any:
        check_timeout(timeout)
        if not self._done.wait(timeout):
            raise TimeoutError(f"{self.description} did not finish within {timeout} s")
        if self._error is not None:
            raise self._error
        return self._value
