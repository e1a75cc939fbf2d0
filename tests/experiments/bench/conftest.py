"""The benchmarks' smoke tests run the benches as subprocesses on budgets of seconds,
timed from launch (the benches measure wall-clock). The replay's numba kernels are
cached per checkout (rlpar.buffers.jit.cache_dir): in a fresh clone the first process
that needs them compiles them (10-20 s on 2 cores), which would eat a smoke test's
whole budget. So each test worker loads them, compiling into the disk cache if need
be, before its first bench test."""

import pytest


@pytest.fixture(scope="session", autouse=True)
def replay_kernels_cached():
    from rlpar.buffers import trees

    trees.kernels()
