"""The simple_spread learning benchmark's --quick mode runs and prints JSON lines.

Only the rlpar side runs here (the TorchRL peer's import and env start take most
of a minute on a loaded 2-core box); the benchmark itself runs both."""

import json

import pytest


@pytest.mark.timeout(120)
def test_quick_mode_prints_json_lines(capsys, one_torch_thread):
    pytest.importorskip("mpe2")
    from experiments.bench.multiagent.maddpg_spread import main

    main(["--quick", "--impls", "random", "rlpar"])  # in this process: no Python start to pay
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    runs = [x for x in lines if not x.get("aggregate")]
    assert [x["impl"] for x in runs] == ["random", "rlpar"] and runs[1]["env_steps"] == 600
    for run in runs:
        for key in ("team_return", "landmark_distance", "collisions_per_episode", "train_wall_s"):
            assert isinstance(run[key], float | int), key
    assert runs[1]["updates"] > 0 and runs[1]["update_every"] == 4
    assert runs[1]["ours_flags"] == "--actor-objective team --grad-clip-scope role"
    assert lines[-1]["aggregate"] and lines[-1]["seeds"] == 1
    assert "team_return_minus_random" in lines[-1]


def test_peer_reports_why_it_cannot_run_discrete():
    from experiments.bench.multiagent.maddpg_spread import torchrl_unavailable

    assert "continuous" in torchrl_unavailable(False)


def test_update_period_rounds_to_vector_steps_or_divisors():
    from experiments.bench.multiagent.maddpg_spread import update_period

    assert [update_period(u, 8) for u in (1, 2, 3, 4, 6, 8, 12, 100)] == [1, 2, 4, 4, 8, 8, 16, 96]


def test_ours_flags_parse_and_may_not_set_bench_fields():
    from experiments.bench.multiagent.maddpg_spread import ours_config

    assert ours_config("--critic-lr 3e-3 --tau 0.02").algo_config().critic_lr == 3e-3
    for flags, field in (("--updates-per-step 0.5", "updates_per_step"), ("--env-id cooperative", "env_id"),
                         ("--max-env-steps 10", "max_env_steps"), ("--replay-capacity 2048", "replay_capacity")):
        with pytest.raises(ValueError, match=field):
            ours_config(flags)
    with pytest.raises(SystemExit):
        ours_config("--no-such-flag 1")
    with pytest.raises(SystemExit):  # the old flag name is gone
        ours_config("--train-every 4")


def test_default_ours_flags_build_the_team_objective():
    from experiments.bench.multiagent.maddpg_spread import RLPAR_FLAGS, ours_config

    algo_config = ours_config(RLPAR_FLAGS).algo_config()
    assert (algo_config.actor_objective, algo_config.grad_clip_scope) == ("team", "role")
