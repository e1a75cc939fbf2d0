"""Length-prefixed messages between the parent and an env worker, on raw file descriptors.

``multiprocessing.Connection`` costs two ``read`` calls per message (header, then
body) plus its Python-level framing; on the per-step path, where a message is a
single opcode byte, that was a visible part of the hand-off. Here a small message
takes one ``write`` and, usually, one ``read``. The format is the same idea (4-byte
length, then the bytes); bytes read past the end of a message are kept for the next
one, and :meth:`Channel.buffered` tells a poller that a message is already waiting.
"""

from __future__ import annotations

import os
import struct

_HEADER = struct.Struct("<I")
_READ = 1 << 16


class Channel:
    """Messages over one end of a pipe or socket pair (``fd`` stays owned by the caller)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buf = b""

    def send(self, data: bytes) -> None:
        """Write one message; raises OSError (e.g. BrokenPipeError) if the peer is gone."""
        msg = _HEADER.pack(len(data)) + data
        written = os.write(self.fd, msg)
        if written < len(msg):  # only for messages larger than the pipe buffer
            view = memoryview(msg)[written:]
            while view:
                view = view[os.write(self.fd, view) :]

    def buffered(self) -> bool:
        """A whole message already read from the descriptor is waiting (poll can't see it)."""
        buf = self._buf
        return len(buf) >= 4 and len(buf) >= 4 + _HEADER.unpack_from(buf)[0]

    def recv(self) -> bytes:
        """Read one message (blocking); raises EOFError when the peer has closed its end."""
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
