"""Protocol behaviour through real client code (aiokafka's connection for Fetch requests) and
raw frames captured from real clients: long-poll, empty record sets, mid-batch offsets, KIP-74,
OffsetOutOfRange, librdkafka's trailing bytes, ApiVersions of an unknown version."""

from __future__ import annotations

import asyncio
import os
import struct
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.fetch import FetchRequest

from kafkalog.log.checkpoint import PartitionMetadataFile
from kafkalog.server.handlers import fetch as fetch_module
from kafkalog.server.handlers.kafka_apis import VERSIONS
from tests.server.broker_process import BrokerProcess
from tests.server.raw import (
    answers_api_versions,
    api_versions_v0,
    captured_requests,
    connect,
    fetch_frame,
    fetch_response,
    recv_frame,
    request_frame,
    response_of,
)

MiB = 1 << 20


async def _client(broker: BrokerProcess) -> tuple[AIOKafkaClient, int]:
    c = AIOKafkaClient(bootstrap_servers=broker.bootstrap)
    await c.bootstrap()
    return c, next(iter(c.cluster.brokers())).nodeId


async def _produce(broker: BrokerProcess, topic: str, values: list, linger_ms: int = 0) -> None:
    p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=linger_ms)
    await p.start()
    try:
        futs = [await p.send(topic, v, partition=0) for v in values]
        for f in futs:
            await f
    finally:
        await p.stop()


def _partition(resp: object) -> tuple:
    topics = resp.topics  # type: ignore[attr-defined]
    return topics[0][1][0]


def test_fetch_long_poll_is_woken_by_an_append(broker: BrokerProcess) -> None:
    async def run() -> None:
        await _produce(broker, "lp", [b"first"])
        c, node = await _client(broker)
        try:
            fetch = asyncio.ensure_future(c.send(node, FetchRequest(120_000, 1, MiB, 0, [("lp", [(0, 1, MiB)])])))
            await asyncio.sleep(0.5)
            assert not fetch.done()                  # parked: nothing at offset 1 yet
            await _produce(broker, "lp", [b"second"])
            # woken by the append, long before its 120 s max wait
            resp = await asyncio.wait_for(fetch, 60)
            part = _partition(resp)
            assert part[1] == 0 and b"second" in part[-1]
        finally:
            await c.close()
    asyncio.run(run())


def test_fetch_answers_at_max_wait_with_a_zero_length_record_set(broker: BrokerProcess) -> None:
    async def run() -> None:
        await _produce(broker, "mw", [b"x"])
        c, node = await _client(broker)
        try:
            resp = await asyncio.wait_for(
                c.send(node, FetchRequest(200, 1, MiB, 0, [("mw", [(0, 1, MiB)])])), 60)
            part = _partition(resp)
            assert part[1] == 0                # no error
            assert part[2] == 1                # high watermark
            assert part[-1] == b""             # empty, not null
        finally:
            await c.close()
    asyncio.run(run())


def test_fetch_out_of_range_offset(broker: BrokerProcess) -> None:
    async def run() -> None:
        await _produce(broker, "oor", [b"a", b"b"])
        c, node = await _client(broker)
        try:
            resp = await c.send(node, FetchRequest(100, 1, MiB, 0, [("oor", [(0, 50, MiB)])]))
            part = _partition(resp)
            assert part[1] == 1                # OFFSET_OUT_OF_RANGE
            # as Kafka 4.4 answers it (tests/server/test_differential.py): no offsets, the client
            # asks ListOffsets where to reset
            assert part[2] == -1               # high watermark
            assert part[4] == -1               # log start offset
        finally:
            await c.close()
    asyncio.run(run())


