"""``AIOKafkaProducer``: the embedded producer in aiokafka's shape.

::

    producer = AIOKafkaProducer(dl, linger_ms=5)          # a DataLog (or a data directory path)
    await producer.start()
    fut = await producer.send("orders", b"payload", key=b"k")   # an asyncio future
    md = await fut                                               # RecordMetadata
    md = await producer.send_and_wait("orders", b"more")
    await producer.stop()

Every call that may touch files (creating a topic, appending a batch, producer ids, transaction
markers) runs on the producer's own single worker thread, in call order, never on the event loop;
the record futures resolve on the loop. The configuration is Kafka's, as for
:meth:`kafkalog.client.datalog.DataLog.producer`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Self, TypeVar

from kafkalog.client.datalog import DataLog
from kafkalog.client.datalog import open as open_data_log
from kafkalog.client.producer import IllegalStateError, Producer
from kafkalog.client.producer_future import FutureRecordMetadata, RecordMetadata

__all__ = ["AIOKafkaProducer"]

T = TypeVar("T")


class AIOKafkaProducer:
    """An asyncio producer over ``datalog``: a :class:`DataLog` or a data directory path (opened on
    :meth:`start` and closed on :meth:`stop`), first, as for :class:`AIOKafkaConsumer` and the
    sync client's ``Producer(datalog, conf)``."""

    def __init__(self, datalog: DataLog | str | os.PathLike, conf: Mapping[str, Any] | None = None,
                 **config: Any) -> None:
        self._target = datalog
        self._conf = dict(conf or {})
        self._config = config
        self._dl: DataLog | None = None
        self._owns_dl = False
        self._producer: Producer | None = None
        self._worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kafkalog-aio-producer")
        self._loop: asyncio.AbstractEventLoop | None = None

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._worker, fn, *args)

    def _p(self) -> Producer:
        if self._producer is None:
            raise IllegalStateError("AIOKafkaProducer is not started (await start() first) or stopped")
        return self._producer

    async def start(self) -> None:
        """Open the data directory (when a path was given) and create the producer (with a
        ``transactional.id``: and get its producer id and epoch, as aiokafka does)."""
        if self._producer is not None:
            return
        self._loop = asyncio.get_running_loop()

        def make() -> Producer:
            if isinstance(self._target, DataLog):
                self._dl = self._target
            else:
                self._dl = open_data_log(self._target)
                self._owns_dl = True
            p = self._dl.producer(self._conf, **self._config)
            if p.config["transactional.id"] is not None:
                p.init_transactions()          # aiokafka initializes transactions in start()
            return p

        self._producer = await self._call(make)

    async def stop(self) -> None:
        """Append what is open, close the producer (and the directory when opened by :meth:`start`)."""
        p = self._producer
        if p is None:
            return
        self._producer = None

        def close() -> None:
            p.close()
            if self._owns_dl and self._dl is not None:
                self._dl.close()

        await self._call(close)
        self._worker.shutdown(wait=True)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _bridge(self, fut: FutureRecordMetadata) -> asyncio.Future[RecordMetadata]:
        loop = self._loop
        assert loop is not None
        out: asyncio.Future[RecordMetadata] = loop.create_future()

        def settle(f: FutureRecordMetadata) -> None:
            if out.done():
                return
            err = f.exception
            if err is not None:
                out.set_exception(err)
            else:
                md = f.value
                assert md is not None
                out.set_result(md)

        def done(f: FutureRecordMetadata) -> None:
            loop.call_soon_threadsafe(settle, f)

        fut.add_done_callback(done)
        return out

    async def send(self, topic: str, value: Any = None, key: Any = None, partition: int | None = None,
                   timestamp_ms: int | None = None, headers: Any = None) -> asyncio.Future[RecordMetadata]:
        """Add one record; returns an asyncio future of its :class:`RecordMetadata`."""
        p = self._p()
        fut = await self._call(lambda: p.send(topic, value, key, partition=partition,
                                              timestamp_ms=timestamp_ms, headers=headers))
        return self._bridge(fut)

    async def send_and_wait(self, topic: str, value: Any = None, key: Any = None,
                            partition: int | None = None, timestamp_ms: int | None = None,
                            headers: Any = None) -> RecordMetadata:
        """``send`` and wait for the record to be appended."""
        fut = await self.send(topic, value, key, partition, timestamp_ms, headers)
        return await fut

    async def flush(self) -> None:
        """Append everything sent so far."""
        await self._call(self._p().flush)

    async def partitions_for(self, topic: str) -> set[int]:
        return await self._call(self._p().partitions_for, topic)

    # --- transactions (aiokafka's names) --------------------------------------------------------

    async def begin_transaction(self) -> None:
        await self._call(self._p().begin_transaction)

    async def commit_transaction(self) -> None:
        await self._call(self._p().commit_transaction)

    async def abort_transaction(self) -> None:
        await self._call(self._p().abort_transaction)

    async def send_offsets_to_transaction(self, offsets: Mapping[Any, Any], group_id: Any) -> None:
        await self._call(self._p().send_offsets_to_transaction, offsets, group_id)

    def transaction(self) -> _Transaction:
        """``async with producer.transaction():`` begins, then commits (or aborts on an error)."""
        return _Transaction(self)


class _Transaction:
    def __init__(self, producer: AIOKafkaProducer) -> None:
        self._producer = producer

    async def __aenter__(self) -> None:
        await self._producer.begin_transaction()

    async def __aexit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        end: Callable[[], Awaitable[None]] = (self._producer.commit_transaction if exc_type is None
                                              else self._producer.abort_transaction)
        await end()
