"""The asyncio form: ``async with kafkalog.testing.async_broker() as b:``. The broker runs on its
own thread (or process) as in the other forms, never on the test's event loop, so a client that
blocks the loop cannot stall it; every call that waits is a coroutine here (run on a worker
thread), the rest is the same object (:attr:`AsyncBroker.sync`)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from kafkalog.client import ConsumerRecord, TopicPartition
from kafkalog.testing.faults import Fault, Hold
from kafkalog.testing.local_broker import LocalBroker


class AsyncFault:
    """A :class:`~kafkalog.testing.faults.Fault` whose waits are coroutines."""

    def __init__(self, fault: Fault) -> None:
        self.sync = fault

    async def wait(self, taken: int = 1, timeout: float = 30.0) -> AsyncFault:
        await asyncio.to_thread(self.sync.wait, taken, timeout)
        return self

    async def cancel(self) -> None:
        await asyncio.to_thread(self.sync.cancel)

    async def taken(self) -> int:
        return await asyncio.to_thread(lambda: self.sync.taken)

    async def __aenter__(self) -> AsyncFault:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.sync.__exit__, None, None, None)


class AsyncHold(AsyncFault):
    sync: Hold

    async def wait_held(self, held: int = 1, timeout: float = 30.0) -> AsyncHold:
        await asyncio.to_thread(self.sync.wait_held, held, timeout)
        return self

    async def release(self) -> None:
        await asyncio.to_thread(self.sync.release)


class AsyncBroker:
    """A :class:`~kafkalog.testing.local_broker.LocalBroker` for asyncio tests."""

    def __init__(self, broker: LocalBroker) -> None:
        self.sync = broker

    @property
    def bootstrap_servers(self) -> str:
        return self.sync.bootstrap_servers

    @property
    def data_dir(self) -> str:
        return self.sync.data_dir

    async def start(self) -> AsyncBroker:
        await asyncio.to_thread(self.sync.start)
        return self

    async def stop(self) -> bool:
        return await asyncio.to_thread(self.sync.stop)

    async def crash(self) -> None:
        await asyncio.to_thread(self.sync.crash)

    async def restart(self, crash: bool = False) -> AsyncBroker:
        await asyncio.to_thread(self.sync.restart, crash)
        return self

    async def close(self) -> None:
        await asyncio.to_thread(self.sync.close)

    async def create_topic(self, name: str | None = None, partitions: int = 1,
                           config: Mapping[str, Any] | None = None) -> str:
        return await asyncio.to_thread(self.sync.create_topic, name, partitions, config)

    async def records(self, topic: str, partition: int | None = None, *,
                      isolation: str = "read_uncommitted") -> list[ConsumerRecord]:
        return await asyncio.to_thread(self.sync.records, topic, partition, isolation=isolation)

    async def committed(self, group: str) -> dict[TopicPartition, int]:
        return await asyncio.to_thread(self.sync.committed, group)

    async def wait_for_records(self, topic: str, count: int, timeout: float = 30.0, *,
                               isolation: str = "read_uncommitted") -> list[ConsumerRecord]:
        return await asyncio.to_thread(self.sync.wait_for_records, topic, count, timeout, isolation=isolation)

    async def fail(self, api: str | int, error: str | int, count: int | None = 1, **options: Any) -> AsyncFault:
        return AsyncFault(await asyncio.to_thread(lambda: self.sync.fail(api, error, count, **options)))

    async def delay(self, api: str | int, seconds: float, count: int | None = 1, **options: Any) -> AsyncFault:
        return AsyncFault(await asyncio.to_thread(lambda: self.sync.delay(api, seconds, count, **options)))

    async def drop(self, api: str | int, count: int | None = 1, **options: Any) -> AsyncFault:
        return AsyncFault(await asyncio.to_thread(lambda: self.sync.drop(api, count, **options)))

    async def hold(self, api: str | int, count: int | None = 1, **options: Any) -> AsyncHold:
        return AsyncHold(await asyncio.to_thread(lambda: self.sync.hold(api, count, **options)))

    async def __aenter__(self) -> AsyncBroker:
        if not self.sync.running:
            await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def async_broker(mode: str = "thread", config: Mapping[str, Any] | None = None, **options: Any) -> AsyncBroker:
    """``async with kafkalog.testing.async_broker() as b:`` (arguments as
    :func:`kafkalog.testing.broker`)."""
    return AsyncBroker(LocalBroker(mode, config, **options))


__all__ = ["AsyncBroker", "AsyncFault", "AsyncHold", "async_broker"]
