"""Evaluation side of ``experiments.bench.minatar``: snapshot files, the evaluator
process, learning-curve summaries and the PNG.

A trainer writes its acting network's parameters to ``<run>/snapshots/`` every
``--eval-every`` env steps (:func:`write_snapshot`: one atomic ``torch.save`` of
CPU tensors and the env steps and wall-clock it was taken at) and once more at the
end (``final``). The evaluator (:func:`evaluator_main`, its own process at
``nice`` 10) takes the snapshots in env-step order and plays each twice over
``--eval-episodes`` episodes, one per env of a vector env (each env's first
episode): epsilon-greedy with epsilon 0.1 (the MinAtar paper's reported return)
and 0.01 ("greedy"). Every implementation is evaluated the same way: argmax of its
Q-values (DQNs) or of its policy logits (actor-critics), a uniformly random action
with probability epsilon. Results go to ``<run>/evals.jsonl``; its CPU time (all
of it, and the part spent while the trainer was still running) to
``<run>/evaluator.json``.

A run's JSON line summarizes its curve (:func:`summarize_curve`): when each
evaluation first reached a score, the best greedy return by given times.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

# The MinAtar paper's DQN (experience replay and target network) after 5M frames,
# the average epsilon-0.1 training return it reports, rounded (Young & Tian 2019,
# "MinAtar: An Atari-Inspired Testbed for Thorough and Reproducible Reinforcement
# Learning Experiments", arXiv 1903.03176).
PAPER_SCORES = {"Asterix": 16.5, "Breakout": 10.0, "Freeway": 50.5, "Seaquest": 20.0,
                "SpaceInvaders": 45.0}
EPSILONS = {"eps0.1": 0.1, "greedy": 0.01}
VARIANTS = ("paper", "gymnax")  # envs.registry.minatar_id's
SNAPSHOTS, DONE, CURVE, EVALUATOR = "snapshots", "DONE", "evals.jsonl", "evaluator.json"
PAUSES = "snapshot-pauses.txt"  # seconds each snapshot took its trainer, one a line


def env_id(game: str, variant: str = "paper") -> str:
    """``paper``: all six actions, sticky actions (``-v0``), the paper's protocol;
    ``gymnax``: gymnax's MinAtar (minimal action set, no sticky actions, episodes
    capped at 1,000 steps, Freeway's at 2,500). See :mod:`envs.registry`."""
    from envs.registry import minatar_id

    return minatar_id(game, variant)


def board(game: str, variant: str = "paper") -> str:
    """Where a game's runs and PNG go under the results directory: the game's name
    (the paper's protocol, as before variants), ``<game>-gymnax`` for the other."""
    return game if variant == "paper" else f"{game}-{variant}"


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


def snapshot_names(run_dir: str) -> list[str]:
    """Finished snapshots, in env-step order (the step count leads the name)."""
    directory = os.path.join(run_dir, SNAPSHOTS)
    if not os.path.isdir(directory):
        return []
    return sorted(n for n in os.listdir(directory) if n.startswith("snap-") and n.endswith(".pt"))


# ----------------------------------------------------------------- evaluation


def eval_env(game: str, *, episodes: int, max_steps: int, variant: str = "paper"):
    """``episodes`` copies of the game, each episode cut at ``max_steps`` (MinAtar has
    no time limit of its own, and a strong policy can play for a very long time; the
    gymnax variant's own cap, 1,000 steps, comes first and counts as a cut too)."""
    import gymnasium as gym
    from gymnasium.wrappers import TimeLimit

    from envs.registry import EnvFactory

    factory = EnvFactory.from_id(env_id(game, variant))
    return gym.vector.SyncVectorEnv([lambda: TimeLimit(factory(), max_episode_steps=max_steps)] * episodes)


