"""ThreadPool: results, ordering, context per worker, errors, shutdown."""

from __future__ import annotations

import threading
import time

import pytest

from rlpar.errors import ChildError, RlparError
from rlpar.parallel import AsyncResult, ContextThreadPool, PoolClosed, ThreadPool


def fails_in_task(x: int) -> int:
    raise ValueError(f"bad item {x}")


@pytest.mark.timeout(20)
def test_apply_map_imap_and_unordered() -> None:
    offset = 100
    with ThreadPool(processes=2) as pool:
        assert pool.apply(lambda a, b=0: a + b + offset, (1,), {"b": 2}) == 103
        assert pool.map(lambda x: x * x, range(8)) == [x * x for x in range(8)]
        assert list(pool.imap(str, range(5))) == ["0", "1", "2", "3", "4"]
        assert pool.starmap(pow, [(2, 3), (3, 2)]) == [8, 9]
        # The slow first task finishes last, so completion order differs from input.
        order = list(pool.imap_unordered(lambda d: time.sleep(d) or d, [0.3, 0.0, 0.0]))
        assert sorted(order) == [0.0, 0.0, 0.3] and order[-1] == 0.3
        result = pool.apply_async(lambda: "done")
        assert isinstance(result, AsyncResult)
        assert result.get(5) == "done" and result.ready() and result.successful()


@pytest.mark.timeout(20)
def test_context_built_once_per_worker() -> None:
    built: list[int] = []
    lock = threading.Lock()

    def factory() -> dict:
        with lock:
            built.append(threading.get_ident())
        return {"thread": threading.get_ident()}

    with ThreadPool(processes=2, context_factory=factory) as pool:
        seen = pool.map(lambda ctx, x: (ctx["thread"], threading.get_ident(), x), range(20))
    assert len(built) == 2
    assert all(owner == runner for owner, runner, _ in seen)
    assert [x for *_, x in seen] == list(range(20))


@pytest.mark.timeout(20)
def test_task_error_has_worker_traceback_and_pool_continues() -> None:
    with ThreadPool(processes=2) as pool:
        result = pool.apply_async(fails_in_task, (5,))
        with pytest.raises(ChildError, match="bad item 5") as info:
            result.get(5)
        assert "fails_in_task" in info.value.child_traceback
        assert not result.successful()
        assert pool.apply(abs, (-3,)) == 3

    def broken_factory() -> None:
        raise OSError("no env here")

    with ContextThreadPool(processes=1, context_factory=broken_factory) as pool:
        with pytest.raises(ChildError, match="context_factory") as info:
            pool.apply(lambda ctx: ctx, timeout=5)
        assert "no env here" in info.value.child_traceback


@pytest.mark.timeout(20)
def test_terminate_close_join_and_invalid_arguments() -> None:
    release = threading.Event()
    pool = ThreadPool(processes=1)
    running = pool.apply_async(release.wait, (10,))
    queued = pool.apply_async(lambda: 1)
    with pytest.raises(TimeoutError):
        queued.get(0.05)
    with pytest.raises(ValueError, match="close"):
        pool.join()
    pool.terminate()
    with pytest.raises(RlparError, match="terminated"):
        queued.get(1)
    with pytest.raises(PoolClosed):
        pool.apply_async(print)
    release.set()
    pool.join(5)
    assert running.ready()

    with pytest.raises(ValueError, match="processes"):
        ThreadPool(processes=0)
    with pytest.raises(TypeError, match="processes"):
        ThreadPool(processes=1.5)
    with ThreadPool(processes=1) as pool:
        with pytest.raises(ValueError, match="timeout"):
            pool.apply(print, timeout=-1)
        with pytest.raises(ValueError, match="timeout"):
            pool.map(print, [1], timeout=-2)
        with pytest.raises(TypeError, match="callable"):
            pool.apply_async(42)
        with pytest.raises(ValueError, match="not ready"):
            AsyncResult().successful()
