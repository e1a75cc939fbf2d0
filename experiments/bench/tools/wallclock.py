"""What the wall-clock benchmarks share (``experiments.bench.continuous.budget``; the
snapshot files are ``experiments.bench.minatar.budget``'s): one trainer and one evaluator
process per run, snapshots at fixed env-step intervals, curves, crossings, the
results file and the load average.

A run is two processes (:func:`run_pair`): a trainer that stops at its wall-clock
budget, counted from its launch, and writes its acting network every ``eval_every``
env steps (:func:`write_snapshot`); and an evaluator at ``nice`` 10
(:func:`watch_snapshots`) that plays each snapshot as it appears, so evaluation
never pauses a trainer and costs it only what the niced process takes from the
machine (reported: ``eval_cpu_s``, the part of it spent while training ran, and
how long evaluation went on after training, ``eval_tail_s``). The bench writes
``DONE`` in the run directory once the trainer has exited; the evaluator finishes
the snapshots left and stops. With ``evaluate_after`` the evaluator starts only then,
and the trainer has the machine to itself.

The snapshot format, its readers and the evaluator's loop live here; the MinAtar
bench (:mod:`experiments.bench.minatar.evaluation`) plays its snapshots through them and re-exports the
names its callers use.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from collections.abc import Callable, Sequence
from typing import Any

from experiments.bench.tools.memory import PeakMemory

SNAPSHOTS, DONE, CURVE, EVALUATOR = "snapshots", "DONE", "evals.jsonl", "evaluator.json"
PAUSES = "snapshot-pauses.txt"  # seconds each snapshot took its trainer, one a line
RESULT_PREFIX = "RESULT "  # how a trainer hands its figures to the bench: its last stdout line


# ------------------------------------------------------------------ snapshots


def write_snapshot(run_dir: str, state: dict[str, Any], *, env_steps: int, wall_s: float, updates: int,
                   final: bool = False) -> float:
    """Save ``state`` (a state dict) atomically. The seconds it took (the trainer's
    pause, from whichever process the trainer runs in) are appended to
    ``<run_dir>/snapshot-pauses.txt``, except for the final snapshot, taken after
    training."""
    import torch

    t0 = time.perf_counter()
    directory = os.path.join(run_dir, SNAPSHOTS)
    os.makedirs(directory, exist_ok=True)
    name = f"snap-{int(env_steps):012d}{'-final' if final else ''}.pt"
    path = os.path.join(directory, name)
    payload = {"state": {k: v.detach().cpu() for k, v in state.items()}, "env_steps": int(env_steps),
               "wall_s": float(wall_s), "updates": int(updates), "final": bool(final)}
    torch.save(payload, path + ".tmp")
    os.replace(path + ".tmp", path)
    seconds = time.perf_counter() - t0
    if not final:
        with open(os.path.join(run_dir, PAUSES), "a") as f:
            f.write(f"{seconds:.6f}\n")
    return seconds


def snapshot_pause_s(run_dir: str) -> float:
    path = os.path.join(run_dir, PAUSES)
    if not os.path.exists(path):
        return 0.0
    with open(path) as f:
        return sum(float(line) for line in f if line.strip())


def bench_run(parser: argparse.ArgumentParser, run_dir: str, impls: Sequence[str], *,
              impl: str | None = None) -> tuple[str, str, list[str]]:
    """``(env or game, implementation, snapshot paths)`` of a bench's run directory,
    ``<out>/<env or game>/<impl>-seed<k>`` (``impl`` given wins over the name). Exits
    through ``parser.error``, naming the run, when either cannot be found."""
    path = os.path.abspath(run_dir)
    impl = impl or next((i for i in impls if os.path.basename(path).startswith(i + "-")), None)
    if impl is None:
        parser.error(f"{run_dir}: cannot tell whose run it is; pass --impl, one of {list(impls)}")
    paths = [os.path.join(run_dir, SNAPSHOTS, name) for name in snapshot_names(run_dir)]
    if not paths:
        parser.error(f"{run_dir}: no snapshots under {os.path.join(run_dir, SNAPSHOTS)}")
    return os.path.basename(os.path.dirname(path)), impl, paths


def snapshot_names(run_dir: str) -> list[str]:
    """Finished snapshots, in env-step order (the step count leads the name)."""
    directory = os.path.join(run_dir, SNAPSHOTS)
    if not os.path.isdir(directory):
        return []
    return sorted(n for n in os.listdir(directory) if n.startswith("snap-") and n.endswith(".pt"))


# ---------------------------------------------------------------- in a trainer


class Every:
    """Passes once each time a growing count reaches the next multiple of ``every``."""

    def __init__(self, every: int) -> None:
        self.every, self.next = every, every

    def passed(self, count: int) -> bool:
        if count < self.next:
            return False
        while self.next <= count:
            self.next += self.every
        return True


class Snapshots:
    """Mixin for a trainer's algorithm or learner (keyword-only constructor) that
    writes evaluation snapshots: where (``run_dir``), how often (``every`` env steps)
    and from when the wall-clock counts (``started``) are class attributes, set by
    :meth:`bound` (class attributes travel to every rank with the class); an unbound
    class refuses to be built."""

    run_dir: str = ""
    every: int = 0
    started: float = 0.0

    @classmethod
    def bound(cls, **settings: Any) -> type:
        """A subclass with these class attributes; a name the class lacks is a TypeError."""
        unknown = sorted(k for k in settings if k.startswith("_") or not hasattr(cls, k)
                         or callable(getattr(cls, k)))
        if unknown:
            raise TypeError(f"{cls.__name__}.bound() got unknown settings {unknown}")
        run_dir, every = settings.get("run_dir", cls.run_dir), settings.get("every", cls.every)
        if not run_dir or every < 1:
            raise ValueError(f"snapshots need a run directory and every >= 1; got {run_dir!r}, {every}")
        return type(cls.__name__, (cls,), settings)

    def __init__(self, **kwargs: Any) -> None:  # the base class's keywords, checked by it
        super().__init__(**kwargs)
        self.start_snapshots()

    def start_snapshots(self) -> None:
        if not self.run_dir or self.every < 1:
            raise TypeError(f"use {type(self).__name__}.bound(...) to set where and how often to snapshot")
        self._snapshot_clock = Every(self.every)

    def snapshot_if_due(self, state: Callable[[], dict[str, Any]], *, env_steps: int, updates: int) -> bool:
        """Write ``state()`` if ``env_steps`` passed the next multiple of ``every``."""
        if not self._snapshot_clock.passed(env_steps):
            return False
        write_snapshot(self.run_dir, state(), env_steps=env_steps, wall_s=time.time() - self.started,
                       updates=updates)
        return True


class PacedSnapshots(Snapshots):
    """Mixin for an actor-learner :class:`~algorithms.actor_learner.Learner` whose
    replay ratio is paced (Ape-X): after the update at which the run passes each
    ``every`` env steps, write ``algorithm.policy_state()`` as a snapshot. The
    learner does not see the coordinator's env-step count, so it uses the one
    Pacing holds it to, ``learning_starts + updates / updates_per_step``: actors
    and learner stay within Pacing's slack of it."""

    learning_starts: int = 0
    updates_per_step: float = 1.0

    @classmethod
    def bound(cls, **settings: Any) -> type:
        if not settings.get("updates_per_step", cls.updates_per_step) > 0:
            raise ValueError(f"snapshots need updates_per_step > 0, got {settings.get('updates_per_step')}")
        return super().bound(**settings)

    def paced_env_steps(self) -> int:
        return self.learning_starts + int(self.updates / self.updates_per_step)  # type: ignore[attr-defined]

    def step(self) -> dict[str, Any]:
        metrics = super().step()  # type: ignore[misc]
        self.snapshot_if_due(self.algorithm.policy_state, env_steps=self.paced_env_steps(),  # type: ignore[attr-defined]
                             updates=self.updates)  # type: ignore[attr-defined]
        return metrics


