"""Smoke test: the MinAtar learner benchmark's --quick run prints sane JSON lines
(timing fields, profile cost shares summing to 1, analytic FLOPs); no timing asserts."""

import json

import pytest

pytest.importorskip("minatar")

from experiments.bench.minatar import learner  # noqa: E402


@pytest.mark.timeout(120)
def test_quick_run_prints_timing_profile_and_flops(capsys):
    # In this process (its main sets and restores torch's thread count): a process of
    # its own would only add a Python and torch start.
    learner.main(["--quick"])
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert all(line["bench"] == "minatar_learner" for line in lines)
    by_kind: dict[str, list[dict]] = {}
    for line in lines:
        by_kind.setdefault(line["kind"], []).append(line)

    (peak,) = by_kind["sgemm_peak"]
    assert peak["threads"] == 1 and peak["gflop_per_cpu_s"] > 0

    (timing,) = by_kind["timing"]
    assert (timing["game"], timing["batch_size"], timing["threads"], timing["fast"]) == ("Breakout", 128, 1, "auto")
    assert timing["obs_shape"] == [10, 10, 4] and timing["num_actions"] == 6
    for key in ("cpu_ms_per_update", "wall_ms_per_update", "updates_per_s", "samples_per_s",
                "gflop_per_cpu_s", "gflop_per_wall_s", "fraction_of_sgemm_peak"):
        assert timing[key] > 0, key
    # Analytic, per sample: conv 2*8*8*16*(4*9) = 73,728, dense 2*1024*128 = 262,144,
    # dueling head 2*128*(1+6) = 1,792; F = 337,664; 5F - conv = 1,614,592; x128.
    assert timing["mflop_per_update"] == pytest.approx(128 * 1_614_592 / 1e6, abs=0.01)

    costs = by_kind["profile"]
    names = {line["cost"] for line in costs}
    assert {"dense layer matmuls (forward and backward)", "convolution forward",
            "convolution backward", "optimizer (Adam step, zero_grad)"} <= names
    assert len(names) == len(costs)
    assert sum(line["share"] for line in costs) == pytest.approx(1.0, abs=0.01)
    for line in costs:
        assert 0 <= line["share"] <= 1 and line["top_ops"]
        assert sum(op["share"] for op in line["top_ops"]) <= line["share"] + 1e-3
    (actor,) = by_kind["actor"]
    assert (actor["game"], actor["fast"], actor["num_envs"]) == ("Breakout", "auto", 8)
    assert actor["env_steps_per_cpu_s"] > 0 and actor["cpu_us_per_env_step"] > 0
    (summary,) = by_kind["profile_summary"]
    assert summary["mflop_per_update"] == timing["mflop_per_update"]
    assert summary["profiled_cpu_ms_per_update"] > 0 and summary["unprofiled_cpu_ms_per_update"] > 0


@pytest.mark.parametrize("args, message", [
    (("--games", "Pong"), "unknown game"),
    (("--batch-sizes", "32,0"), "positive integers"),
    (("--threads", "one"), "comma-separated integers"),
    (("--updates", "0"), "--updates must be >= 1"),
    (("--fast", "auto,fastest"), "unknown fast mode(s) ['fastest']"),
    (("--actor-steps", "0"), "--actor-steps must be >= 1"),
])
def test_bad_arguments_are_rejected_by_name(capsys, args, message):
    with pytest.raises(SystemExit) as exit_:
        learner.main(["--quick", *args])
    assert exit_.value.code == 2
    out = capsys.readouterr()
    assert message in out.err and not out.out  # before any measurement
