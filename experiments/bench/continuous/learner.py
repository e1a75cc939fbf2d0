"""What one update costs: ours SAC and TD3 (the Ape-X job's learner algorithms, their
job defaults) against Stable-Baselines3's SAC and TD3 (the continuous bench's zoo
settings), at one env's observation and action sizes, on one core.

    python -m experiments.bench.continuous.learner                     # HalfCheetah's sizes (17, 6)
    python -m experiments.bench.continuous.learner --obs-dim 11 --action-dim 3   # Hopper's
    python -m experiments.bench.continuous.learner --quick             # smoke test, not a measurement

Each implementation makes ``--updates`` timed updates after ``--warmup`` untimed ones,
alone in this process with ``--threads`` torch threads. Ours learn from one fixed
prioritized-replay-shaped batch (the learner's replay sampling and priority updates
are not in it); SB3's ``train`` samples its own uniform replay buffer, filled with
random transitions first, each step (about a twentieth of its time). Neither needs
an env: the sizes are given. One JSON line per implementation: ``update_ms`` and
``updates_per_s`` (wall clock), ``cpu_ms`` (this process's CPU per update), the
networks' sizes and the batch. A peer that is not installed gives a ``skipped`` line.

Why it exists: a learner-bound Ape-X job makes as many updates per second as its
algorithm's update allows (the continuous bench's ``updates_per_s``), so this is
the ceiling of a job's learning speed on this machine, and where SAC's gap to TD3
comes from (``docs/benchmarks.md``).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from typing import Any

from experiments.bench.continuous import peers
from experiments.bench.tools.emit import emit

IMPLS = ("rlpar-sac", "rlpar-td3", "sb3-sac", "sb3-td3")
HALFCHEETAH = (17, 6)


def _batch(obs_dim: int, action_dim: int, size: int, seed: int) -> dict[str, Any]:
    import numpy as np

    rng = np.random.default_rng(seed)
    return {"obs": rng.standard_normal((size, obs_dim), dtype=np.float32),
            "action": rng.uniform(-1.0, 1.0, (size, action_dim)).astype(np.float32),
            "reward": rng.standard_normal(size, dtype=np.float32),
            "next_obs": rng.standard_normal((size, obs_dim), dtype=np.float32),
            "terminated": (rng.random(size) < 0.01).astype(np.float32),
            "discount": np.full(size, 0.99 ** 3, dtype=np.float32),  # an n-step batch's gamma**k
            "weights": rng.uniform(0.5, 1.0, size).astype(np.float32)}


def _ours(impl: str, obs_dim: int, action_dim: int, *, quick: bool, seed: int) -> tuple[Any, dict[str, Any]]:
    """Ours' algorithm as the Ape-X job builds it on a Box of these sizes, and its batch."""
    import numpy as np

    from algorithms.sac.builder import SAC_DEFAULTS
    from algorithms.td3.config import CONTINUOUS_DEFAULTS

    low, high = -np.ones(action_dim), np.ones(action_dim)
    defaults = SAC_DEFAULTS if impl == "rlpar-sac" else CONTINUOUS_DEFAULTS
    hidden, batch_size = ((32, 32), 64) if quick else (defaults["hidden"], defaults["batch_size"])
    if impl == "rlpar-sac":
        from algorithms.sac import SAC, SACConfig

        algorithm = SAC(obs_dim=obs_dim, action_low=low, action_high=high,
                        config=SACConfig(hidden=hidden, batch_size=batch_size, seed=seed))
    else:
        from algorithms.td3.td3 import TD3, TD3Config

        algorithm = TD3(obs_dim=obs_dim, action_low=low, action_high=high,
                        config=TD3Config(hidden=hidden, seed=seed))
    return algorithm, {"hidden": list(hidden), "batch_size": batch_size}


def _sizes_env(obs_dim: int, action_dim: int) -> Any:
    """An env of these sizes for SB3 to build its networks from; it is never stepped."""
    import gymnasium as gym
    import numpy as np

    class Sizes(gym.Env):
        observation_space = gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32)
        action_space = gym.spaces.Box(-1.0, 1.0, (action_dim,), np.float32)

        def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
            return np.zeros(obs_dim, np.float32), {}

        def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
            return np.zeros(obs_dim, np.float32), 0.0, False, False, {}

    return Sizes()


