"""An env that hangs, returns NaN or returns the wrong shape stops a job with an
error naming the env, not a hang or a misleading error elsewhere (replay priorities,
NaN losses)."""

import functools
import time

import pytest
from jobs import a3c_config, apex_config

from envs.errors import EnvTimeout, EnvValueError
from envs.testing import FaultyEnv
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
