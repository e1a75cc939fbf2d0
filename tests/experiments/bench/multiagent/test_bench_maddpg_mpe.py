"""The competitive MPE bench: --quick runs every implementation on simple_adversary
and prints per-team JSON lines; the per-team evaluation and its random baseline;
--env simple_spread hands over to the simple_spread bench."""

import json

import numpy as np
import pytest


@pytest.mark.timeout(120)
def test_quick_mode_prints_per_team_lines_on_simple_adversary(capsys, one_torch_thread):
    pytest.importorskip("mpe2")
    impls = ["random", "rlpar"]
    try:
        import torchrl  # noqa: F401
        impls.append("torchrl")
    except ImportError:
        pass
    from experiments.bench.multiagent.maddpg_mpe import main

    main(["--env", "simple_adversary", "--quick", "--impls", *impls])  # in this process: no Python start to pay
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    runs = [x for x in lines if not x.get("aggregate")]
    assert [x["impl"] for x in runs] == impls
    for run in runs:
        assert run["env"] == "simple_adversary" and run["seed"] == 0
        for key in ("team_returns", "team_returns_vs_random"):
            assert set(run[key]) == {"adversary", "agent"}, key
            assert all(np.isfinite(v) for v in run[key].values()), key
    assert runs[0]["steps"] == 0 and all(x["steps"] == 600 and x["updates"] > 0 for x in runs[1:])
    assert runs[1]["mode"] != "random" and runs[1]["ours_flags"] == ""
    aggregates = [x for x in lines if x.get("aggregate")]
    assert [x["impl"] for x in aggregates] == impls
    for agg in aggregates[1:]:
        assert set(agg["team_returns_mean"]) == set(agg["team_returns_std"]) == {"adversary", "agent"}
        assert set(agg["vs_random_minus_random"]) == {"adversary", "agent"}


@pytest.mark.timeout(60)
def test_team_evaluation_against_random_opponents():
    pytest.importorskip("mpe2")
    from experiments.bench.multiagent.maddpg_mpe import evaluate_all, evaluate_teams, mpe_env_fn

    env_fn = mpe_env_fn("simple_tag")
    random = evaluate_teams(None, env_fn, episodes=3)
    assert random == evaluate_teams(None, env_fn, episodes=3)  # seeded: the same baseline every call
    still = [np.full(5, 0.0, np.float32)] * 4  # a policy that never moves (no-op action)

    def frozen(obs):
        return [np.stack([still[i]] * len(o)) for i, o in enumerate(obs)]

    # Random adversaries against a frozen good agent; its return differs from random play's.
    mixed = evaluate_teams(frozen, env_fn, episodes=3, random_teams=["adversary"])
    assert set(mixed) == {"adversary", "agent"} and mixed != random
    both = evaluate_all(frozen, env_fn, episodes=3)
    assert both["team_returns_vs_random"]["agent"] == mixed["agent"]
    with pytest.raises(ValueError, match="not teams of this env"):
        evaluate_teams(frozen, env_fn, episodes=1, random_teams=["blue"])


@pytest.mark.timeout(30)
def test_spread_is_handed_to_the_simple_spread_bench(monkeypatch):
    from experiments.bench.multiagent import maddpg_mpe, maddpg_spread

    seen = []
    monkeypatch.setattr(maddpg_spread, "main", seen.append)
    maddpg_mpe.main(["--env", "simple_spread", "--quick", "--impls", "rlpar"])
    assert seen == [["--quick", "--impls", "rlpar"]]


def test_bad_arguments_exit_2(capsys):
    from experiments.bench.multiagent.maddpg_mpe import main

    for argv, message in ((["--env", "simple_push"], "invalid choice"), (["--steps", "10"], "--steps must be"),
                          (["--ours-flags", "--env-id cooperative"], "may not set ['env_id']")):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2 and message in capsys.readouterr().err
