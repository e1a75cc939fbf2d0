"""Ctrl-C (SIGINT to the process group, as a terminal sends it) or SIGTERM to the
launching process stops a job cleanly: the summary is printed and saved, no
traceback, no temporary files, no process left."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest


def _start(tmp_path, *argv, max_seconds=120):
    env = dict(os.environ, TMPDIR=str(tmp_path / "tmp"))
    os.makedirs(env["TMPDIR"])
    return subprocess.Popen(
        [sys.executable, "-m", "experiments.apex", "--max-seconds", str(max_seconds), "--status-every", "0.5",
         # An unreachable target: CartPole can be solved before the signal lands (CI saw
         # stop_reason "solved" where the test expected "terminated").
         "--log-dir", str(tmp_path / "runs"), "--num-envs", "2", "--target-return", "1e9", *argv],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)


def _wait_for_status(proc):
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith("[apex] ") and "env_steps=" in line:
            return
    raise AssertionError("no status line within 60 s")


@pytest.mark.timeout(120)
# A local run: a Ctrl-C reaches every process of the group, a SIGTERM the launcher alone
# (which forwards it). A serial run is one process whose handler (StopSignals) is the
# one a rank and the launcher use, for either signal: a SIGTERM there adds no path the
# local SIGTERM does not take, so only its Ctrl-C (Python's default handler raises
# KeyboardInterrupt where ours is missing) is run.
@pytest.mark.parametrize(("how", "mode"), [("ctrl-c", "local"), ("sigterm", "local"), ("ctrl-c", "serial")],
                         ids=["ctrl-c-local", "sigterm-local", "ctrl-c-serial"])
def test_a_stopped_job_prints_and_saves_its_summary(tmp_path, how, mode):
    proc = _start(tmp_path, *(["--serial"] if mode == "serial" else []))
    try:
        _wait_for_status(proc)
        if how == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)  # what a terminal does
        else:
            proc.send_signal(signal.SIGTERM)  # a scheduler stopping the launcher only
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    _assert_stopped_cleanly(tmp_path, proc, out, err, "interrupted" if how == "ctrl-c" else "terminated")


def _assert_stopped_cleanly(tmp_path, proc, out, err, reason):
    assert proc.returncode == 0, err
    assert "stopped early" in out and "Traceback" not in err, (out, err)
    (run_dir,) = os.listdir(tmp_path / "runs")
    summary = json.load(open(tmp_path / "runs" / run_dir / "summary.json"))
    assert summary["interrupted"] and summary["stop_reason"] == reason
    assert os.listdir(tmp_path / "tmp") == []  # launch's directory removed
    try:
        os.killpg(proc.pid, 0)
        alive = True
    except ProcessLookupError:
        alive = False
    assert not alive, "a process of the job outlived it"
    return summary


def _catches(pid, sig):
    """Whether process ``pid`` has a handler for ``sig`` (its SigCgt mask)."""
    with open(f"/proc/{pid}/status") as f:
        mask = next(line for line in f if line.startswith("SigCgt:")).split()[1]
    return bool(int(mask, 16) >> (sig - 1) & 1)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("after", "to_group"), [(0.7, True), (2.5, False)])
def test_a_ctrl_c_in_the_first_seconds_of_a_local_run_still_stops_it_with_its_summary(tmp_path, after, to_group):
    """0.7 s: the launcher is still preparing (the world does not exist yet); 2.5 s:
    about when the ranks start, before any of them handles a stop (a Ctrl-C sent to
    the launcher alone, there, once ran the whole budget). Not before the job's entry
    point handles stops (it catches SIGTERM from then on): on a loaded machine the
    interpreter's own start can take that long, and a Ctrl-C there is Python's."""
    proc = _start(tmp_path, max_seconds=40)
    try:
        started = time.monotonic()
        while not _catches(proc.pid, signal.SIGTERM) and time.monotonic() - started < 30:
            time.sleep(0.01)
        time.sleep(max(0.0, after - (time.monotonic() - started)))
        if to_group:
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=50)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    summary = _assert_stopped_cleanly(tmp_path, proc, out, err, "interrupted")
    assert summary["wall_s"] < 30  # stopped, not run to its budget


@pytest.fixture
def no_stop_noted():
    """This process's stop request (rlpar.distributed.stops), noted by a handler a
    test calls, is not for the tests after it."""
    from rlpar.distributed import stops

    stops.forget()
    yield
    stops.forget()


@pytest.mark.timeout(20)
def test_a_signal_landing_while_the_coordinator_is_locked_still_stops_the_job(no_stop_noted):
    """The handler runs on the main thread wherever it was interrupted: inside a
    report or a tick it finds the coordinator's lock held by that same thread. It
    once waited on it forever (seen as a Ctrl-C that never ended a MADDPG run)."""
    import threading

    from experiments.runtime.config import RunConfig
    from experiments.runtime.coordinator import Coordinator
    from experiments.runtime.job import StopSignals
    from rlpar.logging import MetricLogger

    run = RunConfig(status_every=0.0, max_env_steps=10**6, max_seconds=600.0)
    coord = Coordinator(job="t", run=run, env_id="x", num_sources=1, target=1e9, started=time.time(),
                        logger=MetricLogger(log_dir=None), quiet=True)
    with StopSignals(coord.stop) as signals:
        done = threading.Event()

        def interrupted_while_locked():
            with coord._lock:  # what report()/tick() hold when the signal lands
                signals._handle(signal.SIGINT, None)
            done.set()

        # On a helper thread only so that a regression fails the test instead of hanging it.
        threading.Thread(target=interrupted_while_locked, daemon=True).start()
        assert done.wait(5), "the stop request waited on the coordinator's lock"
    assert coord.should_stop() and coord.stop_reason == "interrupted" and signals.received == "SIGINT"
    coord.stop("finished")  # the first reason stays
    assert coord.stop_reason == "interrupted"
