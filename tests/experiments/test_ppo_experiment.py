"""The PPO job on the synchronous data-parallel program: one member in one process
(updates, checkpoint, resume, the best evaluation replayed), two members whose
parameters are bit-identical after every update while their data differ, DD-PPO's
preemption of a slow member, and a killed member restarting the world from its
checkpoint, which the lead first brings up to its last whole update."""

import dataclasses
import os
import warnings

import gymnasium as gym
import pytest
from jobs import scalars
from sync_parts import (
    DiesMidUpdatePPO,
    KilledOncePPO,
    TracedPPO,
    dies_mid_rollout,
    slow_cartpole,
    traces,
)

from algorithms.builder import EnvSpec
from experiments import evaluate, ppo
from experiments.runtime import Parts
from experiments.runtime.cli import apply_overrides
from experiments.runtime.entry import job_env_fn
from experiments.runtime.envs import env_spaces


def ppo_config(log_dir: str = "none", **over):
    config = ppo.PPOJobConfig()
    apply_overrides(config, {
        "num_envs": 2, "n_steps": 16, "minibatches": 2, "epochs": 2, "hidden": "16", "eval_every": 200,
        "eval_episodes": 3, "target_return": 1e9, "max_env_steps": 400, "max_seconds": 90.0,
        "log_dir": log_dir, "status_every": 0.0, "rpc_timeout": 30.0, **over})
    return config


@pytest.mark.timeout(120)
def test_one_member_learns_resumes_and_replays_its_best_evaluation(tmp_path):
    summary = ppo.run(ppo_config(str(tmp_path)), quiet=True)
    assert summary["members"] == 1 and summary["backend"] == "none"
    assert summary["updates"] == summary["env_steps"] // 32 >= 12 and summary["evaluations"] >= 1
    run_dir = summary["run_dir"]
    tags = scalars(run_dir)
    for tag in ("charts/episodic_return", "charts/SPS", "losses/policy_loss", "losses/approx_kl", "eval/return",
                "sync/rollout_steps"):
        assert tag in tags, sorted(tags)
    resumed = ppo.run(ppo_config(str(tmp_path), resume=run_dir, max_env_steps=640), quiet=True)
    assert resumed["resumed_from_step"] == summary["env_steps"]
    assert resumed["updates"] == summary["updates"] + (640 - summary["env_steps"]) // 32
    assert resumed["env_steps"] >= 640
    out = evaluate.evaluate_run(run_dir, which="best")  # the evaluated network, replayed exactly
    assert out["matches_recorded"], out


@pytest.mark.timeout(120)
def test_a_run_that_never_evaluates_builds_no_evaluation_envs(monkeypatch):
    # The lead builds them at its first evaluation: an Atari env costs a ROM load each.
    import envs

    built = []
    make = envs.make_vector_env
    monkeypatch.setattr(envs, "make_vector_env", lambda fn, **kw: built.append(kw["num_envs"]) or make(fn, **kw))
    summary = ppo.run(ppo_config(eval_every=10**9, eval_episodes=5, max_env_steps=128), quiet=True)
    assert summary["evaluations"] == 0 and summary["env_steps"] >= 128
    assert 5 not in built, built


