"""wait_any / wait_all / MultiEvent over threading and multiprocessing events."""

from __future__ import annotations

import multiprocessing
import threading
import time

import pytest

from rlpar.parallel import MultiEvent, wait_all, wait_any


def set_later(event: threading.Event, delay: float) -> threading.Thread:
    timer = threading.Timer(delay, event.set)
    timer.start()
    return timer


@pytest.mark.timeout(10)
def test_wait_any_returns_set_indices_and_times_out() -> None:
    events = [threading.Event() for _ in range(3)]
    assert wait_any(events, timeout=0.02) == []
    timer = set_later(events[2], 0.05)
    assert wait_any(events, timeout=5) == [2]
    timer.join()
    events[0].set()
    assert wait_any(events, timeout=0) == [0, 2]


@pytest.mark.timeout(10)
def test_wait_all_needs_every_event() -> None:
    events = [threading.Event() for _ in range(3)]
    events[0].set()
    start = time.monotonic()
    assert wait_all(events, timeout=0.05) is False
    assert time.monotonic() - start >= 0.04
    timers = [set_later(events[1], 0.02), set_later(events[2], 0.06)]
    assert wait_all(events, timeout=5) is True
    for timer in timers:
        timer.join()


@pytest.mark.timeout(10)
def test_multi_event_any_and_all_with_multiprocessing_events() -> None:
    ctx = multiprocessing.get_context("spawn")
    events = [ctx.Event(), threading.Event()]
    any_event = MultiEvent(events=events, mode="any")
    all_event = MultiEvent(events=events, mode="all")
    assert not any_event.is_set() and not any_event.wait(0.01)
    events[0].set()
    assert any_event.is_set() and any_event.wait(1) and any_event.set_indices() == [0]
    assert not all_event.is_set() and not all_event.wait(0.01)
    events[1].set()
    assert all_event.wait(1) and all_event.is_set()
    events[0].clear()
    assert not all_event.wait(0.01)


def test_invalid_arguments_raise() -> None:
    event = threading.Event()
    with pytest.raises(ValueError, match="empty"):
        wait_any([], timeout=1)
    with pytest.raises(ValueError, match="timeout"):
        wait_all([event], timeout=-1)
    with pytest.raises(ValueError, match="timeout"):
        wait_any([event], timeout=-0.1)
    with pytest.raises(TypeError, match="is_set"):
        wait_any([object()])
    with pytest.raises(ValueError, match="sometimes"):
        MultiEvent(events=[event], mode="sometimes")
