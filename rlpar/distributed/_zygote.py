"""Parent of the ranks started by :func:`rlpar.distributed.launch` (run as a module).

It imports torch (the ``preload`` modules) once, then forks every rank from that warm interpreter: a rank starts
in milliseconds instead of paying seconds of imports each. Forking is safe here because
nothing has run yet (no torch threads, no RPC). Each rank's exit status is written to
``exit<rank>`` for the launcher; on SIGTERM every rank is killed and reaped first, so
the launcher's teardown leaves nothing behind.

While its stdin is open the zygote also takes requests from the launcher, one a line:
``restart <rank>`` forks that rank again (its previous process has exited and been
reported), with ``RLPAR_RANK_RESTARTS`` counting its restarts, unless a stop was asked
(a Ctrl-C reached it, or the launcher forwarded one): then it writes the rank's exit
again instead, so the launcher sees the death and no rank starts into an ending world.
It exits once every rank has exited and its stdin is closed (a launcher without
restartable ranks gives it /dev/null, so it exits with its last rank as before).

A rank notes stop requests (``rlpar.distributed.stops``) from the moment it is forked,
one that reached the zygote before the fork included, so that the job's handler,
installed once its world has joined, still acts on a Ctrl-C of the first seconds.
The zygote writes each rank's pid to ``pid<rank>``; a rank dumps its threads' stacks
to ``stack<rank>`` on the launcher's request (``DUMP_SIGNAL``).
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import sys
import time


def _die_with_parent() -> None:
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # not Linux: the zygote's SIGTERM handler still applies
        pass


def _write_exit(tmp: str, rank: int, code: int) -> None:
    path = os.path.join(tmp, f"exit{rank}")
    with open(path + ".tmp", "w") as f:
        # CLOCK_MONOTONIC is system-wide: the launcher orders exits by it.
        f.write(f"{code} {time.monotonic()}")
    os.replace(path + ".tmp", path)


# The stop requests a rank notes from the moment it is forked (rlpar.distributed.stops).
STOPS = frozenset({signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2})


def run_preload(preload: list[str]) -> None:
    """Import each ``module`` of ``preload``; for a ``module:function`` entry also call
    ``function()``, once per process (a template's zygote calls it again, so it must be
    cheap the second time), e.g. to load compiled kernels that every rank then shares."""
    import importlib

    for entry in preload:
        module, _, function = entry.partition(":")
        loaded = importlib.import_module(module)
        if function:
            getattr(loaded, function)()


def main(payload: str, tmp: str, nprocs: int, preload: list[str]) -> None:
    me = os.getpid()
    children: dict[int, int] = {}
    exit_codes: dict[int, int] = {}
    # The stop asked (a Ctrl-C reached this process, or the launcher forwarded one):
    # no more restarts, and a rank forked after it starts with it noted.
    asked: list[int] = []

    def stop(signum, frame):
        for pid in list(children):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in list(children):
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
        os._exit(1)

    def note_stop(signum, frame):
        asked.append(signum)

    def forward_stop(signum, frame):
        # The launcher asks the ranks to stop cleanly: SIGUSR1 for its Ctrl-C,
        # SIGUSR2 for its SIGTERM. Not SIGINT: after a terminal's Ctrl-C the ranks
        # already got one, and a second SIGINT means "abort now".
        note_stop(signum, frame)
        for pid in list(children):
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGTERM, stop)
    # A terminal's Ctrl-C reaches the whole process group: the ranks decide what it
    # means; this process only keeps reaping them, and forks no rank again.
    signal.signal(signal.SIGINT, note_stop)
    signal.signal(signal.SIGUSR1, forward_stop)
    signal.signal(signal.SIGUSR2, forward_stop)
    # The launcher started this process with the stop signals blocked, so that one
    # sent while it was starting waits for the handlers above instead of killing it.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)

    from rlpar.distributed import _child

    with open(payload, "rb") as f:
        # The launcher's sys.path (the payload's first record; each rank sets it again):
        # a preload entry may live only on it, e.g. in the launching script's folder.
        sys.path[:] = pickle.load(f)
    run_preload(preload)  # the point of the zygote: done once for all ranks

    def fork(rank: int, restarts: int) -> None:
        # Blocked until the new rank is in ``children``: a stop forwarded in between
        # would miss it. The child unblocks them once it notes stop requests.
        signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)
        try:
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    signal.signal(signal.SIGTERM, signal.SIG_DFL)
                    _rank_setup(tmp, rank, asked[0] if asked else None)
                    _die_with_parent()
                    if os.getppid() != me:  # the zygote died before prctl took effect
                        os._exit(1)
                    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank))
                    if restarts:
                        os.environ[_child.RESTARTS_ENV] = str(restarts)
                    code = _child.main(payload, os.path.join(tmp, f"result{rank}.pkl"))
                finally:
                    sys.stdout.flush()
                    sys.stderr.flush()
                    os._exit(code)
            children[pid] = rank
            _write_text(os.path.join(tmp, _child.PID_FILE.format(rank=rank)), str(pid))
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)

    for rank in range(nprocs):
        fork(rank, 0)
    requests = _Requests(sys.stdin.fileno())
    restarts: dict[int, int] = {}
    while children or requests.open:
        if requests.open:
            # Wait for a request or a rank's exit, whichever comes first.
            for rank in requests.poll(timeout=0.02):
                if asked:
                    # The launcher asked before it saw the stop (a rank's death can
                    # reach it first): hand the death back rather than start a rank
                    # into a world that is ending.
                    _write_exit(tmp, rank, exit_codes.get(rank, 1))
                    continue
                restarts[rank] = restarts.get(rank, 0) + 1
                fork(rank, restarts[rank])
            flags = os.WNOHANG
        else:
            flags = 0
        while children:
            try:
                pid, status = os.waitpid(-1, flags)
            except InterruptedError:  # a forwarded stop interrupted the wait
                continue
            if pid == 0:
                break
            rank = children.pop(pid, None)
            if rank is not None:
                exit_codes[rank] = os.waitstatus_to_exitcode(status)
                _write_exit(tmp, rank, exit_codes[rank])
            if flags == 0:
                break
    os._exit(0)


_stack_file = None  # kept open for faulthandler, which writes to its descriptor


def _rank_setup(tmp: str, rank: int, asked: int | None) -> None:
    """A new rank's first steps, before its entry runs."""
    import faulthandler
    import tempfile

    from rlpar.distributed import _child, stops

    global _stack_file
    # Stop requests are noted from now on, for the StopSignals the job installs
    # later, and one that came before this rank existed is noted as its own.
    stops.forget()
    stops.record(tuple(STOPS))
    if asked is not None:
        stops.note(asked)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)
    # What the launcher dumps when it gives up on this rank (see launch's finish_grace).
    _stack_file = open(os.path.join(tmp, _child.STACK_FILE.format(rank=rank)), "w")
    faulthandler.register(_child.DUMP_SIGNAL, file=_stack_file, all_threads=True)
    # The temp dir (the launch's private one, see _launchdir) is looked up again in
    # each rank: the zygote's cached copies would make the ranks share one folder.
    tempfile.tempdir = None
    process = sys.modules.get("multiprocessing.process")
    if process is not None:
        process.current_process()._config.pop("tempdir", None)


def _write_text(path: str, text: str) -> None:
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


class _Requests:
    """Lines ``restart <rank>`` on the launcher's pipe (stdin)."""

    def __init__(self, fd: int) -> None:
        self.fd, self.open, self._buffer = fd, True, b""

    def poll(self, *, timeout: float) -> list[int]:
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return []
        chunk = os.read(self.fd, 4096)
        if not chunk:
            self.open = False
            return []
        self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        ranks = []
        for line in lines:
            verb, _, rank = line.decode().partition(" ")
            if verb != "restart" or not rank.isdigit():
                raise ValueError(f"zygote: unknown request {line!r}")
            ranks.append(int(rank))
        return ranks


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]),
         [m for m in (sys.argv[4] if len(sys.argv) > 4 else "").split(",") if m])
