"""Requests answered in the readable callback (``kafkalog.server.network.socket_server``'s inline answers), and
what they hand to the connection's task: a request whose handler waits (a long-poll Fetch) with
pipelined requests behind it, a response the socket does not take whole (a client that reads
slowly), a frame that does not parse in the middle of a burst; a connection answered this way
keeps its idle clock fresh. Raw sockets against ``kafkalog serve``, records from aiokafka."""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import time
from collections.abc import Iterator

import pytest

from tests.server.broker_process import BrokerProcess
from tests.server.raw import answers_api_versions, api_versions_v0, connect, recv_exact, recv_frame
from tests.server.test_protocol import _produce as produce_values

MiB = 1 << 20


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    d = str(tmp_path_factory.mktemp("inline") / "data")
    b = BrokerProcess(d, ["connections.max.idle.ms=600"]).start()
    try:
        yield b
    finally:
        assert b.stop() == 0, b.stderr()


def _produce(broker: BrokerProcess, topic: str, values: list[bytes]) -> None:
    asyncio.run(produce_values(broker, topic, values, linger_ms=20))


def fetch_v4(correlation_id: int, topic: str, offset: int, max_bytes: int, *, max_wait_ms: int = 0,
             min_bytes: int = 0) -> bytes:
    """A Fetch v4 frame for partition 0 of ``topic``."""
    name = topic.encode()
    body = (struct.pack(">hhih", 1, 4, correlation_id, 4) + b"test"
            + struct.pack(">iiiib", -1, max_wait_ms, min_bytes, max_bytes, 0)
            + struct.pack(">ih", 1, len(name)) + name
            + struct.pack(">iiqi", 1, 0, offset, max_bytes))
    return struct.pack(">i", len(body)) + body


def records_of(resp: bytes) -> tuple[int, int, bytes]:
    """(correlation id, partition error, record bytes) of a one-partition Fetch v4 response."""
    corr = struct.unpack_from(">i", resp, 0)[0]
    pos = 4 + 4 + 4                                         # correlation, throttle, topic count
    pos += 2 + struct.unpack_from(">h", resp, pos)[0]       # topic name
    pos += 4                                                # partition count
    _index, error, _hw, _lso = struct.unpack_from(">ihqq", resp, pos)
    pos += 22
    n_aborted = struct.unpack_from(">i", resp, pos)[0]
    pos += 4 + max(n_aborted, 0) * 16
    size = struct.unpack_from(">i", resp, pos)[0]
    return corr, error, resp[pos + 4:pos + 4 + size]


def _api_versions_ids(s: socket.socket, n: int) -> list[int]:
    out = []
    for _ in range(n):
        resp = recv_frame(s)
        assert resp is not None
        corr, err = struct.unpack_from(">ih", resp, 0)
        assert err == 0
        out.append(corr)
    return out


def test_a_waiting_fetch_keeps_the_requests_behind_it_in_order(served: BrokerProcess) -> None:
    """A long-poll Fetch at the log end (min_bytes 1, max_wait 400 ms) and three ApiVersions in the
    same send: the Fetch is answered first, empty, once it has waited; then the others, in order."""
    _produce(served, "tail", [b"one", b"two"])
    with connect(served.port) as s:
        t0 = time.monotonic()
        s.sendall(fetch_v4(50, "tail", 2, MiB, max_wait_ms=400, min_bytes=1)
                  + b"".join(api_versions_v0(i) for i in (51, 52, 53)))
        resp = recv_frame(s)
        waited = time.monotonic() - t0
        assert resp is not None
        assert records_of(resp) == (50, 0, b"")
        assert waited >= 0.35
        assert _api_versions_ids(s, 3) == [51, 52, 53]
        # and the connection goes on answering
        s.sendall(fetch_v4(54, "tail", 0, MiB))
        resp = recv_frame(s)
        assert resp is not None
        corr, error, records = records_of(resp)
        assert (corr, error) == (54, 0) and len(records) > 0


def test_a_response_the_socket_does_not_take_whole_is_finished_by_the_task(
        served: BrokerProcess) -> None:
    """A client with a small receive buffer asks for ~6 MiB sent from the segment file and an
    ApiVersions behind it, and reads only after a pause: the broker's send stops part way, the
    rest follows as the client reads; the records are the segment file's bytes, then the
    ApiVersions answer, then the connection serves the next Fetch."""
    values = [b"%07d" % i + bytes([i % 251]) * 60_000 for i in range(100)]
    _produce(served, "wide", values)
    seg = os.path.join(served.data_dir, "wide-0", "00000000000000000000.log")
    with open(seg, "rb") as f:
        on_disk = f.read()
    assert len(on_disk) > 5 * MiB
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
    s.settimeout(30)
    s.connect(("127.0.0.1", served.port))
    with s:
        s.sendall(fetch_v4(60, "wide", 0, 8 * MiB) + api_versions_v0(61))
        time.sleep(0.5)                     # the broker fills what the socket holds, then waits
        resp = recv_frame(s)
        assert resp is not None
        corr, error, records = records_of(resp)
        assert (corr, error) == (60, 0)
        assert len(records) == len(on_disk) and records == on_disk
        assert _api_versions_ids(s, 1) == [61]
        s.sendall(fetch_v4(62, "wide", 50, 100_000))
        resp = recv_frame(s)
        assert resp is not None
        corr, error, records = records_of(resp)
        assert (corr, error) == (62, 0)
        assert struct.unpack_from(">q", records, 0)[0] <= 50      # the batch holding offset 50


def test_a_frame_that_does_not_parse_in_a_burst_closes_the_connection_after_the_ones_before(
        served: BrokerProcess) -> None:
    bad = struct.pack(">hhi", 1, 4, 71) + b"\xff\xff"      # a Fetch v4 cut short in its header
    with connect(served.port) as s:
        s.sendall(api_versions_v0(70) + struct.pack(">i", len(bad)) + bad + api_versions_v0(72))
        assert _api_versions_ids(s, 1) == [70]
        assert recv_exact(s, 1) is None                    # closed, 72 never answered
    assert answers_api_versions(served.port)


def test_a_connection_answered_in_the_callback_is_not_idle(served: BrokerProcess) -> None:
    """connections.max.idle.ms=600: requests every 100 ms for 1.5 s keep the connection open (each
    answer restarts its idle clock); then, with nothing sent, the broker closes it."""
    with connect(served.port) as s:
        t_end = time.monotonic() + 1.5
        i = 0
        while time.monotonic() < t_end:
            s.sendall(api_versions_v0(100 + i))
            assert _api_versions_ids(s, 1) == [100 + i]
            i += 1
            time.sleep(0.1)
        assert recv_exact(s, 1) is None
