"""SubprocVectorEnv failure paths: env errors, dead workers, restarts, timeouts."""

from __future__ import annotations

import gc
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time
from functools import partial

import numpy as np
import pytest

from envs import InProcessVectorEnv, SubprocVectorEnv
from envs.testing import CompositeEnv, CountingEnv
from rlpar.errors import ChildDied, ChildError
from tests.procs import wait_until_dead

ACT = np.zeros(4, dtype=np.int64)


def fns(bad_index: int, **fail):
    return [
        partial(CountingEnv, episode_length=50, **(fail if i == bad_index else {}))
        for i in range(4)
    ]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("step_in_parent", [True, False])
def test_env_raising_in_step_names_env_and_carries_traceback(step_in_parent):
    bad = 0 if step_in_parent else 3  # env 0 is stepped by the parent when step_in_parent
    venv = SubprocVectorEnv(fns(bad, fail_at=2), num_workers=2, step_in_parent=step_in_parent)
    try:
        venv.reset(seed=0)
        venv.step(ACT)
        with pytest.raises(ChildError, match=f"env {bad} raised in step") as err:
            venv.step(ACT)
        assert "failing on purpose in step" in str(err.value)
        assert "RuntimeError" in err.value.child_traceback
        venv.reset(seed=1)  # the other worker's reply was drained: still usable
    finally:
        venv.close()


@pytest.mark.timeout(30)
def test_env_raising_in_reset_names_env():
    venv = SubprocVectorEnv(fns(2, fail_at=1, fail_in="reset"), num_workers=2)
    try:
        venv.reset(seed=0)
        with pytest.raises(ChildError, match="env 2 raised in reset") as err:
            venv.reset(seed=0)
        assert "failing on purpose in reset" in err.value.child_traceback
    finally:
        venv.close()


def test_inprocess_env_error_is_child_error_too():
    venv = InProcessVectorEnv(fns(1, fail_at=1))
    venv.reset(seed=0)
    with pytest.raises(ChildError, match="env 1 raised in step"):
        venv.step(ACT)
    venv.close()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("mode", ["exit", "kill", "segfault"])
def test_dead_worker_detected_quickly(mode):
    venv = SubprocVectorEnv(fns(3, fail_at=2, fail_mode=mode), num_workers=2, step_in_parent=False)
    try:
        venv.reset(seed=0)
        venv.step(ACT)
        start = time.monotonic()
        with pytest.raises(ChildDied, match=r"env worker 1 \(envs 2..3\) died") as err:
            venv.step(ACT)
        assert time.monotonic() - start < 5.0  # ~immediate; generous for a loaded CI box
        expected = {"exit": 3, "kill": -signal.SIGKILL, "segfault": -signal.SIGSEGV}[mode]
        assert err.value.exitcode == expected
        with pytest.raises(RuntimeError, match="unusable"):
            venv.step(ACT)
    finally:
        venv.close()


@pytest.mark.timeout(30)
def test_externally_killed_worker_detected():
    venv = SubprocVectorEnv([partial(CountingEnv)] * 2, num_workers=2, step_in_parent=False)
    try:
        venv.reset(seed=0)
        os.kill(venv._workers.procs[0].pid, signal.SIGKILL)
        with pytest.raises(ChildDied, match="env worker 0"):
            venv.step(np.zeros(2, dtype=np.int64))
    finally:
        venv.close()


@pytest.mark.timeout(40)
def test_restart_on_crash_resets_flags_and_counts():
    venv = SubprocVectorEnv(
        fns(3, fail_at=3, fail_mode="exit"),
        num_workers=2,
        step_in_parent=False,
        restart_on_crash=True,
    )
    try:
        venv.reset(seed=0)
        venv.step(ACT)
        venv.step(ACT)
        obs, rew, term, trunc, info = venv.step(ACT)  # env 3 kills its worker here
        assert venv.crash_count == 1 and venv.worker_crashes == [0, 1]
        assert "exit code 3" in venv.last_crash
        assert info["env_restarted"].tolist() == [False, False, True, True]
        assert info["_env_restarted"].tolist() == [False, False, True, True]
        assert trunc.tolist() == [False, False, True, True]
        assert obs[:, 0].tolist() == [3, 3, 0, 0] and rew[2:].tolist() == [0.0, 0.0]
        obs, _, _, trunc, info = venv.step(ACT)  # next-step autoreset of the cut episodes
        assert obs[:, 0].tolist() == [4, 4, 0, 0] and "env_restarted" not in info
        obs, *_ = venv.step(ACT)
        assert obs[:, 0].tolist() == [5, 5, 1, 1]
    finally:
        venv.close()


