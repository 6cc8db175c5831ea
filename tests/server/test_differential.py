"""Kafka's answers are ours (issue 25): the same request sessions against Apache Kafka 4.4 and
``kafkalog serve``, compared field by field (``tests/server/differential.py``).

Every API kafkalog advertises, at every version it advertises, is sent at least once, with the error
paths clients meet: unknown and invalid topic names, offsets out of range, records too large,
fenced and unknown producer epochs, invalid transaction states, unknown members and illegal
generations, negative and huge committed offsets, commit metadata too large, invalid and unknown
configs, existing topics, fewer partitions. One broker pair serves the module; each session uses
its own topics and groups. A difference fails the test unless the table of intended differences in
``docs/kafka-compatibility.md`` covers it; a row that covers nothing fails too."""

from __future__ import annotations

import os
import re
import struct
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from kafkalog.record.builder import build_batch
from kafkalog.server.handlers.kafka_apis import ADVERTISED, APIS
from tests import kafka44
from tests.server import differential as d
from tests.server.broker_process import BrokerProcess

NODE = d.PAIR_NODE


#: the id the scenarios give a topic that does not exist (one no broker made)
NO_SUCH_ID = uuid.UUID(int=12345)


@pytest.fixture(scope="module")
def pair(kafka_pair: tuple[kafka44.KafkaBroker, BrokerProcess]) -> tuple[int, int]:
    """(Kafka 4.4's port, kafkalog serve's port)."""
    return kafka_pair[0].port, kafka_pair[1].port


def _now() -> int:
    return int(time.time() * 1000)


def _batch(values: list[bytes], ts: int, **kw: Any) -> bytes:
    return build_batch([(b"k%d" % i, v, ts + i, [("h", b"x")]) for i, v in enumerate(values)], **kw)


def _produce(c: d.Conn, label: str, version: int, topic: str, records: bytes | None, partition: int = 0,
             acks: int = -1, txn: str | None = None, record: bool = True, topic_id: Any = None) -> Any:
    tid = topic_id if topic_id is not None else (c.topic_id(topic) if version >= 13 else None)
    return c.call(label, 0, version, {
        "transactional_id": txn, "acks": acks, "timeout": 30000,
        "topic_data": [{"name": topic, "topic_id": tid,
                        "partition_data": [{"index": partition, "records": records}]}]}, record=record)


def _fetch(c: d.Conn, label: str, version: int, topic: str, offset: int = 0, partition: int = 0,
           max_bytes: int = 1 << 20, isolation: int = 0, topic_id: Any = None, session_id: int = 0,
           session_epoch: int = -1, rack: str = "") -> Any:
    key: Any = (topic_id if topic_id is not None else c.topic_id(topic)) if version >= 13 else topic
    k = "topic_id" if version >= 13 else "topic"
    return c.call(label, 1, version, {
        "cluster_id": None, "replica_id": -1, "replica_state": {"replica_id": -1, "replica_epoch": -1},
        "max_wait": 0, "min_bytes": 0, "max_bytes": 50 << 20, "isolation_level": isolation,
        "session_id": session_id, "session_epoch": session_epoch, "rack_id": rack,
        "topics": [{k: key, "partitions": [
            {"partition": partition, "current_leader_epoch": -1, "fetch_offset": offset,
             "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": max_bytes,
             "replica_directory_id": None, "high_watermark": -1}]}],
        "forgotten_topics_data": []})


# --- sessions -----------------------------------------------------------------------------------

def s_admin_describe(c: d.Conn) -> None:
    """What Kafka's tools ask (issue 28, tests/ecosystem/test_tools.py): an open transaction seen by
    ListTransactions, DescribeTransactions and DescribeProducers, ended by WriteTxnMarkers (what
    ``kafka-transactions abort`` sends); DescribeLogDirs, DescribeTopicPartitions with its cursor,
    DescribeConfigs with synonyms."""
    now = _now()
    c.create_topic("diff-adm", 2, {"retention.ms": "5000"})
    tid = "diff-adm-t"
    c.coordinator_ready(tid, 1)
    r = c.call("InitProducerId v4 (admin)", 22, 4, {"transactional_id": tid, "transaction_timeout": 60000,
                                                    "producer_id": -1, "producer_epoch": -1})
    pid, ep = int(r.producer_id), int(r.producer_epoch)
    c.call("AddPartitionsToTxn v3 (admin)", 24, 3, {
        "v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid, "v3_and_below_producer_epoch": ep,
        "v3_and_below_topics": [{"name": "diff-adm", "partitions": [0]}], "transactions": []})
    _produce(c, "Produce v11 (admin): an open transaction", 11, "diff-adm",
             _batch([b"a", b"b"], now, producer_id=pid, producer_epoch=ep, base_sequence=0, is_transactional=True),
             txn=tid)
    for v in range(3):
        c.call(f"ListTransactions v{v}", 66, v, {"state_filters": [], "producer_id_filters": [],
                                                 "duration_filter": -1, "transactional_id_pattern": None})
    c.call("ListTransactions v0: state filters", 66, 0, {"state_filters": ["Ongoing", "Bogus"],
                                                         "producer_id_filters": [pid + 100]})
    c.call("ListTransactions v2: a pattern", 66, 2, {"state_filters": ["Ongoing"], "producer_id_filters": [pid],
                                                     "duration_filter": -1, "transactional_id_pattern": "diff-adm-.*"})
    # (an unknown id is answered with a start time of -1, which kio cannot read: tests/ecosystem compares it)
    c.call("DescribeTransactions v0", 65, 0, {"transactional_ids": [tid]})
    describe = {"topics": [{"name": "diff-adm", "partition_indexes": [0, 1, 5]},
                           {"name": "diff-adm-nosuch", "partition_indexes": [0]}]}
    c.call("DescribeProducers v0: an open transaction", 61, 0, describe)
    c.call("WriteTxnMarkers v1: abort", 27, 1, {"markers": [{
        "producer_id": pid, "producer_epoch": ep, "transaction_result": False, "coordinator_epoch": 0,
        "topics": [{"name": "diff-adm", "partition_indexes": [0]}]}]})
    c.call("WriteTxnMarkers v2: unknown partition", 27, 2, {"markers": [{
        "producer_id": pid, "producer_epoch": ep, "transaction_result": False, "coordinator_epoch": 0,
        "transaction_version": 1, "topics": [{"name": "diff-adm-nosuch", "partition_indexes": [0]}]}]})
    c.call("DescribeProducers v0: after the markers", 61, 0, describe)
    for v in range(1, 6):
        c.call(f"DescribeLogDirs v{v}", 35, v, {"topics": [{"topic": "diff-adm", "partitions": [0, 1, 7]}]})
    names = [{"name": "diff-adm"}, {"name": "diff-adm-nosuch"}]
    c.call("DescribeTopicPartitions v0", 75, 0, {"topics": names, "response_partition_limit": 2000, "cursor": None})
    c.call("DescribeTopicPartitions v0: one partition a page", 75, 0, {
        "topics": names, "response_partition_limit": 1, "cursor": None})
    c.call("DescribeTopicPartitions v0: from a cursor", 75, 0, {
        "topics": names, "response_partition_limit": 1, "cursor": {"topic_name": "diff-adm", "partition_index": 1}})
    c.call("DescribeConfigs v4: synonyms", 32, 4, {"resources": [{
        "resource_type": 2, "resource_name": "diff-adm",
        "configuration_keys": ["retention.ms", "cleanup.policy", "segment.bytes", "max.message.bytes",
                               "segment.ms", "min.cleanable.dirty.ratio"]}],
        "include_synonyms": True, "include_documentation": False})


def s_api_versions(c: d.Conn) -> None:
    ours = ADVERTISED

    def view(p: Any) -> Any:
        keys = {k["api_key"]: {"min": k["min_version"], "max": k["max_version"]} for k in p.pop("api_keys")}
        p["api_keys"] = {str(k): keys.get(k) for k in sorted(ours)}
        p["unserved_api_keys"] = sorted(set(keys) - set(ours))
        return p

    for v in range(5):
        c.call(f"ApiVersions v{v}", 18, v, {"client_software_name": "kafkalog-diff",
                                            "client_software_version": "1.0"}, transform=view)
    # a version the broker does not know: the KIP-511 v0 body with UNSUPPORTED_VERSION
    body = struct.pack(">hhih", 18, 127, 99, 4) + b"diff" + b"\x00"      # header v2: no tagged fields
    resp = c.send_frame(struct.pack(">i", len(body)) + body)
    c.transcript.append(("ApiVersions v127", d.CLOSED if resp is None
                         else view(d.plain(d.raw.response_of(resp, 18, 0)))))
    # Produce v0-v2 are advertised (KAFKA-18659) but refused: the connection is closed
    for v in range(3):
        name = b"diff-old-produce"
        body = (struct.pack(">hhih", 0, v, 5, 4) + b"diff" + struct.pack(">hi", 1, 1000)
                + struct.pack(">ih", 1, len(name)) + name + struct.pack(">iii", 1, 0, 0))
        resp = c.send_frame(struct.pack(">i", len(body)) + body)
        c.transcript.append((f"Produce v{v}", d.CLOSED if resp is None else resp.hex()))


