"""Run a job from a benchmark as ``python -m experiments.<job>`` would, in this process,
and read its summary; look a job's flag up at run time (jobs that other branches are
building are found once merged)."""

from __future__ import annotations

import contextlib
import glob
import importlib
import io
import json
import os
import tempfile
from typing import Any

SUMMARY_KEYS = ("stop_reason", "env_steps", "updates", "num_sources", "evaluations", "env_steps_per_s",
                "updates_per_s", "wall_s")


def run_job(module: str, argv: list[str]) -> dict[str, Any]:
    """``python -m <module> argv`` in this process, its printout kept out of the JSON
    lines; the run's summary.json."""
    mod = importlib.import_module(module)
    with tempfile.TemporaryDirectory(prefix="bench-job-") as logs:
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                code = mod.main([*argv, "--log-dir", logs, "--status-every", "0"])
        except SystemExit as exc:  # a flag this job does not take
            code = exc.code
        if code != 0:
            raise RuntimeError(f"python -m {module} {' '.join(argv)} exited {code}: {out.getvalue()[-1500:]}")
        (path,) = glob.glob(os.path.join(logs, "*", "summary.json"))
        with open(path) as f:
            summary = json.load(f)
    return {key: summary[key] for key in SUMMARY_KEYS if key in summary}


def has_module(module: str) -> bool:
    """Whether ``module`` (``experiments.<job>``) is in this checkout: looked up in the
    ``experiments`` package's own directory, not through an editable install's finder,
    which may map the name to another checkout."""
    from importlib.machinery import PathFinder

    package, _, name = module.rpartition(".")
    return PathFinder.find_spec(module, importlib.import_module(package).__path__) is not None


def has_flag(module: str, config_name: str, option: str) -> bool:
    """Whether job ``module``'s config takes ``option`` (looked up now: a flag another
    branch adds is found once merged)."""
    from experiments.runtime.cli import build_parser

    config_cls = getattr(importlib.import_module(module), config_name)
    return option in build_parser(config_cls)._option_string_actions


def apex_made(config: Any) -> tuple[Any, Any]:
    """``(builder, algorithm)``: what ``experiments.apex`` builds for ``config`` (its
    ``env_id`` set), the learn section's unset fields filled as a run's are, on the
    CPU; what a bench's evaluator loads the run's snapshots into."""
    from algorithms.builder import EnvSpec
    from experiments.apex import builder, env_defaults
    from experiments.runtime import Parts
    from experiments.runtime.entry import job_env_fn
    from experiments.runtime.envs import env_spaces

    env_defaults(config, Parts())
    obs_space, act_space = env_spaces(job_env_fn(config, Parts()))
    made = builder(config, Parts(), EnvSpec(observation_space=obs_space, action_space=act_space))
    return made, made.make_algorithm(device="cpu", seed=0)

