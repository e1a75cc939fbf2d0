"""Exceptions shared by every rlpar component.

A failure in another thread, process or machine is re-raised where the user
waits for it, carrying the other side's traceback as text, so the place where the
bug happened is never lost.
"""

from __future__ import annotations


class RlparError(Exception):
    """Base class of all rlpar errors."""


class ChildError(RlparError):
    """A child (thread, process, pool worker, env worker) raised an exception.

    ``child_traceback`` holds the formatted traceback from the child.
    """

    def __init__(self, message: str, *, child_name: str = "", child_traceback: str = "") -> None:
        super().__init__(message)
        self.child_name = child_name
        self.child_traceback = child_traceback

    def __str__(self) -> str:
        text = super().__str__()
        if self.child_traceback:
            text += f"\n--- traceback in {self.child_name or 'child'} ---\n{self.child_traceback.rstrip()}"
        return text


class ChildDied(ChildError):
    """A child process ended without reporting: killed by a signal or exited early."""

    def __init__(self, message: str, *, child_name: str = "", exitcode: int | None = None) -> None:
        super().__init__(message, child_name=child_name)
        self.exitcode = exitcode


class RankKeepsDying(ChildDied):
    """A rank that was restarted ``restarts`` times (its launcher's limit) died again."""

    def __init__(self, message: str, *, child_name: str = "", exitcode: int | None = None,
                 restarts: int = 0) -> None:
        super().__init__(message, child_name=child_name, exitcode=exitcode)
        self.restarts = restarts


class RemoteError(ChildError):
    """An exception raised by a service on a remote peer, with its remote traceback."""


class PeerUnavailable(RlparError):
    """A remote peer is gone or did not answer within its timeout."""


class ServiceNotFound(RlparError, LookupError):
    """No member of the group hosts the requested service key."""


class CheckpointError(RlparError):
    """A checkpoint file cannot be used: corrupt, truncated, or not an rlpar checkpoint."""


class CheckpointMismatch(CheckpointError, ValueError):
    """A checkpoint belongs to another job or layout: header ``field`` holds ``found``
    where the loader expected ``expected``."""

    def __init__(self, path: str, field: str, expected: object, found: object) -> None:
        super().__init__(
            f"checkpoint {path} does not match: {field} is {found!r}, expected {expected!r} (it was "
            "written by another job, layout or version of it: resume it with what wrote it, or start "
            "a new run)"
        )
        self.path, self.field, self.expected, self.found = path, field, expected, found

    def __reduce__(self):
        return (type(self), (self.path, self.field, self.expected, self.found))


class StateError(CheckpointError, ValueError):
    """A state dict does not fit what it is loaded into: ``owner`` (who loads it)
    found ``problem`` at ``path`` (e.g. ``state['hyper']['alpha']``). Raised before
    anything is changed, so the object keeps its state."""

    def __init__(self, owner: str, path: str, problem: str) -> None:
        super().__init__(f"{owner}: {path} {problem}")
        self.owner, self.path, self.problem = owner, path, problem

    def __reduce__(self):  # crosses RPC (a replay shard's load) with its type
        return (type(self), (self.owner, self.path, self.problem))


class NonFiniteGradients(RlparError, FloatingPointError):
    """A gradient server rejected ``count`` pushes in a row for NaN or inf values
    (its bound is ``limit``): training has diverged."""

    def __init__(self, count: int, limit: int) -> None:
        super().__init__(
            f"{count} gradient pushes in a row held NaN or inf values (max_non_finite={limit}); "
            "none was applied, but training has diverged: lower the learning rate, clip "
            "gradients or check the loss"
        )
        self.count, self.limit = count, limit

    def __reduce__(self):
        return (type(self), (self.count, self.limit))


class QueueClosed(RlparError):
    """A closed queue cannot hand out the items asked for (fewer are left)."""


class RanksLost(PeerUnavailable):
    """Ranks of a launched world were lost (no heartbeat, or the world's store went
    away) before it ended. ``ranks``: those named lost; ``summary``: the lead's
    summary when this process is the lead (it finished with the survivors)."""

    def __init__(self, message: str, *, ranks: list[int], summary: dict | None = None) -> None:
        super().__init__(message)
        self.ranks = list(ranks)
        self.summary = summary or {}
