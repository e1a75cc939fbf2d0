"""The MinAtar bench's access to our jobs (:mod:`.ours`,
:mod:`.ours_sync`): which job module each of our implementations runs, whether
this tree has it (a job that another branch is still writing gives a "not
available" line, not a failed run), the job's typed config from its flags, the
overrides every bench run gets, the final snapshot and the trainer's figures."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import os
import shlex
import shutil
from typing import Any

from experiments.bench.minatar.evaluation import env_id, write_snapshot

NEVER = 2**62  # --eval-every for the job's own evaluation: the bench evaluates instead
# Our implementations and the job module each runs.
JOBS = {"rlpar-apex": "experiments.apex", "rlpar-a3c": "experiments.a3c", "rlpar-impala": "experiments.impala",
        "rlpar-ppo": "experiments.ppo", "rlpar-pqn": "experiments.pqn"}
SYNC = ("rlpar-ppo", "rlpar-pqn")  # on the synchronous program: ours_sync


def missing(impl: str) -> str | None:
    """Why ``impl`` cannot run in this tree (its job module is absent), or None."""
    module = JOBS[impl]
    if importlib.util.find_spec(module) is None:
        return f"not available: {module} is not installed in this tree"
    return None


def job_module(impl: str):
    """The job module ``impl`` runs; a RuntimeError saying so when this tree lacks it."""
    reason = missing(impl)
    if reason:
        raise RuntimeError(f"{impl}: {reason}")
    return importlib.import_module(JOBS[impl])


def config_class(module: Any) -> type:
    """The job's typed config: the one ``*JobConfig`` dataclass its module defines."""
    found = [value for name, value in vars(module).items() if name.endswith("JobConfig")
             and dataclasses.is_dataclass(value) and getattr(value, "__module__", "") == module.__name__]
    if len(found) != 1:
        raise RuntimeError(f"{module.__name__} defines {len(found)} *JobConfig dataclasses, expected one")
    return found[0]


def job_config(impl: str, flags: str):
    """``impl``'s job config from its flags (exit 2 on a bad one)."""
    from experiments.runtime.cli import parse_config

    return parse_config(config_class(job_module(impl)), shlex.split(flags))


def bench_overrides(game: str, *, run_dir: str, seed: int, budget_s: float, max_env_steps: int,
                    variant: str = "paper") -> dict:
    return {"env_id": env_id(game, variant), "seed": seed, "max_seconds": budget_s,
            "max_env_steps": max_env_steps, "eval_every": NEVER, "eval_episodes": 1,
            "log_dir": os.path.join(run_dir, "job"), "status_every": 0.0, "checkpoint_every": 0.0}


def bench_config(impl: str, game: str, *, flags: str, run_dir: str, seed: int, budget_s: float,
                 max_env_steps: int, variant: str = "paper"):
    """``impl``'s job config from its flags, with the overrides every bench run gets."""
    from experiments.runtime.cli import apply_overrides

    config = job_config(impl, flags)
    apply_overrides(config, bench_overrides(game, run_dir=run_dir, seed=seed, budget_s=budget_s,
                                            max_env_steps=max_env_steps, variant=variant))
    return config


def final_snapshot(run_dir: str, summary: dict[str, Any]) -> None:
    """``policy.pt`` as the last snapshot; the job's checkpoint (replay included) is
    not needed afterwards."""
    import torch

    policy = torch.load(os.path.join(summary["run_dir"], "policy.pt"), weights_only=True)
    write_snapshot(run_dir, policy["state"], env_steps=summary["env_steps"], wall_s=summary["wall_s"],
                   updates=summary.get("updates", 0), final=True)
    shutil.rmtree(os.path.join(summary["run_dir"], "checkpoints"), ignore_errors=True)


def result(summary: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """The trainer's figures from the job's summary."""
    keys = ("env_steps", "updates", "env_steps_per_s", "updates_per_s", "wait_fraction", "startup_s")
    return {**{key: summary.get(key) for key in keys}, "job_run_dir": summary["run_dir"], **extra}
