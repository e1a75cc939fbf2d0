"""Messages between the parent and an env worker: bytes on a socket, wake-ups on eventfds.

Two choices here are about speed on the per-step path, where a message is one byte:

* Framing on raw file descriptors. ``multiprocessing.Connection`` costs two ``read``
  calls per message (header, then body) plus its Python-level framing; here a small
  message takes one ``write`` and, usually, one ``read`` (4-byte length, then bytes;
  bytes read past the end of a message are kept for the next one).
* Wake-ups through an eventfd, not the socket. Linux wakes a reader blocked on a pipe
  or socket with a *synchronous* wake-up, which tells the scheduler the writer is
  about to sleep; when the writer's CPU runs nothing else (an otherwise idle
  machine), the scheduler then places the reader on the writer's CPU
  (``wake_affine_idle``). The parent does not sleep (it steps its own share of envs),
  so the worker would queue behind it while the other core idles, and the two halves
  of a step would run one after the other, which fits the ~1.0x SyncVectorEnv measured
  on a quiet machine with blocking pipes. An eventfd write is an ordinary wake-up: the
  reader goes back to its own idle core. So a receiver waits on its eventfd, never on
  the socket, and a sender writes the bytes, then signals.
"""

from __future__ import annotations

import os
import struct
from multiprocessing import reduction

_HEADER = struct.Struct("<I")
_READ = 1 << 16
# A message this small always fits the socket buffer, so it is written before the
# signal (the receiver then never blocks on the socket); a larger one is signalled
# first, so a receiver is already draining the socket while the sender writes.
_SMALL = 1 << 12


def new_eventfd() -> int:
    return os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)


class Fd:
    """A file descriptor that travels to a child process (spawn/forkserver pass a
    duplicate the way ``multiprocessing`` passes a Connection; fork inherits it)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __reduce__(self) -> tuple:
        return _rebuild_fd, (reduction.DupFd(self.fd),)


def _rebuild_fd(dup: object) -> Fd:
    return Fd(dup.detach())  # type: ignore[attr-defined]


class Channel:
    """Messages over one end of a socket pair or pipe ``fd``. With eventfds, ``send``
    signals ``send_efd`` and a receiver waits for ``recv_efd`` (see module docstring);
    the descriptors stay owned by the caller."""

    def __init__(self, fd: int, *, send_efd: int | None = None, recv_efd: int | None = None):
        self.fd = fd
        self.send_efd = send_efd
        self.recv_efd = recv_efd
        self.wait_fd = fd if recv_efd is None else recv_efd  # what a receiver polls
        self._buf = b""
        self._signalled = 0  # messages signalled on recv_efd and not yet received

    def send(self, data: bytes) -> None:
        """Write one message; raises OSError (e.g. BrokenPipeError) if the peer is gone."""
        msg = _HEADER.pack(len(data)) + data
        efd = self.send_efd
        if efd is not None and len(msg) > _SMALL:
            os.eventfd_write(efd, 1)
        written = os.write(self.fd, msg)
        if written < len(msg):  # only for messages larger than the socket buffer
            view = memoryview(msg)[written:]
            while view:
                view = view[os.write(self.fd, view) :]
        if efd is not None and len(msg) <= _SMALL:
            os.eventfd_write(efd, 1)

    def buffered(self) -> bool:
        """A message is known to be waiting where ``poll`` on ``wait_fd`` can't see it
        (signalled earlier, or already read ahead from the socket)."""
        if self._signalled:
            return True
        buf = self._buf
        return len(buf) >= 4 and len(buf) >= 4 + _HEADER.unpack_from(buf)[0]

    def recv(self) -> bytes:
        """Read one message (blocking); raises EOFError when the peer has closed its end."""
        if self.recv_efd is not None:
            if not self._signalled:
                try:
                    self._signalled = os.eventfd_read(self.recv_efd)
                except BlockingIOError:  # not signalled yet (a large message's bytes
                    pass  # may come first); the socket read below waits for it
            self._signalled = max(0, self._signalled - 1)
        buf = self._buf
        while len(buf) < 4:
            buf += self._read(_READ)
        end = 4 + _HEADER.unpack_from(buf)[0]
        if len(buf) < end:
            parts = [buf]
            have = len(buf)
            while have < end:
                chunk = self._read(end - have)  # never past this message
                parts.append(chunk)
                have += len(chunk)
            buf = b"".join(parts)
        self._buf = buf[end:]
        return buf[4:end]

    def _read(self, n: int) -> bytes:
        chunk = os.read(self.fd, n)
        if not chunk:
            raise EOFError("the other end of the channel is closed")
        return chunk
