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

    def learn(self, batch):  # what the learner calls for each update
        self._maybe_die()
        return super().learn(batch)


@pytest.mark.timeout(240)
# A killed actor is restarted alone and rejoins (tests/experiments/test_actor_rejoin.py);
# the learner's death restarts the world, which resumes from the newest complete
# checkpoint: with replay shards on the actors, each shard loads its own part.
# The learner dies after 150 updates: over a second of updates, so several checkpoints
# (every 0.2 s) lie before it; the actors are then at most 200 + 4 * 150 + 1000 (the
# pacing's slack) = 1800 env steps in, so the restarted world has at least 200 of the
# 2000-step budget left to run (the learner is the slow part: each 1000 steps more
# cost seconds of CPU).
@pytest.mark.parametrize("rank, after, placement", [("0", 150, "learner"), ("0", 150, "actors")],
                         ids=["learner", "learner-with-shards-on-actors"])
def test_a_killed_rank_is_restarted_from_the_newest_checkpoint(tmp_path, monkeypatch, rank, after,
                                                                placement):
    monkeypatch.setenv("KILL_MARKER", str(tmp_path / "killed"))
    monkeypatch.setenv("KILL_RANK", rank)
    monkeypatch.setenv("KILL_AFTER", str(after))
    summary = apex.run(apex_config(str(tmp_path / "runs"), max_env_steps=2000, checkpoint_every=0.2,
                                   max_seconds=150.0, replay_placement=placement),
                       parts=Parts(algorithm=KilledOnceDQN), quiet=True)
    assert (tmp_path / "killed").exists()
    assert summary["restarts"] == 1
    assert summary["stop_reason"] == "env step budget" and summary["env_steps"] >= 2000
    assert summary["resumed_from_step"] is not None and summary["resumed_from_step"] > 0
    assert os.path.exists(os.path.join(summary["run_dir"], "policy.pt"))


class BrokenActorDQN(DQN):
    """Raises in the actor: a bug, which a restart would only repeat, and which stops
    the job with the actor's own error."""

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
    with pytest.raises(ChildError, match="rank . raised RuntimeError") as exc:
        apex.run(apex_config(str(tmp_path / "runs"), num_actors=1), parts=Parts(algorithm=BrokenActorDQN),
                 quiet=True)
    assert "actor bug" in str(exc.value)  # its traceback, not just its type
    assert len((tmp_path / "attempts").read_text().split()) == 1


def test_checkpoint_then_resume_restores_counters_replay_and_priorities(tmp_path):
    from rlpar.checkpoint import load_checkpoint

    first = apex.run(apex_config(str(tmp_path), serial=True, max_env_steps=1000, eval_every=500),
                     quiet=True)
    run_dir = first["run_dir"]
    saved, header = load_checkpoint(os.path.join(run_dir, "checkpoints"), kind="apex")
    assert header["step"] == first["env_steps"]
    assert saved["coordinator"]["env_steps"] == first["env_steps"]
    assert saved["dqn"]["updates"] == first["updates"]
    n = len(saved["replay"]["leaves"])
    assert n == first["replay_size"]

    # Resume with no further budget: nothing runs, and the state saved again is the same.
    again = apex.run(apex_config(str(tmp_path), serial=True, max_env_steps=1000, resume=run_dir),
                     quiet=True)
    assert (again["env_steps"], again["updates"], again["episodes"], again["replay_size"]) == (
        first["env_steps"], first["updates"], first["episodes"], first["replay_size"])
    resaved, _ = load_checkpoint(os.path.join(run_dir, "checkpoints"), kind="apex")
    np.testing.assert_array_equal(resaved["replay"]["leaves"], saved["replay"]["leaves"])
    assert resaved["replay"]["max_priority"] == saved["replay"]["max_priority"]

    # And with more budget it goes on from there.
    more = apex.run(apex_config(str(tmp_path), serial=True, max_env_steps=1500, resume=run_dir),
                    quiet=True)
    assert more["env_steps"] >= 1500
    # Pacing goes on where it was: 0.25 updates per env step since the first update.
    assert more["updates"] - first["updates"] == (more["env_steps"] - first["env_steps"]) // 4
    assert more["resumed_from_step"] == first["env_steps"]


