"""How a launch ends: a rank that does not finish after the lead returned is killed
and named, a stop asked before the ranks handle it reaches them, and the directory
of a SIGKILLed launcher is swept by the next launch."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import dist_launch_programs as programs
import pytest

from rlpar.distributed import launch
from tests.procs import wait_until_dead

HERE = os.path.dirname(os.path.abspath(__file__))


def _pids(pid_dir):
    return [int(open(os.path.join(pid_dir, n)).read()) for n in os.listdir(pid_dir)]


@pytest.mark.timeout(30)
def test_a_rank_still_running_after_the_lead_returned_is_killed_and_named(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="rlpar.distributed.launch")
    t0 = time.monotonic()
    results = launch(programs.lead_returns_while_rank1_hangs, nprocs=2, args=(str(tmp_path),),
                     timeout=25, preload=(), finish_grace=0.5, labels=["learner", "actor 0"])
    assert results == ["summary", None]
    assert time.monotonic() - t0 < 20  # not the launch's timeout
    (warning,) = [r.getMessage() for r in caplog.records if "had not finished" in r.getMessage()]
    assert "rank 1 (actor 0)" in warning and "_stuck_in_env_step" in warning, warning
    assert len(_pids(tmp_path)) == 2 and wait_until_dead(_pids(tmp_path)) == []


@pytest.fixture
def stops():
    """This process's stop request (rlpar.distributed.stops), none before and after."""
    from rlpar.distributed import stops

    stops.forget()
    yield stops
    stops.forget()


@pytest.mark.timeout(90)
@pytest.mark.parametrize("when", ["before the launch", "while the ranks start"])
def test_a_stop_asked_before_the_ranks_handle_it_reaches_them(tmp_path, stops, ctrl_c, when):
    if when == "before the launch":
        stops.note(signal.SIGINT)  # what python -m experiments.<job> notes while it prepares
    else:
        ctrl_c.when(lambda: len(os.listdir(tmp_path)) >= 2)  # once both ranks are forked
    with ctrl_c.contained():
        results = launch(programs.reports_stop_request, nprocs=2, args=(str(tmp_path),), timeout=60,
                         preload=(), stop_grace=10)
    assert results == ["interrupted", "interrupted"]
    assert wait_until_dead(_pids(tmp_path)) == []


def _launcher(out, tmpdir):
    code = ("import dist_launch_programs as p; from rlpar.distributed import launch; "
            f"launch(p.records_temp_dirs_then_sleeps, nprocs=1, args=({out!r},), preload=(), timeout=60)")
    env = dict(os.environ, TMPDIR=tmpdir, PYTHONPATH=os.pathsep.join([HERE, os.getcwd()]))
    proc = subprocess.Popen([sys.executable, "-c", code], env=env)
    deadline = time.monotonic() + 20
    while not os.path.exists(out):
        assert proc.poll() is None and time.monotonic() < deadline, "the launcher's rank did not start"
        time.sleep(0.01)
    pid, rank_tmp, mp_tmp = open(out).read().split()
    return proc, int(pid), rank_tmp, mp_tmp


@pytest.mark.timeout(60)
def test_the_next_launch_sweeps_the_directory_of_a_killed_launcher_not_a_live_ones(tmp_path, monkeypatch):
    # A short temp dir: the ranks' private one inside the launch's must fit a Unix socket path.
    base = tempfile.mkdtemp(prefix="rl-", dir="/tmp")
    try:
        killed, rank, rank_tmp, mp_tmp = _launcher(str(tmp_path / "killed"), base)
        launch_dir = os.path.dirname(rank_tmp)
        assert os.path.dirname(launch_dir) == base and mp_tmp.startswith(rank_tmp + os.sep)
        killed.kill()
        killed.wait()
        assert wait_until_dead([rank]) == []
        assert os.path.isdir(mp_tmp)  # what a SIGKILLed launcher leaves
        live, _, live_tmp, _ = _launcher(str(tmp_path / "live"), base)
        try:
            monkeypatch.setattr(tempfile, "tempdir", base)
            assert launch(programs.rank_and_env, nprocs=1, args=(0,), preload=(), timeout=25)[0][0] == 0
            assert not os.path.exists(launch_dir)
            assert os.path.isdir(live_tmp)
        finally:
            live.terminate()
            live.wait(timeout=20)
        assert os.listdir(base) == []  # the live launcher removed its own on SIGTERM
    finally:
        shutil.rmtree(base, ignore_errors=True)
