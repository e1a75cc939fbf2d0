"""Ape-X R2D2 (``--algorithm r2d2``): recurrent actors add sequences to the
prioritized replay, in one process and in a local world with the shards on the
actors, two learners in step and a killed actor that rejoins, and the job resumes and evaluates (with a greedy policy that keeps its
recurrent state per episode) like Ape-X DQN."""

import json
import os

import pytest
from jobs import apex_config

from experiments import apex, evaluate


def r2d2_config(log_dir="none", **over):
    settings = {"env_id": "rlpar/StatelessCartPole-v1", "algorithm": "r2d2", "learning_starts": 200,
                "batch_size": 8, "hidden": "16", "lstm_size": 16, "eval_every": 1000, "eval_episodes": 2,
                "max_env_steps": 1500, **over}
    return apex_config(log_dir, **settings)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("last_action_reward", [False, True], ids=["lstm", "lstm-last-action-reward"])
def test_serial_r2d2_learns_from_sequences_resumes_and_evaluates(tmp_path, last_action_reward):
    # 0.05 updates per env step past learning_starts: (800 - 200) / 20 = 30 updates.
    summary = apex.run(r2d2_config(str(tmp_path), serial=True, max_env_steps=800, eval_every=800,
                                   last_action_reward=last_action_reward), quiet=True)
    assert summary["algorithm"] == "algorithms.r2d2.r2d2.R2D2" and summary["updates"] > 10
    run_dir = summary["run_dir"]
    saved = json.load(open(os.path.join(run_dir, "config.json")))
    assert saved["algorithm"] == "r2d2" and saved["r2d2"]["lstm_size"] == 16
    assert saved["r2d2"]["last_action_reward"] is last_action_reward
    assert saved["learn"]["n_step"] == 5 and saved["learn"]["updates_per_step"] == 0.05  # R2D2_DEFAULTS
    resumed = apex.run(r2d2_config(str(tmp_path), serial=True, resume=run_dir, max_env_steps=1200), quiet=True)
    assert resumed["resumed_from_step"] == summary["env_steps"] and resumed["updates"] > summary["updates"]
    with pytest.raises(ValueError, match="--lstm-size cannot change when resuming"):
        apex.run(r2d2_config(str(tmp_path), serial=True, resume=run_dir, lstm_size=32), quiet=True)
    if not last_action_reward:  # the network's inputs are the checkpoint's shape too (a Python
        # caller's fields equal to the defaults are not overrides: the resume above kept the saved True)
        with pytest.raises(ValueError, match="--last-action-reward cannot change when resuming"):
            apex.run(r2d2_config(str(tmp_path), serial=True, resume=run_dir, last_action_reward=True), quiet=True)
    # Its replay holds sequences of burn-in + unroll + n-step steps: n-step is fixed too.
    with pytest.raises(ValueError, match="--n-step cannot change when resuming"):
        apex.run(r2d2_config(str(tmp_path), serial=True, resume=run_dir, n_step=2), quiet=True)
    out = evaluate.evaluate_run(run_dir, which="best")
    assert out["matches_recorded"], out


@pytest.mark.timeout(120)
def test_r2d2_in_a_local_world_with_sequence_shards_on_the_actors_two_learners_and_an_actor_killed(
        tmp_path, monkeypatch):
    monkeypatch.setenv("KILL_MARKER", str(tmp_path / "killed"))
    monkeypatch.setenv("KILL_RANK", "3")  # actor 1 (ranks 0-1 are the learners), the evaluator
    # Its env's 600th step: 1200 of the actor's, about 2400 in all, past the 2000 (learning_starts
    # and the slack) that actors run before the learner starts: after the first updates.
    monkeypatch.setenv("KILL_AFTER", "600")
    # learning_starts 1000 env steps: paced actors stop 1000 (the slack) past it until
    # the learner starts, so the sequences it waits for must come in fewer steps.
    summary = apex.run(r2d2_config(env_id="user_envs:KillOnceCounting-v0", replay_placement="actors", learners=2,
                                   learning_starts=1000, max_env_steps=3200), quiet=True)
    assert summary["algorithm"] == "algorithms.r2d2.r2d2.R2D2" and summary["num_actors"] == 2
    assert summary["updates"] > 0 and summary["env_steps"] >= 3200
    assert summary["learners"] == 2 and summary["learners_identical"]  # R2D2's grad_hook averages
    # The killed actor alone was restarted and rejoined (its shard rehosted by the learners).
    assert (tmp_path / "killed").exists() and summary["actor_restarts"] == 1 and summary["restarts"] == 0


