"""experiments.maddpg with env workers (--env-workers 2: two subprocesses, no env in
the job's process): a worker process killed mid-run (kill -9) is restarted by the
vector env, the episodes it cut are dropped, the job finishes its budget and counts
it; one that keeps dying ends the job naming it."""

import functools
import os
import signal

import pytest
from jobs import scalars

from envs.multiagent import CooperativeEnv
from experiments.maddpg import MADDPGJobConfig, run
from experiments.runtime import Parts
from experiments.runtime.cli import apply_overrides
from rlpar.errors import ChildDied

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class KillsItsWorker(CooperativeEnv):
    """CooperativeEnv that SIGKILLs the env worker process it lives in (never the job's
    own process, ``parent``) at its ``after``-th step; only once in all when ``marker``
    is a path (the first env to create it kills its worker), every time when it is None."""

    def __init__(self, *, parent: int, after: int, marker: str | None, n_agents: int = 2,
                 max_steps: int = 25) -> None:
        super().__init__(n_agents=n_agents, max_steps=max_steps)
        self.parent, self.after, self.marker, self.steps = parent, after, marker, 0

    def step(self, actions):
        self.steps += 1
        if os.getpid() != self.parent and self.steps >= self.after:
            if self.marker is None:
                os.kill(os.getpid(), signal.SIGKILL)
            else:
                try:  # atomic: envs of both workers reach the step together
                    os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                except FileExistsError:
                    return super().step(actions)
                os.kill(os.getpid(), signal.SIGKILL)
        return super().step(actions)


def config(log_dir: str, **over) -> MADDPGJobConfig:
    config = MADDPGJobConfig()
    apply_overrides(config, {
        "env_id": "cooperative", "num_envs": 4, "env_workers": 2, "batch_size": 16,
        "learning_starts": 100, "updates_per_step": 0.05, "eval_every": 400, "eval_episodes": 2,
        "status_every": 0.0, "replay_capacity": 5000, "max_env_steps": 800, "max_seconds": 90.0,
        "log_dir": log_dir, **over})
    return config


@pytest.mark.timeout(120)
def test_a_killed_env_worker_is_restarted_and_the_job_finishes(tmp_path):
    marker = tmp_path / "killed"
    # Envs 0-1 live in worker 0, envs 2-3 in worker 1: the first env to take its 30th
    # step (the 5th of its second 25-step episode) kills its worker.
    env = functools.partial(KillsItsWorker, parent=os.getpid(), after=30, marker=str(marker))
    summary = run(config(str(tmp_path / "runs")), parts=Parts(env=env), quiet=True)
    assert marker.exists()
    assert summary["stop_reason"] == "env step budget" and summary["env_steps"] >= 800
    assert summary["actor_restarts"] == 1 and summary["env_worker_restarts"] == 1
    assert sorted(summary["env_worker_restarts_by_worker"]) == [0, 1]
    # Both envs of that worker were 5 steps into an episode: two episodes dropped.
    assert summary["dropped_episodes"] == 2 and summary["lost_transitions"] == 0
    # 800 steps of 25-step episodes on 4 envs, less the two cut: every reported
    # episode is whole.
    assert summary["episodes"] >= 800 // 25 - 2
    curves = scalars(summary["run_dir"])
    assert max(value for _, value in curves["actors/restarts"]) == 1
    assert max(value for _, value in curves["actors/env_worker_restarts"]) == 1
    assert max(value for _, value in curves["actors/dropped_episodes"]) == 2
    lengths = [value for _, value in curves["charts/episodic_length"]]
    assert lengths and all(length == 25 for length in lengths)


@pytest.mark.timeout(120)
def test_an_env_worker_that_keeps_dying_ends_the_job_naming_it(tmp_path):
    env = functools.partial(KillsItsWorker, parent=os.getpid(), after=3, marker=None)
    with pytest.raises(ChildDied, match=r"env worker \d \(envs \d\.\.\d\) keeps dying: killed by signal "
                                        r"SIGKILL, after 1 restart \(max_restarts=1\)"):
        run(config(str(tmp_path / "runs"), max_env_steps=10**6, max_restarts=1), parts=Parts(env=env),
            quiet=True)


@pytest.mark.timeout(180)
def test_dropped_episodes_and_worker_restarts_carry_over_a_resume(tmp_path):
    from rlpar.checkpoint import load_checkpoint, save_checkpoint

    marker = tmp_path / "killed"
    env = functools.partial(KillsItsWorker, parent=os.getpid(), after=30, marker=str(marker))
    first = run(config(str(tmp_path / "runs")), parts=Parts(env=env), quiet=True)
    by_worker = first["env_worker_restarts_by_worker"]
    assert first["dropped_episodes"] == 2 and first["env_worker_restarts"] == 1 and sorted(by_worker) == [0, 1]
    run_dir = first["run_dir"]
    checkpoints = os.path.join(run_dir, "checkpoints")
    saved, header = load_checkpoint(checkpoints, kind="maddpg")
    assert header["step"] == first["env_steps"]
    assert saved["counters"] == {"dropped_episodes": 2, "env_worker_restarts": by_worker}

    # More budget: the marker is there, so no worker dies again; the counts go on
    # from the checkpoint's, in the summary and in the curve.
    more = run(config(str(tmp_path / "runs"), max_env_steps=1200, resume=run_dir), parts=Parts(env=env),
               quiet=True)
    assert more["resumed_from_step"] == first["env_steps"] and more["env_steps"] >= 1200
    assert more["dropped_episodes"] >= first["dropped_episodes"]
    assert more["dropped_episodes"] == 2 and more["env_worker_restarts_by_worker"] == by_worker
    assert more["env_worker_restarts"] == 1
    assert more["actor_restarts"] == 1
    resumed_ticks = [value for step, value in scalars(run_dir)["actors/dropped_episodes"]
                     if step > first["env_steps"]]
    assert resumed_ticks and all(value == 2 for value in resumed_ticks)

    # A checkpoint written before the counters were saved resumes with them at 0.
    saved, header = load_checkpoint(checkpoints, kind="maddpg")
    del saved["counters"]
    save_checkpoint(checkpoints, saved, kind="maddpg", step=header["step"], meta=header["meta"])
    older = run(config(str(tmp_path / "runs"), max_env_steps=1400, resume=run_dir), parts=Parts(env=env),
                quiet=True)
    assert older["resumed_from_step"] == header["step"] and older["env_steps"] >= 1400
    assert older["dropped_episodes"] == 0 and older["env_worker_restarts_by_worker"] == [0, 0]
