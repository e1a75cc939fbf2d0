"""Torch-free entries for launcher tests (a rank that imports nothing heavy starts fast)."""

from __future__ import annotations

import os
import signal
import time


def rank_and_env(offset):
    keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS")
    return int(os.environ["RANK"]) + offset, {k: os.environ[k] for k in keys}


def rank1_raises(pid_dir):
    _record_pid(pid_dir)
    if os.environ["RANK"] == "1":
        time.sleep(0.2)
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
    with open(os.path.join(pid_dir, f"rank{os.environ['RANK']}.pid"), "w") as f:
        f.write(str(os.getpid()))


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
