"""A frame of at least :data:`LARGE_REQUEST_BYTES` is parsed on the broker's parsing thread, not in
the event loop (issue 35): kio read a Fetch of 100,000 partitions (3.3 MB) in 45-52 ms and a
Produce of one record to each (7.6 MB) in 54 ms, one step every other client waited for. Over real
sockets to a broker in this process: which thread parsed each frame (the real parser, recorded),
the answers of large frames pipelined with small ones come back whole and in order, an ApiVersions
of a version the broker lacks and a frame that breaks a bound are answered as when small, and the
broker leaves no parsing thread behind. The first frame of an API version after the start is parsed
there too (its readers are made first: kio's classes of the version imported, 9-23 ms), the next
ones of that version in the loop."""

from __future__ import annotations

import struct
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from kafkalog.record.builder import build_batch
from kafkalog.server.network import socket_server
from kafkalog.server.network.socket_server import LARGE_REQUEST_BYTES
from kafkalog.server.requests import protocol
from kafkalog.testing import LocalBroker
from tests.server.raw import (
    answers_api_versions,
    api_versions_v0,
    connect,
    fetch_frame,
    fetch_response,
    recv_frame,
    request_frame,
    response_of,
)

PARSING_THREAD = "kafkalog-request-parse"
PARTITIONS = 4
#: one partition entry of a Fetch v12 request is ~35 bytes: enough of them make a large frame
FETCH_ENTRIES = LARGE_REQUEST_BYTES // 30


@pytest.fixture
def parsed_on(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int, str]]:
    """(correlation id, frame size, thread name) of every frame the broker parses, in order."""
    seen: list[tuple[int, int, str]] = []
    real = socket_server.parse_request

    def recording(data: bytes, supported: Any) -> Any:
        seen.append((struct.unpack_from(">i", data, 4)[0], len(data), threading.current_thread().name))
        return real(data, supported)
    monkeypatch.setattr(socket_server, "parse_request", recording)
    return seen


@pytest.fixture
def broker() -> Iterator[LocalBroker]:
    with LocalBroker("thread", {"auto.create.topics.enable": "false"}) as b:
        b.create_topic("big", PARTITIONS)
        yield b


def _produce(correlation_id: int, value_size: int) -> bytes:
    batches = [build_batch([(b"k%d" % p, bytes([p]) * value_size, 1_700_000_000_000)])
               for p in range(PARTITIONS)]
    return request_frame(0, 9, correlation_id, {"transactional_id": None, "acks": -1, "timeout": 30000,
                                                "topic_data": [{"name": "big", "partition_data": [
                                                    {"index": p, "records": batches[p]}
                                                    for p in range(PARTITIONS)]}]})


def _fetch(correlation_id: int, entries: int) -> bytes:
    return fetch_frame(12, correlation_id, [("big", [(i % 1000, 0, 1 << 20) for i in range(entries)])])


