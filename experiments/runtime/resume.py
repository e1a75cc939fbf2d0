"""Resuming a run: the run's own saved config is where it goes on from.

``--resume DIR`` on the command line and ``config.run.resume = DIR`` in Python both
continue the run in ``DIR`` from its newest checkpoint, with ``DIR/config.json`` as
the config:

- command line (``cli.parse_config``): the flags given override it;
- Python (``experiments.<job>.run(config)``, through :func:`resumed_config`): every
  field of ``config`` that differs from the job's default (``type(config)()``)
  overrides it, like a flag given; a field left at its default keeps the run's
  value. So ``config = ApexJobConfig(); config.run.resume = DIR;
  config.run.max_env_steps = 2_000_000`` goes on with the run's own settings and a
  larger budget, not with the defaults (a field cannot be set back to its default
  this way: give it as a flag to ``--resume`` instead).

Either way the fields a job config lists in ``fixed_on_resume`` (what shapes the
checkpointed state: networks, replay layout, the env) may not change:
:func:`check_fixed` raises ValueError naming the flag.

``resume`` is a per-launch field: no ``config.json`` holds it, so ``--config`` of any
run, a resumed one too, starts a new run directory (``cli.save_config``).
"""

from __future__ import annotations

from typing import Any, TypeVar

from experiments.runtime.cli import apply_overrides, changed_fields, flag, leaves, load_run_config

T = TypeVar("T")


def resumed_config(config: T) -> T:
    """The config a Python caller's ``config`` (``run.resume`` set) resumes with: the
    run's saved config, overridden by the fields of ``config`` that differ from the
    defaults of its class. ValueError naming ``--resume`` when the directory is not a
    run of this job."""
    run_dir = config.run.resume  # type: ignore[attr-defined]
    saved = load_run_config(type(config), run_dir)
    apply_overrides(saved, changed_fields(config, type(config)()))
    return saved


def check_fixed(config: Any) -> None:
    """ValueError naming the flag when ``config`` (``run.resume`` set) changes a field
    its class lists in ``fixed_on_resume`` (and, for a config whose fixed fields depend
    on its other values, its ``fixed_fields()``) from the value the run was saved with."""
    names = getattr(type(config), "fixed_on_resume", ())
    if hasattr(config, "fixed_fields"):
        names = (*names, *config.fixed_fields())
    if not names:
        return
    run_dir = config.run.resume
    saved = _values(load_run_config(type(config), run_dir))
    ours = _values(config)
    for name in names:
        if ours[name] != saved[name]:
            raise ValueError(
                f"{flag(name)} cannot change when resuming: {run_dir!r} was run with "
                f"{_spelled(saved[name])!r}, not {_spelled(ours[name])!r}, and its checkpoint holds state made with it "
                f"(leave {flag(name)} out to go on with the run's, or start a new run)")


def _spelled(value: Any) -> Any:
    """A value as its flag and config.json spell it (layer sizes: ``"64,64"``)."""
    return ",".join(map(str, value)) if isinstance(value, tuple) else value


def _values(config: Any) -> dict[str, Any]:
    return {f.name: getattr(owner, f.name) for owner, f, _ in leaves(config)}
