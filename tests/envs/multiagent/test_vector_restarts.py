"""MultiAgentVectorEnv with restart_on_crash: a killed env worker (kill -9) is replaced,
its cut episodes are dropped and counted, and one that keeps dying raises naming it."""

from __future__ import annotations

import os

import numpy as np
import pytest

from envs.multiagent import CooperativeEnv, MultiAgentVectorEnv
from rlpar.errors import ChildDied
from tests.procs import kill_and_wait

ACTIONS = np.zeros((4, 2, 2), dtype=np.float32)


class PidCooperativeEnv(CooperativeEnv):
    """CooperativeEnv that knows the pid of the process it lives in."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.pid = os.getpid()


def make(**kwargs):
    return lambda: PidCooperativeEnv(n_agents=2, **kwargs)


def venv_of(**kwargs) -> MultiAgentVectorEnv:
    return MultiAgentVectorEnv([make(max_steps=kwargs.pop("max_steps", 25))] * 4, num_workers=2,
                               step_in_parent=False, **kwargs)


@pytest.mark.timeout(60)
def test_a_killed_worker_is_restarted_and_its_episodes_dropped():
    venv = venv_of(restart_on_crash=True, max_restarts=2)
    try:
        venv.reset(seed=0)
        pids = venv.get_attr("pid")
        assert pids[0] == pids[1] != pids[2] == pids[3] != os.getpid()
        for _ in range(3):
            venv.step(ACTIONS)
        kill_and_wait(pids[2])  # worker 1: envs 2 and 3, three steps into their episodes
        obs, rew, term, trunc, infos = venv.step(ACTIONS)
        assert infos["env_restarted"].tolist() == [False, False, True, True]
        assert trunc[2:].all() and not trunc[:2].any() and not term.any()
        assert np.all(rew[2:] == 0.0) and np.all(rew[:2] < 0)
        assert (venv.restarts, venv.worker_restarts, venv.dropped_episodes) == (1, (0, 1), 2)
        assert "killed by signal 9" in venv.last_crash
        new = venv.get_attr("pid")
        assert new[:2] == pids[:2] and new[2] == new[3] not in pids
        # The restarted rows' next step is their reset step (NEXT_STEP), then they run on.
        obs, rew, term, trunc, infos = venv.step(ACTIONS)
        assert "env_restarted" not in infos and np.all(rew[2:] == 0.0) and not trunc.any()
        for _ in range(3):
            obs, rew, term, trunc, _ = venv.step(ACTIONS)
            assert np.all(rew < 0) and not trunc.any()
        assert venv.restarts == 1
    finally:
        venv.close()


@pytest.mark.timeout(60)
def test_a_restart_between_episodes_drops_none():
    """Every episode lasts one step: after a step that ended them all, a killed
    worker cuts no episode (its envs were waiting for their reset step)."""
    venv = venv_of(restart_on_crash=True, max_steps=1)
    try:
        venv.reset(seed=0)
        _, _, _, trunc, _ = venv.step(ACTIONS)
        assert trunc.all()
        kill_and_wait(venv.get_attr("pid")[3])
        _, _, _, trunc, infos = venv.step(ACTIONS)
        assert infos["env_restarted"].tolist() == [False, False, True, True]
        assert (venv.restarts, venv.dropped_episodes) == (1, 0)
        venv.step(ACTIONS)
    finally:
        venv.close()


@pytest.mark.timeout(60)
def test_a_worker_that_keeps_dying_raises_naming_it_and_its_signal():
    venv = venv_of(restart_on_crash=True, max_restarts=1)
    try:
        venv.reset(seed=0)
        kill_and_wait(venv.get_attr("pid")[2])
        venv.step(ACTIONS)
        kill_and_wait(venv.get_attr("pid")[2])
        with pytest.raises(ChildDied, match=r"env worker 1 \(envs 2\.\.3\) keeps dying: killed by "
                                            r"signal SIGKILL, after 1 restart \(max_restarts=1\)"):
            venv.step(ACTIONS)
        with pytest.raises(RuntimeError, match="unusable"):
            venv.step(ACTIONS)
    finally:
        venv.close()


@pytest.mark.timeout(60)
def test_without_restart_on_crash_a_dead_worker_is_an_error():
    venv = venv_of()
    try:
        venv.reset(seed=0)
        kill_and_wait(venv.get_attr("pid")[0])
        with pytest.raises(ChildDied, match=r"env worker 0 \(envs 0\.\.1\) died \(killed by signal 9\)"):
            venv.step(ACTIONS)
        assert venv.restarts == 0
    finally:
        venv.close()


def test_restart_options_are_checked():
    with pytest.raises(ValueError, match="restart_on_crash needs env worker processes"):
        MultiAgentVectorEnv([make()], num_workers=0, restart_on_crash=True)
    with pytest.raises(TypeError, match="restart_on_crash must be a bool"):
        MultiAgentVectorEnv([make()], num_workers=0, restart_on_crash=1)
    with pytest.raises(ValueError, match="max_restarts must be an int >= 0 or None"):
        MultiAgentVectorEnv([make()], num_workers=1, restart_on_crash=True, max_restarts=-1)
