"""Run by the torchrun test: an unchanged World.from_env program whose rank 1 dies on
the first attempt, after the world is up and has worked (its keys are in the agent's
store); the restarted world must work, its learner group included."""

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
        total = world.create_collective_group(range(world.world_size)).all_reduce(
            torch.tensor([float(world.rank + 1)])).item()
        learned = learners.all_reduce(torch.tensor([10.0 * (world.rank + 1)])).item()
        result = {"name": world.name, "names": world.names, "restart": world.restart_count,
                  "doubled": doubled, "total": total, "learned": learned}
        if world.restart_count == 0:
            # The first attempt works as a program without restarts does (its result
            # says so), then crashes: no shutdown, nothing cleaned up.
            print("RESULT " + json.dumps(result), flush=True)
            group.barrier(timeout=20)  # both ranks have said it
            if world.rank == 1:
                os.kill(os.getpid(), signal.SIGKILL)
        group.barrier(timeout=20)
        return result


if __name__ == "__main__":
    print("RESULT " + json.dumps(entry()), flush=True)
