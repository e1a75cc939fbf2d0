"""Run N ranks of one program on this machine, the way torchrun would.

Each rank gets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR=127.0.0.1 and MASTER_PORT in
its environment and runs ``entry(*args)``, which calls :meth:`World.from_env` itself, so
the same entry runs unchanged under ``torchrun --nproc-per-node N``.

Ranks are forked from one fresh helper interpreter (``rlpar.distributed._zygote``) that
has imported torch but run nothing: the launcher's own process (which may run torch
threads) is never forked, and N ranks pay for one torch import, not N. Ranks die with
the helper and the helper with the launcher (PR_SET_PDEATHSIG); when one rank fails
the helper kills and reaps all of them, so neither an error nor a crash leaves orphans.

Ranks named ``restartable`` are expendable: one that dies (killed, or exited without a
result; not one that raised, which a restart would only repeat) is forked again with
the same RANK and ``RLPAR_RANK_RESTARTS`` set to its count of restarts, at most
``max_restarts`` times, while the other ranks go on; :class:`~rlpar.distributed.World`
then rejoins the running world instead of waiting for a start with every rank. Only a
rank whose World had joined is restarted so: one that died during the start leaves the
others waiting in the start's collective steps, which no replacement can complete, so
its death ends the launch as any other.

Any other death (a rank killed, or exited without a result) ends the launch, but not
at once where ``death_grace`` allows: as torchrun does when a rank dies, every other
rank is asked to stop (SIGUSR2, the launcher's SIGTERM: see below) and rank 0, the
lead, which keeps the run's checkpoints, has ``death_grace`` seconds to write what it
holds and exit; only then are the ranks still running killed (SIGKILL) and the death
raised. Killing them at once lost the lead's last checkpoint in most deaths.

A launch ends with its lead where asked (``finish_grace``, see :mod:`._finish`): ranks
still running that long after rank 0 returned are killed and named. A stop (Ctrl-C,
SIGTERM) is noted by a rank from its fork on (:mod:`.stops`), so one that lands
before the rank can act on it is not lost. The launch's files live in a private
directory that also holds the ranks' TMPDIR; the next launch removes those of
launchers that were SIGKILLed (:mod:`._launchdir`).
"""

from __future__ import annotations

import logging
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any

import cloudpickle

from rlpar.distributed import _launchdir, _warm, stops
from rlpar.distributed._child import JOINED_FILE, REJOINABLE_ENV, RESTARTS_ENV
from rlpar.distributed._finish import Finish, read_result
from rlpar.distributed.ports import free_port
from rlpar.distributed.secret import SECRET_ENV, new_secret
from rlpar.errors import ChildDied, ChildError, RankKeepsDying

log = logging.getLogger(__name__)

_POLL_S = 0.02
_GRACE_S = 3.0
_ECHO_GRACE_S = 5.0  # how long a PeerUnavailable waits for the failure it echoes


def _start_zygote() -> None:
    # Runs in the child between fork and exec. The stop signals are blocked until
    # the zygote has its handlers (it unblocks them): a Ctrl-C forwarded while it
    # starts would otherwise kill it (SIGUSR1's default) or be lost.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2})
    _die_with_parent()


def _die_with_parent() -> None:
    # Ask the kernel to SIGKILL this child when the launcher thread that forked it exits.
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # not Linux: the launcher's own teardown still applies
        pass


