"""A process whose exception or death is re-raised in the parent that watches it.

The target and its arguments travel with cloudpickle (lambdas and closures work);
the child reports success or its exception with traceback through a one-way pipe.
A child that ends without a report (SIGKILL, segfault, ``os._exit``) is reported as
:class:`rlpar.errors.ChildDied` naming the signal or exit code.
"""

from __future__ import annotations

import itertools
import multiprocessing
import multiprocessing.connection
import time
from collections.abc import Callable, Mapping
from typing import Any

from rlpar.errors import ChildError
from rlpar.parallel._pickling import SpawnPayload
from rlpar.parallel._report import (
    Report,
    child_died,
    child_error,
    report_current_exception,
)

START_METHODS = ("spawn", "forkserver", "fork")
_counter = itertools.count(1)


def get_context(start_method: str) -> multiprocessing.context.BaseContext:
    """The multiprocessing context for ``start_method``, with a clear error if unknown."""
    if start_method not in START_METHODS:
        raise ValueError(f"start_method must be one of {START_METHODS}, got {start_method!r}")
    return multiprocessing.get_context(start_method)


def _child_main(payload: SpawnPayload, report_conn: multiprocessing.connection.Connection) -> None:
    # Runs in the child. Only the standard library and cloudpickle are imported here
    # so that a child that never touches torch does not pay for importing it.
    report: tuple[str, Report | None]
    try:
        target, args, kwargs = payload.obj
        del payload
        target(*args, **kwargs)
        report = ("ok", None)
    except SystemExit as exc:
        if exc.code in (None, 0):
            report = ("ok", None)
        else:
            report = ("error", report_current_exception(exc))
    except BaseException as exc:  # noqa: BLE001 - every failure must reach the parent
        report = ("error", report_current_exception(exc))
    try:
        report_conn.send(report)
    finally:
        report_conn.close()


class Process:
    """A child process that reports its exception (with traceback) to the parent.

    ``start_method`` is ``"spawn"`` (default: safe with threads and CUDA),
    ``"forkserver"`` (fast children from a clean server) or ``"fork"``.
    Arguments are pickled with multiprocessing's reducers, so (as with
    ``torch.multiprocessing``) a CPU tensor argument is moved to shared memory and
    the child's in-place writes are visible to the parent; queues, pipes and events
    may be passed as arguments.
    Not daemonic by default, so the child may start processes of its own (env
    workers, pools); pass ``daemon=True`` to have it killed when the parent exits.
    """

    def __init__(
        self,
        *,
        target: Callable[..., Any],
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
        name: str | None = None,
        start_method: str = "spawn",
        daemon: bool = False,
    ) -> None:
        if not callable(target):
            raise TypeError(f"target must be callable, got {target!r}")
        ctx = get_context(start_method)
        self.name = name or f"{getattr(target, '__name__', 'process')}-{next(_counter)}"
        self._reader, writer = ctx.Pipe(duplex=False)
        payload = SpawnPayload((target, tuple(args), dict(kwargs or {})))
        self._process = ctx.Process(
            target=_child_main, args=(payload, writer), name=self.name, daemon=daemon
        )
        self._writer: multiprocessing.connection.Connection | None = writer
        self._report: tuple[str, Report | None] | None = None

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> None:
        self._process.start()
        # The child holds its own copy of the write end; closing ours lets the
        # reader see EOF when the child dies.
        assert self._writer is not None
        self._writer.close()
        self._writer = None

    def join(self, timeout: float | None = None) -> None:
        """Wait for the child (up to ``timeout``), then raise if it failed."""
        if timeout is not None and timeout < 0:
            raise ValueError(f"timeout must be >= 0 or None, got {timeout}")
        self.wait(timeout)
        self.watch()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the child to end without raising; True if it has ended.

        The report is read while waiting: a report larger than the pipe buffer
        would otherwise block the child in ``send`` and the parent in ``join``.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._process.exitcode is None:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                break
            handles: list[Any] = [self._process.sentinel]
            if self._report is None and not self._reader.closed:
                handles.append(self._reader)
            ready = multiprocessing.connection.wait(handles, remaining)
            if self._reader in ready:
                self._read_report()
                if self._report is None:  # EOF without report: the child is ending
                    self._process.join(remaining)
        if self._process.exitcode is not None:
            self._process.join()  # reap
            return True
        return False

    def wait_handles(self) -> list[Any]:
        """Handles that become ready when the child reports or ends (``connection.wait``)."""
        handles: list[Any] = [self._process.sentinel]
        if self._report is None and not self._reader.closed:
            handles.append(self._reader)
        return handles

    def is_alive(self) -> bool:
        return self._process.is_alive()

    def terminate(self) -> None:
        self._process.terminate()

    def kill(self) -> None:
        self._process.kill()

    @property
    def pid(self) -> int | None:
        return self._process.pid

    @property
    def exitcode(self) -> int | None:
        return self._process.exitcode

    @property
    def sentinel(self) -> int:
        """A handle that becomes ready when the child ends (for ``connection.wait``)."""
        return self._process.sentinel

    # -- failure reporting -----------------------------------------------------------
    def _read_report(self) -> None:
        if self._report is None and not self._reader.closed:
            try:
                if self._reader.poll(0):
                    self._report = self._reader.recv()
            except (EOFError, OSError):
                self._reader.close()  # the child ended without a report

    def watch(self) -> None:
        """Raise if the child failed; return normally if it runs or succeeded.

        ChildError: the target raised (``child_traceback`` holds the child's
        traceback). ChildDied: the child ended without a report, e.g. killed by a
        signal; the message names the signal and ``exitcode`` is set.
        """
        self._read_report()
        if self._report is not None:
            status, report = self._report
            if status == "error":
                assert report is not None
                raise child_error(f"process {self.name!r}", report, child_name=self.name)
            return
        exitcode = self._process.exitcode
        if exitcode is None:
            return
        self._read_report()  # the report may have landed between the two checks
        if self._report is not None:
            self.watch()
            return
        raise child_died(f"process {self.name!r} (pid {self.pid})", exitcode, child_name=self.name)

    @property
    def failed(self) -> bool:
        try:
            self.watch()
        except ChildError:
            return True
        return False

    def close(self) -> None:
        """Release the process object and pipe; the child must have ended."""
        self._reader.close()
        self._process.close()

    def __repr__(self) -> str:
        return f"Process(name={self.name!r}, pid={self.pid}, exitcode={self.exitcode})"
