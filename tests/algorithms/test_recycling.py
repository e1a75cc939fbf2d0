"""ReDo: which layers can be recycled, that recycling keeps the network's function,
revives dead units and resets their optimizer state, and what it refuses."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from algorithms.nets import q_network
from algorithms.optim import EagerAdam
from algorithms.recycling import DormantRecycler, recyclable_layers

pytestmark = pytest.mark.timeout(60)


def _stepped(net: nn.Module, obs: torch.Tensor) -> EagerAdam:
    """An optimizer with non-zero moments for every parameter."""
    optimizer = EagerAdam(net.parameters(), lr=1e-3)
    net(obs).pow(2).sum().backward()
    optimizer.step()
    return optimizer


def test_minatar_q_network_layers_and_spans():
    layers, skipped = recyclable_layers(q_network((10, 10, 4), 6))
    assert skipped == {}
    conv, dense = layers
    # A conv channel owns its 8x8 block of the flattened dense input.
    assert (conv.incoming, conv.outgoing, conv.units) == ("0.1", (("0.4", 64),), 16)
    assert dense.units == 128
    assert sorted(dense.outgoing) == [("1.advantage", 1), ("1.value", 1)]


def test_recycling_keeps_the_output_revives_dead_units_and_resets_their_moments():
    torch.manual_seed(0)
    net = q_network((10, 10, 4), 6)
    obs = torch.rand(64, 10, 10, 4) < 0.2
    optimizer = _stepped(net, obs)
    conv, dense = net[0][1], net[0][4]
    with torch.no_grad():  # kill 3 channels and 40 dense units for every input
        conv.bias[:3] = -100.0
        dense.bias[:40] = -100.0
    recycler = DormantRecycler(net, tau=0.0)
    scores = recycler.scores(obs)
    dead_channels, dead_units = scores["0.2"] == 0, scores["0.5"] == 0
    assert dead_channels[:3].all() and dead_units[:40].all()
    live_columns = dead_channels.logical_not().repeat_interleave(64)  # a channel's 8x8 block
    untouched = dense.weight[~dead_units][:, live_columns].clone()
    before = net(obs)

    recycled = recycler.recycle(obs, optimizer=optimizer)

    assert recycled == int(dead_channels.sum() + dead_units.sum()) and recycler.recycled == recycled
    assert recycler.dormant_share == pytest.approx(recycled / (16 + 128))
    # Zero outgoing weights: Q values unchanged at the moment of recycling (same ops,
    # same inputs; only exact zeros were added).
    torch.testing.assert_close(net(obs), before, rtol=0, atol=1e-6)
    scores = recycler.scores(obs)
    assert (scores["0.2"][:3] > 0).all()
    assert (scores["0.5"][:40] > 0).sum() >= 20  # fresh incoming weights fire again
    assert (dense.bias[:40] > -1).all()
    # Live units keep their weights but for the recycled channels' columns, now zero.
    assert torch.equal(dense.weight[~dead_units][:, live_columns], untouched)
    assert (dense.weight[~dead_units][:, ~live_columns] == 0).all()
    assert (dense.weight[dead_units][:, ~live_columns] != 0).any()  # recycled rows redrawn in full
    value, advantage = net[1].value.weight, net[1].advantage.weight
    assert (value[:, :40] == 0).all() and (advantage[:, :40] == 0).all()
    assert (value[:, 40:] != 0).any()
    state = optimizer.state
    assert (state[dense.weight]["exp_avg"][:40] == 0).all() and (state[dense.weight]["exp_avg_sq"][:40] == 0).all()
    assert (state[dense.bias]["exp_avg"][:40] == 0).all()
    assert (state[advantage]["exp_avg_sq"][:, :40] == 0).all()
    assert (state[dense.weight]["exp_avg_sq"][40:] != 0).any()
    assert (state[conv.weight]["exp_avg"][:3] == 0).all()


def test_nothing_dormant_changes_nothing():
    torch.manual_seed(1)
    net = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 2))
    with torch.no_grad():
        net[0].bias.fill_(10.0)  # every unit on for every input
    weights = [p.clone() for p in net.parameters()]
    assert DormantRecycler(net, tau=0.1).recycle(torch.randn(32, 3)) == 0
    assert all(torch.equal(a, b) for a, b in zip(weights, net.parameters()))


def test_conv_into_conv_zeroes_the_input_channel():
    torch.manual_seed(2)
    net = nn.Sequential(nn.Conv2d(2, 4, 3), nn.ReLU(), nn.Conv2d(4, 5, 3), nn.Flatten(), nn.Linear(5 * 4 * 4, 1))
    (layer,), skipped = recyclable_layers(net)
    assert layer.outgoing == (("2", 1),) and skipped == {}
    with torch.no_grad():
        net[0].bias[1] = -100.0
    obs = torch.randn(8, 2, 8, 8)
    before = net(obs)
    assert DormantRecycler(net, tau=0.0).recycle(obs) == 1
    assert (net[2].weight[:, 1] == 0).all() and (net[2].weight[:, 0] != 0).any()
    torch.testing.assert_close(net(obs), before, rtol=0, atol=1e-6)


class _Residual(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp, self.act, self.out = nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4)
        self.head = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.inp(x))
        return self.head(self.out(h) + h)  # h also feeds the sum: zeroing `out` would not keep the function


def test_a_relu_that_also_feeds_other_ops_is_skipped_with_the_reason():
    layers, skipped = recyclable_layers(_Residual())
    assert [layer.activation for layer in layers] == ["head.1"]
    assert "act" in skipped and "ReDo cannot zero" in skipped["act"]


def test_a_relu_applied_twice_is_skipped():
    class Shared(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b, self.c, self.relu = nn.Linear(3, 4), nn.Linear(4, 4), nn.Linear(4, 1), nn.ReLU()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.c(self.relu(self.b(self.relu(self.a(x)))))

    with pytest.raises(ValueError, match="relu: the ReLU module is applied in more than one place"):
        DormantRecycler(Shared())


def test_refusals_name_the_problem():
    with pytest.raises(ValueError, match="no layer of Sequential can be recycled .*no nn.ReLU"):
        DormantRecycler(nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1)))
    with pytest.raises(ValueError, match="nothing consumes its output|ReDo cannot zero"):
        DormantRecycler(nn.Sequential(nn.Linear(3, 4), nn.ReLU()))

    class Branchy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.body(x) if x.sum() > 0 else -self.body(x)  # data-dependent: fx cannot trace

    with pytest.raises(ValueError, match="torch.fx can trace.*Branchy"):
        DormantRecycler(Branchy())
    with pytest.raises(ValueError, match=r"tau must be in \[0, 1\)"):
        DormantRecycler(nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1)), tau=1.0)
    with pytest.raises(TypeError, match="network must be an nn.Module"):
        recyclable_layers(lambda x: x)  # type: ignore[arg-type]


def test_a_linear_over_a_sequence_scores_its_last_axis_and_refuses_a_flattened_consumer():
    torch.manual_seed(3)
    # (batch, time, features): a Linear's units are the last axis, not axis 1.
    net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    with torch.no_grad():
        net[0].bias[2] = -100.0
    recycler = DormantRecycler(net, tau=0.0)
    assert recycler.scores(torch.randn(5, 7, 3))["1"].shape == (4,)
    assert recycler.recycle(torch.randn(5, 7, 3)) == 1 and (net[2].weight[:, 2] == 0).all()
    # Flattening (time, features) interleaves the units: no block per unit to zero.
    flat = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Flatten(), nn.Linear(7 * 4, 1))
    with pytest.raises(ValueError, match="do not split into one block per unit of its 4"):
        DormantRecycler(flat)
