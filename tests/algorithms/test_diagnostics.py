"""algorithms.diagnostics.DeadUnits: which ReLU units never fire while watched."""

import pytest
import torch
from torch import nn

from algorithms.diagnostics import DeadUnits


def test_a_conv_channel_is_live_if_any_position_of_any_state_is():
    net = nn.Sequential(nn.Conv2d(1, 2, 1), nn.ReLU())
    with torch.no_grad():
        net[0].weight.fill_(1.0)
        net[0].bias.copy_(torch.tensor([0.0, -10.0]))
    states = torch.zeros(3, 1, 2, 2)
    states[0, 0, 1, 1] = 1.0  # one position of one state switches channel 0 on
    with DeadUnits(net) as dead:
        net(states)
    assert dead.fractions() == {"1": 0.5}


def test_units_live_in_any_forward_count_as_live_and_a_killed_layer_reads_all_dead():
    net = nn.Sequential(nn.Linear(1, 4), nn.ReLU(), nn.Linear(4, 3), nn.ReLU())
    with torch.no_grad():
        net[0].weight.copy_(torch.tensor([[1.0], [-1.0], [0.0], [0.0]]))
        net[0].bias.copy_(torch.tensor([0.0, 0.0, 1.0, -1.0]))
        net[2].bias.fill_(-1e6)  # no input switches the second layer on
    with DeadUnits(net) as dead:
        net(torch.tensor([[1.0]]))  # units 0 and 2 fire
        net(torch.tensor([-1.0]))  # unbatched: units 1 and 2 fire
    assert dead.fractions() == {"1": 0.25, "3": 1.0}


def test_forwards_outside_the_block_are_not_counted_and_hooks_are_removed():
    net = nn.Sequential(nn.Linear(2, 8), nn.ReLU())
    watcher = DeadUnits(net)
    with watcher:
        pass
    net(torch.randn(16, 2))
    assert watcher.fractions() == {}  # a ReLU that never ran while watched is left out
    assert not net[1]._forward_hooks
    with pytest.raises(RuntimeError, match="already watching"), watcher, watcher:
        pass
    assert not net[1]._forward_hooks


def test_a_relu_shared_by_layers_of_two_widths_gets_an_entry_per_width():
    class Shared(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b, self.act = nn.Linear(2, 4), nn.Linear(4, 3), nn.ReLU()

        def forward(self, x):
            return self.act(self.b(self.act(self.a(x))))

    net = Shared()
    with DeadUnits(net) as dead:
        net(torch.randn(32, 2))
    assert set(dead.fractions()) == {"act[4]", "act[3]"}


def test_a_network_without_relu_modules_has_nothing_to_watch_and_bad_input_is_named():
    net = nn.Sequential(nn.Linear(2, 2), nn.Tanh())
    with DeadUnits(net) as dead:
        net(torch.zeros(1, 2))
    assert dead.layers == [] and dead.fractions() == {}
    with pytest.raises(TypeError, match="network must be an nn.Module"):
        DeadUnits(lambda x: x)