def play(scores: Callable[[np.ndarray], Any], env: Any, *, epsilon: float, seed: int) -> tuple[np.ndarray, int]:
    """Returns of each env's first episode with epsilon-greedy actions over
    ``scores(obs)`` (Q-values or logits, ``(batch, actions)``), and how many of those
    episodes the time limit cut."""
    import torch

    rng = np.random.default_rng(seed)
    n, actions = env.num_envs, int(env.single_action_space.n)
    obs, _ = env.reset(seed=seed)
    returns, running = np.zeros(n), np.ones(n, dtype=bool)
    truncated_episodes = 0
    while running.any():
        with torch.no_grad():
            greedy = np.asarray(scores(obs).argmax(-1).cpu())
        action = np.where(rng.random(n) < epsilon, rng.integers(actions, size=n), greedy)
        obs, reward, terminated, truncated, _ = env.step(action)
        returns += np.asarray(reward, dtype=np.float64) * running
        truncated_episodes += int(np.sum(truncated & ~terminated & running))
        running &= ~(terminated | truncated)
    return returns, truncated_episodes


def evaluate_snapshot(scores: Callable, env: Any, *, seed: int) -> dict[str, Any]:
    record: dict[str, Any] = {}
    for key, epsilon in EPSILONS.items():
        returns, cut = play(scores, env, epsilon=epsilon, seed=seed)
        record.update({key: float(returns.mean()), f"{key}_std": float(returns.std()), f"{key}_cut": cut})
    return record


def evaluator_main(run_dir: str, *, policy: Callable[[], tuple[Callable, Callable]], game: str,
                   episodes: int, max_steps: int, seed: int, variant: str = "paper",
                   poll_s: float = 0.5) -> dict[str, Any]:
    """Evaluate every snapshot of ``run_dir`` until the bench writes ``DONE`` (after
    the trainer exited) and none is left. ``policy()`` returns ``(load(state),
    scores(obs))`` for the implementation's network."""
    import torch

    os.nice(10)  # the trainer comes first on a 2-core machine
    torch.set_num_threads(1)
    load, scores = policy()
    env = eval_env(game, episodes=episodes, max_steps=max_steps, variant=variant)
    seen: set[str] = set()
    cpu_at_done = done_at = None
    count = 0
    try:
        while True:
            done = os.path.exists(os.path.join(run_dir, DONE))  # before listing: no snapshot is missed
            if done and done_at is None:
                cpu_at_done, done_at = time.process_time(), time.time()
            pending = [n for n in snapshot_names(run_dir) if n not in seen]
            if not pending:
                if done:
                    break
                time.sleep(poll_s)
                continue
            for name in pending:
                seen.add(name)
                snap = torch.load(os.path.join(run_dir, SNAPSHOTS, name), weights_only=True)
                load(snap["state"])
                t0, c0 = time.perf_counter(), time.process_time()
                record = {"env_steps": snap["env_steps"], "wall_s": round(snap["wall_s"], 2),
                          "updates": snap["updates"], "final": snap["final"],
                          **evaluate_snapshot(scores, env, seed=seed * 1_000_003 + snap["env_steps"]),
                          "eval_s": round(time.perf_counter() - t0, 3),
                          "eval_cpu_s": round(time.process_time() - c0, 3)}
                with open(os.path.join(run_dir, CURVE), "a") as f:
                    f.write(json.dumps(record) + "\n")
                count += 1
    finally:
        env.close()
    cpu = time.process_time()
    report = {"eval_cpu_s": round(cpu, 2),
              "eval_cpu_s_during_training": round(cpu_at_done if cpu_at_done is not None else cpu, 2),
              "eval_tail_s": round(time.time() - done_at, 2) if done_at else None,
              "evaluations": count}
    with open(os.path.join(run_dir, EVALUATOR), "w") as f:
        json.dump(report, f)
    return report


# --------------------------------------------------------------- the results


def read_curve(run_dir: str) -> list[dict[str, Any]]:
    path = os.path.join(run_dir, CURVE)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return sorted((json.loads(line) for line in f if line.strip()),
                      key=lambda r: (r["env_steps"], r["final"]))


def first_reaching(curve: list[dict[str, Any]], key: str, score: float) -> dict[str, Any] | None:
    """The first evaluation (in env-step order) whose ``key`` return (``"eps0.1"`` or
    ``"greedy"``) is at least ``score``."""
    return next((r for r in curve if r[key] >= score), None)


