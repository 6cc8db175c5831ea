"""What client suites ask of the admin APIs, answered as Kafka 4.4 answers (issue 34, defects 5, 6, 8
and 9), side by side with a real Kafka 4.4 (``kafka_pair``) over raw requests:

- authorized operations (Metadata's topics and cluster, DescribeCluster, DescribeGroups,
  DescribeTopicPartitions): every operation the resource type supports when asked, "omitted" when not;
- DescribeConfigs' ``documentation`` when ``include_documentation`` asks for it: Kafka's doc strings;
- topic configs outside Kafka's ranges refused by CreateTopics, AlterConfigs and
  IncrementalAlterConfigs with Kafka's INVALID_CONFIG message;
- Metadata allowed to auto-create a topic just deleted answers it unknown, then creates it."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from tests import kafka44
from tests.server import differential as d
from tests.server.broker_process import BrokerProcess
from tests.server.consumer_group_raw import RawClient

#: Kafka's "omitted" authorized operations (``Integer.MIN_VALUE``)
AUTHORIZED_OPERATIONS_OMITTED = -2147483648
#: retried while a coordinator loads or a member id is handed out
_JOIN_RETRY = frozenset({14, 15, 16, 79})


@pytest.fixture(scope="module")
def pair(kafka_pair: tuple[kafka44.KafkaBroker, BrokerProcess]) -> tuple[int, int]:
    """(Kafka 4.4's port, kafkalog serve's port)."""
    return kafka_pair[0].port, kafka_pair[1].port


def _same(pair: tuple[int, int], session: Any) -> list[tuple[str, Any]]:
    kafka, ours = d.run_pair(session, *pair)
    assert ours == kafka, "\n".join(f"{lab}: {path}: Kafka {a!r}, kafkalog {b!r}"
                                    for lab, path, a, b in d.differences(kafka, ours))
    return kafka


# --- defect 5: authorized operations ------------------------------------------------------------------

def _ops_of_topics(p: dict[str, Any]) -> Any:
    return {"topics": sorted(((t.get("name"), t["error_code"], t.get("topic_authorized_operations"))
                              for t in p["topics"]), key=repr),
            "cluster": p.get("cluster_authorized_operations", "<absent>")}


def _join(c: d.Conn, group: str) -> None:
    """One classic member in ``group`` (its join complete, not synced: CompletingRebalance)."""
    c.coordinator_ready(group)
    member = ""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        r = c.request(11, 5, {"group_id": group, "session_timeout": 30000, "rebalance_timeout": 30000,
                              "member_id": member, "group_instance_id": None, "protocol_type": "consumer",
                              "protocols": [{"name": "range", "metadata": b""}]})
        if int(r.error_code) == 0:
            return
        assert int(r.error_code) in _JOIN_RETRY, r
        member = r.member_id or member
        time.sleep(0.1)
    raise AssertionError(f"{c.name}: {group} never joined")


def s_authorized_operations(c: d.Conn) -> None:
    c.create_topic("ops-t", 2)
    for v in (8, 10, 12):
        for asked in (True, False):
            c.call(f"Metadata v{v} asked={asked}", 3, v, {
                "topics": [{"name": n, "topic_id": None} for n in ("ops-t", "ops-unknown", "bad name!")],
                "allow_auto_topic_creation": False, "include_topic_authorized_operations": asked,
                "include_cluster_authorized_operations": asked}, retry=frozenset(), transform=_ops_of_topics)
    c.call("Metadata v12: unknown topic id", 3, 12, {
        "topics": [{"name": None, "topic_id": uuid.UUID(int=12345)}], "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": True}, retry=frozenset(), transform=_ops_of_topics)
    for v in (0, 1):
        for asked in (True, False):
            c.call(f"DescribeCluster v{v} asked={asked}", 60, v, {
                "include_cluster_authorized_operations": asked, "endpoint_type": 1},
                transform=lambda p: p["cluster_authorized_operations"])
    c.call("DescribeTopicPartitions v0", 75, 0, {
        "topics": [{"name": "ops-t"}, {"name": "ops-unknown"}], "response_partition_limit": 100, "cursor": None},
        transform=lambda p: sorted((t["name"], t["error_code"], t["topic_authorized_operations"]) for t in p["topics"]))
    _join(c, "ops-g")
    for v in (3, 5, 6):
        for asked in (True, False):
            c.call(f"DescribeGroups v{v} asked={asked}", 15, v, {
                "groups": ["ops-g", "ops-no-group"], "include_authorized_operations": asked},
                transform=lambda p: sorted((g["group_id"], g["error_code"], g["group_state"],
                                            g["authorized_operations"]) for g in p["groups"]))


def test_authorized_operations_answer_what_the_resource_supports(pair: tuple[int, int]) -> None:
    transcript = dict(_same(pair, s_authorized_operations))
    # the answers are Kafka's bit sets, not both brokers' "omitted"
    assert transcript["Metadata v10 asked=True"]["cluster"] == 8096
    assert ("ops-t", 0, 3576) in transcript["Metadata v12 asked=True"]["topics"]
    assert transcript["DescribeCluster v1 asked=False"] == AUTHORIZED_OPERATIONS_OMITTED
    assert ("ops-g", 0, "CompletingRebalance", 3400) in transcript["DescribeGroups v5 asked=True"]


def _consumer_group_operations(port: int) -> list[Any]:
    """A consumer-protocol group (KIP-848) with one member, described by ConsumerGroupDescribe and
    DescribeGroups, asked for operations and not."""
    c = RawClient(port, "ops-cg")
    try:
        c.find_coordinator()
        c.create_topic("ops-cg-t", 1)
        c.until("a", lambda out: out["error"] == 0, topics=["ops-cg-t"])
        out: list[Any] = []
        for asked in (True, False):
            for v in (0, 1):
                r = c.call(69, v, {"group_ids": ["ops-cg", "ops-cg-none"], "include_authorized_operations": asked})
                out.append((f"ConsumerGroupDescribe v{v} asked={asked}", sorted(
                    (g.group_id, int(g.error_code), g.authorized_operations) for g in r.groups)))
            r = c.call(15, 5, {"groups": ["ops-cg"], "include_authorized_operations": asked})
            out.append((f"DescribeGroups v5 of a consumer group asked={asked}",
                        [(g.group_id, int(g.error_code), g.authorized_operations) for g in r.groups]))
        return out
    finally:
        c.close()


def test_consumer_group_describe_answers_the_groups_operations(pair: tuple[int, int]) -> None:
    kafka, ours = (_consumer_group_operations(port) for port in pair)
    assert ours == kafka
    assert ("ops-cg", 0, 3400) in dict(kafka)["ConsumerGroupDescribe v1 asked=True"]


# --- defect 6: DescribeConfigs' documentation -------------------------------------------------------

def _describe_configs(c: d.Conn, resources: list[tuple[int, str]], documentation: bool) -> dict[Any, Any]:
    r = c.request(32, 4, {"resources": [{"resource_type": t, "resource_name": n, "configuration_keys": None}
                                        for t, n in resources],
                          "include_synonyms": False, "include_documentation": documentation})
    return {(int(res.resource_type), res.resource_name): {e.name: e.documentation for e in res.configs}
            for res in r.results}


def test_describe_configs_answers_kafkas_documentation(pair: tuple[int, int]) -> None:
    answers = {}
    for name, port in zip(("kafka", "kafkalog"), pair, strict=True):
        c = d.Conn(name, port)
        try:
            c.create_topic("docs-t")
            resources = [(2, "docs-t"), (4, str(d.PAIR_NODE))]
            answers[name] = _describe_configs(c, resources, True)
            assert all(doc is None for docs in _describe_configs(c, resources, False).values()
                       for doc in docs.values()), f"{name}: documentation answered though not asked"
        finally:
            c.close()
    for resource, ours in answers["kafkalog"].items():
        theirs = answers["kafka"][resource]
        assert ours, resource
        missing = sorted(k for k, doc in ours.items() if not doc)
        assert not missing, f"{resource}: no documentation for {missing}"
        differ = sorted(k for k in ours if k in theirs and ours[k] != theirs[k])
        assert not differ, f"{resource}: documentation not Kafka's for {differ}"
        assert len([k for k in ours if k in theirs]) >= (30 if resource[0] == 2 else 60), resource


# --- defect 8: Kafka's ranges over the wire ---------------------------------------------------------

#: (key, value) pairs at and around Kafka 4.4's bounds, and the messages of its range validators
RANGE_CASES = [("segment.bytes", v) for v in ("14", "200", "1048575", "1048576")] + [
    ("segment.ms", "0"), ("segment.index.bytes", "3"), ("retention.ms", "-2"), ("index.interval.bytes", "-1"),
    ("max.message.bytes", "-1"), ("local.retention.ms", "-3"),
    ("min.cleanable.dirty.ratio", "-1"), ("min.cleanable.dirty.ratio", "1.5"), ("min.cleanable.dirty.ratio", "200"),
    ("min.cleanable.dirty.ratio", "2147483648"), ("min.cleanable.dirty.ratio", "1"),
    ("compression.gzip.level", "0"), ("compression.gzip.level", "10"), ("compression.gzip.level", "-1"),
    ("compression.lz4.level", "0"), ("compression.lz4.level", "18"), ("compression.zstd.level", "23"),
    ("compression.zstd.level", "-131073"),
]


def _code_and_message(entry: dict[str, Any]) -> tuple[int, Any]:
    return entry["error_code"], entry["error_message"]


def s_config_ranges(c: d.Conn) -> None:
    c.create_topic("ranges-t")
    for key, value in RANGE_CASES:
        configs = [{"name": key, "value": value}]
        c.call(f"CreateTopics {key}={value}", 19, 7, {
            "topics": [{"name": "ranges-new", "num_partitions": 1, "replication_factor": 1, "assignments": [],
                        "configs": configs}], "timeout": 30000, "validate_only": True},
            transform=lambda p: _code_and_message(p["topics"][0]))
        c.call(f"AlterConfigs {key}={value}", 33, 2, {
            "resources": [{"resource_type": 2, "resource_name": "ranges-t", "configs": configs}],
            "validate_only": True}, transform=lambda p: _code_and_message(p["responses"][0]))
        c.call(f"IncrementalAlterConfigs {key}={value}", 44, 1, {
            "resources": [{"resource_type": 2, "resource_name": "ranges-t",
                           "configs": [{**configs[0], "config_operation": 0}]}],
            "validate_only": True}, transform=lambda p: _code_and_message(p["responses"][0]))


def test_topic_configs_outside_kafkas_ranges_are_refused_as_kafka(pair: tuple[int, int]) -> None:
    transcript = dict(_same(pair, s_config_ranges))
    assert transcript["CreateTopics segment.bytes=200"] == (
        40, "Invalid value 200 for configuration segment.bytes: Value must be at least 1048576")
    assert transcript["IncrementalAlterConfigs segment.bytes=1048576"] == (0, None)


# --- defect 9: Metadata right after DeleteTopics --------------------------------------------------------

def _topic_view(p: dict[str, Any]) -> Any:
    t = p["topics"][0]
    return {"error_code": t["error_code"], "partitions": len(t["partitions"]), "has_id": t["topic_id"] is not None}


def s_metadata_after_delete(c: d.Conn) -> None:
    for i in range(3):
        name = f"gone-{i}"
        c.create_topic(name, 2)
        c.call(f"DeleteTopics {name}", 20, 6, {"topics": [{"name": name, "topic_id": None}], "timeout": 30000},
               transform=lambda p: [r["error_code"] for r in p["responses"]])
        # the client checks that its topic is gone (Kafka's broker learns the deletion from its
        # controller a moment after answering DeleteTopics: until then it answers the old topic)
        c.call(f"Metadata {name} gone", 3, 12, {
            "topics": [{"name": name, "topic_id": None}], "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False}, retry=frozenset({0}), transform=_topic_view)
        c.call(f"Metadata {name} right after DeleteTopics", 3, 12, {
            "topics": [{"name": name, "topic_id": None}], "allow_auto_topic_creation": True,
            "include_topic_authorized_operations": False}, retry=frozenset(), transform=_topic_view)
        c.wait_for_leaders(name, 1)          # then it is created (num.partitions: 1 on both)
        c.call(f"Metadata {name} once created", 3, 12, {
            "topics": [{"name": name, "topic_id": None}], "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False}, retry=frozenset(), transform=_topic_view)


def test_a_deleted_topic_is_not_answered_at_once(pair: tuple[int, int]) -> None:
    transcript = dict(_same(pair, s_metadata_after_delete))
    assert transcript["Metadata gone-0 right after DeleteTopics"] == {
        "error_code": 3, "partitions": 0, "has_id": False}
    assert transcript["Metadata gone-2 once created"] == {"error_code": 0, "partitions": 1, "has_id": True}
