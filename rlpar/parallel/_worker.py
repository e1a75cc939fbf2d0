"""The loop that runs in each ProcessPool worker process.

Kept apart from the pool so a worker imports only the standard library and
cloudpickle; torch is imported only if a task or context needs it.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
from multiprocessing.connection import Connection
from typing import Any

import cloudpickle

from rlpar.parallel._pickling import SpawnPayload
from rlpar.parallel._report import report_current_exception


def limit_threads(num_threads: int | None) -> None:
    """Cap intra-op threads: env vars for a later ``import torch``, the call if loaded.

    On a small box the default (one thread per core, in every worker) makes workers
    fight over cores and tiny tensor ops slow.
    """
    if num_threads is None:
        return
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(num_threads)
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "get_num_threads"):
        if torch.get_num_threads() != num_threads:
            torch.set_num_threads(num_threads)


def worker_main(
    conn: Connection, factory_payload: SpawnPayload, num_threads: int | None
) -> None:
    """Serve tasks from ``conn`` until it closes or an empty message arrives.

    Each request is cloudpickled ``(fn, args, kwargs)``; each reply is
    ``("ok", value)``, ``("error", report)`` or ``("init_error", report)``.
    """
    # Ctrl-C goes to the whole process group; the parent decides what to do.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    limit_threads(num_threads)
    factory = factory_payload.obj
    del factory_payload
    context: Any = None
    init_report = None
    if factory is not None:
        try:
            limit_threads(num_threads)
            context = factory()
        except BaseException as exc:  # noqa: BLE001 - reported with every task instead
            init_report = report_current_exception(exc)
    while True:
        try:
            request = conn.recv_bytes()
        except (EOFError, OSError):
            return
        if not request:
            return
        try:
            if init_report is not None:
                reply = cloudpickle.dumps(("init_error", init_report))
            else:
                fn, args, kwargs = pickle.loads(request)
                limit_threads(num_threads)
                if factory is not None:
                    value = fn(context, *args, **kwargs)
                else:
                    value = fn(*args, **kwargs)
                reply = cloudpickle.dumps(("ok", value))
                del fn, args, kwargs, value
        except BaseException as exc:  # noqa: BLE001 - re-raised at get() in the parent
            reply = cloudpickle.dumps(("error", report_current_exception(exc)))
        try:
            conn.send_bytes(reply)
        except (BrokenPipeError, OSError):
            return