@pytest.mark.timeout(30)
def test_step_wait_timeout_then_completes():
    slow = partial(CountingEnv, cpu_us=100_000)  # 0.1 s of CPU per step
    venv = SubprocVectorEnv([slow, slow], num_workers=2, step_in_parent=False)
    try:
        venv.reset(seed=0)
        venv.step_async(np.zeros(2, dtype=np.int64))
        with pytest.raises(TimeoutError):
            venv.step_wait(timeout=0.01)
        with pytest.raises(RuntimeError, match="pending"):
            venv.reset()
        obs, *_ = venv.step_wait(timeout=30)
        assert obs[:, 0].tolist() == [1, 1]
    finally:
        venv.close()


@pytest.mark.timeout(30)
def test_subset_stepping_ping_pong():
    venv = SubprocVectorEnv(
        [partial(CountingEnv, episode_length=100)] * 4, num_workers=2, step_in_parent=False
    )
    try:
        venv.reset(seed=0)
        assert list(venv.envs_of_worker(1)) == [2, 3]
        half = np.zeros(2, dtype=np.int64)
        venv.step_async(half, workers=[0])
        venv.step_async(half, workers=[1])
        with pytest.raises(RuntimeError, match="still stepping"):
            venv.step_async(half, workers=[1])
        for i in range(5):
            obs0, *_ = venv.step_wait()
            assert obs0.shape == (2, 1) and obs0[:, 0].tolist() == [i + 1] * 2
            venv.step_async(half, workers=[0])
            obs1, *_ = venv.step_wait()
            assert obs1[:, 0].tolist() == [i + 1] * 2
            venv.step_async(half, workers=[1])
        venv.step_wait()
        venv.step_wait()
        obs, *_ = venv.step(np.zeros(4, dtype=np.int64))
        assert obs[:, 0].tolist() == [7, 7, 7, 7]
        obs, *_ = venv.step_async(np.zeros(4, dtype=np.int64), workers=[1, 0]) or venv.step_wait()
        assert obs[:, 0].tolist() == [8] * 4
        with pytest.raises(ValueError, match="out of range"):
            venv.step_async(half, workers=[2])
    finally:
        venv.close()


@pytest.mark.timeout(30)
def test_close_with_pending_step_and_garbage_collection_leave_no_process():
    venv = SubprocVectorEnv([partial(CountingEnv)] * 2, num_workers=2, step_in_parent=False)
    venv.reset(seed=0)
    venv.step_async(np.zeros(2, dtype=np.int64))
    venv.close()
    venv.close()
    venv = SubprocVectorEnv([partial(CountingEnv)] * 2, num_workers=2, step_in_parent=False)
    procs = list(venv._workers.procs)
    del venv
    gc.collect()
    assert all(not p.is_alive() for p in procs)


@pytest.mark.timeout(30)
def test_env_factory_failure_in_worker_is_reported():
    def broken():
        raise OSError("no such ROM")

    with pytest.raises(ChildError, match="failed in start") as err:
        SubprocVectorEnv([partial(CountingEnv), broken], num_workers=2)
    assert "no such ROM" in err.value.child_traceback


def _start_in_daemon(queue):
    venv = SubprocVectorEnv([partial(CountingEnv)] * 2, num_workers=2, step_in_parent=False)
    venv.reset(seed=0)
    obs, *_ = venv.step(np.zeros(2, dtype=np.int64))
    venv.close()
    queue.put(obs[:, 0].tolist())


@pytest.mark.timeout(60)
def test_works_inside_a_daemonic_process():
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_start_in_daemon, args=(queue,), daemon=True)
    proc.start()
    try:
        assert queue.get(timeout=50) == [1, 1]
    finally:
        proc.join(timeout=10)
        if proc.is_alive():
            proc.kill()
            proc.join()


@pytest.mark.timeout(40)
def test_restart_on_crash_during_reset_repeats_the_reset_once():
    venv = SubprocVectorEnv(
        fns(1, fail_at=1, fail_in="reset", fail_mode="kill"),
        num_workers=2,
        step_in_parent=False,
        restart_on_crash=True,
    )
    try:
        venv.reset(seed=0)  # first reset fine; the second kills worker 0
        obs, _ = venv.reset(seed=0)  # restarted worker's fresh env resets fine
        assert obs[:, 0].tolist() == [0, 0, 0, 0] and venv.crash_count == 1
    finally:
        venv.close()


