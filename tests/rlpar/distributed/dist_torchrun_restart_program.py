"""Run by the torchrun restart test: rank 1 dies on the first attempt, after the
world is up (its keys are in the agent's store); the restarted world must work, its
learner group included."""

from __future__ import annotations

import json
import os
import signal

import torch

from rlpar.distributed import World


def double(x):
    return 2 * x


def entry():
    torch.set_num_threads(1)
    with World.from_env(rpc_timeout=20, process_group_backend="gloo") as world:
        group = world.create_rpc_group("demo", world.names)
        if world.rank == 1:
            group.register("double", double)
        group.barrier(timeout=20)
        doubled = group.call("double", world.rank + 20)
        # Built in both attempts under the same name: the first attempt's gloo
        # addresses stay in the agent's store, and the second must not meet them.
        learners = world.create_learner_group("learners", range(world.world_size))
        if world.restart_count == 0 and world.rank == 1:
            os.kill(os.getpid(), signal.SIGKILL)  # a crash: no shutdown, nothing cleaned up
        total = world.create_collective_group(range(world.world_size)).all_reduce(
            torch.tensor([float(world.rank + 1)])).item()
        learned = learners.all_reduce(torch.tensor([10.0 * (world.rank + 1)])).item()
        group.barrier(timeout=20)
        return {"name": world.name, "restart": world.restart_count, "doubled": doubled,
                "total": total, "learned": learned}


if __name__ == "__main__":
    print("RESULT " + json.dumps(entry()), flush=True)
