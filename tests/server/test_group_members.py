"""A consumer group of three members of one real client — kafka-python, aiokafka, confluent-kafka,
the Java client 3.9.1 and 4.3.0 — that join and leave while a producer writes into the topic: every
record is consumed once per commit boundary (each record is covered by exactly one accepted commit of
the member that consumed it; a record is consumed again only when the member that consumed it first
never committed it), and at the end the group's committed offsets are the log end offsets."""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.server.broker_process import BrokerProcess
from tests.server.group_members import MEMBERS, Member, wait_until

PARTITIONS = 6
FAST_GROUPS = ["group.initial.rebalance.delay.ms=0"]


@pytest.fixture
def broker(tmp_path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(str(tmp_path / "data"), FAST_GROUPS).start()
    try:
        yield b
    finally:
        if b.alive():
            assert b.stop() == 0, b.stderr()
        else:
            b.kill()


class Feed:
    """A producer writing ``r<i>`` round-robin into the partitions until :meth:`stop`; remembers what
    was acknowledged where."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.acked: dict[tuple[int, int], bytes] = {}
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="feed", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        def on_delivery(err, msg) -> None:
            if err is not None:
                self.errors.append(str(err))
            else:
                self.acked[(msg.partition(), msg.offset())] = msg.value()

        p = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
                      "linger.ms": 5})
        i = 0
        while not self._stop.is_set():
            for _ in range(PARTITIONS * 4):
                p.produce(self.topic, value=b"r%d" % i, partition=i % PARTITIONS, on_delivery=on_delivery)
                i += 1
            p.flush(30)
            self._stop.wait(0.05)         # a steady trickle, not a flood
        if p.flush(30) != 0:
            self.errors.append("records left unacknowledged")

    def stop(self) -> dict[int, int]:
        """Stop writing; the log end offset of every partition."""
        self._stop.set()
        self._thread.join(60)
        assert not self._thread.is_alive() and not self.errors, self.errors
        ends: dict[int, int] = {}
        for p, o in self.acked:
            ends[p] = max(ends.get(p, 0), o + 1)
        return ends


def committed_once(members: list[Member], acked: dict[tuple[int, int], bytes]) -> Counter[tuple[int, int]]:
    """How many accepted commits cover each (partition, offset): a member's commit of offset O of P
    covers the records of P below O that this member consumed since its previous commit of P."""
    covered: Counter[tuple[int, int]] = Counter()
    for m in members:
        pending: dict[int, set[int]] = defaultdict(set)
        for kind, p, o, value in m.events():
            if kind == "rec":
                assert acked.get((p, o)) == value, f"{m.name} consumed {value!r} at {p}/{o}"
                pending[p].add(o)
            else:
                done = {x for x in pending[p] if x < o}
                pending[p] -= done
                covered.update((p, x) for x in done)
    return covered


def _consumed_since(m: Member, mark: int) -> set[int]:
    return {p for kind, p, _o, _v in m.events()[mark:] if kind == "rec"}


@pytest.mark.parametrize("client", list(MEMBERS))
def test_three_members_join_and_leave_while_records_flow(broker: BrokerProcess, client: str) -> None:
    topic = group = "flow-" + client
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic(topic, PARTITIONS, 1)], operation_timeout=30).values():
        f.result(60)
    make = MEMBERS[client]
    members: list[Member] = []
    feed = Feed(broker.bootstrap, topic)
    try:
        first = make(client + "-a", broker.bootstrap, topic, group)
        members.append(first)
        wait_until(lambda: first.consumed() > 0, "the first member consumes")
        leaving = make(client + "-b", broker.bootstrap, topic, group)
        members.append(leaving)
        wait_until(lambda: leaving.consumed() > 0, "the second member joined and consumes")
        third = make(client + "-c", broker.bootstrap, topic, group)
        members.append(third)
        wait_until(lambda: third.consumed() > 0, "the third member joined and consumes")
        leaving.stop()                                  # commits and leaves (LeaveGroup)
        marks = len(first.events()), len(third.events())
        wait_until(lambda: _consumed_since(first, marks[0]) | _consumed_since(third, marks[1])
                   == set(range(PARTITIONS)), "the two left consume every partition")
        ends = feed.stop()
        assert sorted(ends) == list(range(PARTITIONS))
        assert all(sorted(o for p_, o in feed.acked if p_ == p) == list(range(end))
                   for p, end in ends.items())

        def caught_up() -> bool:
            done = {p: max(m.committed().get(p, 0) for m in members) for p in range(PARTITIONS)}
            return done == ends

        wait_until(caught_up, "the commits reach the log end offsets")
        first.stop()
        third.stop()
    finally:
        for m in members:
            m.abort()
        feed.stop()
    covered = committed_once(members, feed.acked)
    twice = sorted(k for k, n in covered.items() if n > 1)
    assert not twice, f"{len(twice)} records consumed and committed twice, e.g. {twice[:5]}"
    missing = sorted(set(feed.acked) - set(covered))
    assert not missing, f"{len(missing)} records never consumed and committed, e.g. {missing[:5]}"
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    committed = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
    c.close()
    assert {tp.partition: tp.offset for tp in committed} == ends