def s_metadata(c: d.Conn) -> None:
    c.create_topic("diff-md", 2)
    for v in range(14):
        names = ["diff-md", "bad name!"] + ([] if v < 4 else ["diff-md-unknown"])
        topics = [{"name": n, "topic_id": None} for n in names]
        c.call(f"Metadata v{v}", 3, v, {"topics": topics, "allow_auto_topic_creation": False,
                                        "include_cluster_authorized_operations": False,
                                        "include_topic_authorized_operations": False}, retry=frozenset())
    c.call("Metadata v13: unknown topic id", 3, 13, {
        "topics": [{"name": None, "topic_id": NO_SUCH_ID}], "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False}, retry=frozenset())
    c.call("Metadata v13: topic id", 3, 13, {
        "topics": [{"name": None, "topic_id": c.topic_id("diff-md")}], "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False}, retry=frozenset())
    # last: Kafka creates the topic after answering, so its topic id appears later than ours
    for v in (4, 13):
        c.call(f"Metadata v{v}: auto-create", 3, v, {
            "topics": [{"name": f"diff-md-auto-{v}", "topic_id": None}], "allow_auto_topic_creation": True,
            "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False},
            retry=frozenset())


def s_produce(c: d.Conn) -> None:
    now = _now()
    c.create_topic("diff-produce", 2)
    c.create_topic("diff-produce-lat", 1, {"message.timestamp.type": "LogAppendTime"})
    c.create_topic("diff-produce-small", 1, {"max.message.bytes": "300"})
    for v in range(3, 14):
        _produce(c, f"Produce v{v}", v, "diff-produce", _batch([b"v%d" % v] * 3, now))
        _produce(c, f"Produce v{v}: LogAppendTime", v, "diff-produce-lat", _batch([b"x"], now))
        _produce(c, f"Produce v{v}: acks=1", v, "diff-produce", _batch([b"a"], now), partition=1, acks=1)
    for v in (3, 9, 12):
        c.call(f"Produce v{v}: unknown topic", 0, v, {
            "transactional_id": None, "acks": -1, "timeout": 30000,
            "topic_data": [{"name": "diff-produce-nosuch", "topic_id": None,
                            "partition_data": [{"index": 0, "records": _batch([b"x"], now)}]}]},
            retry=frozenset())
        c.call(f"Produce v{v}: unknown partition", 0, v, {
            "transactional_id": None, "acks": -1, "timeout": 30000,
            "topic_data": [{"name": "diff-produce", "topic_id": None,
                            "partition_data": [{"index": 7, "records": _batch([b"x"], now)}]}]},
            retry=frozenset())
        c.call(f"Produce v{v}: invalid topic name", 0, v, {
            "transactional_id": None, "acks": -1, "timeout": 30000,
            "topic_data": [{"name": "bad name!", "topic_id": None,
                            "partition_data": [{"index": 0, "records": _batch([b"x"], now)}]}]},
            retry=frozenset())
        _produce(c, f"Produce v{v}: record too large", v, "diff-produce-small", _batch([b"y" * 600], now))
        _produce(c, f"Produce v{v}: acks=2", v, "diff-produce", _batch([b"x"], now), acks=2)
        _produce(c, f"Produce v{v}: two batches", v, "diff-produce",
                 _batch([b"x"], now) + _batch([b"y"], now))
        _produce(c, f"Produce v{v}: magic 1", v, "diff-produce",
                 build_batch([(b"k", b"v", now)], magic=1))
        _produce(c, f"Produce v{v}: base offset not 0", v, "diff-produce",
                 build_batch([(b"k", b"v", now)], base_offset=5))
        _produce(c, f"Produce v{v}: corrupt batch", v, "diff-produce",
                 _batch([b"x"], now)[:40] + b"\x00" * 30)
    c.create_topic("diff-produce-compact", 1, {"cleanup.policy": "compact"})
    for v in (7, 9, 13):
        _produce(c, f"Produce v{v}: no key in a compacted topic", v, "diff-produce-compact",
                 build_batch([(b"k", b"v", now), (None, b"v", now), (None, b"w", now), (None, b"x", now),
                              (None, b"y", now)]))
        _produce(c, f"Produce v{v}: keys in a compacted topic", v, "diff-produce-compact",
                 build_batch([(b"k", b"v", now), (b"l", None, now)], compression=1))
    c.call("Produce v13: unknown topic id", 0, 13, {
        "transactional_id": None, "acks": -1, "timeout": 30000,
        "topic_data": [{"name": "", "topic_id": uuid.UUID(int=777),
                        "partition_data": [{"index": 0, "records": _batch([b"x"], now)}]}]}, retry=frozenset())
    # idempotence: duplicates, gaps, epochs
    r = c.call("InitProducerId v4: idempotent", 22, 4, {"transactional_id": None, "transaction_timeout": 60000,
                                                          "producer_id": -1, "producer_epoch": -1})
    pid, epoch = int(r.producer_id), int(r.producer_epoch)

    def idem(label: str, seq: int, ep: int = epoch, p: int = pid, n: int = 2) -> None:
        _produce(c, f"Produce v9: {label}", 9, "diff-produce",
                 _batch([b"i"] * n, now, producer_id=p, producer_epoch=ep, base_sequence=seq))

    idem("idempotent first", 0)
    idem("idempotent next", 2)
    idem("idempotent duplicate", 0)
    idem("idempotent duplicate of the last", 2)
    idem("idempotent gap", 9)
    stranger = 10 ** 9 + now % 10 ** 6             # a producer id neither broker has handed out
    idem("idempotent unknown producer", 5, p=stranger)
    idem("idempotent unknown producer at sequence 0", 0, p=stranger + 1)
    idem("idempotent epoch bump", 0, ep=epoch + 1)
    idem("idempotent fenced epoch", 4, ep=epoch)


def s_fetch(c: d.Conn) -> None:
    now = _now()
    c.create_topic("diff-fetch", 2)
    for i in range(3):
        _produce(c, "", 9, "diff-fetch", _batch([b"f%d" % i] * 4, now + i), record=False)
    for v in range(4, 19):
        _fetch(c, f"Fetch v{v}", v, "diff-fetch")
    for v in (4, 11, 12, 13, 18):
        _fetch(c, f"Fetch v{v}: offset out of range", v, "diff-fetch", offset=1000)
        _fetch(c, f"Fetch v{v}: mid-batch offset", v, "diff-fetch", offset=5)
        _fetch(c, f"Fetch v{v}: at the end", v, "diff-fetch", offset=12)
        _fetch(c, f"Fetch v{v}: tiny partition_max_bytes", v, "diff-fetch", max_bytes=10)
        _fetch(c, f"Fetch v{v}: unknown partition", v, "diff-fetch", partition=9)
        _fetch(c, f"Fetch v{v}: empty partition", v, "diff-fetch", partition=1)
        if v < 13:
            _fetch(c, f"Fetch v{v}: unknown topic", v, "diff-fetch-nosuch")
        else:
            _fetch(c, f"Fetch v{v}: unknown topic id", v, "", topic_id=uuid.UUID(int=4242))
    # an incremental fetch session (KIP-227)
    r = _fetch(c, "Fetch v12: new session", 12, "diff-fetch", session_epoch=0)
    sid = int(r.session_id)
    c.call("Fetch v12: incremental, nothing new", 1, 12, {
        "cluster_id": None, "replica_id": -1, "replica_state": {"replica_id": -1, "replica_epoch": -1},
        "max_wait": 0, "min_bytes": 0, "max_bytes": 50 << 20, "isolation_level": 0,
        "session_id": sid, "session_epoch": 1, "rack_id": "", "topics": [], "forgotten_topics_data": []})
    c.call("Fetch v12: wrong session epoch", 1, 12, {
        "cluster_id": None, "replica_id": -1, "replica_state": {"replica_id": -1, "replica_epoch": -1},
        "max_wait": 0, "min_bytes": 0, "max_bytes": 50 << 20, "isolation_level": 0,
        "session_id": sid, "session_epoch": 7, "rack_id": "", "topics": [], "forgotten_topics_data": []})
    c.call("Fetch v12: unknown session", 1, 12, {
        "cluster_id": None, "replica_id": -1, "replica_state": {"replica_id": -1, "replica_epoch": -1},
        "max_wait": 0, "min_bytes": 0, "max_bytes": 50 << 20, "isolation_level": 0,
        "session_id": 123456, "session_epoch": 1, "rack_id": "", "topics": [], "forgotten_topics_data": []})


def s_list_offsets(c: d.Conn) -> None:
    now = _now()
    c.create_topic("diff-lo", 2)
    for i in range(3):
        _produce(c, "", 9, "diff-lo", _batch([b"l%d" % i] * 2, now + 10 * i), record=False)

    def ask(label: str, v: int, specs: list[int], topic: str = "diff-lo", partition: int = 0,
            isolation: int = 0) -> None:
        c.call(label, 2, v, {"replica_id": -1, "isolation_level": isolation, "timeout": 30000, "topics": [
            {"name": topic, "partitions": [{"partition_index": partition, "current_leader_epoch": -1,
                                            "timestamp": ts, "max_num_offsets": 1} for ts in specs]}]},
            retry=frozenset())

    for v in range(1, 12):
        for spec, name in ((-1, "latest"), (-2, "earliest"), (now + 10, "by timestamp"),
                           (now + 11, "between timestamps"), (now + 10 ** 6, "after the last timestamp"),
                           (-3, "max timestamp"), (-4, "earliest local"), (-5, "latest tiered")):
            if (spec == -3 and v < 7) or (spec == -4 and v < 8) or (spec == -5 and v < 9):
                continue
            ask(f"ListOffsets v{v}: {name}", v, [spec])
        ask(f"ListOffsets v{v}: empty partition latest", v, [-1], partition=1)
        ask(f"ListOffsets v{v}: empty partition earliest", v, [-2], partition=1)
        ask(f"ListOffsets v{v}: unknown partition", v, [-1], partition=5)
        ask(f"ListOffsets v{v}: unknown topic", v, [-1], topic="diff-lo-nosuch")
        if v >= 2:
            ask(f"ListOffsets v{v}: read_committed latest", v, [-1], isolation=1)


#: OffsetCommit and OffsetFetch v10 name topics by id
FIRST_OFFSET_TOPIC_IDS = 10


def _topic_key(c: d.Conn, t: str, v: int) -> dict[str, Any]:
    """A request's topic: its name, or (v10) its id on this broker; a ``-nosuch`` topic an id no
    topic has, ``-zero-id`` the zero id."""
    if v < FIRST_OFFSET_TOPIC_IDS:
        return {"name": t}
    if t.endswith("-zero-id"):
        return {"name": t, "topic_id": uuid.UUID(int=0)}
    return {"name": "", "topic_id": NO_SUCH_ID if t.endswith("-nosuch") else c.topic_id(t)}


def _commit(c: d.Conn, label: str, v: int, group: str, parts: list[tuple[str, int, int, str | None]],
            generation: int = -1, member: str = "", instance: str | None = None) -> Any:
    topics: dict[str, list[dict[str, Any]]] = {}
    for t, p, off, meta in parts:
        topics.setdefault(t, []).append({"partition_index": p, "committed_offset": off,
                                         "committed_leader_epoch": -1, "committed_metadata": meta,
                                         "commit_timestamp": -1})
    return c.call(label, 8, v, {"group_id": group, "generation_id_or_member_epoch": generation,
                                "member_id": member, "group_instance_id": instance, "retention_time_ms": -1,
                                "topics": [{**_topic_key(c, t, v), "partitions": ps} for t, ps in topics.items()]})


def _offset_fetch(c: d.Conn, label: str, v: int, group: str, topics: list[tuple[str, list[int]]] | None) -> Any:
    ts = None if topics is None else [{**_topic_key(c, t, v), "partition_indexes": ps} for t, ps in topics]
    return c.call(label, 9, v, {"group_id": group, "topics": ts, "require_stable": False,
                                "groups": [{"group_id": group, "member_id": None, "member_epoch": -1,
                                            "topics": ts}]})


def s_offsets(c: d.Conn) -> None:
    c.create_topic("diff-oc", 2)
    c.coordinator_ready("diff-oc-g")
    for v in range(2, 11):
        g = f"diff-oc-g{v}"
        c.coordinator_ready(g)
        _commit(c, f"OffsetCommit v{v}", v, g, [("diff-oc", 0, 10 + v, "meta"), ("diff-oc", 1, 3, None)])
        _commit(c, f"OffsetCommit v{v}: negative offsets", v, g, [("diff-oc", 0, -1, ""), ("diff-oc", 1, -2, "")])
        _commit(c, f"OffsetCommit v{v}: huge offset", v, g, [("diff-oc", 0, 2 ** 62, "")])
        _commit(c, f"OffsetCommit v{v}: metadata too large", v, g, [("diff-oc", 0, 1, "m" * 5000)])
        _commit(c, f"OffsetCommit v{v}: unknown topic", v, g, [("diff-oc-nosuch", 0, 1, "")])
        _commit(c, f"OffsetCommit v{v}: unknown partition", v, g, [("diff-oc", 9, 1, "")])
        _commit(c, f"OffsetCommit v{v}: unknown member of an empty group", v, g, [("diff-oc", 0, 1, "")],
                generation=3, member="nobody")
        _commit(c, f"OffsetCommit v{v}: a generation of a group that does not exist", v, f"diff-oc-new{v}",
                [("diff-oc", 0, 1, "")], generation=3, member="nobody")
    _commit(c, "OffsetCommit v9: empty group id", 9, "", [("diff-oc", 0, 1, "")])
    _commit(c, "OffsetCommit v10: the zero topic id", 10, "diff-oc-g10", [("diff-oc-zero-id", 0, 1, "")])
    for v in range(1, 11):
        _offset_fetch(c, f"OffsetFetch v{v}", v, "diff-oc-g9", [("diff-oc", [0, 1]), ("diff-oc-nosuch", [0])])
        _offset_fetch(c, f"OffsetFetch v{v}: unknown group", v, "diff-oc-nosuch", [("diff-oc", [0])])
        if v >= 2:
            _offset_fetch(c, f"OffsetFetch v{v}: every partition", v, "diff-oc-g8", None)
    for v in (9, 10):
        c.call(f"OffsetFetch v{v}: several groups", 9, v, {"require_stable": False, "groups": [
            {"group_id": g, "member_id": None, "member_epoch": -1, "topics": None}
            for g in ("diff-oc-g2", "diff-oc-g5", "diff-oc-g10", "diff-oc-none")]})
    c.call("OffsetDelete v0", 47, 0, {"group_id": "diff-oc-g9", "topics": [
        {"name": "diff-oc", "partitions": [{"partition_index": 0}]}]})
    c.call("OffsetDelete v0: unknown group", 47, 0, {"group_id": "diff-oc-nosuch", "topics": [
        {"name": "diff-oc", "partitions": [{"partition_index": 0}]}]}, retry=frozenset({14, 15}))
    _offset_fetch(c, "OffsetFetch v9: after OffsetDelete", 9, "diff-oc-g9", [("diff-oc", [0, 1])])


SUBSCRIPTION = struct.pack(">hih", 0, 1, 7) + b"diff-gr" + struct.pack(">i", -1)
ASSIGNMENT = struct.pack(">hih", 0, 1, 7) + b"diff-gr" + struct.pack(">ii", 1, 0) + struct.pack(">i", -1)


def _join(c: d.Conn, label: str, v: int, group: str, member: str = "", protocol_type: str = "consumer",
          session_timeout: int = 10000, instance: str | None = None) -> Any:
    return c.call(label, 11, v, {
        "group_id": group, "session_timeout": session_timeout, "rebalance_timeout": 10000, "member_id": member,
        "group_instance_id": instance, "protocol_type": protocol_type, "reason": None,
        "protocols": [{"name": "range", "metadata": SUBSCRIPTION}]}, retry=frozenset({14, 15, 16}))


def s_groups(c: d.Conn) -> None:
    c.create_topic("diff-gr", 1)
    for v in range(10):
        g = f"diff-gr-g{v}"
        c.coordinator_ready(g)
        sv, hv, lv = min(v, 5), min(v, 4), min(v, 5)
        r = _join(c, f"JoinGroup v{v}", v, g)
        member = r.member_id
        if int(r.error_code) == 79:             # MEMBER_ID_REQUIRED (v4+)
            r = _join(c, f"JoinGroup v{v}: with the member id", v, g, member=member)
        gen = int(r.generation_id)
        c.call(f"SyncGroup v{sv} (join v{v})", 14, sv, {
            "group_id": g, "generation_id": gen, "member_id": member, "group_instance_id": None,
            "protocol_type": "consumer", "protocol_name": "range",
            "assignments": [{"member_id": member, "assignment": ASSIGNMENT}]})
        c.call(f"Heartbeat v{hv} (join v{v})", 12, hv, {"group_id": g, "generation_id": gen, "member_id": member,
                                                         "group_instance_id": None})
        c.call(f"Heartbeat v{hv} (join v{v}): illegal generation", 12, hv, {
            "group_id": g, "generation_id": gen + 5, "member_id": member, "group_instance_id": None})
        c.call(f"Heartbeat v{hv} (join v{v}): unknown member", 12, hv, {
            "group_id": g, "generation_id": gen, "member_id": "nobody", "group_instance_id": None})
        c.call(f"SyncGroup v{sv} (join v{v}): unknown member", 14, sv, {
            "group_id": g, "generation_id": gen, "member_id": "nobody", "group_instance_id": None,
            "protocol_type": "consumer", "protocol_name": "range", "assignments": []})
        ov = min(max(v, 2), 9)
        _commit(c, f"OffsetCommit v{ov} (join v{v}): member", ov, g, [("diff-gr", 0, 1, "")], generation=gen,
                member=member)
        _commit(c, f"OffsetCommit v{ov} (join v{v}): illegal generation", ov, g, [("diff-gr", 0, 1, "")],
                generation=gen + 1, member=member)
        _commit(c, f"OffsetCommit v{ov} (join v{v}): unknown member", ov, g, [("diff-gr", 0, 1, "")],
                generation=gen, member="nobody")
        _commit(c, f"OffsetCommit v{ov} (join v{v}): simple commit to a live group", ov, g,
                [("diff-gr", 0, 1, "")])
        _join(c, f"JoinGroup v{v}: other protocol type", v, g, member="", protocol_type="connect")
        dv = min(v, 6)
        c.call(f"DescribeGroups v{dv} (join v{v})", 15, dv, {"groups": [g, "diff-gr-nosuch"],
                                                              "include_authorized_operations": False})
        c.call(f"DeleteGroups v{min(v, 2)} (join v{v}): non-empty", 42, min(v, 2), {"groups_names": [g]})
        c.call(f"LeaveGroup v{lv} (join v{v})", 13, lv, {
            "group_id": g, "member_id": member,
            "members": [{"member_id": member, "group_instance_id": None, "reason": None}]})
        c.call(f"LeaveGroup v{lv} (join v{v}): unknown member", 13, lv, {
            "group_id": g, "member_id": "nobody",
            "members": [{"member_id": "nobody", "group_instance_id": None, "reason": None}]})
    _join(c, "JoinGroup v9: invalid session timeout", 9, "diff-gr-timeout", session_timeout=1)
    def ours(p: Any) -> Any:        # the groups of this session only
        return {**p, "groups": [g for g in p["groups"] if g["group_id"].startswith("diff-gr")]}

    for v in range(6):
        c.call(f"ListGroups v{v}", 16, v, {"states_filter": [], "types_filter": []}, transform=ours)
    c.call("ListGroups v5: empty groups of type classic", 16, 5,
           {"states_filter": ["Empty"], "types_filter": ["classic"]}, transform=ours)
    for v in range(3):
        c.call(f"DeleteGroups v{v}", 42, v, {"groups_names": [f"diff-gr-g{v}", "diff-gr-nosuch"]})


def s_transactions(c: d.Conn) -> None:
    now = _now()
    c.create_topic("diff-txn", 2)
    c.call("InitProducerId v5: timeout too large", 22, 5, {
        "transactional_id": "diff-txn-big", "transaction_timeout": 10 ** 9, "producer_id": -1,
        "producer_epoch": -1})
    for v in range(6):
        tid = f"diff-txn-{v}"
        c.coordinator_ready(tid, 1)
        r = c.call(f"InitProducerId v{v}", 22, v, {"transactional_id": tid, "transaction_timeout": 60000,
                                                    "producer_id": -1, "producer_epoch": -1})
        pid, ep = int(r.producer_id), int(r.producer_epoch)
        if pid < 0:
            continue                # the transcript holds the error
        av, ov, tv, ev = min(v, 3), min(v, 3), min(v, 4), min(v, 4)
        c.call(f"EndTxn v{ev} (txn v{v}): nothing to end", 26, ev, {
            "transactional_id": tid, "producer_id": pid, "producer_epoch": ep, "committed": True})
        c.call(f"AddPartitionsToTxn v{av} (txn v{v})", 24, av, {
            "v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": ep,
            "v3_and_below_topics": [{"name": "diff-txn", "partitions": [0]}], "transactions": []})
        c.call(f"AddPartitionsToTxn v{av} (txn v{v}): unknown topic", 24, av, {
            "v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": ep,
            "v3_and_below_topics": [{"name": "diff-txn", "partitions": [1]},
                                    {"name": "diff-txn-nosuch", "partitions": [0]}], "transactions": []},
            retry=frozenset({51}))
        _produce(c, f"Produce v11 (txn v{v})", 11, "diff-txn",
                 _batch([b"t"], now, producer_id=pid, producer_epoch=ep, base_sequence=0, is_transactional=True),
                 txn=tid)
        _produce(c, f"Produce v{9 + v % 3} (txn v{v}): partition not in the transaction", 9 + v % 3, "diff-txn",
                 _batch([b"t"], now, producer_id=pid, producer_epoch=ep, base_sequence=0, is_transactional=True),
                 txn=tid, partition=1)
        g = f"diff-txn-g{v}"
        c.coordinator_ready(g)
        c.call(f"TxnOffsetCommit v{tv} (txn v{v}): before AddOffsetsToTxn", 28, tv, {
            "transactional_id": tid, "group_id": g, "producer_id": pid, "producer_epoch": ep,
            "generation_id": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": "diff-txn", "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                            "committed_leader_epoch": -1,
                                                            "committed_metadata": ""}]}]})
        c.call(f"AddOffsetsToTxn v{ov} (txn v{v})", 25, ov, {
            "transactional_id": tid, "producer_id": pid, "producer_epoch": ep, "group_id": g})
        c.call(f"TxnOffsetCommit v{tv} (txn v{v})", 28, tv, {
            "transactional_id": tid, "group_id": g, "producer_id": pid, "producer_epoch": ep,
            "generation_id": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": "diff-txn", "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                            "committed_leader_epoch": -1,
                                                            "committed_metadata": "t"}]}]})
        c.call(f"EndTxn v{ev} (txn v{v}): fenced epoch", 26, ev, {
            "transactional_id": tid, "producer_id": pid, "producer_epoch": ep - 1 if ep > 0 else ep + 7,
            "committed": True})
        c.call(f"EndTxn v{ev} (txn v{v}): unknown producer id", 26, ev, {
            "transactional_id": tid, "producer_id": pid + 5, "producer_epoch": ep, "committed": True})
        c.call(f"EndTxn v{ev} (txn v{v})", 26, ev, {
            "transactional_id": tid, "producer_id": pid, "producer_epoch": ep, "committed": v % 2 == 0})
        c.call(f"EndTxn v{ev} (txn v{v}): ended the other way", 26, ev, {
            "transactional_id": tid, "producer_id": pid, "producer_epoch": ep, "committed": v % 2 == 1})
        _offset_fetch(c, f"OffsetFetch v{min(max(v, 1), 9)} (txn v{v})", min(max(v, 1), 9), g, [("diff-txn", [0])])
        r2 = c.call(f"InitProducerId v{v}: again", 22, v, {"transactional_id": tid, "transaction_timeout": 60000,
                                                           "producer_id": pid if v >= 3 else -1,
                                                           "producer_epoch": ep if v >= 3 else -1})
        if v >= 3:
            c.call(f"InitProducerId v{v}: stale epoch", 22, v, {
                "transactional_id": tid, "transaction_timeout": 60000, "producer_id": pid, "producer_epoch": ep})
        del r2
    c.call("EndTxn v4: unknown transactional id", 26, 4, {
        "transactional_id": "diff-txn-nosuch", "producer_id": 1, "producer_epoch": 0, "committed": True})
    c.call("AddOffsetsToTxn v3: unknown transactional id", 25, 3, {
        "transactional_id": "diff-txn-nosuch", "producer_id": 1, "producer_epoch": 0, "group_id": "g"})
    _fetch(c, "Fetch v12: read_committed after the transactions", 12, "diff-txn", isolation=1)
    _fetch(c, "Fetch v12: read_uncommitted after the transactions", 12, "diff-txn", isolation=0)


