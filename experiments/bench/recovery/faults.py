"""The faults of ``python -m experiments.bench.recovery.killed_rank``: parts that SIGKILL their
own process once, as ``kill -9`` or the OOM killer would.

What dies and when comes from the environment, so that every rank of a local world
(and every env worker subprocess) sees it whether it was forked or spawned:

- ``RLPAR_RECOVERY_KILL``: ``rank:<R>`` (the process of rank R stepping an env),
  ``lead`` (the Ape-X learner), ``env-worker:<pid>`` (an env worker, a process other
  than the job's own process ``pid``);
- ``RLPAR_RECOVERY_KILL_AT``: seconds after that process's first env step (first
  update for the learner): the death comes once throughput is steady;
- ``RLPAR_RECOVERY_MARKER``: a file the death writes (JSON: its wall time, and for the
  lead its coordinator's env steps); it exists once, so the replacement lives on;
- ``RLPAR_RECOVERY_STOP_AFTER`` (optional): seconds after the recovery that the run
  stops (see :class:`StopOnceRecovered`); unset, it runs to its budget.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import time
from typing import Any

import gymnasium as gym

from algorithms.dqn import ApexLearner
from envs.multiagent import CooperativeEnv

KILL, KILL_AT, MARKER = "RLPAR_RECOVERY_KILL", "RLPAR_RECOVERY_KILL_AT", "RLPAR_RECOVERY_MARKER"
STOP_AFTER = "RLPAR_RECOVERY_STOP_AFTER"
STOP_REASON = "recovered"
CARTPOLE = "RecoveryBenchCartPole-v0"

_started: float | None = None  # this process's first step (or update)


def _due(target: str) -> bool:
    """True once in the targeted process, ``KILL_AT`` seconds after it first asked."""
    global _started
    if os.environ.get(KILL) != target or os.path.exists(os.environ.get(MARKER) or "/"):
        return False
    now = time.monotonic()
    if _started is None:
        _started = now
    if now - _started < float(os.environ.get(KILL_AT, "0")):
        return False
    # Copies of the target started together (MADDPG's env workers) reach the time
    # together: one claims the death, atomically, and the others live on.
    try:
        os.close(os.open(os.environ[MARKER] + ".claim", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def die(**fields: Any) -> None:
    """Write the marker (the moment of death and ``fields``), then SIGKILL this process."""
    marker = os.environ[MARKER]
    tmp = f"{marker}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump({"time": time.time(), **fields}, f)
    os.replace(tmp, marker)  # a reader never sees half a marker
    os.kill(os.getpid(), signal.SIGKILL)


def _coordinator() -> Any:
    """The lead's coordinator: the learner's process holds exactly one."""
    from experiments.runtime.coordinator import Coordinator

    # type(), not isinstance: that reads __class__, which warns on torch's deprecated aliases.
    found = [o for o in gc.get_objects() if type(o) is Coordinator]
    if len(found) != 1:
        raise RuntimeError(f"the learner's process should hold one Coordinator, found {len(found)}")
    return found[0]


class StopOnceRecovered:
    """A learner mixin (the learner lives in the lead's process, with the coordinator):
    with ``RLPAR_RECOVERY_STOP_AFTER`` set, the run stops (reason ``recovered``) that
    many seconds after the learner's first update once the death happened and its
    process is back: restarted alone (a rank or an env worker, counted by the
    coordinator), or the whole world, this learner's. A run bounded by a wall-clock
    budget instead burns CPU until the budget however early the recovery came; the
    seconds after it leave ticks to measure the throughput's recovery on."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        after = os.environ.get(STOP_AFTER)
        self._stop_after = float(after) if after else None
        # Made after the death: this learner is the restarted world's.
        self._restarted_world = os.path.exists(os.environ.get(MARKER) or "/")
        self._recovered_at: float | None = None
        self._next_check = 0.0
        self._lead: Any = None  # the coordinator, found at the first check

    def step(self):
        metrics = super().step()
        if self._stop_after is not None:
            self._stop_once_recovered()
        return metrics

    def _stop_once_recovered(self) -> None:
        now = time.monotonic()
        if now < self._next_check:  # a stat per update would cost more than the update
            return
        self._next_check = now + 0.1
        if self._lead is None:
            self._lead = _coordinator()
        coordinator = self._lead
        if self._recovered_at is None:
            back = self._restarted_world or coordinator.source_restarts + coordinator.env_worker_restarts > 0
            if back and os.path.exists(os.environ.get(MARKER) or "/"):
                self._recovered_at = now
        elif now - self._recovered_at >= self._stop_after:
            coordinator.stop(STOP_REASON)


def stopping(learner: type) -> type:
    """``learner`` with :class:`StopOnceRecovered` (shipped to the ranks with the job's
    parts: cloudpickle sends a class made here by value)."""
    return type(f"Stopping{learner.__name__}", (StopOnceRecovered, learner), {})


class KillOnceCartPole(gym.Wrapper):
    """CartPole-v1 whose copies in rank ``$RANK`` die together once (``rank:<R>``)."""

    def __init__(self) -> None:
        super().__init__(gym.make("CartPole-v1"))

    def step(self, action: Any):
        if _due(f"rank:{os.environ.get('RANK')}"):
            die()
        return self.env.step(action)


class KillOnceLearner(ApexLearner):
    """The Ape-X learner, dying once (``lead``). A real SIGKILL loses the TensorBoard
    curves not yet flushed (up to 10 s of them) and the env step count at the death;
    the bench flushes the former and writes the latter first, which the recovery does
    not see, so that the figures before the death are exact."""

    def step(self):
        if self.updates > 0 and _due("lead"):
            coordinator = _coordinator()
            coordinator.tick(updates=self.updates, force=True)
            coordinator.logger.flush()
            die(env_steps=coordinator.env_steps)
        return super().step()


class KillOnceWorkerEnv(CooperativeEnv):
    """The cooperative multi-agent env, killing the env worker subprocess it lives in
    once (``env-worker:<pid>``: an env worker, never a rank: an evaluation's envs step
    in the evaluating actor's process)."""

    def step(self, actions: dict[str, Any]):
        import multiprocessing

        target = os.environ.get(KILL, "")
        worker = multiprocessing.current_process().name.startswith("rlpar-env-worker")
        if target.startswith("env-worker:") and worker and _due(target):
            die()
        return super().step(actions)


# Registered on import: ranks make the env as ``experiments.bench.recovery.faults:<id>``,
# which imports this module in each of them (gymnasium's ``module:Id`` rule).
if CARTPOLE not in gym.registry:
    gym.register(CARTPOLE, entry_point=KillOnceCartPole, reward_threshold=475.0)
