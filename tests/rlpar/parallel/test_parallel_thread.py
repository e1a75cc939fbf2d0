"""Watched threads re-raise the child's exception in the parent."""

from __future__ import annotations

import threading

import pytest

from rlpar.errors import ChildError
from rlpar.parallel import Thread, watch_all


def raising_target(message: str) -> None:
    raise KeyError(message)


@pytest.mark.timeout(10)
def test_thread_exception_reraised_with_traceback() -> None:
    thread = Thread(target=raising_target, args=("lost key",), name="worker-a")
    thread.start()
    with pytest.raises(ChildError) as info:
        thread.join(5)
    error = info.value
    assert error.child_name == "worker-a"
    assert "raising_target" in error.child_traceback
    assert "KeyError" in str(error) and "lost key" in str(error) and "worker-a" in str(error)
    assert isinstance(error.__cause__, KeyError)
    assert thread.failed


@pytest.mark.timeout(10)
def test_thread_success_watch_returns_normally() -> None:
    out: list[int] = []
    thread = Thread(target=out.append, args=(7,))
    thread.start()
    thread.join(5)
    thread.watch()
    assert out == [7] and not thread.failed


@pytest.mark.timeout(10)
def test_watch_all_threads_raises_first_failure_while_others_block() -> None:
    release = threading.Event()
    blocker = Thread(target=release.wait, args=(10,), name="blocker")
    failing = Thread(target=raising_target, args=("x",), name="failing")
    blocker.start()
    failing.start()
    try:
        with pytest.raises(ChildError, match="failing"):
            watch_all([blocker, failing], timeout=5)
    finally:
        release.set()
        blocker.join(5)


@pytest.mark.timeout(10)
def test_watch_all_timeout_and_bad_arguments() -> None:
    release = threading.Event()
    blocker = Thread(target=release.wait, args=(10,), name="slow-one")
    blocker.start()
    try:
        with pytest.raises(TimeoutError, match="slow-one"):
            watch_all([blocker], timeout=0.05)
        with pytest.raises(ValueError, match="timeout"):
            watch_all([blocker], timeout=-1)
        with pytest.raises(TypeError):
            watch_all([threading.Thread()])
    finally:
        release.set()
        blocker.join(5)
    with pytest.raises(TypeError, match="callable"):
        Thread(target=3)
    with pytest.raises(ValueError, match="timeout"):
        blocker.join(-0.5)