def best_by(curve: list[dict[str, Any]], key: str, seconds: float) -> float | None:
    """The best ``key`` return among the snapshots taken by ``seconds`` of wall-clock
    (the trainer's, from its launch); None if none was."""
    returns = [r[key] for r in curve if r["wall_s"] <= seconds]
    return max(returns) if returns else None


def summarize_curve(curve: list[dict[str, Any]], *, paper_score: float, score: float | None = None,
                    report_at: tuple[float, ...] = ()) -> dict[str, Any]:
    """When the epsilon-0.1 evaluation first reached the paper's score, when the
    epsilon-0.1 and the greedy ones first reached ``score`` (default: the paper's);
    each as the snapshot's wall-clock and env steps. The final and best scores, and
    ``best_greedy_by_s``: the best greedy return by each of ``report_at`` seconds
    (issue 33 states its targets as "greedy return >= X by time T")."""
    score = paper_score if score is None else score
    paper = first_reaching(curve, "eps0.1", paper_score)
    reached = first_reaching(curve, "eps0.1", score)
    greedy = first_reaching(curve, "greedy", score)
    final = next((r for r in curve if r["final"]), curve[-1] if curve else None)
    return {
        "reached_paper_at_s": paper["wall_s"] if paper else None,
        "reached_paper_at_steps": paper["env_steps"] if paper else None,
        "score": score,
        "reached_score_at_s": reached["wall_s"] if reached else None,
        "reached_score_at_steps": reached["env_steps"] if reached else None,
        "reached_score_greedy_at_s": greedy["wall_s"] if greedy else None,
        "reached_score_greedy_at_steps": greedy["env_steps"] if greedy else None,
        "final_eval_eps0.1": final["eps0.1"] if final else None,
        "final_eval_greedy": final["greedy"] if final else None,
        "best_eval_eps0.1": max(r["eps0.1"] for r in curve) if curve else None,
        "best_eval_greedy": max(r["greedy"] for r in curve) if curve else None,
        "best_greedy_by_s": {f"{t:g}": best_by(curve, "greedy", t) for t in report_at},
        "evaluations": len(curve),
        "eval_episodes_cut": sum(r["eps0.1_cut"] + r["greedy_cut"] for r in curve),
    }


def plot_game(out: str, game: str, impl_order: list[str], *, variant: str = "paper",
              score: float | None = None) -> str | None:
    """``<out>/minatar-<board>.png``: epsilon-0.1 (solid) and greedy (dotted) returns
    against wall-clock and env steps, every run under ``<out>/<board>/`` (the board:
    :func:`board`); the paper's score and, if another, ``score`` as lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    name_of_board = board(game, variant)
    root = os.path.join(out, name_of_board)
    runs = sorted(os.listdir(root)) if os.path.isdir(root) else []
    curves = [(name, read_curve(os.path.join(root, name))) for name in runs]
    curves = [(name, c) for name, c in curves if c]
    if not curves:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    colors = plt.get_cmap("tab10")
    for name, curve in curves:
        impl = name.rsplit("-seed", 1)[0]
        color = colors(impl_order.index(impl) % 10 if impl in impl_order else 9)
        for ax, x in zip(axes, ("wall_s", "env_steps")):
            xs = [r[x] for r in curve]
            ax.plot(xs, [r["eps0.1"] for r in curve], color=color, marker="o", markersize=3, label=name)
            ax.plot(xs, [r["greedy"] for r in curve], color=color, linestyle=":", linewidth=1)
    for ax, label in zip(axes, ("wall-clock (s)", "env steps")):
        ax.axhline(PAPER_SCORES[game], color="gray", linestyle="--", linewidth=1, label="paper (DQN, 5M)")
        if score is not None and score != PAPER_SCORES[game]:
            ax.axhline(score, color="black", linestyle="-.", linewidth=1, label=f"--score {score:g}")
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("return (solid: epsilon 0.1, dotted: 0.01)")
    axes[1].legend(fontsize=8)
    fig.suptitle(f"MinAtar {game}" + ("" if variant == "paper" else f" ({variant}: {env_id(game, variant)})"))
    fig.tight_layout()
    path = os.path.join(out, f"minatar-{name_of_board}.png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
