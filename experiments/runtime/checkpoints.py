"""Checkpoints, resume and the trained policy of a run, the same for every job.

The lead saves ``<run>/checkpoints/ckpt-<env steps>.pt`` (atomic, the newest
``--keep-checkpoints``) every ``--checkpoint-every`` seconds, at the end and on
Ctrl-C/SIGTERM: what the job puts in (networks, optimizers, counters, replay with
priorities) plus the coordinator's progress and the lead's RNG states.
``--resume RUN_DIR`` continues such a run in the same directory: counters and
curves go on from the checkpoint. ``policy.pt`` (final) and ``policy-best.pt``
(best evaluation) hold what ``python -m experiments.evaluate RUN_DIR`` needs to
play the policy. Every file loads with ``torch.load(weights_only=True)``.

State held in other processes (Ape-X's replay shards) is saved as **parts** of the
same checkpoint, each written by its holder (``save_parts(directory, step)``) before
the lead writes its own file; a checkpoint some part of which could not be written
is not written at all (logged), and on resume one whose parts are not all there is
skipped (logged). The job loads its parts from ``resumed_path``.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from experiments.runtime.rundir import RunDir
from rlpar.checkpoint import load_checkpoint, rng_state, save_checkpoint
from rlpar.state import StatePath, mapping

log = logging.getLogger(__name__)

POLICY, BEST_POLICY = "policy.pt", "policy-best.pt"


class Checkpointer:
    """The lead's checkpoints: ``due()`` on schedule, ``save(state, step)``, and the
    state to resume from (``resumed``: None for a fresh run; ``resumed_path``: its
    file). ``parts``: the names of the parts other processes write for each
    checkpoint, with ``save_parts(directory, step) -> bytes`` (raises if one could not)."""

    def __init__(self, ctx: Any, *, meta: Mapping[str, Any] | None = None, parts: Sequence[str] = (),
                 save_parts: Callable[[str, int], int] | None = None) -> None:
        run = ctx.config.run
        if parts and save_parts is None:
            raise ValueError("checkpoint parts need save_parts (who writes them)")
        self.directory = RunDir(ctx.run_dir).checkpoints
        self.every, self.keep, self.kind = run.checkpoint_every, run.keep_checkpoints, ctx.job
        self.meta = dict(meta or {})
        self.parts, self.save_parts = list(parts), save_parts
        self.skipped = 0  # checkpoints not written: a part could not be
        self.resumed_path: str | None = None
        self.saves = 0
        self.pause_s = 0.0  # the last save's pause of the lead
        self.bytes = 0
        self._last = time.monotonic()
        self.resumed: dict[str, Any] | None = None
        self.resumed_step: int | None = None
        if run.resume:
            from rlpar.checkpoint import latest_checkpoint

            directory = RunDir(run.resume).checkpoints
            # Skips incomplete ones (logged), refuses parts of another layout.
            path = latest_checkpoint(directory, parts=self.parts) if directory else None
            self.resumed, header = load_checkpoint(path or directory, kind=self.kind,
                                                   expect_meta=self.meta, parts=self.parts)
            self.resumed_step, self.resumed_path = header["step"], str(path)

    def due(self) -> bool:
        return (self.directory is not None and self.every > 0
                and time.monotonic() - self._last >= self.every)

    def save(self, state: Mapping[str, Any], *, step: int) -> None:
        if self.directory is None:
            return
        t0 = time.perf_counter()
        parts_bytes = 0
        if self.parts:
            try:
                parts_bytes = self.save_parts(self.directory, step)
            except Exception as exc:  # e.g. a shard's host is dead: this one is skipped
                self.skipped += 1
                self._last = time.monotonic()
                log.warning("checkpoint at step %d skipped: a part could not be written: %s", step, exc)
                return
        path = save_checkpoint(self.directory, {**state, "rng": rng_state()}, kind=self.kind, step=step,
                               keep=self.keep, meta=self.meta, parts=self.parts)
        self.pause_s = time.perf_counter() - t0
        self.bytes = path.stat().st_size + parts_bytes
        self.saves += 1
        self._last = time.monotonic()

    def stats(self) -> dict[str, Any]:
        return {"checkpoints": self.saves, "checkpoint_pause_s": self.pause_s,
                "checkpoint_bytes": self.bytes, "checkpoints_skipped": self.skipped}


def restore_rng(state: Mapping[str, Any]) -> None:
    from rlpar.checkpoint import restore_rng_state

    if "rng" in state:
        restore_rng_state(state["rng"])


def save_policy(ctx: Any, state: Mapping[str, Any], *, best: bool = False, **info: Any) -> None:
    """``policy.pt`` / ``policy-best.pt``: the acting network's parameters and what
    the evaluator needs besides the run's config.json (``info``: version, eval return)."""
    if ctx.run_dir is None:
        return
    import torch

    path = os.path.join(ctx.run_dir, BEST_POLICY if best else POLICY)
    payload = {"job": ctx.job, "state": {k: v.detach().cpu() for k, v in state.items()}, **info}
    tmp = path + ".tmp"
    torch.save(payload, tmp)
    os.replace(tmp, path)


