"""Map an IPv4 address to the name of the network interface that carries it.

TensorPipe and gloo choose their listening interface by name (TP_SOCKET_IFNAME,
GLOO_SOCKET_IFNAME), while users think in addresses, so World translates.
"""

from __future__ import annotations

import socket
import struct

_SIOCGIFADDR = 0x8915  # Linux ioctl: get an interface's IPv4 address


def _ipv4_of(sock: socket.socket, iface: str) -> str | None:
    import fcntl

    try:
        packed = fcntl.ioctl(sock.fileno(), _SIOCGIFADDR, struct.pack("256s", iface.encode()[:15]))
    except OSError:
        return None
    return socket.inet_ntoa(packed[20:24])


def interface_for_address(address: str) -> str | None:
    """The interface whose IPv4 address is ``address`` (a name is resolved first); None
    if no interface has it or the platform cannot tell."""
    try:
        wanted = socket.gethostbyname(address)
        interfaces = socket.if_nameindex()
    except OSError:
        return None
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _, iface in interfaces:
            if _ipv4_of(sock, iface) == wanted:
                return iface
    return None


AUTO = "auto"


def address_toward(host: str) -> str:
    """The IPv4 address this machine sends from to reach ``host``: on a cluster, the
    address of the interface that carries the job's traffic to the world's store, so
    every node can pass the same ``--listen-address auto`` (an sbatch script, a TorchX
    component). Connecting a UDP socket picks the route and sends nothing."""
    try:
        target = socket.gethostbyname(host)
    except OSError as exc:
        raise ValueError(f"listen address {AUTO!r}: cannot resolve the store's host {host!r}: {exc}") from None
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect((target, 9))  # the discard port; no packet leaves
        except OSError as exc:
            raise ValueError(f"listen address {AUTO!r}: no route from this machine to the store's host "
                             f"{host!r} ({target}): {exc}") from None
        return sock.getsockname()[0]
