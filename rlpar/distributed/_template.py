"""A warm parent of zygotes, for a process that launches many local worlds (run as a
module by :mod:`._warm`).

Each :func:`rlpar.distributed.launch` runs its ranks under a zygote that has imported
torch (:mod:`._zygote`). Started from a fresh interpreter, that import is most of a
small world's start: about 1.5 s of CPU, every launch. This process pays it once: it
imports the ``preload`` modules (on the launcher's ``sys.path``, its last argument),
then waits on its control socket, and forks a zygote for each launch that asks. Nothing runs here but that loop (no torch threads, no RPC),
so forking stays as safe as it is in a fresh zygote.

A request brings what a fresh zygote would have had from ``subprocess.Popen``: its
arguments, its environment and working directory, and its standard descriptors
(passed with ``SCM_RIGHTS``, so a test's captured output and the launcher's restart
pipe are the zygote's as before), plus one end of a socket pair that is the launcher's
handle on that zygote: this process writes the zygote's pid on it, then its exit code
once reaped. The launcher closing its end (it died, or gave up) gets the zygote a
SIGTERM, which kills and reaps its ranks.

Lifetimes: this process dies with the launcher (``PR_SET_PDEATHSIG`` in the launcher's
keeper thread, and the control socket's EOF), and each zygote with this process (its
own ``PR_SET_PDEATHSIG``), so a killed launcher leaves nothing behind, as before.
Stop signals are the zygote's to handle, not this one's: it ignores SIGINT, SIGTERM,
SIGUSR1 and SIGUSR2 (a terminal's Ctrl-C reaches the whole process group).
"""

from __future__ import annotations

import json
import os
import pickle
import select
import signal
import socket
import struct
import sys

# The length prefix of a request and what a launcher gets back (pid, then exit code).
HEADER = struct.Struct("!I")
REPLY = struct.Struct("!q")
MAX_FDS = 4  # the zygote's handle, stdin, stdout, stderr
IGNORED = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)


def recv_exact(conn: socket.socket, size: int) -> bytes:
    """Exactly ``size`` bytes from ``conn``; EOFError if it closes first."""
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def _receive(control: socket.socket) -> tuple[dict, list[int]]:
    """One request: (its fields, its descriptors). EOFError when the launcher is gone."""
    head, fds, _flags, _addr = socket.recv_fds(control, HEADER.size, MAX_FDS)
    if not head:
        for fd in fds:
            os.close(fd)
        raise EOFError
    if len(head) < HEADER.size:
        head += recv_exact(control, HEADER.size - len(head))
    (size,) = HEADER.unpack(head)
    return pickle.loads(recv_exact(control, size)), fds


def _become_zygote(request: dict, fds: list[int], keep: set[int], template: int) -> None:
    """In the forked child: take the launch's descriptors, environment and directory,
    then run the zygote (never returns)."""
    code = 1
    try:
        handle, stdin, stdout, stderr = fds
        for fd in keep:  # the control socket, other zygotes' handles
            os.close(fd)
        os.close(handle)
        for target, fd in ((0, stdin), (1, stdout), (2, stderr)):
            os.dup2(fd, target)
            os.close(fd)
        # The stop signals came blocked from the fork (see main): one the launcher sent
        # already waits for the zygote's handlers; SIGTERM keeps its default, as in a
        # fresh zygote.
        for sig in IGNORED + (signal.SIGCHLD,):
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        from rlpar.distributed import _zygote

        _zygote._die_with_parent()
        if os.getppid() != template:  # the template died before prctl took effect
            return
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        payload, tmp, nprocs, preload = request["argv"]
        _zygote.main(payload, tmp, int(nprocs), [m for m in preload.split(",") if m])
        code = 0
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code)


def main(control_fd: int, preload: list[str], path: list[str]) -> None:
    for sig in IGNORED:
        signal.signal(sig, signal.SIG_IGN)
    from rlpar.distributed import _child, _zygote  # noqa: F401  (what every zygote runs)

    sys.path[:] = path  # the launcher's, as a fresh zygote has it for its preload
    _zygote.run_preload(preload)
    control = socket.socket(fileno=control_fd)
    me = os.getpid()
    handles: dict[int, socket.socket] = {}  # zygote pid -> its launcher's handle
    abandoned: set[int] = set()  # zygotes whose launcher closed its handle: SIGTERMed
    try:
        while True:
            watched = [h for pid, h in handles.items() if pid not in abandoned]
            readable, _, _ = select.select([control, *watched], [], [], 0.05)
            if control in readable:
                try:
                    request, fds = _receive(control)
                except (EOFError, ConnectionError):
                    return  # the launcher is gone: the finally below ends the zygotes
                keep = {control.fileno(), *(h.fileno() for h in handles.values())}
                # Forked with the signals this process ignores blocked: the launcher may
                # signal the zygote as soon as it has its pid, before the child resets
                # them, and Linux keeps a blocked signal pending even where it is ignored.
                mask = signal.pthread_sigmask(signal.SIG_BLOCK, IGNORED)
                pid = os.fork()
                if pid == 0:
                    _become_zygote(request, fds, keep, me)
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
                handle = socket.socket(fileno=fds[0])
                for fd in fds[1:]:
                    os.close(fd)
                handles[pid] = handle
                try:
                    handle.sendall(REPLY.pack(pid))
                except OSError:
                    os.kill(pid, signal.SIGTERM)
            for pid, handle in list(handles.items()):
                if handle in readable:
                    # The launcher closed its end without waiting for the exit.
                    abandoned.add(pid)
                    try:
                        os.kill(pid, signal.SIGTERM)
                    except ProcessLookupError:
                        pass
            _reap(handles)
            abandoned &= handles.keys()
    finally:
        for pid in handles:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        os._exit(0)


def _reap(handles: dict[int, socket.socket]) -> None:
    while handles:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        handle = handles.pop(pid, None)
        if handle is not None:
            try:
                handle.sendall(REPLY.pack(os.waitstatus_to_exitcode(status)))
            except OSError:
                pass
            handle.close()


if __name__ == "__main__":
    main(int(sys.argv[1]), [m for m in sys.argv[2].split(",") if m], json.loads(sys.argv[3]))
