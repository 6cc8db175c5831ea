"""Incremental fetch sessions (KIP-227) over real sockets: raw Fetch frames for the session rules and
errors, the Java client (which opens sessions) and confluent-kafka (librdkafka sends session id 0 and
epoch -1: sessionless full fetches) consuming many partitions with sessions on."""

from __future__ import annotations

import os
import socket
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.server.broker_process import BrokerProcess
from tests.server.raw import connect, fetch_frame, fetch_response, recv_frame

V = 12
NOT_FOUND = 70
INVALID_EPOCH = 71
TOPIC_ID_ERROR = 106


def _create(broker: BrokerProcess, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result(60)


def _produce(broker: BrokerProcess, topic: str, counts: dict[int, int], tag: str = "") -> None:
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for part, n in counts.items():
        for i in range(n):
            p.produce(topic, value=f"{tag}{part}-{i}".encode(), partition=part)
    assert p.flush(60) == 0


def _fetch(s: socket.socket, version: int = V, **kw: Any) -> Any:
    s.sendall(fetch_frame(version, 1, **kw))
    frame = recv_frame(s)
    assert frame is not None
    return fetch_response(frame, version)


def _answered(resp: Any) -> dict[int, tuple[int, int]]:
    """partition -> (high watermark, record bytes) of every partition in the response."""
    return {p.partition_index: (p.high_watermark, len(p.records or b""))
            for t in resp.responses for p in t.partitions}


def test_session_lifecycle_and_omitted_partitions(broker: BrokerProcess) -> None:
    _create(broker, "fs", 2)
    _produce(broker, "fs", {0: 3, 1: 2})
    with connect(broker.port) as s:
        full = _fetch(s, topics=[("fs", [(0, 0, 1 << 20), (1, 0, 1 << 20)])], session_epoch=0)
        assert full.error_code == 0 and full.session_id != 0
        sid = full.session_id
        got = _answered(full)
        assert got[0][0] == 3 and got[1][0] == 2 and got[0][1] > 0 and got[1][1] > 0
        # both fetch offsets move to the end: nothing new, nothing changed -> nothing answered
        inc = _fetch(s, topics=[("fs", [(0, 3, 1 << 20), (1, 2, 1 << 20)])], session_id=sid,
                     session_epoch=1)
        assert inc.error_code == 0 and inc.session_id == sid and _answered(inc) == {}
        # an append to partition 1 only: an incremental fetch naming no partition answers just it
        _produce(broker, "fs", {1: 1}, "new")
        inc = _fetch(s, topics=[], session_id=sid, session_epoch=2)
        assert inc.session_id == sid
        got = _answered(inc)
        assert list(got) == [1] and got[1][0] == 3 and got[1][1] > 0
        # the same epoch again is stale
        bad = _fetch(s, topics=[], session_id=sid, session_epoch=2)
        assert bad.error_code == INVALID_EPOCH and bad.session_id == 0 and bad.responses == ()
        # the session survives a wrong epoch
        inc = _fetch(s, topics=[("fs", [(1, 3, 1 << 20)])], session_id=sid, session_epoch=3)
        assert inc.error_code == 0 and _answered(inc) == {}
        # forgetting every partition closes the session: the answer is sessionless
        inc = _fetch(s, topics=[], session_id=sid, session_epoch=4, forgotten=[("fs", [0, 1])])
        assert inc.error_code == 0 and inc.session_id == 0
        gone = _fetch(s, topics=[], session_id=sid, session_epoch=5)
        assert gone.error_code == NOT_FOUND and gone.session_id == 0


def test_unknown_session_final_epoch_and_topic_id_switch(broker: BrokerProcess) -> None:
    _create(broker, "fs2", 1)
    _produce(broker, "fs2", {0: 2})
    with connect(broker.port) as s:
        assert _fetch(s, topics=[], session_id=123456, session_epoch=1).error_code == NOT_FOUND
        # epoch -1: a full fetch without a session
        final = _fetch(s, topics=[("fs2", [(0, 0, 1 << 20)])], session_epoch=-1)
        assert final.error_code == 0 and final.session_id == 0 and _answered(final)[0][1] > 0
        sid = _fetch(s, topics=[("fs2", [(0, 0, 1 << 20)])], session_epoch=0).session_id
        assert sid != 0
        # a session opened with topic names is not continued with topic IDs (v13)
        switched = _fetch(s, version=13, topics=[], session_id=sid, session_epoch=1)
        assert switched.error_code == TOPIC_ID_ERROR
        # a full fetch naming the session closes it (and opens another)
        again = _fetch(s, topics=[("fs2", [(0, 2, 1 << 20)])], session_id=sid, session_epoch=0)
        assert again.session_id not in (0, sid)
        assert _fetch(s, topics=[], session_id=sid, session_epoch=1).error_code == NOT_FOUND
        # a final fetch naming a session closes it
        closing = _fetch(s, topics=[], session_id=again.session_id, session_epoch=-1)
        assert closing.error_code == 0 and closing.session_id == 0
        assert _fetch(s, topics=[], session_id=again.session_id, session_epoch=1).error_code == NOT_FOUND


def test_cache_slots_bound_the_sessions(tmp_path: Any) -> None:
    b = BrokerProcess(str(tmp_path / "data"), ["max.incremental.fetch.session.cache.slots=1"]).start()
    try:
        _create(b, "slots", 1)
        with connect(b.port) as s:
            first = _fetch(s, topics=[("slots", [(0, 0, 1 << 20)])], session_epoch=0)
            assert first.session_id != 0
            # the one slot is taken by a session in use: no session for the next full fetch
            second = _fetch(s, topics=[("slots", [(0, 0, 1 << 20)])], session_epoch=0)
            assert second.error_code == 0 and second.session_id == 0
            assert _fetch(s, topics=[], session_id=first.session_id, session_epoch=1).error_code == 0
    finally:
        assert b.stop() == 0, b.stderr()
    b = BrokerProcess(str(tmp_path / "data0"), ["max.incremental.fetch.session.cache.slots=0"]).start()
    try:
        _create(b, "slots", 1)
        with connect(b.port) as s:
            assert _fetch(s, topics=[("slots", [(0, 0, 1 << 20)])], session_epoch=0).session_id == 0
    finally:
        assert b.stop() == 0, b.stderr()


def test_confluent_kafka_consumes_many_partitions_with_sessions(broker: BrokerProcess) -> None:
    topic, parts, per = "fs-many", 24, 40
    _create(broker, topic, parts)
    _produce(broker, topic, dict.fromkeys(range(parts), per // 2), "a")
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "fs-many",
                  "enable.auto.commit": False, "fetch.wait.max.ms": 50})
    c.assign([TopicPartition(topic, p, 0) for p in range(parts)])
    seen: dict[int, list[bytes]] = {p: [] for p in range(parts)}
    deadline = time.monotonic() + 60
    produced_more = False
    try:
        while time.monotonic() < deadline and sum(map(len, seen.values())) < parts * per:
            for m in c.consume(500, 0.5):
                assert m.error() is None, m.error()
                part, value = m.partition(), m.value()
                assert part is not None and value is not None
                seen[part].append(value)
            if not produced_more and sum(map(len, seen.values())) == parts * per // 2:
                # later records arrive on fetches that already returned these partitions
                _produce(broker, topic, dict.fromkeys(range(parts), per // 2), "b")
                produced_more = True
    finally:
        c.close()
    for p in range(parts):
        want = [f"a{p}-{i}".encode() for i in range(per // 2)] + [f"b{p}-{i}".encode()
                                                                  for i in range(per // 2)]
        assert seen[p] == want


def test_java_consumes_many_partitions_with_sessions(broker: BrokerProcess) -> None:
    from tests.kafka44 import java_command
    from tests.server.java_client import JavaUnavailable, classpath

    try:
        cp = classpath("3.9.1")
    except JavaUnavailable as e:
        pytest.skip(str(e))
    import subprocess

    topic, parts = "fs-java", 16
    _create(broker, topic, parts)
    _produce(broker, topic, dict.fromkeys(range(parts), 25))
    r = subprocess.run(java_command("KafkalogBench", "consume-all", broker.bootstrap, topic, str(parts * 25),
                                    cp=cp), capture_output=True, text=True, timeout=300, check=False,
                       env={**os.environ})
    assert r.returncode == 0, r.stderr[-3000:]
    got = sorted(r.stdout.split())
    assert got == sorted(f"{p}-{i}" for p in range(parts) for i in range(25))
