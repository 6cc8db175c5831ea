"""A long-polling Fetch watches its partitions a slice at a time (issue 35: at 100,000 partitions
registering the waiters in one step held the event loop 64 ms on a quiet machine, removing them 25
ms), so its read and its watch are steps of the event loop apart: an append made in between wakes
no one. The watch compares each partition's high watermark with the one its read found and wakes
the fetch at once when it moved. On a real broker's logs (in process), with slices of 2 partitions:
an append between the read and the watch wakes the fetch, one after the watch wakes it through the
append's notification, none leaves it waiting; no waiter outlives the fetch, even when the watch's
removal is cancelled half-way."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kafkalog.log.naming import TopicPartition
from kafkalog.record.builder import build_batch
from kafkalog.server.handlers import fetch
from kafkalog.server.handlers.slices import run_now

PARTITIONS = 5


@pytest.fixture
def broker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    from kafkalog.log.manager import LogManager
    from kafkalog.server.broker import Broker
    from kafkalog.server.config import ServerConfig
    monkeypatch.setattr(fetch, "ENTRIES_PER_SLICE", 2)         # three slices of the five partitions
    cfg = ServerConfig({})
    manager = LogManager(tmp_path / "data", cfg.broker, background=False)
    try:
        b = Broker(manager, cfg, cfg.advertised("127.0.0.1", 0))
        b.create_topic("t", PARTITIONS, {})
        yield b
    finally:
        manager.close()


def _wanted() -> list[Any]:
    return [fetch._Wanted("t", "t", i, 0, 1 << 20) for i in range(PARTITIONS)]


def _watch(broker: Any, marks: list[int]) -> tuple[asyncio.Future[None], list[TopicPartition], int]:
    fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    watched: list[TopicPartition] = []
    done = [0]
    steps = fetch._watch_steps(broker, _wanted(), marks, watched, fut, done)
    slices = sum(1 for _ in steps)
    assert slices == 3 and done[0] == PARTITIONS
    assert watched == [TopicPartition("t", i) for i in range(PARTITIONS)]
    return fut, watched, slices


def test_an_append_between_the_read_and_the_watch_wakes_the_fetch(broker: Any) -> None:
    async def run() -> None:
        marks = [0] * PARTITIONS                    # the read found every partition empty
        broker.log("t", 4).append(build_batch([(None, b"meanwhile", 0)]))   # before the watch
        fut, watched, _ = _watch(broker, marks)
        assert fut.done()
        await fetch._unwatch(broker, watched, fut)
        assert broker._waiters == {}
    asyncio.run(run())


def test_without_an_append_the_fetch_waits_until_one_is_notified(broker: Any) -> None:
    async def run() -> None:
        fut, watched, _ = _watch(broker, [0] * PARTITIONS)
        assert not fut.done()
        assert set(broker._waiters) == set(watched)
        broker.log("t", 3).append(build_batch([(None, b"later", 0)]))
        broker.notify_append(TopicPartition("t", 3))
        assert fut.done()
        await fetch._unwatch(broker, watched, fut)
        assert broker._waiters == {}
    asyncio.run(run())


def test_a_mark_that_matches_the_log_is_no_wake(broker: Any) -> None:
    async def run() -> None:
        for i in range(PARTITIONS):
            broker.log("t", i).append(build_batch([(None, b"read", 0)]))
        fut, watched, _ = _watch(broker, [1] * PARTITIONS)      # the read saw those records
        assert not fut.done()
        await fetch._unwatch(broker, watched, fut)
    asyncio.run(run())


def test_a_removal_cancelled_half_way_leaves_no_waiter(broker: Any) -> None:
    async def run() -> None:
        fut, watched, _ = _watch(broker, [0] * PARTITIONS)
        task = asyncio.get_running_loop().create_task(fetch._unwatch(broker, watched, fut))
        await asyncio.sleep(0)                      # the first slice removed, then cancelled
        assert broker._waiters and len(broker._waiters) < PARTITIONS
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert broker._waiters == {}
    asyncio.run(run())


def test_one_slice_is_watched_at_once(broker: Any) -> None:
    async def run() -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        watched: list[TopicPartition] = []
        done = [0]
        run_now(fetch._watch_steps(broker, _wanted()[:2], [0, 0], watched, fut, done))
        assert done[0] == 2 and not fut.done()
        await fetch._unwatch(broker, watched, fut)
        assert broker._waiters == {}
    asyncio.run(run())
