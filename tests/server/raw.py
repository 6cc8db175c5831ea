"""Raw sockets for the protocol tests: frames captured from real clients, sent as they were."""

from __future__ import annotations

import glob
import os
import socket
import struct

from tests.oracle import VECTORS_ROOT

CAPTURES = os.path.join(VECTORS_ROOT, "client-captures")


def captured_requests() -> dict[str, bytes]:
    """name -> whole request frame (size field included), from the shared client captures."""
    out = {}
    for path in sorted(glob.glob(os.path.join(CAPTURES, "*.request.hex"))):
        with open(path, encoding="ascii") as f:
            out[os.path.basename(path)[:-len(".request.hex")]] = bytes.fromhex("".join(f.read().split()))
    return out


def connect(port: int, timeout: float = 30) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def recv_exact(s: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def recv_frame(s: socket.socket) -> bytes | None:
    """One response frame without its size field; None when the broker closed the connection."""
    head = recv_exact(s, 4)
    if head is None:
        return None
    return recv_exact(s, struct.unpack(">i", head)[0])


def api_versions_v0(correlation_id: int = 7) -> bytes:
    body = struct.pack(">hhih", 18, 0, correlation_id, 4) + b"test"
    return struct.pack(">i", len(body)) + body


def answers_api_versions(port: int) -> bool:
    """The broker still serves a valid request (ApiVersions v0, correlation id 7)."""
    with connect(port) as s:
        s.sendall(api_versions_v0())
        resp = recv_frame(s)
    return resp is not None and struct.unpack_from(">ih", resp, 0) == (7, 0)
