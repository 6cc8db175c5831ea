"""Issue 35: a Metadata request for all topics built every partition's entry again (a look-up of
its log and its leader epoch, then a pack) on each request: 13 ms of the event loop at 10,000
partitions on a quiet machine, ~100 ms under load. Now each topic's entry is kept encoded while
the topic's metadata stays (``server/requests/metadata_entries.py``). Counted, not timed, on a
real broker (its thread's Python calls made inside the Metadata handler, ``threading.setprofile``)
asked over a raw socket: a second request for all topics looks up no partition, makes as many calls
with 40 partitions a topic as with 2, and a change rebuilds the topic changed only. The answers
stay right: after creating, growing, deleting and re-creating topics (a big one made on the
creator thread too), the answers of every version equal, byte for byte, those of the same broker
restarted (nothing kept)."""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from kafkalog.log.log import Log
from kafkalog.server.handlers.metadata import handle_metadata
from kafkalog.testing import LocalBroker
from tests.server.raw import connect, recv_frame, request_frame, response_of

VERSIONS = range(14)


class _Counter:
    """Python calls made inside ``handle_metadata`` on the broker's threads, and of them the
    look-ups of a partition's leader epoch."""

    def __init__(self) -> None:
        self.depth = 0
        self.calls = 0
        self.epochs = 0

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        code = frame.f_code
        if event == "call":
            if code is handle_metadata.__code__:
                self.depth += 1
            elif self.depth:
                self.calls += 1
                if code is Log.current_leader_epoch.__code__:
                    self.epochs += 1
        elif event == "return" and code is handle_metadata.__code__:
            self.depth -= 1

    def take(self) -> tuple[int, int]:
        out = (self.calls, self.epochs)
        self.calls = self.epochs = 0
        return out


@pytest.fixture(scope="module")
def warm() -> None:
    """What the counted tests do, done once without a profile function: the modules a broker
    imports on first use are imported here (CPython 3.11 can fail a module's compilation on a
    thread with a profile function: "AST constructor recursion depth mismatch")."""
    with LocalBroker("thread", {"auto.create.topics.enable": "false"}) as broker:
        broker.create_topic("warm", 1)
        _grow(broker, {"warm": 2})
        _metadata(broker.port)
        _metadata(broker.port, topics=["warm"])


@pytest.fixture
def counted(warm: None) -> Iterator[tuple[LocalBroker, _Counter]]:
    counter = _Counter()
    threading.setprofile(counter)       # the broker's thread, started now, inherits it
    try:
        broker = LocalBroker("thread", {"auto.create.topics.enable": "false"}).start()
    finally:
        threading.setprofile(None)      # type: ignore[arg-type]
    try:
        yield broker, counter
    finally:
        broker.close()


def _metadata(port: int, version: int = 12, topics: list[str] | None = None,
              conn: socket.socket | None = None) -> bytes:
    """The answer to a Metadata request (all topics: ``topics`` None) on ``conn`` (kept open by the
    counting tests: no connection closes while they count), else on a new connection."""
    values: dict[str, Any] = {"topics": None if topics is None else [{"name": t, "topic_id": None} for t in topics]}
    if version == 0 and topics is None:
        values["topics"] = []                   # v0: an empty array is every topic
    if version >= 4:
        values["allow_auto_topic_creation"] = False
    if version >= 8:
        values["include_topic_authorized_operations"] = False
        values["include_cluster_authorized_operations"] = False
    s = conn if conn is not None else connect(port)
    try:
        s.sendall(request_frame(3, version, 9, values))
        frame = recv_frame(s)
    finally:
        if conn is None:
            s.close()
    assert frame is not None
    return frame


def _admin(broker: LocalBroker) -> Any:
    from confluent_kafka.admin import AdminClient
    return AdminClient({"bootstrap.servers": broker.bootstrap_servers})


def _done(futures: dict[str, Any]) -> None:
    for f in futures.values():
        f.result(60)


def _grow(broker: LocalBroker, topics: dict[str, int]) -> None:
    from confluent_kafka.admin import NewPartitions
    admin = _admin(broker)              # (kept until the answers: a destroyed client fails them)
    _done(admin.create_partitions([NewPartitions(t, n) for t, n in topics.items()]))


