"""A consumer group of three members of one real client — kafka-python, aiokafka, confluent-kafka, the
Java client 3.9.1 (and 4.3.0, with ``-m slow``), cooperative-sticky confluent-kafka (and Java 4.3.0,
slow), and a mixed group (Java 4.4.0, kafka-python, confluent-kafka) — that join and leave while a
producer writes into the topic: every record is consumed once per commit boundary (each record is
covered by exactly one accepted commit of a member that consumed it; a record is consumed again only
when the member that consumed it first never committed it), and at the end the group's committed
offsets are the log end offsets. The same holds when the leaving member crashes (no LeaveGroup: its
session expires) and when the broker restarts under the members on the same data directory and port."""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.kafka44 import free_port
from tests.server.broker_process import BrokerProcess
from tests.server.group_members import MEMBERS, JavaMember, Member, MemberFactory, wait_until
from tests.server.java_client import by_client

PARTITIONS = 6
#: no initial rebalance delay; sessions down to 1 s (the crash test)
FAST_GROUPS = ["group.initial.rebalance.delay.ms=0", "group.min.session.timeout.ms=1000"]


@pytest.fixture
def broker(tmp_path) -> Iterator[BrokerProcess]:
    with BrokerProcess(str(tmp_path / "data"), FAST_GROUPS).running() as b:
        yield b


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


def _join_and_leave_while_records_flow(bootstrap: str, name: str, make: MemberFactory,
                                      leave: Callable[[Member], None]) -> tuple[list[Member], dict[int, int]]:
    """Members a and b join while a producer writes, then c; b leaves (``leave``); once a and c
    consume every partition the producer stops, and a and c stop once their commits reach the log end
    offsets. The members and the log end offsets; the committed offsets are checked too."""
    topic = group = "flow-" + name
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, PARTITIONS, 1)], operation_timeout=30).values():
        f.result(60)
    members: list[Member] = []
    feed = Feed(bootstrap, topic)
    try:
        first = make(name + "-a", bootstrap, topic, group)
        members.append(first)
        wait_until(lambda: first.consumed() > 0, "the first member consumes")
        leaving = make(name + "-b", bootstrap, topic, group)
        members.append(leaving)
        wait_until(lambda: leaving.consumed() > 0, "the second member joined and consumes")
        third = make(name + "-c", bootstrap, topic, group)
        members.append(third)
        wait_until(lambda: third.consumed() > 0, "the third member joined and consumes")
        leave(leaving)
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
    _assert_once_per_commit_boundary(bootstrap, topic, group, members, feed.acked, ends)
    return members, ends


def _assert_once_per_commit_boundary(bootstrap: str, topic: str, group: str, members: list[Member],
                                     log: dict[tuple[int, int], bytes], ends: dict[int, int]) -> None:
    """Every record of ``log`` covered by exactly one accepted commit; the group's committed offsets
    are ``ends``."""
    covered = committed_once(members, log)
    twice = sorted(k for k, n in covered.items() if n > 1)
    assert not twice, f"{len(twice)} records consumed and committed twice, e.g. {twice[:5]}"
    missing = sorted(set(log) - set(covered))
    assert not missing, f"{len(missing)} records never consumed and committed, e.g. {missing[:5]}"
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    committed = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
    c.close()
    assert {tp.partition: tp.offset for tp in committed} == ends


@pytest.mark.parametrize("client", [by_client(c) for c in MEMBERS])    # Java 4.3.0's with -m slow
def test_three_members_join_and_leave_while_records_flow(broker: BrokerProcess, client: str) -> None:
    """The leaving member commits and closes (LeaveGroup)."""
    _join_and_leave_while_records_flow(broker.bootstrap, client, MEMBERS[client], lambda m: m.stop())


