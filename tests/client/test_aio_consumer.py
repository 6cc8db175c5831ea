"""AIOKafkaConsumer under a running event loop: aiokafka's calls, the loop stays responsive while a
consumer waits, and new data wakes ``async for``."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import pytest

import kafkalog
from kafkalog.aio import AIOKafkaConsumer
from kafkalog.client import TopicPartition
from kafkalog.errors import ConsumerOffsetOutOfRangeError, IllegalStateError, InvalidConfigError

TP = TopicPartition("t", 0)


async def _leave_a_poll_in_flight(wait: Coroutine[Any, Any, Any]) -> None:
    """aiokafka's timeout pattern: ``wait`` (a ``getone`` / ``getmany``) cancelled while its poll
    waits in the worker, which keeps running it: the poll stays in flight for the next call."""
    waiter = asyncio.create_task(wait)
    await asyncio.sleep(0.05)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter


def test_aio_consumer_under_a_running_loop(tmp_path):
    d = str(tmp_path / "d")
    with kafkalog.open(d, background=False) as dl:
        dl.create_topic("t", 1)
        dl.produce_many("t", [b"v%d" % i for i in range(10)])

        async def main() -> None:
            c = AIOKafkaConsumer(dl, "t", group_id="g", auto_offset_reset="earliest",
                                 enable_auto_commit=False)
            await c.start()
            first = await c.getone()
            assert (first.offset, first.value) == (0, b"v0")
            many = await c.getmany(timeout_ms=1000, max_records=4)
            assert [r.offset for r in many[TP]] == [1, 2, 3, 4]
            assert await c.position(TP) == 5
            await c.commit()
            assert await c.committed(TP) == 5
            rest = await c.getmany(timeout_ms=1000)
            assert [r.offset for r in rest[TP]] == [5, 6, 7, 8, 9]
            # the loop keeps running while the consumer waits; an append wakes the iteration
            ticks = 0

            async def ticker() -> None:
                nonlocal ticks
                while True:
                    await asyncio.sleep(0.01)
                    ticks += 1

            async def produce_later() -> None:
                await asyncio.sleep(0.3)
                await asyncio.to_thread(dl.produce, "t", b"late", None, None, None, 0)

            tick = asyncio.create_task(ticker())
            prod = asyncio.create_task(produce_later())
            async for rec in c:
                assert rec.value == b"late"
                break
            await prod
            tick.cancel()
            assert ticks > 0
            # a cancelled wait loses nothing: the record arriving meanwhile comes next
            await _leave_a_poll_in_flight(c.getone())
            await asyncio.to_thread(dl.produce, "t", b"after-cancel", None, None, None, 0)
            nxt = await asyncio.wait_for(c.getone(), 60)
            assert nxt.value == b"after-cancel"
            c.seek(TP, 2)
            assert (await c.getone()).offset == 2
            await c.seek_to_end(TP)
            assert await c.position(TP) == 12
            assert await c.end_offsets([TP]) == {TP: 12}
            assert await c.beginning_offsets([TP]) == {TP: 0}
            await c.stop()

        asyncio.run(main())


def test_aio_consumer_opens_a_path(tmp_path):
    d = str(tmp_path / "d")
    with kafkalog.open(d, background=False) as dl:
        dl.create_topic("t", 1)
        dl.produce("t", b"x", partition=0)

    async def main() -> list:
        async with AIOKafkaConsumer(d, "t", auto_offset_reset="earliest") as c:
            got = await c.getmany(timeout_ms=5000)
            return [r.value for r in got[TP]]

    assert asyncio.run(main()) == [b"x"]


def test_aio_stop_commits_only_what_was_handed_out(tmp_path):
    with kafkalog.open(tmp_path / "d", background=False) as dl:
        dl.create_topic("t", 1)
        dl.produce_many("t", [b"v%d" % i for i in range(10)])

        async def main() -> None:
            c = AIOKafkaConsumer(dl, "t", group_id="g", auto_offset_reset="earliest")
            await c.start()
            assert (await c.getone()).offset == 0
            assert (await c.getone()).offset == 1
            await c.stop()                       # auto-commit on close: 2, not the 10 fetched

        asyncio.run(main())
        assert dl.consumer("t", group_id="g").committed(TP) == 2


def test_aio_seek_after_a_cancelled_wait(tmp_path):
    """aiokafka's pattern: a ``getone`` cancelled (a timeout) while its poll waits in the worker,
    records arrive and that poll reads them, then a seek. The records the poll read from the old
    position are not handed out, its advance does not undo the seek: position and the records
    follow the seek (the poll's records were handed out first, from offset 0)."""
    with kafkalog.open(tmp_path / "d", background=False) as dl:
        dl.create_topic("t", 1)

        async def main() -> None:
            c = AIOKafkaConsumer(dl, auto_offset_reset="earliest", enable_auto_commit=False)
            await c.start()
            c.assign([TP])
            await _leave_a_poll_in_flight(c.getone())  # its poll waits in the worker: nothing yet
            await asyncio.to_thread(dl.produce_many, "t", [b"v%d" % i for i in range(10)])
            await asyncio.sleep(0.3)                # the poll still in flight reads 0..9
            with pytest.raises(InvalidConfigError):
                c.seek(TP, -1)                      # refused at once, as without a poll
            with pytest.raises(IllegalStateError):
                c.seek(TopicPartition("t", 9), 0)
            c.seek(TP, 5)
            assert await c.position(TP) == 5
            assert [(await c.getone()).offset for _ in range(5)] == [5, 6, 7, 8, 9]
            c.seek(TP, 8)                           # no poll in flight: at once
            assert (await c.getone()).offset == 8
            assert (await c.getone()).offset == 9
            await _leave_a_poll_in_flight(c.getmany(timeout_ms=2000))
            await c.seek_to_beginning(TP)            # a poll in flight again, then a reset
            assert await c.position(TP) == 0
            assert (await c.getone()).offset == 0
            await c.stop()

        asyncio.run(main())


def test_aio_poll_failing_in_flight(tmp_path):
    """A poll left in flight by a cancelled wait fails (its position past the log end once the
    log was truncated, ``auto_offset_reset="none"``): its error is raised once, by the next
    ``getone`` (as aiokafka raises a fetch's error), not by the calls between, nor forever."""
    with kafkalog.open(tmp_path / "d", background=False) as dl:
        dl.create_topic("t", 1)
        for i in range(10):
            dl.produce("t", b"v%d" % i, partition=0)        # (a batch each: truncated at 5)

        async def main() -> None:
            c = AIOKafkaConsumer(dl, auto_offset_reset="none", enable_auto_commit=False)
            await c.start()
            c.assign([TP])
            c.seek(TP, 10)
            await _leave_a_poll_in_flight(c.getone())  # its poll waits in the worker at the end

            def truncate_and_append() -> None:
                dl.manager.get_log("t", 0).truncate_to(5)
                dl.produce("t", b"wake", partition=0)   # (wakes the poll: 10 is past the end, 6)
            await asyncio.to_thread(truncate_and_append)
            await asyncio.sleep(0.3)
            assert await c.end_offsets([TP]) == {TP: 6}          # settles the failed poll
            with pytest.raises(ConsumerOffsetOutOfRangeError):
                await c.getone()
            c.seek(TP, 0)
            assert [(await c.getone()).value for _ in range(6)] == [b"v0", b"v1", b"v2", b"v3",
                                                                     b"v4", b"wake"]
            await c.stop()

        asyncio.run(main())


P0, P1 = TopicPartition("t", 0), TopicPartition("t", 1)


def _two_partitions(dl) -> None:
    dl.create_topic("t", 2)
    dl.produce_many("t", [b"a%d" % i for i in range(10)], partition=0)
    dl.produce_many("t", [b"b%d" % i for i in range(10)], partition=1)


def test_aio_assign_keeps_what_was_fetched_of_the_partitions_it_keeps(tmp_path):
    """A poll fetches every record of both partitions and one is handed out; a new assignment
    keeping one partition hands out the rest of that partition next, none skipped (the consumer's
    position is already past what was fetched: dropping it lost those records)."""
    with kafkalog.open(tmp_path / "d", background=False) as dl:
        _two_partitions(dl)

        async def main() -> None:
            c = AIOKafkaConsumer(dl, auto_offset_reset="earliest", enable_auto_commit=False)
            await c.start()
            c.assign([P0, P1])
            first = await c.getone()
            kept = TopicPartition(first.topic, first.partition)
            other = P1 if kept == P0 else P0
            c.assign([kept])
            got = await c.getmany(timeout_ms=500)
            assert set(got) == {kept}
            assert [r.offset for r in got[kept]] == list(range(1, 10))
            assert await c.position(kept) == 10
            c.assign([kept, other])             # the dropped one starts again where it was
            got = await c.getmany(timeout_ms=1000)
            assert [r.offset for r in got[other]] == list(range(10))
            await c.stop()

        asyncio.run(main())


def test_aio_assign_while_a_cancelled_waits_poll_runs(tmp_path):
    """A poll left in flight by a cancelled wait reads records of a partition the application
    then unassigns: they are not handed out, after ``assign`` nor after ``unsubscribe``."""
    with kafkalog.open(tmp_path / "d", background=False) as dl:
        dl.create_topic("t", 2)

        async def main() -> None:
            c = AIOKafkaConsumer(dl, auto_offset_reset="earliest", enable_auto_commit=False)
            await c.start()
            c.assign([P0])
            await _leave_a_poll_in_flight(c.getone())
            await asyncio.to_thread(lambda: dl.produce_many("t", [b"a%d" % i for i in range(5)], partition=0))
            await asyncio.sleep(0.3)                # the poll in flight reads P0's 0..4
            c.assign([P1])
            assert c.assignment() == {P1}
            await asyncio.to_thread(lambda: dl.produce_many("t", [b"b%d" % i for i in range(3)], partition=1))
            got = await c.getmany(timeout_ms=1000)
            assert set(got) == {P1}
            assert [r.value for r in got[P1]] == [b"b0", b"b1", b"b2"]
            await _leave_a_poll_in_flight(c.getone())
            await asyncio.to_thread(lambda: dl.produce_many("t", [b"b%d" % i for i in range(3, 6)], partition=1))
            await asyncio.sleep(0.3)                # the poll in flight reads P1's 3..5
            c.unsubscribe()
            c.assign([P0])                          # from P0's start again: nothing was consumed
            got = await c.getmany(timeout_ms=1000)
            assert set(got) == {P0}
            assert [r.offset for r in got[P0]] == [0, 1, 2, 3, 4]
            await c.stop()

        asyncio.run(main())


def test_aio_paused_partition_hands_out_nothing(tmp_path):
    """Records fetched before a ``pause`` are not handed out until ``resume`` (aiokafka: getmany
    returns no record of a paused partition), and none is lost."""
    with kafkalog.open(tmp_path / "d", background=False) as dl:
        _two_partitions(dl)

        async def main() -> None:
            c = AIOKafkaConsumer(dl, auto_offset_reset="earliest", enable_auto_commit=False)
            await c.start()
            c.assign([P0, P1])
            first = await c.getone()
            paused = TopicPartition(first.topic, first.partition)
            other = P1 if paused == P0 else P0
            c.pause(paused)
            got = await c.getmany(timeout_ms=300)
            assert set(got) == {other}
            assert await c.getmany(timeout_ms=300) == {}
            c.resume(paused)
            got = await c.getmany(timeout_ms=500)
            assert [r.offset for r in got[paused]] == list(range(1, 10))
            await c.stop()

        asyncio.run(main())


def test_aio_subscribe_elsewhere_hands_out_nothing_more_of_the_old_topics(tmp_path):
    """What was fetched of a topic and not handed out is dropped when the subscription no longer
    names it (by name or by pattern), as a rebalance revokes its partitions."""
    with kafkalog.open(tmp_path / "d", background=False) as dl:
        _two_partitions(dl)
        dl.create_topic("u", 1)
        dl.produce_many("u", [b"u%d" % i for i in range(3)])

        async def main() -> None:
            c = AIOKafkaConsumer(dl, "t", group_id="g", auto_offset_reset="earliest",
                                 enable_auto_commit=False)
            await c.start()
            assert (await c.getone()).topic == "t"
            c.subscribe(["u"])
            got = await c.getmany(timeout_ms=1000)
            assert {tp.topic for tp in got} == {"u"}
            assert [r.value for r in got[TopicPartition("u", 0)]] == [b"u0", b"u1", b"u2"]
            c.subscribe(pattern="t|u")
            got = await c.getmany(timeout_ms=1000)
            assert {tp.topic for tp in got} == {"t"}        # from the start: nothing committed
            assert sum(len(v) for v in got.values()) == 20
            await c.stop()

        asyncio.run(main())


def test_aio_assign_made_across_the_polls_rebalance(tmp_path, monkeypatch):
    """The poll in flight rebalances the old pattern subscription (a topic created meanwhile):
    it has read that subscription when the application unsubscribes and assigns another
    partition, and it sets its assignment after them. Once the poll ends the application's
    assignment is made again: only the assigned partition's records are handed out (before, the
    consumer went on fetching the old subscription's partitions)."""
    import threading

    from kafkalog.client.consumer import Consumer

    entered, release = threading.Event(), threading.Event()
    armed = [False]
    original = Consumer._set_assignment

    def held(self, tps):                    # the worker, between reading and setting
        if armed[0] and threading.current_thread() is not threading.main_thread():
            armed[0] = False
            entered.set()
            release.wait(10)
        return original(self, tps)
    monkeypatch.setattr(Consumer, "_set_assignment", held)
    u0 = TopicPartition("u", 0)
    with kafkalog.open(tmp_path / "d", background=False) as dl:
        dl.create_topic("t", 1)
        dl.produce_many("t", [b"t0", b"t1"])
        dl.create_topic("u", 1)
        dl.produce_many("u", [b"u0", b"u1"])

        async def main() -> None:
            c = AIOKafkaConsumer(dl, group_id="g", auto_offset_reset="earliest",
                                 enable_auto_commit=False)
            await c.start()
            c.subscribe(pattern="t.*")
            got = await c.getmany(timeout_ms=1000)
            assert [r.value for r in got[TP]] == [b"t0", b"t1"]
            armed[0] = True

            def make_t2() -> None:
                dl.create_topic("t2", 1)
                dl.produce_many("t2", [b"x0", b"x1"])
            await asyncio.to_thread(make_t2)
            waiter = asyncio.create_task(c.getone())
            assert await asyncio.to_thread(entered.wait, 10)    # its poll's rebalance, held
            waiter.cancel()                         # (the poll stays in flight)
            with pytest.raises(asyncio.CancelledError):
                await waiter
            c.unsubscribe()
            c.assign([u0])
            release.set()
            got = await c.getmany(timeout_ms=1000)
            assert c.assignment() == {u0}
            assert {tp: [r.value for r in recs] for tp, recs in got.items()} == {u0: [b"u0", b"u1"]}
            assert await c.getmany(timeout_ms=300) == {}
            await c.stop()

        asyncio.run(main())



def test_aio_partition_assigned_away_and_back_while_a_poll_runs(tmp_path):
    """While a poll a cancelled wait left is in flight, a partition is assigned away and back (a
    new position of its own), then records arrive and that poll reads them from the new position:
    they are not lost. Before, they were dropped as the old assignment's while the new position
    stayed past them."""
    with kafkalog.open(tmp_path / "d", background=False) as dl:
        dl.create_topic("t", 2)

        async def main() -> None:
            c = AIOKafkaConsumer(dl, auto_offset_reset="earliest", enable_auto_commit=False)
            await c.start()
            c.assign([P0])
            await _leave_a_poll_in_flight(c.getone())  # its poll waits in the worker: nothing yet
            c.assign([P1])
            c.assign([P0])
            await asyncio.to_thread(lambda: dl.produce_many("t", [b"a%d" % i for i in range(5)],
                                                            partition=0))
            await asyncio.sleep(0.3)                # the poll in flight reads them
            got = await c.getmany(timeout_ms=1000)
            assert {tp: [r.offset for r in recs] for tp, recs in got.items()} == {P0: [0, 1, 2, 3, 4]}
            await c.stop()

        asyncio.run(main())
