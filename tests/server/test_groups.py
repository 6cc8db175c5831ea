"""Consumer groups through ``kafkalog serve`` with real clients: subscribe, consume, commit, resume
from the committed offsets after the broker restarts (kafka-python, confluent-kafka, aiokafka, the
Java client 3.9.1 and 4.3.0); ListGroups, DescribeGroups, DeleteGroups and OffsetDelete through the
admin clients; producer ids of the old server allocator stay retired. (Groups of three members that
join and leave while records flow: ``test_group_members.py``.)"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.server.broker_process import BrokerProcess
from tests.server.group_members import JavaMember, wait_until
from tests.server.java_client import by_client

FAST_GROUPS = ["group.initial.rebalance.delay.ms=0"]
DEADLINE_S = 60


@pytest.fixture
def data_dir(tmp_path) -> str:
    return str(tmp_path / "data")


@pytest.fixture
def running(data_dir: str) -> Iterator[list[BrokerProcess]]:
    """A list holding the current broker (tests restart it); stopped cleanly at the end."""
    holder = [BrokerProcess(data_dir, FAST_GROUPS).start()]
    try:
        yield holder
    finally:
        b = holder[0]
        if b.alive():
            assert b.stop() == 0, b.stderr()
        else:
            b.kill()


def _restart(holder: list[BrokerProcess]) -> BrokerProcess:
    old = holder[0]
    assert old.stop() == 0, old.stderr()
    holder[0] = BrokerProcess(old.data_dir, FAST_GROUPS).start()
    return holder[0]


def _produce(bootstrap: str, topic: str, values: list[bytes], partitions: int = 3) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"})
    for i, v in enumerate(values):
        p.produce(topic, value=v, partition=i % partitions)
    assert p.flush(30) == 0


def _create(bootstrap: str, topic: str, partitions: int = 3) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=30).values():
        f.result(60)


def _values(start: int, stop: int) -> list[bytes]:
    return [b"v%d" % i for i in range(start, stop)]


# --- one consumer per client: consume, commit, restart, resume ------------------------------------

def _kafka_python_consume(bootstrap: str, topic: str, group: str, n: int) -> list[bytes]:
    from kafka import KafkaConsumer
    c = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                      enable_auto_commit=False)
    # the topic's metadata before the first join: see KafkaPythonMember (a kafka-python 3.0.12 bug)
    assert topic in c.topics()
    got: list[bytes] = []
    deadline = time.monotonic() + DEADLINE_S
    while len(got) < n and time.monotonic() < deadline:
        for recs in c.poll(500).values():
            got += [r.value for r in recs]
    # nothing beyond n arrives
    for recs in c.poll(500).values():
        got += [r.value for r in recs]
    c.commit()
    c.close()
    return got


def _confluent_consume(bootstrap: str, topic: str, group: str, n: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + DEADLINE_S
    extra = 0
    while time.monotonic() < deadline and (len(got) < n or extra < 3):
        m = c.poll(0.5)
        if len(got) >= n:
            extra += 1
        if m is None or m.error():
            continue
        value = m.value()
        assert value is not None
        got.append(value)
    c.commit(asynchronous=False)
    c.close()
    return got


def _aiokafka_consume(bootstrap: str, topic: str, group: str, n: int) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer

    async def run() -> list[bytes]:
        c = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False)
        await c.start()
        got: list[bytes] = []
        try:
            deadline = time.monotonic() + DEADLINE_S
            while len(got) < n and time.monotonic() < deadline:
                for recs in (await c.getmany(timeout_ms=500)).values():
                    got += [r.value for r in recs]
            for recs in (await c.getmany(timeout_ms=500)).values():
                got += [r.value for r in recs]
            await c.commit()
        finally:
            await c.stop()
        return got

    return asyncio.run(run())


def _java_consume(version: str) -> Callable[[str, str, str, int], list[bytes]]:
    """A Java group member (``KafkalogGroupMember``) that commits after every poll, stopped (commit,
    close) once it consumed ``n`` records."""
    def consume(bootstrap: str, topic: str, group: str, n: int) -> list[bytes]:
        m = JavaMember(version, "resume-" + version, bootstrap, topic, group)
        try:
            wait_until(lambda: m.consumed() >= n, f"{n} records consumed", DEADLINE_S)
            m.stop()
        finally:
            m.abort()
        return [v for kind, _p, _o, v in m.events() if kind == "rec"]
    return consume


CLIENTS: dict[str, Callable[[str, str, str, int], list[bytes]]] = {
    "kafka-python": _kafka_python_consume,
    "confluent-kafka": _confluent_consume,
    "aiokafka": _aiokafka_consume,
    "java-3.9.1": _java_consume("3.9.1"),
    "java-4.3.0": _java_consume("4.3.0"),
}


@pytest.mark.parametrize("client", [by_client(c) for c in CLIENTS])
def test_group_commit_resumes_after_restart(running: list[BrokerProcess], client: str) -> None:
    consume = CLIENTS[client]
    b = running[0]
    topic, group = f"grp-{client}", f"group-{client}"
    _create(b.bootstrap, topic)
    _produce(b.bootstrap, topic, _values(0, 30))
    first = consume(b.bootstrap, topic, group, 30)
    assert sorted(first) == sorted(_values(0, 30))
    b = _restart(running)
    _produce(b.bootstrap, topic, _values(30, 45))
    second = consume(b.bootstrap, topic, group, 15)
    assert sorted(second) == sorted(_values(30, 45))     # resumed at the committed offsets
    # the committed offsets as a fresh client reads them
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group})
    committed = c.committed([CkTopicPartition(topic, p) for p in range(3)], timeout=30)
    c.close()
    assert [tp.offset for tp in committed] == [15, 15, 15]


# --- admin: ListGroups, DescribeGroups, DeleteGroups, OffsetDelete --------------------------------

def test_admin_list_describe_delete_groups(running: list[BrokerProcess]) -> None:
    from confluent_kafka import ConsumerGroupState
    b = running[0]
    topic, group = "grp-admin", "group-admin"
    _create(b.bootstrap, topic)
    _produce(b.bootstrap, topic, _values(0, 6))
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "client.id": "admin-test-member"})
    c.subscribe([topic])
    got = 0
    deadline = time.monotonic() + DEADLINE_S
    while got < 6 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got += 1
    c.commit(asynchronous=False)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    listed = admin.list_consumer_groups(request_timeout=30).result(60)
    states = {g.group_id: g.state for g in listed.valid}
    assert states[group] == ConsumerGroupState.STABLE
    desc = admin.describe_consumer_groups([group], request_timeout=30)[group].result(60)
    assert desc.state == ConsumerGroupState.STABLE
    assert [m.client_id for m in desc.members] == ["admin-test-member"]
    assert desc.partition_assignor == "range"
    assert sorted(tp.partition for tp in desc.members[0].assignment.topic_partitions) == [0, 1, 2]
    # a group with members cannot be deleted
    with pytest.raises(Exception) as e:
        admin.delete_consumer_groups([group], request_timeout=30)[group].result(60)
    assert "NON_EMPTY_GROUP" in str(e.value) or "not empty" in str(e.value).lower()
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KTopicPartition
    from kafka.errors import GroupSubscribedToTopicError
    ka = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    try:
        # OffsetDelete refuses the offsets of a topic the group consumes
        res = ka.delete_group_offsets(group, [KTopicPartition(topic, 0)])
        assert res[KTopicPartition(topic, 0)] is GroupSubscribedToTopicError
        c.close()
        listed = admin.list_consumer_groups(request_timeout=30).result(60)
        assert {g.group_id: g.state for g in listed.valid}[group] == ConsumerGroupState.EMPTY
        # kafka-python's admin sees the same
        groups = {g["group_id"]: g for g in ka.list_groups()}
        assert (groups[group]["protocol_type"], groups[group]["group_state"]) == ("consumer", "Empty")
        assert ka.describe_groups([group])[group]["group_state"] == "Empty"
        offsets = ka.list_group_offsets({group: None})[group]
        assert {tp.partition: om.offset for tp, om in offsets.items()} == {0: 2, 1: 2, 2: 2}
        ka.delete_group_offsets(group, [KTopicPartition(topic, 0)])
        offsets = ka.list_group_offsets({group: None})[group]
        assert {tp.partition: om.offset for tp, om in offsets.items()} == {1: 2, 2: 2}
    finally:
        ka.close()
    admin.delete_consumer_groups([group], request_timeout=30)[group].result(60)
    listed = admin.list_consumer_groups(request_timeout=30).result(60)
    assert group not in {g.group_id for g in listed.valid}
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group})
    committed = c.committed([CkTopicPartition(topic, p) for p in range(3)], timeout=30)
    c.close()
    assert all(tp.offset < 0 for tp in committed)        # offsets gone with the group


def test_old_server_producer_ids_stay_retired(data_dir: str) -> None:
    b = BrokerProcess(data_dir).start()         # a data directory (meta.properties) ...
    assert b.stop() == 0, b.stderr()
    with open(os.path.join(data_dir, "kafkalog-producer-ids"), "w") as f:   # ... the old server used
        f.write("next.producer.id=5000\n")
    b = BrokerProcess(data_dir).start()
    try:
        from kafka import KafkaProducer
        p = KafkaProducer(bootstrap_servers=b.bootstrap, enable_idempotence=True)
        p.send("pid-topic", b"x").get(30)
        pid = p._transaction_manager.producer_id_and_epoch.producer_id
        p.close()
        assert pid >= 5000
    finally:
        assert b.stop() == 0, b.stderr()
    assert not os.path.exists(os.path.join(data_dir, "kafkalog-producer-ids"))
    with open(os.path.join(data_dir, "producer-ids.checkpoint")) as f:
        assert int(f.read().split()[1]) > 5000


def test_static_member_keeps_its_place_then_its_session_expires(tmp_path) -> None:
    """A static member (group.instance.id) that closes stays in the group (no LeaveGroup, no
    rebalance) until its session times out; back in time under the same id, it takes its place."""
    from confluent_kafka import ConsumerGroupState
    b = BrokerProcess(str(tmp_path / "data"),
                      FAST_GROUPS + ["group.min.session.timeout.ms=1000"]).start()
    try:
        topic, group = "grp-static", "group-static"
        _create(b.bootstrap, topic)
        _produce(b.bootstrap, topic, _values(0, 9))
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        conf = {"bootstrap.servers": b.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                "enable.auto.commit": False, "group.instance.id": "instance-1"}

        def consume(n: int, session_ms: int) -> int:
            c = Consumer(dict(conf, **{"session.timeout.ms": session_ms}))
            c.subscribe([topic])
            got = 0
            deadline = time.monotonic() + DEADLINE_S
            while got < n and time.monotonic() < deadline:
                m = c.poll(0.5)
                if m is not None and not m.error():
                    got += 1
            c.commit(asynchronous=False)
            c.close()
            return got

        def describe() -> Any:
            return admin.describe_consumer_groups([group], request_timeout=30)[group].result(60)

        assert consume(9, 60000) == 9
        d = describe()
        assert d.state == ConsumerGroupState.STABLE                       # still a member
        assert [m.group_instance_id for m in d.members] == ["instance-1"]
        first_member_id = d.members[0].member_id
        # the group's state survives a restart of the broker
        assert b.stop() == 0, b.stderr()
        b = BrokerProcess(b.data_dir, b.configs).start()
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        conf["bootstrap.servers"] = b.bootstrap
        d = describe()
        assert d.state == ConsumerGroupState.STABLE
        assert [(m.member_id, m.group_instance_id) for m in d.members] == [(first_member_id, "instance-1")]
        _produce(b.bootstrap, topic, _values(9, 12))
        assert consume(3, 1000) == 3                                     # from the committed offsets
        d = describe()
        assert [m.group_instance_id for m in d.members] == ["instance-1"]
        assert d.members[0].member_id != first_member_id                  # the old id is fenced
        deadline = time.monotonic() + DEADLINE_S                          # 1 s session: expires
        while describe().state != ConsumerGroupState.EMPTY and time.monotonic() < deadline:
            time.sleep(0.2)
        assert describe().state == ConsumerGroupState.EMPTY
    finally:
        assert b.stop() == 0, b.stderr()
