"""The cases of :mod:`experiments.bench.gpu.check`.

Each ``case(cpu)`` runs one CUDA path (``cpu=True``: its CPU fallback, for CI) and
returns a dict of details, raises :class:`Unavailable` for a path this checkout does
not have yet, or raises on failure. Ranks are launched with a timeout of their own, so
a hung collective ends as an error, not as a hung check.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

from experiments.bench.tools.job_runs import has_flag, has_module, run_job

LAUNCH_S = 90.0  # one launch of ranks (NCCL's first communicator takes seconds)
RPC_S = 30.0


class Unavailable(Exception):
    """The path is not in this checkout (another branch is building it)."""


# ------------------------------------------------------------------ learner group


def _group_rank(cpu: bool, steps: int) -> dict[str, Any]:
    import torch
    from torch import nn

    from rlpar.distributed import World

    torch.set_num_threads(1)
    with World.from_env(rpc_timeout=RPC_S) as world:
        group = world.create_learner_group("check", list(range(world.world_size)),
                                           backend="gloo" if cpu else "nccl")
        torch.manual_seed(world.rank)  # different starts: the broadcast must align them
        net = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 6)).to(group.device)
        group.broadcast_parameters(net, src=0)
        times = []
        for _ in range(steps):
            net.zero_grad()
            x = torch.randn(32, 64, device=group.device) * (world.rank + 1)  # each its own data
            net(x).pow(2).mean().backward()
            start = time.perf_counter()
            group.average_gradients(net)
            if not cpu:
                torch.cuda.synchronize(group.device)
            times.append(time.perf_counter() - start)
        flat = torch.cat([p.grad.flatten() for p in net.parameters()] + [p.detach().flatten()
                                                                           for p in net.parameters()])
        same = all(torch.equal(flat, other) for other in group.all_gather(flat))
        out = {"backend": group.backend, "device": str(group.device), "identical": same,
               "average_ms_p50": round(1000 * statistics.median(times[1:] or times), 3)}
        group.destroy()
        return out


def nccl_learner_group(cpu: bool) -> dict[str, Any]:
    """A learner group (NCCL; gloo on CPU) broadcasts parameters and averages gradients,
    which come out identical on every member. NCCL puts one member per GPU: with one
    GPU the group has one member (the backend and its collectives still run)."""
    import torch

    from rlpar.distributed import launch

    members = 2 if cpu else min(2, torch.cuda.device_count())
    results = launch(_group_rank, nprocs=members, args=(cpu, 5 if cpu else 50), timeout=LAUNCH_S)
    if not all(r["identical"] for r in results):
        raise AssertionError(f"members' gradients or parameters differ: {results}")
    if results[0]["backend"] != ("gloo" if cpu else "nccl"):
        raise AssertionError(f"the group ran on {results[0]['backend']}")
    return {"members": members, **results[0]}


# ------------------------------------------------------------------ RPC with device maps


def _rpc_rank(cpu: bool, floats: int, pulls: int) -> dict[str, Any]:
    import torch

    from rlpar.distributed import World
    from rlpar.distributed.device_maps import peer_device_maps
    from rlpar.servers import PushPullModelServer

    torch.set_num_threads(1)
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = "cpu" if cpu else "cuda:0"  # both ranks on one GPU: the machine may have one
    maps = None if cpu else peer_device_maps(range(size), rank, lambda r: device)
    with World.from_env(rpc_timeout=RPC_S, device_maps=maps) as world:
        group = world.create_rpc_group("check", world.names)
        keep = not cpu  # CUDA tensors travel as they are (only with device maps)
        if rank == 0:
            params = PushPullModelServer.host(group, "params", keep_device=keep)
            params.push({"w": torch.arange(floats, dtype=torch.float32, device=device)})
            group.barrier()
            group.barrier()  # rank 1 has pulled
            return {}
        group.barrier()
        params = PushPullModelServer.connect(group, "params", keep_device=keep)
        times = []
        for _ in range(pulls):
            start = time.perf_counter()
            state, _ = params.pull()
            if not cpu:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        w = state["w"]
        group.barrier()
        return {"arrived_on": str(w.device), "exact": bool(float(w.double().sum()) == floats * (floats - 1) / 2),
                "pull_ms_p50": round(1000 * statistics.median(times[1:]), 2),
                "mb_per_s": round(4 * floats / 1e6 / statistics.median(times[1:]), 1)}


def rpc_device_maps(cpu: bool) -> dict[str, Any]:
    """CUDA tensors over RPC: a model server holding CUDA parameters serves them to
    another rank with TensorPipe device maps (``keep_device=True``), arriving on its
    GPU; on CPU the same pull of CPU tensors, without maps."""
    from rlpar.distributed import launch

    floats = 250_000 if cpu else 10_000_000
    _, out = launch(_rpc_rank, nprocs=2, args=(cpu, floats, 3 if cpu else 10), timeout=LAUNCH_S)
    if out["arrived_on"] != ("cpu" if cpu else "cuda:0") or not out["exact"]:
        raise AssertionError(f"the pulled parameters are wrong: {out}")
    return {"megabytes": round(4 * floats / 1e6, 1), **out}


# ------------------------------------------------------------------ jobs


def _updated(summary: dict[str, Any]) -> dict[str, Any]:
    if not summary.get("updates"):
        raise AssertionError(f"the learner made no update: {summary}")
    return summary


_SMALL_APEX = ["--num-envs", "2", "--learning-starts", "200", "--batch-size", "32", "--hidden", "32",
               "--eval-every", "100000"]
_SMALL_IMPALA = ["--num-envs", "2", "--unroll-length", "5", "--batch-size", "2", "--hidden", "32",
                 "--eval-every", "100000"]


def _where(cpu: bool, steps: int) -> list[str]:
    """On CPU (CI) one process; on a GPU the local world, the learner on cuda."""
    if cpu:
        return ["--device", "cpu", "--serial", "--max-env-steps", str(min(steps, 400))]
    return ["--device", "cuda", "--num-actors", "1", "--max-env-steps", str(steps), "--max-seconds", "30"]


def apex_gpu_learner(cpu: bool) -> dict[str, Any]:
    """Ape-X DQN with its learner on the GPU (actors on CPU), in a local world."""
    return _updated(run_job("experiments.apex", [*_SMALL_APEX, *_where(cpu, 2000)]))


def td3_gpu_learner(cpu: bool) -> dict[str, Any]:
    """Ape-X for continuous actions (TD3 on Pendulum-v1) with its learner on the GPU."""
    argv = ["--env-id", "Pendulum-v1", "--learning-starts", "200", "--batch-size", "32", "--hidden", "32",
            "--eval-every", "100000"]
    return _updated(run_job("experiments.apex", [*argv, *_where(cpu, 2000)]))


def impala_gpu_learner(cpu: bool) -> dict[str, Any]:
    """IMPALA with its learner on the GPU, in a local world."""
    return _updated(run_job("experiments.impala", [*_SMALL_IMPALA, *_where(cpu, 2000)]))


def a3c_gpu_workers(cpu: bool) -> dict[str, Any]:
    """A3C with its learner's gradient server on the GPU (its optimizer steps there),
    two actor ranks computing gradients on CPU and pushing them to it."""
    where = (["--device", "cpu", "--serial", "--max-env-steps", "400"] if cpu
             else ["--device", "cuda", "--num-workers", "2", "--max-env-steps", "4000", "--max-seconds", "30"])
    return _updated(run_job("experiments.a3c", ["--num-envs", "2", "--hidden", "32", "--eval-every", "100000",
                                                *where]))


def maddpg_gpu(cpu: bool) -> dict[str, Any]:
    """MADDPG (a learner and one actor, its env copies stepped in subprocesses) learning on the GPU.
    On CPU (CI) the roles in one process (as :func:`_where`), the env workers still subprocesses:
    a local world's start cost most of the CPU check; the job's own tests run its world."""
    argv = ["--env-id", "cooperative", "--num-envs", "4", "--batch-size", "32", "--hidden", "32",
            "--learning-starts", "100", "--eval-every", "100000", "--device", "cpu" if cpu else "cuda",
            "--max-env-steps", "400" if cpu else "4000", "--max-seconds", "30", *(["--serial"] if cpu else [])]
    return _updated(run_job("experiments.maddpg", argv))


def ppo_gpu_learner(cpu: bool) -> dict[str, Any]:
    """PPO (experiments.ppo, once merged) with its learner on the GPU."""
    if not has_module("experiments.ppo"):
        raise Unavailable("not available: experiments.ppo is not in this checkout")
    argv = ["--device", "cpu" if cpu else "cuda", "--max-env-steps", "1000" if cpu else "4000",
            "--eval-every", "100000", "--max-seconds", "30"]
    if has_flag("experiments.ppo", "PPOJobConfig", "--num-workers"):
        argv += ["--num-workers", "1"]
    return _updated(run_job("experiments.ppo", argv))


def pqn_gpu_learner(cpu: bool) -> dict[str, Any]:
    """PQN with its rollouts' updates on the GPU (envs stepped on CPU)."""
    argv = ["--device", "cpu" if cpu else "cuda", "--num-envs", "8", "--max-env-steps",
            "1000" if cpu else "8000", "--eval-every", "100000", "--max-seconds", "30"]
    return _updated(run_job("experiments.pqn", argv))


