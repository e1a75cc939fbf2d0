"""Spin-then-block waits (envs.spin): readiness, timeouts, the adaptive budget."""

from __future__ import annotations

import os
import select
import threading
import time

import pytest

from envs.spin import DEFAULT_SPIN_US, Spinner, auto_spin_us


def pipe_poller():
    r, w = os.pipe()
    poller = select.poll()
    poller.register(r, select.POLLIN)
    return r, w, poller


@pytest.mark.timeout(10)
def test_ready_fd_returns_at_once_and_budget_stays():
    r, w, poller = pipe_poller()
    try:
        spinner = Spinner(500.0)
        os.write(w, b"x")
        assert [fd for fd, _ in spinner.wait(poller)] == [r]
        assert spinner.spin == pytest.approx(500e-6)
    finally:
        os.close(r)
        os.close(w)


@pytest.mark.timeout(10)
def test_timeout_returns_empty_after_the_timeout():
    r, w, poller = pipe_poller()
    try:
        for spin_us in (0.0, 300.0, 50_000.0):  # timeout shorter and longer than the spin
            spinner = Spinner(spin_us)
            start = time.monotonic()
            assert spinner.wait(poller, timeout=0.02) == []
            assert time.monotonic() - start >= 0.019
            assert spinner.wait(poller, timeout=0) == []
    finally:
        os.close(r)
        os.close(w)


@pytest.mark.timeout(10)
def test_budget_drops_after_a_long_wait_and_returns_after_a_short_one():
    r, w, poller = pipe_poller()
    try:
        spinner = Spinner(100_000.0)  # 0.1 s
        timer = threading.Timer(0.3, os.write, args=(w, b"x"))
        timer.start()
        assert spinner.wait(poller)  # outlasts the budget: spins 0.1 s, then blocks
        timer.join()
        assert spinner.spin == 0.0  # the peer is busy for long: block right away next time
        os.read(r, 1)
        assert spinner.wait(poller, timeout=0.001) == []  # a short wait...
        assert spinner.spin == pytest.approx(0.1)  # ...brings the spin back
    finally:
        os.close(r)
        os.close(w)


@pytest.mark.timeout(10)
def test_hang_up_ends_a_spin():
    r, w, poller = pipe_poller()
    os.close(w)  # a dead peer: POLLHUP, seen while spinning
    try:
        events = Spinner(10_000.0).wait(poller)
        assert events and events[0][1] & select.POLLHUP
    finally:
        os.close(r)


def test_auto_budget_and_bad_input():
    cores = len(os.sched_getaffinity(0))
    assert auto_spin_us(cores) == DEFAULT_SPIN_US
    assert auto_spin_us(cores + 1) == 0.0
    with pytest.raises(ValueError, match="spin_us"):
        Spinner(-1.0)
