"""The request controls (``server/handlers/request_control.py``, kfake's ``ControlKey``) and Kafka's error
responses (``server/handlers/error_responses.py``) from outside: requests written by kio's encoder over a
real socket to a broker with a fault armed, their answers decoded by kio."""

from __future__ import annotations

import dataclasses
import socket
import struct
import typing
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import kafkalog.testing
from kafkalog.server.handlers.kafka_apis import APIS, HANDLERS, VERSIONS
from kafkalog.server.requests.kio_build import _nested_type
from kafkalog.server.requests.message_schemas import request_schema as load_request_schema
from kafkalog.testing import LocalBroker
from tests.server.raw import answers_api_versions, connect, recv_frame, request_frame, response_of

NOT_ENOUGH_REPLICAS = 19
#: the error fields of Kafka's responses
ERROR_FIELDS = ("error_code", "partition_error_code")


@pytest.fixture(scope="module")
def broker() -> Iterator[LocalBroker]:
    with kafkalog.testing.broker() as b:
        yield b


def _sample_value(name: str, kafka_type: str, hint: Any) -> Any:
    """A value for one request field: one element in every list, names and ids that parse."""
    nested = _nested_type(hint)
    if nested is not None:
        one = _sample(nested)
        return [one] if typing.get_origin(hint) is tuple or "tuple" in str(hint) else one
    if typing.get_origin(hint) is tuple:
        return [_sample_value(name, kafka_type, typing.get_args(hint)[0])]
    arrays = [a for a in typing.get_args(hint) if typing.get_origin(a) is tuple]     # a nullable array
    if arrays:
        return [_sample_value(name, kafka_type, typing.get_args(arrays[0])[0])]
    if name == "acks":
        return -1
    if kafka_type == "string":
        return "t"
    if kafka_type == "uuid":
        return uuid.UUID(int=7)
    if kafka_type in ("bytes", "records"):
        return b""
    if kafka_type == "bool":
        return False
    if kafka_type == "int8" and name == "key_type":
        return 0
    return 1


def _sample(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: _sample_value(f.name, f.metadata.get("kafka_type", ""), hints[f.name])
            for f in dataclasses.fields(cls)}


def _errors(entity: Any) -> list[int]:
    """Every error code in a decoded response, nested ones too."""
    out: list[int] = []
    if dataclasses.is_dataclass(entity):
        for f in dataclasses.fields(entity):
            value = getattr(entity, f.name)
            if f.name in ERROR_FIELDS:
                out.append(int(value))
            else:
                out += _errors(value)
    elif isinstance(entity, tuple):
        for v in entity:
            out += _errors(v)
    return out


def _exchange(s: socket.socket, api_key: int, version: int, correlation_id: int) -> Any:
    values = _sample(load_request_schema(api_key, version))
    s.sendall(request_frame(api_key, version, correlation_id, values))
    frame = recv_frame(s)
    assert frame is not None, f"{APIS[api_key][0]} v{version}: connection closed"
    assert struct.unpack_from(">i", frame)[0] == correlation_id
    return response_of(frame, api_key, version)


@pytest.mark.parametrize("api_key", sorted(VERSIONS), ids=lambda k: APIS[k][0])
def test_every_version_of_every_api_fails_with_kafkas_error_response(broker: LocalBroker, api_key: int) -> None:
    lo, hi = VERSIONS[api_key]
    fault = broker.fail(api_key, NOT_ENOUGH_REPLICAS, count=None)
    try:
        with connect(broker.port) as s:
            for version in range(lo, hi + 1):
                if api_key == 65:   # DescribeTransactions: kio refuses to read Kafka's -1 start time
                    s.sendall(request_frame(api_key, version, 1000 + version,
                                            _sample(load_request_schema(api_key, version))))
                    frame = recv_frame(s) or b""
                    # header v1 (id, no tags), throttle, one state (compact length 2), its error
                    assert struct.unpack_from(">ibib", frame) == (1000 + version, 0, 0, 2), frame
                    assert struct.unpack_from(">h", frame, 10)[0] == NOT_ENOUGH_REPLICAS, frame
                    continue
                response = _exchange(s, api_key, version, 1000 + version)
                errors = _errors(response)
                # every error where Kafka puts one is the fault's (Metadata v13's top-level code
                # stays 0, as in Kafka's getErrorResponse, beside the topics' errors)
                if api_key == 35 and version < 3:   # DescribeLogDirs v0-v2: no error field (Kafka's answer is empty)
                    assert errors == [] and response.results == (), response
                    continue
                assert NOT_ENOUGH_REPLICAS in errors, (APIS[api_key][0], version, response)
                assert set(errors) <= {0, NOT_ENOUGH_REPLICAS}, (APIS[api_key][0], version, response)
        assert fault.taken == hi - lo + 1
    finally:
        fault.cancel()


