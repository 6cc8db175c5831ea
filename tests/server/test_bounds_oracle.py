"""Kafka 4.4 is the reference for what a request that breaks a bound gets (issue 23): the same
frames go to a real Kafka 4.4 broker and to ``kafkalog serve``, and both close the connection
without an answer (the 131-byte frame, a count beyond the frame, Kafka's array and tagged-field
limits, a long string, null in a non-nullable array), or both answer INVALID_REQUEST (a Metadata
topic without a name before v12). After each, both serve a fresh client. Two differences are held
as documented (docs/kafka-compatibility.md): a negative length other than -1 is null to Kafka,
and refused by kafkalog (kio cannot read it); a request of more than 1,000,000 array elements in
all (each array within Kafka's limit) is answered by Kafka and refused by kafkalog."""

from __future__ import annotations

import struct
from collections.abc import Iterator

import pytest

from tests import kafka44
from tests.server.broker_process import BrokerProcess
from tests.server.raw import answers_api_versions, connect, recv_frame, response_of
from tests.server.request_wire import request_header, uvarint
from tests.server.test_request_bounds import ISSUE_FRAME


def _frame(key: int, version: int, body: bytes) -> bytes:
    data = request_header(key, version, 9) + body
    return struct.pack(">i", len(data)) + data


#: name -> (frame, what Kafka 4.4 does: "closed", or the error code of the answer's first topic
#: (None: no topic), what kafkalog does when it differs)
CASES: dict[str, tuple[bytes, object] | tuple[bytes, object, object]] = {
    "issue 23's frame": (ISSUE_FRAME, "closed"),
    # Metadata v4 (topics: a nullable [int32] array of {name}), allow_auto_topic_creation
    "array count beyond the frame": (_frame(3, 4, struct.pack(">i", 2**31 - 1) + b"\x00\x00\x01"),
                                     "closed"),
    "array of 1,000,001 elements": (_frame(3, 4, struct.pack(">i", 1_000_001) + b"\x00\x00" *
                                           1_000_001 + b"\x00"), "closed"),
    "negative array count": (_frame(3, 4, struct.pack(">i", -7) + b"\x00"), None, "closed"),
    # OffsetFetch v1: group "g", two topics of 600,000 partition ids each
    "1,200,000 elements in all": (_frame(9, 1, b"\x00\x01g" + struct.pack(">i", 2) + 2 * (
        b"\x00\x01t" + struct.pack(">i", 600_000) + b"\x00\x00\x00\x01" * 600_000)),
        "answered", "closed"),
    # ApiVersions v3: client software name and version, then the tagged fields
    "tagged fields beyond the frame": (_frame(18, 3, b"\x02a\x02b" + uvarint(50)), "closed"),
    "10,001 tagged fields": (_frame(18, 3, b"\x02a\x02b" + uvarint(10_001) + b"\x07\x00" * 10_001),
                             "closed"),
    # OffsetFetch v8: groups is not nullable; group_id a compact string
    "null non-nullable array": (_frame(9, 8, b"\x00\x00\x00"), "closed"),
    "string longer than 0x7fff": (_frame(9, 8, b"\x02" + uvarint(0x8001) + b"g" * 0x8000 +
                                         b"\x01\x00\x00\x00"), "closed"),
    # SaslAuthenticate v2 (a PLAINTEXT listener answers it; its bytes run past the frame here)
    "bytes beyond the frame": (_frame(36, 2, uvarint(1001) + b"abc"), "closed"),
    # Metadata v10: one topic, null name (compact string 0), zero topic ID, no tags; then the
    # two booleans and the request's tags
    "Metadata v10 topic without a name": (_frame(3, 10, b"\x02" + bytes(16) + b"\x00\x00" +
                                                 b"\x00\x00\x00\x00"), 42),
}


def _verdict(port: int, frame: bytes) -> object:
    """"closed", "answered", or the error code of the first topic of a Metadata answer (None: no
    topic)."""
    with connect(port, timeout=60) as s:
        s.sendall(frame)
        try:
            response = recv_frame(s)
        except ConnectionResetError:
            return "closed"
    if response is None:
        return "closed"
    key, version = struct.unpack_from(">hh", frame, 4)
    if key != 3:
        return "answered"
    topics = response_of(response, key, version).topics       # type: ignore[attr-defined]
    return topics[0].error_code.value if topics else None


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(str(tmp_path_factory.mktemp("bounds-oracle") / "data")).start()
    try:
        yield b
    finally:
        assert b.stop() == 0, b.stderr()[-5000:]


@pytest.mark.parametrize("case", list(CASES))
def test_kafkalog_does_what_kafka44_does(case: str, kafka44_broker: kafka44.KafkaBroker,
                                          ours: BrokerProcess) -> None:
    frame, expected, *differs = CASES[case]
    theirs = _verdict(kafka44_broker.port, frame)
    assert theirs == expected, f"Kafka 4.4: {theirs}"
    assert _verdict(ours.port, frame) == (differs[0] if differs else theirs)
    assert answers_api_versions(kafka44_broker.port)
    assert answers_api_versions(ours.port)
    log = ours.stderr()
    assert "Traceback" not in log, log[-5000:]
