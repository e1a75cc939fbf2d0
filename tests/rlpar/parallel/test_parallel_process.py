"""Watched processes: exceptions and deaths are re-raised in the parent.

Most tests use forkserver (cheap children from a clean server); one uses the
default spawn start method. Targets are nested functions, so cloudpickle ships
them by value and the child does not need to import this test module.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from rlpar.errors import ChildDied, ChildError
from rlpar.parallel import Process, get_context, watch_all

FAST = "forkserver"


@pytest.mark.timeout(30)
def test_spawn_child_exception_has_traceback_and_closure_works() -> None:
    secret = "captured by closure"

    def failing_in_child() -> None:
        raise RuntimeError(secret)

    child = Process(target=failing_in_child, name="child-x")  # spawn by default
    child.start()
    with pytest.raises(ChildError) as info:
        child.join(25)
    error = info.value
    assert not isinstance(error, ChildDied)
    assert error.child_name == "child-x"
    assert "failing_in_child" in error.child_traceback
    assert "RuntimeError" in str(error) and secret in str(error) and "child-x" in str(error)
    child.close()


@pytest.mark.timeout(20)
def test_sigkilled_child_reported_as_child_died() -> None:
    child = Process(target=time.sleep, args=(30,), start_method=FAST)
    child.start()
    child.watch()  # running: nothing to report yet
    os.kill(child.pid, signal.SIGKILL)
    with pytest.raises(ChildDied, match="SIGKILL") as info:
        child.join(10)
    assert info.value.exitcode == -signal.SIGKILL


@pytest.mark.timeout(20)
def test_os_exit_without_report_and_success_and_queue_argument() -> None:
    def quits() -> None:
        os._exit(3)

    child = Process(target=quits, start_method=FAST)
    child.start()
    with pytest.raises(ChildDied, match="code 3") as info:
        child.join(10)
    assert info.value.exitcode == 3

    # multiprocessing objects passed as arguments still work (fds handed over).
    queue = get_context(FAST).Queue()

    def answers(q, value):
        q.put(value * 2)

    child = Process(target=answers, args=(queue, 21), start_method=FAST)
    child.start()
    assert queue.get(timeout=10) == 42
    child.join(10)
    child.watch()
    assert child.exitcode == 0 and not child.failed


@pytest.mark.timeout(20)
def test_watch_all_raises_first_failure_and_terminates_others() -> None:
    def fails_soon() -> None:
        time.sleep(0.2)
        raise ValueError("first failure")

    sleeper = Process(target=time.sleep, args=(30,), start_method=FAST, name="sleeper")
    failing = Process(target=fails_soon, start_method=FAST, name="fails")
    sleeper.start()
    failing.start()
    with pytest.raises(ChildError, match="first failure"):
        watch_all([sleeper, failing], timeout=15)
    assert not sleeper.is_alive()


def test_invalid_arguments() -> None:
    with pytest.raises(ValueError, match="vfork"):
        Process(target=print, start_method="vfork")
    with pytest.raises(TypeError, match="callable"):
        Process(target=None)


@pytest.mark.timeout(30)
def test_child_may_start_its_own_child_and_errors_nest() -> None:
    def grandchild_fails() -> None:
        raise LookupError("deep down")

    def parent_of_grandchild() -> None:
        from rlpar.parallel import Process as InnerProcess

        inner = InnerProcess(target=grandchild_fails, start_method="forkserver", name="inner")
        inner.start()
        inner.join(20)

    child = Process(target=parent_of_grandchild, start_method=FAST, name="outer")
    child.start()
    with pytest.raises(ChildError, match="outer") as info:
        child.join(25)
    # The grandchild's traceback travels inside the child's error text.
    assert "grandchild_fails" in info.value.child_traceback
    assert "deep down" in info.value.child_traceback


@pytest.mark.timeout(20)
def test_huge_error_report_does_not_deadlock_join() -> None:
    def fails_loudly() -> None:
        raise ValueError("x" * 300_000)  # far larger than a pipe buffer

    child = Process(target=fails_loudly, start_method=FAST)
    child.start()
    with pytest.raises(ChildError, match="fails_loudly|ValueError") as info:
        child.join(15)
    assert "fails_loudly" in info.value.child_traceback and not child.is_alive()
