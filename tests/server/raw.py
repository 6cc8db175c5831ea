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


def request_frame(api_key: int, version: int, correlation_id: int, values: dict[str, object]) -> bytes:
    """A request frame (size field included) written by kio's encoder from plain ``values``, with
    the request header of that version (v2 for flexible versions, else v1)."""
    import io

    from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
    from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
    from kio.serial import entity_writer

    from kafkalog.server.requests.kio_build import build
    from kafkalog.server.requests.message_schemas import request_schema

    cls = request_schema(api_key, version)
    body = build(cls, values)
    header_cls = RequestHeaderV2 if cls.__flexible__ else RequestHeaderV1
    header = build(header_cls, {"request_api_key": api_key, "request_api_version": version,
                                "correlation_id": correlation_id, "client_id": "raw"})
    buf = io.BytesIO()
    entity_writer(header_cls)(buf, header)
    entity_writer(cls)(buf, body)
    data = buf.getvalue()
    return struct.pack(">i", len(data)) + data


def response_of(frame: bytes, api_key: int, version: int) -> object:
    """A response frame (without its size field) decoded by kio (response header v1 for flexible
    versions, except ApiVersions)."""
    from kio.serial import entity_reader

    from kafkalog.server.requests.message_schemas import response_schema

    cls = response_schema(api_key, version)
    hsize = 5 if cls.__flexible__ and api_key != 18 else 4
    return entity_reader(cls)(frame, hsize)[0]


def fetch_frame(version: int, correlation_id: int, topics: list[tuple[object, list[tuple[int, int, int]]]],
                session_id: int = 0, session_epoch: int = -1,
                forgotten: list[tuple[object, list[int]]] | None = None,
                max_wait_ms: int = 0, min_bytes: int = 0, max_bytes: int = 50 << 20,
                isolation_level: int = 0) -> bytes:
    """A Fetch request frame (kio's encoder), ``topics`` as (name, or topic ID from v13,
    [(partition, fetch_offset, partition_max_bytes)])."""
    key = "topic_id" if version >= 13 else "topic"
    return request_frame(1, version, correlation_id, {
        "cluster_id": None, "replica_id": -1, "replica_state": {"replica_id": -1, "replica_epoch": -1},
        "max_wait": max_wait_ms, "min_bytes": min_bytes,
        "max_bytes": max_bytes, "isolation_level": isolation_level, "session_id": session_id,
        "session_epoch": session_epoch, "rack_id": "",
        "topics": [{key: t, "partitions": [
            {"partition": p, "current_leader_epoch": -1, "fetch_offset": off, "last_fetched_epoch": -1,
             "log_start_offset": -1, "partition_max_bytes": mb, "replica_directory_id": None}
            for p, off, mb in parts]} for t, parts in topics],
        "forgotten_topics_data": [{key: t, "partitions": ps} for t, ps in (forgotten or [])]})


def fetch_response(frame: bytes, version: int) -> object:
    """A Fetch response frame (without its size field) decoded by kio."""
    return response_of(frame, 1, version)
