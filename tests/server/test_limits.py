"""Kafka's connection and request limits: ``max.connections``, ``connections.max.idle.ms``,
``socket.request.max.bytes``; a client that never reads its responses stalls only itself."""

from __future__ import annotations

import os
import socket
import struct
import time
from collections.abc import Iterator

import pytest

from tests.server.broker_process import BrokerProcess
from tests.server.raw import answers_api_versions, api_versions_v0, connect, recv_frame


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    d = str(tmp_path_factory.mktemp("limits") / "data")
    b = BrokerProcess(d, ["max.connections=3", "connections.max.idle.ms=500",
                          "socket.request.max.bytes=4096"]).start()
    try:
        yield b
    finally:
        assert b.stop() == 0, b.stderr()


def test_max_connections(limited: BrokerProcess) -> None:
    held = [connect(limited.port) for _ in range(3)]
    try:
        for s in held:                                   # all three are served
            s.sendall(api_versions_v0())
            assert recv_frame(s) is not None
        extra = connect(limited.port)
        with extra:
            # Kafka's acceptor waits for a slot (tests/server/test_connection_quotas.py compares);
            # here the held ones are closed when idle for 500 ms: the wait is shorter
            extra.sendall(api_versions_v0())
            extra.settimeout(0.2)
            with pytest.raises(TimeoutError):
                recv_frame(extra)
            held.pop().close()
            extra.settimeout(10)
            assert recv_frame(extra) is not None         # served once a connection closed
    finally:
        for s in held:
            s.close()
    _served_again(limited.port)


def _served_again(port: int) -> None:
    """Wait until the broker has seen the closes and serves a new connection."""
    for _ in range(200):
        try:
            if answers_api_versions(port):
                return
        except (ConnectionResetError, BrokenPipeError):
            pass
        time.sleep(0.05)
    pytest.fail("the broker never served a new connection after the others closed")


def test_idle_connections_are_closed(limited: BrokerProcess) -> None:
    with connect(limited.port) as s:
        s.sendall(api_versions_v0())
        assert recv_frame(s) is not None
        # nothing more: after connections.max.idle.ms the broker closes (recv sees EOF)
        assert s.recv(1) == b""


def test_oversized_request_closes_only_that_connection(limited: BrokerProcess) -> None:
    with connect(limited.port) as s:
        s.sendall(struct.pack(">i", 5000) + b"\x00" * 100)
        assert recv_frame(s) is None
    assert answers_api_versions(limited.port)


def test_a_client_that_never_reads_does_not_stall_others(tmp_path: os.PathLike[str]) -> None:
    b = BrokerProcess(os.path.join(str(tmp_path), "data")).start()
    try:
        hog = connect(b.port)
        hog.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        # thousands of requests whose responses it never reads: the broker's writes block for
        # this connection only
        frames = b"".join(api_versions_v0(i) for i in range(20000))
        hog.setblocking(False)
        try:
            hog.send(frames)
        except BlockingIOError:
            pass
        for _ in range(3):
            assert answers_api_versions(b.port)
        hog.close()
    finally:
        assert b.stop() == 0, b.stderr()


def test_pipelined_requests_in_bursts_are_all_answered_in_order(limited: BrokerProcess) -> None:
    """Requests that arrive while the previous answer is still being written (a burst in one send),
    then a pause, then a request split across sends: every one answered, in order, none twice."""
    with connect(limited.port) as s:
        for burst in range(3):
            ids = list(range(burst * 100, burst * 100 + 40))
            s.sendall(b"".join(api_versions_v0(i) for i in ids))
            got = []
            for _ in ids:
                resp = recv_frame(s)
                assert resp is not None
                got.append(struct.unpack_from(">ih", resp, 0))
            assert got == [(i, 0) for i in ids]
            time.sleep(0.05)                              # the connection waits for the next bytes
        frame = api_versions_v0(999)
        s.sendall(frame[:5])
        time.sleep(0.05)
        s.sendall(frame[5:])
        resp = recv_frame(s)
        assert resp is not None and struct.unpack_from(">ih", resp, 0) == (999, 0)


def test_fetch_max_bytes_caps_a_response(tmp_path: os.PathLike[str]) -> None:
    """``fetch.max.bytes`` caps what one Fetch returns: three batches of ~600 bytes, a client asking
    for 1 MiB with the broker's cap at 1000 bytes gets 1000 bytes: the first batch whole and the
    start of the second (Kafka's slices may end inside a batch; clients drop the partial one)."""
    import asyncio

    from aiokafka import AIOKafkaProducer
    from aiokafka.client import AIOKafkaClient
    from aiokafka.protocol.fetch import FetchRequest

    b = BrokerProcess(os.path.join(str(tmp_path), "data"), ["fetch.max.bytes=1000"]).start()

    async def run() -> None:
        p = AIOKafkaProducer(bootstrap_servers=b.bootstrap)
        await p.start()
        try:
            for i in range(3):
                await p.send_and_wait("capped", bytes([i]) * 500, partition=0)
        finally:
            await p.stop()
        c = AIOKafkaClient(bootstrap_servers=b.bootstrap)
        await c.bootstrap()
        try:
            node = next(iter(c.cluster.brokers())).nodeId
            resp = await c.send(node, FetchRequest(100, 1, 1 << 20, 0, [("capped", [(0, 0, 1 << 20)])]))
            records = resp.topics[0][1][0][-1]
        finally:
            await c.close()
        base, length = struct.unpack_from(">qi", records, 0)
        assert base == 0 and 500 < length + 12 < 1000
        assert len(records) == 1000
    try:
        asyncio.run(run())
    finally:
        assert b.stop() == 0, b.stderr()
