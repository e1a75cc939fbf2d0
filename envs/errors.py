"""Errors of vector envs: which env failed, where it was stepped, and in which call.

All are :class:`rlpar.errors.ChildError`, the error every other child failure (thread,
process, pool worker) becomes, so code that handles a failed child handles a failed env
too; the subclasses tell an env that raised from one that returned a bad value or hung.
Every keyword has a default so that the errors pickle (an actor's failure travels to
the process that launched it).
"""

from __future__ import annotations

from rlpar.errors import ChildError


class EnvError(ChildError):
    """An env of a vector env failed in ``call`` ("step", "reset", "call('render')", ...).

    ``env_index`` is the env's index in the vector env (None when the failure could not
    be pinned to one env), ``worker`` the index of the worker process that stepped it
    (None: stepped in the calling process), ``child_traceback`` the env's traceback when
    it raised.
    """

    def __init__(
        self,
        message: str,
        *,
        env_index: int | None = None,
        worker: int | None = None,
        call: str = "",
        child_traceback: str = "",
    ) -> None:
        name = f"env {env_index}" if env_index is not None else f"env worker {worker}"
        super().__init__(message, child_name=name, child_traceback=child_traceback)
        self.env_index = env_index
        self.worker = worker
        self.call = call


class EnvValueError(EnvError):
    """An env returned a value its vector env cannot pass on: a NaN or infinite
    observation or reward (unless ``check_values=False``), or an observation whose shape
    or dtype does not match the observation space (always checked: numpy would silently
    broadcast a ``(1,)`` observation over a ``(4,)`` slot).

    ``field`` is "observation" (with the path of a Dict/Tuple leaf) or "reward";
    ``episode_step`` counts the env's steps since its last reset (0: the observation of a
    reset), None when unknown.
    """

    def __init__(
        self,
        message: str,
        *,
        env_index: int | None = None,
        worker: int | None = None,
        call: str = "",
        field: str = "",
        episode_step: int | None = None,
    ) -> None:
        super().__init__(message, env_index=env_index, worker=worker, call=call)
        self.field = field
        self.episode_step = episode_step


class EnvTimeout(EnvError):
    """An env worker did not finish ``call`` within ``timeout`` seconds (``step_timeout``);
    the worker was killed. ``env_indices`` are the envs that may be the culprit (the env
    the worker was inside, else every env of that worker), ``pid`` the killed process,
    ``child_traceback`` where its threads were when it was stopped."""

    def __init__(
        self,
        message: str,
        *,
        env_index: int | None = None,
        env_indices: tuple[int, ...] = (),
        worker: int | None = None,
        pid: int | None = None,
        call: str = "",
        timeout: float | None = None,
        child_traceback: str = "",
    ) -> None:
        super().__init__(
            message,
            env_index=env_index,
            worker=worker,
            call=call,
            child_traceback=child_traceback,
        )
        self.env_indices = env_indices
        self.pid = pid
        self.timeout = timeout
