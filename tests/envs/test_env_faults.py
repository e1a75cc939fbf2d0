"""Env faults are named: a hung env (step_timeout), NaN/inf values and observations of the
wrong shape or dtype each raise an error naming the env, in process and in workers."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import time
from functools import partial

import numpy as np
import pytest

from envs import (
    EnvError,
    EnvTimeout,
    EnvValueError,
    InProcessVectorEnv,
    SubprocVectorEnv,
    make_vector_env,
)
from envs.runner import converts
from envs.testing import CompositeEnv, FaultyEnv
from rlpar.errors import ChildError
from tests.procs import is_dead, wait_until_dead

ACT = np.zeros(4, dtype=np.int64)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def fns(bad: int, **fault):
    return [partial(FaultyEnv, **(fault if i == bad else {})) for i in range(4)]


# Each vector env kind, with where env 3 is stepped: in-process, a worker process, or
# (step_in_parent with env 0 as the bad one) the parent's own share.
KINDS = {
    "inprocess": (lambda f, **kw: InProcessVectorEnv(f, **kw), 3, None),
    "subproc": (lambda f, **kw: SubprocVectorEnv(f, num_workers=2, **kw), 3, 1),
    "parent_share": (
        lambda f, **kw: SubprocVectorEnv(f, num_workers=2, step_in_parent=True, **kw),
        0,
        None,
    ),
}

VALUE_FAULTS = {
    "nan_reward": ("reward", r"non-finite reward \(nan\)"),
    "inf_reward": ("reward", r"non-finite reward \(-inf\)"),
    "nan_obs": ("observation", r"non-finite observation \(\[ *3\. +3\. +nan +3\.\]\)"),
    "inf_obs": ("observation", r"non-finite observation \(\[ *3\. +3\. +inf +3\.\]\)"),
    "short_obs": ("observation", r"observation of shape \(1,\), expected \(4,\)"),
    "scalar_obs": ("observation", r"observation of shape \(\), expected \(4,\)"),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("fault", list(VALUE_FAULTS))
def test_bad_value_names_env_field_and_step(kind, fault):
    make, bad, worker = KINDS[kind]
    field, pattern = VALUE_FAULTS[fault]
    venv = make(fns(bad, fault=fault, fault_at=3))
    try:
        venv.reset(seed=0)
        venv.step(ACT)
        venv.step(ACT)
        with pytest.raises(EnvValueError, match=pattern) as err:
            venv.step(ACT)
        e = err.value
        assert (e.env_index, e.field, e.episode_step, e.worker, e.call) == (
            bad,
            field,
            3,
            worker,
            "step",
        )
        assert str(e).startswith(f"env {bad} returned ")
        assert "at step 3 of its episode, during step" in str(e)
        assert isinstance(e, EnvError) and isinstance(e, ChildError)
        venv.reset(seed=1)  # an env that misbehaved leaves the vector env usable
    finally:
        venv.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["inprocess", "subproc"])
def test_bad_observation_from_reset_is_named(kind):
    make, bad, _ = KINDS[kind]
    venv = make(fns(bad, fault="short_obs", fault_in="reset", fault_at=1))
    try:
        expected = rf"env {bad} returned an observation of shape \(1,\), expected \(4,\) from a "
        with pytest.raises(EnvValueError, match=expected + "reset, during reset") as err:
            venv.reset(seed=0)
        assert err.value.episode_step == 0 and err.value.call == "reset"
    finally:
        venv.close()


@pytest.mark.timeout(60)
def test_scalar_observations_are_not_broadcast_over_the_batch():
    # Four envs each returning a float for Box(4,) stack to a (4,) batch that numpy would
    # happily broadcast into the (4, 4) slot, transposed; it must be refused instead.
    venv = InProcessVectorEnv([partial(FaultyEnv, fault="scalar_obs", fault_at=1)] * 4)
    try:
        venv.reset(seed=0)
        with pytest.raises(EnvValueError, match=r"env 0 returned an observation of shape \(\)"):
            venv.step(ACT)
    finally:
        venv.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["inprocess", "subproc"])
def test_float_observation_for_an_integer_space_is_refused(kind):
    make, bad, _ = KINDS[kind]
    envs = [partial(FaultyEnv, int_obs=True) for _ in range(4)]
    envs[bad] = partial(FaultyEnv, int_obs=True, fault="int_obs_as_float", fault_at=2)
    venv = make(envs)
    try:
        venv.reset(seed=0)
        obs, *_ = venv.step(ACT)
        assert obs.dtype == np.int64 and obs[:, 0].tolist() == [1] * 4
        with pytest.raises(EnvValueError, match=f"env {bad} returned an observation of dtype float64"):
            venv.step(ACT)
    finally:
        venv.close()


@pytest.mark.parametrize(
    ("src", "dst", "ok"),
    [
        ("float64", "float32", True),
        ("int64", "float32", True),
        ("int64", "uint8", True),  # int pixels for a uint8 space: worked before, still does
        ("bool", "int8", True),
        ("float32", "int64", False),  # 0.5 would become 0
        ("float64", "uint8", False),
        ("complex128", "float64", False),
        ("object", "float32", False),
    ],
)
def test_which_observation_dtypes_convert(src, dst, ok):
    assert converts(np.dtype(src), np.dtype(dst)) is ok


def test_same_step_autoreset_names_the_final_step_of_the_episode():
    bad = partial(FaultyEnv, fault="nan_reward", fault_at=3, episode_length=3)
    venv = InProcessVectorEnv([partial(FaultyEnv, episode_length=3), bad], autoreset_mode="SameStep")
    try:
        venv.reset(seed=0)
        venv.step(ACT[:2])
        venv.step(ACT[:2])
        with pytest.raises(EnvValueError, match="at step 3 of its episode") as err:
            venv.step(ACT[:2])  # the step that ends the episode; the obs is the reset's
        assert err.value.episode_step == 3
    finally:
        venv.close()


class _BadDictEnv(CompositeEnv):
    """CompositeEnv whose nested Box leaf has the wrong shape from step 2 on."""

    def step(self, action):
        obs, rew, term, trunc, info = super().step(action)
        if self.count >= 2:
            obs["pair"] = (np.zeros(3, dtype=np.float32), obs["pair"][1])
        return obs, rew, term, trunc, info


@pytest.mark.timeout(60)
def test_composite_observation_leaf_is_named():
    venv = InProcessVectorEnv([CompositeEnv, _BadDictEnv])
    try:
        venv.reset(seed=0)
        act = np.zeros((2, 2), dtype=np.float32)
        venv.step(act)
        expected = r"env 1 returned an observation\['pair'\]\[0\] of shape \(3,\), expected \(2, 2\)"
        with pytest.raises(EnvValueError, match=expected) as err:
            venv.step(act)
        assert err.value.field == "observation['pair'][0]"
    finally:
        venv.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["inprocess", "subproc"])
def test_check_values_false_passes_nan_through_but_still_checks_shapes(kind):
    make, bad, _ = KINDS[kind]
    venv = make(fns(bad, fault="nan_obs", fault_at=1), check_values=False)
    try:
        venv.reset(seed=0)
        obs, *_ = venv.step(ACT)
        assert np.isnan(obs[bad, 2]) and np.isfinite(np.delete(obs, bad, axis=0)).all()
    finally:
        venv.close()
    venv = make(fns(bad, fault="short_obs", fault_at=1), check_values=False)
    try:
        venv.reset(seed=0)
        with pytest.raises(EnvValueError, match=f"env {bad} returned an observation of shape"):
            venv.step(ACT)
    finally:
        venv.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("call", ["step", "reset"])
def test_hung_env_times_out_naming_env_worker_and_pid(call):
    fault_in = {"step": dict(fault_at=2), "reset": dict(fault_in="reset", fault_at=2)}[call]
    venv = SubprocVectorEnv(fns(3, fault="hang", **fault_in), num_workers=2, step_timeout=1.0)
    try:
        venv.reset(seed=0)
        venv.step(ACT)
        pid = venv._workers.procs[1].pid
        start = time.monotonic()
        with pytest.raises(EnvTimeout) as err:
            venv.step(ACT) if call == "step" else venv.reset(seed=0)
        elapsed = time.monotonic() - start
        # The stacks are collected in far less than a second, but never assert speed
        # tightly on a shared box: an hour-long hang must end near the timeout.
        assert elapsed < 1.0 + 10.0
        e = err.value
        assert f"env 3 did not return from {call} within step_timeout=1 s" in str(e)
        assert f"env worker 1 (envs 2..3), pid {pid}" in str(e)
        assert (e.env_index, e.env_indices, e.worker, e.pid, e.call, e.timeout) == (
            3,
            (3,),
            1,
            pid,
            call,
            1.0,
        )
        # Where the worker was stuck, from its own stack dump.
        assert "in _obs" in e.child_traceback and "testing.py" in e.child_traceback
        with pytest.raises(RuntimeError, match="unusable.*env 3 did not return"):
            venv.step(ACT)
    finally:
        venv.close()
    assert is_dead(pid)
    assert all(p is None for p in venv._workers.procs)


@pytest.mark.timeout(60)
def test_autoreset_hang_is_named_as_such():
    # Episodes of 2 steps: the third step is env 1's autoreset, where it hangs.
    hang = partial(FaultyEnv, fault="hang", fault_in="reset", fault_at=2, episode_length=2)
    venv = SubprocVectorEnv(
        [partial(FaultyEnv, episode_length=2), hang], num_workers=2, step_timeout=1.0
    )
    try:
        venv.reset(seed=0)
        venv.step(ACT[:2])
        venv.step(ACT[:2])
        with pytest.raises(EnvTimeout, match=r"env 1 did not return from reset \(its autoreset\)"):
            venv.step(ACT[:2])
    finally:
        venv.close()


@pytest.mark.timeout(60)
def test_hang_with_restart_on_crash_restarts_the_worker():
    venv = SubprocVectorEnv(
        fns(3, fault="hang", fault_at=3),
        num_workers=2,
        step_timeout=1.0,
        restart_on_crash=True,
    )
    try:
        venv.reset(seed=0)
        venv.step(ACT)
        venv.step(ACT)
        obs, rew, term, trunc, info = venv.step(ACT)  # env 3 hangs; its worker is replaced
        assert venv.crash_count == 1 and venv.worker_crashes == [0, 1]
        assert "env 3 did not return from step" in venv.last_crash
        assert info["env_restarted"].tolist() == [False, False, True, True]
        assert trunc.tolist() == [False, False, True, True]
        assert obs[:, 0].tolist() == [3, 3, 0, 0]
        obs, *_ = venv.step(ACT)  # autoreset of the cut episodes; the fresh env 3 is fine
        obs, *_ = venv.step(ACT)
        assert obs[:, 0].tolist() == [5, 5, 1, 1]
    finally:
        venv.close()


@pytest.mark.timeout(60)
def test_reset_hang_with_restart_on_crash_repeats_the_reset_once():
    # Env 1's second reset hangs; the restarted worker's fresh env resets fine.
    venv = SubprocVectorEnv(
        fns(1, fault="hang", fault_in="reset", fault_at=2),
        num_workers=2,
        step_timeout=1.0,
        restart_on_crash=True,
    )
    try:
        venv.reset(seed=0)
        obs, _ = venv.reset(seed=0)  # worker 0 hangs, is replaced, the reset repeated
        assert obs[:, 0].tolist() == [0, 0, 0, 0] and venv.crash_count == 1
    finally:
        venv.close()


def test_user_step_wait_timeout_still_leaves_the_step_pending():
    venv = SubprocVectorEnv(
        fns(1, fault="hang", fault_at=1, hang_s=0.5), num_workers=2, step_timeout=30.0
    )
    try:
        venv.reset(seed=0)
        venv.step_async(ACT)
        with pytest.raises(TimeoutError) as err:
            venv.step_wait(timeout=0.05)
        assert not isinstance(err.value, EnvTimeout)
        obs, *_ = venv.step_wait(timeout=30)
        assert obs[:, 0].tolist() == [1, 1, 1, 1]
    finally:
        venv.close()


def test_step_timeout_arguments_are_checked():
    with pytest.raises(ValueError, match="step_in_parent=False"):
        SubprocVectorEnv(fns(0), num_workers=2, step_timeout=1.0, step_in_parent=True)
    for bad in (0, -1.0, float("inf"), True, "5"):
        with pytest.raises(ValueError, match="positive number"):
            SubprocVectorEnv(fns(0), num_workers=2, step_timeout=bad)
    with pytest.raises(ValueError, match="num_workers >= 1"):
        make_vector_env(FaultyEnv, num_envs=2, num_workers=0, step_timeout=1.0)
    venv = make_vector_env(FaultyEnv, num_envs=2, num_workers=2, step_timeout=5.0)
    try:
        assert venv._local is None and venv.step_timeout == 5.0  # every env in a worker
    finally:
        venv.close()


def test_errors_pickle_with_their_fields():
    errors = [
        EnvValueError("v", env_index=2, worker=1, call="step", field="reward", episode_step=7),
        EnvTimeout(
            "t", env_index=3, env_indices=(3,), worker=1, pid=9, call="reset", timeout=1.5,
            child_traceback="stack",
        ),
        EnvError("e", env_index=0, worker=None, call="step", child_traceback="tb"),
    ]
    for error in errors:
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is type(error) and copy.__dict__ == error.__dict__
        assert str(copy) == str(error)


_HANG_SCRIPT = """
import multiprocessing.forkserver as fs, numpy as np
from functools import partial
from envs import EnvTimeout, SubprocVectorEnv
from envs.testing import FaultyEnv
fns = [partial(FaultyEnv)] * 3 + [partial(FaultyEnv, fault="hang", fault_at=2)]
venv = SubprocVectorEnv(fns, num_workers=2, step_timeout=0.5)
pids = [p.pid for p in venv._workers.procs] + [fs._forkserver._forkserver_pid]
venv.reset(seed=0)
try:
    for _ in range(3):
        venv.step(np.zeros(4, dtype=np.int64))
except EnvTimeout as exc:
    print("TIMEOUT", exc.env_index)
venv.close()
print(" ".join(map(str, pids)), flush=True)
"""


@pytest.mark.timeout(60)
def test_timeout_then_close_leaves_no_process_or_temp_dir(tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path))  # multiprocessing's pymp-* dirs go here
    proc = subprocess.run(
        [sys.executable, "-c", _HANG_SCRIPT],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=50,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.split("\n")
    assert lines[0] == "TIMEOUT 3"
    pids = [int(p) for p in lines[1].split()]
    alive = wait_until_dead(pids, timeout=10)
    assert not alive, f"processes {alive} of {pids} outlived the vector env"
    assert not list(tmp_path.glob("pymp-*"))
