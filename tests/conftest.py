"""Shared test fixtures: every test must leave no child process behind."""

from __future__ import annotations

import os
import time

import pytest


def child_pids(pid: int | None = None) -> set[int]:
    """Direct children of ``pid`` (default: this process), read from /proc."""
    pid = os.getpid() if pid is None else pid
    found: set[int] = set()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
        except OSError:
            continue
        # The command name may contain spaces: fields after the last ')' are fixed.
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 1 and fields[0] != "Z" and int(fields[1]) == pid:
            if not _is_multiprocessing_helper(int(entry)):
                found.add(int(entry))
    return found


def _is_multiprocessing_helper(pid: int) -> bool:
    # multiprocessing's resource tracker and forkserver live as long as the test
    # session by design; they are not leaks of any one test.
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
    except OSError:
        return False
    return b"resource_tracker" in cmdline or b"forkserver" in cmdline


@pytest.fixture(autouse=True)
def no_leaked_processes():
    before = child_pids()
    yield
    deadline = time.monotonic() + 10.0
    leaked = child_pids() - before
    while leaked and time.monotonic() < deadline:
        time.sleep(0.05)
        leaked = child_pids() - before
    assert not leaked, f"test left child processes running: {sorted(leaked)}"


@pytest.fixture
def one_torch_thread():
    """Tiny networks on a shared 2-core box: extra intra-op threads only add
    contention (DESIGN: the thread count is set deliberately per role)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
