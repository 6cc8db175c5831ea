"""The consumer group protocol (KIP-848) request by request, against ``kafkalog serve`` and Kafka 4.4
in the same test: the same ConsumerGroupHeartbeat sequences (joins, revocations before assignments,
partitions held until released, stale and fenced epochs, static members leaving and coming back,
session expiry, regular-expression subscriptions gaining a topic), ConsumerGroupDescribe, ListGroups,
DescribeGroups and OffsetCommit/OffsetFetch validated by member epoch; the normalised transcripts
(member ids as labels, topic ids as names) must be equal, member epochs and assignment shapes
included."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from tests import kafka44
from tests.server.broker_process import BrokerProcess
from tests.server.consumer_group_raw import RawClient
from tests.server.side_by_side import assert_same, run_side_by_side


@pytest.fixture(scope="module")
def kafka(kafka44_fast_groups: kafka44.KafkaBroker) -> kafka44.KafkaBroker:
    return kafka44_fast_groups


@pytest.fixture(scope="module")
def ours(kafkalog_fast_groups: BrokerProcess) -> BrokerProcess:
    return kafkalog_fast_groups


Scenario = Callable[[RawClient, str], None]


def both(kafka: kafka44.KafkaBroker, ours: BrokerProcess, scenario: Scenario) -> list[list[Any]]:
    """Run ``scenario`` against both brokers at once (each client found its coordinator first); the
    two transcripts, Kafka's first."""
    suffix = uuid.uuid4().hex[:6]

    def found_then(c: RawClient, sfx: str) -> None:
        c.find_coordinator()
        scenario(c, sfx)
    return run_side_by_side(kafka.port, ours.port, lambda port: (RawClient(port, f"cg-{suffix}"), suffix), found_then)


def rebalance(c: RawClient, suffix: str) -> None:
    t = f"t-{suffix}"
    c.create_topic(t, 6)
    c.heartbeat("m1", topics=[t])
    c.heartbeat("m2", topics=[t])                  # target moves 3 partitions: held by m1
    c.heartbeat("m1", owned=None)                  # m1 must revoke first: epoch unchanged
    c.describe()
    c.heartbeat("m1", owned={t: [0, 1, 2, 3, 4, 5]})   # still owns them: no progress
    c.heartbeat("m1")                              # released: m1 moves to the new epoch
    c.heartbeat("m2")                              # m2 gets them
    c.heartbeat("m2")
    c.describe()
    c.list_groups()
    c.describe_groups()
    # epoch validation
    c.heartbeat("m2", 99)
    c.heartbeat("m1", 1)
    c.heartbeat("nobody", 1)
    c.heartbeat("m3", 0, topics=[t], rebalance_timeout=None)
    c.heartbeat("m3", 0, topics=[t], owned={t: [0]})
    c.heartbeat("m3", 0, topics=None)
    c.heartbeat("m3", 0, topics=[t], assignor="sticky")
    c.heartbeat("m3", -3)
    e1, e2 = c.epochs["m1"], c.epochs["m2"]
    p1, p2 = c.owned["m1"][t][0], c.owned["m2"][t][0]
    c.commit("m1", e1, {t: {p1: 10}})
    c.commit("m2", e2, {t: {p2: 20}})
    c.commit("m2", e2 - 1, {t: {p2: 21}})          # older than the epoch p2 was assigned at
    c.commit("m1", e1 + 1, {t: {p1: 11}})
    c.commit("nobody", e1, {t: {p1: 12}})
    c.commit("m1", e1, {t: {p1: 13}}, version=8)   # a consumer member must use v9+
    c.commit(None, -1, {t: {p1: 14}})              # a simple commit into a group with members
    c.fetch("m1", e1, {t: [p1, p2]})
    c.fetch("m1", e1 - 1, {t: [p1]})
    c.fetch(None, -1, {t: [p1, p2]})
    c.fetch("nobody", 3, {t: [p1]})
    c.heartbeat("m2", -1)                          # leaves
    c.until("m1", lambda a: a.get("assignment", {}).get(t) == list(range(6)))
    c.describe()
    c.heartbeat("m1", -1)
    c.describe()
    c.list_groups()
    c.heartbeat("m1", 3)                           # the group is gone
    c.heartbeat("m1", -1)


def static(c: RawClient, suffix: str) -> None:
    t = f"s-{suffix}"
    c.create_topic(t, 4)
    c.heartbeat("a", topics=[t], instance="i-a", assignor="range")
    c.heartbeat("b", topics=[t], instance="i-b", assignor="range")
    c.settle(["a", "b"])
    c.describe()
    c.heartbeat("b", -2, instance="i-b")           # a restart ahead: keeps its partitions
    c.describe()
    c.heartbeat("b2", 0, topics=[t], instance="i-b", assignor="range")   # comes back: no rebalance
    c.settle(["a", "b2"])
    c.describe()
    c.heartbeat("c", 0, topics=[t], instance="i-a")                       # i-a is taken
    c.heartbeat("x", c.epochs["a"], instance="i-a")                       # not the owner of i-a
    c.heartbeat("zz", 1, instance="i-zz")                                 # unknown instance
    c.heartbeat("a", -1, instance="i-a")
    c.until("b2", lambda a: a.get("assignment", {}).get(t) == [0, 1, 2, 3])
    c.describe()


def session(c: RawClient, suffix: str) -> None:
    t = f"u-{suffix}"
    c.create_topic(t, 4)
    c.heartbeat("m1", topics=[t])
    c.heartbeat("m2", topics=[t])
    c.settle(["m1", "m2"])
    c.describe()
    # m2 stops heartbeating: its session (6 s) expires and m1 gets everything
    c.until("m1", lambda a: a.get("assignment", {}).get(t) == [0, 1, 2, 3], timeout=60)
    c.describe()
    c.heartbeat("m2")                              # fenced: unknown now


def regex(c: RawClient, suffix: str) -> None:
    a, b = f"rx-{suffix}-a", f"rx-{suffix}-b"
    c.create_topic(a, 2)
    c.create_topic(f"other-{suffix}", 1)
    pattern = f"rx-{suffix}-.*"
    c.heartbeat("m1", 0, regex=pattern, topics=None)
    c.until("m1", lambda x: bool(x.get("assignment", {}).get(a)))
    c.describe()
    c.create_topic(b, 3)                           # a new topic the expression matches
    c.until("m1", lambda x: x.get("assignment", {}).get(b) == [0, 1, 2], timeout=90)
    c.describe()
    bad = c.heartbeat("m2", 0, regex="(unclosed", topics=None, record=False)
    c.transcript.append(("bad regex", bad["error"]))


def test_join_revoke_assign_and_epochs_as_kafka(kafka: kafka44.KafkaBroker, ours: BrokerProcess) -> None:
    assert_same(both(kafka, ours, rebalance))


def test_static_members_as_kafka(kafka: kafka44.KafkaBroker, ours: BrokerProcess) -> None:
    assert_same(both(kafka, ours, static))


def test_session_expiry_as_kafka(kafka: kafka44.KafkaBroker, ours: BrokerProcess) -> None:
    assert_same(both(kafka, ours, session))


def test_regex_subscription_gains_a_new_topic_as_kafka(kafka: kafka44.KafkaBroker, ours: BrokerProcess) -> None:
    assert_same(both(kafka, ours, regex))