def launch(
    entry: Callable,
    *,
    nprocs: int,
    args: tuple = (),
    timeout: float | None = None,
    master_port: int | None = None,
    env: dict[str, str] | None = None,
    preload: Sequence[str] = ("torch",),
    stop_grace: float = 0.0,
    restartable: Collection[int] = (),
    max_restarts: int = 0,
    finish_grace: float | None = None,
    labels: Sequence[str] = (),
    death_grace: float = 0.0,
) -> list:
    """Run ``entry(*args)`` in ``nprocs`` local ranks and return their results by rank.

    Raises ChildError (with the rank's traceback) if a rank raises, ChildDied if a rank
    is killed or exits without reporting, TimeoutError after ``timeout`` seconds; in
    every case all ranks are gone when this returns or raises. ``env`` adds variables
    to the children's environment; ``preload`` names the modules imported once before
    the ranks are forked, on this process's ``sys.path`` as the ranks get it (an entry that needs no torch can pass ``()``); an entry
    ``module:function`` also calls ``function()`` then, so that work every rank would
    repeat (loading compiled kernels, say) is done once and shared. The function
    must start no thread (the ranks are forked after it) and be cheap when called
    again in the same process.

    Ctrl-C or SIGTERM in this process: with ``stop_grace > 0`` every rank is asked to
    stop (a rank that handles it can finish cleanly) and the ranks have
    ``stop_grace`` more seconds to exit before they are killed; a second signal, or
    ``stop_grace == 0``, kills them at once and raises KeyboardInterrupt. Either
    way the temporary files are removed. The ranks are asked with SIGUSR1 (this
    process got Ctrl-C) or SIGUSR2 (it got SIGTERM), which a rank notes from the
    moment it is forked (:mod:`rlpar.distributed.stops`) for the handler it may
    install later. A stop this process noted before the launch (``stops.record``)
    is asked of the ranks at once. While supervising, SIGINT raises
    KeyboardInterrupt here unless this process ignores it or has its own handler.

    ``finish_grace``: once rank 0 (the lead) has returned its result, the other ranks
    have this many seconds to exit; those still running are then killed and named
    in a warning (with ``labels[rank]``, e.g. its role, and the innermost frames of
    its main thread), and their results are None. None: wait for them (up to
    ``timeout``).

    ``restartable``: ranks that are restarted alone when they die after their World
    joined (see the module docstring), each at most ``max_restarts`` times; one that
    dies once more raises RankKeepsDying. No rank is restarted once another has returned its result or
    after a Ctrl-C/SIGTERM: the launch is ending. A restartable rank that dies then
    is no failure either: its place in the returned list is None.

    ``death_grace``: when a rank other than 0 dies and is not restarted, the others
    are asked to stop (as by this process's SIGTERM) and rank 0 has this many seconds
    to return or exit (a lead saving its last checkpoint) before every rank left is
    killed and the death raised (ChildDied); 0: they are killed at once. Not after a
    raise (a bug) nor when rank 0 itself died: it is the one that would save.
    """
    if isinstance(nprocs, bool) or not isinstance(nprocs, int) or nprocs < 1:
        raise ValueError(f"nprocs must be an int >= 1, got {nprocs!r}")
    if not callable(entry):
        raise TypeError(f"entry must be callable, got {entry!r}")
    if not isinstance(args, tuple):
        raise TypeError(f"args must be a tuple, got {type(args).__name__}")
    if timeout is not None and not timeout > 0:
        raise ValueError(f"timeout must be > 0 seconds or None, got {timeout!r}")
    if not stop_grace >= 0:
        raise ValueError(f"stop_grace must be >= 0 seconds, got {stop_grace!r}")
    if isinstance(preload, str):
        raise TypeError(f"preload must be a sequence of module names, got the string {preload!r}")
    preload = [_check_preload(m) for m in preload]
    if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < 0:
        raise ValueError(f"max_restarts must be an int >= 0, got {max_restarts!r}")
    restartable = frozenset(restartable)
    bad = [r for r in restartable if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < nprocs]
    if bad:
        raise ValueError(f"restartable ranks must be in 0..{nprocs - 1}, got {sorted(bad, key=repr)}")
    if finish_grace is not None and not finish_grace >= 0:
        raise ValueError(f"finish_grace must be >= 0 seconds or None, got {finish_grace!r}")
    if not death_grace >= 0:
        raise ValueError(f"death_grace must be >= 0 seconds, got {death_grace!r}")
    port = free_port() if master_port is None else master_port
    if not isinstance(port, int) or not 0 < port < 65536:
        raise ValueError(f"master_port must be in 1..65535, got {master_port!r}")

    _launchdir.sweep()  # what SIGKILLed launchers left
    tmp = _launchdir.create()
    try:
        payload = os.path.join(tmp, "entry.pkl")
        with open(payload, "wb") as f:
            # sys.path first, in plain pickle, so the child can import the modules the
            # cloudpickled entry refers to by name.
            pickle.dump(list(sys.path), f)
            cloudpickle.dump((entry, args), f)
        child_env = dict(os.environ)
        child_env.update(env or {})
        child_env.update(WORLD_SIZE=str(nprocs), LOCAL_WORLD_SIZE=str(nprocs),
                         MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        # The run secret (rlpar.distributed.secret), in the environment only, never on a
        # command line: fresh per launch, not one inherited from this process (e.g. a
        # torchrun secret exported in the shell); only ``env`` may choose it.
        child_env[SECRET_ENV] = (env or {}).get(SECRET_ENV) or new_secret()
        child_env.pop("TORCHELASTIC_USE_AGENT_STORE", None)
        child_env.pop(RESTARTS_ENV, None)
        child_env.pop(REJOINABLE_ENV, None)
        if restartable:
            child_env[REJOINABLE_ENV] = tmp
        # As torchrun does: one intra-op thread per rank unless the user chose.
        child_env.setdefault("OMP_NUM_THREADS", "1")
        # Every local world ends with TensorPipe/TCPStore warnings from C++ as the
        # ranks' pipes close (dozens of lines after each job's summary); a rank's own
        # failure reaches the launcher as a Python traceback. Set it to WARNING to see them.
        child_env.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
        private = _launchdir.rank_tmpdir(tmp)
        if private is not None:  # removed with the launch's directory, even after a SIGKILL
            child_env["TMPDIR"] = private
        argv = [payload, tmp, str(nprocs), ",".join(preload)]
        # From a process's second launch on, forked from a warm template (_warm).
        zygote = _warm.zygote(argv=argv, env=child_env, preload=preload, restartable=bool(restartable))
        if zygote is None:
            zygote = subprocess.Popen(
                [sys.executable, "-m", "rlpar.distributed._zygote", *argv],
                env=child_env, preexec_fn=_start_zygote,
                # The pipe for restart requests; /dev/null (at once EOF) when there are none.
                stdin=subprocess.PIPE if restartable else subprocess.DEVNULL,
            )
        policy = _Restarts(restartable, max_restarts)
        finish = Finish(finish_grace, list(labels))
        try:
            with _StopsAsInterrupt():
                return _supervise(zygote, nprocs, tmp, timeout, stop_grace, policy, finish, death_grace)
        finally:
            _stop(zygote)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class _StopsAsInterrupt:
    """SIGTERM raises KeyboardInterrupt in the main thread while supervising, so the
    ranks are stopped and the temporary directory is removed (the default action
    would end this process with both left behind); so does SIGINT where this process
    only noted stops so far (``stops.record``, as ``python -m experiments.<job>``)."""

    def __enter__(self):
        import threading

        self._old = {}
        if threading.current_thread() is threading.main_thread():
            self._old[signal.SIGTERM] = signal.signal(signal.SIGTERM, self._raise)
            if stops.recording(signal.SIGINT):
                self._old[signal.SIGINT] = signal.signal(signal.SIGINT, self._raise)
        return self

    @staticmethod
    def _raise(signum, frame):
        stops.acted(signum)
        raise KeyboardInterrupt("SIGTERM" if signum == signal.SIGTERM else "SIGINT")

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, old)