def _create(c: d.Conn, label: str, v: int, topics: list[dict[str, Any]], validate_only: bool = False) -> Any:
    return c.call(label, 19, v, {"topics": [{"num_partitions": 1, "replication_factor": 1, "assignments": [],
                                             "configs": [], **t} for t in topics],
                                 "timeout": 30000, "validate_only": validate_only},
                  transform=_creation_view)


def _creation_view(p: Any) -> Any:
    """CreateTopics v5+ answers every config of the topic: only the ones a session sets are compared
    (the set of keys, Kafka's own and kafkalog's, is compared by DescribeConfigs)."""
    for t in p.get("topics", []):
        if "configs" in t:
            t["configs"] = [x for x in t["configs"] if x["name"] in COMPARED_CONFIGS]
    return p


COMPARED_CONFIGS = ("cleanup.policy", "retention.ms", "segment.bytes", "max.message.bytes", "compression.type",
                    "min.insync.replicas", "message.timestamp.type", "retention.bytes")


def s_topics(c: d.Conn) -> None:
    for v in range(2, 8):
        _create(c, f"CreateTopics v{v}", v, [{"name": f"diff-ct-{v}", "num_partitions": 2,
                                              "configs": [{"name": "cleanup.policy", "value": "compact"}]}])
        _create(c, f"CreateTopics v{v}: validate only", v, [{"name": f"diff-ct-vo-{v}"}], validate_only=True)
        _create(c, f"CreateTopics v{v}: errors", v, [
            {"name": f"diff-ct-{v}"}, {"name": "bad name!"}, {"name": f"diff-ct-zero-{v}", "num_partitions": 0},
            {"name": f"diff-ct-rf-{v}", "replication_factor": 3},
            {"name": f"diff-ct-cfg-{v}", "configs": [{"name": "retention.ms", "value": "soon"}]},
            {"name": f"diff-ct-unk-{v}", "configs": [{"name": "no.such.config", "value": "1"}]},
            {"name": f"diff-ct-assign-{v}", "num_partitions": -1, "replication_factor": -1,
             "assignments": [{"partition_index": 0, "broker_ids": [NODE]}]},
            {"name": f"diff-ct-default-{v}", "num_partitions": -1, "replication_factor": -1}])
        _create(c, f"CreateTopics v{v}: duplicate", v, [{"name": f"diff-ct-dup-{v}"}, {"name": f"diff-ct-dup-{v}"}])
    for v in range(1, 7):
        c.wait_for_leaders(f"diff-ct-{v + 1}", 2)
        tid = c.topic_id(f"diff-ct-{v + 1}")
        c.call(f"DeleteTopics v{v}", 20, v, {"topic_names": [f"diff-ct-{v + 1}", "diff-ct-nosuch"], "timeout": 30000,
                                              "topics": [{"name": None, "topic_id": tid},
                                                         {"name": "diff-ct-nosuch", "topic_id": None}]})
    c.call("DeleteTopics v6: unknown topic id", 20, 6, {"topic_names": [], "timeout": 30000,
                                                         "topics": [{"name": None, "topic_id": uuid.UUID(int=99)}]})
    now = _now()
    c.create_topic("diff-dr", 1)
    for _ in range(3):
        _produce(c, "", 9, "diff-dr", _batch([b"d"] * 2, now), record=False)
    for v in range(3):
        c.call(f"DeleteRecords v{v}", 21, v, {"timeout": 30000, "topics": [
            {"name": "diff-dr", "partitions": [{"partition_index": 0, "offset": 1 + v}]},
            {"name": "diff-dr-nosuch", "partitions": [{"partition_index": 0, "offset": 1}]}]})
        c.call(f"DeleteRecords v{v}: out of range", 21, v, {"timeout": 30000, "topics": [
            {"name": "diff-dr", "partitions": [{"partition_index": 0, "offset": 100}, {"partition_index": 4,
                                                                                        "offset": 1}]}]})
    c.call("DeleteRecords v2: to the high watermark", 21, 2, {"timeout": 30000, "topics": [
        {"name": "diff-dr", "partitions": [{"partition_index": 0, "offset": -1}]}]})
    c.call("ListOffsets v9: after DeleteRecords", 2, 9, {"replica_id": -1, "isolation_level": 0, "timeout": 30000,
                                                          "topics": [{"name": "diff-dr", "partitions": [
                                                              {"partition_index": 0, "current_leader_epoch": -1,
                                                               "timestamp": -2}]}]})


