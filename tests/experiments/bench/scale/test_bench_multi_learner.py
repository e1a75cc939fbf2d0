"""The multi-learner scale bench's points for the Ape-X SAC curve (actors x learners),
with the job replaced by a stand-in that checks the config each point runs and
returns a summary of the job's shape: no processes here (one real SAC point per
learner count runs in tests/experiments/test_apex_continuous.py's two-learner test;
the bench's own measurements are not unit tests)."""

import json

import pytest

from experiments.bench.scale import multi_learner


def fake_run(seen):
    def run(config, quiet):
        config.validate()
        seen.append((config.env.env_id, config.algorithm, config.num_actors, config.learners,
                     config.run.torch_threads, config.replay.replay_placement))
        k = config.learners
        return {"learners": k, "num_actors": config.num_actors, "updates": 100 * config.num_actors // k,
                "learning_s": 10.0, "env_steps_per_s": 50.0 * config.num_actors, "wait_fraction": 0.1,
                "learner_update_ms": [10.0] * k, "learner_process_cpu_ms": [8.0 * k] * k,
                "update_ms_per_update": 10.0, "process_cpu_ms_per_update": 8.0 * k,
                "learners_identical": True, "startup_s": 2.0, "wall_s": 12.0}
    return run


def test_the_sac_curve_has_a_point_per_actor_count_and_learner_count(monkeypatch, capsys):
    from experiments import apex

    seen = []
    monkeypatch.setattr(apex, "run", fake_run(seen))
    multi_learner.main(["--quick", "--algorithm", "sac", "--actors", "1,2,4", "--configs", "k1,k2"])
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    points = [line for line in lines if line.get("case") != "machine"]
    assert [(p["actors"], p["learners"]) for p in points] == [(1, 1), (1, 2), (2, 1), (2, 2), (4, 1), (4, 2)]
    assert "skipped" in points[1] and "--replay-placement actors" in points[1]["skipped"]
    ran = [p for p in points if "skipped" not in p]
    assert seen == [("Pendulum-v1", "sac", a, k, 1, "learner") for a, k in ((1, 1), (2, 1), (2, 2), (4, 1), (4, 2))]
    for p in ran:
        assert p["algorithm"] == "sac" and p["env"] == "pendulum" and p["env_steps_per_s"] == 50.0 * p["actors"]
        assert p["updates_per_s"] == 10.0 * p["actors"] / p["learners"]
    assert [p["efficiency"] for p in ran if p["learners"] == 2] == [0.5, 0.5]  # against k1 of the same actors
    assert lines[-1]["case"] == "machine" and lines[-1]["quick"]


def test_actors_placement_runs_one_actor_for_two_learners(monkeypatch, capsys):
    from experiments import apex

    seen = []
    monkeypatch.setattr(apex, "run", fake_run(seen))
    multi_learner.main(["--quick", "--algorithm", "sac", "--actors", "1", "--configs", "k2",
                        "--replay-placement", "actors"])
    assert seen == [("Pendulum-v1", "sac", 1, 2, 1, "actors")]


@pytest.mark.parametrize("flags, named", [
    (["--algorithm", "sac", "--envs", "cartpole"], "cartpole"),
    (["--algorithm", "dqn", "--envs", "pendulum"], "pendulum"),
    (["--actors", "0"], "--actors"),
    (["--configs", "k3"], "k3"),
])
def test_bad_flags_exit_2_naming_them(capsys, flags, named):
    with pytest.raises(SystemExit) as exit_:
        multi_learner.main(flags)
    assert exit_.value.code == 2 and named in capsys.readouterr().err
