"""Small job configs and TensorBoard reading shared by the experiment tests."""

from __future__ import annotations

import glob
import os

from experiments.runtime.cli import apply_overrides


def apex_config(log_dir: str = "none", **over):
    from experiments.apex import ApexJobConfig

    config = ApexJobConfig()
    apply_overrides(config, {
        "num_actors": 2, "num_envs": 2, "learning_starts": 200, "batch_size": 32, "hidden": "32",
        "eval_every": 1500, "eval_episodes": 4, "target_return": 1e9, "max_env_steps": 3000,
        "max_seconds": 90.0, "log_dir": log_dir, "status_every": 0.0, "rpc_timeout": 30.0, **over})
    return config


def impala_config(log_dir: str = "none", **over):
    from experiments.impala import ImpalaJobConfig

    config = ImpalaJobConfig()
    apply_overrides(config, {
        "num_actors": 2, "num_envs": 2, "unroll_length": 5, "batch_size": 2, "hidden": "32",
        "eval_every": 1500, "eval_episodes": 4, "target_return": 1e9, "max_env_steps": 3000,
        "max_seconds": 90.0, "log_dir": log_dir, "status_every": 0.0, "rpc_timeout": 30.0, **over})
    return config


def a3c_config(log_dir: str = "none", **over):
    from experiments.a3c import A3CJobConfig

    config = A3CJobConfig()
    apply_overrides(config, {
        "num_workers": 1, "num_envs": 2, "n_steps": 4, "max_env_steps": 800, "eval_every": 300,
        "eval_episodes": 2, "target_return": 1e9, "max_seconds": 60.0, "log_dir": log_dir,
        "status_every": 0.0, "rpc_timeout": 30.0, **over})
    return config


def scalars(run_dir: str) -> dict[str, list[tuple[int, float]]]:
    """Every scalar tag of a run directory's TensorBoard events: tag -> [(step, value)]."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out: dict[str, list[tuple[int, float]]] = {}
    for path in glob.glob(os.path.join(run_dir, "events.out.tfevents.*")):
        acc = EventAccumulator(path, size_guidance={"scalars": 0})
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            out.setdefault(tag, []).extend((e.step, e.value) for e in acc.Scalars(tag))
    return out