def learn_sb3(model: Any, acting_state: Callable[[], dict[str, Any]], *, run_dir: str, started: float,
              budget_s: float, max_env_steps: int, eval_every: int) -> dict[str, Any]:
    """Train a Stable-Baselines3 model under this protocol: a snapshot of
    ``acting_state()`` every ``eval_every`` env steps, a stop at ``budget_s`` from
    ``started`` (the trainer's launch) or at ``max_env_steps``, a final snapshot, its
    env closed. Returns the figures every trainer reports (env steps, updates, their
    rates over the time spent learning, start-up seconds)."""
    from stable_baselines3.common.callbacks import BaseCallback

    clock = Every(eval_every)

    class Snapshots(BaseCallback):
        def _on_step(self) -> bool:
            if clock.passed(self.num_timesteps):
                write_snapshot(run_dir, acting_state(), env_steps=self.num_timesteps,
                               wall_s=time.time() - started, updates=model._n_updates)
            return time.time() - started < budget_s

    began = time.time()
    model.learn(total_timesteps=max_env_steps, callback=Snapshots())
    active = time.time() - began
    write_snapshot(run_dir, acting_state(), env_steps=model.num_timesteps, wall_s=time.time() - started,
                   updates=model._n_updates, final=True)
    model.get_env().close()
    return {"env_steps": int(model.num_timesteps), "updates": int(model._n_updates),
            "env_steps_per_s": model.num_timesteps / active if active > 0 else 0.0,
            "updates_per_s": model._n_updates / active if active > 0 else 0.0,
            "startup_s": began - started}


