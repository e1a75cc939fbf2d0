"""Averaging gradients in a synchronous data-parallel job: DistributedDataParallel
against the flat bucketed all-reduce the program uses (``LearnerGroup.average``),
on gloo, for PPO's networks.

Two local ranks (``--ranks``), each a PPO model (:class:`algorithms.ppo.PPO`'s default
network: MinAtar's conv torso for ``minatar``, 10x10x4 observations and 6 actions,
133K parameters; the 64-64 tanh MLPs for ``cartpole``, 9K) doing minibatch steps of
``--batch`` samples (PPO's default rollout of 8 envs x 128 steps in 4 minibatches:
256) with a PPO-sized loss (policy log-likelihood, value error, entropy), then an Adam
step. Modes, interleaved round by round so machine noise hits them alike:

* ``alone``: no communication (each rank on its own: the floor);
* ``flat``: backward, then :meth:`LearnerGroup.average` of every gradient (one
  all-reduce per 25 MB bucket: one call for these networks), then the step;
* ``per_tensor``: one all-reduce per gradient tensor (what bucketing saves);
* ``ddp``: the model wrapped in ``torch.nn.parallel.DistributedDataParallel`` on the
  world's default gloo group (its 25 MB buckets reduced during backward).

Prints one JSON line per (net, mode) with the median, 10th percentile and minimum of the ms per
minibatch step over ``--rounds`` rounds of ``--steps`` steps (each step timed alone:
on a shared machine the low percentile is the cost without other processes in the
way), and their excess over ``alone``; the last line holds the load averages.

    python -m experiments.bench.scale.sync_allreduce [--nets minatar,cartpole] [--quick]

Recorded: see docs/benchmarks.md, "Learner groups and data-parallel jobs".
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

from experiments.bench.tools.emit import emit

MODES = ("alone", "flat", "per_tensor", "ddp")


def _model(net: str):
    import gymnasium as gym
    import numpy as np

    from algorithms.ppo import PPO

    obs = gym.spaces.Box(0, 1, (10, 10, 4), np.float32) if net == "minatar" else gym.spaces.Box(-1, 1, (4,))
    acts = gym.spaces.Discrete(6 if net == "minatar" else 2)
    return PPO(observation_space=obs, action_space=acts, device="cpu", seed=0).model, obs.shape, acts.n


def _rank(args: dict[str, Any]) -> list[dict[str, Any]]:
    import torch

    from rlpar.distributed import World

    torch.set_num_threads(1)
    world = World.from_env(process_group_backend="gloo")  # DDP needs the default process group
    group = world.create_learner_group("bench", range(world.world_size), backend="gloo")
    out = []
    for net in args["nets"]:
        times, params = _measure(net, group, seed=world.rank, plan=args)
        if world.rank == 0:
            floor = _stats(times["alone"])
            for mode in MODES:
                ms = _stats(times[mode])
                out.append({"bench": "sync_allreduce", "net": net, "mode": mode, "ranks": world.world_size,
                            "params": params, "batch": args["batch"], "steps": len(times[mode]),
                            **{k: round(v, 3) for k, v in ms.items()},
                            **{f"excess_{k}": round(ms[k] - floor[k], 3) for k in ms}})
    group.barrier()
    world.shutdown()
    return out


def _measure(net: str, group: Any, *, seed: int, plan: dict[str, Any]) -> tuple[dict[str, list[float]], int]:
    """Per mode, the ms of every timed minibatch step of ``net``; and its parameter count."""
    import torch
    from torch.nn.parallel import DistributedDataParallel

    from algorithms.optim import EagerAdam

    model, shape, n_actions = _model(net)
    ddp = DistributedDataParallel(model)
    optimizer = EagerAdam(model.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(seed)
    obs = torch.rand(plan["batch"], *shape, generator=gen)
    actions = torch.randint(n_actions, (plan["batch"],), generator=gen)
    params = [p for p in model.parameters() if p.requires_grad]

    def step(mode: str) -> None:
        optimizer.zero_grad(set_to_none=True)
        logits, value = (ddp if mode == "ddp" else model)(obs)
        dist = torch.distributions.Categorical(logits=logits)
        loss = -dist.log_prob(actions).mean() + 0.5 * value.pow(2).mean() - 0.01 * dist.entropy().mean()
        loss.backward()  # DDP's hooks reduce its buckets during backward
        if mode == "flat":
            group.average([p.grad for p in params])
        elif mode == "per_tensor":
            for p in params:
                group.all_reduce(p.grad)
                p.grad.div_(group.size)
        optimizer.step()

    times: dict[str, list[float]] = {m: [] for m in MODES}
    for mode in MODES:  # warm-up
        for _ in range(3):
            step(mode)
    for _ in range(plan["rounds"]):
        for mode in MODES:
            group.barrier()
            for _ in range(plan["steps"]):
                t0 = time.perf_counter()
                step(mode)
                times[mode].append(1e3 * (time.perf_counter() - t0))
    return times, sum(p.numel() for p in params)


def _stats(ms: list[float]) -> dict[str, float]:
    ordered = sorted(ms)
    return {"median_ms": statistics.median(ordered), "p10_ms": ordered[len(ordered) // 10], "min_ms": ordered[0]}


def main(argv: list[str] | None = None) -> None:
    from rlpar.distributed import launch

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nets", default="minatar,cartpole")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="a smoke run (few steps)")
    args = parser.parse_args(argv)
    plan = {"nets": args.nets.split(","), "batch": args.batch, "steps": args.steps, "rounds": args.rounds}
    if args.quick:
        plan.update(nets=["cartpole"], steps=3, rounds=1, batch=32)
    before = os.getloadavg()
    results = launch(_rank, nprocs=args.ranks, args=(plan,), timeout=600)
    for line in results[0]:
        emit(line)
    emit({"bench": "sync_allreduce", "loadavg_before": before, "loadavg_after": os.getloadavg()})


if __name__ == "__main__":
    main()