def _stop(zygote: subprocess.Popen) -> None:
    """SIGTERM makes the zygote kill and reap every rank; SIGKILL if it does not."""
    if zygote.stdin is not None:
        try:
            zygote.stdin.close()
        except OSError:  # the zygote is gone already
            pass
    if zygote.poll() is None:
        zygote.terminate()
        try:
            zygote.wait(timeout=_GRACE_S)
        except subprocess.TimeoutExpired:
            zygote.kill()
            zygote.wait()


def _read_exit(tmp: str, rank: int) -> tuple[int, float] | None:
    try:
        with open(os.path.join(tmp, f"exit{rank}")) as f:
            code, when = f.read().split()
        return int(code), float(when)
    except (OSError, ValueError):
        return None


class _Restarts:
    """Which dead ranks are forked again, and how often each was."""

    def __init__(self, ranks: frozenset[int], limit: int) -> None:
        self.ranks, self.limit = ranks, limit
        self.counts: dict[int, int] = {}

    def request(self, zygote: subprocess.Popen, tmp: str, rank: int, how: str) -> bool:
        """Ask the zygote to fork ``rank`` again; False if it is not restartable or
        the zygote is gone."""
        if rank not in self.ranks or zygote.stdin is None:
            return False
        if not os.path.exists(os.path.join(tmp, JOINED_FILE.format(rank=rank))):
            return False  # it died before its World joined: the start cannot complete
        count = self.counts.get(rank, 0) + 1
        if count > self.limit:
            return False
        # Clear the dead process's files first: the new one writes the same names.
        for name in (f"exit{rank}", f"result{rank}.pkl"):
            try:
                os.remove(os.path.join(tmp, name))
            except FileNotFoundError:
                pass
        try:
            zygote.stdin.write(f"restart {rank}\n".encode())
            zygote.stdin.flush()
        except OSError:  # BrokenPipeError: the zygote died; the watch loop reports it
            return False
        self.counts[rank] = count
        log.warning("rank %d %s; restarting it (restart %d of %d)", rank, how, count, self.limit)
        return True