def _partitions(frame: bytes, version: int = 12) -> dict[str, tuple[uuid.UUID | None, list[tuple[int, int]]]]:
    resp: Any = response_of(frame, 3, version)
    return {t.name: (getattr(t, "topic_id", None), [(p.partition_index, p.leader_id) for p in t.partitions])
            for t in resp.topics}


def test_a_second_metadata_for_all_topics_builds_no_partition(counted: tuple[LocalBroker, _Counter]) -> None:
    broker, counter = counted
    names = [f"m{i}" for i in range(6)]
    for t in names:
        broker.create_topic(t, 2)
    with connect(broker.port) as conn:
        _metadata(broker.port, conn=conn)
        counter.take()
        _metadata(broker.port, conn=conn)
        calls_2, epochs_2 = counter.take()
        assert epochs_2 == 0                    # every partition's entry was kept
        _grow(broker, dict.fromkeys(names, 40))
        grown = _metadata(broker.port, conn=conn)
        assert counter.take()[1] == 6 * 40      # each grown topic built again, its every partition
        assert {t: len(p) for t, (_i, p) in _partitions(grown).items()} == dict.fromkeys(names, 40)
        _metadata(broker.port, conn=conn)
        calls_40, epochs_40 = counter.take()
        # the same work for 240 partitions as for 12: nothing a partition
        assert (calls_40, epochs_40) == (calls_2, 0)
        broker.create_topic("new", 5)
        answer = _metadata(broker.port, conn=conn)
        assert counter.take()[1] == 5           # the new topic alone is built
        assert len(_partitions(answer)["new"][1]) == 5


def test_metadata_for_one_topic_costs_the_same_whatever_the_other_topics(
        counted: tuple[LocalBroker, _Counter]) -> None:
    broker, counter = counted
    broker.create_topic("asked", 3)
    for i in range(3):
        broker.create_topic(f"few-{i}", 2)
    with connect(broker.port) as conn:
        for _ in range(2):
            _metadata(broker.port, topics=["asked"], conn=conn)
            few = counter.take()
        for i in range(30):
            broker.create_topic(f"many-{i}", 10)
        for _ in range(2):
            _metadata(broker.port, topics=["asked"], conn=conn)
            many = counter.take()
    assert many == few
    assert few[1] == 0


def _answers(broker: LocalBroker) -> dict[int, bytes]:
    return {v: _metadata(broker.port, v) for v in VERSIONS}


def _check_against_restart(broker: LocalBroker) -> dict[int, bytes]:
    """The answers of every version, asked twice (the second from what was kept), equal those
    of the broker restarted on the same directory and port, which keeps nothing."""
    _answers(broker)
    warm = _answers(broker)
    broker.restart()
    assert _answers(broker) == warm
    return warm


def test_what_is_kept_follows_every_change_of_the_topics() -> None:
    with LocalBroker("thread", {"auto.create.topics.enable": "false"}) as broker:
        from confluent_kafka.admin import NewTopic
        admin = _admin(broker)
        broker.create_topic("a", 3)
        broker.create_topic("b", 2)
        before = _check_against_restart(broker)
        seen = _partitions(before[12])
        assert {t: len(p) for t, (_i, p) in seen.items()} == {"a": 3, "b": 2}

        _answers(broker)                # kept, then changed: each change is in the next answer
        _grow(broker, {"a": 5})
        assert len(_partitions(_metadata(broker.port))["a"][1]) == 5
        _done(admin.delete_topics(["b"], operation_timeout=30))
        assert set(_partitions(_metadata(broker.port))) == {"a"}
        _done(admin.create_topics([NewTopic("b", 4, 1)], operation_timeout=30))
        again = _partitions(_metadata(broker.port))["b"]
        assert len(again[1]) == 4 and again[0] != seen["b"][0]     # a new topic, a new ID
        after = _check_against_restart(broker)
        assert after != before

        # more than 64 partitions: answered once committed, made afterwards on the creator
        # thread; each answer while it is made, and after, is the answer of what exists
        _answers(broker)
        _done(admin.create_topics([NewTopic("big", 300, 1)], operation_timeout=30))
        while_made = _partitions(_metadata(broker.port))["big"][1]
        assert [p for p, _leader in while_made] == list(range(300))
        deadline = time.monotonic() + 60
        while any(n.startswith("kafkalog-creating-") for n in os.listdir(broker.data_dir)):
            assert time.monotonic() < deadline
            _metadata(broker.port)
            time.sleep(0.02)
        _check_against_restart(broker)
