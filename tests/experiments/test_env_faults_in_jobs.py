"""An env that hangs, raises, returns NaN or returns the wrong shape stops a job with
an error naming the env, not a hang or a misleading error elsewhere (replay priorities,
NaN losses); an env worker killed from outside (the OOM killer) is replaced and
counted, and the run goes on."""

import functools
import math
import os
import shutil
import tempfile
import time

import pytest
from jobs import a3c_config, apex_config, scalars
from worker_killing_env import KillsItsWorkerOnce

from envs.errors import EnvError, EnvTimeout, EnvValueError
from envs.testing import CountingEnv, FaultyEnv
from experiments import a3c, apex
from experiments.runtime import Parts
from rlpar.errors import ChildError


def faulty(fault, at=30):
    return Parts(env=functools.partial(FaultyEnv, fault=fault, fault_at=at, episode_length=50, hang_s=600))


@pytest.mark.timeout(60)
def test_a_hung_env_stops_apex_within_the_step_timeout():
    t0 = time.monotonic()
    with pytest.raises(EnvTimeout) as exc:
        apex.run(apex_config(serial=True, env_workers=1, env_step_timeout=2.0), parts=faulty("hang"),
                 quiet=True)
    assert time.monotonic() - t0 < 30
    assert "env" in str(exc.value) and "worker" in str(exc.value)


@pytest.mark.parametrize("fault, field", [("nan_reward", "reward"), ("nan_obs", "observation"),
                                          ("short_obs", "observation"), ("scalar_obs", "observation")])
def test_bad_env_values_stop_apex_naming_the_env(fault, field):
    with pytest.raises(EnvValueError) as exc:
        apex.run(apex_config(serial=True), parts=faulty(fault), quiet=True)
    assert exc.value.field.startswith(field) and exc.value.env_index is not None
    assert exc.value.episode_step == 30


def test_a_nan_reward_stops_a3c_instead_of_training_on_it():
    with pytest.raises(EnvValueError, match="reward"):
        a3c.run(a3c_config(max_env_steps=5000), parts=faulty("nan_reward"), quiet=True)


@pytest.mark.timeout(120)
def test_a_bad_env_in_an_actor_rank_ends_the_job_with_the_env_named():
    with pytest.raises(ChildError) as exc:
        apex.run(apex_config(max_seconds=60.0), parts=faulty("inf_obs"), quiet=True)
    assert "EnvValueError" in str(exc.value) and "observation" in str(exc.value.child_traceback)


def test_the_step_timeout_needs_env_workers(capsys):
    with pytest.raises(SystemExit) as exc:
        apex.main(["--env-step-timeout", "5"])
    assert exc.value.code == 2
    assert "--env-step-timeout needs --env-workers >= 1" in capsys.readouterr().err


@pytest.fixture
def killed_once(tmp_path, monkeypatch):
    """Parts whose env kills its worker once; the ranks' temp dir (short: a Unix
    socket's path has 108 bytes), which must hold no pymp-* dir at the end."""
    tmp = tempfile.mkdtemp(prefix="ef-", dir="/tmp")
    monkeypatch.setenv("TMPDIR", tmp)
    yield Parts(env=functools.partial(KillsItsWorkerOnce, marker=str(tmp_path / "killed"))), tmp
    shutil.rmtree(tmp)


def check_replaced_once(tmp_path, tmp, summary):
    assert (tmp_path / "killed").exists()
    assert summary["stop_reason"] == "env step budget"
    # The vector env replaced its worker: no rank and no world was restarted.
    assert summary["env_worker_restarts"] == 1 and summary["actor_restarts"] == 0
    assert max(value for _, value in scalars(summary["run_dir"])["actors/env_worker_restarts"]) == 1
    assert not os.listdir(tmp)


@pytest.mark.timeout(120)
def test_a_killed_env_worker_is_replaced_and_counted_in_an_apex_local_run(tmp_path, killed_once):
    parts, tmp = killed_once
    config = apex_config(str(tmp_path / "runs"), num_actors=1, env_workers=1, max_env_steps=400)
    check_replaced_once(tmp_path, tmp, apex.run(config, parts=parts, quiet=True))


@pytest.mark.timeout(120)
def test_a_killed_env_worker_of_the_lead_is_replaced_and_counted_in_a3c(tmp_path, killed_once):
    # One worker: rank 0's own, in the process that hosts the gradient server.
    parts, tmp = killed_once
    config = a3c_config(str(tmp_path / "runs"), env_workers=1, max_env_steps=400)
    check_replaced_once(tmp_path, tmp, a3c.run(config, parts=parts, quiet=True))


@pytest.mark.timeout(60)
def test_an_env_that_raises_in_a_worker_still_ends_the_run_naming_it():
    # Restarting the worker would hide the bug: it is raised, not replaced.
    with pytest.raises(EnvError, match=r"env 0 raised in step \(env worker 0"):
        apex.run(apex_config(serial=True, num_actors=1, env_workers=1),
                 parts=Parts(env=functools.partial(CountingEnv, fail_at=3)), quiet=True)


@pytest.mark.timeout(60)
def test_env_workers_n_is_n_subprocesses_in_every_job():
    from envs import make_vector_env
    from envs.multiagent import CooperativeEnv, MultiAgentVectorEnv
    from experiments.maddpg import MADDPGJobConfig
    from experiments.runtime.config import DEFAULT_ENV_STEP_TIMEOUT
    from experiments.runtime.envs import vector_env_options

    maddpg = MADDPGJobConfig()
    maddpg.env.num_envs = 4
    for config in (apex_config(env_workers=2, num_envs=4), a3c_config(env_workers=2, num_envs=4), maddpg):
        options = vector_env_options(config)
        assert options["step_timeout"] == DEFAULT_ENV_STEP_TIMEOUT  # a hang is named by default
        if config is maddpg:
            venv = MultiAgentVectorEnv([CooperativeEnv] * 4, **options).venv
        else:
            venv = make_vector_env(CountingEnv, num_envs=4, **options)
        try:
            assert venv._local is None and sum(p is not None for p in venv._workers.procs) == 2
        finally:
            venv.close()
    config = apex_config(env_workers=1, env_step_timeout=math.inf)
    assert vector_env_options(config)["step_timeout"] is None
    config = apex_config()  # in-process envs: nothing to time out or restart
    assert vector_env_options(config)["step_timeout"] is None
    assert not vector_env_options(config)["restart_on_crash"]
