"""experiments.apex: config validation, role rule, and a 3-process local run."""

import dataclasses
import os
import subprocess
import sys

import pytest

from algorithms.dqn import DQN
from experiments.apex import ApexRunConfig, format_summary, run
from experiments.cli import parse_config
from experiments.roles.apex import role_of


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--num-actors", "1"], "--num-actors"),
        (["--batch-size", "0"], "--batch-size must be >= 1"),
        (["--lr", "-1"], "--lr must be > 0"),
        (["--gamma", "1.5"], "--gamma must be in [0, 1]"),
        (["--hidden", "64,x"], "--hidden"),
        (["--env-id", "NoSuchEnv-v0"], "--env-id 'NoSuchEnv-v0' is not a registered"),
        (["--env-id", "Pendulum-v1"], "Discrete"),
        (["--replay-placement", "moon"], "invalid choice"),
        (["--device", "tpu"], "--device"),
        (["--batch-size", "512", "--replay-capacity", "100"], "exceeds --replay-capacity"),
        (["--prefetch", "-2"], "--prefetch must be >= -1"),
    ],
)
def test_invalid_values_exit_2_naming_the_flag(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        parse_config(ApexRunConfig, argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_cli_rejects_before_any_process_starts():
    out = subprocess.run([sys.executable, "-m", "experiments.apex", "--n-step", "0"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--n-step must be >= 1" in out.stderr


def test_help_lists_the_flags():
    out = subprocess.run([sys.executable, "-m", "experiments.apex", "--help"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    for flag in ("--env-id", "--num-actors", "--envs-per-actor", "--device", "--replay-capacity",
                 "--replay-placement", "--batch-size", "--lr", "--n-step", "--target-update",
                 "--seed", "--log-dir", "--max-seconds", "--max-env-steps"):
        assert flag in out.stdout


def test_prefetch_auto_depends_on_replay_placement():
    assert ApexRunConfig().prefetch_depth() == 0  # replay in the learner: local sampling
    assert ApexRunConfig(replay_placement="actors").prefetch_depth() == 2
    assert ApexRunConfig(replay_placement="actors", prefetch=0).prefetch_depth() == 0


def test_role_rule():
    cfg = ApexRunConfig()
    assert [role_of(r, 4, cfg) for r in range(4)] == [
        ("learner", 0), ("actor", 0), ("actor", 1), ("actor", 2)]
    cfg = ApexRunConfig(replay_placement="replay-ranks", replay_ranks=2)
    assert [role_of(r, 5, cfg) for r in range(5)] == [
        ("learner", 0), ("replay", 0), ("replay", 1), ("actor", 0), ("actor", 1)]
    assert cfg.actors_for(5) == 2


class SquaredLossDQN(DQN):
    """A user's idea, by overriding one hook: squared TD error instead of Huber.
    It leaves a mark so the test can tell the learner process ran it."""

    def compute_loss(self, batch, target):
        q = self.network(batch["obs"]).gather(-1, batch["action"].long().view(-1, 1)).squeeze(-1)
        td = target - q
        marker = os.environ.get("APEX_TEST_MARKER")
        if marker and not os.path.exists(marker):
            open(marker, "w").close()
        return (batch["weights"] * td.pow(2)).mean(), td.detach(), q


def small_config(tmp_path, **over):
    fields = dict(
        num_actors=2, envs_per_actor=2, learning_starts=200, batch_size=32, hidden="32",
        eval_every=1500, eval_episodes=4, target_return=1e9, max_env_steps=3000,
        max_seconds=90, log_dir=str(tmp_path / "tb"), status_every=0, updates_per_step=0.25,
    )
    fields.update(over)
    return ApexRunConfig(**fields)


# TensorPipe (torch 2.13) aborted a rank once in ~10 full-suite runs with std::bad_alloc
# under heavy load; rerun once on that native abort only, never on a failed assertion.
@pytest.mark.flaky(reruns=1, only_rerun=["killed by signal SIGABRT"])
@pytest.mark.timeout(120)
def test_three_process_run_with_a_user_subclass_flows_and_exits_cleanly(tmp_path, monkeypatch):
    marker = tmp_path / "compute_loss_ran"
    monkeypatch.setenv("APEX_TEST_MARKER", str(marker))
    summary = run(small_config(tmp_path), quiet=True, dqn_class=SquaredLossDQN)
    assert summary["algorithm"].endswith("SquaredLossDQN") and marker.exists()
    assert summary["stop_reason"] == "env step budget"
    assert summary["env_steps"] >= 3000
    assert summary["updates"] >= 100  # ~0.25 updates per step after learning starts
    assert summary["evaluations"] >= 1
    assert summary["replay_size"] >= 2500  # transitions flowed from both actors
    assert all(v >= 8 for v in summary["actor_versions"])  # both pulled newer parameters
    assert not summary["solved"]
    assert (tmp_path / "tb").exists() and any((tmp_path / "tb").iterdir())
    assert "not solved" in format_summary(summary)


class BrokenActorDQN(DQN):
    def act(self, obs, *, explore=True):
        if explore:
            raise RuntimeError("actor failed on purpose")
        return super().act(obs, explore=explore)


@pytest.mark.timeout(120)
def test_a_failing_actor_stops_the_job_with_its_traceback(tmp_path):
    from rlpar.errors import ChildError

    with pytest.raises(ChildError) as exc:
        run(small_config(tmp_path, log_dir="none", max_seconds=60), quiet=True,
            dqn_class=BrokenActorDQN)
    assert "actor failed on purpose" in str(exc.value)


# TensorPipe (torch 2.13) aborted a rank once in ~10 full-suite runs with std::bad_alloc
# under heavy load; rerun once on that native abort only, never on a failed assertion.
@pytest.mark.flaky(reruns=1, only_rerun=["killed by signal SIGABRT"])
@pytest.mark.timeout(120)
def test_shards_on_actors(tmp_path):
    summary = run(small_config(tmp_path, replay_placement="actors", max_env_steps=2000,
                               eval_every=100_000, log_dir="none"), quiet=True)
    assert summary["stop_reason"] == "env step budget"
    assert summary["updates"] >= 50 and summary["replay_size"] >= 1500
    assert all(v >= 8 for v in summary["actor_versions"])


def test_config_round_trips_through_dataclass_replace():
    cfg = dataclasses.replace(ApexRunConfig(), num_actors=3)
    assert cfg.world_size() == 4


def test_ale_ids_get_the_lean_atari_env_with_standard_preprocessing():
    pytest.importorskip("ale_py")
    pytest.importorskip("cv2")
    from envs.atari import AtariEnv
    from experiments.roles.apex_parts import make_env_fn

    env = make_env_fn("ALE/Pong-v5")()
    try:
        assert isinstance(env, AtariEnv)
        assert env.observation_space.shape == (4, 84, 84)
        assert str(env.observation_space.dtype) == "uint8"
        obs, _ = env.reset(seed=0)
        assert obs.shape == (4, 84, 84)
    finally:
        env.close()


def test_atari_replay_shares_frames_over_the_n_step_window():
    pytest.importorskip("ale_py")
    pytest.importorskip("cv2")
    from experiments.roles.apex_parts import replay_layout
    from rlpar.buffers import SharedFrames

    pong = ApexRunConfig(env_id="ALE/Pong-v5")
    assert replay_layout(pong) == {"shared_frames": SharedFrames(shift=3)}
    assert replay_layout(dataclasses.replace(pong, n_step=1)) == {
        "shared_frames": SharedFrames(shift=1)
    }
    assert replay_layout(dataclasses.replace(pong, n_step=4)) == {}  # no frame in common
    assert replay_layout(dataclasses.replace(pong, share_frames=False)) == {}
    assert replay_layout(ApexRunConfig(env_id="CartPole-v1")) == {}


def test_an_atari_actor_fills_a_shared_frames_replay_exactly():
    # Real Pong frames through the actor's n-step assembler, with episodes cut short
    # so windows flushed at the cut (1 and 2 steps) occur: the shared-frames buffer
    # must hold exactly what a plain buffer holds.
    pytest.importorskip("ale_py")
    pytest.importorskip("cv2")
    import functools

    import numpy as np
    from gymnasium.vector import AutoresetMode, SyncVectorEnv

    from algorithms.apex import ApexActor, ApexConfig, ApexLearner
    from envs.atari import make_atari
    from experiments.roles.apex_parts import _register_ale, build_dqn, replay_layout
    from rlpar.buffers import PrioritizedReplayBuffer
    from rlpar.servers import ModelStore

    _register_ale()
    config = ApexRunConfig(env_id="ALE/Pong-v5", n_step=3)
    shared = PrioritizedReplayBuffer(capacity=400, seed=0, **replay_layout(config))
    plain = PrioritizedReplayBuffer(capacity=400, seed=0)

    class Both:
        def add(self, batch, priorities=None):
            shared.add(batch, priorities)
            plain.add(batch, priorities)

    env = SyncVectorEnv(
        [functools.partial(make_atari, "ALE/Pong-v5", max_num_frames_per_episode=44)] * 2,
        autoreset_mode=AutoresetMode.SAME_STEP,
    )
    try:
        obs_space = env.single_observation_space
        store = ModelStore()
        ApexLearner(dqn=build_dqn(config, obs_space, 6, device="cpu", seed=0), buffer=plain,
                    params=store, config=ApexConfig(batch_size=4, learning_starts=10_000))
        actor = ApexActor(dqn=build_dqn(config, obs_space, 6, device="cpu", seed=1), env=env,
                          buffer=Both(), params=store, index=0, num_actors=1,
                          config=ApexConfig(n_step=3, add_every=4, pull_every=1000), seed=0)
        actor.sync()
        for _ in range(40):
            actor.step()
        actor.flush()
    finally:
        env.close()
    assert len(shared) == len(plain) > 60
    steps = shared.storage.columns["obs.steps"][: len(shared)]
    assert set(steps) == {1, 2, 3}  # episode cuts flushed shorter windows
    slots = np.arange(len(plain))
    got, want = shared.storage.gather(slots), plain.storage.gather(slots)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
