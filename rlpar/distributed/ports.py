"""Free ports from the OS (kept free of torch imports: the launcher uses it)."""

from __future__ import annotations

import random
import socket

_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
_LOWEST = 10_000  # below: well-known and commonly registered service ports
_TRIES = 64


def ephemeral_port_range() -> tuple[int, int] | None:
    """The ports the kernel hands out for ``bind(port 0)`` and outgoing connections
    (Linux's ip_local_port_range), or None where that is unknown."""
    try:
        with open(_RANGE_FILE) as f:
            low, high = (int(x) for x in f.read().split())
    except (OSError, ValueError):
        return None
    return low, high


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago, outside the ephemeral range.

    The port stays free until a rank binds it for the world's store: a second or
    more while the ranks start and import torch. A port from the ephemeral range can
    be taken in that window by any ``bind(0)`` on the machine (every TensorPipe and
    gloo listener makes one), and the world's store clients, which keep retrying
    until the store listens, then send their handshake to that listener: TensorPipe
    aborts its process on such bytes (``std::bad_alloc``, SIGABRT). A port outside the
    range is only taken by an explicit bind, and a retrying client never connects to
    itself through it. Where the range is unknown or covers every port, the OS picks
    (``bind(0)``), as before; the remaining small race is accepted, as torchrun does.
    """
    span = ephemeral_port_range()
    if span is not None:
        low, high = span
        pick = random.SystemRandom()  # leaves the seeded global random stream alone
        for _ in range(_TRIES):
            port = pick.randrange(_LOWEST, 65536)
            if not low <= port <= high and _bindable(port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _bindable(port: int) -> bool:
    # No SO_REUSEADDR: a port with connections still in TIME_WAIT is passed over too.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
