"""experiments.bench.continuous.learner: one line per implementation, its sizes and
costs; SB3 skipped where it is not installed; bad flags named."""

from __future__ import annotations

import importlib.util
import json
import re

import pytest

from experiments.bench.continuous import learner


@pytest.mark.timeout(120)
def test_quick_gives_a_line_per_implementation_with_its_networks_and_costs(tmp_path, capsys):
    assert learner.main(["--quick", "--out", str(tmp_path)]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["impl"] for r in lines] == list(learner.IMPLS)
    assert lines == [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    has_sb3 = importlib.util.find_spec("stable_baselines3") is not None
    for record in lines:
        assert (record["obs_dim"], record["action_dim"], record["threads"]) == (17, 6, 1)
        if record["impl"].startswith("sb3-") and not has_sb3:
            assert "not installed" in record["skipped"]
            continue
        assert record["hidden"] == [32, 32] and record["batch_size"] == 64 and record["updates"] == 5
        assert record["update_ms"] > 0 and record["cpu_ms"] > 0
        assert record["updates_per_s"] == pytest.approx(1e3 / record["update_ms"], rel=0.01)


def test_ours_learn_at_the_job_defaults_sizes():
    from algorithms.sac.builder import SAC_DEFAULTS

    algorithm, sizes = learner._ours("rlpar-sac", 11, 3, quick=False, seed=0)
    assert sizes == {"hidden": list(SAC_DEFAULTS["hidden"]), "batch_size": SAC_DEFAULTS["batch_size"]}
    assert algorithm.action_dim == 3 and algorithm.obs_dim == 11


@pytest.mark.parametrize(("argv", "message"), [
    (["--impls", "rlpar-sac,ppo"], "unknown \\['ppo'\\]"),
    (["--obs-dim", "0"], "--obs-dim must be >= 1"),
    (["--updates", "0"], "--updates must be >= 1"),
])
def test_bad_flags_are_named(argv, message, capsys):
    with pytest.raises(SystemExit):
        learner.parse(argv)
    assert re.search(message, capsys.readouterr().err)
