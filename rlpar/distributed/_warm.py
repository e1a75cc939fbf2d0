"""The launcher's side of :mod:`._template`: zygotes forked from a warm parent.

A process's first :func:`rlpar.distributed.launch` starts its zygote from a fresh
interpreter, as it always did; from its second on (a test session, a job that restarts
its world, a sweep in one process) the zygote is forked from a template process that
imported torch once, and the launch saves that import (about 1.5 s of CPU each).
``RLPAR_WARM_ZYGOTE=0`` never uses a template, ``=1`` uses one from the first launch.

One template per set of what is read at import time (the preload modules, the
interpreter, and the environment variables of torch, OpenMP, MKL, CUDA and Python):
a launch whose environment differs there gets another template (at most
``_MAX_TEMPLATES``: the one used longest ago with no zygote running is stopped for a
new one; with none idle, fresh zygotes), so a zygote never runs torch imported under
settings other than its own. Anything that goes wrong with a template (it died,
a request failed) makes that launch start a fresh zygote instead: the warm path only
ever saves time.

:class:`WarmZygote` is what the launcher holds instead of ``subprocess.Popen``: the
same ``poll``/``wait``/``send_signal``/``terminate``/``kill``/``stdin``/``returncode``,
the exit code arriving on the zygote's handle from the template, and signals sent
through a pidfd, so that a reused pid is never signalled.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Sequence

from rlpar.distributed._template import HEADER, REPLY, recv_exact

log = logging.getLogger(__name__)

WARM_ENV = "RLPAR_WARM_ZYGOTE"
_IMPORT_TIME_PREFIXES = ("TORCH", "PYTORCH", "OMP_", "KMP_", "GOMP_", "MKL", "OPENBLAS", "CUDA", "NVIDIA",
                         "CUBLAS", "CUDNN", "PYTHON", "LD_")
_MAX_TEMPLATES = 4
_START_S = 120.0  # a template's first fork waits for its imports

_lock = threading.Lock()
_launches = 0
_templates: dict[tuple, _Template] = {}


class WarmZygote:
    """A zygote forked by a template, held as a ``subprocess.Popen`` is."""

    def __init__(self, *, pid: int, handle: socket.socket, stdin) -> None:
        self.pid, self.stdin = pid, stdin
        self.returncode: int | None = None
        self._handle = handle
        try:
            self._pidfd: int | None = os.pidfd_open(pid)
        except (AttributeError, OSError):  # gone already (its exit code is on the way), or no pidfds
            self._pidfd = None

    def _take_exit(self) -> None:
        try:
            self._done(REPLY.unpack(recv_exact(self._handle, REPLY.size))[0])
        except EOFError:  # the template died before it could say: its zygotes were killed with it
            self._done(-signal.SIGKILL)

    def _done(self, code: int) -> None:
        self.returncode = code
        self._handle.close()
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self._handle], [], [], 0)[0]:
            self._take_exit()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not select.select([self._handle], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(f"zygote {self.pid}", timeout)
            self._take_exit()
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is not None:
            return
        try:
            if self._pidfd is not None:
                signal.pidfd_send_signal(self._pidfd, sig)
            else:
                os.kill(self.pid, sig)
        except ProcessLookupError:  # exited; its code is on the way (as Popen does)
            pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class _Template:
    def __init__(self, *, preload: Sequence[str], env: dict[str, str]) -> None:
        self.control, theirs = socket.socketpair()
        self.lock = threading.Lock()
        started, self._closed = threading.Event(), threading.Event()
        box: list = []

        def keeper() -> None:
            # PR_SET_PDEATHSIG fires when the thread that forked a child exits: this
            # thread lives as long as the process, so the template does too.
            try:
                box.append(subprocess.Popen(
                    [sys.executable, "-m", "rlpar.distributed._template", str(theirs.fileno()), ",".join(preload),
                     json.dumps(list(sys.path))],
                    env=env, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=_die_with_parent))
            except BaseException as exc:  # handed to the launching thread
                box.append(exc)
            started.set()
            self._closed.wait()

        threading.Thread(target=keeper, name="rlpar-zygote-template", daemon=True).start()
        started.wait()
        theirs.close()
        if isinstance(box[0], BaseException):
            self.control.close()
            raise box[0]
        self.process: subprocess.Popen = box[0]
        self.used = time.monotonic()
        self._zygotes: weakref.WeakSet[WarmZygote] = weakref.WeakSet()

    def alive(self) -> bool:
        return self.process.poll() is None

    def running(self) -> bool:
        """Whether a zygote of this template has not exited yet (as far as its launcher knows)."""
        return any(z.returncode is None for z in list(self._zygotes))

    def close(self) -> None:
        """End the template (its control socket's EOF), then its keeper thread."""
        self.control.close()
        try:
            self.process.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._closed.set()

    def fork(self, *, argv: Sequence[str], env: dict[str, str], restartable: bool) -> WarmZygote:
        mine, theirs = socket.socketpair()
        if restartable:
            stdin_read, stdin_write = os.pipe()
        else:
            stdin_read, stdin_write = os.open(os.devnull, os.O_RDONLY), None
        try:
            try:
                request = pickle.dumps({"argv": list(argv), "env": env, "cwd": os.getcwd()})
                with self.lock:
                    socket.send_fds(self.control, [HEADER.pack(len(request))],
                                    # This process's descriptors 1 and 2 now: a test's capture, say.
                                    [theirs.fileno(), stdin_read, 1, 2])
                    self.control.sendall(request)
            finally:
                theirs.close()
                os.close(stdin_read)
            mine.settimeout(_START_S)
            pid = REPLY.unpack(recv_exact(mine, REPLY.size))[0]  # EOFError: the template died first
        except BaseException:
            mine.close()
            if stdin_write is not None:
                os.close(stdin_write)
            raise
        mine.settimeout(None)
        stdin = None if stdin_write is None else os.fdopen(stdin_write, "wb")
        zygote = WarmZygote(pid=pid, handle=mine, stdin=stdin)
        self._zygotes.add(zygote)
        self.used = time.monotonic()
        return zygote


def _evict_one() -> bool:
    """Stop the template used longest ago that has no zygote running; False if every
    template has one (under ``_lock``)."""
    idle = [key for key, t in _templates.items() if not t.running()]
    if not idle:
        return False
    oldest = min(idle, key=lambda key: _templates[key].used)
    _templates.pop(oldest).close()
    return True


def _die_with_parent() -> None:
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def _key(preload: Sequence[str], env: dict[str, str]) -> tuple:
    read_at_import = tuple(sorted((k, v) for k, v in env.items() if k.startswith(_IMPORT_TIME_PREFIXES)))
    # Not sys.path: a template imports its preload on the path its first launch had,
    # and each zygote it forks imports it again on its own launch's path (a module the
    # template could not find is found then; one it has, it keeps). Keyed by the path,
    # a script that appends to sys.path between launches would start a template each time.
    return (sys.executable, tuple(preload), read_at_import)


def zygote(*, argv: Sequence[str], env: dict[str, str], preload: Sequence[str],
           restartable: bool) -> WarmZygote | None:
    """A zygote forked from this process's template for ``env``, or None where a launch
    should start a fresh one (its first launch, ``RLPAR_WARM_ZYGOTE=0``, too many
    templates, or a template that failed)."""
    global _launches
    wanted = os.environ.get(WARM_ENV, "")
    key = _key(preload, env)
    with _lock:
        _launches += 1
        if wanted == "0" or (wanted != "1" and _launches < 2):
            return None
        template = _templates.get(key)
        if template is not None and not template.alive():
            del _templates[key]
            template = None
        if template is None:
            if len(_templates) >= _MAX_TEMPLATES and not _evict_one():
                return None
            try:
                template = _templates[key] = _Template(preload=preload, env=env)
            except Exception as exc:
                log.debug("no zygote template: %r", exc)
                return None
    try:
        return template.fork(argv=argv, env=env, restartable=restartable)
    except Exception as exc:
        log.debug("the zygote template failed (%r): a fresh zygote instead", exc)
        with _lock:
            if _templates.get(key) is template:
                del _templates[key]
        template.process.kill()
        template.close()
        return None