def _supervise(zygote: subprocess.Popen, nprocs: int, tmp: str, timeout: float | None,
               stop_grace: float = 0.0, policy: _Restarts | None = None,
               finish: Finish | None = None, death_grace: float = 0.0) -> list:
    state = _Watch(deadline=None if timeout is None else time.monotonic() + timeout, death_grace=death_grace)
    policy = policy or _Restarts(frozenset(), 0)
    finish = finish or Finish(None, [])
    early = stops.take()  # a stop asked before the launch: ask the ranks at once
    while True:
        try:
            if early is not None:
                raise KeyboardInterrupt("SIGTERM" if early == signal.SIGTERM else "SIGINT")
            return _watch(zygote, nprocs, tmp, timeout, state, policy, finish)
        except KeyboardInterrupt as exc:
            early = None
            if stop_grace <= 0 or state.interrupted:
                raise
            # First Ctrl-C/SIGTERM: ask every rank to stop (the zygote forwards the
            # request to each) and keep collecting their results for a while.
            state.interrupted = True
            terminated = exc.args == ("SIGTERM",)
            try:
                zygote.send_signal(signal.SIGUSR2 if terminated else signal.SIGUSR1)
            except ProcessLookupError:
                pass
            grace_end = time.monotonic() + stop_grace
            state.deadline = grace_end if state.deadline is None else min(state.deadline, grace_end)


class _Watch:
    def __init__(self, *, deadline: float | None, death_grace: float = 0.0) -> None:
        self.deadline = deadline
        self.death_grace = death_grace
        self.lead_saves_until: float | None = None  # a rank died: the end of the lead's grace
        self.interrupted = False
        self.results: dict[int, Any] = {}
        # rank -> (exit time, what to raise, whether it only echoes a peer's failure)
        self.failures: dict[int, tuple[float, Exception, bool]] = {}
        self.echo_since: float | None = None


