"""The continuous-control benchmark: its --quick mode on Pendulum end to end (not a
measurement), flag errors, and the curve bookkeeping its JSON lines are built from."""

import importlib.util
import json
import os

import numpy as np
import pytest

from experiments.bench.continuous import budget as bench_module
from experiments.bench.tools import wallclock as wc

# What issue 31 asks every run's line for.
KEYS = {"env", "impl", "seed", "budget_s", "env_steps", "env_steps_per_s", "updates", "updates_per_s",
        "wait_fraction", "best_eval_greedy", "final_eval_greedy", "score", "reached_score_at_s",
        "reached_score_at_steps", "crossings", "return_at_s", "loadavg_start", "loadavg_end", "eval_cpu_s",
        "eval_cpu_s_during_training", "snapshot_pause_s", "settings"}


@pytest.mark.timeout(200)
def test_quick_mode_on_pendulum_writes_one_line_per_impl_and_the_png(tmp_path, capsys):
    # The bench's main in this process: each run's trainer and evaluator are its children.
    # Ours end to end as Ape-X SAC; rlpar-td3 runs the same trainer and evaluator code
    # with another --algorithm (its policy: test_ours_evaluator_policy_...). The peer
    # as SB3's SAC; sb3-td3 runs the same trainer and evaluator code with another model
    # (its model and policy: test_sb3_td3_evaluator_policy_...).
    # Ours in one process (--serial, as the MinAtar and POMDP benches' tests run theirs):
    # the bench's plumbing is what this tests; the Ape-X job's local world is its own
    # tests' business, and its ranks' start was most of this test's CPU.
    impls = ["rlpar-sac", "sb3-sac"]
    assert bench_module.main(["--quick", "--budget-s", "4", "--impls", ",".join(impls), "--ours-flags=--serial",
                              "--out", str(tmp_path)]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    sb3 = importlib.util.find_spec("stable_baselines3") is not None
    expected = impls if sb3 else ["sb3-sac", "rlpar-sac"]
    assert [r["impl"] for r in records] == expected
    for record in records:
        assert record["bench"] == "continuous" and record["env"] == "Pendulum-v1"
        if "skipped" in record:
            assert not sb3 and record["impl"].startswith("sb3-")
            continue
        assert KEYS <= set(record), KEYS - set(record)
        assert "error" not in record, record
        assert record["peak_memory_mb"] > 50  # a torch process's own PSS is more
        if record["impl"] == "rlpar-sac":
            assert record["settings"]["algorithm"] == "sac" and record["settings"]["autotune"] is True
        assert record["score"] == -200.0 and record["budget_s"] == 4.0 and record["quick"]
        assert len(record["loadavg_start"]) == 3 and len(record["loadavg_end"]) == 3
        # The final snapshot at least was evaluated (a loaded machine may spend the
        # whole budget starting up).
        assert record["evaluations"] >= 1 and isinstance(record["final_eval_greedy"], float)
        assert -2000.0 < record["final_eval_greedy"] <= 0.0  # Pendulum's returns
        curve = wc.read_curve(os.path.dirname(record["curve"]))
        assert curve[-1]["final"] and curve[-1]["env_steps"] == record["env_steps"]
        assert all(len(r) and r["greedy_std"] >= 0 for r in curve)
    with open(tmp_path / "results.jsonl") as f:
        assert [json.loads(line) for line in f] == records
    assert (tmp_path / "continuous-Pendulum-v1.png").stat().st_size > 0


@pytest.mark.parametrize("flags, named", [
    (["--envs", "Pendulum-v1,Walker2d-v5"], "Walker2d-v5"),
    (["--impls", "rlpar-td3,cleanrl-td3"], "cleanrl-td3"),
    (["--seeds", "0,x"], "--seeds"),
    (["--eval-episodes", "0"], "--eval-episodes"),
    (["--budget-s", "-1"], "--budget-s"),
    (["--peer-threads", "0"], "--peer-threads"),
    (["--score", "high"], "--score"),
    (["--envs", "Pendulum-v1,Hopper-v5", "--score", "-200"], "--score"),
    (["--envs", "Pendulum-v1", "--impls", "rlpar-td3", "--ours-flags=--no-such-flag"], "--no-such-flag"),
    (["--envs", "Pendulum-v1", "--impls", "rlpar-td3", "--ours-flags=--sigma 2"], "--sigma"),
])
def test_bad_flags_exit_2_naming_them_before_any_run(tmp_path, capsys, flags, named):
    # In-process: the CLI's parsing is the bench's main(); a process per case would only
    # add a Python and torch start.
    with pytest.raises(SystemExit) as exit_:
        bench_module.main([*flags, "--out", str(tmp_path)])
    assert exit_.value.code == 2
    assert named in capsys.readouterr().err
    assert not (tmp_path / "results.jsonl").exists()


def record(steps, wall, greedy, final=False):
    return {"env_steps": steps, "wall_s": wall, "final": final, "greedy": greedy, "greedy_std": 1.0}


CURVE = [record(1_000, 10.0, -1200.0), record(2_000, 20.0, -600.0), record(3_000, 30.0, -180.0),
         record(4_000, 40.0, -150.0), record(4_200, 42.0, -210.0, final=True)]


def test_the_first_evaluation_at_each_level_is_its_crossing():
    assert wc.first_reaching(CURVE, "greedy", -200.0)["env_steps"] == 3_000
    assert wc.crossings(CURVE, "greedy", [-1000.0, -200.0, 0.0]) == {
        "-1000": {"s": 20.0, "steps": 2_000}, "-200": {"s": 30.0, "steps": 3_000}, "0": None}
    assert wc.crossings([], "greedy", [-200.0]) == {"-200": None}


def test_the_curve_at_a_time_is_the_last_evaluation_taken_by_then():
    assert wc.value_at(CURVE, "greedy", 5.0) is None
    assert wc.value_at(CURVE, "greedy", 25.0) == -600.0
    assert wc.value_at(CURVE, "greedy", 30.0) == -180.0
    assert wc.value_at(CURVE, "greedy", 1e9) == -210.0  # the final snapshot


def test_a_run_line_summarizes_its_curve():
    summary = bench_module.summarize(CURVE, levels=(-200.0, -1000.0), budget_s=40.0)
    assert summary["score"] == -200.0
    assert summary["reached_score_at_s"] == 30.0 and summary["reached_score_at_steps"] == 3_000
    assert summary["crossings"] == {"-1000": {"s": 20.0, "steps": 2_000}, "-200": {"s": 30.0, "steps": 3_000}}
    assert summary["best_eval_greedy"] == -150.0 and summary["final_eval_greedy"] == -210.0
    assert summary["return_at_s"] == {"10": -1200.0, "20": -600.0, "30": -180.0, "40": -150.0}
    assert summary["evaluations"] == 5
    never = bench_module.summarize(CURVE, levels=(0.0,), budget_s=40.0)
    assert never["reached_score_at_s"] is None and never["reached_score_at_steps"] is None
    empty = bench_module.summarize([], levels=(-200.0,), budget_s=40.0)
    assert empty["final_eval_greedy"] is None and empty["best_eval_greedy"] is None


def test_per_env_defaults_and_overrides():
    args = bench_module.parse(["--envs", "Pendulum-v1,HalfCheetah-v5"]) if importlib.util.find_spec(
        "mujoco") else bench_module.parse(["--envs", "Pendulum-v1"])
    assert bench_module.budget_of(args, "Pendulum-v1") == 600.0
    assert bench_module.levels_of(args, "Pendulum-v1") == (-200.0,)
    assert bench_module.budget_of(args, "HalfCheetah-v5") == 1800.0
    assert bench_module.levels_of(args, "Hopper-v5")[0] == 2000.0
    args = bench_module.parse(["--envs", "Pendulum-v1", "--budget-s", "60", "--score=-300,-150",
                               "--eval-every", "500"])
    assert bench_module.budget_of(args, "Pendulum-v1") == 60.0
    assert bench_module.levels_of(args, "Pendulum-v1") == (-300.0, -150.0)
    assert bench_module.eval_every_of(args, "Pendulum-v1") == 500


@pytest.mark.parametrize("impl, algorithm, cls", [
    ("rlpar-td3", "td3", "TD3"), ("rlpar-sac", "sac", "SAC"), ("rlpar-ddpg", "ddpg", "DDPG")])
def test_ours_evaluator_policy_loads_the_runs_policy_state_and_acts_in_the_box(impl, algorithm, cls):
    # The evaluator's network is rebuilt from the flags; a run's snapshot is its
    # algorithm's policy_state (here a freshly built one's, the quick run's network).
    from algorithms.builder import EnvSpec
    from envs.registry import EnvFactory
    from experiments.apex import builder, fill_learn
    from experiments.bench.continuous import ours
    from experiments.runtime import Parts
    from experiments.runtime.cli import apply_overrides

    assert bench_module.algorithm_of(impl) == algorithm
    load, act = ours.policy("Pendulum-v1", algorithm=algorithm, flags="", quick=True)
    config = ours.apex_config("Pendulum-v1", "", algorithm=algorithm)
    apply_overrides(config, {"hidden": "32,32"})
    fill_learn(config.learn, algorithm=algorithm, family="vector")
    env = EnvFactory.from_id("Pendulum-v1")()
    run = builder(config, Parts(), EnvSpec(observation_space=env.observation_space, action_space=env.action_space))
    trained = run.make_algorithm(device="cpu", seed=1)
    assert type(trained).__name__ == cls
    load(trained.policy_state())
    obs = [env.reset(seed=s)[0] for s in range(4)]
    actions = act(obs)
    env.close()
    assert actions.shape == (4, 1) and (abs(actions) <= 2.0).all()  # Pendulum's torque bounds
    assert (actions == trained.act(obs, explore=False)).all()  # the run's greedy actions


def test_sb3_td3_evaluator_policy_loads_the_trainers_actor_and_acts_in_the_box():
    # The quick run's SB3 model (TD3 with its action noise) and the evaluator's policy
    # rebuilt from the same settings: the trainer's snapshot is its actor's state.
    pytest.importorskip("stable_baselines3")
    from envs.registry import EnvFactory
    from experiments.bench.continuous import peers

    model = peers.make_model("sb3-td3", "Pendulum-v1", seed=1, quick=True)
    assert type(model).__name__ == "TD3" and model.action_noise is not None
    load, act = peers.policy("sb3-td3", "Pendulum-v1", quick=True)
    load(model.actor.state_dict())
    env = EnvFactory.from_id("Pendulum-v1")()
    obs = np.stack([env.reset(seed=s)[0] for s in range(4)])
    env.close()
    actions = act(obs)
    assert actions.shape == (4, 1) and (abs(actions) <= 2.0).all()  # Pendulum's torque bounds
    assert (actions == model.predict(obs, deterministic=True)[0]).all()  # the trainer's greedy actions


def test_greedy_play_counts_each_copys_first_episode():
    env = bench_module.eval_env("Pendulum-v1", episodes=2)
    try:
        returns = bench_module.play_greedy(lambda obs: [[0.0]] * len(obs), env, seed=3)
        again = bench_module.play_greedy(lambda obs: [[0.0]] * len(obs), env, seed=3)
    finally:
        env.close()
    assert returns.shape == (2,) and (returns < 0).all()  # 200 steps of Pendulum's costs each
    assert (returns == again).all()  # seeded: the same episodes


def test_ours_snapshots_follow_the_paced_env_step_count(tmp_path):
    class Base:
        def __init__(self):
            self.updates = 0
            self.algorithm = type("A", (), {"policy_state": lambda self: {"w": __import__("torch").ones(1)}})()

        def step(self):
            self.updates += 1
            return {}

    learner_cls = type("L", (wc.PacedSnapshots, Base), {}).bound(
        run_dir=str(tmp_path), every=1_000, started=0.0, learning_starts=500, updates_per_step=0.25)
    learner = learner_cls()
    for _ in range(400):  # 500 + 400 / 0.25 = 2,100 env steps
        learner.step()
    names = wc.snapshot_names(str(tmp_path))
    assert names == ["snap-000000001000.pt", "snap-000000002000.pt"]
    with pytest.raises(ValueError):
        wc.PacedSnapshots.bound(run_dir="", every=1, started=0.0, learning_starts=0, updates_per_step=1.0)