@pytest.mark.timeout(120)
def test_two_members_keep_bit_identical_parameters_on_different_data(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACE_DIR", str(tmp_path))
    summary = ppo.run(ppo_config(num_workers=2, max_env_steps=384), parts=Parts(algorithm=TracedPPO), quiet=True)
    assert summary["members"] == 2 and summary["backend"] == "gloo" and summary["env_steps"] >= 384
    ranks = traces(tmp_path)
    assert sorted(ranks) == [0, 1] and len(ranks[0]) == len(ranks[1]) == summary["updates"] >= 6
    for ours, theirs in zip(ranks[0], ranks[1]):
        assert ours["update"] == theirs["update"]
        assert ours["params"] == theirs["params"], (ours, theirs)  # after every update
        assert ours["data"] != theirs["data"]  # each member learned from its own envs


@pytest.mark.timeout(120)
def test_a_straggler_is_preempted_once_the_others_finished(tmp_path, monkeypatch):
    """DD-PPO: member 1's env sleeps 10 ms a step, so member 0 always finishes first;
    with --preempt-fraction 0.5 member 1 then stops, after at least a quarter of its
    16 steps, and both learn with the same number of minibatch steps (identical
    parameters)."""
    monkeypatch.setenv("TRACE_DIR", str(tmp_path))
    monkeypatch.setenv("SLOW_RANK", "1")
    monkeypatch.setenv("SLOW_STEP_S", "0.01")
    summary = ppo.run(ppo_config(num_workers=2, preempt_fraction=0.5, max_env_steps=300, eval_every=10_000),
                      parts=Parts(algorithm=TracedPPO, env=slow_cartpole), quiet=True)
    assert summary["stop_reason"] == "env step budget"
    fast, slow = traces(tmp_path)[0], traces(tmp_path)[1]
    assert len(fast) == len(slow) >= 3
    assert all(t["steps"] == 16 for t in fast), fast
    assert all(4 <= t["steps"] < 16 for t in slow), slow
    assert summary["preempted_rollouts"] == len(slow)
    assert [t["params"] for t in fast] == [t["params"] for t in slow]


@pytest.mark.timeout(180)
def test_a_killed_member_restarts_the_world_from_the_newest_checkpoint(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    for name, value in (("TRACE_DIR", tmp_path), ("KILL_MARKER", tmp_path / "killed"), ("KILL_RANK", "1"),
                        ("KILL_AFTER", "4"), ("RUNS", runs)):
        monkeypatch.setenv(name, str(value))
    summary = ppo.run(ppo_config(str(runs), num_workers=2, max_env_steps=640, checkpoint_every=0.001,
                                 eval_every=10_000), parts=Parts(algorithm=KilledOncePPO), quiet=True)
    assert (tmp_path / "killed").exists()
    assert summary["restarts"] == 1 and summary["resumed_from_step"] > 0
    assert summary["stop_reason"] == "env step budget" and summary["env_steps"] >= 640
    assert os.path.exists(os.path.join(summary["run_dir"], "policy.pt"))
    # The restarted world's members start from the lead's state: identical again.
    second = traces(tmp_path, last_world=True)
    assert len(second[0]) == len(second[1]) >= 1
    assert [t["params"] for t in second[0]] == [t["params"] for t in second[1]]

@pytest.mark.timeout(120)
@pytest.mark.parametrize("where", ["rollout", "update"])
def test_a_members_death_restarts_the_world_from_the_last_whole_update(tmp_path, monkeypatch, where):
    """Member 1 dies after 3 whole updates, with no scheduled checkpoint near: while the
    lead is in the middle of its next rollout (the launcher must give it the time to
    reach its next collective, learn of the death and save), or one optimizer step into
    the next update (the lead saves the state that update started from, not a
    half-applied one). The restarted world goes on from update 3 exactly."""
    after = 3
    for name, value in (("TRACE_DIR", tmp_path), ("KILL_MARKER", tmp_path / "killed"), ("KILL_RANK", "1"),
                        ("KILL_AFTER", after), ("N_STEPS", 16)):
        monkeypatch.setenv(name, str(value))
    parts = (Parts(algorithm=TracedPPO, env=dies_mid_rollout) if where == "rollout"
             else Parts(algorithm=DiesMidUpdatePPO))
    summary = ppo.run(ppo_config(str(tmp_path / "runs"), num_workers=2, max_env_steps=320, checkpoint_every=1e4,
                                 eval_every=10_000), parts=parts, quiet=True)
    assert (tmp_path / "killed").exists()
    assert summary["restarts"] == 1
    assert summary["resumed_from_step"] == after * 2 * 2 * 16  # members x envs x steps per update
    assert summary["stop_reason"] == "env step budget" and summary["env_steps"] >= 320
    second = traces(tmp_path, last_world=True)[0]
    first = [t for t in traces(tmp_path)[0] if t["pid"] != second[0]["pid"]]
    assert first[-1]["update"] == after
    assert second[0]["update"] == after + 1
    assert second[0]["start"] == first[-1]["params"]  # the checkpoint held update 3's parameters


def test_bad_flags_are_named():
    with pytest.raises(ValueError, match="--preempt-fraction must be in"):
        ppo.run(ppo_config(preempt_fraction=1.5))
    with pytest.raises(ValueError, match="--preempt-min must be in"):
        ppo.run(ppo_config(preempt_min=0.0))
    with pytest.raises(ValueError, match="--serial runs one member"):
        ppo.run(ppo_config(serial=True, num_workers=2))
    with pytest.raises(ValueError, match="--minibatches"):
        ppo.run(ppo_config(minibatches=0))
    with pytest.raises(ValueError, match="cannot make 64 minibatches"):
        ppo.run(ppo_config(serial=True, minibatches=64))
    with pytest.raises(ValueError, match="--lr-anneal-steps must be >= 0"):
        ppo.run(ppo_config(lr_anneal_steps=-1))


def test_images_anneal_the_learning_rate_over_the_runs_budget_unless_given():
    """MinAtar (small images) anneals over ``--max-env-steps`` as CleanRL over its total
    steps; CartPole (vectors) keeps its rate; a given length is kept."""
    minatar = ppo_config(env_id="MinAtar/Breakout-v0", max_env_steps=3_000_000)
    ppo.env_defaults(minatar, Parts())
    assert (minatar.learn.lr, minatar.learn.lr_anneal_steps) == (7e-4, 3_000_000)
    spec = EnvSpec(*env_spaces(job_env_fn(minatar, Parts())))
    made = ppo.builder(dataclasses.replace(minatar, env=dataclasses.replace(minatar.env, num_envs=8)), Parts(), spec)
    assert made.config.lr_anneal_updates == 3_000_000 // (8 * 16)  # one update: 8 envs x 16 steps, one member
    given = ppo_config(env_id="MinAtar/Breakout-v0", lr_anneal_steps=7)
    ppo.env_defaults(given, Parts())
    assert given.learn.lr_anneal_steps == 7
    cartpole = ppo_config()
    ppo.env_defaults(cartpole, Parts())
    assert (cartpole.learn.lr, cartpole.learn.lr_anneal_steps) == (1e-3, 0)


def test_images_step_32_envs_with_a_larger_entropy_bonus_unless_given():
    """MinAtar (small images) fills --num-envs 32 and --entropy-coef 0.05 (experiments/tuning.md,
    "PPO on MinAtar"); CartPole keeps CleanRL's 8 and 0.01; given values are kept, and a
    config left unfilled says which flags are missing rather than building a PPO."""
    minatar = ppo.PPOJobConfig()
    apply_overrides(minatar, {"env_id": "MinAtar/Breakout-v0"})
    assert minatar.env.num_envs is None and minatar.learn.entropy_coef is None
    spec = EnvSpec(*env_spaces(job_env_fn(minatar, Parts())))
    with pytest.raises(ValueError, match="--lr, --entropy-coef, --lr-anneal-steps, --clip-coef unset"):
        ppo.builder(minatar, Parts(), spec)
    ppo.env_defaults(minatar, Parts())
    assert (minatar.env.num_envs, minatar.learn.entropy_coef) == (32, 0.05)
    given = ppo.PPOJobConfig()
    apply_overrides(given, {"env_id": "MinAtar/Breakout-v0", "num_envs": 4, "entropy_coef": 0.02})
    ppo.env_defaults(given, Parts())
    assert (given.env.num_envs, given.learn.entropy_coef) == (4, 0.02)
    cartpole = ppo.PPOJobConfig()
    ppo.env_defaults(cartpole, Parts())
    assert (cartpole.env.num_envs, cartpole.learn.entropy_coef) == (8, 0.01)
    with pytest.raises(ValueError, match="--num-envs"):
        ppo.run(ppo_config(num_envs=0))


def test_frames_clip_at_a_tenth_as_cleanrl_and_the_zoo_do_unless_given():
    """Atari frames fill CleanRL's ppo_atari settings, its clip of 0.1 (the RL Zoo's too;
    the ratio's and, with --clip-vloss, the value change's) among them; other families
    keep 0.2; a given value is kept, and the algorithm refuses a config left unfilled."""
    pong = ppo.PPOJobConfig()
    apply_overrides(pong, {"env_id": "ALE/Pong-v5"})
    assert pong.learn.clip_coef is None
    ppo.env_defaults(pong, Parts())
    assert (pong.learn.clip_coef, pong.learn.lr, pong.learn.entropy_coef, pong.env.num_envs) == (0.1, 2.5e-4, 0.01, 8)
    for env_id in ("CartPole-v1", "MinAtar/Breakout-v0"):
        other = ppo.PPOJobConfig()
        apply_overrides(other, {"env_id": env_id})
        ppo.env_defaults(other, Parts())
        assert other.learn.clip_coef == 0.2
    given = ppo.PPOJobConfig()
    apply_overrides(given, {"env_id": "ALE/Pong-v5", "clip_coef": 0.3})
    ppo.env_defaults(given, Parts())
    assert given.learn.clip_coef == 0.3
    from algorithms.ppo import PPO, PPOConfig

    with pytest.raises(ValueError, match="--clip-coef unset"):
        PPO(observation_space=gym.spaces.Box(-1, 1, (3,)), action_space=gym.spaces.Discrete(2),
            config=PPOConfig(clip_coef=None))


def test_members_by_default_one_per_gpu_when_learning_on_cuda(monkeypatch):
    """--num-workers 0: one member per GPU on CUDA (members sharing a GPU would average
    through host copies), one for cuda:N, one per core on CPU (1 below 4 cores)."""
    import torch

    from experiments.runtime import config, group

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 3)
    monkeypatch.setattr(config.os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    assert group.default_members("cuda") == group.default_members("auto") == 3
    assert group.default_members("cuda:2") == 1
    assert group.default_members("cpu") == 16
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert group.default_members("auto") == 16
    monkeypatch.setattr(config.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert group.default_members("auto") == 1


def test_actor_defaults_follow_the_cores_the_job_may_use(monkeypatch):
    """Ape-X and IMPALA default to one actor per core this process may run on: under
    taskset or a cgroup's cpuset that is the affinity mask, not the host's count."""
    from experiments.runtime import config
    from experiments.runtime.entry import default_actors

    monkeypatch.setattr(config.os, "cpu_count", lambda: 16)
    monkeypatch.setattr(config.os, "sched_getaffinity", lambda pid: {4, 5, 6}, raising=False)
    assert default_actors() == 3
    monkeypatch.setattr(config.os, "sched_getaffinity", lambda pid: {7}, raising=False)
    assert default_actors() == 2  # never fewer than two


def test_a_builders_algorithm_or_runner_of_the_wrong_type_is_named_by_its_method():
    from algorithms.ppo import PPOBuilder

    class NoRunner(PPOBuilder):
        def make_runner(self, algorithm, *, env, seed):
            return algorithm

    class NoAlgorithm(PPOBuilder):
        def make_algorithm(self, **kwargs):
            return None

    def factory(cls):
        return lambda config, parts, spec: cls(learn=config.learn, num_envs=config.env.num_envs, members=1, spec=spec)

    with pytest.raises(TypeError, match=r"NoRunner.make_runner returned PPO, not an algorithms.sync.SyncRunner"):
        ppo.run(ppo_config(), parts=Parts(builder=factory(NoRunner)), quiet=True)
    with pytest.raises(TypeError, match=r"NoAlgorithm.make_algorithm returned NoneType, not an algorithms.ppo.ppo.PPO"):
        ppo.run(ppo_config(), parts=Parts(builder=factory(NoAlgorithm)), quiet=True)


def test_a_preempt_fraction_that_never_preempts_is_said():
    """0.6 of 2 members needs both finished: preemption would be off without notice."""
    job = getattr(ppo, "JOB", None) or ppo.job()
    config = ppo_config(num_workers=2, preempt_fraction=0.6)
    with pytest.warns(UserWarning, match=r"--preempt-fraction 0.6 of 2 members needs all 2 finished: no rollout "
                                         r"will be preempted \(at most 0.5 of them"):
        job.env_defaults(config, Parts())
    config = ppo_config(num_workers=2, preempt_fraction=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        job.env_defaults(config, Parts())
