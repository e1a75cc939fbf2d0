"""Turning a child's failure into an rlpar error in the parent.

A child (thread, process, pool worker) cannot raise into its parent directly, so it
ships a small report ``(type name, message, formatted traceback)`` made of strings:
strings always pickle, while the original exception object may not.
"""

from __future__ import annotations

import signal
import traceback

from rlpar.errors import ChildDied, ChildError

Report = tuple[str, str, str]


def report_current_exception(exc: BaseException) -> Report:
    """Describe ``exc`` (being handled now) as picklable strings."""
    return type(exc).__qualname__, str(exc), traceback.format_exc()


def child_error(what: str, report: Report, *, child_name: str) -> ChildError:
    """Build the parent-side error for a child that raised."""
    type_name, message, tb = report
    text = f"{what} raised {type_name}: {message}" if message else f"{what} raised {type_name}"
    return ChildError(text, child_name=child_name, child_traceback=tb)


def describe_exitcode(exitcode: int | None) -> str:
    """Human words for a process exit code, naming the signal when there was one."""
    if exitcode is None:
        return "is still running"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"was killed by signal {name} (exitcode {exitcode})"
    return f"exited with code {exitcode}"


def child_died(what: str, exitcode: int | None, *, child_name: str) -> ChildDied:
    """Build the parent-side error for a child process that ended without reporting."""
    return ChildDied(
        f"{what} {describe_exitcode(exitcode)} without reporting a result",
        child_name=child_name,
        exitcode=exitcode,
    )
