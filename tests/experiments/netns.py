"""Two "machines" on one: network namespaces joined by a veth pair, each with its own
address, so that a torchrun world leaves loopback (what a cluster's nodes see:
separate IPs, a link that can be cut, a node that can vanish whole).

Addresses come from 198.18.0.0/15, the range set aside for network tests (RFC 2544);
nothing outside the two namespaces is ever reached. Needs root and iproute2's `ip`."""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import subprocess
import sys
import time

_counter = itertools.count()


def unavailable() -> str | None:
    """Why two namespaces cannot be made here, or None."""
    if os.geteuid() != 0:
        return "needs root (creates network namespaces and a veth pair)"
    if shutil.which("ip") is None:
        return "needs iproute2's `ip` command"
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=20)


class TwoNodes:
    """Namespaces ``ns[0]``/``ns[1]`` with ``address[0]``/``address[1]`` on one veth link."""

    def __init__(self) -> None:
        tag = f"{os.getpid() % 100000}x{next(_counter)}"
        self.ns = [f"rlpar{tag}a", f"rlpar{tag}b"]
        self.veth = [f"rlp{tag}a", f"rlp{tag}b"]  # interface names: 15 characters at most
        subnet = 18 + (os.getpid() // 250) % 2, os.getpid() % 250
        self.address = [f"198.{subnet[0]}.{subnet[1]}.1", f"198.{subnet[0]}.{subnet[1]}.2"]
        self.procs: list[subprocess.Popen] = []

    def create(self) -> None:
        for ns in self.ns:
            _ip("netns", "add", ns)
        _ip("link", "add", self.veth[0], "type", "veth", "peer", "name", self.veth[1])
        for ns, veth, address in zip(self.ns, self.veth, self.address):
            _ip("link", "set", veth, "netns", ns)
            _ip("-n", ns, "addr", "add", f"{address}/24", "dev", veth)
            _ip("-n", ns, "link", "set", veth, "up")
            _ip("-n", ns, "link", "set", "lo", "up")

    def start(self, node: int, argv: list[str], *, env: dict[str, str], log: str) -> subprocess.Popen:
        """Run ``argv`` inside node ``node``, its output (both streams) to ``log``."""
        with open(log, "wb") as out:
            proc = subprocess.Popen(["ip", "netns", "exec", self.ns[node], *argv], env=env,
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(proc)
        return proc

    def pids(self, node: int) -> list[int]:
        out = subprocess.run(["ip", "netns", "pids", self.ns[node]], capture_output=True, text=True, timeout=20)
        return [int(p) for p in out.stdout.split()]

    def kill(self, node: int) -> None:
        """The node vanishes whole: every process in it is SIGKILLed at once (torchrun's
        workers run in sessions of their own, so a process group is not the node)."""
        for pid in self.pids(node):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def link(self, up: bool) -> None:
        _ip("-n", self.ns[1], "link", "set", self.veth[1], "up" if up else "down")

    def destroy(self) -> None:
        for node in (0, 1):
            try:
                self.kill(node)
            except (subprocess.SubprocessError, OSError):
                pass
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                print(f"process {proc.pid} outlived its namespace", file=sys.stderr)
        for ns in self.ns:  # the veth pair goes with them
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=20)


def wait_for_text(path: str, text: str, *, timeout: float, procs: list[subprocess.Popen] = ()) -> float:
    """Poll ``path`` until it holds ``text``; the time it took. AssertionError (with
    the file's tail) on timeout or when one of ``procs`` ended first."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        with open(path, errors="replace") as f:
            if text in f.read():
                return time.monotonic() - start
        if any(p.poll() is not None for p in procs):
            break
        time.sleep(0.1)
    with open(path, errors="replace") as f:
        raise AssertionError(f"{text!r} not in {path} after {time.monotonic() - start:.0f} s:\n{f.read()[-3000:]}")
