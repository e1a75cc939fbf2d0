"""The job runtime's local-world launch: what its zygote preloads before forking ranks."""

import os
import subprocess
import sys

import pytest

from experiments.runtime.job import RANK_PRELOAD

PROBE = """
import os, sys
def threads():
    return len(os.listdir("/proc/self/task"))
import torch
after_torch = threads()
from rlpar.distributed._zygote import run_preload
run_preload(sys.argv[1:])  # as the zygote does: imports, and calls module:function entries
print(after_torch, threads())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts threads in /proc")
@pytest.mark.timeout(60)
def test_the_preloaded_modules_start_no_thread_so_the_ranks_fork_safely():
    """The zygote forks every rank after preloading these (the replay kernels loaded
    too): a thread started by one of them would be missing in every rank (and any lock
    it held, held forever)."""
    jobs = ["experiments.apex", "experiments.impala", "experiments.a3c", "experiments.ppo",
            "experiments.pqn", "experiments.maddpg", "experiments.a2c"]
    # In launch's environment for the zygote: OMP_NUM_THREADS=1 (without it, numba's
    # BLAS check loads scipy's OpenBLAS, which starts a pool thread; OpenBLAS stops it
    # at a fork, but a zygote need not rely on that).
    out = subprocess.run([sys.executable, "-c", PROBE, *RANK_PRELOAD, *jobs], capture_output=True,
                         text=True, timeout=50, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert out.returncode == 0, out.stderr[-2000:]
    after_torch, after_all = map(int, out.stdout.split())
    assert after_all == after_torch