@pytest.mark.timeout(120)
def test_one_learner_starts_when_its_episodes_make_fewer_sequences_than_pacing_allows():
    # One 12-step episode in ten (the others 3 steps, too short for a sequence): a
    # sequence per 39 env steps. The learner waits for learning_starts / (2 period) =
    # 63; pacing's allowance before it (learning_starts + the slack, 2000 env steps)
    # makes about 51. Without filling the actors stopped there and no update ever came.
    summary = apex.run(r2d2_config(env_id="user_envs:MostlyShortCounting-v0", learning_starts=1000,
                                   max_env_steps=4000, max_seconds=60.0), quiet=True)
    assert summary["stop_reason"] == "env step budget" and summary["updates"] > 0


@pytest.mark.timeout(60)
def test_episodes_shorter_than_the_burn_in_are_learned_from_where_episode_starts_are_trained():
    # Episodes of 3 and 12 steps, --burn-in 16: under the paper's rule no sequence is
    # ever kept (18 steps needed), and the actors end the run saying so; trained from
    # their first step, an episode's first sequences need 2.
    short = dict(env_id="user_envs:MostlyShortCounting-v0", serial=True, burn_in=16, max_env_steps=800)
    with pytest.raises(ValueError, match=r"needs 18 steps \(--burn-in \+ 2\).*--train-episode-starts"):
        apex.run(r2d2_config(**short), quiet=True)
    summary = apex.run(r2d2_config(**short, train_episode_starts=True), quiet=True)
    assert summary["updates"] > 0


def test_replay_capacity_counts_env_steps_and_r2d2_holds_one_sequence_per_period():
    # A sequence adds `period` new env steps (the rest overlap its neighbours), so
    # --replay-capacity 100000 holds 12,500 sequences of period 8, as it holds 100,000
    # transitions for DQN: the same span of experience, not 8 times it.
    from types import SimpleNamespace

    from gymnasium import spaces

    from algorithms.builder import EnvSpec, Flow
    from algorithms.dqn.config import ApexConfig
    from algorithms.r2d2 import R2D2Builder, R2D2Config
    from experiments.roles.actor_learner.data import replay_items
    from experiments.runtime.data import ReplayConfig

    spec = EnvSpec(spaces.Box(-1, 1, (2,)), spaces.Discrete(2))
    learn = ApexConfig(lr=1e-3, n_step=5, batch_size=32, hidden=(8,), learning_starts=1000, updates_per_step=0.05)
    flow = R2D2Builder(learn=learn, r2d2=R2D2Config(burn_in=4, unroll=16, period=8, lstm_size=8), spec=spec).flow
    assert flow.items == "sequences" and flow.steps_per_item == 8

    def setup(capacity, flow):
        return SimpleNamespace(path=SimpleNamespace(replay=ReplayConfig(replay_capacity=capacity)), flow=flow)

    assert replay_items(setup(100_000, flow)) == 12_500
    assert replay_items(setup(5, flow)) == 1  # never an empty replay
    transitions = Flow(data="replay", batch_size=32, push_every=1, pull_every=1, held_steps=4, updates_per_step=0.25)
    assert transitions.steps_per_item == 1 and replay_items(setup(100_000, transitions)) == 100_000
    with pytest.raises(ValueError, match="steps_per_item must be >= 1"):
        Flow(data="replay", batch_size=1, push_every=1, pull_every=1, held_steps=1, updates_per_step=1.0,
             steps_per_item=0)


def test_a_batch_of_sequences_larger_than_the_replay_holds_is_named_with_the_period():
    with pytest.raises(ValueError, match=r"--batch-size 16 exceeds --replay-capacity 100 / --period 8 = 12"):
        r2d2_config(batch_size=16, replay_capacity=100, period=8).validate()
    with pytest.raises(ValueError, match=r"exceeds a learner's replay shard: --replay-capacity 200 / --period 8 / "
                                         r"--learners 2 = 12"):
        r2d2_config(batch_size=16, replay_capacity=200, period=8, learners=2).validate()
    r2d2_config(batch_size=12, replay_capacity=100, period=8).validate()  # 12 sequences fit
    # DQN's items are transitions: the same flag holds 100 of them.
    apex_config(env_id="CartPole-v1", algorithm="dqn", batch_size=16, replay_capacity=100).validate()