def learners_2_one_gpu(cpu: bool) -> dict[str, Any]:
    """Ape-X with ``--learners 2`` (once merged), both learners on the one GPU."""
    if not has_flag("experiments.apex", "ApexJobConfig", "--learners"):
        raise Unavailable("not available: experiments.apex has no --learners in this checkout")
    # CPU: 1,200 env steps, not 400: the two learners' processes start after the actors',
    # and on a loaded 2-core machine the actors ran 434 steps before either updated.
    where = (["--device", "cpu", "--num-actors", "2", "--max-env-steps", "1200"] if cpu
             else ["--device", "cuda", "--num-actors", "2", "--max-env-steps", "2000", "--max-seconds", "30"])
    return _updated(run_job("experiments.apex", [*_SMALL_APEX, "--learners", "2", *where]))


CASES = {
    "nccl_learner_group": nccl_learner_group,
    "rpc_device_maps": rpc_device_maps,
    "apex_gpu_learner": apex_gpu_learner,
    "td3_gpu_learner": td3_gpu_learner,
    "impala_gpu_learner": impala_gpu_learner,
    "a3c_gpu_workers": a3c_gpu_workers,
    "maddpg_gpu": maddpg_gpu,
    "ppo_gpu_learner": ppo_gpu_learner,
    "pqn_gpu_learner": pqn_gpu_learner,
    "learners_2_one_gpu": learners_2_one_gpu,
}
# Seconds each case may take on a GPU machine (in its own process): 8 minutes in all.
# On one H200 each of the first seven took 5.5-15.5 s (experiments/tuning.md, "The GPU check's runs"); the jobs
# stop by their env steps well before their own --max-seconds 30.
TIMEOUTS = {name: 45 for name in CASES} | {"nccl_learner_group": 60}
