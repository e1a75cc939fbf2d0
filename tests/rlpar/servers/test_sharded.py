"""Partitioning a model over gradient-server shards, and one shard's behaviour."""

import pytest
import torch
from torch import nn

from rlpar.servers import GradServer
from rlpar.servers.sharded import partition


class Parts(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Parameter(torch.zeros(4))
        self.b = nn.Parameter(torch.zeros(3))
        self.c = nn.Parameter(torch.zeros(2))
        self.frozen = nn.Parameter(torch.zeros(1), requires_grad=False)
        self.register_buffer("count", torch.tensor(5))


def test_partition_balances_sizes_and_covers_every_key_once():
    shards = partition(Parts(), 2)
    assert shards == [["a", "count", "frozen"], ["b", "c"]]
    assert partition(Parts(), 1) == [sorted(Parts().state_dict())]
    with pytest.raises(ValueError, match="num_shards"):
        partition(Parts(), 4)  # only 3 trainable parameters
    with pytest.raises(ValueError, match="num_shards"):
        partition(Parts(), 0)


def test_a_shard_optimizes_and_serves_only_its_keys():
    sgd = lambda params: torch.optim.SGD(params, lr=1.0)  # noqa: E731
    shard = GradServer(model=Parts(), optimizer_factory=sgd, shard_keys=["b", "c"])
    assert shard.push_gradients({"b": torch.ones(3)}, version=0)
    state, version = shard.pull()
    assert version == 1 and sorted(state) == ["b", "c"]
    assert torch.equal(state["b"], -torch.ones(3))
    with pytest.raises(ValueError, match="unowned"):
        shard.push_gradients({"a": torch.ones(4)}, version=1)
    with pytest.raises(ValueError, match="exactly its keys"):
        shard.push({"b": torch.zeros(3)})
    assert shard.push({"b": torch.zeros(3), "c": torch.ones(2)}) == 2
    assert torch.equal(shard.pull(newer_than=1)[0]["c"], torch.ones(2))
    with pytest.raises(ValueError, match="not in the model"):
        GradServer(model=Parts(), optimizer_factory=sgd, shard_keys=["zz"])
    with pytest.raises(ValueError, match="no trainable"):
        GradServer(model=Parts(), optimizer_factory=sgd, shard_keys=["count"])
