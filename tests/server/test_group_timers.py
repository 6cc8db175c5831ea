"""The broker's timers cost what is due, not what is idle (the guide's "no cost grows with what is
idle"): every ``GROUP_TICK_S`` the broker runs the group coordinators' ticks, the share partitions'
lock expiry and (every ``transaction.abort.timed.out.transaction.cleanup.interval.ms``) the
transactions' timeouts. Each used to walk everything it held: every group and member of each
protocol ten times a second, every share partition's every record in flight, every transactional
id. These tests count what a tick looks at, on the coordinators themselves with a clock the test
moves: thousands of idle groups, partitions and transactions, and a tick looks at none of them
until one is touched or its time comes.

Also counted: a consumer group heartbeat does not walk the topic image while no topic changed (it
made and compared a copy of every topic's id and partition count at each heartbeat), and the
broker's image is one object while the topics stay."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from kafkalog.coordinator.group_metadata import GroupMetadataValue, MemberMetadata
from kafkalog.coordinator.producer_ids import ProducerIdManager
from kafkalog.coordinator.share_partition import SharePartition, SharePartitionConfig
from kafkalog.coordinator.share_partition_manager import ShareGroupSettings, SharePartitionManager
from kafkalog.coordinator.share_state_store import ShareStateStore
from kafkalog.coordinator.transaction_coordinator import TransactionCoordinator
from kafkalog.log.manager import LogManager
from kafkalog.record.builder import build_batch
from kafkalog.server.coordinator.classic_group import GroupCoordinator
from kafkalog.server.coordinator.consumer_group import ConsumerGroupConfig, ConsumerGroupCoordinator
from kafkalog.server.coordinator.group import Groups, TopicImage, topic_hash


class Clock:
    """Monotonic milliseconds the test moves."""

    def __init__(self, start: int = 1_000_000) -> None:
        self.now = start

    def __call__(self) -> int:
        return self.now


def counting(obj: Any, name: str) -> list[Any]:
    """Wrap ``obj.name`` (an instance's method) to note the first argument of each call."""
    seen: list[Any] = []
    original = getattr(obj, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        seen.append(args[0] if args else None)
        return original(*args, **kwargs)
    setattr(obj, name, wrapper)
    return seen


class Walks:
    """Counts the walks over a mapping (iteration, keys, values, items) in ``walks``."""

    walks = 0

    def __iter__(self) -> Iterator[str]:
        self.walks += 1
        return super().__iter__()  # type: ignore[misc]

    def keys(self) -> Any:
        self.walks += 1
        return super().keys()  # type: ignore[misc]

    def values(self) -> Any:
        self.walks += 1
        return super().values()  # type: ignore[misc]

    def items(self) -> Any:
        self.walks += 1
        return super().items()  # type: ignore[misc]


class WalkCountingGroups(Walks, Groups[Any]):
    """A coordinator's groups, their walks counted."""

    def __init__(self, groups: Groups[Any]) -> None:
        super().__init__()
        dict.update(self, groups)
        self.touched = set(groups.touched)


class WalkCounting(Walks, dict[str, Any]):
    """A dict, its walks counted."""


# --- classic groups -------------------------------------------------------------------------------

GROUPS = 5000
SESSION_MS = 10_000


def _classic(clock: Clock) -> GroupCoordinator:
    coord = GroupCoordinator(lambda _g, _v: None, clock=clock, wall_clock=clock)
    for i in range(GROUPS):
        member = MemberMetadata(f"m-{i}", "c", "/127.0.0.1", SESSION_MS, b"", b"", 30_000)
        coord.restore(f"g-{i}", GroupMetadataValue("consumer", 1, "range", f"m-{i}", (member,)))
    return coord


def test_a_classic_tick_looks_at_the_groups_due_or_touched_only() -> None:
    clock = Clock()
    coord = _classic(clock)
    groups = coord.groups = WalkCountingGroups(coord.groups)
    looked = counting(coord, "expire")
    coord.tick()                                    # restored: each looked at once, its session scheduled
    assert len(looked) == GROUPS
    looked.clear()
    for _ in range(20):                             # two seconds of ticks: nothing is due
        clock.now += 100
        coord.tick()
    assert looked == []
    assert coord.heartbeat("g-7", 1, "m-7", None) == 0
    coord.tick()
    assert [g.group_id for g in looked] == ["g-7"]  # the group a request was at
    looked.clear()
    clock.now += 100
    coord.tick()
    assert looked == []
    clock.now = 1_000_000 + SESSION_MS              # every session but g-7's (it heartbeat 2.1 s later)
    coord.tick()
    # g-7 too: its heartbeat moved its deadline later, its entry stayed (looked at, rescheduled)
    assert len(looked) == GROUPS
    assert all(not coord.groups.peek(f"g-{i}").members for i in range(GROUPS) if i != 7)
    assert coord.groups.peek("g-7").members
    looked.clear()
    clock.now += 2100
    coord.tick()
    assert [g.group_id for g in looked] == ["g-7"]
    assert not coord.groups.peek("g-7").members
    looked.clear()
    for _ in range(10):
        clock.now += 1000
        coord.tick()
    assert looked == []                             # empty groups have no timer
    assert groups.walks == 0                        # never a walk over every group


def test_a_classic_rebalance_completes_by_the_timer_with_no_request_at_the_group() -> None:
    """A join starts a rebalance the old member never rejoins: nothing but the timer is at the group
    afterwards, and the tick at the old member's session end removes it and completes the join."""
    clock = Clock()
    coord = _classic(clock)
    coord.tick()
    loop = asyncio.new_event_loop()
    try:
        fut = coord.join("g-3", "", None, "c", "/127.0.0.1", SESSION_MS, 5000, "consumer",
                         [("range", b"")], False, loop)
        assert isinstance(fut, asyncio.Future) and not fut.done()   # waits for m-3 to rejoin
        looked = counting(coord, "expire")
        clock.now += 4000
        coord.tick()
        assert [g.group_id for g in looked] == ["g-3"] and not fut.done()     # the join was at it
        looked.clear()
        clock.now = 1_000_000 + SESSION_MS - 1
        coord.tick()
        assert looked == [] and not fut.done()
        clock.now += 1                                  # m-3's session ends (every restored one's)
        coord.tick()
        assert "g-3" in {g.group_id for g in looked}
        assert fut.done() and fut.result().error_code == 0
        assert list(coord.groups.peek("g-3").members) == [fut.result().member_id]
    finally:
        loop.close()


# --- consumer groups (KIP-848) ----------------------------------------------------------------------

class CountedImage(Mapping[str, TopicImage]):
    """A topic image that counts the walks over it (iteration, keys, values, items, len)."""

    def __init__(self, topics: dict[str, TopicImage]) -> None:
        self._topics = topics
        self.walks = 0

    def __getitem__(self, name: str) -> TopicImage:
        return self._topics[name]

    def __iter__(self) -> Iterator[str]:
        self.walks += 1
        return iter(self._topics)

    def __len__(self) -> int:
        self.walks += 1
        return len(self._topics)


CONSUMER_GROUPS = 1000


def _consumer(clock: Clock, image: Mapping[str, TopicImage]) -> ConsumerGroupCoordinator:
    config = ConsumerGroupConfig(session_timeout_ms=SESSION_MS, heartbeat_interval_ms=1000)
    return ConsumerGroupCoordinator(config, lambda _g, _r: None, lambda: image, clock=clock, wall_clock=clock)


def _join(coord: ConsumerGroupCoordinator, group: str) -> Any:
    return coord.heartbeat(group, str(uuid.uuid4()), 0, None, None, 30_000, ["t-0"], None, None, [],
                           "c", "/127.0.0.1")


def test_a_consumer_group_tick_looks_at_the_groups_due_or_touched_only() -> None:
    clock = Clock()
    topics = {f"t-{i}": TopicImage(uuid.uuid4(), 4) for i in range(2000)}
    coord = _consumer(clock, CountedImage(topics))
    members = {f"g-{i}": _join(coord, f"g-{i}").member_id for i in range(CONSUMER_GROUPS)}
    groups = coord.groups = WalkCountingGroups(coord.groups)
    looked = counting(coord, "expire")
    coord.tick()
    assert len(looked) == CONSUMER_GROUPS           # each joined since the last tick
    looked.clear()
    for _ in range(20):
        clock.now += 100
        coord.tick()
    assert looked == []
    epoch = coord.groups.peek("g-5").members[members["g-5"]].member_epoch
    coord.heartbeat("g-5", members["g-5"], epoch, None, None, 30_000, None, None, None, None, "c", "/127.0.0.1")
    coord.tick()
    assert [g.group_id for g in looked] == ["g-5"]
    looked.clear()
    clock.now = 1_000_000 + SESSION_MS              # every session but g-5's
    coord.tick()
    assert len(looked) == CONSUMER_GROUPS           # g-5's entry too (rescheduled)
    assert not any(coord.groups.peek(f"g-{i}").members for i in range(CONSUMER_GROUPS) if i != 5)
    assert coord.groups.peek("g-5").members
    looked.clear()
    for _ in range(5):
        clock.now += 100
        coord.tick()
    assert looked == []
    assert groups.walks == 0


def test_a_fence_whose_write_fails_is_tried_again_after_a_backoff() -> None:
    """A session expires while the group's write fails (the disk refuses): the failure is logged,
    the member stays, and the group is looked at again TIMER_RETRY_MS later (Kafka's timer retries
    a failed operation), not at every tick and not never."""
    from kafkalog.server.coordinator.group import TIMER_RETRY_MS
    clock = Clock()
    failing = [False]

    def persist(_g: str, _r: Any) -> None:
        if failing[0]:
            raise OSError("the disk refuses")
    config = ConsumerGroupConfig(session_timeout_ms=SESSION_MS, heartbeat_interval_ms=1000)
    image = {"t-0": TopicImage(uuid.uuid4(), 4)}
    coord = ConsumerGroupCoordinator(config, persist, lambda: image, clock=clock, wall_clock=clock)
    _join(coord, "g")
    coord.tick()
    looked = counting(coord, "expire")
    failing[0] = True
    clock.now += SESSION_MS
    coord.tick()
    assert len(looked) == 1 and coord.groups.peek("g").members      # the fence failed: still there
    failing[0] = False
    for _ in range(TIMER_RETRY_MS // 100 - 1):
        clock.now += 100
        coord.tick()
    assert len(looked) == 1
    clock.now += 100
    coord.tick()
    assert len(looked) == 2 and not coord.groups.peek("g").members


def test_a_consumer_group_heartbeat_does_not_walk_an_unchanged_topic_image() -> None:
    clock = Clock()
    image = CountedImage({f"t-{i}": TopicImage(uuid.uuid4(), 4) for i in range(2000)})
    coord = _consumer(clock, image)
    joined = [_join(coord, f"g-{i}") for i in range(20)]
    image.walks = 0
    hashed, looked_up = topic_hash.cache_info().misses, topic_hash.cache_info().hits
    for i, r in enumerate(joined):
        coord.heartbeat(f"g-{i}", r.member_id, r.member_epoch, None, None, 30_000, None, None, None, None,
                        "c", "/127.0.0.1")
        coord.groups["g-0"].metadata_expired = True      # as a topic change would: the hash again
        coord.heartbeat("g-0", joined[0].member_id, joined[0].member_epoch, None, None, 30_000, None, None,
                        None, None, "c", "/127.0.0.1")
    assert image.walks == 0
    assert topic_hash.cache_info().misses == hashed      # t-0's hash kept, not packed again
    assert topic_hash.cache_info().hits >= looked_up + 20


def test_a_grown_topic_reaches_the_groups_subscribed_to_it_at_their_next_heartbeat() -> None:
    """Kafka's onMetadataUpdate: a topic grows and the groups subscribed to it bump their epoch
    and assign the new partitions at their next heartbeat; a group subscribed to another topic
    keeps its epoch; no walk over the groups when the image changes."""
    clock = Clock()
    images = {"t-0": TopicImage(uuid.uuid4(), 4), "t-1": TopicImage(uuid.uuid4(), 4)}
    current: list[Mapping[str, TopicImage]] = [dict(images)]
    config = ConsumerGroupConfig(session_timeout_ms=SESSION_MS, heartbeat_interval_ms=1000)
    coord = ConsumerGroupCoordinator(config, lambda _g, _r: None, lambda: current[0], clock=clock, wall_clock=clock)

    def beat(group: str, topic: str, r: Any = None) -> Any:
        if r is None:
            return coord.heartbeat(group, str(uuid.uuid4()), 0, None, None, 30_000, [topic], None, None, [],
                                   "c", "/127.0.0.1")
        owned = [(t, sorted(ps)) for t, ps in (r.assignment or {}).items()]
        return coord.heartbeat(group, r.member_id, r.member_epoch, None, None, 30_000, None, None, None,
                               owned, "c", "/127.0.0.1")
    a, b = beat("ga", "t-0"), beat("gb", "t-1")
    a, b = beat("ga", "t-0", a), beat("gb", "t-1", b)
    epochs = (coord.groups.peek("ga").group_epoch, coord.groups.peek("gb").group_epoch)
    groups = coord.groups = WalkCountingGroups(coord.groups)
    current[0] = {**images, "t-0": TopicImage(images["t-0"].topic_id, 8)}
    coord.topics_changed(["t-0"])
    assert groups.walks == 0
    clock.now += 5000                               # past consumer.assignment.interval.ms
    a2, b2 = beat("ga", "t-0", a), beat("gb", "t-1", b)
    assert coord.groups.peek("ga").group_epoch == epochs[0] + 1
    assert coord.groups.peek("gb").group_epoch == epochs[1]
    assert a2.member_epoch == epochs[0] + 1 and a2.assignment is not None
    assert sorted(a2.assignment[images["t-0"].topic_id]) == list(range(8))
    assert b2.member_epoch == b.member_epoch
    assert groups.walks == 0


def test_the_brokers_topic_image_is_one_object_while_the_topics_stay(tmp_path: Path) -> None:
    from kafkalog.server.broker import Broker
    from kafkalog.server.config import ServerConfig
    cfg = ServerConfig({})
    manager = LogManager(tmp_path / "data", cfg.broker, background=False)
    try:
        broker = Broker(manager, cfg, cfg.advertised("127.0.0.1", 0))
        broker.create_topic("a", 3, {})
        first = broker.topic_images()
        assert broker.topic_images() is first and first["a"].partitions == 3
        broker.create_topic("b", 2, {})
        second = broker.topic_images()
        assert second is not first and second["b"].partitions == 2 and "a" in second
        manager.add_partitions("a", 5)
        third = broker.topic_images()
        assert third is not second and third["a"].partitions == 5
        manager.delete_topic("b")
        assert "b" not in broker.topic_images()
        assert broker.topic_images() is broker.topic_images()
    finally:
        manager.close()


# --- share partitions' acquisition locks ----------------------------------------------------------

PARTITIONS = 200


@pytest.fixture()
def manager(tmp_path: Path) -> Iterator[LogManager]:
    m = LogManager(tmp_path / "data", {}, background=False)
    m.create_topic("s", PARTITIONS)
    for p in range(PARTITIONS):
        m.get_log("s", p).append(build_batch([(None, b"v%d" % i, 0) for i in range(3)]))
    yield m
    m.close()


def test_lock_expiry_looks_at_the_partitions_due_only(manager: LogManager, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    config = SharePartitionConfig(record_lock_duration_ms=30_000)
    store = ShareStateStore(manager, num_partitions=1, clock=clock)
    topic_id = uuid.uuid4()
    spm = SharePartitionManager(manager, store, lambda _t: topic_id,
                                lambda _g: ShareGroupSettings(config, "earliest"), clock=clock)
    for p in range(PARTITIONS):
        got = spm.fetch("sg", "member", "s", p, 10, 1 << 20)
        assert got.acquired == ((0, 2, 1),)
    looked: list[Any] = []
    walked: list[Any] = []
    expire, next_deadline = SharePartition.expire_locks, SharePartition.next_deadline

    def counted_expire(self: SharePartition, now: int) -> list[int]:
        looked.append(self)
        return expire(self, now)

    def counted_next_deadline(self: SharePartition) -> int | None:
        walked.append(self)                         # a walk over the partition's records in flight
        return next_deadline(self)
    monkeypatch.setattr(SharePartition, "expire_locks", counted_expire)
    monkeypatch.setattr(SharePartition, "next_deadline", counted_next_deadline)
    for _ in range(50):                              # five seconds of ticks: no lock ends
        clock.now += 100
        assert spm.expire_locks() is False
    assert looked == [] and walked == []
    spm.acknowledge("sg", "member", "s", 9, [(0, 2, [4])])      # RENEW: p9's locks end later
    clock.now = 1_000_000 + 30_000
    assert spm.expire_locks() is True
    assert len(looked) == PARTITIONS                 # each partition's entry came due
    assert spm.loaded("sg")[("s", 0)].next_fetch_offset() == 0   # available again
    assert spm.loaded("sg")[("s", 9)].next_fetch_offset() == 3   # renewed: still acquired
    looked.clear()
    clock.now += 100
    assert spm.expire_locks() is False
    assert looked == []
    clock.now = 1_000_000 + 5000 + 30_000            # the renewal's deadline
    assert spm.expire_locks() is True
    assert looked == [spm.loaded("sg")[("s", 9)]]
    assert spm.loaded("sg")[("s", 9)].next_fetch_offset() == 0


# --- transactions' timeouts -----------------------------------------------------------------------

def test_transaction_timeouts_look_at_the_transactions_due_only(tmp_path: Path) -> None:
    clock = Clock(start=1_700_000_000_000)
    m = LogManager(tmp_path / "data", {}, background=False)
    try:
        coord = TransactionCoordinator(m, ProducerIdManager(m.data_dir), clock=clock, num_partitions=1)
        m.create_topic("t", 1)
        for i in range(300):
            pid, epoch = coord.init_producer_id(f"tx-{i}", 60_000 if i else 10_000)
            coord.add_partitions_to_txn(f"tx-{i}", pid, epoch, [("t", 0)])
        txns = coord._txns = WalkCounting(coord._txns)
        looked = counting(coord, "_fence_and_abort")
        clock.now += 10_001
        assert coord.abort_timed_out_transactions() == ["tx-0"]
        assert len(looked) == 1
        clock.now += 1000
        assert coord.abort_timed_out_transactions() == []
        clock.now += 50_000
        aborted = coord.abort_timed_out_transactions()
        assert sorted(aborted) == sorted(f"tx-{i}" for i in range(1, 300))
        assert coord.abort_timed_out_transactions() == []
        assert txns.walks == 0                      # never a walk over every transactional id
    finally:
        m.close()


def test_a_timed_out_transaction_whose_abort_fails_is_tried_again(tmp_path: Path) -> None:
    """The abort of a timed-out transaction raises (the broker logs it): the next pass tries that
    transaction again, as the walk over every transactional id did."""
    clock = Clock(start=1_700_000_000_000)
    m = LogManager(tmp_path / "data", {}, background=False)
    try:
        coord = TransactionCoordinator(m, ProducerIdManager(m.data_dir), clock=clock, num_partitions=1)
        m.create_topic("t", 1)
        pid, epoch = coord.init_producer_id("tx", 10_000)
        coord.add_partitions_to_txn("tx", pid, epoch, [("t", 0)])
        abort = coord._fence_and_abort
        calls = []

        def failing_once(meta: Any) -> Any:
            calls.append(meta.transactional_id)
            if len(calls) == 1:
                raise OSError("the disk refuses")
            return abort(meta)
        coord._fence_and_abort = failing_once  # type: ignore[method-assign]
        clock.now += 10_001
        with pytest.raises(OSError):
            coord.abort_timed_out_transactions()
        assert coord.abort_timed_out_transactions() == ["tx"]
        assert calls == ["tx", "tx"] and coord.abort_timed_out_transactions() == []
    finally:
        m.close()


def test_a_groups_open_transactional_offsets_are_its_own_look_up(tmp_path: Path) -> None:
    """OffsetFetch with require_stable asks which of a group's partitions have offsets of an open
    transaction: the group's own producers are looked at, not every open transaction's."""
    from kafkalog.coordinator.offsets import OffsetsStore
    from kafkalog.log.naming import TopicPartition
    m = LogManager(tmp_path / "data", {}, background=False)
    try:
        store = OffsetsStore(m, num_partitions=1)
        for pid in range(40):
            store.commit_transactional(f"other-{pid}", {TopicPartition("t", 0): 5}, pid, 0)
        store.commit_transactional("g", {TopicPartition("t", 1): 7}, 500, 0)
        store.commit_transactional("g", {TopicPartition("t", 2): 7}, 501, 0)
        pending = store._pending = WalkCounting(store._pending)
        assert store.pending_transactional("g") == {TopicPartition("t", 1), TopicPartition("t", 2)}
        assert pending.walks == 0
        store.complete_transaction(500, frozenset({("t", 1)}), True)
        assert store.pending_transactional("g") == {TopicPartition("t", 2)}
        store.complete_transaction(501, frozenset({("t", 2)}), False)
        assert store.pending_transactional("g") == set()
        assert store.pending_transactional("other-3") == {TopicPartition("t", 0)}
        assert pending.walks == 0
    finally:
        m.close()
