"""Smoke test: the Ape-X scale benchmark's quick mode runs every case and prints
parseable JSON lines with the figures the issue asks for."""

import json

import pytest

from experiments.bench.scale import apex


@pytest.mark.timeout(240)
def test_apex_scale_bench_quick_prints_every_case(capsys):
    # The bench's main in this process: its senders, ranks and the job's world are
    # child processes either way.
    apex.main(["--quick"])
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert all(line["bench"] == "apex_scale" for line in lines)
    by_case: dict[str, list[dict]] = {}
    for line in lines:
        by_case.setdefault(line["case"], []).append(line)

    ingest = by_case["ingest"]
    assert [line["phase"] for line in ingest] == ["offered", "max"]
    for line in ingest:
        assert line["placement"] == "learner" and line["batch_size"] == 512
        assert line["transitions_per_s"] > 0 and line["learner_batches_per_s"] > 0
        assert line["raw_transitions_per_s"] > 0 and line["raw_local_transitions_per_s"] > 0
        assert line["dropped"] == 0 and line["add_errors"] == 0, line
        assert line["add_p99_ms"] >= line["add_p50_ms"] >= 0
        assert line["replay_rss_mb"] > 0

    scaling = by_case["actor_scaling"]
    assert [line["actors"] for line in scaling] == [1]
    assert scaling[0]["linear_fraction"] == 1.0
    for line in scaling:
        assert line["env_steps_per_s"] > 0 and line["state_mb"] > 6  # the Nature CNN's 1.7M floats
        assert line["reports_per_s"] > 0

    (fan_in,) = by_case["fan_in"]
    assert fan_in["actors"] == 4 and fan_in["reports_per_s"] > 0
    assert 0 <= fan_in["learner_cpu_share_reports"] <= fan_in["learner_cpu_share_serving"] <= 1
    # The learner's side of pacing is exact; how far simulated actors overshoot between
    # two reports depends on scheduling (a loaded CI box), so the bench reports it and the
    # real job's bounds are tested in test_bench_apex_actors.py.
    pacing = {k: fan_in[k] for k in ("updates", "pacing_updates_due", "env_steps", "all_actors_final")}
    assert fan_in["pacing_learner_within"], pacing
    assert fan_in["all_actors_final"], pacing
    assert "pacing_actor_overshoot_steps" in fan_in

    (machine,) = by_case["machine"]
    assert machine["quick"] and machine["cpus"] >= 1


def test_a_scaling_line_of_two_actors_on_made_up_records():
    from experiments.bench.scale.apex_actors import ScalingPoint, scaling_line

    # Two actors, each 100 env steps/s and 0.5 ms of CPU per step over the window
    # where both ran (t = 1..11 s); the first 20% of it is warm-up, left out.
    def record(offset):
        trace = [[t, 100.0 * (t - offset), 0.05 * (t - offset)] for t in range(offset, 12)]
        return {"trace": trace, "pulls": 20, "pulls_loaded": 10, "pull_seconds": 0.3, "loaded_seconds": 0.2,
                "state_bytes": 7_000_000}

    summary = {"wall_s": 13.0, "startup_s": 3.0, "env_steps_per_s": 190.0, "updates_per_s": 4.0,
               "wait_fraction": 0.5, "updates": 40, "env_steps": 2000, "actor_reports": 50}
    line = scaling_line(ScalingPoint(actors=2, seconds=10.0), summary, [record(0), record(1)], 150.0)
    assert line["actors"] == 2 and line["env_steps_per_s"] == 200.0 and line["window_s"] == 8.0
    assert line["linear_fraction"] == round(200.0 / (2 * 150.0), 3)
    assert line["actor_cpu_ms_per_env_step"] == 0.5 and line["state_mb"] == 7.0
    assert line["pulls_loaded_per_actor_per_s"] == 1.0 and line["pull_ms"] == 20.0  # 0.4 s over 20 loads
    assert line["empty_pull_ms"] == 10.0 and line["reports_per_s"] == 5.0  # 0.2 s over 20 empty pulls
    assert line["replay_ratio"] == round(40 * 32 / 2000, 3)