def report(result: dict[str, Any]) -> None:
    """A trainer's figures, as the line :func:`run_pair` looks for."""
    print(RESULT_PREFIX + json.dumps(result), flush=True)


# ------------------------------------------------------------- the evaluator


def watch_snapshots(run_dir: str, evaluate: Callable[[dict[str, Any]], dict[str, Any]], *,
                    poll_s: float = 0.5) -> dict[str, Any]:
    """The evaluator's loop (call it in its own process): ``evaluate(snapshot)`` (the
    loaded snapshot file) for every snapshot of ``run_dir`` in env-step order, one
    line each in ``<run>/evals.jsonl``, until the bench writes ``DONE`` and none is
    left. Its CPU time goes to ``<run>/evaluator.json``."""
    import torch

    os.nice(10)  # the trainer comes first
    torch.set_num_threads(1)
    seen: set[str] = set()
    cpu_at_done = done_at = None
    count, looked = 0, False
    while True:
        done = os.path.exists(os.path.join(run_dir, DONE))  # before listing: no snapshot is missed
        if done and done_at is None:  # done at the first look: started after training, none spent during it
            cpu_at_done, done_at = (time.process_time() if looked else 0.0), time.time()
        looked = True
        pending = [n for n in snapshot_names(run_dir) if n not in seen]
        if not pending:
            if done:
                break
            time.sleep(poll_s)
            continue
        for name in pending:
            seen.add(name)
            snap = torch.load(os.path.join(run_dir, SNAPSHOTS, name), weights_only=True)
            t0, c0 = time.perf_counter(), time.process_time()
            record = {"env_steps": snap["env_steps"], "wall_s": round(snap["wall_s"], 2),
                      "updates": snap["updates"], "final": snap["final"], **evaluate(snap),
                      "eval_s": round(time.perf_counter() - t0, 3),
                      "eval_cpu_s": round(time.process_time() - c0, 3)}
            with open(os.path.join(run_dir, CURVE), "a") as f:
                f.write(json.dumps(record) + "\n")
            count += 1
    cpu = time.process_time()
    figures = {"eval_cpu_s": round(cpu, 2),
               "eval_cpu_s_during_training": round(cpu_at_done if cpu_at_done is not None else cpu, 2),
               "eval_tail_s": round(time.time() - done_at, 2) if done_at else None, "evaluations": count}
    with open(os.path.join(run_dir, EVALUATOR), "w") as f:
        json.dump(figures, f)
    return figures


# ------------------------------------------------------------ command lines


def names(text: str) -> list[str]:
    """The non-empty parts of a comma-separated flag value."""
    return [part.strip() for part in text.split(",") if part.strip()]


def add_process_args(parser: argparse.ArgumentParser, *per_run: str) -> None:
    """The arguments a bench gives its own trainer and evaluator processes (``--worker``,
    ``--evaluator``, the run's ``per_run`` fields, ``--run-dir``, ``--started``), hidden
    from ``--help``."""
    for name in ("--worker", "--evaluator", *per_run, "--run-dir"):
        parser.add_argument(name, help=argparse.SUPPRESS)
    parser.add_argument("--started", type=float, default=0.0, help=argparse.SUPPRESS)