def s_partitions(c: d.Conn) -> None:
    c.coordinator_ready("diff-cp-g")
    for v in range(4):
        t = f"diff-cp-{v}"
        c.create_topic(t, 1)
        _commit(c, "", 9, "diff-cp-g", [(t, 0, 5, "kept")])

        def grow(label: str, count: int, assignments: list[list[int]] | None = None, vo: bool = False,
                 topic: str = t, v: int = v) -> Any:
            return c.call(f"CreatePartitions v{v}: {label}", 37, v, {
                "topics": [{"name": topic, "count": count, "assignments": None if assignments is None else
                            [{"broker_ids": a} for a in assignments]}], "timeout": 30000, "validate_only": vo})

        grow("validate only", 3, vo=True)
        grow("to 3", 3)
        grow("same count", 3)
        grow("fewer partitions", 2)
        grow("negative count", -1)
        grow("assignments", 5, [[NODE], [NODE]])
        grow("too few assignments", 7, [[NODE]])
        grow("unknown broker", 7, [[NODE], [NODE + 1]])
        grow("broker twice", 7, [[NODE], [NODE, NODE]])
        grow("empty replica list", 7, [[NODE], []])
        grow("unknown topic", 3, topic=f"diff-cp-nosuch-{v}")
        grow("invalid topic name", 3, topic="bad name!")
        grow("too many partitions", 2 ** 31 - 1, vo=True)
        c.call(f"CreatePartitions v{v}: duplicate topic", 37, v, {
            "topics": [{"name": t, "count": 9, "assignments": None}, {"name": t, "count": 9, "assignments": None}],
            "timeout": 30000, "validate_only": True})
        c.wait_for_leaders(t, 5)
        c.call(f"Metadata v12 (CreatePartitions v{v})", 3, 12, {"topics": [{"name": t, "topic_id": None}],
                                                                  "allow_auto_topic_creation": False,
                                                                  "include_topic_authorized_operations": False})
        _produce(c, f"Produce v9 (CreatePartitions v{v}): to a new partition", 9, t, _batch([b"n"], _now()),
                 partition=4)
        _fetch(c, f"Fetch v12 (CreatePartitions v{v}): a new partition", 12, t, partition=4)
        _offset_fetch(c, f"OffsetFetch v8 (CreatePartitions v{v}): committed before", 8, "diff-cp-g",
                      [(t, [0, 1])])