def test_a_member_that_crashes_leaves_when_its_session_expires(broker: BrokerProcess) -> None:
    """The leaving member (Java 3.9.1) halts between consuming records and committing them, without
    LeaveGroup: once its session (2 s) expires, the others take its partitions and consume again
    from its last commit — the records it consumed after that commit are the only ones consumed
    twice."""
    def make(name: str, bootstrap: str, topic: str, group: str) -> Member:
        return JavaMember("3.9.1", name, bootstrap, topic, group, {"session.timeout.ms": "2000"})

    def crash(m: Member) -> None:
        assert isinstance(m, JavaMember)
        m.crash()

    members, _ends = _join_and_leave_while_records_flow(broker.bootstrap, "crash", make, crash)
    crashed = members[1]
    consumed = {(p, o) for kind, p, o, _v in crashed.events() if kind == "rec"}
    own = committed_once([crashed], {(p, o): v for kind, p, o, v in crashed.events() if kind == "rec"})
    again = consumed - set(own)
    assert again, "the crashed member consumed records it did not commit"
    others = {(p, o) for m in (members[0], members[2]) for kind, p, o, _v in m.events() if kind == "rec"}
    assert again <= others                         # consumed again by the others
    assert all(o >= crashed.committed().get(p, 0) for p, o in again)   # after its last commit


def _read_log(bootstrap: str, topic: str) -> tuple[dict[tuple[int, int], bytes], dict[int, int]]:
    """Every record of ``topic`` (partition, offset) -> value, and the log end offsets."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False})
    ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(PARTITIONS)}
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    log: dict[tuple[int, int], bytes] = {}
    deadline = time.monotonic() + 60
    while len(log) < sum(ends.values()) and time.monotonic() < deadline:
        for m in c.consume(1000, 0.5):
            p, o, v = m.partition(), m.offset(), m.value()
            assert m.error() is None and p is not None and o is not None and v is not None, m.error()
            log[(p, o)] = v
    c.close()
    assert len(log) == sum(ends.values())
    return log, ends


@pytest.mark.parametrize("client", ["confluent-kafka", pytest.param("java-3.9.1", marks=pytest.mark.slow)])
def test_members_stay_through_a_broker_restart(tmp_path, client: str) -> None:
    """Three members consume while records flow; the broker stops (SIGTERM) and starts again on the
    same data directory and port: the members rejoin, resume from the committed offsets, and every
    record is still consumed once per commit boundary."""
    port = free_port()
    data = str(tmp_path / "data")
    holder = [BrokerProcess(data, FAST_GROUPS, ["--port", str(port)]).start()]
    bootstrap = holder[0].bootstrap
    topic = group = "restart-" + client
    make = MEMBERS[client]
    members: list[Member] = []
    feed: Feed | None = None
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for f in admin.create_topics([NewTopic(topic, PARTITIONS, 1)], operation_timeout=30).values():
            f.result(60)
        feed = Feed(bootstrap, topic)
        for name in "abc":
            members.append(make(f"{client}-{name}", bootstrap, topic, group))
        wait_until(lambda: all(m.consumed() > 0 for m in members), "the three members consume")
        assert holder[0].stop() == 0, holder[0].stderr()
        holder[0] = BrokerProcess(data, FAST_GROUPS, ["--port", str(port)]).start()
        marks = [len(m.events()) for m in members]
        wait_until(lambda: set().union(*(_consumed_since(m, k) for m, k in zip(members, marks)))
                   == set(range(PARTITIONS)), "the members consume every partition after the restart")
        feed.stop()
        log, ends = _read_log(bootstrap, topic)
        assert all(log.get(k) == v for k, v in feed.acked.items())      # nothing acknowledged lost
        wait_until(lambda: {p: max(m.committed().get(p, 0) for m in members) for p in range(PARTITIONS)}
                   == ends, "the commits reach the log end offsets")
        for m in members:
            m.stop()
        _assert_once_per_commit_boundary(bootstrap, topic, group, members, log, ends)
    finally:
        for m in members:
            m.abort()
        if feed is not None:
            feed.stop()
        if holder[0].alive():
            assert holder[0].stop() == 0, holder[0].stderr()
        else:
            holder[0].kill()
