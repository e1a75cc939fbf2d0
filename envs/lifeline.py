"""Env workers, their forkserver and resource tracker never outlive the process that
owns the vector env, however it dies (SIGKILL included), even while an env is asleep
inside ``step``.

A worker notices its owner's death on pipe EOF only when it is idle, and with the
(default) forkserver start method its parent is the forkserver, not the owner, so a
plain parent-death signal would tie it to the wrong process. Three ties instead:

1. The forkserver exits with its owner: it stops when every holder of its "alive"
   pipe has closed it, and every forkserver child inherits one, so a worker asleep in
   ``step`` used to keep it (and through it the worker itself) alive. Workers close
   their copy (:func:`tie_to_owner`), so the owner's death is the forkserver's EOF.
2. A forkserver child asks for SIGKILL when its parent dies (``PR_SET_PDEATHSIG``):
   the forkserver is single-threaded, so "parent" means the forkserver process. The
   signal comes from the kernel, so it works whatever the env is doing. (It is not set
   for fork/spawn children: their parent is the thread that started them, which may
   end long before the vector env does.)
3. A watchdog thread waits on a pidfd of the owner and ends the worker when it
   exits: the tie for fork/spawn children and for a forkserver kept alive by some
   other process. A thread needs the GIL, so it cannot stop an env stuck in C code
   that holds it; ties 1 and 2 can.

The resource tracker exits when the last process holding its pipe (the owner, the
workers) is gone. What a SIGKILLed owner cannot clean up itself is its ``pymp-*``
temporary directory, which holds the forkserver's socket: the forkserver removes it
on its way out when its owner is dead (:func:`_forkserver_exit_hook`, installed when
this module is imported as a forkserver preload module). Only a directory named after
that owner (:func:`prepare_forkserver`): multiprocessing's directory is inherited by
forked children, and removing a parent's that way would break its next start.
"""

from __future__ import annotations

import atexit
import os
import select
import shutil
import signal
import sys
import tempfile
import threading
import time
from typing import Any

PR_SET_PDEATHSIG = 1
POLL_S = 1.0  # the watchdog's period where pidfds are missing (Linux < 5.3)
SUN_PATH_MAX = 108  # bytes in a Unix socket's path, its final NUL included (Linux)
PRELOAD = ["envs.lifeline", "envs.worker", "envs.runner"]  # lifeline first: see the hook


def _dir_prefix(pid: int) -> str:
    # mkdtemp's random part has no "-": no multiprocessing-made name starts like this.
    return f"pymp-{pid}-"


def prepare_forkserver(ctx: Any) -> None:
    """Before a vector env starts workers from the forkserver context ``ctx``: preload
    the worker's modules (and this one's exit hook) in the forkserver, and, when this
    process has not started its forkserver yet, give it a multiprocessing temp
    directory of its own, named after it, for the forkserver's socket."""
    ctx.set_forkserver_preload(PRELOAD)
    from multiprocessing import forkserver, process

    if forkserver._forkserver._forkserver_pid is not None:
        return  # running: its socket lives where it lives
    config = process.current_process()._config
    current = config.get("tempdir")
    if current and os.path.basename(current).startswith(_dir_prefix(os.getpid())):
        return
    folder = tempfile.mkdtemp(prefix=_dir_prefix(os.getpid()))
    if len(os.path.join(folder, "listener-12345678")) >= SUN_PATH_MAX:
        os.rmdir(folder)  # a socket there could not be bound: multiprocessing's own, then
        return
    # What multiprocessing.util.get_temp_dir registers for its own directory.
    from multiprocessing import util

    util.Finalize(None, shutil.rmtree, args=(folder, True), exitpriority=-100)
    config["tempdir"] = folder


def _set_pdeathsig(sig: int) -> bool:
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(sig)) == 0
    except (OSError, AttributeError):  # not Linux
        return False


def _release_forkserver() -> None:
    """Close this process's copy of the forkserver's "alive" pipe (see tie 1) and forget
    that forkserver: should env code start processes itself, it gets its own."""
    from multiprocessing import forkserver

    server = forkserver._forkserver
    fd = server._forkserver_alive_fd
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass
    server._forkserver_alive_fd = server._forkserver_address = server._forkserver_pid = None


def _readable(pidfd: int, wait: float | None) -> bool:
    """Wait until ``pidfd`` turns readable (its process exited), at most ``wait`` s."""
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return bool(poller.poll(None if wait is None else int(wait * 1000)))


def _end_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _watch(owner: int) -> None:
    """Tie 3: a daemon thread that kills this process once ``owner`` has exited."""
    try:
        fd = os.pidfd_open(owner)
    except ProcessLookupError:  # gone already
        _end_self()
        return
    except (AttributeError, OSError):
        fd = None

    def wait() -> None:
        if fd is not None:
            _readable(fd, None)
        else:
            while True:
                try:
                    os.kill(owner, 0)
                except ProcessLookupError:
                    break
                except PermissionError:  # alive, but not ours to signal
                    pass
                time.sleep(POLL_S)
        _end_self()

    threading.Thread(target=wait, name="rlpar-env-owner-watch", daemon=True).start()


def tie_to_owner(owner: int) -> None:
    """Make this env worker die with ``owner``, the process that owns its vector env
    (ties 1-3 of the module docstring). Call first thing in the worker."""
    parent = os.getppid()
    _release_forkserver()
    if parent != owner and _set_pdeathsig(signal.SIGKILL):
        if os.getppid() != parent:  # the forkserver died before the request took effect
            _end_self()
    _watch(owner)


# -- the forkserver side --------------------------------------------------------------


def _in_forkserver_preload() -> bool:
    """Whether this import runs inside ``multiprocessing.forkserver.main`` (preloading)."""
    forkserver = sys.modules.get("multiprocessing.forkserver")
    if forkserver is None:
        return False
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code is forkserver.main.__code__:
            return True
        frame = frame.f_back
    return False


def _owner_exited(owner: int, pidfd: int | None, wait: float) -> bool:
    """Whether ``owner`` exits within ``wait`` seconds. The forkserver sees EOF on its
    alive pipe when the owner's files close, a moment before the owner has exited."""
    if pidfd is not None:
        return _readable(pidfd, wait)
    deadline = time.monotonic() + wait
    while os.getppid() == owner:  # re-parented once the owner has exited
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _forkserver_exit_hook() -> None:
    """In the forkserver: at exit, if the owner that started it has died, remove the
    owner's own ``pymp-<pid>-*`` directory (the forkserver's socket is in it); a
    live owner removes it itself (it may still use it)."""
    me, owner = os.getpid(), os.getppid()
    try:
        pidfd: int | None = os.pidfd_open(owner)
    except (AttributeError, OSError):
        pidfd = None

    def clean() -> None:
        # A SIGKILLed owner's exit can lag its pipe's EOF by seconds on a loaded machine.
        if os.getpid() != me or not _owner_exited(owner, pidfd, wait=10.0):
            return  # a forked child, or the owner lives (it stopped this forkserver)
        from multiprocessing import forkserver

        address = forkserver._forkserver._forkserver_address
        if isinstance(address, str) and address and not address.startswith("\0"):
            folder = os.path.dirname(address)
            if os.path.basename(folder).startswith(_dir_prefix(owner)):
                shutil.rmtree(folder, ignore_errors=True)

    atexit.register(clean)


if _in_forkserver_preload():
    _forkserver_exit_hook()
