"""ProcessPool: results, context per worker, errors, dying workers, shutdown.

Most pools use forkserver (cheap workers); one test uses the default spawn.
Task functions are lambdas or nested functions, shipped by value with cloudpickle.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from rlpar.errors import ChildDied, ChildError, RlparError
from rlpar.parallel import ContextProcessPool, PoolClosed, ProcessPool
from tests.procs import is_dead

FAST = "forkserver"


@pytest.mark.timeout(40)
def test_spawn_context_pool_builds_context_once_per_worker(tmp_path: Path) -> None:
    log = tmp_path / "constructions.txt"

    def factory() -> dict:
        with open(log, "a") as f:  # one line per construction, from any process
            f.write(f"{os.getpid()}\n")
        return {"pid": os.getpid(), "calls": 0}

    def task(ctx: dict, x: int) -> tuple[int, int, int]:
        ctx["calls"] += 1
        return ctx["pid"], os.getpid(), x * 10

    with ProcessPool(processes=2, context_factory=factory) as pool:  # spawn
        out = pool.map(task, range(12), timeout=30)
        pids = pool.pids
    assert [x for *_, x in out] == [x * 10 for x in range(12)]
    assert all(owner == runner for owner, runner, _ in out)
    constructions = log.read_text().split()
    assert sorted(constructions) == sorted(set(constructions))  # once per worker
    assert {int(p) for p in constructions} >= {runner for _, runner, _ in out}
    assert len(constructions) <= 2
    assert all(is_dead(pid) for pid in pids)


@pytest.mark.timeout(30)
def test_apply_map_imap_ordering_and_closures() -> None:
    scale = 7
    with ProcessPool(processes=2, start_method=FAST) as pool:
        assert pool.apply(lambda a, b: a * b * scale, (2,), {"b": 3}) == 42
        assert pool.map(lambda x: x + scale, range(10)) == [x + scale for x in range(10)]
        assert list(pool.imap(lambda x: -x, range(6))) == [0, -1, -2, -3, -4, -5]
        assert pool.starmap(divmod, [(7, 2), (9, 4)]) == [(3, 1), (2, 1)]
        order = list(pool.imap_unordered(lambda d: time.sleep(d) or d, [0.5, 0.0, 0.0, 0.0]))
        assert sorted(order) == [0.0, 0.0, 0.0, 0.5] and order[-1] == 0.5
        result = pool.apply_async(os.getpid)
        assert result.wait(10) and result.successful() and result.get() in pool.pids


@pytest.mark.timeout(30)
def test_task_exception_carries_worker_traceback() -> None:
    def explode_in_worker(x: int) -> int:
        if x == 3:
            raise ZeroDivisionError(f"item {x} is bad")
        return x

    with ProcessPool(processes=2, start_method=FAST) as pool:
        with pytest.raises(ChildError, match="item 3 is bad") as info:
            pool.apply(explode_in_worker, (3,), timeout=10)
        assert "explode_in_worker" in info.value.child_traceback
        assert "ZeroDivisionError" in str(info.value)
        results = pool.imap(explode_in_worker, range(5), timeout=10)
        assert [next(results) for _ in range(3)] == [0, 1, 2]
        with pytest.raises(ChildError, match="item 3"):
            next(results)
        assert next(results) == 4
        with pytest.raises(ChildError, match="pickle|Pickl"):  # unpicklable result
            pool.apply(lambda: __import__("threading").Lock(), timeout=10)


@pytest.mark.timeout(40)
def test_worker_dying_mid_task_fails_that_task_and_pool_recovers() -> None:
    def kill_self(sig: int) -> None:
        os.kill(os.getpid(), sig)
        time.sleep(10)

    with ProcessPool(processes=2, start_method=FAST) as pool:
        first_pids = set(pool.pids)
        dying = pool.apply_async(os._exit, (7,))
        killed = pool.apply_async(kill_self, (signal.SIGKILL,))
        later = [pool.apply_async(lambda x: x * 2, (x,)) for x in range(6)]
        with pytest.raises(ChildDied, match="code 7") as info:
            dying.get(20)
        assert info.value.exitcode == 7
        with pytest.raises(ChildDied, match="SIGKILL") as info:
            killed.get(20)
        assert info.value.exitcode == -signal.SIGKILL and "kill_self" in str(info.value)
        assert [r.get(20) for r in later] == [0, 2, 4, 6, 8, 10]
        assert len(pool.pids) == 2 and not set(pool.pids) & first_pids
        all_pids = first_pids | set(pool.pids)
    assert all(is_dead(pid) for pid in all_pids)


@pytest.mark.timeout(30)
def test_terminate_kills_workers_and_fails_unfinished_tasks() -> None:
    pool = ProcessPool(processes=2, start_method=FAST)
    pids = pool.pids
    running = [pool.apply_async(time.sleep, (30,)) for _ in range(3)]
    time.sleep(0.2)
    pool.terminate()
    for result in running:
        with pytest.raises(RlparError, match="terminated"):
            result.get(5)
    with pytest.raises(PoolClosed):
        pool.apply_async(print)
    pool.join(5)
    assert all(is_dead(pid) for pid in pids)


@pytest.mark.timeout(30)
def test_workers_limit_torch_threads_and_bad_factory_is_reported() -> None:
    def torch_threads() -> int:
        import torch

        return torch.get_num_threads()

    def no_env() -> None:
        raise FileNotFoundError("env assets missing")

    # fork: the worker inherits this process's torch (and its thread count) instead
    # of importing torch again, which takes seconds on a busy 2-core box.
    with ProcessPool(processes=1, start_method="fork", num_threads=1) as pool:
        assert pool.apply(torch_threads, timeout=25) == 1
        assert pool.apply(lambda: os.environ.get("OMP_NUM_THREADS"), timeout=25) == "1"
    with ContextProcessPool(processes=1, start_method=FAST, context_factory=no_env) as pool:
        with pytest.raises(ChildError, match="context_factory") as info:
            pool.apply(lambda ctx: ctx, timeout=10)
        assert "env assets missing" in info.value.child_traceback


def test_invalid_arguments() -> None:
    with pytest.raises(ValueError, match="processes"):
        ProcessPool(processes=0, start_method=FAST)
    with pytest.raises(ValueError, match="num_threads"):
        ProcessPool(processes=1, num_threads=0)
    with pytest.raises(ValueError, match="start_method"):
        ProcessPool(processes=1, start_method="thread")
    with pytest.raises(TypeError, match="context_factory"):
        ProcessPool(processes=1, context_factory="env")


@pytest.mark.timeout(20)
def test_negative_timeouts_and_close_join() -> None:
    pool = ProcessPool(processes=1, start_method=FAST)
    try:
        with pytest.raises(ValueError, match="timeout"):
            pool.apply(abs, (1,), timeout=-1)
        with pytest.raises(ValueError, match="timeout"):
            pool.apply_async(abs, (1,)).get(-0.5)
        with pytest.raises(ValueError, match="close"):
            pool.join()
        with pytest.raises(TypeError, match="lock"):  # unpicklable argument: at submit
            pool.apply_async(abs, (threading.Lock(),))
        queued = [pool.apply_async(abs, (-x,)) for x in range(4)]
        pool.close()
        with pytest.raises(PoolClosed):
            pool.apply_async(abs, (1,))
        pool.join(15)
        assert [r.get(0) for r in queued] == [0, 1, 2, 3]
    finally:
        pool.terminate()
