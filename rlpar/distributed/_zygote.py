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
"""

from __future__ import annotations

import os
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


def main(payload: str, tmp: str, nprocs: int, preload: list[str]) -> None:
    import importlib

    from rlpar.distributed import _child

    for module in preload:  # the point of the zygote: imported once for all ranks
        importlib.import_module(module)

    me = os.getpid()
    children: dict[int, int] = {}
    exit_codes: dict[int, int] = {}
    stopping = False  # a stop was asked (Ctrl-C or the launcher's request): no more restarts

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
        nonlocal stopping
        stopping = True

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
    def fork(rank: int, restarts: int) -> None:
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.default_int_handler)
                # A rank that never asks for stop requests ignores them (a job's
                # ranks install a handler; see experiments.runtime.job.StopSignals).
                signal.signal(signal.SIGUSR1, signal.SIG_IGN)
                signal.signal(signal.SIGUSR2, signal.SIG_IGN)
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

    for rank in range(nprocs):
        fork(rank, 0)
    requests = _Requests(sys.stdin.fileno())
    restarts: dict[int, int] = {}
    while children or requests.open:
        if requests.open:
            # Wait for a request or a rank's exit, whichever comes first.
            for rank in requests.poll(timeout=0.02):
                if stopping:
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
