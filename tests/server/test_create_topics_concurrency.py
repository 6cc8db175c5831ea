"""A large CreateTopics does not hold the event loop (issue 35): as Kafka's controller, the broker
answers once the topic is committed and makes its partitions afterwards on a thread, so another
client's requests are answered while the creation is under way.

No timing is asserted: the test checks an order. Connection A asks for one topic of 1,000
partitions (seconds of file creation on any machine) and, pipelined behind it, ListOffsets of its
last partition: answered NOT_LEADER_OR_FOLLOWER, the partition is not made yet (the previous main
answered CreateTopics once every partition was made, and then offset 0: the test failed there),
and a Produce to it, answered once it is made, offset 0, where Kafka answers NOT_LEADER_OR_FOLLOWER
and the client retries (a retry storm at 10,000 partitions: every producer refreshing its metadata).
Connection B meanwhile gets ApiVersions and Metadata listing every partition led."""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kafkalog.record.builder import build_batch
from tests.server.broker_process import BrokerProcess
from tests.server.raw import connect, recv_frame, request_frame, response_of

PARTITIONS = 1000


@pytest.fixture
def broker(tmp_path) -> Iterator[BrokerProcess]:
    with BrokerProcess(str(tmp_path / "data")).running() as b:
        yield b


def _create_topics(name: str, partitions: int, correlation_id: int) -> bytes:
    return request_frame(19, 7, correlation_id, {
        "topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                    "assignments": [], "configs": []}],
        "timeout": 60000, "validate_only": False})


def _metadata(topic: str, correlation_id: int) -> bytes:
    return request_frame(3, 12, correlation_id, {
        "topics": [{"topic_id": None, "name": topic}], "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False})


def _answered(s: socket.socket) -> bool:
    return bool(select.select([s], [], [], 0)[0])


def _list_offsets(topic: str, partition: int, correlation_id: int) -> bytes:
    return request_frame(2, 7, correlation_id, {
        "replica_id": -1, "isolation_level": 0,
        "topics": [{"name": topic, "partitions": [{"partition_index": partition, "current_leader_epoch": -1,
                                                   "timestamp": -2}]}]})


def _produce(topic: str, partition: int, correlation_id: int) -> bytes:
    return request_frame(0, 9, correlation_id, {"transactional_id": None, "acks": 1, "timeout": 60000,
                                                "topic_data": [{"name": topic, "partition_data": [
                                                    {"index": partition, "records": build_batch(
                                                        [(b"k", b"v", 1_700_000_000_000)])}]}]})


def test_other_clients_are_answered_during_a_large_create_topics(broker: BrokerProcess) -> None:
    """As Kafka 4.4 (tests/kafka44/test_create_topics_then.py): CreateTopics of 1,000 partitions is
    answered once the topic is committed, Metadata at once lists every partition led, and a
    partition whose log is not made yet answers NOT_LEADER_OR_FOLLOWER (6) until it is; another
    client is answered while the partitions are being made."""
    with connect(broker.port, timeout=120) as a, connect(broker.port, timeout=120) as b:
        a.sendall(_create_topics("small", 1, 1))
        r: Any = response_of(recv_frame(a) or b"", 19, 7)
        assert [t.error_code for t in r.topics] == [0]

        # ListOffsets and Produce pipelined behind the CreateTopics: read right after the answer
        a.sendall(_create_topics("large", PARTITIONS, 2) + _list_offsets("large", PARTITIONS - 1, 3)
                  + _produce("large", PARTITIONS - 1, 7))
        created: Any = response_of(recv_frame(a) or b"", 19, 7)
        assert [(t.name, t.error_code, t.num_partitions) for t in created.topics] == [("large", 0, PARTITIONS)]
        early: Any = response_of(recv_frame(a) or b"", 2, 7)
        assert early.topics[0].partitions[0].error_code == 6     # NOT_LEADER_OR_FOLLOWER: being made
        # another client meanwhile: answered, and the topic is listed whole, every partition led
        b.sendall(request_frame(18, 3, 4, {"client_software_name": "t", "client_software_version": "1"}))
        versions: Any = response_of(recv_frame(b) or b"", 18, 3)
        assert versions.error_code == 0
        b.sendall(_metadata("large", 5))
        meta: Any = response_of(recv_frame(b) or b"", 3, 12)
        assert [(t.name, t.error_code, len(t.partitions)) for t in meta.topics] == [("large", 0, PARTITIONS)]
        assert {(p.error_code, p.leader_id) for p in meta.topics[0].partitions} == {(0, meta.brokers[0].node_id)}
        # the Produce waited for its partition: answered without an error (no retry of the client)
        produced: Any = response_of(recv_frame(a) or b"", 0, 9)
        assert [(p.error_code, p.base_offset) for p in produced.responses[0].partition_responses] == [(0, 0)]
        # the partition is made soon after, and answers its offset
        deadline = time.monotonic() + 120
        while True:
            b.sendall(_list_offsets("large", PARTITIONS - 1, 6))
            later: Any = response_of(recv_frame(b) or b"", 2, 7)
            part = later.topics[0].partitions[0]
            if part.error_code != 6 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert (part.error_code, part.offset) == (0, 0)      # (EARLIEST: the record produced is at 0)
