"""free_port hands out ports outside the kernel's ephemeral range, which no TensorPipe
or gloo listener (they bind port 0) can take before the world's store binds it."""

from __future__ import annotations

import socket

import pytest

from rlpar.distributed import ports
from rlpar.distributed.ports import ephemeral_port_range, free_port


def test_free_ports_lie_outside_the_ephemeral_range_and_are_bindable():
    span = ephemeral_port_range()
    if span is None:
        pytest.skip("no ip_local_port_range on this system")
    low, high = span
    for _ in range(20):
        port = free_port()
        assert not low <= port <= high and 10_000 <= port <= 65535
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", port))


def test_a_port_in_use_is_passed_over(monkeypatch):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        used = taken.getsockname()[1]
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            spare = s.getsockname()[1]
        # The first draws land on the used port; both lie outside this pretend range.
        draws = iter([used] * 10 + [spare] * 60)
        monkeypatch.setattr(ports, "ephemeral_port_range", lambda: (1024, 2000))
        monkeypatch.setattr(ports.random.SystemRandom, "randrange", lambda self, a, b: next(draws))
        assert free_port() == spare


def test_without_ports_outside_the_range_the_os_picks(monkeypatch):
    monkeypatch.setattr(ports, "ephemeral_port_range", lambda: (1024, 65535))
    port = free_port()
    assert 1024 <= port <= 65535
    monkeypatch.setattr(ports, "_RANGE_FILE", "/nonexistent/ip_local_port_range")
    assert ephemeral_port_range() is None
    assert 0 < free_port() < 65536
