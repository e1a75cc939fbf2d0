"""The private directory of one :func:`rlpar.distributed.launch`, and the sweep of
the ones a killed launcher left behind.

A launcher that is SIGKILLed cannot remove its directory (the ranks die with it, in a
fraction of a second, but ``entry.pkl`` and the rest stay in the temp dir). Each
directory therefore names its launcher in a file (``launcher``: pid, process start
time, pid namespace), and every launch first removes the directories of launchers that
are gone: only directories owned by this user, of a launcher in this pid namespace
whose pid is gone or now belongs to a process started at another time (pid reuse).
A directory without that file (being created, or from an older version) is left alone.

The ranks get a private TMPDIR inside it, so what they leave in the temp dir when
killed (multiprocessing's ``pymp-*`` folders of their env workers) goes with it.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile

log = logging.getLogger(__name__)

PREFIX = "rlpar-launch-"
OWNER = "launcher"
# multiprocessing puts Unix sockets in its temp folder ("pymp-XXXXXXXX/listener-XXXXXXXX",
# 32 characters) and a socket's path holds at most 107: a deeper private TMPDIR would
# break the env workers' forkserver, so such a launch keeps the inherited one.
_MAX_TMPDIR = 107 - 32


def _identity(pid: int) -> tuple[str, str] | None:
    """(start time, pid namespace) of a running process; None if there is none.
    ("?", "?") where /proc cannot say (then only whether the pid is alive counts)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            start = f.read().rsplit(")", 1)[1].split()[19]  # field 22: start time in ticks
        namespace = os.readlink(f"/proc/{pid}/ns/pid")
        return start, namespace
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:  # alive, someone else's
        pass
    return "?", "?"


def create() -> str:
    """A fresh launch directory naming this process as its launcher."""
    path = tempfile.mkdtemp(prefix=PREFIX)
    me = _identity(os.getpid()) or ("?", "?")
    with open(os.path.join(path, OWNER), "w") as f:
        f.write(f"{os.getpid()} {me[0]} {me[1]}\n")
    return path


def rank_tmpdir(path: str) -> str | None:
    """The ranks' private TMPDIR inside ``path`` (created), or None if too deep."""
    private = os.path.join(path, "tmp")
    if len(private) > _MAX_TMPDIR:
        return None
    os.mkdir(private)
    return private


def _stale(path: str, mine: tuple[str, str]) -> bool:
    try:
        if os.stat(path).st_uid != os.getuid():
            return False
        with open(os.path.join(path, OWNER)) as f:
            pid, start, namespace = f.read().split()
        pid = int(pid)
    except (OSError, ValueError):
        return False
    if pid == os.getpid():
        return False
    if namespace != mine[1]:
        return False  # another pid namespace (a container sharing /tmp): cannot tell
    now = _identity(pid)
    return now is None or (start != "?" and now[0] != "?" and now[0] != start)


def sweep(root: str | None = None) -> list[str]:
    """Remove the launch directories under ``root`` (default: the temp dir) whose
    launcher is gone; returns their paths."""
    root = tempfile.gettempdir() if root is None else root
    try:
        names = [n for n in os.listdir(root) if n.startswith(PREFIX)]
    except OSError:
        return []
    removed = []
    mine = _identity(os.getpid()) or ("?", "?")
    for name in names:
        path = os.path.join(root, name)
        if _stale(path, mine):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    if removed:
        log.info("removed %d launch directories of launchers that are gone: %s", len(removed), removed)
    return removed
