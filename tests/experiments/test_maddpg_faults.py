"""experiments.maddpg's faults on the actor-learner program: in one run of two actors
whose envs step in env workers, an actor killed mid-run (kill -9) is restarted alone
and rejoins, and an env worker killed mid-run is replaced by its actor's vector env
(the episodes it cut dropped); the job finishes its budget and counts both, and a
``--resume`` goes on from its checkpoint with the counts. An env worker that keeps
dying ends the job naming it."""

import functools
import os
import signal

import pytest
from jobs import scalars
from worker_killing_env import KillsItsWorker

from algorithms.maddpg import MADDPG
from experiments.maddpg import MADDPGJobConfig, run
from experiments.runtime import Parts
from experiments.runtime.cli import apply_overrides
from rlpar.errors import ChildDied

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class DiesOnceMADDPG(MADDPG):
    """SIGKILLs its own process once per test, in the rank whose RANK is $DIE_RANK,
    after $DIE_AFTER exploring ``act`` calls (vector steps); its replacement lives on."""

    calls = 0

    def act(self, obs, *, explore=True):
        if explore and os.environ.get("RANK") == os.environ.get("DIE_RANK"):
            DiesOnceMADDPG.calls += 1
            marker = os.environ["DIE_MARKER"]
            if DiesOnceMADDPG.calls >= int(os.environ["DIE_AFTER"]) and not os.path.exists(marker):
                open(marker, "w").close()
                os.kill(os.getpid(), signal.SIGKILL)
        return super().act(obs, explore=explore)


def config(log_dir: str, **over) -> MADDPGJobConfig:
    config = MADDPGJobConfig()
    apply_overrides(config, {
        "env_id": "cooperative", "num_envs": 2, "env_workers": 1, "batch_size": 16, "num_actors": 2,
        "learning_starts": 100, "updates_per_step": 0.05, "eval_every": 800, "eval_episodes": 2,
        "status_every": 0.0, "replay_capacity": 5000, "max_env_steps": 1600, "max_seconds": 90.0,
        "rpc_timeout": 30.0, "log_dir": log_dir, **over})
    return config


@pytest.mark.timeout(240)
def test_a_killed_actor_and_a_killed_env_worker_are_replaced_and_a_resume_goes_on(tmp_path, monkeypatch):
    monkeypatch.setenv("DIE_MARKER", str(tmp_path / "actor-killed"))
    monkeypatch.setenv("DIE_RANK", "2")  # actor 1, the evaluator
    monkeypatch.setenv("DIE_AFTER", "150")  # 300 of its env steps: after the first updates
    marker = tmp_path / "worker-killed"
    # The first env to take its 30th step (the 5th of its second 25-step episode)
    # kills its worker: both envs of that actor's one worker lose their episodes.
    parts = Parts(env=functools.partial(KillsItsWorker, after=30, marker=str(marker)), algorithm=DiesOnceMADDPG)
    summary = run(config(str(tmp_path / "runs")), parts=parts, quiet=True)
    assert marker.exists() and (tmp_path / "actor-killed").exists()
    assert summary["stop_reason"] == "env step budget" and summary["env_steps"] >= 1600
    # The actor alone was restarted (the world was not), and the env worker inside its actor.
    assert summary["restarts"] == 0 and summary["resumed_from_step"] is None
    assert summary["actor_restarts"] == 1 and summary["silent_sources"] == []
    # Both envs of the killed worker were 4 steps into an episode: two episodes dropped.
    assert summary["env_worker_restarts"] == 1 and summary["dropped_episodes"] == 2
    curves = scalars(summary["run_dir"])
    assert max(value for _, value in curves["actors/restarts"]) == 1
    assert max(value for _, value in curves["actors/env_worker_restarts"]) == 1
    assert max(value for _, value in curves["actors/dropped_episodes"]) == 2
    # Every reported episode is whole (cut ones are dropped), per agent too.
    lengths = [value for _, value in curves["charts/episodic_length"]]
    assert lengths and all(length == 25 for length in lengths)
    assert {"agents/agent_0/episodic_return", "agents/agent_1/episodic_return",
            "teams/agent/episodic_return", "eval/return"} <= set(curves)
    updates = [value for _, value in sorted(curves["charts/updates"])]
    assert updates == sorted(updates) and updates[-1] == summary["updates"] > 0

    # More budget: the markers are there, so nothing dies again; the run goes on from
    # its checkpoint, counts included.
    more = run(config(str(tmp_path / "runs"), max_env_steps=2000, resume=summary["run_dir"]), parts=parts,
               quiet=True)
    assert more["resumed_from_step"] == summary["env_steps"] and more["env_steps"] >= 2000
    assert more["updates"] > summary["updates"]
    assert more["actor_restarts"] == 1 and more["env_worker_restarts"] == 1 and more["dropped_episodes"] == 2


@pytest.mark.timeout(120)
def test_an_env_worker_that_keeps_dying_ends_the_job_naming_it(tmp_path):
    env = functools.partial(KillsItsWorker, after=3, marker=None)
    with pytest.raises(ChildDied, match=r"env worker \d \(envs \d\.\.\d\) keeps dying: killed by signal "
                                        r"SIGKILL, after 1 restart \(max_restarts=1\)"):
        run(config(str(tmp_path / "runs"), max_env_steps=10**6, max_restarts=1, serial=True, num_actors=1),
            parts=Parts(env=env), quiet=True)
