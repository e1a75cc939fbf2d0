"""The per-span reading of a run's evaluations, on made-up curves."""

import json

import pytest

from experiments.bench.tools import spans


def write_curve(folder, rows):
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "evals.jsonl", "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return str(folder)


def snap(steps, greedy, final=False):
    return {"env_steps": steps, "wall_s": steps / 100, "greedy": greedy, "final": final}


def test_each_span_averages_its_snapshots_and_leaves_the_final_one_out(tmp_path, capsys):
    # Out of order on disk, as two evaluators could append them; a span's end is inclusive;
    # a gap is null; the final snapshot (the budget's env steps) is not a span's.
    run = write_curve(tmp_path / "a", [snap(250, 6.0), snap(0, 0.0), snap(100, 2.0), snap(50, 1.0),
                                       snap(420, 9.0), snap(430, 11.0, final=True)])
    assert spans.main([run, "--span", "100"]) == 0
    (line,) = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert line == {"kind": "spans", "run": run, "key": "greedy", "span": 100, "snapshots": 5,
                    "mean_by_steps": {"100": 1.0, "200": None, "300": 6.0, "400": None, "500": 9.0}}


def test_runs_are_read_in_order_with_another_key(tmp_path, capsys):
    a = write_curve(tmp_path / "a", [{**snap(10, 1.0), "eps0.1": 3.0}])
    b = write_curve(tmp_path / "b", [{**snap(30, 2.0), "eps0.1": 5.0}, {**snap(40, 2.0), "eps0.1": 6.0}])
    assert spans.main([a, b, "--span", "20", "--key", "eps0.1"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [(x["run"], x["mean_by_steps"]) for x in lines] == [(a, {"20": 3.0}), (b, {"20": None, "40": 5.5})]


def test_a_run_without_snapshots_has_no_spans(tmp_path):
    assert spans.spans([], span=10) == {}
    assert spans.read_snapshots(write_curve(tmp_path / "a", [snap(500, 3.0, final=True)]), key="greedy") == []


@pytest.mark.parametrize("rows, named", [
    (None, "no evals.jsonl"),
    (["{not json"], "evals.jsonl:1: not a JSON line"),
    ([{"env_steps": 5}], "needs env_steps and 'greedy'"),
    ([snap(-1, 1.0)], "env_steps must be an int >= 0"),
    ([snap(5, float("nan"))], "greedy must be a finite number"),
    ([snap(5, "7")], "greedy must be a finite number"),
])
def test_bad_input_is_named(tmp_path, capsys, rows, named):
    folder = tmp_path / "run"
    if rows is None:
        folder.mkdir()
    else:
        folder.mkdir()
        (folder / "evals.jsonl").write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows))
    with pytest.raises(SystemExit):
        spans.main([str(folder)])
    assert named in capsys.readouterr().err


def test_a_span_below_one_step_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        spans.main([write_curve(tmp_path / "a", [snap(1, 1.0)]), "--span", "0"])
    assert "--span must be >= 1" in capsys.readouterr().err
