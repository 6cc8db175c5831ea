"""Right after CreateTopics is answered, side by side with Kafka 4.4 (issue 35): Kafka's controller
answers once the topic's records are committed and its broker makes the partitions' logs
afterwards; kafkalog does the same. A ListOffsets pipelined behind the CreateTopics (read as soon
as the answer is written) and a Metadata after it, then ListOffsets until the partition answers:

- Kafka 4.4: the ListOffsets is NOT_LEADER_OR_FOLLOWER (the topic is in its metadata, the replica
  not made yet), or UNKNOWN_TOPIC_OR_PARTITION if its broker has not applied the records yet; the
  Metadata lists every partition led (or the topic unknown, for the same reason); then offset 0;
- kafkalog: the ListOffsets is NOT_LEADER_OR_FOLLOWER, Metadata lists every partition led, then
  offset 0. Before (kafkalog answered once every partition was made) the first ListOffsets was
  offset 0 already: the test failed there."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests import kafka44
from tests.server.broker_process import BrokerProcess
from tests.server.raw import connect, recv_frame, request_frame, response_of

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PARTITIONS = 3000
NOT_LEADER_OR_FOLLOWER = 6
UNKNOWN_TOPIC_OR_PARTITION = 3


def _list_offsets(topic: str, partition: int, correlation_id: int) -> bytes:
    return request_frame(2, 7, correlation_id, {
        "replica_id": -1, "isolation_level": 0,
        "topics": [{"name": topic, "partitions": [{"partition_index": partition, "current_leader_epoch": -1,
                                                   "timestamp": -2}]}]})


def _run(port: int, topic: str) -> dict[str, Any]:
    with connect(port, timeout=300) as s:
        s.sendall(request_frame(19, 7, 1, {
            "topics": [{"name": topic, "num_partitions": PARTITIONS, "replication_factor": 1,
                        "assignments": [], "configs": []}], "timeout": 300000, "validate_only": False})
                  + _list_offsets(topic, PARTITIONS - 1, 2)
                  + request_frame(3, 12, 3, {"topics": [{"topic_id": None, "name": topic}],
                                             "allow_auto_topic_creation": False,
                                             "include_topic_authorized_operations": False}))
        created: Any = response_of(recv_frame(s) or b"", 19, 7)
        first: Any = response_of(recv_frame(s) or b"", 2, 7)
        meta: Any = response_of(recv_frame(s) or b"", 3, 12)
        deadline = time.monotonic() + 300
        while True:
            s.sendall(_list_offsets(topic, PARTITIONS - 1, 4))
            last = response_of(recv_frame(s) or b"", 2, 7).topics[0].partitions[0]  # type: ignore[attr-defined]
            if last.error_code == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    t = meta.topics[0]
    return {"created": [(c.error_code, c.num_partitions) for c in created.topics],
            "first": int(first.topics[0].partitions[0].error_code),
            "metadata": (int(t.error_code), len(t.partitions),
                         {(int(p.error_code), p.leader_id >= 0) for p in t.partitions}),
            "then": (int(last.error_code), last.offset)}


def test_partitions_are_made_after_create_topics_is_answered(
        kafka_pair: tuple[kafka44.KafkaBroker, BrokerProcess]) -> None:
    kafka_broker, ours_broker = kafka_pair
    kafka = _run(kafka_broker.port, "then-kafka")
    ours = _run(ours_broker.port, "then-ours")
    for got in (kafka, ours):
        assert got["created"] == [(0, PARTITIONS)]
        assert got["then"] == (0, 0)
    assert kafka["first"] in (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION), kafka
    assert kafka["metadata"] in ((0, PARTITIONS, {(0, True)}), (UNKNOWN_TOPIC_OR_PARTITION, 0, set())), kafka
    assert ours["first"] == NOT_LEADER_OR_FOLLOWER, ours
    assert ours["metadata"] == (0, PARTITIONS, {(0, True)}), ours
