"""Smoke test: the vecenv benchmark's --quick mode runs and prints parseable JSON lines."""

from __future__ import annotations

import json

import numpy as np
import pytest


def run_quick(capsys, *args: str) -> list[dict]:
    """The bench's JSON lines from ``--quick`` plus ``args``, run in this process (its
    envs' workers are child processes either way)."""
    from experiments.bench.components import vecenv

    vecenv.main(["--quick", *args])
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]


@pytest.mark.timeout(120)
def test_vecenv_bench_quick_prints_json_lines(capsys):
    lines = run_quick(capsys)
    assert lines and all(line["bench"] == "vecenv" for line in lines)
    measured = [line for line in lines if "steps_per_s" in line]
    impls = {line["impl"] for line in measured}
    assert {"rlpar_subproc", "rlpar_inprocess", "gym_sync", "gym_async"} <= impls
    assert all(line["steps_per_s"] > 0 and line["num_envs"] == 2 for line in measured)  # --quick's
    ours = [line for line in measured if line["impl"].startswith("rlpar")]
    assert all("ratio_vs_gym_async" in line and "ratio_vs_best_peer" in line for line in ours)


def test_unknown_case_is_an_error():
    from experiments.bench.components import vecenv

    with pytest.raises(SystemExit):
        vecenv.main(["--quick", "--cases", "no-such-case"])


@pytest.mark.timeout(60)
def test_pong_case_env_matches_gymnasium_wrapper_chain():
    """The bench's lean Pong and its gymnasium-wrapper Pong are the same env."""
    pytest.importorskip("ale_py")
    pytest.importorskip("cv2")
    from experiments.bench.components import vecenv

    lean, ref = vecenv.pong(), vecenv.pong_gym_wrappers()
    assert lean.observation_space == ref.observation_space
    assert lean.action_space == ref.action_space
    obs, _ = lean.reset(seed=4)
    obs_ref, _ = ref.reset(seed=4)
    np.testing.assert_array_equal(obs, obs_ref)
    rng = np.random.default_rng(4)
    for _ in range(60):
        action = rng.integers(ref.action_space.n)
        out, out_ref = lean.step(action), ref.step(action)
        np.testing.assert_array_equal(out[0], out_ref[0])
        assert out[1:4] == out_ref[1:4]


@pytest.mark.timeout(120)
def test_vecenv_bench_quick_pong_case(capsys):
    pytest.importorskip("ale_py")
    pytest.importorskip("cv2")
    lines = run_quick(capsys, "--cases", "pong-8")
    assert lines and {line["case"] for line in lines} == {"pong-8"}
    by_impl = {line["impl"]: line for line in lines}
    assert {"rlpar_subproc", "gym_sync", "gym_async", "envpool"} <= set(by_impl)
    ours = by_impl["rlpar_subproc"]
    assert ours["steps_per_s"] > 0 and ours["ratio_vs_best_peer"] > 0
    if "skipped" not in by_impl["envpool"]:
        assert ours["ratio_vs_envpool"] > 0
