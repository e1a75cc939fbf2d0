import json

import pytest

from experiments.bench.tools import seeds


def write(path, lines):
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return str(path)


def run(impl, seed, returns, *, env="E", flags="", key="return_at_s"):
    return {"bench": "pomdp", "env": env, "impl": impl, "seed": seed, "kind": "run", "flags": flags,
            key: {str(t): r for t, r in returns.items()}}


def by_kind(lines, kind):
    return [line for line in lines if line["kind"] == kind]


def test_means_over_seeds_from_several_files_and_the_leader_per_time(tmp_path, capsys):
    a = write(tmp_path / "a.jsonl", [
        {"bench": "pomdp", "env": "E", "impl": "r2d2", "kind": "report", "at_s": 10, "greedy": 1.0},
        run("r2d2", 0, {10: 4.0, 20: 10.0}),
        {"bench": "pomdp", "env": "E", "impl": "ppo", "kind": "run", "skipped": "not installed"},
    ])
    folder = tmp_path / "b"
    folder.mkdir()
    write(folder / "results.jsonl", [run("r2d2", 1, {10: 2.0, 20: 6.0}), run("ppo", 0, {10: 5.0, 20: 7.0}),
                                     run("ppo", 1, {10: 3.0, 20: 7.0})])
    assert seeds.main([a, str(folder)]) == 0
    lines = [json.loads(text) for text in capsys.readouterr().out.splitlines()]
    r2d2, ppo = by_kind(lines, "seeds")
    assert (r2d2["impl"], r2d2["seeds"], r2d2["n"]) == ("r2d2", [0, 1], 2)
    assert r2d2["mean_at_s"] == {"10": 3.0, "20": 8.0} and r2d2["min_at_s"] == {"10": 2.0, "20": 6.0}
    assert ppo["mean_at_s"] == {"10": 4.0, "20": 7.0} and ppo["max_at_s"] == {"10": 5.0, "20": 7.0}
    (leader,) = by_kind(lines, "leader")
    assert leader["same_seeds"] is True
    assert leader["at_s"]["10"] == {"impl": "ppo", "mean": 4.0, "next": "r2d2", "margin": 1.0}
    assert leader["at_s"]["20"] == {"impl": "r2d2", "mean": 8.0, "next": "ppo", "margin": 1.0}


def test_a_rerun_seed_counts_once_from_its_last_line_and_flags_make_their_own_group(tmp_path):
    runs = seeds.read_runs([write(tmp_path / "r.jsonl", [
        run("r2d2", 0, {10: 1.0}), run("r2d2", 0, {10: 3.0}), run("r2d2", 0, {10: 9.0}, flags="--lr 3e-4")])])
    lines = seeds.summarize(runs)
    plain, flagged = by_kind(lines, "seeds")
    assert plain["mean_at_s"] == {"10": 3.0} and plain["replaced_seeds"] == [0]
    assert flagged["flags"] == "--lr 3e-4" and flagged["replaced_seeds"] == []
    assert by_kind(lines, "leader")[0]["at_s"]["10"]["impl"] == "r2d2 --lr 3e-4"


def test_a_time_a_seed_lacks_has_no_mean_and_unpaired_seeds_are_said(tmp_path):
    runs = seeds.read_runs([write(tmp_path / "r.jsonl", [
        run("a", 0, {10: None, 20: 2.0}), run("a", 1, {10: 1.0, 20: 4.0}), run("b", 0, {10: 1.0, 20: 1.0})])])
    lines = seeds.summarize(runs)
    a = by_kind(lines, "seeds")[0]
    assert a["mean_at_s"] == {"10": None, "20": 3.0}
    leader = by_kind(lines, "leader")[0]
    assert leader["same_seeds"] is False
    assert leader["at_s"]["10"] == {"impl": "b", "mean": 1.0, "next": None, "margin": None}


def test_the_minatar_benchs_key_and_variants(tmp_path):
    line = {"bench": "minatar", "game": "Breakout", "variant": "paper", "impl": "rlpar-apex", "seed": 0,
            "best_greedy_by_s": {"120": 7.5}}
    runs = seeds.read_runs([write(tmp_path / "m.jsonl", [line])], key="best_greedy_by_s")
    (only,) = seeds.summarize(runs, key="best_greedy_by_s")
    assert only["env"] == "Breakout (paper)" and only["mean_at_s"] == {"120": 7.5}


@pytest.mark.parametrize("content, message", [
    (["{not json"], r"r.jsonl:1: not a JSON line"),
    (["", "[1, 2]"], r"r.jsonl:2: a results line is a JSON object, got list"),
    ([{"impl": "a", "return_at_s": [1, 2]}], r"return_at_s must map report times to returns, got list"),
    ([{"impl": "a", "return_at_s": {"soon": 1.0}}], r"report time 'soon' is not a number of seconds"),
    ([{"impl": "a", "return_at_s": {"10": "high"}}], r"the return at 10 s must be a number or null, got 'high'"),
])
def test_malformed_results_are_named_with_file_and_line(tmp_path, content, message):
    with pytest.raises(ValueError, match=message):
        seeds.read_runs([write(tmp_path / "r.jsonl", content)])


def test_the_command_line_names_a_missing_file_and_an_empty_selection(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        seeds.main([str(tmp_path / "nowhere.jsonl")])
    assert exc.value.code == 2 and "no such results file" in capsys.readouterr().err
    empty = write(tmp_path / "r.jsonl", [{"impl": "a", "skipped": "x", "return_at_s": {"1": 1}}])
    with pytest.raises(SystemExit):
        seeds.main([empty])
    assert "no run line with 'return_at_s'" in capsys.readouterr().err


def test_runs_of_different_budgets_are_compared_apart(tmp_path):
    short, long = run("a", 0, {10: 9.0}), run("b", 0, {10: 1.0, 20: 2.0})
    short["budget_s"], long["budget_s"] = 10.0, 20.0
    other = {**run("c", 0, {10: 5.0, 20: 6.0}), "budget_s": 20.0}
    lines = seeds.summarize(seeds.read_runs([write(tmp_path / "r.jsonl", [short, long, other])]))
    (leader,) = by_kind(lines, "leader")  # the 10-s budget has one implementation: nothing to rank
    assert leader["budget_s"] == 20.0 and leader["impls"] == ["b", "c"]
    assert leader["at_s"]["10"] == {"impl": "c", "mean": 5.0, "next": "b", "margin": 4.0}
