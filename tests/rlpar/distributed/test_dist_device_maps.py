"""Device maps (CUDA tensors over RPC), the plumbing checked without a GPU: the maps
a World is given reach TensorPipe's options (TensorPipe itself rejects one naming a
rank that is not in the world). experiments.bench.gpu.check runs them on a GPU."""

import secrets

import pytest
import torch

from rlpar.distributed import World, current_world
from rlpar.distributed.device_maps import peer_device_maps
from rlpar.distributed.ports import free_port


def test_peer_device_maps_map_this_ranks_device_to_each_peers():
    assert peer_device_maps(range(3), 1, lambda r: f"cuda:{r}") == {
        "rank0": {"cuda:1": "cuda:0"}, "rank2": {"cuda:1": "cuda:2"}}
    # Two ranks sharing one GPU; devices as ints or torch.device.
    assert peer_device_maps([0, 1], 0, lambda r: 0) == {"rank1": {"cuda:0": "cuda:0"}}
    assert peer_device_maps([0, 1], 1, lambda r: torch.device("cuda", 0),
                            name_of="learner{}".format) == {"learner0": {"cuda:0": "cuda:0"}}
    for bad in ("cpu", -1, "cuda", True):
        with pytest.raises((ValueError, TypeError)):
            peer_device_maps([0, 1], 0, lambda r, bad=bad: bad)


@pytest.mark.timeout(60)
def test_a_worlds_device_maps_reach_tensorpipe(monkeypatch):
    monkeypatch.setenv("RLPAR_RUN_SECRET", secrets.token_hex(16))
    maps = peer_device_maps([0, 7], 0, lambda r: "cuda:0")  # rank 7 is not in this world
    with pytest.raises(ValueError, match="invalid target node names in its device maps"):
        World(rank=0, world_size=1, master_port=free_port(), rpc_timeout=20.0, device_maps=maps)
    with pytest.raises(RuntimeError, match="no rlpar World"):
        current_world()  # nothing left half-started: a next World starts
    with World(rank=0, world_size=1, master_port=free_port(), rpc_timeout=20.0) as world:
        assert world.world_size == 1