def _describe(c: d.Conn, label: str, v: int, resources: list[tuple[int, str, list[str] | None]]) -> Any:
    def view(p: Any) -> Any:
        for r in p["results"]:
            for e in r["configs"]:
                e.pop("documentation", None)
                e.pop("synonyms", None)
        return p
    return c.call(label, 32, v, {"resources": [{"resource_type": t, "resource_name": n, "configuration_keys": k}
                                               for t, n, k in resources],
                                 "include_synonyms": False, "include_documentation": False}, transform=view)


def s_configs(c: d.Conn) -> None:
    c.create_topic("diff-cfg", 1, {"cleanup.policy": "compact", "retention.ms": "86400000"})
    keys = list(COMPARED_CONFIGS)
    for v in range(1, 5):
        _describe(c, f"DescribeConfigs v{v}", v, [(2, "diff-cfg", keys), (2, "diff-cfg-nosuch", keys)])
    _describe(c, "DescribeConfigs v4: every topic key", 4, [(2, "diff-cfg", None)])
    _describe(c, "DescribeConfigs v4: broker", 4, [(4, str(NODE), ["num.partitions", "log.retention.hours",
                                                                     "auto.create.topics.enable"])])
    _describe(c, "DescribeConfigs v4: another broker", 4, [(4, "7", ["num.partitions"])])
    _describe(c, "DescribeConfigs v4: unknown resource type", 4, [(3, "x", None)])

    def alter(label: str, v: int, resources: list[tuple[int, str, list[tuple[str, str | None]]]],
              vo: bool = False) -> Any:
        return c.call(f"AlterConfigs v{v}: {label}", 33, v, {
            "resources": [{"resource_type": t, "resource_name": n, "configs": [{"name": k, "value": x}
                                                                              for k, x in cfg]}
                          for t, n, cfg in resources], "validate_only": vo})

    for v in range(3):
        t = "diff-cfg"
        alter("validate only", v, [(2, t, [("retention.ms", "1000")])], vo=True)
        alter("set", v, [(2, t, [("retention.ms", str(1000 + v)), ("cleanup.policy", "compact,delete")])])
        c.await_config(t, "retention.ms", str(1000 + v))
        _describe(c, f"DescribeConfigs v4 (AlterConfigs v{v})", 4, [(2, t, keys)])
        alter("replace", v, [(2, t, [("segment.bytes", "2097152")])])
        c.await_config(t, "retention.ms", None)
        _describe(c, f"DescribeConfigs v4 (AlterConfigs v{v}): replaced", 4, [(2, t, keys)])
        alter("unknown config", v, [(2, t, [("no.such.config", "1")])])
        alter("invalid value", v, [(2, t, [("retention.ms", "soon")])])
        alter("value out of range", v, [(2, t, [("max.message.bytes", "-5")])])
        alter("not one of", v, [(2, t, [("cleanup.policy", "bogus")])])
        alter("null value", v, [(2, t, [("retention.ms", None)])])
        alter("key twice", v, [(2, t, [("retention.ms", "1"), ("retention.ms", "2")])])
        alter("unknown topic", v, [(2, "diff-cfg-nosuch", [("retention.ms", "1")])])
        alter("invalid topic name", v, [(2, "bad name!", [("retention.ms", "1")])])
        alter("unknown resource type", v, [(3, "g", [("x", "1")])])
        alter("broker read-only key", v, [(4, str(NODE), [("log.dirs", "/x")])], vo=True)
        alter("broker without keys", v, [(4, str(NODE), [])], vo=True)
        alter("broker key", v, [(4, str(NODE), [("log.retention.ms", "1000")])], vo=True)
        alter("another broker", v, [(4, "7", [("log.retention.ms", "1")])], vo=True)
        alter("broker id not a number", v, [(4, "abc", [("log.retention.ms", "1")])], vo=True)
    for v in range(2):
        def inc(label: str, resources: list[tuple[int, str, list[tuple[str, int, str | None]]]],
                vo: bool = False, v: int = v) -> Any:
            return c.call(f"IncrementalAlterConfigs v{v}: {label}", 44, v, {
                "resources": [{"resource_type": t, "resource_name": n, "configs": [
                    {"name": k, "config_operation": op, "value": x} for k, op, x in cfg]}
                    for t, n, cfg in resources], "validate_only": vo})
        t = "diff-cfg"
        inc("set", [(2, t, [("retention.ms", 0, "5000")])])
        inc("append", [(2, t, [("cleanup.policy", 2, "delete")])])
        inc("subtract", [(2, t, [("cleanup.policy", 3, "delete")])])
        inc("delete", [(2, t, [("retention.ms", 1, None)])])
        c.await_config(t, "retention.ms", None)
        _describe(c, f"DescribeConfigs v4 (IncrementalAlterConfigs v{v})", 4, [(2, t, keys)])
        inc("append to a non-list", [(2, t, [("retention.ms", 2, "1")])])
        inc("unknown config", [(2, t, [("no.such.config", 0, "1")])])
        inc("invalid value", [(2, t, [("retention.ms", 0, "soon")])])
        inc("unknown topic", [(2, "diff-cfg-nosuch", [("retention.ms", 0, "1")])])
        inc("broker key", [(4, str(NODE), [("log.retention.ms", 0, "1")])], vo=True)


