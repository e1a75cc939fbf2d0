"""Free ports from the OS (kept free of torch imports: the launcher uses it)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago (bind port 0, then release).

    Another process may take it before it is bound again; the launcher accepts that
    small race, as torchrun does.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