@pytest.mark.parametrize("argv, capacity, items", [
    (["--algorithm", "r2d2"], 800_000, 100_000),  # R2D2Builder.replay_steps, period 8
    (["--algorithm", "r2d2", "--replay-capacity", "80000", "--period", "4"], 80_000, 20_000),
    (["--algorithm", "dqn"], 100_000, 100_000),
])
def test_the_replay_capacity_left_out_is_the_algorithms_in_env_steps(argv, capacity, items):
    from types import SimpleNamespace

    from experiments.apex import ApexJobConfig, builder, job
    from experiments.roles.actor_learner.data import replay_items
    from experiments.runtime import Parts
    from experiments.runtime.job import check_command

    config, _ = check_command(job, ApexJobConfig, ["--env-id", "rlpar/StatelessCartPole-v1", *argv])
    assert config.replay.replay_capacity == capacity
    from algorithms.builder import EnvSpec
    from envs.registry import EnvFactory

    env = EnvFactory.from_id("rlpar/StatelessCartPole-v1")()
    flow = builder(config, Parts(), EnvSpec(observation_space=env.observation_space, action_space=env.action_space)).flow
    env.close()
    assert replay_items(SimpleNamespace(path=SimpleNamespace(replay=config.replay), flow=flow)) == items


@pytest.mark.parametrize("env_id, argv, steps", [
    ("rlpar/BreakoutNoTrail-v1", [], 1_000_000),  # a small image: the run's --max-env-steps (the job's 1M)
    ("rlpar/BreakoutNoTrail-v1", ["--max-env-steps", "1200000"], 1_200_000),
    ("rlpar/BreakoutNoTrail-v1", ["--lr-anneal-steps", "0"], 0),  # given: kept
    ("rlpar/StatelessCartPole-v1", [], 0),  # vectors: constant
    ("rlpar/StatelessCartPole-v1", ["--lr-anneal-steps", "5000"], 5000),
])
def test_r2d2_anneals_its_rate_over_the_run_on_small_images_and_keeps_it_constant_on_vectors(env_id, argv, steps):
    from experiments.apex import ApexJobConfig, job
    from experiments.runtime.job import check_command

    config, _ = check_command(job, ApexJobConfig, ["--env-id", env_id, "--algorithm", "r2d2", *argv])
    assert config.r2d2.lr_anneal_steps == steps


def test_the_r2d2_section_is_filled_by_family_for_r2d2_alone():
    from algorithms.params import RUN_BUDGET
    from algorithms.r2d2.config import DEFAULTS_BY_FAMILY
    from experiments.apex import ApexJobConfig, fill_r2d2

    assert DEFAULTS_BY_FAMILY["small_image"]["lr_anneal_steps"] == RUN_BUDGET
    assert fill_r2d2(ApexJobConfig().r2d2, family="small_image", run_budget=777).lr_anneal_steps == 777
    assert fill_r2d2(ApexJobConfig().r2d2, family="frames", run_budget=777).lr_anneal_steps == 0
    # Another algorithm's run leaves R2D2's section as it was: its flags were never given.
    from experiments.apex import job
    from experiments.runtime.job import check_command

    config, _ = check_command(job, ApexJobConfig, ["--env-id", "rlpar/StatelessCartPole-v1", "--algorithm", "dqn"])
    assert config.r2d2.lr_anneal_steps is None


def test_an_unfilled_replay_capacity_is_named_not_used():
    from types import SimpleNamespace

    from algorithms.builder import Flow
    from experiments.roles.actor_learner.data import replay_items
    from experiments.runtime.data import ReplayConfig

    flow = Flow(data="replay", batch_size=1, push_every=1, pull_every=1, held_steps=1, updates_per_step=1.0)
    with pytest.raises(ValueError, match="replay_capacity is not filled"):
        replay_items(SimpleNamespace(path=SimpleNamespace(replay=ReplayConfig()), flow=flow))


@pytest.mark.parametrize("argv, named", [
    (["--algorithm", "dqn", "--burn-in", "5", "--lstm-size", "32"], "--burn-in (r2d2), --lstm-size (r2d2)"),
    (["--algorithm", "r2d2", "--noisy"], "--noisy (dqn)"),
    (["--burn-in", "5"], "--burn-in (r2d2): not dqn's flags"),  # auto: dqn for a Discrete space
    (["--algorithm", "r2d2", "--tau", "0.005", "--fast", "compile"], "--tau (unused by r2d2), --fast (unused by r2d2)"),
])
def test_a_flag_of_another_algorithm_is_refused_not_ignored(argv, named):
    import re

    from experiments.apex import ApexJobConfig, job
    from experiments.runtime.job import check_command

    with pytest.raises(ValueError, match=re.escape(named)):
        check_command(job, ApexJobConfig, ["--env-id", "rlpar/StatelessCartPole-v1", *argv])


def test_an_algorithms_own_default_for_a_learn_flag_it_does_not_read_is_accepted():
    # What the benches and fill_learn set: R2D2's tau (1.0, a hard copy) is its default.
    from experiments.apex import ApexJobConfig, job
    from experiments.runtime.job import check_command

    config, _ = check_command(job, ApexJobConfig, ["--env-id", "rlpar/StatelessCartPole-v1", "--algorithm", "r2d2",
                                                   "--tau", "1.0"])
    assert config.learn.tau == 1.0


