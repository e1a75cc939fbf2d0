"""The POMDP benchmark: its --quick mode on StatelessCartPole end to end (not a
measurement), the evaluators' recurrent greedy policies, flag errors, and the report
lines its curve gives."""

import importlib.util
import json
import os

import numpy as np
import pytest

from experiments.bench.pomdp import budget as bench_module
from experiments.bench.tools import wallclock as wc

RUN_KEYS = {"env", "env_id", "impl", "seed", "budget_s", "env_steps", "env_steps_per_s", "updates", "updates_per_s",
            "wait_fraction", "best_eval_greedy", "final_eval_greedy", "score", "reached_score_at_s", "crossings",
            "return_at_s", "loadavg_start", "loadavg_end", "eval_cpu_s", "settings"}
CONTRIB = importlib.util.find_spec("sb3_contrib") is not None


@pytest.mark.timeout(240)
def test_quick_mode_writes_report_and_run_lines_per_impl(tmp_path, capsys):
    # The bench's main in this process: each run's trainer and evaluator are its children.
    # Ours end to end as R2D2 (Ape-X DQN runs the same trainer and evaluator code with
    # another --algorithm: its policy is tested below); the peer where installed.
    # R2D2 in one process (--serial, as the MinAtar bench's test runs Ape-X): the bench's
    # plumbing is what this tests, and the local world's start cost most of its run.
    impls = ["rlpar-r2d2", "sb3-recurrent-ppo"]
    assert bench_module.main(["--quick", "--impls", ",".join(impls), "--flags", "rlpar-r2d2=--serial",
                              "--out", str(tmp_path)]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    runs = [r for r in records if r["kind"] == "run"]
    assert [r["impl"] for r in runs] == (impls if CONTRIB else ["sb3-recurrent-ppo", "rlpar-r2d2"])
    for run in runs:
        assert run["bench"] == "pomdp" and run["env"] == "StatelessCartPole"
        if "skipped" in run:
            assert not CONTRIB and "sb3_contrib is not installed" in run["skipped"]
            continue
        assert RUN_KEYS <= set(run), RUN_KEYS - set(run)
        assert "error" not in run, run
        assert run["quick"] and run["budget_s"] == 20.0 and run["score"] == 475.0
        assert run["evaluations"] >= 1 and 1.0 <= run["final_eval_greedy"] <= 500.0  # CartPole's returns
        curve = wc.read_curve(os.path.dirname(run["curve"]))
        assert curve[-1]["final"] and curve[-1]["env_steps"] == run["env_steps"]
        reports = [r for r in records if r["kind"] == "report" and r["impl"] == run["impl"]]
        assert [r["at_s"] for r in reports] == [round(20.0 * k / 6, 1) for k in range(1, 7)]
        assert list(run["return_at_s"].values()) == [r["greedy"] for r in reports]
    assert runs[0 if CONTRIB else 1]["settings"]["algorithm"] == "r2d2" and runs[0 if CONTRIB else 1]["flags"] == "--serial"
    with open(tmp_path / "results.jsonl") as f:
        assert [json.loads(line) for line in f] == records
    assert (tmp_path / "pomdp-StatelessCartPole.png").stat().st_size > 0


ENV_IDS = ["rlpar/StatelessCartPole-v1"] + (
    ["rlpar/BreakoutNoTrail-v1"] if importlib.util.find_spec("minatar") else [])


@pytest.mark.parametrize("env_id", ENV_IDS)
@pytest.mark.parametrize("impl", ["rlpar-r2d2", "rlpar-dqn"])
def test_ours_evaluator_plays_the_runs_greedy_policy(impl, env_id):
    # A snapshot is the algorithm's policy_state; the evaluator rebuilds the network from
    # the flags and plays the builder's greedy policy (R2D2: its recurrent state per episode).
    from algorithms.builder import EnvSpec
    from algorithms.rollout import evaluate
    from envs.registry import EnvFactory
    from experiments.apex import builder, env_defaults
    from experiments.bench.pomdp import ours
    from experiments.runtime import Parts

    load, act = ours.policy(impl, env_id, flags="", quick=True)
    config = ours.apex_config(impl, env_id, "", quick=True)
    env_defaults(config, Parts())
    factory = EnvFactory.from_id(env_id)
    one = factory()
    run = builder(config, Parts(), EnvSpec(observation_space=one.observation_space, action_space=one.action_space))
    one.close()
    trained = run.make_algorithm(device="cpu", seed=1)
    load(trained.policy_state())
    import gymnasium as gym

    envs = gym.vector.SyncVectorEnv([factory] * 2)
    returns = evaluate(act, envs, episodes=2, seed=3)
    again = evaluate(run.greedy(trained), envs, episodes=2, seed=3)
    envs.close()
    assert returns.shape == (2,) and (returns == again).all()  # the run's own greedy play
    assert hasattr(act, "episodes_started") == (impl == "rlpar-r2d2")


@pytest.mark.skipif(not CONTRIB, reason="sb3-contrib is not installed (the bench extra)")
def test_recurrent_ppo_greedy_keeps_one_lstm_state_per_episode():
    from experiments.bench.pomdp import peers

    load, act = peers.policy(peers.CARTPOLE)
    net = act.policy
    load({k: v + 0.01 for k, v in net.state_dict().items()})  # a snapshot: loads, and play starts afresh
    obs = np.array([[0.01, 0.02], [-0.03, 0.01]], dtype=np.float32)
    act.episodes_started(np.ones(2, dtype=bool))
    first = act(obs)
    state = act.state
    expected, _ = net.predict(obs, state=state, episode_start=np.zeros(2, dtype=bool), deterministic=True)
    assert (act(obs) == expected).all()  # the state carries over within an episode
    act.episodes_started(np.array([True, False]))  # row 0 starts an episode: its state is zeroed
    restarted, _ = net.predict(obs, state=act.state, episode_start=np.array([True, False]), deterministic=True)
    assert (act(obs) == restarted).all() and first.shape == (2,)


@pytest.mark.parametrize("flags, named", [
    (["--envs", "StatelessCartPole,Pong"], "Pong"),
    (["--impls", "rlpar-r2d2,sb3-ppo"], "sb3-ppo"),
    (["--reports", "0"], "--reports"),
    (["--budget-s", "0"], "--budget-s"),
    (["--flags", "sb3-recurrent-ppo=--n-steps 8"], "--flags"),
    (["--flags", "rlpar-r2d2=--no-such-flag"], "--no-such-flag"),
    (["--flags", "rlpar-dqn=--algorithm r2d2"], "--algorithm"),
])
def test_bad_flags_exit_2_naming_them_before_any_run(tmp_path, capsys, flags, named):
    with pytest.raises(SystemExit) as exit_:
        bench_module.main([*flags, "--out", str(tmp_path)])
    assert exit_.value.code == 2
    assert named in capsys.readouterr().err
    assert not (tmp_path / "results.jsonl").exists()


def record(steps, wall, greedy, final=False):
    return {"env_steps": steps, "wall_s": wall, "final": final, "greedy": greedy, "greedy_std": 1.0}


def test_reports_give_the_last_evaluation_taken_by_each_time():
    curve = [record(5_000, 70.0, 20.0), record(10_000, 130.0, 150.0), record(15_000, 210.0, 480.0),
             record(17_000, 600.0, 300.0, final=True)]
    times = bench_module.report_times(600.0, 6)
    assert times == [100.0, 200.0, 300.0, 400.0, 500.0, 600.0]
    assert [bench_module.report_at(curve, t)["greedy"] for t in times] == [20.0, 150.0, 480.0, 480.0, 480.0, 300.0]
    assert bench_module.report_at(curve, 50.0) == {"at_s": 50.0, "greedy": None, "greedy_std": None,
                                                   "env_steps": None, "snapshot_s": None}
    summary = bench_module.summarize(curve, levels=(475.0, 200.0), times=times)
    assert summary["reached_score_at_s"] == 210.0 and summary["reached_score_at_steps"] == 15_000
    assert summary["best_eval_greedy"] == 480.0 and summary["final_eval_greedy"] == 300.0
    assert summary["return_at_s"]["100"] == 20.0 and summary["return_at_s"]["600"] == 300.0


def test_each_env_has_its_env_step_cap_and_a_given_one_replaces_it(tmp_path):
    # BreakoutNoTrail's runs stop at 1.2M env steps (ours anneal R2D2's rate over the cap);
    # StatelessCartPole's cap is out of reach; --quick's is 1,000.
    def cap(*argv):
        args = bench_module.parse([*argv, "--out", str(tmp_path)])
        command = bench_module.child_command(args, args.env_list[0], "rlpar-r2d2", 0, str(tmp_path))
        return int(command[command.index("--max-env-steps") + 1])

    assert cap("--envs", "BreakoutNoTrail") == 1_200_000
    assert cap("--envs", "StatelessCartPole") == bench_module.MAX_ENV_STEPS
    assert cap("--envs", "BreakoutNoTrail", "--max-env-steps", "5000") == 5000
    assert cap("--quick") == 1_000
