"""experiments.bench.minatar.dormant: dead-unit shares of snapshots, and clear errors."""

import json

import pytest
import torch

pytest.importorskip("minatar")

from experiments.bench.minatar.dormant import main  # noqa: E402
from experiments.bench.minatar.evaluation import write_snapshot  # noqa: E402
from experiments.bench.minatar.ours import a3c_agent, apex_network  # noqa: E402


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
    assert (killed["game"], killed["impl"]) == ("Breakout", "rlpar-apex")
    assert set(killed["dead"]) == set(fresh["dead"])
    assert max(killed["dead"].values()) == 1.0  # the dense layer
    assert max(fresh["dead"].values()) < 1.0


def test_an_a3c_run_is_measured_on_its_actor_critic(tmp_path, capsys):
    run = tmp_path / "SpaceInvaders" / "rlpar-a3c-seed1"
    write_snapshot(str(run), a3c_agent("", "SpaceInvaders").policy_state(), env_steps=10, wall_s=1.0,
                   updates=1)
    assert main([str(run), "--states", "100"]) == 0
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert (row["game"], row["impl"], row["env_steps"]) == ("SpaceInvaders", "rlpar-a3c", 10)
    assert row["dead"] and all(0.0 <= share <= 1.0 for share in row["dead"].values())


@pytest.mark.parametrize("args, named", [
    (["{tmp}/Breakout/rlpar-apex-seed0"], "no snapshots"),
    (["{tmp}"], "cannot tell the game"),
    (["{tmp}", "--game", "Pong"], "cannot tell the game"),
    (["{tmp}", "--game", "Breakout", "--states", "0"], "--states must be >= 1"),
    (["{tmp}/Breakout/sb3-dqn-seed0"], "cannot tell whose run"),
])
def test_bad_input_exits_2_naming_it(tmp_path, capsys, args, named):
    with pytest.raises(SystemExit) as exit_info:
        main([a.format(tmp=tmp_path) for a in args])
    assert exit_info.value.code == 2
    assert named in capsys.readouterr().err
