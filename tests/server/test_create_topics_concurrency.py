"""A large CreateTopics does not hold the event loop (issue 35): its partitions are made on a
worker thread, so another client's requests are answered while the creation is under way.

No timing is asserted: the test checks an order. Connection A asks for one topic of 1,000
partitions (seconds of file creation on any machine); once the broker has started on it, connection
B asks ApiVersions and Metadata for a topic that exists, and both are answered while A's answer has
not arrived yet. When the partitions were made on the event loop (the previous main), B's answers
came only after A's: the test failed there."""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

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


def test_other_clients_are_answered_during_a_large_create_topics(broker: BrokerProcess) -> None:
    with connect(broker.port, timeout=120) as a, connect(broker.port, timeout=120) as b:
        a.sendall(_create_topics("small", 1, 1))
        r: Any = response_of(recv_frame(a) or b"", 19, 7)
        assert [t.error_code for t in r.topics] == [0]

        a.sendall(_create_topics("large", PARTITIONS, 2))
        time.sleep(0.2)                     # the broker has read A's request and is creating
        b.sendall(request_frame(18, 3, 3, {"client_software_name": "t", "client_software_version": "1"}))
        versions: Any = response_of(recv_frame(b) or b"", 18, 3)
        assert versions.error_code == 0
        b.sendall(_metadata("small", 4))
        meta: Any = response_of(recv_frame(b) or b"", 3, 12)
        assert [(t.name, t.error_code, len(t.partitions)) for t in meta.topics] == [("small", 0, 1)]
        # B had both answers while A's creation was still going on
        assert not _answered(a), "CreateTopics was answered before another client's ApiVersions: " \
                                 "the creation held the event loop"

        created: Any = response_of(recv_frame(a) or b"", 19, 7)
        assert [(t.name, t.error_code, t.num_partitions) for t in created.topics] == [("large", 0, PARTITIONS)]
        # and the topic is seen whole once answered
        b.sendall(_metadata("large", 5))
        meta = response_of(recv_frame(b) or b"", 3, 12)
        assert [(t.name, t.error_code, len(t.partitions)) for t in meta.topics] == [("large", 0, PARTITIONS)]
