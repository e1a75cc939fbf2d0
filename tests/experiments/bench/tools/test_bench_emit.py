"""The benchmarks' one way to report: a JSON line per result, optionally kept in a file."""

import json

from experiments.bench.tools.emit import RESULTS, emit


def test_json_lines_are_printed_and_appended_to_the_results_file(tmp_path, capsys):
    emit({"impl": "a", "x": 1.5}, results_dir=str(tmp_path))
    emit({"impl": "b", "x": None}, results_dir=str(tmp_path))
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    with open(tmp_path / RESULTS) as f:
        assert [json.loads(line) for line in f] == printed == [{"impl": "a", "x": 1.5}, {"impl": "b", "x": None}]


def test_without_a_results_dir_it_only_prints(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    emit({"case": "c"})
    assert json.loads(capsys.readouterr().out) == {"case": "c"}
    assert not list(tmp_path.iterdir())