def test_the_answer_names_what_the_request_named(broker: LocalBroker) -> None:
    """Produce, ListOffsets, OffsetCommit and FindCoordinator answer for each topic, partition and
    key asked, as Kafka's getErrorResponse; Fetch v13+ only at the top, with no partitions."""
    with broker.fail("Produce", "NOT_ENOUGH_REPLICAS", count=None), connect(broker.port) as s:
        s.sendall(request_frame(0, 9, 1, {"transactional_id": None, "acks": 1, "timeout": 1000, "topic_data": [
            {"name": "a", "partition_data": [{"index": 3, "records": b""}, {"index": 5, "records": b""}]},
            {"name": "b", "partition_data": [{"index": 0, "records": b""}]}]}))
        r: Any = response_of(recv_frame(s) or b"", 0, 9)
        got = [(t.name, p.index, int(p.error_code), p.base_offset) for t in r.responses for p in t.partition_responses]
        assert got == [("a", 3, 19, -1), ("a", 5, 19, -1), ("b", 0, 19, -1)]
    with broker.fail("FindCoordinator", "COORDINATOR_NOT_AVAILABLE", count=None), connect(broker.port) as s:
        s.sendall(request_frame(10, 4, 2, {"key_type": 0, "coordinator_keys": ["g1", "g2"]}))
        r = response_of(recv_frame(s) or b"", 10, 4)
        assert [(c.key, int(c.error_code), c.node_id, c.port) for c in r.coordinators] == \
            [("g1", 15, -1, -1), ("g2", 15, -1, -1)]
    with broker.fail("Fetch", "UNKNOWN_SERVER_ERROR", count=None), connect(broker.port) as s:
        from tests.server.raw import fetch_frame, fetch_response
        s.sendall(fetch_frame(12, 3, [("a", [(0, 0, 1000)])]))
        r = fetch_response(recv_frame(s) or b"", 12)
        assert int(r.error_code) == -1 and [int(p.error_code) for t in r.responses for p in t.partitions] == [-1]
        s.sendall(fetch_frame(13, 4, [(uuid.UUID(int=9), [(0, 0, 1000)])]))
        r = fetch_response(recv_frame(s) or b"", 13)
        assert int(r.error_code) == -1 and r.responses == ()


def test_a_produce_with_acks_0_has_its_connection_closed(broker: LocalBroker) -> None:
    """Kafka's only way to tell a producer that wants no answer: the connection closes."""
    with broker.fail("Produce", "NOT_ENOUGH_REPLICAS"), connect(broker.port) as s:
        s.sendall(request_frame(0, 9, 1, {"transactional_id": None, "acks": 0, "timeout": 1000, "topic_data": [
            {"name": "a", "partition_data": [{"index": 0, "records": b""}]}]}))
        assert recv_frame(s) is None
    assert answers_api_versions(broker.port)


def test_count_client_id_and_order_pick_the_requests(broker: LocalBroker) -> None:
    """The next ``count`` requests of the API only; ``client_id`` picks by the request header's
    client id; two faults of one API take requests in the order they were armed."""
    first = broker.fail("ApiVersions", "CLUSTER_AUTHORIZATION_FAILED", count=2)
    second = broker.fail("ApiVersions", "UNSUPPORTED_VERSION", count=1)
    other = broker.fail("ApiVersions", "REQUEST_TIMED_OUT", count=None, client_id="someone-else")
    try:
        with connect(broker.port) as s:
            codes = []
            for i in range(4):
                s.sendall(request_frame(18, 3, i, {"client_software_name": "t", "client_software_version": "1"}))
                codes.append(int(struct.unpack_from(">h", recv_frame(s) or b"", 4)[0]))
        assert codes == [31, 31, 35, 0]
        assert (first.taken, second.taken, other.taken) == (2, 1, 0)
        assert first.done and second.done and not other.done
    finally:
        other.cancel()


def test_no_control_armed_means_the_apis_own_handlers(broker: LocalBroker) -> None:
    """Zero cost unarmed: the dispatch table holds the APIs' own handlers, the very objects of
    ``apis.HANDLERS``, before a fault, and again once its last request was taken or it was
    cancelled (the hot paths never see a control)."""
    runtime = _runtime(broker)

    def table() -> dict[int, Any]:
        return {k: runtime.server.apis.handler(k) for k in HANDLERS}

    assert all(table()[k] is HANDLERS[k] for k in HANDLERS)
    fault = broker.delay("Metadata", 0.01, count=1)
    assert table()[3] is not HANDLERS[3] and table()[0] is HANDLERS[0] and table()[1] is HANDLERS[1]
    held = broker.hold("Produce", count=None)
    assert table()[0] is not HANDLERS[0]
    held.cancel()
    fault.cancel()
    assert all(table()[k] is HANDLERS[k] for k in HANDLERS)


def _runtime(broker: LocalBroker) -> Any:
    """The runtime of a thread broker (white box: the zero-cost check)."""
    runner: Any = broker._runner
    return runner._runtime
