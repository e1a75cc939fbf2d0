"""A failing worker is reported with its traceback and takes the job down cleanly; a
killed one (kill -9) is restarted alone and rejoins, and one that keeps dying ends
the job with its cause."""

import os
import signal

import gymnasium as gym
import pytest
from jobs import a3c_config, scalars

from algorithms.a2c import A2C
from experiments.a3c import run
from experiments.runtime import Parts
from rlpar.errors import ChildError, RankKeepsDying

ENV_ID = "A3CCrashingCartPole-v0"


class CrashingCartPole(gym.Wrapper):
    """CartPole that raises on its 50th step (in whichever process runs it)."""

    def __init__(self):
        super().__init__(gym.make("CartPole-v1"))
        self.steps = 0

    def step(self, action):
        self.steps += 1
        if self.steps >= 50:
            raise RuntimeError("CrashingCartPole fails on purpose")
        return self.env.step(action)


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=CrashingCartPole)


@pytest.mark.timeout(150)
def test_a_crashing_worker_env_fails_the_run_with_its_traceback():
    config = a3c_config(env_id=ENV_ID, num_workers=2, max_seconds=60.0, rpc_timeout=20.0,
                        max_env_steps=100_000)
    with pytest.raises(ChildError) as exc:
        run(config, quiet=True)
    assert "CrashingCartPole fails on purpose" in str(exc.value)


class DiesOnceA2C(A2C):
    """SIGKILLs its own process once per test, in the rank whose RANK is $DIE_RANK,
    after $DIE_AFTER sampling calls; its replacement lives on. Every process of that
    rank appends a fingerprint of each parameter set it loads to $LOADS."""

    calls = 0

    def sample_actions(self, obs):
        if os.environ.get("RANK") == os.environ["DIE_RANK"]:
            DiesOnceA2C.calls += 1
            marker = os.environ["DIE_MARKER"]
            if DiesOnceA2C.calls >= int(os.environ["DIE_AFTER"]) and not os.path.exists(marker):
                open(marker, "w").close()
                os.kill(os.getpid(), signal.SIGKILL)
        return super().sample_actions(obs)

    def load_policy_state(self, state):
        super().load_policy_state(state)
        if os.environ.get("RANK") == os.environ["DIE_RANK"]:
            total = sum(float(v.double().sum()) for v in state.values())
            with open(os.environ["LOADS"], "a") as f:
                f.write(f"{os.environ.get('RLPAR_RANK_RESTARTS', '0')} {total!r}\n")


@pytest.mark.timeout(150)
def test_a_killed_worker_is_restarted_alone_and_rejoins(tmp_path, monkeypatch):
    monkeypatch.setenv("DIE_MARKER", str(tmp_path / "killed"))
    monkeypatch.setenv("DIE_RANK", "1")  # actor 0; rank 0 is the learner (the gradient server)
    monkeypatch.setenv("DIE_AFTER", "100")  # 800 of its env steps: after many gradients
    monkeypatch.setenv("LOADS", str(tmp_path / "loads"))
    # 2000 steps: its replacement still pulled ~90 times before the budget ran out (it needs 2).
    config = a3c_config(str(tmp_path / "runs"), num_workers=2, max_env_steps=2000, eval_every=1500,
                        max_seconds=100.0)
    summary = run(config, parts=Parts(algorithm=DiesOnceA2C), quiet=True)
    assert (tmp_path / "killed").exists()
    assert summary["stop_reason"] == "env step budget" and summary["env_steps"] >= 2000
    # The worker alone was restarted: the world was not (no resume from a checkpoint).
    assert summary["restarts"] == 0 and summary["resumed_from_step"] is None
    assert summary["actor_restarts"] == 1 and summary["silent_sources"] == []
    # Every step it reported was in a pushed gradient: nothing counted as lost.
    assert summary["lost_transitions"] == 0
    # Its replacement pulled the trained parameters, not the initial ones.
    loads = [line.split() for line in (tmp_path / "loads").read_text().splitlines()]
    initial = float(loads[0][1])
    after = [float(total) for restarts, total in loads if restarts == "1"]
    assert len(after) >= 2 and after[0] != initial
    curves = scalars(summary["run_dir"])
    assert max(value for _, value in curves["actors/restarts"]) == 1
    # The server's curves (learner 0) and the actors' gradient metrics, as before the fold.
    assert {"server/staleness_mean", "server/applied", "server/dropped", "losses/loss",
            "losses/entropy"} <= set(curves)


class AlwaysDiesA2C(A2C):
    """Every process of rank $DIE_RANK SIGKILLs itself after $DIE_AFTER sampling calls."""

    calls = 0

    def sample_actions(self, obs):
        if os.environ.get("RANK") == os.environ["DIE_RANK"]:
            AlwaysDiesA2C.calls += 1
            if AlwaysDiesA2C.calls >= int(os.environ["DIE_AFTER"]):
                os.kill(os.getpid(), signal.SIGKILL)
        return super().sample_actions(obs)


@pytest.mark.timeout(150)
def test_a_worker_that_keeps_dying_ends_the_job_with_its_cause(tmp_path, monkeypatch):
    monkeypatch.setenv("DIE_RANK", "1")
    monkeypatch.setenv("DIE_AFTER", "20")
    with pytest.raises(RankKeepsDying, match="rank 1 was killed by signal SIGKILL after 1 restart"):
        run(a3c_config(str(tmp_path / "runs"), num_workers=2, max_env_steps=10**6, max_restarts=1),
            parts=Parts(algorithm=AlwaysDiesA2C), quiet=True)