def test_large_frames_are_parsed_aside_and_answered_in_order(broker: LocalBroker,
                                                             parsed_on: list[tuple[int, int, str]]) -> None:
    large_produce = _produce(1, LARGE_REQUEST_BYTES // PARTITIONS + 1000)
    large_fetch = _fetch(3, FETCH_ENTRIES)
    small_fetch = _fetch(4, 1000)
    assert len(large_produce) - 4 >= LARGE_REQUEST_BYTES and len(large_fetch) - 4 >= LARGE_REQUEST_BYTES
    assert len(small_fetch) - 4 < LARGE_REQUEST_BYTES
    for key, version in ((0, 9), (1, 12), (18, 0)):     # (their first frames are parsed aside too)
        protocol._readers(key, version)
    with connect(broker.port) as s:
        # one send: the readable callback sees every frame at once, a large one among small ones
        s.sendall(large_produce + api_versions_v0(2) + large_fetch + small_fetch + api_versions_v0(5))
        frames = [recv_frame(s) for _ in range(5)]
    assert all(f is not None for f in frames)
    assert [struct.unpack_from(">i", f, 0)[0] for f in frames if f] == [1, 2, 3, 4, 5]
    produced: Any = response_of(frames[0], 0, 9)            # type: ignore[arg-type]
    assert [(p.index, p.error_code, p.base_offset) for t in produced.responses
            for p in t.partition_responses] == [(p, 0, 0) for p in range(PARTITIONS)]
    large: Any = fetch_response(frames[2], 12)              # type: ignore[arg-type]
    small: Any = fetch_response(frames[3], 12)              # type: ignore[arg-type]
    large_parts = [(p.partition_index, p.error_code, p.high_watermark, bytes(p.records or b""))
                   for t in large.responses for p in t.partitions]
    small_parts = [(p.partition_index, p.error_code, p.high_watermark, bytes(p.records or b""))
                   for t in small.responses for p in t.partitions]
    assert len(large_parts) == FETCH_ENTRIES
    # the same entries answer the same whichever thread parsed the request; each partition's
    # records are the batch produced to it, the others are unknown (error 3)
    assert large_parts[:1000] == small_parts
    assert [(i, e, hw) for i, e, hw, _r in small_parts[:PARTITIONS + 1]] == \
        [(p, 0, 1) for p in range(PARTITIONS)] + [(PARTITIONS, 3, -1)]
    assert all(bytes([p]) * 100 in small_parts[p][3] for p in range(PARTITIONS))
    aside = {corr: name.startswith(PARSING_THREAD) for corr, _size, name in parsed_on}
    assert aside == {1: True, 2: False, 3: True, 4: False, 5: False}


def test_the_first_frame_of_an_api_version_is_parsed_aside(broker: LocalBroker,
                                                          parsed_on: list[tuple[int, int, str]]) -> None:
    """As after a start (no version's readers made yet): of three ApiVersions v0 and two Fetch v12
    sent at once, the first of each version is parsed on the parsing thread, the others in the
    loop; all answered in order. An ApiVersions of a version the broker lacks is refused at once,
    in the loop (no readers to make)."""
    protocol._readers.cache_clear()
    protocol._READERS_MADE.clear()
    with connect(broker.port) as s:
        s.sendall(api_versions_v0(1) + api_versions_v0(2) + _fetch(3, 10) + api_versions_v0(4) + _fetch(5, 10))
        frames = [recv_frame(s) for _ in range(5)]
        body = struct.pack(">hhih", 18, 99, 6, 4) + b"test"
        s.sendall(struct.pack(">i", len(body)) + body)
        refused = recv_frame(s)
    assert [struct.unpack_from(">i", f, 0)[0] for f in frames if f] == [1, 2, 3, 4, 5]
    assert all(struct.unpack_from(">h", frames[i], 4)[0] == 0 for i in (0, 1, 3))   # type: ignore[arg-type]
    fetched: Any = fetch_response(frames[4], 12)             # type: ignore[arg-type]
    assert [p.error_code for t in fetched.responses for p in t.partitions][:PARTITIONS] == [0] * PARTITIONS
    aside = {corr: name.startswith(PARSING_THREAD) for corr, _size, name in parsed_on}
    assert aside == {1: True, 2: False, 3: True, 4: False, 5: False, 6: False}
    assert refused is not None and struct.unpack_from(">ih", refused, 0) == (6, 35)


def test_a_large_api_versions_of_an_unknown_version_is_answered_with_the_versions(
        broker: LocalBroker, parsed_on: list[tuple[int, int, str]]) -> None:
    """ApiVersions v99 with trailing bytes (ignored, as in Kafka) to a large frame: answered
    UNSUPPORTED_VERSION with ApiVersions' versions in v0, as a small one is."""
    body = struct.pack(">hhih", 18, 99, 7, 4) + b"test" + bytes(LARGE_REQUEST_BYTES)
    with connect(broker.port) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        answer = recv_frame(s)
    assert answer is not None
    # Kafka's answer: UNSUPPORTED_VERSION and ApiVersions' own range, that the client retries in
    assert struct.unpack_from(">ihihhh", answer, 0) == (7, 35, 1, 18, 0, 4)
    assert parsed_on[-1][2].startswith(PARSING_THREAD)


def test_a_large_frame_breaking_a_bound_closes_only_its_connection(
        broker: LocalBroker, parsed_on: list[tuple[int, int, str]]) -> None:
    """A large Fetch whose last topic's partition count claims more entries than bytes are left:
    its connection is closed unanswered, the broker serves the next."""
    frame = bytearray(_fetch(9, FETCH_ENTRIES))
    body_end = len(frame)
    # Fetch v12 is flexible: the compact array length of the last topic's partitions is a varint
    # after its name; claim 2^28 entries there instead
    name_at = frame.rindex(b"\x04big")
    count_at = name_at + 4
    n, width = 0, 0
    while True:
        byte = frame[count_at + width]
        n |= (byte & 0x7F) << (7 * width)
        width += 1
        if not byte & 0x80:
            break
    assert n == FETCH_ENTRIES + 1
    frame[count_at:count_at + width] = b"\x80\x80\x80\x80\x01"
    frame[:4] = struct.pack(">i", body_end - 4 + 5 - width)
    with connect(broker.port) as s:
        s.sendall(bytes(frame))
        assert recv_frame(s) is None
    assert parsed_on[-1][:2] == (9, len(frame) - 4)
    assert parsed_on[-1][2].startswith(PARSING_THREAD)
    assert answers_api_versions(broker.port)


def test_the_broker_leaves_no_parsing_thread_behind() -> None:
    with LocalBroker("thread", {"auto.create.topics.enable": "false"}) as b:
        b.create_topic("big", PARTITIONS)
        with connect(b.port) as s:
            s.sendall(_fetch(1, FETCH_ENTRIES))
            assert recv_frame(s) is not None
        assert any(t.name.startswith(PARSING_THREAD) for t in threading.enumerate())
    assert not any(t.name.startswith(PARSING_THREAD) and t.is_alive() for t in threading.enumerate())


def test_a_server_with_metrics_parses_large_frames_aside_too(
        tmp_path: Any, parsed_on: list[tuple[int, int, str]]) -> None:
    """``kafkalog serve`` with metrics on runs :class:`MeteredServer`, whose connection task times
    its own dispatch: a large frame there is parsed on the parsing thread as well, its request
    timed (Fetch's request count moves)."""
    import asyncio

    from kafkalog.log.manager import LogManager
    from kafkalog.server.broker import Broker
    from kafkalog.server.config import ServerConfig
    from kafkalog.server.metrics.enable import metered_server
    cfg = ServerConfig({"auto.create.topics.enable": "false"})
    manager = LogManager(tmp_path / "data", cfg.broker, background=False)
    try:
        b = Broker(manager, cfg, cfg.advertised("127.0.0.1", 0))
        b.create_topic("big", PARTITIONS, {})

        async def run() -> tuple[list[bytes | None], list[float]]:
            server = metered_server(b, host="127.0.0.1", port=0)
            _host, port = await server.start()
            try:
                def client() -> list[bytes | None]:
                    with connect(port) as s:
                        s.sendall(_fetch(3, FETCH_ENTRIES) + api_versions_v0(4))
                        return [recv_frame(s) for _ in range(2)]
                frames = await asyncio.to_thread(client)
                # FetchConsumer and Fetch, each counted once
                return frames, [c.value for c in server.metrics._by_request[(1, 12)].requests]
            finally:
                await server.stop()
        frames, fetches = asyncio.run(run())
    finally:
        manager.close()
    assert [struct.unpack_from(">i", f, 0)[0] for f in frames if f] == [3, 4]
    large: Any = fetch_response(frames[0], 12)              # type: ignore[arg-type]
    assert sum(len(t.partitions) for t in large.responses) == FETCH_ENTRIES
    aside = {corr: name.startswith(PARSING_THREAD) for corr, _size, name in parsed_on}
    assert aside == {3: True, 4: False}
    assert fetches == [1, 1]
