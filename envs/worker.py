"""The env worker process: steps its envs on command, results in shared memory.

Wire protocol on the worker's pipe (``envs.wire`` messages; first byte is the
opcode). The hot path (step) is a one-byte message each way, no pickling: actions and
results live in the shared block; only non-empty infos are pickled back. Waits spin
briefly before blocking (``envs.spin``).

parent -> worker  b"s" step | b"r"+pickle(seeds, options, mask, restarted) reset
                  b"c"+pickle(name, args, kwargs) call | b"g"+pickle(name) get_attr
                  b"a"+pickle(name, values) set_attr | b"x" close
worker -> parent  b"k" done, nothing to report | b"o"+pickle(payload) done with payload
                  b"e"+pickle(EnvFailure.fields()) an env raised or returned a bad value
                  b"E"+pickle(traceback) the worker itself failed (e.g. building envs)
"""

from __future__ import annotations

import faulthandler
import os
import pickle
import select
import signal
import sys
import traceback
from typing import Any

from envs.lifeline import tie_to_owner
from envs.spin import Spinner
from envs.wire import Channel, Fd

OK = b"k"
PAYLOAD = b"o"
ENV_ERROR = b"e"
WORKER_ERROR = b"E"
STEP = b"s"
RESET = b"r"
CALL = b"c"
GET = b"g"
SET = b"a"
CLOSE = b"x"
DUMP_SIGNAL = signal.SIGUSR1


def _limit_threads() -> None:
    # Envs rarely need intra-op threads, and W workers x N threads oversubscribe cores.
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


def worker_main(
    payload: bytes, buffer: Any, conn: Any, to_worker: Fd, to_parent: Fd, dump: Fd, owner: int
) -> None:
    """Entry point of one worker process. ``payload`` is the cloudpickled
    (env_fns, lo, block_spec, num_obs, num_act, obs_space, act_space, autoreset_mode,
    spin_us, check_values); ``conn`` carries the messages, the eventfds their wake-ups
    (envs.wire); on DUMP_SIGNAL the worker writes its threads' stacks to ``dump``.
    ``owner``: the pid of the vector env's process, which this one must not outlive
    (envs.lifeline)."""
    # First: an env factory may hang too, and the owner may die meanwhile.
    tie_to_owner(owner)
    channel = Channel(conn.fileno(), send_efd=to_parent.fd, recv_efd=to_worker.fd)
    # The parent owns shutdown; a Ctrl-C in the terminal must not kill workers mid-step.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Before the parent kills a worker that overran step_timeout it asks for the stacks:
    # faulthandler writes them from its C signal handler, so even an env stuck in C code
    # (no Python bytecode running, GIL held or not) says where it is.
    faulthandler.register(DUMP_SIGNAL, file=dump.fd, all_threads=True)
    _limit_threads()
    try:
        import cloudpickle

        from envs.runner import EnvFailure, EnvRunner

        (fns, lo, spec, num_obs, num_act, obs_space, act_space, mode, spin_us, check_values) = (
            cloudpickle.loads(payload)
        )
        envs = [fn() for fn in fns]
        _limit_threads()  # an env factory may have imported torch
        runner = EnvRunner(
            envs,
            lo=lo,
            spec=spec,
            buffer=buffer,
            num_obs=num_obs,
            num_act=num_act,
            obs_space=obs_space,
            act_space=act_space,
            autoreset_mode=mode,
            check_values=check_values,
        )
    except BaseException:
        channel.send(WORKER_ERROR + pickle.dumps(traceback.format_exc()))
        return
    recv, send = channel.recv, channel.send
    send(OK)
    spinner = Spinner(spin_us)
    poller = select.poll()
    poller.register(channel.wait_fd, select.POLLIN)
    poller.register(conn.fileno(), 0)  # hang-up only: the parent is gone
    wait, buffered = spinner.wait, channel.buffered
    while True:
        try:
            if not buffered():
                wait(poller)
            msg = recv()
        except (EOFError, OSError):  # parent gone: nothing left to serve
            break
        op = msg[:1]
        try:
            if op == STEP:
                infos = runner.step()
                send(PAYLOAD + pickle.dumps(infos, protocol=5) if infos else OK)
                continue
            if op == CLOSE:
                break
            args = pickle.loads(msg[1:])
            if op == RESET:
                seeds, options, mask, restarted = args
                infos = runner.reset(seeds, options, mask)
                if restarted:
                    runner.mark_restarted()
                send(PAYLOAD + pickle.dumps(infos, protocol=5) if infos else OK)
            elif op == CALL:
                send(PAYLOAD + _dumps(runner.call(*args)))
            elif op == GET:
                send(PAYLOAD + _dumps(runner.get_attr(args)))
            elif op == SET:
                runner.set_attr(*args)
                send(OK)
            else:
                send(WORKER_ERROR + pickle.dumps(f"unknown opcode {op!r}"))
        except (BrokenPipeError, ConnectionResetError):
            break  # the parent is gone mid-command: nobody to report to
        except EnvFailure as failure:
            if not _try_send(send, ENV_ERROR + pickle.dumps(failure.fields())):
                break
        except Exception:
            if not _try_send(send, WORKER_ERROR + pickle.dumps(traceback.format_exc())):
                break
    runner.close()


def _try_send(send: Any, data: bytes) -> bool:
    try:
        send(data)
        return True
    except OSError:
        return False


def _dumps(value: Any) -> bytes:
    # Attribute values may be lambdas or other objects plain pickle rejects.
    try:
        return pickle.dumps(value, protocol=5)
    except Exception:
        import cloudpickle

        return cloudpickle.dumps(value)
