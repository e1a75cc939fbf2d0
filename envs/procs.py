"""The worker processes behind SubprocVectorEnv: start, message, watch, replace, stop.

Every wait polls the workers' pipes together with their process sentinels, so a
worker that dies (os._exit, SIGKILL, segfault) is reported at once instead of
leaving the parent blocked on a pipe that will never answer. A worker that is alive
but stuck (an env hanging in step) is only noticed by a deadline (``step_timeout``);
``stop_hung`` then collects its threads' stacks and kills it.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import pickle
import select
import sys
import time
import types
from collections.abc import Callable, Iterator
from typing import Any

from envs import worker as W
from envs.errors import EnvTimeout
from envs.runner import EnvFailure
from envs.spin import Spinner
from envs.wire import Channel, Fd, new_eventfd
from rlpar.errors import ChildDied, ChildError

START_TIMEOUT = 120.0  # building envs (e.g. loading Atari ROMs) in a fresh process
DUMP_WAIT = 1.0  # how long a hung worker gets to write its stacks before it is killed


def default_num_workers() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def split_envs(num_envs: int, groups: int) -> list[tuple[int, int]]:
    """Contiguous (lo, hi) ranges, sizes differing by at most one; the larger ones come
    last, so group 0 (the parent's share, which also carries the batching overhead) is
    never the larger."""
    base, extra = divmod(num_envs, groups)
    out, lo = [], 0
    for g in range(groups):
        hi = lo + base + (1 if g >= groups - extra else 0)
        out.append((lo, hi))
        lo = hi
    return out


@contextlib.contextmanager
def _main_module_hidden() -> Iterator[None]:
    """Start a spawn/forkserver child without re-importing the parent's ``__main__``.

    The env factories travel by value (cloudpickle), so the worker never needs the
    main module; importing it would cost seconds when it imports torch, and would
    require the ``if __name__ == "__main__"`` guard in every user script.
    multiprocessing decides what to import from ``sys.modules['__main__']`` while
    ``Process.start`` runs, so a bare stand-in is shown for that moment.
    """
    main = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")
    # A daemonic process (e.g. an actor started by a pool) may not start children;
    # env workers are still tied to it: daemonic themselves, and they die with it
    # (envs.lifeline).
    config = mp.current_process()._config
    daemon = config.get("daemon", False)
    config["daemon"] = False
    try:
        yield
    finally:
        config["daemon"] = daemon
        if main is not None:
            sys.modules["__main__"] = main


def _read_dump(fd: int, sentinel: int) -> str:
    """What a worker wrote to its dump memfd, once it stopped growing (faulthandler writes
    in many small pieces), waiting at most DUMP_WAIT; stops early if the worker dies."""
    deadline = time.monotonic() + DUMP_WAIT
    size = -1
    while time.monotonic() < deadline:
        now = os.fstat(fd).st_size
        if now and now == size:
            break
        size = now
        if _readable(sentinel):  # died (e.g. the signal arrived before the handler)
            break
        time.sleep(0.02)
    data = os.pread(fd, os.fstat(fd).st_size, 0)
    return data.decode(errors="replace")


def _readable(fd: int) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


class WorkerProcs:
    """One worker process per env group; ``payload_for(w)`` is what worker ``w`` builds
    its envs from, ``buffer`` the shared block every worker maps."""

    def __init__(
        self,
        *,
        ctx: Any,
        groups: list[tuple[int, int]],
        payload_for: Callable[[int], bytes],
        buffer: Any,
        spin_us: float = 0.0,
    ) -> None:
        self.ctx = ctx
        self.groups = groups
        self.payload_for = payload_for
        self.buffer = buffer
        self.spinner = Spinner(spin_us)
        self.procs: list[Any] = [None] * len(groups)
        self.conns: list[Any] = [None] * len(groups)
        self.chans: list[Channel] = [None] * len(groups)  # type: ignore[list-item]
        self.efds: list[tuple[int, int] | None] = [None] * len(groups)
        self.dumps: list[int | None] = [None] * len(groups)  # memfds for stack dumps
        self._pollers: dict[frozenset[int], select.poll] = {}
        self._fd_owner: dict[int, int] = {}

    def start(self, w: int) -> None:
        parent_end, child_end = self.ctx.Pipe(duplex=True)
        # Wake-ups travel on eventfds, not on the socket: see envs.wire for why.
        to_worker, to_parent = new_eventfd(), new_eventfd()
        # An anonymous in-memory file: nothing on disk to clean up if either side dies.
        dump = os.memfd_create(f"rlpar-env-worker-{w}-stacks", os.MFD_CLOEXEC)
        proc = self.ctx.Process(
            target=W.worker_main,
            args=(
                self.payload_for(w),
                self.buffer,
                child_end,
                Fd(to_worker),
                Fd(to_parent),
                Fd(dump),
                os.getpid(),
            ),
            name=f"rlpar-env-worker-{w}",
            daemon=True,
        )
        try:
            with _main_module_hidden():
                proc.start()
        except BaseException:
            for fd in (to_worker, to_parent, dump):
                os.close(fd)
            raise
        child_end.close()  # so the parent sees EOF when the worker dies
        self.procs[w], self.conns[w] = proc, parent_end
        self.efds[w] = (to_worker, to_parent)
        self.dumps[w] = dump
        self.chans[w] = Channel(parent_end.fileno(), send_efd=to_worker, recv_efd=to_parent)
        self._fd_owner[to_parent] = w
        self._fd_owner[proc.sentinel] = w
        self._pollers.clear()  # file descriptors changed

    def _close_fds(self, w: int) -> None:
        try:
            self.conns[w].close()
        except OSError:
            pass
        if self.efds[w] is not None:
            for fd in self.efds[w]:
                os.close(fd)
            self.efds[w] = None
        if self.dumps[w] is not None:
            os.close(self.dumps[w])
            self.dumps[w] = None

    def replace(self, w: int) -> float:
        """Start a fresh worker ``w`` in place of a dead one; returns its start deadline."""
        self._close_fds(w)
        self.start(w)
        deadline = time.monotonic() + START_TIMEOUT
        self.expect(w, deadline=deadline, what="restart")
        return deadline

    def name(self, w: int) -> str:
        lo, hi = self.groups[w]
        return f"env worker {w} (envs {lo}..{hi - 1})"

    def died(self, w: int) -> ChildDied:
        proc = self.procs[w]
        proc.join(timeout=1.0)
        code = proc.exitcode
        how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        return ChildDied(f"{self.name(w)} died ({how})", child_name=self.name(w), exitcode=code)

    def decode(self, w: int, msg: bytes, what: str) -> Any:
        """The payload of a reply, or the ChildError it reports (raised)."""
        op = msg[:1]
        if op == W.OK:
            return None
        if op == W.PAYLOAD:
            return pickle.loads(msg[1:])
        if op == W.ENV_ERROR:
            failure = EnvFailure.from_fields(pickle.loads(msg[1:]))
            raise failure.to_error(lo=self.groups[w][0], call=what, where=self.name(w), worker=w)
        raise ChildError(
            f"{self.name(w)} failed in {what}",
            child_name=self.name(w),
            child_traceback=pickle.loads(msg[1:]),
        )

    def stop_hung(self, w: int, *, call: str, timeout: float, inside: int) -> EnvTimeout:
        """Kill worker ``w``, which did not finish ``call`` within ``timeout`` seconds, and
        describe it: the env it was inside (``inside``: its group's progress slot, see
        envs.runner.EnvRunner), its pid, and the stacks of its threads at that moment."""
        proc, dump = self.procs[w], self.dumps[w]
        pid = proc.pid
        stacks = ""
        if proc.is_alive() and dump is not None:
            try:
                os.kill(pid, W.DUMP_SIGNAL)
            except ProcessLookupError:
                pass
            else:
                stacks = _read_dump(dump, proc.sentinel)
        proc.kill()
        proc.join(timeout=5.0)
        lo, hi = self.groups[w]
        if inside:
            index: int | None = lo + abs(inside) - 1
            what = f"env {index} did not return from {'step' if inside > 0 else 'reset'}"
            if inside < 0 and call == "step":
                what += " (its autoreset)"
            indices: tuple[int, ...] = (index,)
        else:
            index = None
            what = f"envs {lo}..{hi - 1} did not finish {call} (outside any env call)"
            indices = tuple(range(lo, hi))
        return EnvTimeout(
            f"{what} within step_timeout={timeout:g} s ({self.name(w)}, pid {pid}); "
            "the worker was killed",
            env_index=index,
            env_indices=indices,
            worker=w,
            pid=pid,
            call=call,
            timeout=timeout,
            child_traceback=stacks,
        )

    def send(self, w: int, data: bytes) -> None:
        try:
            self.chans[w].send(data)
        except OSError:
            pass  # the worker is dead: the next wait sees its sentinel and reports it

    def _poller(self, workers: frozenset[int]) -> select.poll:
        """A cached poll object over the pipes and process sentinels of ``workers``.

        One ``poll`` syscall per wait: multiprocessing.connection.wait (and
        Connection.poll, which uses it) builds a selector on every call, which measured
        as the largest part of the parent's per-step overhead.
        """
        poller = self._pollers.get(workers)
        if poller is None:
            poller = select.poll()
            for w in workers:
                poller.register(self.chans[w].wait_fd, select.POLLIN)
                poller.register(self.procs[w].sentinel, select.POLLIN)
            self._pollers[workers] = poller
        return poller

    def recv_any(self, workers: set[int], deadline: float | None) -> list[tuple[int, bytes | None]]:
        """Replies from whichever of ``workers`` are ready (None = the worker died).
        Watching the process sentinels is what turns a dead worker into an error at
        once instead of a hang."""
        ready = [w for w in workers if self.chans[w].buffered()]
        if ready:  # read ahead earlier: poll would not see these
            return [(w, self.read(w)) for w in sorted(ready)]
        poller = self._poller(frozenset(workers))
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        events = self.spinner.wait(poller, timeout)
        if not events:
            raise TimeoutError(f"no reply from env workers {sorted(workers)} within the timeout")
        fds = {fd for fd, _ in events}
        out = []
        for w in sorted({self._fd_owner[fd] for fd in fds}):
            wait_fd = self.chans[w].wait_fd
            # A worker may reply and then die: read what it sent first. If only its
            # sentinel fired, don't block on a reply that was never signalled.
            if wait_fd in fds or _readable(wait_fd):
                out.append((w, self.read(w)))
            else:
                out.append((w, None))
        return out

    def read(self, w: int) -> bytes | None:
        try:
            return self.chans[w].recv()
        except (EOFError, OSError):  # the worker died
            return None

    def expect(self, w: int, *, deadline: float | None, what: str) -> Any:
        while True:
            for _, msg in self.recv_any({w}, deadline):
                if msg is None:
                    raise self.died(w)
                return self.decode(w, msg, what)

    def close(self, *, busy: set[int], terminate: bool) -> None:
        """Ask every worker to exit (after draining an unfinished step), then kill the
        ones still alive after a grace period; never blocks for long."""
        procs = [(w, p) for w, p in enumerate(self.procs) if p is not None]
        for w, proc in procs:
            conn = self.conns[w]
            try:
                if w in busy and proc.is_alive() and not terminate:
                    if conn.poll(1.0):  # drain the reply of an unfinished step
                        self.chans[w].recv()
                if proc.is_alive() and not terminate:
                    self.chans[w].send(W.CLOSE)
            except (EOFError, OSError):
                pass
        deadline = time.monotonic() + (0.1 if terminate else 2.0)
        for w, proc in procs:
            proc.join(timeout=max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=1.0)
            self._close_fds(w)
            self.procs[w] = None