def _watch(zygote: subprocess.Popen, nprocs: int, tmp: str, timeout: float | None, state: _Watch,
           policy: _Restarts, finish: Finish) -> list:
    results, failures = state.results, state.failures
    while len(results) + len(failures) < nprocs:
        zygote_done = zygote.poll() is not None
        exits = {r: _read_exit(tmp, r) for r in range(nprocs) if r not in results and r not in failures}
        missing = [r for r, e in exits.items() if e is None]
        if missing and zygote_done and not failures:  # the helper died and took the ranks along
            rank = missing[0]
            raise ChildDied(f"rank {rank} died with the launcher's helper process "
                            f"(exit code {zygote.returncode})",
                            child_name=f"rank{rank}", exitcode=zygote.returncode)
        for rank in (r for r in exits if exits[r] is not None):
            code, when = exits[rank]
            outcome = read_result(os.path.join(tmp, f"result{rank}.pkl"))
            if outcome is not None and outcome[0] == "error":
                kind, text = outcome[1]
                failures[rank] = (when, ChildError(f"rank {rank} raised {kind}",
                                                   child_name=f"rank{rank}", child_traceback=text),
                                  kind == "PeerUnavailable")
            elif code != 0 or outcome is None:
                how = (f"was killed by signal {signal.Signals(-code).name}"
                       if code < 0 else f"exited with code {code} without a result")
                # A death, not a bug: an expendable rank is forked again while the
                # launch is running (not once a rank returned or a stop was asked).
                if (not results and not failures and not state.interrupted
                        and policy.request(zygote, tmp, rank, how)):
                    continue
                if rank in policy.ranks and (state.interrupted or (results and not failures)):
                    # An expendable rank that dies while the launch ends (a Ctrl-C that
                    # reached it at a bad moment, or after another rank returned: ranks
                    # return when the program ends) ends it no worse than a restart
                    # would have: it has no result, the others still do.
                    when = "while stopping" if state.interrupted else f"after rank(s) {sorted(results)} returned"
                    log.warning("rank %d %s %s; going on without its result", rank, how, when)
                    results[rank] = None
                    continue
                died = policy.counts.get(rank, 0)
                if rank in policy.ranks and 0 < policy.limit <= died and not results and not state.interrupted:
                    error = RankKeepsDying(f"rank {rank} {how} after {died} restart(s) "
                                           f"(max_restarts={policy.limit})",
                                           child_name=f"rank{rank}", exitcode=code, restarts=died)
                else:
                    error = ChildDied(f"rank {rank} {how}", child_name=f"rank{rank}", exitcode=code)
                failures[rank] = (when, error, False)
            else:
                results[rank] = outcome[1]
        if failures:
            # The first rank to fail is the cause and later failures are usually its
            # echo, except that a rank which lost a peer (PeerUnavailable) may exit
            # before the peer that failed first has written its traceback: give the
            # cause a moment to show up before reporting an echo.
            causes = {r: f for r, f in failures.items() if not f[2]}
            if causes:
                if zygote_done or not _lead_may_save(zygote, tmp, state, causes):
                    raise _earliest(causes)
            else:
                state.echo_since = time.monotonic() if state.echo_since is None else state.echo_since
                if zygote_done or time.monotonic() - state.echo_since > _ECHO_GRACE_S:
                    raise _earliest(failures)
        if not failures and finish.expired(tmp, results):
            return finish.give_up(tmp, nprocs, results, stop=lambda: _stop(zygote))
        # (The lead's grace after a death is bounded on its own.)
        if state.deadline is not None and time.monotonic() > state.deadline and state.lead_saves_until is None:
            if state.interrupted:
                raise KeyboardInterrupt("ranks did not stop within the grace period")
            raise TimeoutError(f"launch: ranks did not finish within {timeout} s")
        if len(results) + len(failures) < nprocs:
            time.sleep(_POLL_S)
    if failures:  # every rank exited: the cause if one failed, else the first echo
        raise _earliest({r: f for r, f in failures.items() if not f[2]} or failures)
    return [results[r] for r in range(nprocs)]


def _lead_may_save(zygote: subprocess.Popen, tmp: str, state: _Watch,
                   causes: dict[int, tuple[float, Exception, bool]]) -> bool:
    """After a rank's death: whether to go on waiting for rank 0 (the lead) to save and
    exit (``death_grace``). The first time, every rank is asked to stop as by SIGTERM:
    a lead that handles it (a job's) keeps what it holds, as under torchrun."""
    cause = _earliest(causes)
    if (state.death_grace <= 0 or not isinstance(cause, ChildDied) or 0 in causes
            or 0 in state.results or 0 in state.failures
            or read_result(os.path.join(tmp, "result0.pkl")) is not None):
        return False
    now = time.monotonic()
    if state.lead_saves_until is None:
        state.lead_saves_until = now + state.death_grace
        try:
            zygote.send_signal(signal.SIGUSR2)  # the zygote forwards it to every rank
        except ProcessLookupError:
            return False
    return now < state.lead_saves_until


def _earliest(failures: dict[int, tuple[float, Exception, bool]]) -> Exception:
    """What to raise for the failure whose rank exited first."""
    return min(failures.values(), key=lambda f: f[0])[1]


def _check_preload(entry: object) -> str:
    module, colon, function = str(entry).partition(":")
    if not all(part.isidentifier() for part in module.split(".")) or (colon and not function.isidentifier()):
        raise ValueError(f"preload entries are 'module' or 'module:function', got {entry!r}")
    return str(entry)
