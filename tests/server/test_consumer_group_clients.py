"""Real clients with ``group.protocol=consumer`` (KIP-848) — the Java client 4.4 (kafka-clients from
Maven) and confluent-kafka (librdkafka) — against ``kafkalog serve`` and, in the same test, against
Kafka 4.4: three members while records flow, one crashing (its process SIGKILLed: its session
expires) or one leaving; a static member restarting without a rebalance; the broker restarting under
the members. Every record is consumed once per commit boundary, the committed offsets reach the log
end offsets, and the group's shapes (members, partitions per member, group and member epochs, read
with ConsumerGroupDescribe at each stable point) are Kafka's."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests import kafka44
from tests.kafka44 import free_port
from tests.server.broker_process import BrokerProcess
from tests.server.consumer_group_raw import FAST_CONSUMER_GROUPS, RawClient
from tests.server.group_members import ConfluentMember, JavaMember, Member, MemberFactory, wait_until
from tests.server.test_group_members import PARTITIONS, Feed, _assert_once_per_commit_boundary, _consumed_since

CONSUMER = {"group.protocol": "consumer"}


def java44(properties: dict[str, str] | None = None) -> MemberFactory:
    def make(name: str, bootstrap: str, topic: str, group: str) -> Member:
        return JavaMember("4.4.0", name, bootstrap, topic, group, {**CONSUMER, **(properties or {})})
    return make


def confluent(name: str, bootstrap: str, topic: str, group: str) -> Member:
    return ConfluentMember(name, bootstrap, topic, group, dict(CONSUMER))


CLIENTS: dict[str, MemberFactory] = {"java-4.4.0": java44(), "confluent-kafka": confluent}


@pytest.fixture(scope="module")
def ours(kafkalog_fast_groups: BrokerProcess) -> BrokerProcess:
    return kafkalog_fast_groups


def port_of(bootstrap: str) -> int:
    return int(bootstrap.rsplit(":", 1)[1])


def shape(bootstrap: str, group: str) -> tuple[Any, ...]:
    """The group as ConsumerGroupDescribe tells it, ids left out: state, group epoch, assignment
    epoch, and (member epoch, partitions owned) of each member, sorted."""
    c = RawClient(port_of(bootstrap), group)
    try:
        c.find_coordinator()
        d = c.describe()
    finally:
        c.close()
    if d["error"]:
        return (d["error"],)
    return (d["state"], d["group_epoch"], d["assignment_epoch"],
            tuple(sorted((m[2], sum(len(p) for p in m[5].values())) for m in d["members"])))


def stable(bootstrap: str, group: str, members: int, timeout: float = 90) -> tuple[Any, ...]:
    """Wait until the group is Stable with ``members`` members owning every partition."""
    got: list[tuple[Any, ...]] = [()]

    def check() -> bool:
        got[0] = shape(bootstrap, group)
        s = got[0]
        return (len(s) == 4 and s[0] == "Stable" and len(s[3]) == members
                and sum(n for _e, n in s[3]) == PARTITIONS)

    wait_until(check, f"{group} stable with {members} members (last: {got[0]})", timeout)
    return got[0]


def create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, PARTITIONS, 1)], operation_timeout=30).values():
        f.result(60)
    time.sleep(1.5)     # Kafka's group coordinator sees the topic once its metadata image is published


def three_members_one_goes(bootstrap: str, make: MemberFactory, name: str,
                           go: Callable[[Member], None]) -> list[tuple[Any, ...]]:
    """a, b, c join one by one while records flow; b goes (``go``); a and c take its partitions and
    consume to the end. The shapes at each stable point; the delivery is checked."""
    topic = group = f"kip848-{name}-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic)
    members: list[Member] = []
    shapes = []
    feed = Feed(bootstrap, topic)
    try:
        for i, letter in enumerate("abc"):
            members.append(make(f"{name}-{letter}", bootstrap, topic, group))
            shapes.append(stable(bootstrap, group, i + 1))
        wait_until(lambda: all(m.consumed() > 0 for m in members), "the three members consume")
        go(members[1])
        shapes.append(stable(bootstrap, group, 2))
        marks = len(members[0].events()), len(members[2].events())
        wait_until(lambda: _consumed_since(members[0], marks[0]) | _consumed_since(members[2], marks[1])
                   == set(range(PARTITIONS)), "the two left consume every partition")
        ends = feed.stop()
        wait_until(lambda: {p: max(m.committed().get(p, 0) for m in members) for p in range(PARTITIONS)}
                   == ends, "the commits reach the log end offsets")
        members[0].stop()
        members[2].stop()
        shapes.append(shape(bootstrap, group))
    finally:
        for m in members:
            m.abort()
        feed.stop()
    _assert_once_per_commit_boundary(bootstrap, topic, group, members, feed.acked, ends)
    return shapes


def leave(m: Member) -> None:
    m.stop()


def crash(m: Member) -> None:
    """The member's process halts between consuming records and committing them: no leave, its
    session (6 s) expires. A halt at a known point, not SIGKILL at any moment: a kill between the
    broker accepting a commit and the member printing it would hide that commit from the test, which
    then counts the records it covered as never committed (seen under load on both brokers)."""
    assert isinstance(m, JavaMember)
    m.crash()


@pytest.mark.parametrize("client", list(CLIENTS))
def test_three_members_one_leaving_as_on_kafka(ours: BrokerProcess, kafka44_fast_groups: kafka44.KafkaBroker,
                                               client: str) -> None:
    theirs = three_members_one_goes(kafka44_fast_groups.bootstrap, CLIENTS[client], client, leave)
    mine = three_members_one_goes(ours.bootstrap, CLIENTS[client], client, leave)
    assert mine == theirs
    assert [len(s[3]) for s in mine[:4]] == [1, 2, 3, 2] and mine[4][0] == "Empty"


@pytest.mark.slow                # waits out a session timeout on both brokers (~28 s)
def test_a_member_killed_leaves_when_its_session_expires_as_on_kafka(
        ours: BrokerProcess, kafka44_fast_groups: kafka44.KafkaBroker) -> None:
    theirs = three_members_one_goes(kafka44_fast_groups.bootstrap, java44(), "crash", crash)
    mine = three_members_one_goes(ours.bootstrap, java44(), "crash", crash)
    assert mine == theirs


def static_member_restarts(bootstrap: str) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """Two static members (``group.instance.id``); b's process closes and a new one with b's instance
    id takes its place: the shapes before and after."""
    topic = group = f"kip848-static-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic)
    a = java44({"group.instance.id": "inst-a"})("static-a", bootstrap, topic, group)
    members = [a]
    try:
        b = java44({"group.instance.id": "inst-b"})("static-b", bootstrap, topic, group)
        members.append(b)
        before = stable(bootstrap, group, 2)
        # b's successor's JVM starts before b leaves and joins on "go": a JVM start on a loaded
        # machine could outlast the session timeout, and the group would then rebalance on either broker
        b2 = java44({"group.instance.id": "inst-b", "kafkalog.wait.for.go": "true"})(
            "static-b2", bootstrap, topic, group)
        members.append(b2)
        assert isinstance(b2, JavaMember)
        assert b2.ready.wait(120), f"b's successor never started: {b2.stderr()}"
        b.stop()                   # close(): a static member leaves "temporarily" (epoch -2)
        b2.go()
        wait_until(lambda: b2.events() and any(e[0] == "rec" for e in b2.events()) or shape(bootstrap, group)[0]
                   == "Stable" and len(shape(bootstrap, group)[3]) == 2, "b's successor is in the group")
        after = stable(bootstrap, group, 2)
        a.stop()
        b2.stop()
    finally:
        for m in members:
            m.abort()
    return before, after


def test_a_static_member_restarts_without_a_rebalance_as_on_kafka(
        ours: BrokerProcess, kafka44_fast_groups: kafka44.KafkaBroker) -> None:
    theirs = static_member_restarts(kafka44_fast_groups.bootstrap)
    mine = static_member_restarts(ours.bootstrap)
    assert mine == theirs
    before, after = mine
    assert after[1] == before[1], "the group epoch moved: a rebalance"


@pytest.mark.parametrize("client", ["confluent-kafka", pytest.param("java-4.4.0", marks=pytest.mark.slow)])
def test_members_resume_after_a_broker_restart(tmp_path, client: str) -> None:
    """kafkalog stops (SIGTERM) and starts again on the same directory and port under three members:
    the group is as it was (same epochs, no rebalance), the members go on from the committed offsets,
    every record consumed once per commit boundary."""
    port = free_port()
    data = str(tmp_path / "data")
    configs = [f"{k}={v}" for k, v in FAST_CONSUMER_GROUPS.items()]
    configs += ["group.consumer.session.timeout.ms=20000", "group.consumer.max.session.timeout.ms=60000"]
    holder = [BrokerProcess(data, configs, ["--port", str(port)]).start()]
    bootstrap = holder[0].bootstrap
    topic = group = f"kip848-restart-{client}"
    members: list[Member] = []
    feed: Feed | None = None
    try:
        create_topic(bootstrap, topic)
        feed = Feed(bootstrap, topic)
        for letter in "abc":
            members.append(CLIENTS[client](f"{client}-{letter}", bootstrap, topic, group))
        before = stable(bootstrap, group, 3)
        wait_until(lambda: all(m.consumed() > 0 for m in members), "the three members consume")
        assert holder[0].stop() == 0, holder[0].stderr()
        holder[0] = BrokerProcess(data, configs, ["--port", str(port)]).start()
        assert shape(bootstrap, group)[1:] == before[1:]        # the group as it was
        marks = [len(m.events()) for m in members]
        wait_until(lambda: set().union(*(_consumed_since(m, k) for m, k in zip(members, marks, strict=True)))
                   == set(range(PARTITIONS)), "the members consume every partition after the restart")
        assert stable(bootstrap, group, 3)[1] == before[1], "a rebalance after the restart"
        ends = feed.stop()
        wait_until(lambda: {p: max(m.committed().get(p, 0) for m in members) for p in range(PARTITIONS)}
                   == ends, "the commits reach the log end offsets")
        for m in members:
            m.stop()
        _assert_once_per_commit_boundary(bootstrap, topic, group, members, feed.acked, ends)
    finally:
        for m in members:
            m.abort()
        if feed is not None:
            feed.stop()
        if holder[0].alive():
            assert holder[0].stop() == 0, holder[0].stderr()
        else:
            holder[0].kill()


def kind(bootstrap: str, group: str) -> tuple[Any, ...]:
    """The group's type (ListGroups), state and its members' protocols (ConsumerGroupDescribe's
    member types: 0 classic, 1 consumer) or, for a classic group, its member count."""
    c = RawClient(port_of(bootstrap), group)
    try:
        c.find_coordinator()
        c.list_groups()
        listed = c.transcript[-1][1]
        if not listed:
            return ("none",)
        _mine, _ptype, state, gtype = listed[0]
        if gtype == "consumer":
            d = c.describe()
            if d["error"]:
                return (gtype, state, d["error"])
            return (gtype, d["state"], tuple(sorted(m[7] for m in d["members"])))
        c.describe_groups()
        _err, dstate, _pt, n = c.transcript[-1][1]
        return (gtype, dstate, n)
    finally:
        c.close()


def upgrade_and_back(bootstrap: str) -> list[tuple[Any, ...]]:
    """A classic group of two Java 4.4 members is upgraded member by member to the consumer
    protocol while records flow (online: the group converts when the first consumer member joins),
    then a classic member joins again and the last consumer member leaves: the group is classic
    again. The group's kind at each step; delivery once per commit boundary throughout."""
    topic = group = f"kip848-migrate-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic)
    steps: list[tuple[Any, ...]] = []
    members: list[Member] = []
    feed = Feed(bootstrap, topic)

    def start(name: str, protocol: str) -> Member:
        m = JavaMember("4.4.0", name, bootstrap, topic, group, {"group.protocol": protocol})
        members.append(m)
        return m

    def expect(want: tuple[Any, ...], what: str) -> None:
        got: list[tuple[Any, ...]] = [()]

        def check() -> bool:
            got[0] = kind(bootstrap, group)
            return got[0] == want
        wait_until(check, f"{what}: {want} (last: {got[0]})", 90)
        steps.append(got[0])

    def consuming(m: Member) -> None:
        mark = len(m.events())
        wait_until(lambda: _consumed_since(m, mark), f"{m.name} consumes")

    try:
        a, b = start("mig-a", "classic"), start("mig-b", "classic")
        expect(("classic", "Stable", 2), "a classic group")
        consuming(a)
        a.stop()
        a2 = start("mig-a2", "consumer")          # the first consumer member: the group converts
        expect(("consumer", "Stable", (0, 1)), "a mixed consumer group")
        consuming(a2)
        consuming(b)
        b.stop()
        b2 = start("mig-b2", "consumer")
        expect(("consumer", "Stable", (1, 1)), "every member on the consumer protocol")
        a2.stop()
        c = start("mig-c", "classic")              # a classic member joins the consumer group
        expect(("consumer", "Stable", (0, 1)), "a classic member in the consumer group")
        b2.stop()                                  # the last consumer member leaves: back to classic
        expect(("classic", "Stable", 1), "a classic group again")
        marks = len(c.events())
        wait_until(lambda: _consumed_since(c, marks) == set(range(PARTITIONS)), "c consumes every partition")
        ends = feed.stop()
        wait_until(lambda: {p: max(m.committed().get(p, 0) for m in members) for p in range(PARTITIONS)}
                   == ends, "the commits reach the log end offsets")
        c.stop()
    finally:
        for m in members:
            m.abort()
        feed.stop()
    _assert_once_per_commit_boundary(bootstrap, topic, group, members, feed.acked, ends)
    return steps


@pytest.mark.slow
def test_a_classic_group_upgraded_to_consumer_members_and_back_as_on_kafka(
        ours: BrokerProcess, kafka44_fast_groups: kafka44.KafkaBroker) -> None:
    theirs = upgrade_and_back(kafka44_fast_groups.bootstrap)
    mine = upgrade_and_back(ours.bootstrap)
    assert mine == theirs
