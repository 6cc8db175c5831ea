"""``kafkalog dump --offsets-decoder`` / ``--transaction-log-decoder`` / ``--share-group-state-decoder``
(kafka-dump-log.sh's options).

The record contents are written byte by byte from Kafka's message schemas here (not with kafkalog's
encoders) and the expected texts are those of Kafka's own ``DumpLogSegmentsTest``
(``testOffsetsMessageParser``, ``testTransactionLogMessageParser``); then a real data directory
with groups committed by the embedded consumer and a transaction's offsets is dumped whole."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import kafkalog
from kafkalog.coordinator.group_metadata import CONSUMER_OFFSETS_TOPIC, partition_for_group
from kafkalog.coordinator.transaction_log import TRANSACTION_STATE_TOPIC
from kafkalog.coordinator.transaction_log import partition_for as txn_partition_for
from kafkalog.log.naming import TopicPartition
from kafkalog.record import build_batch
from tests.cli.test_careless_paths import json_lines
from tests.cli.test_dump_log import run


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def s16(s: str) -> bytes:                   # int16-length string
    return i16(len(s)) + s.encode()


def cs(s: str) -> bytes:                    # compact string (flexible versions), short lengths only
    return bytes([len(s) + 1]) + s.encode()


def cbytes(b: bytes) -> bytes:
    return bytes([len(b) + 1]) + b


SUBSCRIPTION_V3 = (i16(3) + i32(1) + s16("foo") + i32(-1) + i32(1) + s16("foo") + i32(1) + i32(0) + i32(0)
                   + s16("rack"))
ASSIGNMENT_V3 = i16(3) + i32(1) + s16("foo") + i32(1) + i32(0) + i32(-1)


def group_metadata_v4(subscription: bytes, assignment: bytes) -> bytes:
    member = (cs("member") + cs("instance") + cs("client") + cs("host") + i32(1000) + i32(100)
              + cbytes(subscription) + cbytes(assignment) + b"\x00")
    return (i16(4) + cs("consumer") + i32(10) + cs("range") + cs("member") + i64(-1) + bytes([2]) + member
            + b"\x00")


GROUP_KEY = i16(2) + s16("group")
OFFSET_KEY = i16(1) + s16("g") + s16("t") + i32(3)
OFFSET_VALUE_V3 = i16(3) + i64(10) + i32(-1) + s16("") + i64(1700000000000)
OFFSET_VALUE_V1 = i16(1) + i64(7) + s16("meta") + i64(1700000000000) + i64(1700000600000)

TXN_KEY = i16(0) + s16("txnId")
TXN_VALUE_V0 = i16(0) + i64(123) + i16(0) + i32(0) + bytes([0]) + i32(0) + i64(0) + i64(0)
TXN_VALUE_V1 = (i16(1) + i64(12) + i16(2) + i32(14) + bytes([0])
                + bytes([3]) + cs("topic1") + bytes([4]) + i32(0) + i32(1) + i32(2) + b"\x00"
                + cs("topic2") + bytes([4]) + i32(3) + i32(4) + i32(5) + b"\x00"
                + i64(123) + i64(13)
                + bytes([2]) + bytes([0, 8]) + i64(11) + bytes([1, 8]) + i64(10))

KAFKA_GROUP_VALUE = (
    '{"version":"4","data":{"protocolType":"consumer","generation":10,"protocol":"range",'
    '"leader":"member","currentStateTimestamp":-1,"members":[{"memberId":"member",'
    '"groupInstanceId":"instance","clientId":"client","clientHost":"host",'
    '"rebalanceTimeout":1000,"sessionTimeout":100,"subscription":{"topics":["foo"],'
    '"userData":null,"ownedPartitions":[{"topic":"foo","partitions":[0]}],'
    '"generationId":0,"rackId":"rack"},"assignment":{"assignedPartitions":'
    '[{"topic":"foo","partitions":[0]}],"userData":null}}]}}')
KAFKA_GROUP_VALUE_MALFORMED = (
    '{"version":"4","data":{"protocolType":"consumer","generation":10,"protocol":"range",'
    '"leader":"member","currentStateTimestamp":-1,"members":[{"memberId":"member",'
    '"groupInstanceId":"instance","clientId":"client","clientHost":"host",'
    '"rebalanceTimeout":1000,"sessionTimeout":100,"subscription":"U3Vic2NyaXB0aW9u",'
    '"assignment":"QXNzaWdubWVudA=="}]}}')
# Kafka's DumpLogSegmentsTest expectations, with the status as Kafka 4.4 prints it
KAFKA_TXN_V0 = ('{"version":"0","data":{"producerId":123,"producerEpoch":0,"transactionTimeoutMs":0,'
                '"transactionStatus":"Empty","transactionPartitions":[],"transactionLastUpdateTimestampMs":0,'
                '"transactionStartTimestampMs":0}}')
KAFKA_TXN_V1 = ('{"version":"1","data":{"producerId":12,"previousProducerId":11,"nextProducerId":10,'
                '"producerEpoch":2,"transactionTimeoutMs":14,"transactionStatus":"Empty",'
                '"transactionPartitions":[{"topic":"topic1","partitionIds":[0,1,2]},'
                '{"topic":"topic2","partitionIds":[3,4,5]}],"transactionLastUpdateTimestampMs":123,'
                '"transactionStartTimestampMs":13}}')


def _segment(tmp_path: Path, records: list[tuple[bytes | None, bytes | None]]) -> Path:
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(build_batch([(k, v, 1000) for k, v in records]))
    return path


def _decoded(out: str) -> list[tuple[str | None, str | None]]:
    """(key, payload) texts of each record line."""
    got = []
    for line in out.splitlines():
        if not line.startswith("| offset:"):
            continue
        key = payload = None
        if " key: " in line:
            key = line.split(" key: ", 1)[1].split(" payload: ", 1)[0]
        if " payload: " in line:
            payload = line.split(" payload: ", 1)[1]
        got.append((key, payload))
    return got


def test_offsets_decoder_prints_what_kafka_prints(tmp_path: Path) -> None:
    path = _segment(tmp_path, [
        (GROUP_KEY, group_metadata_v4(SUBSCRIPTION_V3, ASSIGNMENT_V3)),
        (GROUP_KEY, group_metadata_v4(b"Subscription", b"Assignment")),
        (i16(32767), b""),
        (GROUP_KEY, None),
        (OFFSET_KEY, OFFSET_VALUE_V3),
        (OFFSET_KEY, OFFSET_VALUE_V1),
        (OFFSET_KEY, i16(3) + i64(1)),                  # cut short
    ])
    rc, out, err = run("--offsets-decoder", str(path))
    assert rc == 0, err
    group_key = '{"type":"2","data":{"group":"group"}}'
    offset_key = '{"type":"1","data":{"group":"g","topic":"t","partition":3}}'
    got = _decoded(out)
    assert got[:4] == [
        (group_key, KAFKA_GROUP_VALUE),
        (group_key, KAFKA_GROUP_VALUE_MALFORMED),
        ("Unknown record type 32767 at offset 2, skipping.", None),
        (group_key, "<DELETE>"),
    ]
    assert got[4] == (offset_key, '{"version":"3","data":{"offset":10,"leaderEpoch":-1,"metadata":"",'
                                  '"commitTimestamp":1700000000000}}')
    assert got[5] == (offset_key, '{"version":"1","data":{"offset":7,"metadata":"meta",'
                                  '"commitTimestamp":1700000000000,"expireTimestamp":1700000600000}}')
    assert got[6][0].startswith("Error at offset 6, skipping. OffsetCommitValue") and got[6][1] is None
    # JSON lines carry the same objects
    rc, out, _ = run("--offsets-decoder", "--format", "json", str(path))
    recs = [x for x in json_lines(out) if x["type"] == "record"]
    assert recs[0]["decodedKey"] == json.loads(group_key)
    assert recs[0]["decodedPayload"] == json.loads(KAFKA_GROUP_VALUE)
    assert recs[3]["decodedPayload"] == "<DELETE>"
    assert recs[2]["decodedKey"].startswith("Unknown record type") and recs[2]["decodedPayload"] is None


def test_transaction_log_decoder_prints_what_kafka_prints(tmp_path: Path) -> None:
    path = _segment(tmp_path, [(TXN_KEY, TXN_VALUE_V0), (TXN_KEY, None), (i16(32767), b""),
                               (TXN_KEY, TXN_VALUE_V1)])
    rc, out, err = run("--transaction-log-decoder", str(path))
    assert rc == 0, err
    key = '{"type":"0","data":{"transactionalId":"txnId"}}'
    assert _decoded(out) == [(key, KAFKA_TXN_V0), (key, "<DELETE>"),
                             ("Unknown record type 32767 at offset 2, skipping.", None), (key, KAFKA_TXN_V1)]


TOPIC_ID = bytes(range(16))                  # Kafka's Uuid, base64url: AAECAwQFBgcICQoLDA0ODw


def share_key(record_type: int) -> bytes:
    return i16(record_type) + s16("sg") + TOPIC_ID + i32(3)


def state_batch(first: int, last: int, state: int, count: int) -> bytes:
    return i64(first) + i64(last) + bytes([state]) + i16(count) + b"\x00"


def test_share_group_state_decoder_prints_what_kafka_prints(tmp_path: Path) -> None:
    """ShareSnapshotValue and ShareUpdateValue v0 (flexible; the delivery complete count a tagged
    field) as Kafka 4.4's DumpLogSegments --share-group-state-decoder printed them (the live
    comparison is tests/server/test_share_group_persistence.py)."""
    snapshot = (i16(0) + i32(0) + i32(2) + i32(0) + i64(-1) + i64(1700) + i64(1701) + bytes([1]) + b"\x00")
    update = (i16(0) + i32(0) + i32(0) + i64(0) + bytes([3]) + state_batch(0, 1, 2, 1) + state_batch(2, 2, 0, 1)
              + b"\x01" + b"\x00" + b"\x04" + i32(3))
    path = _segment(tmp_path, [(share_key(0), snapshot), (share_key(1), update), (share_key(0), None),
                               (i16(9), b"")])
    rc, out, err = run("--share-group-state-decoder", str(path))
    assert rc == 0, err
    key = '{"type":"%d","data":{"groupId":"sg","topicId":"AAECAwQFBgcICQoLDA0ODw","partition":3}}'
    assert _decoded(out) == [
        (key % 0, '{"version":"0","data":{"snapshotEpoch":0,"stateEpoch":2,"leaderEpoch":0,"startOffset":-1,'
                  '"createTimestamp":1700,"writeTimestamp":1701,"stateBatches":[]}}'),
        (key % 1, '{"version":"0","data":{"snapshotEpoch":0,"leaderEpoch":0,"startOffset":0,'
                  '"deliveryCompleteCount":3,"stateBatches":[{"firstOffset":0,"lastOffset":1,"deliveryState":2,'
                  '"deliveryCount":1},{"firstOffset":2,"lastOffset":2,"deliveryState":0,"deliveryCount":1}]}}'),
        (key % 0, "<DELETE>"),
        ("Unknown record type 9 at offset 3, skipping.", None)]


def test_a_record_without_key_is_an_error_and_decoders_are_exclusive(tmp_path: Path) -> None:
    path = _segment(tmp_path, [(None, b"x")])
    rc, out, err = run("--offsets-decoder", str(path))
    assert rc == 1
    assert ("Failed to decode message at offset 0 using the specified decoder (message had a missing key)"
            in err)
    rc, out, err = run("--offsets-decoder", "--transaction-log-decoder", str(path))
    assert rc == 2 and "one of --offsets-decoder, --transaction-log-decoder" in err
    rc, out, err = run("--share-group-state-decoder", "--transaction-log-decoder", str(path))
    assert rc == 2 and "--share-group-state-decoder" in err


def test_a_data_directorys_coordinator_topics(tmp_path: Path) -> None:
    """Offsets committed by the embedded consumer and in a transaction, and the transaction's state,
    dumped from the partition directories Kafka would have written them to."""
    d = tmp_path / "data"
    with kafkalog.open(d, {"transaction.state.log.num.partitions": 2}, background=False) as dl:
        dl.create_topic("t", 1)
        dl.produce("t", b"x")
        c = dl.consumer("t", group_id="billing", enable_auto_commit=False)
        c.commit({TopicPartition("t", 0): 1})
        p = dl.producer(transactional_id="tx")
        p.init_transactions()
        p.begin_transaction()
        p.send_offsets_to_transaction({TopicPartition("t", 0): (1, "txn")}, c.group_metadata())
        p.commit_transaction()
        p.close()
        c.close()
    offsets_dir = d / f"{CONSUMER_OFFSETS_TOPIC}-{partition_for_group('billing')}"
    rc, out, err = run("--offsets-decoder", str(offsets_dir))
    assert rc == 0, err
    key = '{"type":"1","data":{"group":"billing","topic":"t","partition":0}}'
    decoded = [kv for kv in _decoded(out) if kv[0] is not None]
    assert [k for k, _ in decoded] == [key, key]
    assert [json.loads(v)["data"]["metadata"] for _, v in decoded] == ["", "txn"]
    assert "endTxnMarker: COMMIT coordinatorEpoch: 0" in out            # markers are not decoded
    txn_dir = d / f"{TRANSACTION_STATE_TOPIC}-{txn_partition_for('tx', 2)}"
    rc, out, err = run("--transaction-log-decoder", "--format", "json", str(txn_dir))
    assert rc == 0, err
    states = [r["decodedPayload"]["data"] for r in json_lines(out) if r["type"] == "record"]
    assert {r["decodedKey"]["data"]["transactionalId"] for r in json_lines(out) if r["type"] == "record"} == {"tx"}
    # Kafka 4.4 prints the status by name (its DumpLogSegmentsTest of 3.x printed the number)
    assert [s["transactionStatus"] for s in states] == ["Empty", "Ongoing", "PrepareCommit", "CompleteCommit"]
    assert states[1]["transactionPartitions"] == [{"topic": CONSUMER_OFFSETS_TOPIC,
                                                   "partitionIds": [partition_for_group("billing")]}]
