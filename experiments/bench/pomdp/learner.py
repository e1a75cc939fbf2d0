"""R2D2's learner update on a partially observed env's sequences, with its image torso's
two activation layouts: contiguous NCHW (:func:`algorithms.nets.contiguous_layout`, the
default since 2026-12-06) and the channels-last view it had before.

    python -m experiments.bench.pomdp.learner [--envs BreakoutNoTrail] [--updates 120] \\
        [--threads 1] [--flags="--batch-size 64"] [--quick]

The algorithm is the one ``experiments.apex --algorithm r2d2`` builds on the env (the
job's defaults, then ``--flags``; :func:`experiments.bench.tools.job_runs.apex_made`),
twice from the same seed; one copy's ``ChannelsLast`` is set back to channels-last. Both
learn the same replay-shaped batches (``batch_size`` sequences of ``sequence_length``
steps: random observations, actions and rewards, the zero stored state, no episode
ends), in turns of ``--updates / 6`` updates, so a load that comes and goes slows both
alike. One JSON line per (env, layout): the median block's CPU ms (``time.process_time``,
all threads) and wall ms per update; then one ``compare`` line: the CPU ratio and the
largest parameter difference after all updates (the layouts compute the same sums,
maybe in another order). An env whose torso has no image input has one layout: its line
says so.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from typing import Any

import numpy as np

from experiments.bench.tools import wallclock as wc
from experiments.bench.tools.emit import emit

BENCH = "pomdp-learner"
BLOCKS = 6
LAYOUTS = ("nchw", "channels_last")


def build_parser() -> argparse.ArgumentParser:
    from experiments.bench.pomdp.budget import ENVS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--envs", default="BreakoutNoTrail", help=f"comma-separated, from {list(ENVS)}")
    parser.add_argument("--updates", type=int, default=120, help="updates per layout, in 6 blocks (default 120)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1, as a learner here)")
    parser.add_argument("--flags", default="", help=(
        "experiments.apex flags after the job's defaults, given with = (--flags=\"--batch-size 64\")"))
    parser.add_argument("--quick", action="store_true", help="smoke test: 12 updates, a small batch")
    return parser


def batch_for(algorithm: Any, observation_space: Any, *, batch_size: int, rng: np.random.Generator) -> dict:
    """A replay-shaped batch of random sequences for ``algorithm`` (an R2D2)."""
    length, actions = algorithm.config.sequence_length, algorithm.num_actions
    shape = (batch_size, length, *observation_space.shape)
    if observation_space.dtype == np.bool_:
        obs = rng.random(shape) < 0.1
    else:
        low, high = np.broadcast_to(observation_space.low, observation_space.shape), \
            np.broadcast_to(observation_space.high, observation_space.shape)
        obs = rng.uniform(np.maximum(low, -5), np.minimum(high, 5), size=shape).astype(observation_space.dtype)
    return {"obs": obs, "action": rng.integers(actions, size=(batch_size, length)),
            "reward": rng.random((batch_size, length)).astype(np.float32),
            "terminated": np.zeros((batch_size, length), bool), "mask": np.ones((batch_size, length), bool),
            "weights": np.ones(batch_size, np.float32), **algorithm.initial_state(batch_size)}


def measure(env: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    import torch

    from algorithms.nets import ChannelsLast
    from experiments.bench.pomdp import ours
    from experiments.bench.pomdp.budget import ENVS
    from experiments.bench.tools.job_runs import apex_made

    torch.set_num_threads(args.threads)
    env_id = ENVS[env].env_id
    builder, nchw = apex_made(ours.apex_config("rlpar-r2d2", env_id, args.flags, quick=args.quick))
    _, channels_last = apex_made(ours.apex_config("rlpar-r2d2", env_id, args.flags, quick=args.quick))
    made = {"nchw": nchw, "channels_last": channels_last}
    torsos = [m for m in made["channels_last"].network.modules() if isinstance(m, ChannelsLast)]
    head = {"bench": BENCH, "env": env, "env_id": env_id, "threads": args.threads, "flags": args.flags,
            "batch_size": builder.learn.batch_size, "sequence_length": made["nchw"].config.sequence_length}
    if not torsos:
        return [{**head, "kind": "layout", "layout": None, "note": "no image torso: one layout"}]
    for m in torsos:
        m.contiguous = False
    batch = batch_for(made["nchw"], builder.spec.observation_space, batch_size=builder.learn.batch_size,
                      rng=np.random.default_rng(0))
    for algorithm in made.values():  # warm-up: allocator, first-call dispatch
        algorithm.learn(batch)
    per_block = max(1, args.updates // BLOCKS)
    cpu: dict[str, list[float]] = {layout: [] for layout in LAYOUTS}
    wall: dict[str, list[float]] = {layout: [] for layout in LAYOUTS}
    for _ in range(BLOCKS):
        for layout, algorithm in made.items():
            c0, w0 = time.process_time(), time.perf_counter()
            for _ in range(per_block):
                algorithm.learn(batch)
            cpu[layout].append((time.process_time() - c0) / per_block * 1e3)
            wall[layout].append((time.perf_counter() - w0) / per_block * 1e3)
    lines = []
    for layout in LAYOUTS:
        ms = statistics.median(cpu[layout])
        lines.append({**head, "kind": "layout", "layout": layout, "updates": per_block * BLOCKS,
                      "cpu_ms_per_update": round(ms, 3), "wall_ms_per_update": round(statistics.median(wall[layout]), 3),
                      "updates_per_cpu_s": round(1e3 / ms, 2)})
    params = zip(made["nchw"].network.parameters(), made["channels_last"].network.parameters())
    diff = max(float((a - b).detach().abs().max()) for a, b in params)
    lines.append({**head, "kind": "compare", "cpu_ratio_channels_last_over_nchw":
                  round(lines[1]["cpu_ms_per_update"] / lines[0]["cpu_ms_per_update"], 3),
                  "max_param_diff": diff, "loadavg": wc.loadavg()})
    return lines


def main(argv: list[str] | None = None) -> int:
    from experiments.bench.pomdp import ours
    from experiments.bench.pomdp.budget import ENVS

    parser = build_parser()
    args = parser.parse_args(argv)
    envs = wc.choose(parser, "--envs", args.envs, list(ENVS), what="env")
    if args.updates < 1 or args.threads < 1:
        parser.error(f"--updates and --threads must be >= 1, got {args.updates} and {args.threads}")
    if args.quick:
        args.updates = 12
    for env in envs:  # every argument checked before the first measurement
        needs = ENVS[env].needs
        if needs and importlib.util.find_spec(needs) is None:
            parser.error(f"{env} needs {needs}: pip install 'rlpar[{needs}]'")
        try:
            ours.apex_config("rlpar-r2d2", ENVS[env].env_id, args.flags, quick=args.quick)
        except ValueError as exc:
            parser.error(str(exc))
    for env in envs:
        for line in measure(env, args):
            emit(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
