"""Runs survive a killed rank (restarted from the newest checkpoint) and resume
from a stopped run's checkpoint with the same counters, replay and priorities."""

import os
import signal

import numpy as np
import pytest
from jobs import apex_config

from algorithms.dqn import DQN
from experiments import apex
from experiments.runtime import Parts


class KilledOnceDQN(DQN):
    """SIGKILLs its own process (as ``kill -9`` would) once per test, in the rank whose
    RANK is $KILL_RANK, after $KILL_AFTER calls of ``act`` (actors) or ``update``
    (learner)."""

    calls = 0

    def _maybe_die(self):
        KilledOnceDQN.calls += 1
        marker = os.environ["KILL_MARKER"]
        if (os.environ.get("RANK") == os.environ["KILL_RANK"] and not os.path.exists(marker)
                and KilledOnceDQN.calls >= int(os.environ["KILL_AFTER"])):
            open(marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)

    def act(self, obs, *, explore=True):
        if explore:
            self._maybe_die()
        return super().act(obs, explore=explore)

    def update(self, batch):
        self._maybe_die()
        return super().update(batch)


@pytest.mark.timeout(240)
# A killed actor is restarted alone and rejoins (tests/experiments/test_actor_rejoin.py);
# the learner's death restarts the world.
@pytest.mark.parametrize("rank, after", [("0", 600)], ids=["learner"])
def test_a_killed_rank_is_restarted_from_the_newest_checkpoint(tmp_path, monkeypatch, rank, after):
    monkeypatch.setenv("KILL_MARKER", str(tmp_path / "killed"))
    monkeypatch.setenv("KILL_RANK", rank)
    monkeypatch.setenv("KILL_AFTER", str(after))
    summary = apex.run(apex_config(str(tmp_path / "runs"), max_env_steps=6000, checkpoint_every=0.2,
                                   max_seconds=150.0), parts=Parts(algorithm=KilledOnceDQN), quiet=True)
    assert (tmp_path / "killed").exists()
    assert summary["restarts"] == 1
    assert summary["stop_reason"] == "env step budget" and summary["env_steps"] >= 6000
    assert summary["resumed_from_step"] is not None and summary["resumed_from_step"] > 0
    assert os.path.exists(os.path.join(summary["run_dir"], "policy.pt"))


class BrokenActorDQN(DQN):
    """Raises in the actor: a bug, which a restart would only repeat."""

    def act(self, obs, *, explore=True):
        if explore:
            with open(os.environ["ATTEMPTS"], "a") as f:
                f.write(f"{os.getpid()}\n")
            raise RuntimeError("actor bug")
        return super().act(obs, explore=explore)


@pytest.mark.timeout(120)
def test_a_rank_that_raises_is_not_restarted(tmp_path, monkeypatch):
    from rlpar.errors import ChildError

    monkeypatch.setenv("ATTEMPTS", str(tmp_path / "attempts"))
    with pytest.raises(ChildError, match="rank . raised RuntimeError"):
        apex.run(apex_config(str(tmp_path / "runs"), num_actors=1), parts=Parts(algorithm=BrokenActorDQN),
                 quiet=True)
    assert len((tmp_path / "attempts").read_text().split()) == 1


def test_checkpoint_then_resume_restores_counters_replay_and_priorities(tmp_path):
    from rlpar.checkpoint import load_checkpoint

    first = apex.run(apex_config(str(tmp_path), serial=True, max_env_steps=2000, eval_every=1000),
                     quiet=True)
    run_dir = first["run_dir"]
    saved, header = load_checkpoint(os.path.join(run_dir, "checkpoints"), kind="apex")
    assert header["step"] == first["env_steps"]
    assert saved["coordinator"]["env_steps"] == first["env_steps"]
    assert saved["dqn"]["updates"] == first["updates"]
    n = len(saved["replay"]["leaves"])
    assert n == first["replay_size"]

    # Resume with no further budget: nothing runs, and the state saved again is the same.
    again = apex.run(apex_config(str(tmp_path), serial=True, max_env_steps=2000, resume=run_dir),
                     quiet=True)
    assert (again["env_steps"], again["updates"], again["episodes"], again["replay_size"]) == (
        first["env_steps"], first["updates"], first["episodes"], first["replay_size"])
    resaved, _ = load_checkpoint(os.path.join(run_dir, "checkpoints"), kind="apex")
    np.testing.assert_array_equal(resaved["replay"]["leaves"], saved["replay"]["leaves"])
    assert resaved["replay"]["max_priority"] == saved["replay"]["max_priority"]

    # And with more budget it goes on from there.
    more = apex.run(apex_config(str(tmp_path), serial=True, max_env_steps=3000, resume=run_dir),
                    quiet=True)
    assert more["env_steps"] >= 3000
    # Pacing goes on where it was: 0.25 updates per env step since the first update.
    assert more["updates"] - first["updates"] == (more["env_steps"] - first["env_steps"]) // 4
    assert more["resumed_from_step"] == first["env_steps"]


def test_resume_refuses_a_directory_without_checkpoints_or_of_another_job(tmp_path, capsys):
    from jobs import a3c_config

    from experiments import a3c

    with pytest.raises(SystemExit):
        apex.main(["--resume", str(tmp_path)])
    assert "cannot read" in capsys.readouterr().err  # no config.json there
    a3c_run = a3c.run(a3c_config(str(tmp_path), max_env_steps=200), quiet=True)["run_dir"]
    with pytest.raises(SystemExit):
        apex.main(["--resume", a3c_run])
    assert "unknown field(s)" in capsys.readouterr().err  # an A3C config is not an Ape-X one
    os.makedirs(tmp_path / "empty" / "checkpoints")
    (tmp_path / "empty" / "config.json").write_text("{}")
    with pytest.raises(SystemExit):
        apex.main(["--resume", str(tmp_path / "empty")])
    assert "holds no checkpoint" in capsys.readouterr().err


def test_a_sharded_replay_run_is_not_resumed_but_refused_clearly(tmp_path, capsys):
    first = apex.run(apex_config(str(tmp_path), serial=True, max_env_steps=600, eval_every=100_000),
                     quiet=True)
    assert apex.main(["--resume", first["run_dir"], "--no-serial", "--replay-placement", "actors"]) == 2
    assert "--resume needs --replay-placement learner" in capsys.readouterr().err