class RunKeeper:
    """What the lead keeps of a run, polled from its loop: checkpoints on schedule,
    ``policy-best.pt`` when an evaluation beats the best so far, and at the end the
    last checkpoint and ``policy.pt``. ``snapshot()`` returns the job's state (the
    coordinator's is added here); ``policy()`` the acting network's parameters."""

    def __init__(self, ctx: Any, coordinator: Any, *, snapshot: Any, policy: Any,
                 meta: Mapping[str, Any] | None = None, parts: Sequence[str] = (),
                 save_parts: Callable[[str, int], int] | None = None) -> None:
        self.ctx, self.coordinator = ctx, coordinator
        self.snapshot, self.policy = snapshot, policy
        self.checkpointer = Checkpointer(ctx, meta=meta, parts=parts, save_parts=save_parts)
        self._evals_seen = 0
        self._best = float("-inf")

    @property
    def resumed(self) -> dict[str, Any] | None:
        return self.checkpointer.resumed

    def restore(self, restore_job: Any, *, keys: Sequence[str] = ()) -> bool:
        """Load the resumed checkpoint into the coordinator and (``restore_job(state)``)
        the job's parts, which read ``keys`` of it (checked first: StateError names a
        missing one, not a KeyError from inside the job); False for a fresh run."""
        state = self.checkpointer.resumed
        if state is None:
            return False
        where = StatePath(f"{self.ctx.job} checkpoint {self.checkpointer.resumed_path}")
        state = mapping(state, where, required=("coordinator", *keys), optional=None)
        self.coordinator.load_state_dict(state["coordinator"])
        restore_job(state)
        restore_rng(state)
        self._evals_seen = len(self.coordinator.evals)
        self._best = max((e[2] for e in self.coordinator.evals), default=float("-inf"))
        return True

    def poll(self, *, version: int) -> None:
        evals = self.coordinator.evals
        if len(evals) > self._evals_seen:
            newest = max(e[2] for e in evals[self._evals_seen:])
            self._evals_seen = len(evals)
            if newest > self._best:
                self._best = newest
                save_policy(self.ctx, self.policy(), best=True, version=version, eval_return=newest)
        if self.checkpointer.due():
            self.save()

    def save(self) -> None:
        self.checkpointer.save({**self.snapshot(), "coordinator": self.coordinator.state_dict()},
                               step=self.coordinator.env_steps)

    def finish(self, *, version: int) -> dict[str, Any]:
        """The last checkpoint and ``policy.pt``; returns the summary's checkpoint fields."""
        self.poll(version=version)
        self.save()
        save_policy(self.ctx, self.policy(), version=version,
                    eval_return=self.coordinator.evals[-1][2] if self.coordinator.evals else None)
        return {**self.checkpointer.stats(), "resumed_from_step": self.checkpointer.resumed_step}
