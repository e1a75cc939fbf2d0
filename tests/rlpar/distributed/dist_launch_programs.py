"""Torch-free entries for launcher tests (a rank that imports nothing heavy starts fast)."""

from __future__ import annotations

import os
import signal
import time


def rank_and_env(offset):
    keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS",
            "RLPAR_RUN_SECRET")
    return int(os.environ["RANK"]) + offset, {k: os.environ[k] for k in keys}


def rank1_raises(pid_dir):
    _record_pid(pid_dir)
    if os.environ["RANK"] == "1":
        # Raise once rank 0 has recorded its pid too (a fixed 0.2 s was not enough on a
        # loaded machine): the test checks that a running rank is torn down.
        deadline = time.monotonic() + 20
        while len([n for n in os.listdir(pid_dir) if n.endswith(".pid")]) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        raise ValueError("rank 1 broke on purpose")
    time.sleep(60)  # the launcher must tear this rank down


def rank1_killed(pid_dir):
    _record_pid(pid_dir)
    if os.environ["RANK"] == "1":
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)


def sleeps_forever(pid_dir):
    _record_pid(pid_dir)
    time.sleep(60)


def exits_early():
    os._exit(3)


def returns_unpicklable():
    return lambda: None


def _record_pid(pid_dir):
    path = os.path.join(pid_dir, f"rank{os.environ['RANK']}.pid")
    with open(path + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename(path + ".tmp", path)  # whole or absent: a peer counts the files


def peer_loss_echoes_first(pid_dir, cause_after):
    """Rank 1 fails at once because it lost its peer; rank 0, the real failure,
    exits ``cause_after`` seconds later (a slow teardown)."""
    from rlpar.errors import PeerUnavailable

    _record_pid(pid_dir)
    if os.environ["RANK"] == "1":
        raise PeerUnavailable("peer 'rank0' is unavailable: eof")
    time.sleep(cause_after)
    raise RuntimeError("rank 0 is the cause")


def _record_incarnation(pid_dir):
    """One file per process (a restarted rank adds one): rank<R>.<restarts>.pid."""
    restarts = os.environ.get("RLPAR_RANK_RESTARTS", "0")
    with open(os.path.join(pid_dir, f"rank{os.environ['RANK']}.{restarts}.pid"), "w") as f:
        f.write(str(os.getpid()))


def rank1_dies_until_restarted(pid_dir, deaths, joined=True):
    """Rank 1 SIGKILLs itself until it has been restarted ``deaths`` times, then
    returns; rank 0 waits for it and returns too. ``joined``: each process first marks
    that it joined, as a World does (else it dies as if during the world's start)."""
    from rlpar.distributed._child import JOINED_FILE, REJOINABLE_ENV

    _record_incarnation(pid_dir)
    if joined:
        marks = os.environ[REJOINABLE_ENV]
        open(os.path.join(marks, JOINED_FILE.format(rank=os.environ["RANK"])), "w").close()
    restarts = int(os.environ.get("RLPAR_RANK_RESTARTS", "0"))
    done = os.path.join(os.path.dirname(pid_dir), os.path.basename(pid_dir) + ".rank1-done")
    if os.environ["RANK"] == "1":
        if restarts < deaths:
            time.sleep(0.1)
            os.kill(os.getpid(), signal.SIGKILL)
        open(done, "w").close()
    else:
        while not os.path.exists(done):
            time.sleep(0.01)
    return int(os.environ["RANK"]), restarts, bool(os.environ.get(REJOINABLE_ENV))


def _mark_joined():
    from rlpar.distributed._child import JOINED_FILE, REJOINABLE_ENV

    marks = os.environ[REJOINABLE_ENV]
    open(os.path.join(marks, JOINED_FILE.format(rank=os.environ["RANK"])), "w").close()


def rank1_dies_when_asked_to_stop(pid_dir):
    """Both ranks mark that they joined and wait for the launcher's stop request
    (SIGUSR1); rank 0 then returns, rank 1 dies without a result, as a rank hit by
    a Ctrl-C at a bad moment does."""
    _record_incarnation(pid_dir)
    _mark_joined()
    asked = []
    signal.signal(signal.SIGUSR1, lambda signum, frame: asked.append(signum))
    open(f"{pid_dir}.ready{os.environ['RANK']}", "w").close()
    while not asked:
        time.sleep(0.01)
    if os.environ["RANK"] == "1":
        os._exit(1)
    return "stopped"


def rank1_dies_after_a_ctrl_c_reached_the_helper(pid_dir):
    """Rank 1 sends the helper (its parent) a SIGINT, as a terminal's Ctrl-C does,
    then dies: the launcher sees the death before its own Ctrl-C (the test sends that
    later) and asks for a restart. Rank 0 returns when asked to stop."""
    _record_incarnation(pid_dir)
    _mark_joined()
    asked = []
    signal.signal(signal.SIGUSR1, lambda signum, frame: asked.append(signum))
    if os.environ["RANK"] == "1":
        os.kill(os.getppid(), signal.SIGINT)
        time.sleep(0.2)  # the helper has run its handler
        os._exit(1)
    while not asked:
        time.sleep(0.01)
    return "stopped"


class _LeavesUnderCtrlC:
    """A World whose leaving is hit by a terminal's Ctrl-C, then fails."""

    name = "ctrl-c-at-leave"

    def shutdown(self, *, graceful):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.2)  # a handler that raises would have run by now
        raise RuntimeError("the leave failed")


