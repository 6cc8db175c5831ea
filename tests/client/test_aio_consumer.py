"""AIOKafkaConsumer under a running event loop: aiokafka's calls, the loop stays responsive while a
consumer waits, and new data wakes ``async for``."""

from __future__ import annotations

import asyncio

import pytest

import kafkalog
from kafkalog.aio import AIOKafkaConsumer
from kafkalog.client import TopicPartition
from kafkalog.errors import ConsumerOffsetOutOfRangeError, IllegalStateError, InvalidConfigError

TP = TopicPartition("t", 0)


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
            waiter = asyncio.create_task(c.getone())
            await asyncio.sleep(0.05)
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
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
            waiter = asyncio.create_task(c.getone())
            await asyncio.sleep(0.05)               # its poll waits in the worker: nothing yet
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
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
            waiter = asyncio.create_task(c.getmany(timeout_ms=2000))
            await asyncio.sleep(0.05)
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
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
            waiter = asyncio.create_task(c.getone())
            await asyncio.sleep(0.05)               # its poll waits in the worker at the end
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter

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
