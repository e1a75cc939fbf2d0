"""Synchronous data-parallel learning on this machine:
``python -m experiments.bench.scale.data_parallel [--quick] [--cases allreduce,ppo_ranks,straggler]``.

* ``allreduce``: what averaging gradients costs per update, over gloo between 2 local
  ranks, for the networks data-parallel jobs train: the MinAtar Q net (dueling), the
  MinAtar actor-critic and the Nature CNN Q net. Three ways: rlpar's
  ``LearnerGroup.average_gradients`` (a learner group of its own: a few flat bucketed
  all-reduces, then a divide), one raw all-reduce of a flat tensor as large as all the
  gradients on the same gloo group (the floor: no flattening, no copy back), and torch
  DDP on the world's default process group, whose all-reduce overlaps the backward
  pass (its cost: a step minus a ``no_sync`` step, batch 8; the difference of two noisy
  timings, so rough; not with ``--quick``). ms p50/p90 per update and
  effective GB/s (gradient bytes / p50 time: for 2 ranks the algorithm and bus
  bandwidths are equal).
* ``ppo_ranks``: PPO (``experiments.ppo``) updates/s and env steps/s with 1 and 2 ranks.
* ``straggler``: a simulated 8-rank PPO (4 with ``--quick``) on a sleeping env
  (:mod:`experiments.bench.tools.straggler_env`: steps cost time, not CPU) in which one rank
  is 3x slower: env steps/s with no straggler, with one and no preemption, and with one
  and DD-PPO's preemption (``--preempt-fraction 0.6``); the claim to check (Wijmans et
  al. 2020) is that with preemption the straggler costs under 10%.

The PPO cases run ``experiments.ppo`` when this checkout has it (and its flags), and
print ``"ok": null`` with the reason otherwise. One JSON line per result; the last
line holds the load averages (a shared machine: compare figures of one run).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

from experiments.bench.tools.emit import emit
from experiments.bench.tools.job_runs import has_flag, has_module

NETS = ("minatar_q", "minatar_actor_critic", "nature_cnn")


def make_net(name: str):
    """One of ``NETS`` (MinAtar: 10x10x4 observations, 6 actions; Atari: 4x84x84, 18)."""
    from algorithms.nets import q_network

    if name == "minatar_q":
        return q_network((10, 10, 4), 6)
    if name == "minatar_actor_critic":
        from gymnasium import spaces

        from algorithms.a2c import A2CConfig
        from algorithms.actor_critic import default_actor_critic

        space = spaces.Box(0, 1, (10, 10, 4), dtype=bool)
        return default_actor_critic(space, policy_dim=6, config=A2CConfig(), log_std=None)
    if name == "nature_cnn":
        return q_network((4, 84, 84), 18)
    raise ValueError(f"unknown net {name!r}; nets: {NETS}")


def sample_input(name: str, batch: int):
    import torch

    if name == "nature_cnn":
        return torch.randint(0, 256, (batch, 4, 84, 84), dtype=torch.uint8)
    return torch.rand(batch, 10, 10, 4) < 0.1


def _scalar_loss(out) -> Any:
    return sum(o.float().sum() for o in out) if isinstance(out, tuple) else out.float().sum()


def _timed(fn, iters: int, warmup: int = 2) -> list[float]:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def _stats(times: list[float], nbytes: int) -> dict[str, float]:
    p50 = statistics.median(times)
    p90 = sorted(times)[min(len(times) - 1, int(0.9 * len(times)))]
    return {"ms_p50": round(1000 * p50, 3), "ms_p90": round(1000 * p90, 3),
            "gb_per_s": round(nbytes / p50 / 1e9, 3), "iters": len(times)}


def _allreduce_rank(nets: tuple[str, ...], iters: int, ddp_iters: int) -> list[dict[str, Any]]:
    """Runs in each launched rank; rank 0's timings are reported."""
    import torch

    from rlpar.distributed import World

    torch.set_num_threads(1)  # one core per rank, as a job's learners run
    out = []
    # DDP needs the default process group (the whole world's); rlpar's learner group
    # is a gloo group of its own, built by its members alone.
    with World.from_env(rpc_timeout=120.0, process_group_backend="gloo" if ddp_iters else None) as world:
        group = world.create_learner_group("bench", list(range(world.world_size)), backend="gloo")
        for name in nets:
            torch.manual_seed(0)
            net = make_net(name)
            params = [p for p in net.parameters() if p.requires_grad]
            for p in params:
                p.grad = torch.randn_like(p)
            count = sum(p.numel() for p in params)
            nbytes = 4 * count
            n = max(3, iters // 8) if name == "nature_cnn" else iters  # 6.8 MB each: fewer
            flat = torch.randn(count)
            # The floor: one all-reduce of as many floats on the same gloo group, with
            # no flattening into it and no copying back.
            lines = {"rlpar_average_gradients": _timed(lambda net=net: group.average_gradients(net), n),
                     "raw_all_reduce": _timed(lambda flat=flat: group.all_reduce(flat), n)}
            row = {"net": name, "params": count, "mb": round(nbytes / 1e6, 3)}
            out += [{**row, "impl": impl, **_stats(t, nbytes)} for impl, t in lines.items()]
            if ddp_iters:
                out.append({**row, **_ddp_overhead(name, net, ddp_iters)})
        group.destroy()
    return out


def _ddp_overhead(name: str, net, iters: int) -> dict[str, Any]:
    import copy

    from torch.nn.parallel import DistributedDataParallel

    ddp = DistributedDataParallel(copy.deepcopy(net))
    x = sample_input(name, 8)

    def step():
        ddp.zero_grad(set_to_none=True)
        _scalar_loss(ddp(x)).backward()

    def local_step():
        with ddp.no_sync():
            step()

    synced, local = _timed(step, iters), _timed(local_step, iters)
    s, loc = statistics.median(synced), statistics.median(local)
    return {"impl": "ddp", "ms_p50": round(1000 * (s - loc), 3), "step_ms_p50": round(1000 * s, 3),
            "no_sync_step_ms_p50": round(1000 * loc, 3), "iters": iters}


def allreduce(quick: bool) -> list[dict[str, Any]]:
    from rlpar.distributed import launch

    iters, ddp_iters = (10, 0) if quick else (200, 20)  # --quick: no DDP (its start takes seconds)
    results = launch(_allreduce_rank, nprocs=2, args=(NETS, iters, ddp_iters), timeout=600)
    return [{"case": "allreduce", "ranks": 2, "backend": "gloo", **line} for line in results[0]]


# ------------------------------------------------------------------ PPO (experiments.ppo)

PPO = "experiments.ppo"


def ppo_missing(*flags: str) -> str | None:
    """Why the PPO cases cannot run in this checkout, or None."""
    if not has_module(PPO):
        return f"not available: {PPO} is not in this checkout"
    missing = [f for f in flags if not has_flag(PPO, "PPOJobConfig", f)]
    return f"not available: {PPO} has no {', '.join(missing)}" if missing else None


def _ppo(argv: list[str], *, iterations: int, steps_per_iteration: int, seconds: float) -> dict[str, Any]:
    """``experiments.ppo`` on CPU for about ``iterations`` updates: a budget of env steps,
    not of seconds, so a slow start (a world of 8 ranks on 2 cores) leaves the figures
    their iterations; the summary's rates count from the first report on."""
    from experiments.bench.tools.job_runs import run_job

    return run_job(PPO, [*argv, "--device", "cpu", "--max-seconds", str(seconds), "--max-env-steps",
                         str(iterations * steps_per_iteration), "--eval-every", "1000000000",
                         "--target-return", "1e9"])


def ppo_ranks(quick: bool) -> list[dict[str, Any]]:
    """PPO on its default env (CartPole) with 1 and 2 ranks (members)."""
    reason = ppo_missing("--num-workers")
    if reason:
        return [{"case": "ppo_updates", "ok": None, "reason": reason}]
    lines = []
    for ranks in (1, 2):  # PPO's defaults: 8 envs x 128 steps per member and update
        summary = _ppo(["--num-workers", str(ranks), "--num-envs", "8", "--n-steps", "128"],
                       iterations=4 if quick else 40, steps_per_iteration=ranks * 8 * 128,
                       seconds=120.0 if quick else 600.0)
        lines.append({"case": "ppo_updates", "ranks": ranks, "updates_per_s": summary["updates_per_s"],
                      "env_steps_per_s": summary["env_steps_per_s"], "updates": summary["updates"],
                      "wall_s": summary["wall_s"]})
    return lines


STRAGGLER_ENV = "experiments.bench.tools.straggler_env:StragglerSleep-v0"


def straggler(quick: bool) -> list[dict[str, Any]]:
    """N ranks stepping sleeping envs: no straggler, then rank N-1 3x slower without
    and with DD-PPO's preemption."""
    reason = ppo_missing("--num-workers", "--preempt-fraction", "--n-steps")
    if reason:
        return [{"case": "straggler", "ok": None, "reason": reason}]
    ranks, iterations = (4, 4) if quick else (8, 40)
    runs = [("none", 0.0), ("rank", 0.0), ("rank", 0.6)]
    lines, saved = [], {k: os.environ.get(k) for k in ("RLPAR_BENCH_SLOW_RANK", "RLPAR_BENCH_SLOW_FACTOR")}
    try:
        for slow, fraction in runs:
            os.environ["RLPAR_BENCH_SLOW_FACTOR"] = "3"
            os.environ["RLPAR_BENCH_SLOW_RANK"] = str(ranks - 1) if slow == "rank" else ""
            summary = _ppo(["--env-id", STRAGGLER_ENV, "--num-workers", str(ranks), "--num-envs", "4",
                            "--n-steps", "32", "--preempt-fraction", str(fraction)],
                           iterations=iterations, steps_per_iteration=ranks * 4 * 32, seconds=600.0)
            lines.append({"case": "straggler", "ranks": ranks, "straggler": slow == "rank",
                          "preempt_fraction": fraction, "env_steps_per_s": summary["env_steps_per_s"],
                          "updates_per_s": summary["updates_per_s"], "wall_s": summary["wall_s"]})
    finally:
        for key, value in saved.items():
            os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)
    base = lines[0]["env_steps_per_s"]
    cost = {f"cost_preempt_{line['preempt_fraction']}": round(1 - line["env_steps_per_s"] / base, 3)
            for line in lines[1:]} if base else {}
    return lines + [{"case": "straggler_cost", "ranks": ranks, **cost}]


CASES = {"allreduce": allreduce, "ppo_ranks": ppo_ranks, "straggler": straggler}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run of every case (seconds)")
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated: " + ", ".join(CASES))
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.cases.split(",") if n.strip()]
    unknown = [n for n in names if n not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {unknown}")
    load = os.getloadavg()
    for name in names:
        for line in CASES[name](args.quick):
            emit({"bench": "data_parallel", **line})
    emit({"bench": "data_parallel", "loadavg_start": [round(x, 2) for x in load],
          "loadavg_end": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count()})


if __name__ == "__main__":
    main()