def test_fetch_inside_a_batch_returns_the_whole_batch_and_kip74_first_batch(broker: BrokerProcess) -> None:
    async def run() -> None:
        await _produce(broker, "mid", [b"v%d" % i for i in range(10)], linger_ms=200)
        c, node = await _client(broker)
        try:
            # offset 5 lies inside the one batch 0..9; a 1-byte partition limit still returns it
            resp = await c.send(node, FetchRequest(100, 1, 1, 0, [("mid", [(0, 5, 1)])]))
            records = _partition(resp)[-1]
            base_offset, length = struct.unpack_from(">qi", records, 0)
            assert base_offset == 0
            assert len(records) == length + 12           # exactly that whole batch
            assert struct.unpack_from(">i", records, 57)[0] == 10
        finally:
            await c.close()
    asyncio.run(run())


@pytest.mark.parametrize("name", sorted(n for n in captured_requests() if "Produce" not in n))
def test_captured_requests_get_answers(broker: BrokerProcess, name: str) -> None:
    """ApiVersions and Metadata exactly as five clients wrote them (librdkafka's Metadata carries
    trailing bytes) get a response with their correlation id."""
    frame = captured_requests()[name]
    corr = struct.unpack_from(">i", frame, 8)[0]
    with connect(broker.port) as s:
        s.sendall(frame)
        resp = recv_frame(s)
    assert resp is not None, broker.stderr()[-2000:]
    assert struct.unpack_from(">i", resp, 0)[0] == corr


def _acks_position(frame: bytes) -> int:
    """Where acks is in a captured Produce v7 frame (header v1, then transactional_id, then acks)."""
    pos = 12
    n = struct.unpack_from(">h", frame, pos)[0]
    pos += 2 + max(n, 0)
    n = struct.unpack_from(">h", frame, pos)[0]
    return pos + 2 + max(n, 0)


def _produce_acks(frame: bytes) -> int:
    return struct.unpack_from(">h", frame, _acks_position(frame))[0]


def test_captured_produce_requests_get_answers(broker: BrokerProcess) -> None:
    """Produce requests of five clients: acks=0 gets no response (the next request on the
    connection is answered next), others a response with their correlation id."""
    asyncio.run(_produce(broker, "t", [b"seed"]))          # the captures' topic, auto-created
    seen = 0
    for name, frame in captured_requests().items():
        if "Produce" not in name:
            continue
        seen += 1
        corr = struct.unpack_from(">i", frame, 8)[0]
        with connect(broker.port) as s:
            s.sendall(frame + api_versions_v0(7))
            resp = recv_frame(s)
            assert resp is not None, name
            if _produce_acks(frame) == 0:
                assert struct.unpack_from(">i", resp, 0)[0] == 7, name
            else:
                assert struct.unpack_from(">i", resp, 0)[0] == corr, name
                assert struct.unpack_from(">i", recv_frame(s) or b"", 0)[0] == 7, name
    assert seen == 25


def test_api_versions_of_an_unknown_version_gets_a_v0_error(broker: BrokerProcess) -> None:
    body = struct.pack(">hhih", 18, 99, 5, 1) + b"x" + b"\x00" * 3
    with connect(broker.port) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        resp = recv_frame(s)
    assert resp is not None
    corr, error, n = struct.unpack_from(">ihi", resp, 0)
    assert (corr, error, n) == (5, 35, 1)             # UNSUPPORTED_VERSION, the ApiVersions range
    assert struct.unpack_from(">hhh", resp, 10) == (18, 0, 4)
    assert answers_api_versions(broker.port)


def test_large_fetch_sent_from_the_segment_file_is_byte_exact(broker: BrokerProcess) -> None:
    """A slice above the sendfile threshold: the bytes the client gets are the segment file's."""
    async def run() -> None:
        values = [b"%06d" % i + bytes([i % 251]) * 1000 for i in range(1500)]
        await _produce(broker, "big", values, linger_ms=50)
        c, node = await _client(broker)
        try:
            resp = await c.send(node, FetchRequest(100, 1, 4 * MiB, 0, [("big", [(0, 0, MiB)])]))
            records = _partition(resp)[-1]
        finally:
            await c.close()
        assert len(records) > 256 * 1024
        seg = os.path.join(broker.data_dir, "big-0", "00000000000000000000.log")
        with open(seg, "rb") as f:
            assert records == f.read(len(records))
        # and every value comes back through a real consumer
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, max_partition_fetch_bytes=MiB)
        await consumer.start()
        try:
            consumer.assign([TopicPartition("big", 0)])
            consumer.seek(TopicPartition("big", 0), 0)
            got: list = []
            for _ in range(60):
                for msgs in (await consumer.getmany(timeout_ms=1000)).values():
                    got += [m.value for m in msgs]
                if len(got) >= len(values):
                    break
            assert got == values
        finally:
            await consumer.stop()
    asyncio.run(run())