def _sb3(impl: str, obs_dim: int, action_dim: int, *, quick: bool, seed: int, fill: int) -> tuple[Any, dict]:
    """SB3's model with the bench's zoo settings, its replay filled with ``fill`` random transitions."""
    import numpy as np
    from stable_baselines3 import SAC, TD3
    from stable_baselines3.common.logger import configure

    kwargs = peers.settings(impl, "HalfCheetah-v5", quick=quick)
    kwargs.pop("noise_std", None)  # the actors' noise: no acting here
    kwargs["policy_kwargs"] = {"net_arch": kwargs.pop("net_arch")} if "net_arch" in kwargs else None
    model = (TD3 if impl == "sb3-td3" else SAC)("MlpPolicy", _sizes_env(obs_dim, action_dim), seed=seed,
                                                device="cpu", verbose=0, **kwargs)
    model.set_logger(configure(None, []))  # train() records its losses; learn() would set one up
    rng = np.random.default_rng(seed)
    for _ in range(fill):
        model.replay_buffer.add(rng.standard_normal((1, obs_dim)), rng.standard_normal((1, obs_dim)),
                                rng.uniform(-1, 1, (1, action_dim)), rng.standard_normal(1), np.zeros(1), [{}])
    net_arch = (kwargs["policy_kwargs"] or {}).get("net_arch", [256, 256])
    return model, {"hidden": list(net_arch), "batch_size": model.batch_size}


def measure(impl: str, *, obs_dim: int, action_dim: int, updates: int, warmup: int, threads: int,
            quick: bool = False, seed: int = 0) -> dict[str, Any]:
    import importlib.util

    import torch

    torch.set_num_threads(threads)
    record: dict[str, Any] = {"bench": "continuous_learner", "impl": impl, "obs_dim": obs_dim,
                              "action_dim": action_dim, "threads": threads, "updates": updates}
    if impl.startswith("sb3-"):
        if importlib.util.find_spec(peers.MODULE) is None:
            return record | {"skipped": f"{peers.MODULE} is not installed (the bench extra)"}
        model, sizes = _sb3(impl, obs_dim, action_dim, quick=quick, seed=seed, fill=max(1_000, 4 * 256))

        def step(n: int) -> None:
            model.train(gradient_steps=n, batch_size=model.batch_size)
    else:
        algorithm, sizes = _ours(impl, obs_dim, action_dim, quick=quick, seed=seed)
        batch = _batch(obs_dim, action_dim, sizes["batch_size"], seed)

        def step(n: int) -> None:
            for _ in range(n):
                algorithm.learn(batch)
    step(warmup)
    wall, cpu = time.perf_counter(), time.process_time()
    step(updates)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return record | sizes | {"update_ms": round(1e3 * wall / updates, 3), "cpu_ms": round(1e3 * cpu / updates, 3),
                             "updates_per_s": round(updates / wall, 1)}


@dataclasses.dataclass
class Args:
    impls: list[str]
    obs_dim: int
    action_dim: int
    updates: int
    warmup: int
    threads: int
    quick: bool
    out: str | None


def parse(argv: list[str] | None = None) -> Args:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--impls", default=",".join(IMPLS), help=f"comma-separated, from {list(IMPLS)}")
    p.add_argument("--obs-dim", type=int, default=HALFCHEETAH[0], help="observation size (HalfCheetah-v5's 17)")
    p.add_argument("--action-dim", type=int, default=HALFCHEETAH[1], help="action size (HalfCheetah-v5's 6)")
    p.add_argument("--updates", type=int, help="timed updates per implementation (default 300; --quick 5)")
    p.add_argument("--warmup", type=int, help="untimed updates first (default 30; --quick 2)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--quick", action="store_true", help="smoke test: 32x32 networks, batch 64, 5 updates")
    p.add_argument("--out", help="also append the lines to <out>/results.jsonl")
    ns = p.parse_args(argv)
    impls = [i for i in ns.impls.split(",") if i]
    unknown = sorted(set(impls) - set(IMPLS))
    if unknown or not impls:
        p.error(f"--impls: unknown {unknown or impls}; choose from {list(IMPLS)}")
    for name in ("obs_dim", "action_dim", "threads"):
        if getattr(ns, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(ns, name)}")
    updates = ns.updates if ns.updates is not None else (5 if ns.quick else 300)
    warmup = ns.warmup if ns.warmup is not None else (2 if ns.quick else 30)
    if updates < 1 or warmup < 0:
        p.error(f"--updates must be >= 1 and --warmup >= 0, got {updates} and {warmup}")
    return Args(impls=impls, obs_dim=ns.obs_dim, action_dim=ns.action_dim, updates=updates, warmup=warmup,
                threads=ns.threads, quick=ns.quick, out=ns.out)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    for impl in args.impls:
        emit(measure(impl, obs_dim=args.obs_dim, action_dim=args.action_dim, updates=args.updates,
                     warmup=args.warmup, threads=args.threads, quick=args.quick), results_dir=args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
