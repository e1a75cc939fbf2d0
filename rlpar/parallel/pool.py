"""What every rlpar pool offers, built on one primitive: ``apply_async``.

``ThreadPool`` and ``ProcessPool`` implement ``_submit``; ``map``, ``imap``,
``imap_unordered``, ``starmap`` and context-manager use live here once.
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from rlpar.errors import RlparError
from rlpar.parallel.result import AsyncResult, check_timeout


class PoolClosed(RlparError, ValueError):
    """A task was submitted to a pool that was closed or terminated."""


def check_processes(processes: int) -> int:
    if isinstance(processes, bool) or not isinstance(processes, int):
        raise TypeError(f"processes must be an int, got {processes!r}")
    if processes < 1:
        raise ValueError(f"processes must be >= 1, got {processes}")
    return processes


def task_name(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)


class _ResultIterator(Iterator[Any]):
    """Yields task results; unlike a generator it stays usable after a task failed,
    so one bad item does not hide the results after it."""

    def __init__(self, results: list[AsyncResult], timeout: float | None, *,
                 ordered: bool) -> None:
        self._timeout = timeout
        self._left = len(results)
        self._finished: queue.SimpleQueue[AsyncResult] = queue.SimpleQueue()
        if ordered:
            for result in results:
                self._finished.put(result)
        else:
            for result in results:
                result.add_done_callback(self._finished.put)

    def __next__(self) -> Any:
        if self._left == 0:
            raise StopIteration
        try:
            result = self._finished.get(timeout=self._timeout)
        except queue.Empty:
            raise TimeoutError(f"no task finished within {self._timeout} s") from None
        self._left -= 1
        return result.get(self._timeout)


class Pool:
    """Base class of ThreadPool and ProcessPool.

    With ``context_factory`` set, each worker calls it once and passes the result as
    the first argument of every task: ``fn(context, *args)``.
    """

    def _submit(
        self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> AsyncResult:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def join(self, timeout: float | None = None) -> None:
        raise NotImplementedError

    def terminate(self) -> None:
        raise NotImplementedError

    # -- submission ------------------------------------------------------------------
    def apply_async(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> AsyncResult:
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {fn!r}")
        return self._submit(fn, tuple(args), dict(kwargs or {}))

    def apply(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
    ) -> Any:
        check_timeout(timeout)
        return self.apply_async(fn, args, kwargs).get(timeout)

    def _submit_all(self, fn: Callable[..., Any], iterable: Iterable[Any], star: bool) -> list:
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {fn!r}")
        return [self._submit(fn, tuple(item) if star else (item,), {}) for item in iterable]

    def map(
        self, fn: Callable[..., Any], iterable: Iterable[Any], *, timeout: float | None = None
    ) -> list[Any]:
        """``[fn(x) for x in iterable]`` in parallel, in order; ``timeout`` is per item."""
        check_timeout(timeout)
        return [result.get(timeout) for result in self._submit_all(fn, iterable, False)]

    def starmap(
        self, fn: Callable[..., Any], iterable: Iterable[Iterable[Any]], *,
        timeout: float | None = None,
    ) -> list[Any]:
        check_timeout(timeout)
        return [result.get(timeout) for result in self._submit_all(fn, iterable, True)]

    def imap(
        self, fn: Callable[..., Any], iterable: Iterable[Any], *, timeout: float | None = None
    ) -> Iterator[Any]:
        """Results in input order, each as soon as it and those before it are done.

        Tasks are submitted at call time (not lazily), so the pool starts at once.
        """
        check_timeout(timeout)
        return _ResultIterator(self._submit_all(fn, iterable, False), timeout, ordered=True)

    def imap_unordered(
        self, fn: Callable[..., Any], iterable: Iterable[Any], *, timeout: float | None = None
    ) -> Iterator[Any]:
        """Results in completion order; a failed task raises when its turn comes."""
        check_timeout(timeout)
        return _ResultIterator(self._submit_all(fn, iterable, False), timeout, ordered=False)

    # -- context manager -------------------------------------------------------------
    def __enter__(self) -> Pool:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        # On success finish the queued work; on an exception do not wait for it.
        if exc_type is None:
            self.close()
            self.join()
        else:
            self.terminate()
