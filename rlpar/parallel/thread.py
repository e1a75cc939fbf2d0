"""A thread whose exception is re-raised in the thread that watches it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from rlpar.parallel._report import Report, child_error, report_current_exception


class Thread(threading.Thread):
    """``threading.Thread`` that captures the target's exception and traceback.

    ``watch()`` raises :class:`rlpar.errors.ChildError` (chained to the original
    exception) if the target raised, and returns otherwise; ``join()`` joins, then
    watches. The thread is a daemon by default so a stuck child never blocks exit.
    """

    def __init__(
        self,
        *,
        target: Callable[..., Any],
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
        name: str | None = None,
        daemon: bool = True,
    ) -> None:
        if not callable(target):
            raise TypeError(f"target must be callable, got {target!r}")
        super().__init__(name=name, daemon=daemon)
        self._rlpar_target = target
        self._rlpar_args = tuple(args)
        self._rlpar_kwargs = dict(kwargs or {})
        self._report: Report | None = None
        self._exception: BaseException | None = None

    def run(self) -> None:
        try:
            self._rlpar_target(*self._rlpar_args, **self._rlpar_kwargs)
        except BaseException as exc:  # noqa: BLE001 - every failure must reach the parent
            self._report = report_current_exception(exc)
            self._exception = exc
        finally:
            # Drop references so a finished thread does not keep big arguments alive.
            self._rlpar_args, self._rlpar_kwargs = (), {}

    @property
    def failed(self) -> bool:
        return self._report is not None

    def watch(self) -> None:
        """Raise ChildError if the target raised; return normally otherwise."""
        if self._report is None:
            return
        error = child_error(f"thread {self.name!r}", self._report, child_name=self.name)
        raise error from self._exception

    def join(self, timeout: float | None = None) -> None:
        if timeout is not None and timeout < 0:
            raise ValueError(f"timeout must be >= 0 or None, got {timeout}")
        super().join(timeout)
        self.watch()
