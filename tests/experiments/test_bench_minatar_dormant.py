"""experiments.bench.minatar_dormant: dead-unit shares of snapshots, and clear errors."""

import json

import pytest
import torch

pytest.importorskip("minatar")

from experiments.bench.minatar_dormant import dead_fractions, main  # noqa: E402
from experiments.bench.minatar_eval import write_snapshot  # noqa: E402
from experiments.bench.minatar_ours import apex_network  # noqa: E402


def _run_dir(tmp_path):
    run = tmp_path / "Breakout" / "rlpar-apex-seed0"
    net = apex_network("", "Breakout")
    write_snapshot(str(run), net.state_dict(), env_steps=100, wall_s=1.0, updates=10)
    dense = [m for m in net.modules() if isinstance(m, torch.nn.Linear)][0]  # the torso's dense layer
    with torch.no_grad():
        dense.bias.fill_(-1e6)  # no input can switch a unit on
    write_snapshot(str(run), net.state_dict(), env_steps=50, wall_s=0.5, updates=5)
    return run


def test_a_killed_dense_layer_reads_all_dead_and_snapshots_come_in_env_step_order(tmp_path, capsys):
    run = _run_dir(tmp_path)
    assert main([str(run), "--states", "200"]) == 0  # the game from the bench's layout
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["env_steps"] for r in rows] == [50, 100]
    killed, fresh = rows
    assert killed["game"] == "Breakout" and set(killed["dead"]) == set(fresh["dead"])
    assert max(killed["dead"].values()) == 1.0  # the dense layer
    assert max(fresh["dead"].values()) < 1.0


def test_dead_fractions_count_a_conv_channel_live_if_any_position_is():
    net = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 1), torch.nn.ReLU())
    with torch.no_grad():
        net[0].weight.fill_(1.0)
        net[0].bias.copy_(torch.tensor([0.0, -10.0]))
    states = torch.zeros(3, 1, 2, 2)
    states[0, 0, 1, 1] = 1.0  # one position of one state switches channel 0 on
    dead, _ = dead_fractions(net, states)
    assert dead == {"1": 0.5}
    with pytest.raises(ValueError, match="no nn.ReLU"):
        dead_fractions(torch.nn.Linear(2, 2), torch.zeros(1, 2))


@pytest.mark.parametrize("args, named", [
    (["{tmp}/nowhere/x", "--game", "Breakout"], "no snapshots"),
    (["{tmp}"], "cannot tell the game"),
    (["{tmp}", "--game", "Pong"], "cannot tell the game"),
    (["{tmp}", "--game", "Breakout", "--states", "0"], "--states must be >= 1"),
])
def test_bad_input_exits_2_naming_it(tmp_path, capsys, args, named):
    with pytest.raises(SystemExit) as exit_info:
        main([a.format(tmp=tmp_path) for a in args])
    assert exit_info.value.code == 2
    assert named in capsys.readouterr().err
