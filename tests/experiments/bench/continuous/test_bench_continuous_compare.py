"""experiments.bench.continuous.compare: trailing points on a grid and at the peer's
evaluations, by hand on small curves, and clear errors for runs it cannot read."""

import json

import pytest

from experiments.bench.continuous import compare as cc


def _write(path, points):
    path.mkdir()
    with open(path / "evals.jsonl", "w") as f:
        for wall_s, greedy in points:
            f.write(json.dumps({"env_steps": int(wall_s * 100), "wall_s": wall_s, "greedy": greedy}) + "\n")
    return str(path)


def test_trailing_by_hand(tmp_path, capsys):
    # ours: 10 at 5 s, 50 at 25 s, 30 at 35 s (best stays 50), 90 at 45 s;
    # peer: 20 at 10 s, 60 at 30 s, 70 at 50 s.
    ours = _write(tmp_path / "ours", [(5, 10), (25, 50), (35, 30), (45, 90), (60, 95)])
    peer = _write(tmp_path / "peer", [(10, 20), (30, 60), (50, 70)])
    assert cc.main([ours, "--against", peer, "--grid-s", "10", "--at", "20,50"]) == 0
    line = json.loads(capsys.readouterr().out)
    # grid 10, 20, ..., 50: ours' best 10, 10, 50, 50, 90 against 20, 20, 60, 60, 70
    assert line["grid"] == {"points": 5, "trailing": 4, "spans": [[10.0, 40.0]], "max_deficit": 10.0}
    # the peer's evaluations at 10, 30, 50: 10 < 20, 50 < 60, 90 > 70
    assert line["at_peer_evals"] == {"points": 3, "trailing": 2, "spans": [[10.0, 30.0]],
                                     "max_deficit": 10.0}
    assert line["best_by"] == {"20": {"run": 10.0, "peer": 20.0}, "50": {"run": 90.0, "peer": 70.0}}
    assert cc.main([ours, "--against", peer, "--at", "60"]) == 0  # after the peer's last evaluation
    assert json.loads(capsys.readouterr().out)["best_by"] == {"60": {"run": 95.0, "peer": None}}


def test_a_run_not_yet_evaluated_trails_without_a_deficit():
    result = cc.trailing([(30.0, 5.0)], [(10.0, 1.0)], [10.0, 20.0, 30.0])
    assert result == {"points": 3, "trailing": 2, "spans": [[10.0, 20.0]], "max_deficit": 0.0}


@pytest.mark.parametrize("content, match", [(None, "no evals.jsonl"), ("", "no evaluations"),
                                            ('{"wall_s": 1}\n', "not an evaluation")])
def test_unreadable_runs_are_named(tmp_path, capsys, content, match):
    run = tmp_path / "run"
    run.mkdir()
    if content is not None:
        (run / "evals.jsonl").write_text(content)
    peer = _write(tmp_path / "peer", [(1, 1)])
    with pytest.raises(SystemExit):
        cc.main([str(run), "--against", peer])
    assert match in capsys.readouterr().err


def test_bad_flags_are_refused(tmp_path, capsys):
    run = _write(tmp_path / "run", [(1, 1)])
    for flags, match in ((["--grid-s", "0"], "--grid-s"), (["--at", "3,x"], "--at")):
        with pytest.raises(SystemExit):
            cc.main([run, "--against", run, *flags])
        assert match in capsys.readouterr().err


def test_peer_evaluations_before_both_have_one_are_not_counted():
    result = cc.compare([(5.0, 1.0), (20.0, 3.0)], [(2.0, 2.0), (10.0, 2.0), (20.0, 4.0)], grid_s=10.0)
    assert result["from_s"] == 5.0 and result["to_s"] == 20.0
    assert result["at_peer_evals"]["points"] == 2  # 10 and 20, not the peer's first at 2 s
    assert result["at_peer_evals"]["trailing"] == 2
