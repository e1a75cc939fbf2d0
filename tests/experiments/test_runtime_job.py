"""The job runtime's local-world launch: what its zygote preloads before forking ranks."""

import subprocess
import sys

import pytest

from experiments.runtime.job import RANK_PRELOAD

PROBE = """
import importlib, os, sys
def threads():
    return len(os.listdir("/proc/self/task"))
import torch
after_torch = threads()
for name in sys.argv[1:]:
    importlib.import_module(name)
print(after_torch, threads())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts threads in /proc")
@pytest.mark.timeout(60)
def test_the_preloaded_modules_start_no_thread_so_the_ranks_fork_safely():
    """The zygote forks every rank after importing these: a thread started by one of
    them would be missing in every rank (and any lock it held, held forever)."""
    jobs = ["experiments.apex", "experiments.impala", "experiments.a3c", "experiments.ppo",
            "experiments.pqn", "experiments.maddpg", "experiments.a2c"]
    out = subprocess.run([sys.executable, "-c", PROBE, *RANK_PRELOAD, *jobs], capture_output=True,
                         text=True, timeout=50)
    assert out.returncode == 0, out.stderr[-2000:]
    after_torch, after_all = map(int, out.stdout.split())
    assert after_all == after_torch