def s_cluster(c: d.Conn) -> None:
    for v in range(3):
        c.call(f"DescribeCluster v{v}", 60, v, {"include_cluster_authorized_operations": False,
                                                 "endpoint_type": 1, "include_fenced_brokers": False})
    for v in range(2):
        c.call(f"SaslHandshake v{v}: on a PLAINTEXT listener", 17, v, {"mechanism": "PLAIN"})
    for v in range(3):
        c.call(f"SaslAuthenticate v{v}: on a PLAINTEXT listener", 36, v, {"auth_bytes": b"\x00u\x00p"})
    for v in range(7):
        c.call(f"FindCoordinator v{v}", 10, v, {"key": "diff-fc", "key_type": 0, "coordinator_keys": ["diff-fc"]})
    c.call("FindCoordinator v6: transaction", 10, 6, {"key": "", "key_type": 1, "coordinator_keys": ["diff-fc-t"]})
    c.call("FindCoordinator v6: unknown key type", 10, 6, {"key": "", "key_type": 5, "coordinator_keys": ["x"]},
           retry=frozenset())


def s_consumer_groups(c: d.Conn) -> None:
    """The KIP-848 APIs' answers that do not depend on the assignor's timing (its joins and
    reconciliation are compared in tests/server/test_consumer_group_protocol.py)."""
    c.create_topic("diff-cg", 1)
    c.coordinator_ready("diff-cg-g")

    def heartbeat(label: str, v: int, member: str, epoch: int, topics: list[str] | None,
                  group: str = "diff-cg-g") -> Any:
        return c.call(f"ConsumerGroupHeartbeat v{v}: {label}", 68, v, {
            "group_id": group, "member_id": member, "member_epoch": epoch, "instance_id": None,
            "rack_id": None, "rebalance_timeout": 30000, "subscribed_topic_names": topics,
            "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": None},
            retry=frozenset({14, 15, 16}))

    for v in range(2):
        member = str(uuid.uuid4()) if v >= 1 else ""
        heartbeat("unknown member at epoch 5", v, member or "nobody", 5, None)
        heartbeat("join without a subscription", v, member, 0, None)
        heartbeat("an empty group id", v, member, 0, ["diff-cg"], group="")
        heartbeat("leave as an unknown member", v, member or "nobody", -1, None)
        c.call(f"ConsumerGroupDescribe v{v}: unknown groups", 69, v, {
            "group_ids": ["diff-cg-nosuch", "diff-cg-g"], "include_authorized_operations": False})