def test_resume_refuses_a_directory_without_checkpoints_or_of_another_job(tmp_path, capsys):
    from jobs import a3c_config

    from experiments import a3c

    with pytest.raises(SystemExit):
        apex.main(["--resume", str(tmp_path)])
    assert "is not a run directory (it has no config.json)" in capsys.readouterr().err
    a3c_run = a3c.run(a3c_config(str(tmp_path), max_env_steps=200, serial=True), quiet=True)["run_dir"]
    with pytest.raises(SystemExit):
        apex.main(["--resume", a3c_run])
    assert "unknown field(s)" in capsys.readouterr().err  # an A3C config is not an Ape-X one
    os.makedirs(tmp_path / "empty" / "checkpoints")
    (tmp_path / "empty" / "config.json").write_text("{}")
    with pytest.raises(SystemExit):
        apex.main(["--resume", str(tmp_path / "empty")])
    assert "holds no checkpoint" in capsys.readouterr().err


def newest_parts(run_dir, shards):
    """The newest complete checkpoint's header and each replay shard's saved part."""
    from rlpar.checkpoint import latest_checkpoint, load_checkpoint, load_part

    names = [f"shard-{i}-of-{shards}" for i in range(shards)]
    path = latest_checkpoint(os.path.join(run_dir, "checkpoints"), parts=names)
    state, header = load_checkpoint(path, kind="apex")
    return state, header, [load_part(path, name, kind="apex")[0] for name in names]


@pytest.mark.timeout(200)
@pytest.mark.parametrize("placement, extra", [("actors", {}), ("replay-ranks", {"replay_ranks": 2})])
def test_a_sharded_replay_checkpoints_every_shard_and_resumes_as_saved(tmp_path, placement, extra):
    config = dict(replay_placement=placement, max_env_steps=900, checkpoint_every=0.3,
                  eval_every=100_000, **extra)
    first = apex.run(apex_config(str(tmp_path), **config), quiet=True)
    run_dir = first["run_dir"]
    state, header, parts = newest_parts(run_dir, 2)
    assert header["step"] == first["env_steps"] and header["meta"]["replay_shards"] == 2
    assert state["coordinator"]["env_steps"] == first["env_steps"]
    assert state["dqn"]["updates"] == first["updates"] > 0
    assert "replay" not in state  # the shards hold it, each in its own part
    # Every transition an actor reported adding is in some shard's part.
    assert sum(len(p["leaves"]) for p in parts) == first["replay_size"]

    # Resume with no further budget: nothing runs, and what is saved again is the same.
    again = apex.run(apex_config(str(tmp_path), **{**config, "resume": run_dir}), quiet=True)
    assert (again["env_steps"], again["updates"], again["episodes"], again["replay_size"]) == (
        first["env_steps"], first["updates"], first["episodes"], first["replay_size"])
    _, header2, parts2 = newest_parts(run_dir, 2)
    assert header2["step"] == header["step"]
    for saved, resaved in zip(parts, parts2):
        np.testing.assert_array_equal(resaved["leaves"], saved["leaves"])
        assert resaved["max_priority"] == saved["max_priority"]

    # With more budget it goes on from there: the resumed learner samples the restored
    # shards and the actors, paced on the restored update count, feed it (no deadlock).
    more = apex.run(apex_config(str(tmp_path), **{**config, "resume": run_dir, "max_env_steps": 1500}),
                    quiet=True)
    assert more["stop_reason"] == "env step budget" and more["env_steps"] >= 1500
    assert more["resumed_from_step"] == first["env_steps"] and more["updates"] > first["updates"]

    if placement == "actors":
        # Its shards cannot be spread over another number of actors: refused, not half loaded.
        from rlpar.errors import CheckpointMismatch

        with pytest.raises(CheckpointMismatch, match="parts"):
            apex.run(apex_config(str(tmp_path), **{**config, "resume": run_dir, "num_actors": 3,
                                                   "max_env_steps": 3000}), quiet=True)
