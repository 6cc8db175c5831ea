"""The Metadata response's topics written by hand (:mod:`kafkalog.server.requests.metadata_wire`, issue 35:
kio built 10,000 partition entities for a Metadata of every topic) are byte for byte kio's encoding
of the same response, in every version the broker serves (v0-v13): led topics with leader epochs,
an internal topic, error entries (a null name and a topic ID from v12), with and without authorized
operations. What a client sees of the same bytes from a running broker is compared with Kafka 4.4
in tests/server/test_differential.py."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kio.index import load_response_schema

from kafkalog.server.requests import metadata_wire
from kafkalog.server.requests.kio_build import build
from kafkalog.server.requests.protocol import Request, encode_response

NODE = 3
TOPICS: list[dict[str, Any]] = [
    {"error_code": 0, "name": "orders", "topic_id": uuid.UUID(int=0x1234), "is_internal": False,
     "epochs": [(0, 0), (1, 5), (2, 70000)], "topic_authorized_operations": -2147483648},
    {"error_code": 0, "name": "__consumer_offsets", "topic_id": uuid.UUID(int=99), "is_internal": True,
     "epochs": [(p, 0) for p in range(50)], "topic_authorized_operations": 0x7f8},
    {"error_code": 3, "name": "missing", "topic_id": None, "is_internal": False, "epochs": None,
     "topic_authorized_operations": -2147483648},
    {"error_code": 100, "name": None, "topic_id": uuid.UUID(int=7), "is_internal": False, "epochs": None,
     "topic_authorized_operations": -2147483648},
]


def _values(version: int, topics: list[dict[str, Any]]) -> dict[str, Any]:
    return {"throttle_time": 0, "brokers": [{"node_id": NODE, "host": "h.example", "port": 9092, "rack": None}],
            "cluster_id": "cluster-x", "controller_id": NODE, "topics": topics,
            "cluster_authorized_operations": 0x5a, "error_code": 0}


def _kio_topic(t: dict[str, Any]) -> dict[str, Any]:
    parts = [{"error_code": 0, "partition_index": p, "leader_id": NODE, "leader_epoch": e,
              "replica_nodes": [NODE], "isr_nodes": [NODE], "offline_replicas": []}
             for p, e in t["epochs"] or []]
    return {k: v for k, v in t.items() if k != "epochs"} | {"partitions": parts}


@pytest.mark.parametrize("version", range(14))
def test_topics_written_by_hand_are_kios_bytes(version: int) -> None:
    topics = [t for t in TOPICS if version >= 12 or t["name"] is not None]
    request = Request(3, version, 41, "c", None, version >= 9, 0)
    schema = load_response_schema(3, version)
    expected = encode_response(request, build(schema, _values(version, [_kio_topic(t) for t in topics])))
    without = encode_response(request, build(schema, _values(version, [])))
    written = [metadata_wire.topic_entry(
        version, t["error_code"], t["name"], t["topic_id"], t["is_internal"],
        metadata_wire.partitions_entry(version, NODE, t["epochs"]) if t["epochs"] is not None else None,
        t["topic_authorized_operations"]) for t in topics]
    assert metadata_wire.splice_topics(version, without, written) == expected
    assert metadata_wire.splice_topics(version, without, []) == without