@pytest.mark.parametrize("version", range(VERSIONS[1][0], VERSIONS[1][1] + 1))
def test_every_fetch_version_answers_what_kio_decodes(broker: BrokerProcess, version: int) -> None:
    """The hand-written Fetch response, in every served version, read back by kio's decoder:
    both isolation levels (the aborted-transaction list null or empty), a record set copied
    (small) and one sent from the segment file (above the sendfile threshold), the log start
    offset from v5, no preferred read replica from v11, the topic by ID from v13."""
    async def produce() -> None:
        small = [b"s%d" % i for i in range(5)]
        big = [bytes([i % 251]) * 2000 for i in range(100)]
        await _produce(broker, "fv", small + big, linger_ms=50)
    if not os.path.exists(os.path.join(broker.data_dir, "fv-0")):
        asyncio.run(produce())
    seg = os.path.join(broker.data_dir, "fv-0", "00000000000000000000.log")
    with open(seg, "rb") as f:
        segment = f.read()
    hw = 105
    key: object = "fv"
    if version >= 13:
        key = PartitionMetadataFile(os.path.join(broker.data_dir, "fv-0", "partition.metadata")).read().topic_id
    for isolation in (0, 1):
        for limit in (60, 1 << 20):       # KIP-74: the first batch whole even over the limit
            with connect(broker.port) as s:
                s.sendall(fetch_frame(version, 9, [(key, [(0, 0, limit)])], isolation_level=isolation))
                frame = recv_frame(s)
            assert frame is not None and struct.unpack_from(">i", frame, 0)[0] == 9
            resp: Any = fetch_response(frame, version)
            assert [t.topic_id if version >= 13 else t.topic for t in resp.responses] == [key]
            (p,) = resp.responses[0].partitions
            assert (p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset) == \
                (0, 0, hw, hw)
            if version >= 5:
                assert p.log_start_offset == 0
            if version >= 11:
                assert p.preferred_read_replica == -1
            assert p.aborted_transactions == (() if isolation else None)
            records = p.records
            assert records == segment[:len(records)]
            if limit == 60:
                assert len(records) == struct.unpack_from(">i", segment, 8)[0] + 12
            else:
                assert len(records) == len(segment) > fetch_module.SENDFILE_MIN_BYTES


def test_acks_zero_error_closes_the_connection(broker: BrokerProcess) -> None:
    """A captured acks=0 Produce to a topic that does not exist: no response, the connection is
    closed (Kafka's way of telling such a producer); a good one on the same broker still works."""
    frames = {n: f for n, f in captured_requests().items() if "Produce" in n and _produce_acks(f) == 0}
    assert frames
    frame = bytearray(next(iter(frames.values())))
    pos = _acks_position(bytes(frame)) + 2 + 4 + 4          # acks, timeout, topic count
    assert struct.unpack_from(">h", frame, pos)[0] == 1     # the one-letter topic "t"
    frame[pos + 2:pos + 3] = b"Z"                           # a topic that does not exist
    with connect(broker.port) as s:
        s.sendall(frame)
        assert recv_frame(s) is None
    assert answers_api_versions(broker.port)


