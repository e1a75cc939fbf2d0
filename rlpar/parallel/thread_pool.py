"""A pool of threads, optionally with one context object per thread."""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Callable
from typing import Any

from rlpar.errors import RlparError
from rlpar.parallel._report import child_error, report_current_exception
from rlpar.parallel.pool import Pool, PoolClosed, check_processes, task_name
from rlpar.parallel.result import AsyncResult, check_timeout

_STOP = None
_pool_ids = itertools.count(1)


class ThreadPool(Pool):
    """``processes`` worker threads sharing one task queue.

    Callables are not pickled (threads share memory). A task's exception is
    re-raised at ``get()`` as ChildError with the worker thread's traceback. Threads
    cannot be killed, so ``terminate()`` fails unfinished tasks at once and lets the
    running ones end in the background.
    """

    def __init__(
        self,
        *,
        processes: int = 2,
        context_factory: Callable[[], Any] | None = None,
        name: str | None = None,
    ) -> None:
        check_processes(processes)
        if context_factory is not None and not callable(context_factory):
            raise TypeError(f"context_factory must be callable, got {context_factory!r}")
        self.name = name or f"ThreadPool-{next(_pool_ids)}"
        self._context_factory = context_factory
        self._tasks: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._state = "running"
        self._pending: set[AsyncResult] = set()
        self._threads = [
            threading.Thread(target=self._worker, args=(f"{self.name}-worker-{i}",),
                             name=f"{self.name}-worker-{i}", daemon=True)
            for i in range(processes)
        ]
        for thread in self._threads:
            thread.start()

    def _worker(self, worker_name: str) -> None:
        context: Any = None
        init_report = None
        if self._context_factory is not None:
            try:
                context = self._context_factory()
            except BaseException as exc:  # noqa: BLE001 - reported by every task instead
                init_report = report_current_exception(exc)
        while True:
            item = self._tasks.get()
            if item is _STOP:
                return
            result, fn, args, kwargs = item
            with self._lock:
                if result not in self._pending:
                    continue  # cancelled by terminate()
            try:
                if init_report is not None:
                    raise child_error(f"context_factory in {worker_name!r}", init_report,
                                      child_name=worker_name)
                if self._context_factory is not None:
                    value = fn(context, *args, **kwargs)
                else:
                    value = fn(*args, **kwargs)
            except BaseException as exc:  # noqa: BLE001 - re-raised at get()
                error = child_error(f"task {task_name(fn)} in {worker_name!r}",
                                    report_current_exception(exc), child_name=worker_name)
                error.__cause__ = exc
                self._finish(result, error=error)
            else:
                self._finish(result, value=value)
            del item, fn, args, kwargs, result

    def _finish(self, result: AsyncResult, *, value: Any = None,
                error: BaseException | None = None) -> None:
        with self._lock:
            self._pending.discard(result)
        if error is not None:
            result.set_error(error)
        else:
            result.set_result(value)

    def _submit(self, fn: Callable[..., Any], args: tuple[Any, ...],
                kwargs: dict[str, Any]) -> AsyncResult:
        result = AsyncResult(description=f"task {task_name(fn)} in {self.name}")
        with self._lock:
            if self._state != "running":
                raise PoolClosed(f"{self.name} is {self._state}; it accepts no new tasks")
            self._pending.add(result)
        self._tasks.put((result, fn, args, kwargs))
        return result

    def close(self) -> None:
        """Accept no more tasks; queued ones still run."""
        with self._lock:
            if self._state != "running":
                return
            self._state = "closed"
        for _ in self._threads:
            self._tasks.put(_STOP)

    def join(self, timeout: float | None = None) -> None:
        """Wait for the workers to finish; the pool must be closed or terminated."""
        check_timeout(timeout)
        if self._state == "running":
            raise ValueError(f"{self.name}: call close() or terminate() before join()")
        for thread in self._threads:
            thread.join(timeout)
            if thread.is_alive():
                raise TimeoutError(f"{self.name}: {thread.name} still busy after {timeout} s")

    def terminate(self) -> None:
        """Fail every unfinished task and accept no new ones.

        A task already running keeps running in its thread (threads cannot be
        killed) but its outcome is dropped.
        """
        with self._lock:
            was_running = self._state == "running"
            self._state = "terminated"
            cancelled, self._pending = self._pending, set()
        for result in cancelled:
            result.set_error(RlparError(f"{result.description}: pool was terminated"))
        if was_running:
            for _ in self._threads:
                self._tasks.put(_STOP)