def _probe_env():
    import sys as _sys

    env = CountingEnv()

    def threads():
        torch = _sys.modules.get("torch")
        return None if torch is None else torch.get_num_threads()

    env.torch_threads = threads
    return env


@pytest.mark.timeout(60)
def test_workers_do_not_import_torch_or_use_one_thread():
    import torch  # the parent has torch; the worker must not pay for it (or use 1 thread)

    assert torch.get_num_threads() >= 1
    venv = SubprocVectorEnv([_probe_env] * 2, num_workers=2, step_in_parent=False)
    try:
        assert all(t in (None, 1) for t in venv.call("torch_threads"))
    finally:
        venv.close()


@pytest.mark.timeout(30)
def test_envs_with_different_spaces_are_rejected_at_start():
    with pytest.raises(ChildError, match="failed in start") as err:
        SubprocVectorEnv(
            [partial(CountingEnv), partial(CompositeEnv)], num_workers=2, step_in_parent=False
        )
    assert "different from env 0" in err.value.child_traceback
    with pytest.raises(ValueError, match="different"):
        InProcessVectorEnv([partial(CountingEnv), partial(CompositeEnv)])


_ORPHAN_SCRIPT = """
import os, signal, sys
import numpy as np
from functools import partial
from envs import SubprocVectorEnv
from envs.testing import CountingEnv
venv = SubprocVectorEnv([partial(CountingEnv)] * 4, num_workers=2, spin_us=%r)
venv.reset(seed=0)
venv.step(np.zeros(4, dtype=np.int64))
print(" ".join(str(p.pid) for p in venv._workers.procs if p is not None), flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # no cleanup at all: the workers must notice
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("spin_us", [0.0, 100_000.0])
def test_workers_exit_when_the_parent_is_killed(spin_us):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.run(
        [sys.executable, "-c", _ORPHAN_SCRIPT % spin_us],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=50,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    pids = [int(p) for p in proc.stdout.split()]
    assert pids
    alive = wait_until_dead(pids, timeout=10)
    assert not alive, f"workers {alive} of {pids} outlived their parent"


_HUNG_OWNER_SCRIPT = """
import os, signal, time
import numpy as np
from functools import partial
from multiprocessing import forkserver, resource_tracker
from envs import SubprocVectorEnv
from envs.testing import FaultyEnv
venv = SubprocVectorEnv([partial(FaultyEnv, fault="hang", fault_at=1)] * 2, num_workers=2,
                        step_in_parent=False, context=%r)
venv.reset(seed=0)
venv.step_async(np.zeros(2, dtype=np.int64))
while not all(venv._progress[lo] for lo, _ in venv.groups):  # both asleep inside env.step
    time.sleep(0.01)
pids = [p.pid for p in venv._workers.procs]
pids += [forkserver._forkserver._forkserver_pid, resource_tracker._resource_tracker._pid]
print(" ".join(str(p) for p in pids if p is not None), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("context", ["forkserver", "fork"])
def test_workers_asleep_in_step_die_with_their_killed_owner(context):
    # The forkserver is the workers' parent, so they are tied to the owner by their
    # watchdog and by the forkserver's own exit (envs.lifeline); fork children by the
    # watchdog. Nothing of theirs may be left running or in the temp dir. A short temp
    # dir: under a deep one (pytest-xdist's tmp_path) the forkserver's socket path
    # would pass Unix's 108 bytes, and lifeline leaves multiprocessing its own dir.
    with tempfile.TemporaryDirectory(prefix="rl", dir="/tmp") as short:
        _workers_die_with_their_killed_owner(pathlib.Path(short), context)


def _workers_die_with_their_killed_owner(tmp_path, context):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.run(
        [sys.executable, "-c", _HUNG_OWNER_SCRIPT % context],
        cwd=root,
        env=dict(os.environ, TMPDIR=str(tmp_path)),  # multiprocessing's pymp-* dirs go here
        capture_output=True,
        text=True,
        timeout=50,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    pids = [int(p) for p in proc.stdout.split()]
    assert len(pids) == (4 if context == "forkserver" else 2), proc.stdout
    alive = wait_until_dead(pids, timeout=10)
    assert not alive, f"processes {alive} of {pids} outlived their owner"
    assert not list(tmp_path.glob("pymp-*"))
