"""A tiny rlpar program run by the torchrun test: the same entry works under launch."""

from __future__ import annotations

import json

import torch

from rlpar.distributed import World


def double(x):
    return 2 * x


def entry():
    torch.set_num_threads(1)
    with World.from_env(rpc_timeout=30, process_group_backend="gloo") as world:
        group = world.create_rpc_group("demo", world.names)
        if world.rank == 1:
            group.register("double", double)
        group.barrier(timeout=30)
        doubled = group.call("double", world.rank + 20)
        total = world.create_collective_group(range(world.world_size)).all_reduce(
            torch.tensor([float(world.rank + 1)])).item()
        group.barrier(timeout=30)
        return {"name": world.name, "names": world.names, "doubled": doubled, "total": total}


if __name__ == "__main__":
    print("RESULT " + json.dumps(entry()), flush=True)
