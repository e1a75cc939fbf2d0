"""Body of one rank started by :func:`rlpar.distributed.launch` (forked by ``_zygote``;
also runnable as a module: ``python -m rlpar.distributed._child PAYLOAD RESULT``)."""

from __future__ import annotations

import os
import pickle
import signal
import sys
import traceback

# What the launcher tells a rank (here, not in launch.py: importing the module
# rlpar.distributed.launch would shadow the package's ``launch`` function).
# REJOINABLE_ENV: set in every rank of a launch with restartable ranks (the World
# leaves such a world through the store, see World.shutdown), to the folder where each
# rank's World marks that it joined (JOINED_FILE). RESTARTS_ENV: a restarted rank's
# count of restarts.
REJOINABLE_ENV, RESTARTS_ENV, JOINED_FILE = "RLPAR_REJOINABLE", "RLPAR_RANK_RESTARTS", "joined{rank}"
# Files the zygote and the launcher share about a rank: its pid, and where it dumps its
# threads' stacks on DUMP_SIGNAL (faulthandler), so that a rank killed for not finishing
# is named with what it was doing. A real-time signal: nothing else in a rank uses one.
PID_FILE, STACK_FILE = "pid{rank}", "stack{rank}"
DUMP_SIGNAL = getattr(signal, "SIGRTMIN", 34) + 1


def _write(path: str, outcome: tuple) -> None:
    # Write then rename, so the launcher never reads a half-written result.
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        try:
            pickle.dump(outcome, f)
        except Exception:
            f.seek(0)
            f.truncate()
            text = traceback.format_exc()
            pickle.dump(("error", ("UnpicklableResult", text)), f)
    os.replace(tmp, path)


def main(payload: str, result: str) -> int:
    try:
        with open(payload, "rb") as f:
            sys.path[:] = pickle.load(f)
            import cloudpickle

            entry, args = cloudpickle.load(f)
        value = entry(*args)
    except BaseException as exc:
        _outcome_decided()
        _write(result, ("error", (type(exc).__name__, traceback.format_exc())))
        _leave_world(graceful=False)
        return 1
    _outcome_decided()
    # The result first: leaving the world can take a while, and whatever happens
    # there must not turn a returned value into a rank "dead without a result"
    # (which the launcher would restart, if the rank is expendable).
    _write(result, ("ok", value))
    _leave_world(graceful=True)
    return 0


def _outcome_decided() -> None:
    # A terminal's Ctrl-C reaches every rank; one landing once the entry is done
    # (outside any handler it installed) would raise KeyboardInterrupt in the
    # middle of writing the outcome or leaving. An abort is the launcher's to
    # make: it kills the ranks through the zygote.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _leave_world(*, graceful: bool) -> None:
    # An entry that did not shut its World down still leaves cleanly.
    current = sys.modules.get("rlpar.distributed.current")  # never imported: nothing to leave
    if current is not None and current.get() is not None:
        try:
            current.get().shutdown(graceful=graceful)
        except Exception:  # the outcome is written; a failed leave is only reported
            traceback.print_exc()


if __name__ == "__main__":
    code = main(sys.argv[1], sys.argv[2])
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: torch's RPC/gloo threads can make it slow or hang.
    os._exit(code)
