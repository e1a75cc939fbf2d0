"""experiments.bench.tools.memory: a process tree's summed PSS, and its peak while it runs."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from experiments.bench.tools import memory

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/smaps_rollup"), reason="needs Linux's smaps_rollup")

# A process that holds 64 MiB of its own pages for a while, then exits.
HOLD = "import time; block = b'x' * (64 << 20); time.sleep({s})"


@pytest.mark.timeout(30)
def test_the_peak_counts_a_grandchild_that_holds_memory_and_has_since_exited():
    # parent -> child that holds 64 MiB for 1.5 s and exits; the parent lives on briefly.
    parent = subprocess.Popen([sys.executable, "-c", (
        "import subprocess, sys, time; "
        f"subprocess.run([sys.executable, '-c', {HOLD.format(s=1.5)!r}]); time.sleep(0.5)")])
    peak = memory.PeakMemory(parent.pid, interval_s=0.1).start()
    try:
        assert parent.wait(timeout=20) == 0
    finally:
        mb = peak.stop()
    assert peak.samples >= 5 and mb is not None and mb >= 64
    assert mb < 1024  # two small Pythons: no page counted many times over


def test_the_tree_of_a_live_process_includes_its_children_and_a_gone_one_is_empty():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    try:
        deadline = time.monotonic() + 5
        while child.pid not in memory.tree(os.getpid()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert child.pid in memory.tree(os.getpid())
        assert memory.pss_kb(child.pid) > 0
    finally:
        child.kill()
        child.wait()
    assert memory.pss_kb(child.pid) == 0 and memory.tree_pss_mb(child.pid) == 0.0


def test_a_sampling_interval_must_be_positive():
    with pytest.raises(ValueError, match="interval_s must be > 0"):
        memory.PeakMemory(os.getpid(), interval_s=0)


def test_a_measure_that_cannot_read_this_machine_reports_no_peak_and_starts_no_thread():
    def unreadable(pid):
        raise OSError(f"/proc/{pid}/nothing: no such file")

    peak = memory.PeakMemory(os.getpid(), interval_s=0.01, measure=unreadable).start()
    assert not peak.supported and peak.stop() is None and peak.samples == 0
    status = memory.PeakMemory(os.getpid(), measure=lambda pid: memory.status_mb(pid, "VmRSS"))
    assert status.supported