def choose(parser: argparse.ArgumentParser, flag: str, text: str, allowed: Sequence[str], *,
           what: str) -> list[str]:
    """``text``'s names, each one of ``allowed``; otherwise a parser error naming the flag."""
    chosen = names(text)
    unknown = [n for n in chosen if n not in allowed]
    if unknown or not chosen:
        parser.error(f"{flag}: unknown {what}(s) {unknown}; choose from {list(allowed)}")
    return chosen


def seed_list(parser: argparse.ArgumentParser, text: str) -> list[int]:
    """``--seeds``: comma-separated non-negative integers."""
    try:
        seeds = [int(s) for s in names(text)]
    except ValueError:
        parser.error(f"--seeds must be comma-separated integers, got {text!r}")
    if not seeds or any(s < 0 for s in seeds):
        parser.error(f"--seeds must be non-negative integers, got {text!r}")
    return seeds


# ------------------------------------------------------------------ the bench


def loadavg() -> list[float] | None:
    """The 1, 5 and 15 minute load averages (None where the OS has none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def run_pair(trainer: Sequence[str], evaluator: Sequence[str], *, run_dir: str, trainer_timeout_s: float,
             evaluator_timeout_s: float, evaluate_after: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """Start the evaluator, then run the trainer to its end; write ``DONE`` and wait
    for the evaluator. Returns the trainer's figures (its :func:`report` line, or
    ``{"error": ...}``; with ``peak_memory_mb``, the peak summed PSS of the trainer and
    every process it started, :class:`~experiments.bench.tools.memory.PeakMemory`) and
    the evaluator's (``evaluator.json``; ``{}`` if it failed, which adds an ``error``
    to the first). Both logs go to ``run_dir``. The trainer is
    told when it was launched (``--started``): its budget counts from then.

    ``evaluate_after``: start the evaluator only once the trainer has exited, so the
    trainer has the whole machine; on a machine of few cores the evaluator's share
    otherwise grows with the episodes' length, so it takes most from the runs that
    play best. The snapshots are the same; only the curve comes later."""
    watcher: subprocess.Popen[bytes] | None = None

    def start_evaluator() -> subprocess.Popen[bytes]:
        with open(os.path.join(run_dir, "evaluator.log"), "w") as log:
            return subprocess.Popen(list(evaluator), stdout=log, stderr=subprocess.STDOUT)

    if not evaluate_after:
        watcher = start_evaluator()
    launched = time.time()
    result: dict[str, Any]
    peak: PeakMemory | None = None
    peak_mb: float | None = None
    try:
        proc = subprocess.Popen([*trainer, "--started", repr(launched)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        peak = PeakMemory(proc.pid).start()
        try:
            stdout, stderr = proc.communicate(timeout=trainer_timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
        with open(os.path.join(run_dir, "trainer.log"), "w") as log:
            log.write(stdout + stderr)
        lines = [line for line in stdout.splitlines() if line.startswith(RESULT_PREFIX)]
        tail = " | ".join((stderr or stdout).strip().splitlines()[-3:])
        result = (json.loads(lines[-1][len(RESULT_PREFIX):]) if lines
                  else {"error": f"trainer exit {proc.returncode}: {tail}"})
    except subprocess.TimeoutExpired:
        result = {"error": f"trainer timed out after {trainer_timeout_s:.0f} s"}
    finally:
        open(os.path.join(run_dir, DONE), "w").close()
        if peak is not None:  # the trainer and all it started (a job's ranks, env workers)
            peak_mb = peak.stop()
    result["peak_memory_mb"] = peak_mb
    if watcher is None:
        watcher = start_evaluator()
    try:
        watcher.wait(timeout=evaluator_timeout_s)
    except subprocess.TimeoutExpired:
        watcher.kill()
        watcher.wait()
        result.setdefault("error", "evaluator timed out")
    figures: dict[str, Any] = {}
    if os.path.exists(os.path.join(run_dir, EVALUATOR)):
        with open(os.path.join(run_dir, EVALUATOR)) as f:
            figures = json.load(f)
    elif watcher.returncode:
        result.setdefault("error", f"evaluator exit {watcher.returncode} (see {run_dir}/evaluator.log)")
    return result, figures


def rounded(value: Any, digits: int = 4) -> Any:
    return round(value, digits) if isinstance(value, float) else value


# ------------------------------------------------------------------- curves


def read_curve(run_dir: str, *, budget_s: float | None = None) -> list[dict[str, Any]]:
    """A run's evaluations in env-step order. Given the run's ``budget_s``, its final
    snapshot, if written after the budget, counts at the budget (``wall_s``; the
    second it was written stays in ``written_s``): the trainer stops at its budget and
    writes it once the update in flight is done (PQN on Pong: 0.35 s later), so a
    report at the budget holds the policy that the budget trained, not the one before."""
    path = os.path.join(run_dir, CURVE)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        curve = sorted((json.loads(line) for line in f if line.strip()), key=lambda r: (r["env_steps"], r["final"]))
    if budget_s is None:
        return curve
    return [{**r, "wall_s": budget_s, "written_s": r["wall_s"]} if r["final"] and r["wall_s"] > budget_s else r
            for r in curve]


def first_reaching(curve: list[dict[str, Any]], key: str, score: float) -> dict[str, Any] | None:
    """The first evaluation (in env-step order) whose ``key`` return (e.g. ``"eps0.1"``
    or ``"greedy"``) is at least ``score``."""
    return next((r for r in curve if r[key] >= score), None)


def crossings(curve: list[dict[str, Any]], key: str, levels: Sequence[float]) -> dict[str, Any]:
    """For each level (keyed by ``f"{level:g}"``): the wall-clock seconds and env
    steps of the first snapshot whose evaluation reached it, or None."""
    found = {}
    for level in levels:
        record = first_reaching(curve, key, level)
        found[f"{level:g}"] = {"s": record["wall_s"], "steps": record["env_steps"]} if record else None
    return found


def value_at(curve: list[dict[str, Any]], key: str, seconds: float) -> float | None:
    """The ``key`` return of the last snapshot taken by ``seconds`` of the trainer's
    wall-clock (the curve as a step function of time); None before the first."""
    taken = [r for r in curve if r["wall_s"] <= seconds]
    return max(taken, key=lambda r: (r["wall_s"], r["env_steps"]))[key] if taken else None


def plot_runs(root: str, path: str, *, key: str, title: str, impl_order: Sequence[str],
              levels: Sequence[float | tuple[float, str]] = (), ylabel: str = "return",
              dotted_key: str | None = None) -> str | None:
    """``path``: the ``key`` return of every run under ``root`` (one directory per run,
    ``<impl>-seed<k>``) against wall-clock and env steps, ``dotted_key``'s beside it
    as a dotted line in the run's colour; ``levels`` as horizontal lines (a
    ``(level, label)`` pair is named in the legend). None when no run has a curve yet."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = sorted(os.listdir(root)) if os.path.isdir(root) else []
    curves = [(name, read_curve(os.path.join(root, name))) for name in runs]
    curves = [(name, c) for name, c in curves if c]
    if not curves:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    colors = plt.get_cmap("tab10")
    for name, curve in curves:
        impl = name.rsplit("-seed", 1)[0]
        color = colors(list(impl_order).index(impl) % 10 if impl in impl_order else 9)
        for ax, x in zip(axes, ("wall_s", "env_steps")):
            xs = [r[x] for r in curve]
            ax.plot(xs, [r[key] for r in curve], color=color, marker="o", markersize=3, label=name)
            if dotted_key is not None:
                ax.plot(xs, [r[dotted_key] for r in curve], color=color, linestyle=":", linewidth=1)
    for ax, label in zip(axes, ("wall-clock (s, from the trainer's launch)", "env steps")):
        for i, level in enumerate(levels):
            value, name = level if isinstance(level, tuple) else (level, None)
            ax.axhline(value, color="gray" if i == 0 else "black", linestyle="--" if i == 0 else "-.",
                       linewidth=1, label=name)
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(ylabel)
    axes[1].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
