"""Shared test fixtures: every test must leave no child process behind; Hypothesis
runs the same examples on every machine."""

from __future__ import annotations

import os
import time

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.errors import InvalidArgument

# Hypothesis profiles. "ci" and "dev" draw the same examples on every machine
# (derandomize: the seed comes from each test's name, no example database), so a
# failure in CI repeats on a developer's box with a plain `pytest` and `make test` on a
# fresh clone runs what CI runs. "explore" searches randomly and keeps failures in
# .hypothesis/ for hunting new counterexamples: HYPOTHESIS_PROFILE=explore pytest ...
# No deadline and no too_slow check: a shared 2-core box can be slow at any moment.
_UNHURRIED = {"deadline": None, "print_blob": True, "suppress_health_check": [HealthCheck.too_slow]}
_BASE = settings.get_profile("default")  # not whatever Hypothesis loaded on seeing CI
settings.register_profile("ci", _BASE, derandomize=True, database=None, **_UNHURRIED)
settings.register_profile("dev", settings.get_profile("ci"))
settings.register_profile("explore", _BASE, derandomize=False, **_UNHURRIED)


def hypothesis_profile(environ: dict[str, str]) -> str:
    """HYPOTHESIS_PROFILE when set, else "ci" under CI (CI=true), else "dev"."""
    name = environ.get("HYPOTHESIS_PROFILE", "")
    if name:
        return name
    return "ci" if environ.get("CI", "").lower() not in ("", "0", "false", "no") else "dev"


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    # Before test modules are imported: an @settings(...) decorator copies the profile
    # loaded at that moment. Hypothesis's own --hypothesis-profile still wins (its
    # plugin loads that profile after this hook).
    name = hypothesis_profile(dict(os.environ))
    try:
        settings.load_profile(name)
    except InvalidArgument as exc:
        raise pytest.UsageError(
            f"HYPOTHESIS_PROFILE={name!r} is not a registered profile (ci, dev, explore)"
        ) from exc


def _children_listed(pid: int) -> set[int] | None:
    """``pid``'s children from /proc/<pid>/task/*/children (one file per thread: a child
    belongs to the thread that forked it), or None where the kernel has no such files."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    found: set[int] = set()
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found.update(int(child) for child in f.read().split())
        except FileNotFoundError:
            if tid == tasks[0]:
                return None  # no CONFIG_PROC_CHILDREN
        except OSError:  # the thread exited meanwhile
            continue
    return found


def child_pids(pid: int | None = None) -> set[int]:
    """Direct children of ``pid`` (default: this process), read from /proc: the few
    listed as its threads' children where the kernel lists them (reading every
    process's stat took 2-4 ms a call, twice per test), else every process's parent."""
    pid = os.getpid() if pid is None else pid
    found: set[int] = set()
    listed = _children_listed(pid)
    try:
        entries = [str(child) for child in listed] if listed is not None else os.listdir("/proc")
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
            kind = _session_helper(int(entry))
            if kind == "template":  # its zygotes are the launches' processes
                found |= child_pids(int(entry))
            elif kind is None:
                found.add(int(entry))
    return found


def _session_helper(pid: int) -> str | None:
    # multiprocessing's resource tracker and forkserver, and launch's zygote template
    # (rlpar.distributed._warm), live as long as the test session by design; they are
    # not leaks of any one test.
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
    except OSError:
        return None
    if b"rlpar.distributed._template" in cmdline:
        return "template"
    return "helper" if b"resource_tracker" in cmdline or b"forkserver" in cmdline else None


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
