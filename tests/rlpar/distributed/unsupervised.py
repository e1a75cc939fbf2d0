"""Ranks of a world started from launch's helper interpreter (the zygote) without
launch's supervision, which would tear the world down as soon as one rank dies: the
survivors' outcomes are what the failure tests read."""

from __future__ import annotations

import os
import pickle
import secrets
import subprocess
import sys

import cloudpickle

from rlpar.distributed import free_port


def run_ranks(tmp_path, entry, args, *, nprocs: int, timeout: float, world_size: int | None = None,
              preload: tuple[str, ...] = ("torch",)) -> None:
    """Start ``nprocs`` ranks of a world of ``world_size`` (default ``nprocs``; the rest
    never start) running ``entry(*args)``, and wait for them (killed at ``timeout``).
    Each rank leaves ``result<rank>.pkl`` / ``exit<rank>`` in ``tmp_path``. ``preload``:
    what the zygote imports (or calls) once for every rank, as launch's."""
    payload = tmp_path / "entry.pkl"
    with open(payload, "wb") as f:
        pickle.dump(list(sys.path), f)
        cloudpickle.dump((entry, args), f)
    env = dict(os.environ, WORLD_SIZE=str(world_size or nprocs), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(free_port()), OMP_NUM_THREADS="1", RLPAR_RUN_SECRET=secrets.token_hex(16))
    zygote = subprocess.Popen([sys.executable, "-m", "rlpar.distributed._zygote", str(payload),
                               str(tmp_path), str(nprocs), ",".join(preload)], env=env)
    try:
        zygote.wait(timeout=timeout)
    finally:
        if zygote.poll() is None:
            zygote.terminate()  # kills and reaps the ranks
            zygote.wait()
