"""``AIOKafkaConsumer``: the embedded consumer in aiokafka's shape::

    consumer = AIOKafkaConsumer(dl, "orders", group_id="billing", auto_offset_reset="earliest")
    await consumer.start()
    async for record in consumer:          # waits for new data without blocking the loop
        ...
    await consumer.stop()

Every file operation of the wrapped :class:`~kafkalog.client.consumer.Consumer` runs in one worker
thread of its own (the consumer is not thread-safe, the worker serialises it), so the event loop never
waits on disk. A waiting ``getone``/``getmany`` cancelled by the loop loses no record: the worker's
poll stays in flight and the next call returns what it fetched.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Self, TypeVar

from kafkalog.client.consumer import (
    Consumer,
    ConsumerRecord,
    IllegalStateError,
    OffsetAndTimestamp,
    TopicPartition,
    TopicPartitionLike,
)
from kafkalog.client.datalog import DataLog
from kafkalog.client.datalog import open as open_datalog

__all__ = ["AIOKafkaConsumer"]

T = TypeVar("T")
#: longest single wait of the worker, so stop() is never behind a long poll for long
_WAIT_SLICE_MS = 500.0


class AIOKafkaConsumer:
    """aiokafka's consumer over an embedded data directory.

    Args:
        datalog: a :class:`~kafkalog.client.DataLog`, or a data directory path (then opened on
            :meth:`start` and closed on :meth:`stop`): first, as for :class:`AIOKafkaProducer` and
            the sync client's ``Consumer(datalog, *topics)``.
        *topics: topics to subscribe to (or use :meth:`subscribe` / :meth:`assign`).
        conf: Kafka's dotted configuration keys; ``**config``: the same with underscores.
    """

    def __init__(self, datalog: DataLog | str | os.PathLike[str], *topics: str,
                 conf: Mapping[str, Any] | None = None, loop: Any = None, **config: Any) -> None:
        self._topics = topics
        self._datalog_arg = datalog
        self._conf = conf
        self._config = config
        self._consumer: Consumer | None = None
        self._owned: DataLog | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._pending: dict[TopicPartition, list[ConsumerRecord]] = {}
        self._inflight: asyncio.Future[dict[TopicPartition, list[ConsumerRecord]]] | None = None
        #: seeks made while a poll was in flight (it moves positions in the worker): made once it
        #: has ended, its records of those partitions dropped (:meth:`_settle`)
        self._seeks: dict[TopicPartition, int] = {}
        #: partitions that left the assignment while a poll was in flight: none of its records
        #: of them is handed out (:meth:`_settle`)
        self._revoked: set[TopicPartition] = set()
        #: the assignment an ``assign`` or ``unsubscribe`` made while a poll was in flight: made
        #: again once it ends if that poll's rebalance of the old subscription overwrote it
        self._intended: set[TopicPartition] | None = None
        #: the error of such a poll, for the next getone / getmany
        self._poll_error: BaseException | None = None
        self._closed = False

    # --- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        if self._consumer is not None:
            return
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kafkalog-aio-consumer")

        def create() -> Consumer:
            dl = self._datalog_arg
            if not isinstance(dl, DataLog):
                dl = self._owned = open_datalog(dl)
            return Consumer(dl, *self._topics, conf=self._conf, **self._config)

        self._consumer = await self._run(create)

    async def stop(self) -> None:
        """Commit what was handed out (with auto-commit), close, and release the worker thread."""
        if self._consumer is None or self._closed:
            return
        self._closed = True
        consumer = self._consumer
        await self._settle()                          # a cancelled wait's poll: its records count too
        handed_out = {tp: recs[0].offset for tp, recs in self._pending.items() if recs}
        self._pending = {}

        def close() -> None:
            for tp, offset in handed_out.items():     # fetched but never returned: not consumed
                consumer.seek(tp, offset)
            consumer.close()
        try:
            await self._run(close)
            if self._owned is not None:
                await self._run(self._owned.close)
        finally:
            if self._executor is not None:
                self._executor.shutdown(wait=False)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn`` in the worker, after a poll left in flight by a cancelled wait has ended and
        the seeks made meanwhile are in place (:meth:`_settle`)."""
        if self._executor is None:
            raise IllegalStateError("AIOKafkaConsumer is not started: await start() first")
        await self._settle()
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def _settle(self) -> int:
        """Wait for the poll a cancelled wait left in flight, if any: its records go to those
        fetched and not handed out (but those of partitions sought since it started), then the
        seeks made meanwhile are made (the worker is idle: no position moves under them).
        Returns how many records it kept. A poll that failed leaves its error to the next
        ``getone`` / ``getmany`` (as aiokafka raises a fetch's error), raised once."""
        fut = self._inflight
        if fut is None:
            return 0
        try:
            got = await asyncio.shield(fut)     # cancelled: the poll stays in flight for the next call
        except BaseException as e:
            if not fut.done() or self._inflight is not fut:
                raise                           # (this caller was cancelled; or settled meanwhile)
            self._poll_error = e
            got = {}
        if self._inflight is not fut:           # (another task settled it meanwhile)
            return 0
        self._inflight = None
        seeks, self._seeks = self._seeks, {}
        revoked, self._revoked = self._revoked, set()
        consumer = self._consumer
        assert consumer is not None             # (a poll was started)
        intended, self._intended = self._intended, None
        if intended is not None and consumer.assignment() != intended:
            # (the poll's rebalance had read the old subscription before the change)
            if intended:
                consumer.assign(intended)
            else:
                consumer.unsubscribe()
        again = {tp for tp in revoked if consumer.is_assigned(tp)}
        if again and consumer.subscription() is None:
            # assigned again meanwhile: their new positions may have moved in the poll, made anew
            assigned = consumer.assignment()
            consumer.assign(assigned - again)
            consumer.assign(assigned)
        elif again:
            # (subscribed again: the poll may have read them from their new positions; kept, so
            # none is lost, at worst handed out twice)
            revoked -= again
        kept = 0
        for tp, recs in got.items():
            if tp not in seeks and tp not in revoked and consumer.is_assigned(tp):
                self._pending.setdefault(tp, []).extend(recs)
                kept += len(recs)
        for tp, offset in seeks.items():
            if consumer.is_assigned(tp):        # (one the poll's rebalance revoked is not sought)
                consumer.seek(tp, offset)
        return kept

    @property
    def _c(self) -> Consumer:
        if self._consumer is None:
            raise IllegalStateError("AIOKafkaConsumer is not started: await start() first")
        if self._closed:
            raise IllegalStateError("AIOKafkaConsumer is stopped")
        return self._consumer

    # --- assignment (no file work) ------------------------------------------------------------

    def subscribe(self, topics: Any = (), pattern: Any = None, listener: Any = None) -> None:
        """As the sync consumer's (its assignment follows at once): what was fetched of the
        partitions it keeps comes next, of the others it is dropped."""
        before = self._c.assignment()
        self._c.subscribe(topics, pattern=pattern, listener=listener)
        self._unassigned(before - self._c.assignment())
        self._intended = None                   # (a poll's rebalance across it is undone by the next)

    def assign(self, partitions: Any) -> None:
        """As the sync consumer's: what was fetched and not handed out of the partitions it keeps
        comes next (their positions are past it), of the others it is dropped."""
        before = self._c.assignment()
        self._c.assign(partitions)
        after = self._c.assignment()
        self._unassigned(before - after)
        if self._inflight is not None:
            self._intended = after

    def unsubscribe(self) -> None:
        before = self._c.assignment()
        self._c.unsubscribe()
        self._unassigned(before)
        if self._inflight is not None:
            self._intended = set()

    def _unassigned(self, partitions: set[TopicPartition]) -> None:
        """``partitions`` left the assignment: what was fetched of them is dropped, and so are
        the records of them a poll in flight reads (its worker moved their old positions) and the
        seeks made meanwhile."""
        for tp in partitions:
            self._pending.pop(tp, None)
            self._seeks.pop(tp, None)
        if self._inflight is not None:
            self._revoked |= partitions

    def assignment(self) -> set[TopicPartition]:
        return self._c.assignment()

    def subscription(self) -> set[str] | None:
        return self._c.subscription()

    def pause(self, *partitions: TopicPartitionLike) -> None:
        self._c.pause(*partitions)

    def resume(self, *partitions: TopicPartitionLike) -> None:
        self._c.resume(*partitions)

    def paused(self) -> set[TopicPartition]:
        return self._c.paused()

    def seek(self, partition: TopicPartitionLike, offset: int) -> None:
        """The next records of ``partition`` from ``offset``. While a poll a cancelled wait left
        runs in the worker (it moves positions there), the seek is checked now and made when that
        poll ends, its records of the partition dropped (:meth:`_settle`)."""
        tp = TopicPartition(*partition)
        if self._inflight is None:
            self._c.seek(tp, offset)
        else:
            self._c.check_seek(tp, offset)
            self._seeks[tp] = offset
        self._pending.pop(tp, None)

    # --- file work in the worker --------------------------------------------------------------

    async def seek_to_beginning(self, *partitions: TopicPartitionLike) -> None:
        await self._settle()
        self._drop_pending(partitions)
        await self._run(self._c.seek_to_beginning, *partitions)

    async def seek_to_end(self, *partitions: TopicPartitionLike) -> None:
        await self._settle()
        self._drop_pending(partitions)
        await self._run(self._c.seek_to_end, *partitions)

    def _drop_pending(self, partitions: Any) -> None:
        if not partitions:
            self._pending = {}
        for p in partitions:
            self._pending.pop(TopicPartition(*p), None)

    async def position(self, partition: TopicPartitionLike) -> int:
        tp = TopicPartition(*partition)
        await self._settle()
        pending = self._pending.get(tp)
        if pending:
            return pending[0].offset
        return await self._run(self._c.position, tp)

    async def committed(self, partition: TopicPartitionLike) -> int | None:
        got = await self._run(self._c.committed, partition)
        assert got is None or isinstance(got, int)
        return got

    async def commit(self, offsets: Mapping[TopicPartitionLike, Any] | None = None) -> None:
        """Commit ``offsets`` or, by default, the positions of what this consumer has returned."""
        await self._settle()
        if offsets is None and self._pending:
            positions: dict[TopicPartitionLike, Any] = {
                tp: recs[0].offset for tp, recs in self._pending.items() if recs}
            consumer = self._c

            def commit_returned() -> None:
                todo: dict[TopicPartitionLike, Any] = {tp: consumer.position(tp)
                                                       for tp in consumer.assignment()}
                todo.update(positions)
                consumer.commit(todo)
            await self._run(commit_returned)
            return
        await self._run(self._c.commit, offsets)

    async def beginning_offsets(self, partitions: Any) -> dict[TopicPartition, int]:
        return await self._run(self._c.beginning_offsets, list(partitions))

    async def end_offsets(self, partitions: Any) -> dict[TopicPartition, int]:
        return await self._run(self._c.end_offsets, list(partitions))

    async def offsets_for_times(self, timestamps: Mapping[TopicPartitionLike, int]
                                ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        return await self._run(self._c.offsets_for_times, dict(timestamps))

    async def topics(self) -> set[str]:
        return await self._run(self._c.topics)

    # --- fetching -----------------------------------------------------------------------------

    async def _poll(self, timeout_ms: float, max_records: int | None) -> int:
        """One poll in the worker, its records added to those fetched and not handed out; returns
        how many. A caller cancelled while it runs leaves it in flight: the next call takes its
        result (:meth:`_settle`), so no fetched record is dropped."""
        self._raise_poll_error()
        if self._inflight is None:
            if self._executor is None:
                raise IllegalStateError("AIOKafkaConsumer is not started: await start() first")
            self._inflight = asyncio.get_running_loop().run_in_executor(
                self._executor, self._c.poll, timeout_ms, max_records)
        kept = await self._settle()
        self._raise_poll_error()
        return kept

    def _raise_poll_error(self) -> None:
        error, self._poll_error = self._poll_error, None
        if error is not None:
            raise error

    def _take(self, partitions: set[TopicPartition], max_records: int | None
              ) -> dict[TopicPartition, list[ConsumerRecord]]:
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        budget = max_records if max_records is not None else float("inf")
        c = self._c
        for tp in list(self._pending):
            if budget <= 0:
                break
            if not c.is_assigned(tp):           # (a rebalance of the subscription revoked it)
                del self._pending[tp]
                continue
            if (partitions and tp not in partitions) or c.is_paused(tp):
                continue
            recs = self._pending[tp]
            n = int(min(budget, len(recs)))
            out[tp] = recs[:n]
            rest = recs[n:]
            if rest:
                self._pending[tp] = rest
            else:
                del self._pending[tp]
            budget -= n
        return out

    async def getmany(self, *partitions: TopicPartitionLike, timeout_ms: float = 0,
                      max_records: int | None = None) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records per partition (of ``partitions`` when given), waiting up to ``timeout_ms``."""
        wanted = {TopicPartition(*p) for p in partitions}
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000.0
        while True:
            got = self._take(wanted, max_records)
            if got:
                return got
            left_ms = max(0.0, (deadline - loop.time()) * 1000.0)
            polled = await self._poll(min(left_ms, _WAIT_SLICE_MS), max_records)
            if not polled and loop.time() >= deadline:
                return {}

    async def getone(self, *partitions: TopicPartitionLike) -> ConsumerRecord:
        """The next record (of ``partitions`` when given), waiting as long as it takes."""
        wanted = {TopicPartition(*p) for p in partitions}
        while True:
            got = self._take(wanted, 1)
            if got:
                return next(iter(got.values()))[0]
            await self._poll(_WAIT_SLICE_MS, None)

    def __aiter__(self) -> AIOKafkaConsumer:
        return self

    async def __anext__(self) -> ConsumerRecord:
        if self._closed:
            raise StopAsyncIteration
        try:
            return await self.getone()
        except IllegalStateError:
            if self._closed:
                raise StopAsyncIteration from None
            raise