def test_api_versions_advertises_exactly_what_is_served(broker: BrokerProcess) -> None:
    """Kafka 4's floors, the clients' ceilings; the consumer group protocol (68, 69, as Kafka 4.4), no
    telemetry (71, 72: answered but not advertised, as Kafka 4.4), the classic group protocol's APIs,
    the transaction APIs at the client versions with transactions v2 (EndTxn v5, TxnOffsetCommit v5,
    AddOffsetsToTxn v4; no broker-to-broker AddPartitionsToTxn v4+), OffsetCommit and OffsetFetch by
    topic id (v10, as Kafka 4.4)."""
    with connect(broker.port) as s:
        s.sendall(api_versions_v0(9))
        resp = recv_frame(s)
    assert resp is not None
    corr, error, n = struct.unpack_from(">ihi", resp, 0)
    assert (corr, error) == (9, 0)
    ranges = {}
    for i in range(n):
        key, lo, hi = struct.unpack_from(">hhh", resp, 10 + 6 * i)
        ranges[key] = (lo, hi)
    # Produce from v0 as Kafka 4 advertises it (KAFKA-18659), though v0-v2 are refused
    assert ranges == {0: (0, 13), 1: (4, 18), 2: (1, 11), 3: (0, 13), 18: (0, 4), 19: (2, 7),
                      20: (1, 6), 21: (0, 2), 22: (0, 5), 32: (1, 4), 33: (0, 2), 37: (0, 3),
                      44: (0, 1), 60: (0, 2),
                      8: (2, 10), 9: (1, 10), 10: (0, 6), 11: (0, 9), 12: (0, 4), 13: (0, 5),
                      14: (0, 5), 15: (0, 6), 16: (0, 5), 42: (0, 2), 47: (0, 0),
                      24: (0, 3), 25: (0, 4), 26: (0, 5), 28: (0, 5),
                      17: (0, 1), 36: (0, 2),        # SaslHandshake, SaslAuthenticate (as Kafka)
                      68: (0, 1), 69: (0, 1),        # ConsumerGroupHeartbeat, ConsumerGroupDescribe
                      # what Kafka's tools ask (issue 28): WriteTxnMarkers, DescribeLogDirs,
                      # DescribeProducers, DescribeTransactions, ListTransactions, DescribeTopicPartitions
                      27: (1, 2), 35: (1, 5), 61: (0, 0), 65: (0, 0), 66: (0, 2), 75: (0, 0),
                      76: (1, 1), 77: (1, 1), 78: (1, 2), 79: (1, 2),    # share groups (KIP-932)
                      90: (0, 1), 91: (0, 0), 92: (0, 0),                # share group offsets
                      88: (0, 1), 89: (0, 1),    # StreamsGroupHeartbeat, StreamsGroupDescribe (issue 40)
                      29: (1, 3), 30: (1, 3), 31: (1, 3),    # DescribeAcls, CreateAcls, DeleteAcls (issue 38)
                      50: (0, 0), 51: (0, 0),    # Describe/AlterUserScramCredentials (issue 38)
                      48: (0, 1), 49: (0, 1),    # Describe/AlterClientQuotas (issue 38)
                      # ElectLeaders, Alter/ListPartitionReassignments, UpdateFeatures (issue 38)
                      43: (0, 2), 45: (0, 1), 46: (0, 0), 57: (0, 2)}


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_api_versions_answers_are_kept_and_carry_each_requests_correlation_id(
        broker: BrokerProcess, version: int) -> None:
    """The broker keeps each version's ApiVersions answer once made (it made it again for every
    connection: 0.66-1.14 ms a round trip): two requests with different correlation ids get the same
    body, each with its own id, of the size its frame says, and kio decodes it as the whole table."""
    values: dict[str, object] = {"client_software_name": "kept", "client_software_version": "1"} \
        if version >= 3 else {}
    bodies = []
    with connect(broker.port) as s:
        for corr in (41, 1_000_042):
            s.sendall(request_frame(18, version, corr, values))
            resp = recv_frame(s)
            assert resp is not None
            assert struct.unpack_from(">i", resp, 0)[0] == corr
            bodies.append(resp[4:])
    assert bodies[0] == bodies[1]
    decoded: Any = response_of(resp, 18, version)
    assert decoded.error_code == 0
    assert {k.api_key for k in decoded.api_keys} >= {0, 1, 3, 18}
