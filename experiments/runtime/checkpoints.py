"""Checkpoints, resume and the trained policy of a run, the same for every job.

The lead saves ``<run>/checkpoints/ckpt-<env steps>.pt`` (atomic, the newest
``--keep-checkpoints``) every ``--checkpoint-every`` seconds, at the end and on
Ctrl-C/SIGTERM: what the job puts in (networks, optimizers, counters, replay with
priorities) plus the coordinator's progress and the lead's RNG states.
``--resume RUN_DIR`` continues such a run in the same directory: counters and
curves go on from the checkpoint. ``policy.pt`` (the final parameters) and
``policy-best.pt`` (the network the best evaluation played, sent with its result)
hold what ``python -m experiments.evaluate RUN_DIR`` needs to play the policy, with
their version, env steps and, where it was of that very network, the evaluation
(returns, seed, episodes) that evaluate replays. Every file loads with
``torch.load(weights_only=True)``.

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
from typing import TYPE_CHECKING, Any

from experiments.runtime.rundir import RunDir
from rlpar.checkpoint import load_checkpoint, rng_state, save_checkpoint
from rlpar.state import StatePath, mapping

if TYPE_CHECKING:
    from experiments.runtime.lead import LeadContext

log = logging.getLogger(__name__)

POLICY, BEST_POLICY = "policy.pt", "policy-best.pt"


class Checkpointer:
    """The lead's checkpoints: ``due()`` on schedule, ``save(state, step)``, and the
    state to resume from (``resumed``: None for a fresh run; ``resumed_path``: its
    file). ``parts``: the names of the parts other processes write for each
    checkpoint, with ``save_parts(directory, step) -> bytes`` (raises if one could not)."""

    def __init__(self, lead: LeadContext, *, meta: Mapping[str, Any] | None = None, parts: Sequence[str] = (),
                 save_parts: Callable[[str, int], int] | None = None) -> None:
        run = lead.config.run
        if parts and save_parts is None:
            raise ValueError("checkpoint parts need save_parts (who writes them)")
        self.directory = RunDir(lead.run_dir).checkpoints
        self.every, self.keep, self.kind = run.checkpoint_every, run.keep_checkpoints, lead.job
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


def evaluation_record(result: Any) -> dict[str, Any]:
    """What a policy file says of an evaluation (an ``EvalResult``): mean, std,
    returns, the seed and episodes that replay it, its version and env steps."""
    import numpy as np

    return {"mean": float(np.mean(result.returns)), "std": float(np.std(result.returns)),
            "returns": [float(r) for r in result.returns], "seed": int(result.seed),
            "episodes": result.episodes, "version": int(result.version), "env_steps": int(result.env_steps)}


def row_record(row: Sequence[Any]) -> dict[str, Any]:
    """The same for an evaluation known only as a coordinator's row (one of the run a
    resumed run continues): its numbers, without returns or seed."""
    _, env_steps, mean, std, version = row
    return {"mean": float(mean), "std": float(std), "returns": None, "seed": None, "episodes": None,
            "version": int(version), "env_steps": int(env_steps)}


def save_policy(run_dir: str | None, state: Mapping[str, Any], *, job: str, best: bool, version: int,
                env_steps: int, evaluation: Mapping[str, Any] | None,
                last_evaluation: Mapping[str, Any] | None = None) -> None:
    """``policy.pt`` / ``policy-best.pt``: a network's parameters (``state``) and what
    the evaluator needs besides the run's config.json, each label true of *this*
    network: its ``version`` and the ``env_steps`` it stands for; ``evaluation``: the
    in-run evaluation of exactly these parameters (:func:`evaluation_record`), or None;
    ``last_evaluation``: the run's last evaluation when it was of another version
    (recorded beside, never as this file's return). ``eval_return`` repeats
    ``evaluation``'s mean for readers of the older files that had only it (none
    without a run directory)."""
    if run_dir is None:
        return
    import torch

    path = os.path.join(run_dir, BEST_POLICY if best else POLICY)
    payload = {"job": job, "state": {k: v.detach().cpu() for k, v in state.items()},
               "version": int(version), "env_steps": int(env_steps),
               "evaluation": dict(evaluation) if evaluation is not None else None,
               "eval_return": evaluation["mean"] if evaluation is not None else None,
               "last_evaluation": dict(last_evaluation) if last_evaluation is not None else None}
    tmp = path + ".tmp"
    torch.save(payload, tmp)
    os.replace(tmp, path)


class RunKeeper:
    """What the lead keeps of a run, polled from its loop: checkpoints on schedule,
    ``policy-best.pt`` when an evaluation beats the best so far, and at the end the
    last checkpoint and ``policy.pt``. ``snapshot()`` returns the job's state (the
    coordinator's is added here); ``policy()`` the acting network's parameters now.

    ``policy-best.pt`` is the network the best evaluation played (the coordinator's
    ``best_result``, sent by the evaluator with its returns), never ``policy()`` at
    the time the result arrives: with actors evaluating the version they last pulled,
    that is a later network than the one that scored. ``policy.pt`` is ``policy()``
    at the end, labelled with the last evaluation only if it was of that version."""

    def __init__(self, lead: LeadContext, coordinator: Any, *, snapshot: Any, policy: Any,
                 meta: Mapping[str, Any] | None = None, parts: Sequence[str] = (),
                 save_parts: Callable[[str, int], int] | None = None) -> None:
        # What it keeps the run with, read once: the job (the files' kind) and where.
        self.job, self.run_dir, self.coordinator = lead.job, lead.run_dir, coordinator
        self.snapshot, self.policy = snapshot, policy
        self.checkpointer = Checkpointer(lead, meta=meta, parts=parts, save_parts=save_parts)
        self._saved_best: Any = None  # the EvalResult policy-best.pt holds

    @property
    def resumed(self) -> dict[str, Any] | None:
        return self.checkpointer.resumed

    def restore(self, restore_job: Any, *, keys: Sequence[str] = ()) -> bool:
        """Load the resumed checkpoint into the coordinator and (``restore_job(state)``)
        the job's parts, which read ``keys`` of it (checked first: StateError names a
        missing one, not a KeyError from inside the job); False for a fresh run. The
        resumed run's policy-best.pt stays until an evaluation beats every one of the
        checkpoint's (the coordinator's rule)."""
        state = self.checkpointer.resumed
        if state is None:
            return False
        where = StatePath(f"{self.job} checkpoint {self.checkpointer.resumed_path}")
        state = mapping(state, where, required=("coordinator", *keys), optional=None)
        self.coordinator.load_state_dict(state["coordinator"])
        restore_job(state)
        restore_rng(state)
        return True

    def poll(self) -> None:
        best = self.coordinator.best_result  # set on an RPC thread; one read of a reference
        if best is not None and best is not self._saved_best:
            save_policy(self.run_dir, best.policy, job=self.job, best=True, version=best.version,
                        env_steps=best.env_steps, evaluation=evaluation_record(best))
            self._saved_best = best
        if self.checkpointer.due():
            self.save()

    def save(self) -> None:
        self.checkpointer.save({**self.snapshot(), "coordinator": self.coordinator.state_dict()},
                               step=self.coordinator.env_steps)

    def finish(self, *, version: int) -> dict[str, Any]:
        """The last checkpoint and ``policy.pt`` (``policy()``, parameters ``version``);
        returns the summary's checkpoint fields."""
        self.poll()
        self.save()
        last = self.last_evaluation()
        of_this = last is not None and last["version"] == version
        save_policy(self.run_dir, self.policy(), job=self.job, best=False, version=version,
                    env_steps=self.coordinator.env_steps, evaluation=last if of_this else None,
                    last_evaluation=None if of_this else last)
        return {**self.checkpointer.stats(), "resumed_from_step": self.checkpointer.resumed_step}

    def last_evaluation(self) -> dict[str, Any] | None:
        """The run's last evaluation: this process's (with its returns and seed), else
        the resumed checkpoint's last row, else None."""
        coordinator = self.coordinator
        if coordinator.last_result is not None:
            return evaluation_record(coordinator.last_result)
        return row_record(coordinator.evals[-1]) if coordinator.evals else None
