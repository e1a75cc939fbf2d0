"""Dead units in our networks over a MinAtar run: for each evaluation snapshot a
``experiments.bench.minatar.budget`` run of ours wrote (``<out>/<Game>/rlpar-apex-seed<k>`` or
``rlpar-a3c-seed<k>``), the share of each ReLU layer's units (conv channels, dense units)
whose output is zero on every one of ``--states`` states of uniformly random play, and
the mean of the network's value output on those states (Ape-X: Q over all actions; A3C:
the critic's V).

Dead units (why they matter, how a conv channel counts) as in
:mod:`algorithms.diagnostics`, which Ape-X and A3C also log live at each evaluation
(``network/dead_units/<layer>``); this tool measures saved snapshots afterwards on one
fixed set of states, so runs and snapshots compare with each other.

    python -m experiments.bench.minatar.dormant RUN_DIR [RUN_DIR ...] [--game G] \\
        [--impl rlpar-apex|rlpar-a3c] [--ours-flags="..."] [--a3c-flags="..."] [--states 3000]

One JSON line per snapshot; ``dead`` is keyed by the ReLU's module name in the network
(with the default MinAtar torso, ``0.2`` is the conv's and ``0.5`` the dense layer's).
``--game`` and ``--impl`` default to what the bench's layout
says (the parent directory's name, the run directory's prefix); ``--ours-flags`` /
``--a3c-flags`` must carry the network flags the run used (the bench's own) so the
snapshot loads into the same network.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from experiments.bench.minatar.evaluation import PAPER_SCORES, env_id
from experiments.bench.tools.emit import emit
from experiments.bench.tools.wallclock import bench_run

IMPLS = ("rlpar-apex", "rlpar-a3c")


def random_play_states(game: str, *, count: int, seed: int) -> np.ndarray:
    """``count`` observations of uniformly random play (episodes restart as they end)."""
    from envs.registry import EnvFactory

    env = EnvFactory.from_id(env_id(game))()
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    states = []
    try:
        for _ in range(count):
            states.append(np.asarray(obs))
            obs, _, terminated, truncated, _ = env.step(int(rng.integers(env.action_space.n)))
            if terminated or truncated:
                obs, _ = env.reset()
    finally:
        env.close()
    return np.stack(states)


def network(impl: str, game: str, *, ours_flags: str, a3c_flags: str) -> tuple[Any, Callable, Callable]:
    """``(module, load(state), value(obs))`` for ``impl``'s network as its job builds it."""
    import torch

    from experiments.bench.minatar.ours import a3c_agent, apex_agent

    if impl == "rlpar-apex":  # Q as the greedy policy sees it (C51's expectation, noisy layers' means)
        dqn = apex_agent(ours_flags, game)
        return dqn.network, dqn.load_policy_state, dqn.greedy_q_values
    agent = a3c_agent(a3c_flags, game)
    return agent.model, agent.load_policy_state, lambda obs: agent.model.value(torch.as_tensor(obs).float())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="run directories holding snapshots/")
    parser.add_argument("--game", default=None, help=f"one of {sorted(PAPER_SCORES)} (default: from the path)")
    parser.add_argument("--impl", choices=IMPLS, default=None, help="default: from the run directory's name")
    parser.add_argument("--ours-flags", default="", help="the Ape-X run's experiments.apex flags")
    parser.add_argument("--a3c-flags", default="", help="the A3C run's experiments.a3c flags")
    parser.add_argument("--states", type=int, default=3000, help="random-play states to measure on")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.states < 1:
        parser.error(f"--states must be >= 1, got {args.states}")
    jobs = []
    for run in args.runs:
        game = args.game or os.path.basename(os.path.dirname(os.path.abspath(run)))
        if game not in PAPER_SCORES:
            parser.error(f"{run}: cannot tell the game (got {game!r}); pass --game, one of {sorted(PAPER_SCORES)}")
        _, impl, paths = bench_run(parser, run, IMPLS, impl=args.impl)
        jobs.append((run, game, impl, paths))

    import torch

    from algorithms.diagnostics import DeadUnits

    torch.set_num_threads(1)
    states_by_game: dict[str, np.ndarray] = {}
    for run, game, impl, paths in jobs:
        if game not in states_by_game:
            states_by_game[game] = random_play_states(game, count=args.states, seed=args.seed)
        states = states_by_game[game]
        net, load, value = network(impl, game, ours_flags=args.ours_flags, a3c_flags=args.a3c_flags)
        rows = []
        for path in paths:
            snap = torch.load(path, weights_only=True)
            load(snap["state"])
            with torch.no_grad(), DeadUnits(net) as dead:
                value_mean = float(value(states).mean())
            rows.append({"bench": "minatar_dormant", "game": game, "impl": impl, "run": run,
                         "env_steps": snap["env_steps"], "wall_s": snap["wall_s"], "final": snap["final"],
                         "dead": dead.fractions(), "value_mean": round(value_mean, 4), "states": args.states})
        for row in sorted(rows, key=lambda r: (r["env_steps"], r["final"])):
            emit(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
