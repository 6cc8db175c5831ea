"""The kio classes built from Kafka 4.4's JSON message schemas
(kafkalog.server.requests.message_schemas): built for the versions kio ships, they are kio's own
classes field for field (names, Kafka types, defaults, nesting) and write the same bytes, so the
rules that build the versions kio lacks are kio's generator's. The versions kio lacks (the streams
group APIs' v1) read what they write, and their requests go through the bounds walk: a hostile
count in a v1 request is refused before kio reads it (the walk over every served version is in
test_request_bounds.py)."""

from __future__ import annotations

import io
import typing
from dataclasses import MISSING, fields
from typing import Any

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from kafkalog.errors import RequestBoundsError, SchemaCompileError
from kafkalog.server.handlers.kafka_apis import VERSIONS
from kafkalog.server.requests.kio_build import _nested_type, build
from kafkalog.server.requests.message_schemas import (
    EXTRA_SCHEMAS,
    message_classes,
    request_schema,
    response_schema,
)
from kafkalog.server.requests.protocol import parse_request
from tests.server.raw import request_frame

#: Kafka 4.4 renamed v0's 32-bit AcceptableRecoveryLag (kio's name) to AcceptableRecoveryLagLegacy
RENAMED = {"acceptable_recovery_lag_legacy": "acceptable_recovery_lag"}


def _same_class(built: type, kio: type, path: str) -> int:
    """Asserts ``built`` is kio's class field for field; the number of fields compared."""
    bf, kf = fields(built), fields(kio)
    assert [RENAMED.get(f.name, f.name) for f in bf] == [f.name for f in kf], path
    bh, kh = typing.get_type_hints(built), typing.get_type_hints(kio)
    n = 0
    for b, k in zip(bf, kf, strict=True):
        where = f"{path}.{k.name}"
        assert dict(b.metadata) == dict(k.metadata), where
        assert (b.default is MISSING) == (k.default is MISSING) and (b.default == k.default or
                                                                      b.default is MISSING), where
        bn, kn = _nested_type(bh[b.name]), _nested_type(kh[k.name])
        assert (bn is None) == (kn is None), where
        if bn is not None:
            n += _same_class(bn, kn, where)
        elif b.name not in RENAMED:
            assert bh[b.name] == kh[k.name], where
        n += 1
    for attr in ("__version__", "__flexible__", "__api_key__", "__header_schema__", "__type__"):
        assert getattr(built, attr) == getattr(kio, attr), (path, attr)
    return n


@pytest.mark.parametrize("key", sorted(EXTRA_SCHEMAS))
def test_built_v0_is_kios_v0(key: int) -> None:
    name = EXTRA_SCHEMAS[key]
    n = _same_class(message_classes(f"{name}Request.json", 0), load_request_schema(key, 0), name + "Request")
    n += _same_class(message_classes(f"{name}Response.json", 0), load_response_schema(key, 0), name + "Response")
    assert n > 30


def _heartbeat_values() -> dict[str, Any]:
    return {"group_id": "g", "member_id": "m", "member_epoch": 0, "endpoint_information_epoch": 0,
            "instance_id": "i", "rack_id": None, "rebalance_timeout": 30000,
            "topology": {"epoch": 1, "subtopologies": [{
                "subtopology_id": "0", "source_topics": ["t"], "source_topic_regex": [],
                "state_changelog_topics": [{"name": "c", "partitions": 0, "replication_factor": 0,
                                            "topic_configs": [{"key": "k", "value": "v"}]}],
                "repartition_sink_topics": [], "repartition_source_topics": [], "copartition_groups": []}]},
            "active_tasks": [{"subtopology_id": "0", "partitions": [0, 2]}], "standby_tasks": [],
            "warmup_tasks": None, "process_id": "p", "user_endpoint": {"host": "h", "port": 9},
            "client_tags": [{"key": "zone", "value": "a"}],
            "task_offsets": [{"subtopology_id": "0", "partition": 1, "offset": 7}], "task_end_offsets": None,
            "shutdown_application": True}


def _bytes(cls: type, values: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    entity_writer(cls)(buf, build(cls, values))
    return buf.getvalue()


def test_built_v0_writes_kios_bytes_and_v1_reads_what_it_writes() -> None:
    values = _heartbeat_values()
    built0 = message_classes("StreamsGroupHeartbeatRequest.json", 0)
    assert _bytes(built0, values) == _bytes(load_request_schema(88, 0), values)
    # v1 of the request is v0's fields (Kafka bumped it with the response)
    v1 = request_schema(88, 1)
    data = _bytes(v1, values)
    assert data == _bytes(built0, values)
    assert entity_reader(v1)(data, 0)[0] == build(v1, values)
    # the response's v1: AcceptableRecoveryLag is 64-bit, TopologyDescriptionRequired is new
    r1 = response_schema(88, 1)
    resp = {"throttle_time": 0, "error_code": 0, "member_id": "m", "member_epoch": 3, "heartbeat_interval": 5000,
            "acceptable_recovery_lag": 1 << 40, "task_offset_interval": 60000, "status": [],
            "active_tasks": None, "standby_tasks": None, "warmup_tasks": None,
            "topology_description_required": True, "endpoint_information_epoch": 0,
            "partitions_by_user_endpoint": None}
    decoded = entity_reader(r1)(_bytes(r1, resp), 0)[0]
    assert (decoded.acceptable_recovery_lag, decoded.topology_description_required) == (1 << 40, True)
    # the describe's v1: the request's new flag and the group's assignor name
    d1 = request_schema(89, 1)
    req = {"group_ids": ["g"], "include_authorized_operations": False, "include_topology_description": True}
    assert entity_reader(d1)(_bytes(d1, req), 0)[0].include_topology_description is True
    assert {f.name for f in fields(response_schema(89, 1))} == {"throttle_time", "groups"}


def test_versions_the_schemas_lack_are_refused() -> None:
    with pytest.raises(SchemaCompileError, match="StreamsGroupHeartbeatRequest has no version 2"):
        message_classes("StreamsGroupHeartbeatRequest.json", 2)
    assert VERSIONS[88] == (0, 1) and VERSIONS[89] == (0, 1)


def test_a_hostile_count_in_a_v1_request_is_refused_before_kio() -> None:
    frame = bytearray(request_frame(88, 1, 7, _heartbeat_values()))[4:]
    body = bytes(frame)
    # the group id's compact length (after the v2 header: key, version, correlation id, client id, tags)
    at = 2 + 2 + 4 + 2 + len("raw") + 1
    assert body[at] == len("g") + 1
    hostile = body[:at] + b"\xff\xff\xff\xff\x0f" + body[at + 1:]
    with pytest.raises(RequestBoundsError) as e:
        parse_request(hostile, VERSIONS)
    assert "apiKey: StreamsGroupHeartbeat, apiVersion: 1" in str(e.value)
    assert parse_request(body, VERSIONS).body.group_id == "g"
