"""Records only Kafka 4 writes, dumped as Kafka 4.4's DumpLogSegments dumps them: the bytes below are
what a Kafka 4.4 broker wrote in the workload of ``tests/kafka44/workload.py`` (a KIP-848 consumer
group, a classic group's offset commits of version 4 with their topic ID, KRaft's control records in
``__cluster_metadata``), the expected texts what its DumpLogSegments printed for them. The
``tests/kafka44`` comparisons check the same against a live Kafka; these hold without a JVM."""

from __future__ import annotations

from pathlib import Path

from kafkalog.record import build_batch
from tests.cli.test_dump_decoders import _decoded
from tests.cli.test_dump_log import run

MEMBER_KEY = "000e636f6e73756d65722d67726f7570001671704874482f6e64537a6176516f75524d7075697441"
GROUP_KEY = "000e636f6e73756d65722d67726f7570"
#: (key hex, value hex or None, what DumpLogSegments --offsets-decoder printed as key / payload)
OFFSETS_RECORDS = [
    ("0001000d636c61737369632d67726f757000096c6f67617070656e6400000000",
     "000400000000000000190000000001000001a21b79e0cc0100100397cac5aaad408b8ab08310fc000ae4",
     '{"type":"1","data":{"group":"classic-group","topic":"logappend","partition":0}}',
     '{"version":"4","data":{"offset":25,"leaderEpoch":0,"metadata":"","commitTimestamp":1795757301964,'
     '"topicId":"A5fKxaqtQIuKsIMQ_AAK5A"}}'),
    ("0003" + GROUP_KEY, "000000000002010008c9872ef1a73ba584",
     '{"type":"3","data":{"groupId":"consumer-group"}}',
     '{"version":"0","data":{"epoch":2,"metadataHash":-3925116934802397820}}'),
    ("0003" + GROUP_KEY, "00000000000300", '{"type":"3","data":{"groupId":"consumer-group"}}',
     '{"version":"0","data":{"epoch":3}}'),
    ("0005" + MEMBER_KEY,
     "000000000872646b61666b610b2f3132372e302e302e31020b6964656d706f74656e7401000493e00001000100",
     '{"type":"5","data":{"groupId":"consumer-group","memberId":"qpHtH/ndSzavQouRMpuitA"}}',
     '{"version":"0","data":{"instanceId":null,"rackId":null,"clientId":"rdkafka","clientHost":"/127.0.0.1",'
     '"subscribedTopicNames":["idempotent"],"subscribedTopicRegex":"","rebalanceTimeoutMs":300000,'
     '"serverAssignor":null,"classicMemberMetadata":null}}'),
    ("0006" + GROUP_KEY, "000000000002010008000001a21b79e359",
     '{"type":"6","data":{"groupId":"consumer-group"}}',
     '{"version":"0","data":{"assignmentEpoch":2,"assignmentTimestamp":1795757302617}}'),
    ("0007" + MEMBER_KEY, "000002bda76fee1a8f4056ac55fb2a0829dba202000000000000",
     '{"type":"7","data":{"groupId":"consumer-group","memberId":"qpHtH/ndSzavQouRMpuitA"}}',
     '{"version":"0","data":{"topicPartitions":[{"topicId":"vadv7hqPQFasVfsqCCnbog","partitions":[0]}]}}'),
    ("0008" + MEMBER_KEY,
     "000000000002000000000002bda76fee1a8f4056ac55fb2a0829dba2020000000001000502000000020100",
     '{"type":"8","data":{"groupId":"consumer-group","memberId":"qpHtH/ndSzavQouRMpuitA"}}',
     '{"version":"0","data":{"memberEpoch":2,"previousMemberEpoch":0,"state":0,"assignedPartitions":'
     '[{"topicId":"vadv7hqPQFasVfsqCCnbog","partitions":[0],"assignmentEpochs":[2]}],'
     '"partitionsPendingRevocation":[]}}'),
    ("0008" + MEMBER_KEY, None,
     '{"type":"8","data":{"groupId":"consumer-group","memberId":"qpHtH/ndSzavQouRMpuitA"}}', "<DELETE>"),
]

#: the first batch of a Kafka 4.4 __cluster_metadata-0 log: LeaderChange, KRaftVersion, KRaftVoters
KRAFT_BATCH = (
    "0000000000000000000000a20000000102ab3eff1f002000000002000001a21b798f74000001a21b798f74ffffffffffff"
    "ffffffffffffffff000000033a00000008000000022600000000000102000000010002000000010000001e00000208000000"
    "050a000000010000820100000408000000066e00000200000001a0c45050044748cc811a53adecebe155020b434f4e54524f"
    "4c4c45520a3132372e302e302e3181ad000000000100000000")
KRAFT_LINES = [
    'LeaderChange: {"version":0,"leaderId":1,"voters":[{"voterId":1}],"grantingVoters":[{"voterId":1}]}',
    'KRaftVersion {"version":0,"kRaftVersion":1}',
    'KRaftVoters {"version":0,"voters":[{"voterId":1,"voterDirectoryId":"oMRQUARHSMyBGlOt7OvhVQ","endpoints":'
    '[{"name":"CONTROLLER","host":"127.0.0.1","port":33197}],"kRaftVersionFeature":{"minSupportedVersion":0,'
    '"maxSupportedVersion":1}}]}',
]


def test_kafka4_group_records_decode_as_kafka_44_prints_them(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(build_batch([(bytes.fromhex(k), None if v is None else bytes.fromhex(v), 1000)
                                  for k, v, _, _ in OFFSETS_RECORDS]))
    rc, out, err = run("--offsets-decoder", str(path))
    assert rc == 0, err
    assert _decoded(out) == [(k, p) for _, _, k, p in OFFSETS_RECORDS]


def test_kraft_control_records_as_kafka_44_prints_them(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(bytes.fromhex(KRAFT_BATCH))
    rc, out, err = run("--deep-iteration", str(path))
    assert rc == 0, err
    records = [line for line in out.splitlines() if line.startswith("| offset:")]
    assert [line.split("headerKeys: [] ", 1)[1] for line in records] == KRAFT_LINES


def test_payloads_decode_as_javas_utf8(tmp_path: Path) -> None:
    """--print-data-log prints a key or payload as Java's ``new String(bytes, UTF_8)`` (Kafka's
    StringDecoder): the expected code points are what Java 17 printed for these bytes (an encoded
    surrogate is one U+FFFD in Java, three in Python's "replace")."""
    cases = {"eda6bf": "\ufffd", "eda0d97f": "\ufffd\ufffd\x7f", "f0eda5": "\ufffd\ufffd",
             "c2edbfeda00080": "\ufffd\ufffd\ufffd\x00\ufffd", "e87838": "\ufffdx8", "41c0af": "A\ufffd\ufffd"}
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(build_batch([(None, bytes.fromhex(h), 1000) for h in cases]))
    rc, out, err = run("--deep-iteration", "--print-data-log", str(path))
    assert rc == 0, err
    payloads = [line.split(" payload: ", 1)[1] for line in out.splitlines() if " payload: " in line]
    assert payloads == list(cases.values())
