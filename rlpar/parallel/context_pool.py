"""Pools whose workers each hold one context object (an env, a model).

Thin spellings of ``ThreadPool``/``ProcessPool`` with a required
``context_factory``: the factory runs once per worker (in the worker process for
ProcessPool, so the object never has to be pickled) and every task is called as
``fn(context, *args)``. Use them for things that are slow to build or cannot be
pickled; the worker keeps its context for its whole life, and a replacement
worker (after a crash) builds a fresh one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlpar.parallel.process_pool import ProcessPool
from rlpar.parallel.thread_pool import ThreadPool


class ContextThreadPool(ThreadPool):
    def __init__(
        self, *, context_factory: Callable[[], Any], processes: int = 2, name: str | None = None
    ) -> None:
        super().__init__(processes=processes, context_factory=context_factory, name=name)


class ContextProcessPool(ProcessPool):
    def __init__(
        self,
        *,
        context_factory: Callable[[], Any],
        processes: int = 2,
        start_method: str = "spawn",
        num_threads: int | None = 1,
        name: str | None = None,
    ) -> None:
        super().__init__(processes=processes, context_factory=context_factory,
                         start_method=start_method, num_threads=num_threads, name=name)