def returns_then_is_hit_while_leaving():
    """The entry returns; then a Ctrl-C lands and the world's leave fails."""
    from rlpar.distributed import current

    current.join(_LeavesUnderCtrlC())
    return int(os.environ["RANK"]) + 100


def lead_returns_while_rank1_hangs(pid_dir):
    """Rank 0 (the lead) returns; rank 1 never finishes, as an actor stuck in a hung env."""
    _record_pid(pid_dir)
    if os.environ["RANK"] == "0":
        return "summary"
    _stuck_in_env_step()


def _stuck_in_env_step():
    time.sleep(3600)


def reports_stop_request(pid_dir):
    """A rank that looks for a stop request only after a second, as a job's rank
    that installs its handler once its world has joined: what stop did it get?"""
    from rlpar.distributed import stops

    _record_pid(pid_dir)
    time.sleep(1.0)
    deadline = time.monotonic() + 10
    while stops.requested() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    asked = stops.requested()
    return None if asked is None else stops.reason(asked)


def records_temp_dirs_then_sleeps(out):
    """Writes its pid, its temp dir and multiprocessing's (created now, as an env
    worker's start does) to ``out``, then sleeps until killed."""
    import multiprocessing.util
    import tempfile

    with open(out + ".tmp", "w") as f:
        f.write(f"{os.getpid()}\n{tempfile.gettempdir()}\n{multiprocessing.util.get_temp_dir()}\n")
    os.replace(out + ".tmp", out)
    time.sleep(60)


def rank1_dies_after_rank0_returned(pid_dir):
    """Rank 0 returns at once; rank 1 (joined, restartable) SIGKILLs itself once rank
    0 has exited with its result, as an actor hit while its program ends."""
    from rlpar.distributed._child import REJOINABLE_ENV

    _record_incarnation(pid_dir)
    _mark_joined()
    if os.environ["RANK"] == "0":
        return "done"
    exited = os.path.join(os.environ[REJOINABLE_ENV], "exit0")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not os.path.exists(exited):
        time.sleep(0.01)
    os.kill(os.getpid(), signal.SIGKILL)


def rank1_dies_while_rank0_works(pid_dir, save_s):
    """Rank 1 SIGKILLs itself; rank 0 (the lead) works on until it is asked to stop,
    then takes ``save_s`` seconds to save (writes ``saved``, with the stop's reason)
    and raises, as a lead that lost a member does. ``save_s`` None: it never stops."""
    from rlpar.distributed import stops
    from rlpar.errors import PeerUnavailable

    _record_pid(pid_dir)
    if os.environ["RANK"] == "1":
        time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGKILL)
    if save_s is None:
        time.sleep(60)
    while stops.requested() is None:
        time.sleep(0.01)
    time.sleep(save_s)
    with open(os.path.join(pid_dir, "saved"), "w") as f:
        f.write(stops.reason(stops.requested()))
    raise PeerUnavailable("learner group: a member died")


_preloaded_in = None  # the pid of the process that ran mark_preloaded, if any did


def mark_preloaded():
    """A ``module:function`` preload entry as cheap as can be (the jobs' own,
    ``rlpar.buffers.trees:kernels``, compiles numba kernels: seconds of CPU)."""
    global _preloaded_in
    _preloaded_in = os.getpid()


def preloaded_in():
    """``(pid that ran mark_preloaded or None, this rank's pid)``: the same first
    value on every rank, and not a rank's own pid, when the zygote ran it before it
    forked them."""
    return _preloaded_in, os.getpid()