def test_continuous_flags_belong_to_td3_ddpg_and_sac_and_sacs_own_to_sac_alone():
    from experiments.apex import ApexJobConfig, job
    from experiments.runtime.job import check_command

    for algorithm in ("td3", "sac"):  # the continuous section is both's
        check_command(job, ApexJobConfig, ["--env-id", "Pendulum-v1", "--algorithm", algorithm, "--random-start"])
    with pytest.raises(ValueError, match="--alpha \\(sac\\): not ddpg's flags"):
        check_command(job, ApexJobConfig, ["--env-id", "Pendulum-v1", "--algorithm", "ddpg", "--alpha", "0.5"])
    # Epsilon-greedy's flags and DQN's target copies are not theirs either.
    with pytest.raises(ValueError, match="--target-update \\(unused by sac\\), --eps \\(unused by sac\\)"):
        check_command(job, ApexJobConfig, ["--env-id", "Pendulum-v1", "--algorithm", "sac", "--eps", "0.1",
                                           "--target-update", "100"])


@pytest.mark.parametrize("algorithm, argv, item_bytes", [
    # R2D2: every observation of a sequence of burn-in + unroll + learn's n-step steps.
    ("r2d2", ["--n-step", "3"], (4 + 16 + 3) * 4 * 84 * 84),
    ("dqn", [], 84 * 84),  # shared frames: about one frame a transition
    ("dqn", ["--no-share-frames"], 2 * 4 * 84 * 84),
])
def test_a_replay_too_large_for_the_memory_is_named_before_anything_starts(algorithm, argv, item_bytes):
    # Atari frame stacks: R2D2's default replay (100,000 sequences) is 66 GiB.
    import gymnasium as gym

    from experiments.apex import ApexJobConfig, check_replay_fits
    from experiments.runtime.cli import apply_overrides

    config = ApexJobConfig()
    config.env.env_id, config.algorithm = "ALE/Pong-v5", algorithm
    config.replay.replay_capacity = 800_000
    config.learn.n_step = 3 if algorithm == "r2d2" else 1
    if argv:
        apply_overrides(config, {"share_frames": False})
    frames = gym.spaces.Box(0, 255, (4, 84, 84), dtype="uint8")
    items = 800_000 // (8 if algorithm == "r2d2" else 1)
    check_replay_fits(config, frames, available=items * item_bytes)  # fits exactly
    with pytest.raises(ValueError, match=r"--replay-capacity 800000 needs .* GiB for .*more than the .* GiB this "
                                         r"machine has available: give a smaller --replay-capacity \(e\.g\. ") as err:
        check_replay_fits(config, frames, available=items * item_bytes - 1)
    # The suggestion (env steps) takes half the memory, to within an item.
    suggested = int(str(err.value).split("e.g. ")[1].split(" ")[0].replace(",", ""))
    per_step = item_bytes / (8 if algorithm == "r2d2" else 1)
    assert abs(suggested * per_step - (items * item_bytes - 1) / 2) <= item_bytes


def test_each_holder_of_a_split_replay_needs_its_share_only():
    import gymnasium as gym

    from experiments.apex import ApexJobConfig, check_replay_fits

    config = ApexJobConfig()
    config.algorithm, config.learners, config.replay.replay_capacity = "dqn", 4, 1000
    obs = gym.spaces.Box(-1, 1, (10,), dtype="float32")
    check_replay_fits(config, obs, available=250 * 80)  # a learner's shard: 250 transitions of 2 x 40 bytes
    with pytest.raises(ValueError, match=r"\(one of 4 learner shards\)"):
        check_replay_fits(config, obs, available=250 * 80 - 1)


def test_a_rate_annealed_to_zero_before_the_budget_is_warned_about(caplog):
    # The steps after the rate reached 0 learn nothing: what a budget raised on --resume
    # (which keeps the annealing the run started with) or a short --lr-anneal-steps gives.
    from experiments.apex import ApexJobConfig, job
    from experiments.runtime.job import check_command

    argv = ["--env-id", "rlpar/BreakoutNoTrail-v1", "--algorithm", "r2d2", "--max-env-steps", "2000000"]
    with caplog.at_level("WARNING", logger="experiments.runtime.job"):
        check_command(job, ApexJobConfig, argv)  # annealed over the run: nothing to say
        assert not caplog.records
        check_command(job, ApexJobConfig, [*argv, "--lr-anneal-steps", "1000000"])
    (record,) = caplog.records
    assert ("--lr-anneal-steps 1,000,000 is below --max-env-steps 2,000,000" in record.getMessage()
            and "--lr-anneal-steps 2000000" in record.getMessage())
