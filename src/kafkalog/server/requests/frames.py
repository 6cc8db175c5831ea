"""Kafka's framing: every request and response is an int32 size followed by that many bytes.

:class:`FrameReader` is the receiving side with no I/O: feed it the bytes a socket gave, take whole
frames out. A size below zero or above ``socket.request.max.bytes`` is refused before anything is
buffered for it (Kafka's ``InvalidReceiveException``); the buffer holds at most one frame plus what
arrived after it, so a client that lies about a size costs only the bytes it really sends.
"""

from __future__ import annotations

import struct

from kafkalog.errors import FrameError

_SIZE = struct.Struct(">i")


class FrameReader:
    """Split a byte stream into request frames (the bytes after each size field)."""

    __slots__ = ("_buf", "_need", "limit_name", "max_size")

    def __init__(self, max_size: int, limit_name: str = "socket.request.max.bytes") -> None:
        self.max_size = max_size
        #: the setting ``max_size`` comes from, for the error
        self.limit_name = limit_name
        self._buf = bytearray()
        self._need: int | None = None

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes) -> list[bytes]:
        """Add ``data``; return the frames now complete (possibly none). Raises :class:`FrameError`
        on an invalid size field."""
        if self._need is None and not self._buf and len(data) > 4:
            size = _SIZE.unpack_from(data)[0]
            if len(data) == size + 4 and size <= self.max_size:
                return [data[4:]]       # the usual case: exactly one whole frame
        self._buf += data
        out: list[bytes] = []
        buf = self._buf
        pos = 0
        n = len(buf)
        while True:
            if self._need is None:
                if n - pos < 4:
                    break
                size = _SIZE.unpack_from(buf, pos)[0]
                if size < 0:
                    raise FrameError(f"Invalid receive (size = {size})", position=pos)
                if size > self.max_size:
                    raise FrameError(f"Invalid receive (size = {size} larger than "
                                     f"{self.limit_name} {self.max_size})", position=pos)
                self._need = size
                pos += 4
            if n - pos < self._need:
                break
            out.append(bytes(buf[pos:pos + self._need]))
            pos += self._need
            self._need = None
        if pos:
            del buf[:pos]
        return out


def frame(payload: bytes) -> bytes:
    """``payload`` with its int32 size in front."""
    return _SIZE.pack(len(payload)) + payload
