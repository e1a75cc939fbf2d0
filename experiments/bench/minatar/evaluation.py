"""Evaluation side of ``experiments.bench.minatar.budget``: snapshot files, the evaluator
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

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from experiments.bench.tools.wallclock import (  # noqa: F401  (the snapshot format, re-exported for this bench's callers)
    CURVE,
    DONE,
    EVALUATOR,
    PAUSES,
    SNAPSHOTS,
    first_reaching,
    plot_runs,
    read_curve,
    snapshot_names,
    snapshot_pause_s,
    watch_snapshots,
    write_snapshot,
)

# The MinAtar paper's DQN (experience replay and target network) after 5M frames,
# the average epsilon-0.1 training return it reports, rounded (Young & Tian 2019,
# "MinAtar: An Atari-Inspired Testbed for Thorough and Reproducible Reinforcement
# Learning Experiments", arXiv 1903.03176).
PAPER_SCORES = {"Asterix": 16.5, "Breakout": 10.0, "Freeway": 50.5, "Seaquest": 20.0,
                "SpaceInvaders": 45.0}
EPSILONS = {"eps0.1": 0.1, "greedy": 0.01}
VARIANTS = ("paper", "gymnax")  # envs.registry.minatar_id's


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
    """Evaluate every snapshot of ``run_dir`` (:func:`~experiments.bench.tools.wallclock.watch_snapshots`)
    until the bench writes ``DONE`` (after the trainer exited) and none is left.
    ``policy()`` returns ``(load(state), scores(obs))`` for the implementation's
    network."""
    load, scores = policy()
    env = eval_env(game, episodes=episodes, max_steps=max_steps, variant=variant)

    def evaluate(snap: dict[str, Any]) -> dict[str, Any]:
        load(snap["state"])
        return evaluate_snapshot(scores, env, seed=seed * 1_000_003 + snap["env_steps"])

    try:
        return watch_snapshots(run_dir, evaluate, poll_s=poll_s)
    finally:
        env.close()


# --------------------------------------------------------------- the results


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
    levels: list[float | tuple[float, str]] = [(PAPER_SCORES[game], "paper (DQN, 5M)")]
    if score is not None and score != PAPER_SCORES[game]:
        levels.append((score, f"--score {score:g}"))
    name_of_board = board(game, variant)
    title = f"MinAtar {game}" + ("" if variant == "paper" else f" ({variant}: {env_id(game, variant)})")
    return plot_runs(os.path.join(out, name_of_board), os.path.join(out, f"minatar-{name_of_board}.png"),
                     key="eps0.1", dotted_key="greedy", title=title, impl_order=impl_order, levels=levels,
                     ylabel="return (solid: epsilon 0.1, dotted: 0.01)")