def s_transactions_v2(c: d.Conn) -> None:
    """The versions of transactions v2 (KIP-890 part 2): a v2 client's TxnOffsetCommit v5 adds the
    group, EndTxn v5 bumps the epoch (its retry answered again); AddOffsetsToTxn v4. The v2 flows
    with their timing are compared in tests/server/test_transactions_v2.py."""
    c.create_topic("diff-txn2", 1)
    tid, g = "diff-txn2-t", "diff-txn2-g"
    c.coordinator_ready(tid, 1)
    c.coordinator_ready(g)
    r = c.call("InitProducerId v5 (txn v2)", 22, 5, {"transactional_id": tid, "transaction_timeout": 60000,
                                                      "producer_id": -1, "producer_epoch": -1})
    pid, ep = int(r.producer_id), int(r.producer_epoch)
    c.call("AddOffsetsToTxn v4", 25, 4, {"transactional_id": tid, "producer_id": pid, "producer_epoch": ep,
                                         "group_id": g})
    c.call("TxnOffsetCommit v5", 28, 5, {
        "transactional_id": tid, "group_id": g, "producer_id": pid, "producer_epoch": ep,
        "generation_id": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"name": "diff-txn2", "partitions": [{"partition_index": 0, "committed_offset": 3,
                                                         "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
    c.call("EndTxn v5: commit", 26, 5, {"transactional_id": tid, "producer_id": pid, "producer_epoch": ep,
                                        "committed": True})
    c.call("EndTxn v5: the commit retried", 26, 5, {"transactional_id": tid, "producer_id": pid,
                                                    "producer_epoch": ep, "committed": True})
    c.call("EndTxn v5: an abort with nothing written", 26, 5, {"transactional_id": tid, "producer_id": pid,
                                                               "producer_epoch": ep + 1, "committed": False})
    c.call("EndTxn v5: a stale epoch", 26, 5, {"transactional_id": tid, "producer_id": pid,
                                               "producer_epoch": ep, "committed": True})
    _offset_fetch(c, "OffsetFetch v9 (txn v2)", 9, g, [("diff-txn2", [0])])


def s_share_groups(c: d.Conn) -> None:
    """The share group APIs' (KIP-932) answers that do not depend on the timing of the share
    partitions' initialization (compared in tests/server/test_share_group_protocol.py)."""
    c.create_topic("diff-sg", 1)
    g = "diff-sg-g"
    c.coordinator_ready(g)
    member = uuid.uuid4().hex[:22]
    tid = c.topic_id("diff-sg")
    for label, mid, epoch in (("unknown member at epoch 5", member, 5), ("an empty member id", "", 0),
                              ("leave as an unknown member", member, -1)):
        c.call(f"ShareGroupHeartbeat v1: {label}", 76, 1, {
            "group_id": g, "member_id": mid, "member_epoch": epoch, "rack_id": None,
            "subscribed_topic_names": ["diff-sg"] if epoch == 0 else None}, retry=frozenset({14, 15, 16}))
    c.call("ShareGroupDescribe v1: unknown groups", 77, 1, {"group_ids": ["diff-sg-nosuch", g],
                                                            "include_authorized_operations": False})
    for v in (1, 2):
        values: dict[str, Any] = {
            "group_id": g, "member_id": member, "share_session_epoch": 3, "max_wait": 0, "min_bytes": 1,
            "max_bytes": 1 << 20, "max_records": 10, "batch_size": 10,
            "topics": [{"topic_id": tid, "partitions": [{"partition_index": 0, "acknowledgement_batches": []}]}],
            "forgotten_topics_data": []}
        if v >= 2:
            values.update({"share_acquire_mode": 0, "is_renew_ack": False})
        c.call(f"ShareFetch v{v}: no share session", 78, v, values)
        ack: dict[str, Any] = {"group_id": g, "member_id": member, "share_session_epoch": 0, "topics": [
            {"topic_id": tid, "partitions": [{"partition_index": 0, "acknowledgement_batches": [
                {"first_offset": 0, "last_offset": 0, "acknowledge_types": [1]}]}]}]}
        if v >= 2:
            ack["is_renew_ack"] = False
        c.call(f"ShareAcknowledge v{v}: epoch 0", 79, v, ack)
    for v in (0, 1):
        c.call(f"DescribeShareGroupOffsets v{v}: a group without state", 90, v, {"groups": [
            {"group_id": g, "topics": [{"topic_name": "diff-sg", "partitions": [0]}]}]})
    c.call("AlterShareGroupOffsets v0: an unknown topic", 91, 0, {"group_id": g, "topics": [
        {"topic_name": "diff-sg-nosuch", "partitions": [{"partition_index": 0, "start_offset": 0}]}]})
    c.call("DeleteShareGroupOffsets v0: an unknown group", 92, 0, {"group_id": "diff-sg-nosuch",
                                                                   "topics": [{"topic_name": "diff-sg"}]})


def s_streams_groups(c: d.Conn) -> None:
    """The streams group APIs' (KIP-1071) answers that do not depend on timing (the joins,
    internal topics and reconciliation are compared in tests/server/test_streams_group_protocol.py)."""
    c.create_topic("diff-stg", 1)
    g = "diff-stg-g"
    c.coordinator_ready(g)
    topology = {"epoch": 0, "subtopologies": [{
        "subtopology_id": "0", "source_topics": ["diff-stg"], "source_topic_regex": [],
        "state_changelog_topics": [], "repartition_sink_topics": [], "repartition_source_topics": [],
        "copartition_groups": []}]}
    for label, member, epoch, topo in (("unknown group at epoch 5", "diff-stg-m", 5, None),
                                       ("an empty member id", "", 0, topology),
                                       ("leave an unknown group", "diff-stg-m", -1, None),
                                       ("source topic regular expressions", "diff-stg-m", 0, {
                                           "epoch": 0, "subtopologies": [{**topology["subtopologies"][0],
                                                                          "source_topic_regex": ["diff.*"]}]}),
                                       ("a copartition group's index out of range", "diff-stg-c", 0, {
                                           "epoch": 0, "subtopologies": [{**topology["subtopologies"][0],
                                                                          "copartition_groups": [{
                                                                              "source_topics": [0, 7],
                                                                              "source_topic_regex": [],
                                                                              "repartition_source_topics": []}]}]})):
        for v in (0, 1):
            c.call(f"StreamsGroupHeartbeat v{v}: {label}", 88, v, {
                "group_id": g, "member_id": member, "member_epoch": epoch, "endpoint_information_epoch": 0,
                "instance_id": None, "rack_id": None, "rebalance_timeout": 30000 if epoch == 0 else -1,
                "topology": topo, "active_tasks": [] if epoch == 0 else None,
                "standby_tasks": [] if epoch == 0 else None, "warmup_tasks": [] if epoch == 0 else None,
                "process_id": "p" if epoch == 0 else None, "user_endpoint": None, "client_tags": None,
                "task_offsets": None, "task_end_offsets": None, "shutdown_application": False},
                retry=frozenset({14, 15, 16}))
    c.call("StreamsGroupDescribe v0: unknown groups", 89, 0, {"group_ids": ["diff-stg-nosuch", g],
                                                              "include_authorized_operations": False})
    for include in (False, True):       # v1: the topology description asked for or not (no plugin)
        c.call(f"StreamsGroupDescribe v1: unknown groups, description {include}", 89, 1, {
            "group_ids": ["diff-stg-nosuch", g, ""], "include_authorized_operations": False,
            "include_topology_description": include})


def s_acls_without_authorizer(c: d.Conn) -> None:
    """DescribeAcls, CreateAcls, DeleteAcls on a broker without ``authorizer.class.name``: SECURITY_DISABLED
    (tests/server/test_authorizer.py runs them with Kafka's StandardAuthorizer)."""
    flt = {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
           "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}
    for v in (1, 2, 3):
        c.call(f"DescribeAcls v{v}: no authorizer", 29, v, flt)
        c.call(f"CreateAcls v{v}: no authorizer", 30, v, {"creations": [
            {"resource_type": 2, "resource_name": "t", "resource_pattern_type": 3, "principal": "User:a",
             "host": "*", "operation": 3, "permission_type": 3}]})
        c.call(f"DeleteAcls v{v}: no authorizer", 31, v, {"filters": [flt]})


def s_scram_credentials_without_authorizer(c: d.Conn) -> None:
    """DescribeUserScramCredentials and AlterUserScramCredentials without an authorizer, no credential
    changed (tests/server/test_scram_admin.py runs them with SCRAM users and StandardAuthorizer)."""
    c.call("DescribeUserScramCredentials v0: a user without credentials", 50, 0, {"users": [{"name": "diff-nobody"}]})
    c.call("AlterUserScramCredentials v0: deleting what does not exist", 51, 0, {
        "deletions": [{"name": "diff-nobody", "mechanism": 1}], "upsertions": []})
    c.call("AlterUserScramCredentials v0: zero iterations", 51, 0, {"deletions": [], "upsertions": [
        {"name": "diff-low", "mechanism": 1, "iterations": 0, "salt": b"s", "salted_password": b"p"}]})


def _quota_entries(p: Any) -> Any:
    """Kafka lists quota entities, their types and values in hash order."""
    if isinstance(p, dict) and isinstance(p.get("entries"), list):
        p["entries"] = sorted(
            (dict(e, entity=sorted(e["entity"], key=lambda x: x["entity_type"]),
                  **({"values": sorted(e["values"], key=lambda v: v["key"])} if "values" in e else {}))
             for e in p["entries"]), key=lambda e: repr(e["entity"]))
    return p


def s_client_quotas_without_authorizer(c: d.Conn) -> None:
    """AlterClientQuotas and DescribeClientQuotas v0-v1 without an authorizer (tests/server/test_client_quotas.py
    runs a longer session with StandardAuthorizer): set, describe, refuse, remove."""
    ent = [{"entity_type": "user", "entity_name": "diff-q"}, {"entity_type": "client-id", "entity_name": None}]
    for v in (0, 1):
        c.call(f"AlterClientQuotas v{v}: set", 49, v, {"entries": [
            {"entity": ent, "ops": [{"key": "producer_byte_rate", "value": 1e9, "remove": False}]},
            {"entity": [{"entity_type": "user", "entity_name": None}], "ops": [
                {"key": "request_percentage", "value": 1000.0, "remove": False}]}],
            "validate_only": False}, transform=_quota_entries)
        deadline = time.monotonic() + 30
        while len(c.request(48, v, {"components": [], "strict": False}).entries or ()) < 2 \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        c.call(f"DescribeClientQuotas v{v}: any user", 48, v, {
            "components": [{"entity_type": "user", "match_type": 2, "match": None}], "strict": False},
            transform=_quota_entries)
        c.call(f"DescribeClientQuotas v{v}: strict default user", 48, v, {
            "components": [{"entity_type": "user", "match_type": 1, "match": None}], "strict": True},
            transform=_quota_entries)
        c.call(f"DescribeClientQuotas v{v}: a bad filter", 48, v, {
            "components": [{"entity_type": "user", "match_type": 0, "match": None}], "strict": False})
        c.call(f"AlterClientQuotas v{v}: refused", 49, v, {"entries": [
            {"entity": ent, "ops": [{"key": "producer_byte_rate", "value": -1.0, "remove": False}]}],
            "validate_only": False}, transform=_quota_entries)
        c.call(f"AlterClientQuotas v{v}: removed", 49, v, {"entries": [
            {"entity": ent, "ops": [{"key": "producer_byte_rate", "value": 0.0, "remove": True}]},
            {"entity": [{"entity_type": "user", "entity_name": None}], "ops": [
                {"key": "request_percentage", "value": 0.0, "remove": True}]}],
            "validate_only": False}, transform=_quota_entries)
        deadline = time.monotonic() + 30
        while c.request(48, v, {"components": [], "strict": False}).entries and time.monotonic() < deadline:
            time.sleep(0.05)


def s_replica_admin(c: d.Conn) -> None:
    """The admin APIs clients send without asking ApiVersions, answered as a one-node Kafka 4.4 answers:
    ElectLeaders (the only replica already leads), List/AlterPartitionReassignments (no other broker to
    move to) and UpdateFeatures (validated only, or refused: no level changes, so later sessions see the
    same features)."""
    c.create_topic("diff-elect", 2)
    parts = [{"topic": "diff-elect", "partitions": [0, 1, 7]}, {"topic": "diff-nosuch", "partitions": [0]}]
    for v in (0, 1, 2):
        c.call(f"ElectLeaders v{v}: preferred, named partitions", 43, v, {
            "election_type": 0, "topic_partitions": parts, "timeout": 30000})
        c.call(f"ElectLeaders v{v}: every partition", 43, v, {
            "election_type": 0, "topic_partitions": None, "timeout": 30000})
        if v >= 1:
            c.call(f"ElectLeaders v{v}: unclean", 43, v, {
                "election_type": 1, "topic_partitions": parts[:1], "timeout": 30000})
            c.call(f"ElectLeaders v{v}: an unknown election type", 43, v, {
                "election_type": 5, "topic_partitions": parts[:1], "timeout": 30000})
        c.call(f"ElectLeaders v{v}: an empty list", 43, v, {
            "election_type": 0, "topic_partitions": [], "timeout": 30000})
    c.call("ListPartitionReassignments v0: all", 46, 0, {"timeout": 30000, "topics": None})
    c.call("ListPartitionReassignments v0: named", 46, 0, {"timeout": 30000, "topics": [
        {"name": "diff-elect", "partition_indexes": [0, 9]}, {"name": "diff-nosuch", "partition_indexes": [0]}]})
    for v in (0, 1):
        c.call(f"AlterPartitionReassignments v{v}: every case", 45, v, {
            "timeout": 30000, "allow_replication_factor_change": True, "topics": [
                {"name": "diff-elect", "partitions": [
                    {"partition_index": 0, "replicas": [1]},
                    {"partition_index": 1, "replicas": None},
                    {"partition_index": 7, "replicas": [1]}]},
                {"name": "diff-nosuch", "partitions": [{"partition_index": 0, "replicas": [1]}]}]})
        for label, replicas in (("another broker", [2]), ("no replica", []), ("a replica twice", [1, 1]),
                                ("a negative id", [-1]), ("two brokers", [1, 2])):
            c.call(f"AlterPartitionReassignments v{v}: {label}", 45, v, {
                "timeout": 30000, "allow_replication_factor_change": v == 0, "topics": [
                    {"name": "diff-elect", "partitions": [{"partition_index": 0, "replicas": replicas}]}]})
        c.call(f"AlterPartitionReassignments v{v}: nothing", 45, v, {
            "timeout": 30000, "allow_replication_factor_change": True, "topics": []})
    c.call("ListPartitionReassignments v0: all, after", 46, 0, {"timeout": 30000, "topics": None})
    for v in (0, 1, 2):
        updates = [
            ("the finalized level (validated)", "group.version", 1, 1, True),
            ("an unknown feature", "diff.feature", 1, 1, True),
            ("a downgrade without the flag", "transaction.version", 1, 1, True),
            ("a safe downgrade (validated)", "transaction.version", 1, 2, True),
            ("an unsafe downgrade (validated)", "transaction.version", 0, 3, True),
            ("above the supported level", "group.version", 9, 1, True),
            ("a negative level", "group.version", -1, 1, True),
            ("an unknown upgrade type", "group.version", 1, 7, True),
            ("the metadata version (validated)", "metadata.version", 1, 1, True),
        ]
        for label, feature, level, upgrade, validate in updates:
            if v == 0 and (validate or upgrade > 2):
                continue        # v0 has no validate_only: only the refusals
            c.call(f"UpdateFeatures v{v}: {label}", 57, v, {
                "timeout": 30000, "validate_only": validate, "feature_updates": [
                    {"feature": feature, "max_version_level": level, "upgrade_type": upgrade,
                     "allow_downgrade": upgrade > 1}]})
        c.call(f"UpdateFeatures v{v}: nothing", 57, v, {"timeout": 30000, "validate_only": True,
                                                         "feature_updates": []})
        c.call(f"UpdateFeatures v{v}: a feature twice", 57, v, {"timeout": 30000, "validate_only": True,
                                                                 "feature_updates": [
            {"feature": "group.version", "max_version_level": 1, "upgrade_type": 1, "allow_downgrade": False},
            {"feature": "group.version", "max_version_level": 1, "upgrade_type": 1, "allow_downgrade": False}]})
    c.call("UpdateFeatures v0: an unknown feature", 57, 0, {"timeout": 30000, "feature_updates": [
        {"feature": "diff.feature", "max_version_level": 1, "allow_downgrade": False}]})
    c.call("UpdateFeatures v0: a downgrade without the flag", 57, 0, {"timeout": 30000, "feature_updates": [
        {"feature": "transaction.version", "max_version_level": 1, "allow_downgrade": False}]})


SESSIONS: dict[str, Callable[[d.Conn], None]] = {
    name[2:]: fn for name, fn in sorted(globals().items()) if name.startswith("s_") and callable(fn)}
USED: set[d.Allowed] = set()
RAN: set[str] = set()
#: the labels answered, "Name vN: case": every API and version kafkalog advertises must be among them
LABELS: set[str] = set()


@pytest.mark.parametrize("name", sorted(SESSIONS))
def test_kafkalog_answers_as_kafka(pair: tuple[int, int], name: str) -> None:
    allowed = d.allowed_differences()
    kafka, ours = d.run_pair(SESSIONS[name], *pair)
    diffs = d.differences(kafka, ours)
    bad = list(d.uncovered(diffs, allowed, USED))
    RAN.add(name)
    LABELS.update(label for label, _ in ours)
    report = "\n".join(f"{label} | {path} | kafka={a!r} | kafkalog={b!r}" for label, path, a, b in bad[:80])
    assert not bad, f"{len(bad)} difference(s) from Kafka 4.4 not listed in docs/kafka-compatibility.md:\n{report}"


def test_every_listed_difference_still_occurs(pair: tuple[int, int]) -> None:
    """Runs after the sessions (pytest keeps file order): a listed difference nothing showed is stale."""
    if set(SESSIONS) != RAN:
        pytest.skip("only when every session ran in this process")
    # the client flows', the tools' and the authorizer's rows: tests/server/test_client_flows.py,
    # tests/ecosystem/test_tools.py, tests/server/test_authorizer.py
    client_rows = [a for a in d.allowed_differences() if a.case.startswith(("client ", "tool ", "authz "))]
    stale = [a for a in d.allowed_differences() if a not in USED and a not in client_rows]
    assert not stale, "rows of docs/kafka-compatibility.md no session shows: " + "; ".join(
        f"{a.case} / {a.field}" for a in stale)
    # every API at every version ApiVersions advertises was asked
    asked = {m.group(1) for m in (re.match(r"^(\w+ v\d+)", label) for label in LABELS) if m}
    advertised_versions = {f"{APIS[key][0]} v{v}" for key, (lo, hi) in ADVERTISED.items()
                           for v in range(lo, hi + 1)}
    missing = sorted(advertised_versions - asked)
    assert not missing, f"advertised but never asked: {missing}"


if os.environ.get("KAFKALOG_DIFF_DUMP"):        # a debugging aid: print the differences of a session
    def test_dump(pair: tuple[int, int]) -> None:
        for name in os.environ["KAFKALOG_DIFF_DUMP"].split(","):
            kafka, ours = d.run_pair(SESSIONS[name], *pair)
            for label, path, a, b in d.differences(kafka, ours):
                print(f"DIFF {label} | {path} | kafka={a!r} | kafkalog={b!r}")


def _leader_epochs(partition_dir: str) -> tuple[set[int], str]:
    """The partition leader epochs of the batches in a partition's segments, and its
    leader-epoch-checkpoint."""
    epochs = set()
    for seg in sorted(os.listdir(partition_dir)):
        if seg.endswith(".log"):
            with open(os.path.join(partition_dir, seg), "rb") as f:
                data = f.read()
            pos = 0
            while pos + 61 <= len(data):
                epochs.add(struct.unpack_from(">i", data, pos + 12)[0])
                pos += 12 + struct.unpack_from(">i", data, pos + 8)[0]
    with open(os.path.join(partition_dir, "leader-epoch-checkpoint"), encoding="ascii") as f:
        return epochs, f.read()


def test_the_broker_writes_its_leader_epoch_as_kafka(kafka_pair: tuple[kafka44.KafkaBroker, BrokerProcess]) -> None:
    """Kafka's leader stamps its epoch into every batch it appends, the group coordinator's
    ``__consumer_offsets`` records and transaction markers included, and records it in
    ``leader-epoch-checkpoint``; kafkalog serve's files say the same (the producer's batch said -1)."""
    kafka, ours = kafka_pair
    dirs = {"kafka": str(kafka.log_dir), "kafkalog": ours.data_dir}
    seen = {}
    for name, port in (("kafka", kafka.port), ("kafkalog", ours.port)):
        c = d.Conn(name, port)
        try:
            c.create_topic("diff-le", 1)
            c.coordinator_ready("diff-le-g")
            _produce(c, "", 9, "diff-le", _batch([b"e"], _now()), record=False)
            r = _commit(c, "", 9, "diff-le-g", [("diff-le", 0, 1, "")])
            assert int(r.topics[0].partitions[0].error_code) == 0
        finally:
            c.close()
        group_partition = next(p for p in os.listdir(dirs[name]) if p.startswith("__consumer_offsets-")
                               and any(f.endswith(".log") and os.path.getsize(os.path.join(dirs[name], p, f))
                                       for f in os.listdir(os.path.join(dirs[name], p))))
        seen[name] = (_leader_epochs(os.path.join(dirs[name], "diff-le-0")),
                      _leader_epochs(os.path.join(dirs[name], group_partition))[0])
    assert seen["kafkalog"] == seen["kafka"] == (({0}, "0\n1\n0 0\n"), {0})
