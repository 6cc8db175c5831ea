"""The friendly Python API: an embedded, durable log with Kafka's semantics and Kafka's files.

::

    import kafkalog

    with kafkalog.open("/var/lib/myapp/log") as dl:
        dl.create_topic("orders", partitions=3, config={"retention.ms": 86_400_000})
        dl.produce("orders", value=b"...", key=b"customer-42")
        with dl.producer(compression_type="zstd") as p:     # Kafka's producer (futures, linger)
            for event in events:
                p.send("orders", value=event.payload, key=event.id)
        for rec in dl.consume("orders", from_beginning=True):
            print(rec.partition, rec.offset, rec.key, rec.value)

Producing goes through :class:`kafkalog.client.producer.Producer` (Kafka's producer: configuration
keys, linger, futures, idempotence, transactions); :meth:`DataLog.produce` and
:meth:`DataLog.produce_many` are conveniences on top of it that append before returning.
"""

from __future__ import annotations

import builtins
import os
import threading
import weakref
from dataclasses import dataclass
from typing import (
    TYPE_CHECKING,
    Any,
    Dict,
    Iterable,
    Iterator,
    List,
    Mapping,
    Optional,
    Protocol,
    Sequence,
    Tuple,
)

from kafkalog.cleaner import LogCleaner
from kafkalog.client.consumer import ConsumerRecord, batch_records
from kafkalog.client.producer import Producer, RecordMetadata
from kafkalog.client.producer_future import refused
from kafkalog.client.readonly import _ReadOnlyManager
from kafkalog.coordinator.producer_ids import ProducerIdManager
from kafkalog.coordinator.transaction_coordinator import TransactionCoordinator
from kafkalog.coordinator.transaction_log import TRANSACTION_STATE_TOPIC
from kafkalog.errors import InvalidConfigError, InvalidTopicError, KafkalogError, LogDirError, OffsetOutOfRangeError
from kafkalog.log.config import BrokerConfig, LogConfig
from kafkalog.log.data_dir import data_dir_state
from kafkalog.log.manager import LogManager, PartitionInfo
from kafkalog.log.read.reader import ReadablePartition
from kafkalog.log.retention import RetentionResult
from kafkalog.record.constants import IsolationLevel
from kafkalog.tiered.filesystem import is_remote, local_path

if TYPE_CHECKING:
    from kafkalog.client.consumer import Consumer
    from kafkalog.client.share_consumer import ShareConsumer
    from kafkalog.coordinator.offsets import OffsetsStore

__all__ = ["open", "DataLog", "Producer", "ConsumerRecord", "RecordMetadata", "ProduceResult"]

DEFAULT_BATCH_SIZE = 256 * 1024
READ_UNCOMMITTED = IsolationLevel.READ_UNCOMMITTED.config_name
READ_COMMITTED = IsolationLevel.READ_COMMITTED.config_name


@dataclass
class ProduceResult:
    """Summary of a bulk produce: records written and the offset range per partition."""

    topic: str
    count: int
    batches: int
    offsets: Dict[int, Tuple[int, int]]          # partition -> (first offset, last offset)

    def to_json(self) -> dict:
        return {"topic": self.topic, "records": self.count, "batches": self.batches,
                "partitions": {str(p): {"firstOffset": a, "lastOffset": b}
                               for p, (a, b) in sorted(self.offsets.items())}}


class LogManagerLike(Protocol):
    """What a :class:`DataLog` needs from its data directory: a
    :class:`~kafkalog.log.manager.LogManager`, or the read-only mode's manager (whose writing
    methods raise :class:`~kafkalog.errors.LogDirError`)."""

    data_dir: str

    def create_topic(self, topic: str, partitions: int = ..., config: Optional[Mapping[str, Any]] = ...,
                     *, exist_ok: bool = ...) -> object: ...

    def delete_topic(self, topic: str) -> object: ...

    def alter_topic_config(self, topic: str, updates: Mapping[str, Any],
                           deletes: Tuple[str, ...] = ...) -> object: ...

    def topic_config(self, topic: str) -> LogConfig: ...

    def topics(self) -> List[str]: ...

    def partitions_of(self, topic: str) -> List[int]: ...

    def has_topic(self, topic: str) -> bool: ...

    def get_log(self, topic: str, partition: int) -> ReadablePartition: ...

    def describe(self) -> List[PartitionInfo]: ...

    def cleanup_logs(self) -> Dict[str, RetentionResult]: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


class DataLog:
    """A data directory opened with :func:`open`; wraps a :class:`~kafkalog.log.manager.LogManager`
    (available as :attr:`manager` for everything below this API; read-only, the read-only view
    of the directory)."""

    def __init__(self, manager: LogManagerLike) -> None:
        self.manager = manager
        self._coord_lock = threading.Lock()
        self._producer_ids: Optional[ProducerIdManager] = None
        self._txn_coordinator: Optional[TransactionCoordinator] = None
        self._rr: Dict[str, int] = {}
        self._producers: weakref.WeakSet[Producer] = weakref.WeakSet()

    # --- coordinator-level state (kafkalog.coordinator) ---------------------------------------------

    def producer_id_manager(self) -> ProducerIdManager:
        """The data directory's producer id allocator."""
        with self._coord_lock:
            if self._producer_ids is None:
                self._producer_ids = ProducerIdManager(self.manager.data_dir)
            return self._producer_ids

    def transaction_coordinator(self) -> TransactionCoordinator:
        """The data directory's transaction coordinator (``__transaction_state``); created on first
        use, when it aborts the transactions that timed out and schedules that check every
        ``transaction.abort.timed.out.transaction.cleanup.interval.ms`` on the directory's scheduler."""
        ids = self.producer_id_manager()
        with self._coord_lock:
            if self._txn_coordinator is None:
                if not isinstance(self.manager, LogManager):
                    raise LogDirError("the data directory is open read-only", file=self.manager.data_dir)
                b = self.manager.broker_config
                c = TransactionCoordinator(self.manager, ids,
                                           num_partitions=int(b.get("transaction.state.log.num.partitions")),
                                           max_timeout_ms=int(b.get("transaction.max.timeout.ms")),
                                           on_complete=self._transaction_completed)
                c.abort_timed_out_transactions()
                every = int(b.get("transaction.abort.timed.out.transaction.cleanup.interval.ms"))
                self.manager.scheduler.schedule("transaction-abort", c.abort_timed_out_transactions,
                                                every, every)
                self._txn_coordinator = c
            return self._txn_coordinator

    def _transaction_completed(self, producer_id: int, partitions: frozenset[tuple[str, int]],
                               committed: bool) -> None:
        """A transaction's markers are written: its offsets (``send_offsets_to_transaction``) become
        committed or are dropped (a store not loaded yet reads the markers from the topic)."""
        store = self.__dict__.get("_offsets")
        if store is not None:
            store.complete_transaction(producer_id, partitions, committed)

    # --- topics -------------------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int = 1, config: Optional[Mapping[str, Any]] = None,
                     *, exist_ok: bool = False) -> None:
        """Create a topic with Kafka topic-config overrides (``retention.ms``, ``cleanup.policy``...)."""
        self.manager.create_topic(name, partitions, config, exist_ok=exist_ok)

    def delete_topic(self, name: str) -> None:
        self.manager.delete_topic(name)

    def alter_topic_config(self, name: str, updates: Mapping[str, Any], deletes: Sequence[str] = ()) -> None:
        self.manager.alter_topic_config(name, updates, tuple(deletes))

    def topic_config(self, name: str) -> Dict[str, Any]:
        """The effective configuration of a topic (every key)."""
        return self.manager.topic_config(name).values()

    def topics(self) -> List[str]:
        return self.manager.topics()

    def partitions(self, topic: str) -> int:
        """Number of partitions of ``topic`` (0 when it does not exist)."""
        return len(self.manager.partitions_of(topic))

    def describe(self) -> List[dict]:
        """Per partition: offsets, size and segment count (JSON-able, Kafka's camelCase)."""
        return [p.to_json() for p in self.manager.describe()]

    # --- produce ------------------------------------------------------------------------------------

    def producer(self, conf: Optional[Mapping[str, Any]] = None, **config: Any) -> Producer:
        """Kafka's producer (:class:`kafkalog.client.producer.Producer`): ``conf`` with Kafka's
        dotted keys (``{"linger.ms": 5}``) and/or keyword arguments with underscores
        (``linger_ms=5``). Use it as a context manager or close it."""
        p = Producer(self, conf, **config)
        self._producers.add(p)
        return p

    def _oneshot(self, compression: Any, batch_size: int) -> Producer:
        # the conveniences below append before returning: no linger thread, no producer id (a
        # producer id per call would fill every partition's producer state)
        return Producer(self, {"compression.type": "none" if compression is None else compression,
                               "batch.size": batch_size, "enable.idempotence": False},
                        linger_thread=False)

    def produce(self, topic: str, value: Any = None, key: Any = None, headers: Any = None,
                timestamp: Optional[int] = None, partition: Optional[int] = None,
                compression: Any = None) -> RecordMetadata:
        """Append one record now (a batch of one) and return where it landed. For many records
        use :meth:`produce_many` or :meth:`producer`."""
        with self._oneshot(compression, DEFAULT_BATCH_SIZE) as p:
            if partition is None and key is None:
                partition = self._next_sticky(topic, len(p.partitions_for(topic)))
            fut = p.send(topic, value, key, partition=partition, timestamp_ms=timestamp, headers=headers)
        return fut.get()

    def _next_sticky(self, topic: str, n: int) -> int:
        i = (self._rr.get(topic, -1) + 1) % n
        self._rr[topic] = i
        return i

    def produce_many(self, topic: str, records: Iterable[Any], *, partition: Optional[int] = None,
                     compression: Any = None, batch_size: int = DEFAULT_BATCH_SIZE) -> ProduceResult:
        """Append many records. Each item is a value (bytes/str/None), a ``(key, value)`` or
        ``(key, value, headers)`` or ``(key, value, headers, timestamp)`` tuple, or a mapping with
        ``key``/``value``/``headers``/``timestamp``/``partition``. The first failed record's error
        is raised (the records before it are appended)."""
        p = self._oneshot(compression, batch_size)
        failed: List[BaseException] = []
        try:
            send = p.send
            for r in records:
                t = type(r)
                if t is bytes or r is None or isinstance(r, (bytearray, memoryview, str)):
                    f = send(topic, r, None, partition=partition)
                elif t is tuple and len(r) == 2:          # (key, value): the common keyed form
                    f = send(topic, r[1], r[0], partition=partition)
                elif isinstance(r, tuple):
                    f = send(topic, r[1] if len(r) > 1 else None, r[0], partition=partition,
                             headers=r[2] if len(r) > 2 else None, timestamp_ms=r[3] if len(r) > 3 else None)
                elif isinstance(r, Mapping):
                    f = send(topic, r.get("value"), r.get("key"), partition=r.get("partition", partition),
                             headers=r.get("headers"), timestamp_ms=r.get("timestamp"))
                else:
                    raise InvalidConfigError(f"produce_many: unsupported record {type(r).__name__} (expected "
                                             f"bytes, str, None, a tuple or a mapping)")
                err = refused(f)
                if err is not None:
                    failed.append(err)
                    break
            p.flush()
        finally:
            p.close()
        offsets = p.appended_offsets()
        if not failed and p.first_error is not None:
            failed.append(p.first_error)
        if failed:
            raise failed[0]
        return ProduceResult(topic, p.records_sent, p.batches_sent, {tp[1]: v for tp, v in offsets.items()})

    # --- consume ------------------------------------------------------------------------------------

    def consumer(self, *topics: str, conf: Optional[Mapping[str, Any]] = None, **config: Any) -> Consumer:
        """A kafka-python-shaped :class:`~kafkalog.client.consumer.Consumer` (subscribed to ``topics``
        when given). ``conf``: Kafka's dotted keys; keyword arguments: the same keys with underscores."""
        from kafkalog.client.consumer import Consumer
        return Consumer(self, *topics, conf=conf, **config)

    def share_consumer(self, *topics: str, conf: Optional[Mapping[str, Any]] = None,
                       group_config: Optional[Mapping[str, Any]] = None, **config: Any) -> ShareConsumer:
        """A member of a share group (KIP-932: the topics consumed as a queue, each record by one
        consumer at a time, under an acquisition lock; several processes may share the group, each
        opening the directory, read-only or as its owner). ``conf``/keywords: Kafka's share consumer
        keys (``group.id``, ``share.acknowledgement.mode``, ``max.poll.records`` ...);
        ``group_config``: the group's configs to set (``share.record.lock.duration.ms``,
        ``share.delivery.count.limit``, ``share.auto.offset.reset``, ``share.isolation.level``).
        See :mod:`kafkalog.client.share_consumer`."""
        from kafkalog.client.share_consumer import ShareConsumer
        return ShareConsumer(self, *topics, conf=conf, group_config=group_config, **config)

    def _offsets_store(self) -> OffsetsStore:
        """The committed offsets of this directory (``__consumer_offsets``), loaded once, shared by
        its consumers."""
        store = self.__dict__.get("_offsets")
        if store is None:
            from kafkalog.coordinator.offsets import OffsetsStore
            m = self.manager
            if isinstance(m, LogManager):
                n = int(m.broker_config.get("offsets.topic.num.partitions"))
                store = self.__dict__.setdefault("_offsets", OffsetsStore(m, num_partitions=n))
            else:
                store = self.__dict__.setdefault("_offsets", OffsetsStore(m))
        return store

    def offsets_store(self) -> OffsetsStore:
        """The consumer groups' committed offsets and stored metadata (``__consumer_offsets``, the
        coordinator's :class:`~kafkalog.coordinator.offsets.OffsetsStore`). Writable: the store this
        directory's consumers and transactional producers share. Read-only: a snapshot of the
        committed records on disk now (commits raise :class:`~kafkalog.errors.LogDirError`)."""
        if isinstance(self.manager, _ReadOnlyManager):
            from kafkalog.coordinator.offsets import OffsetsStore
            return OffsetsStore(self.manager)
        return self._offsets_store()

    def consume(self, topic: str, partition: Optional[int] = None, *, offset: Optional[int] = None,
                timestamp: Optional[int] = None, from_beginning: bool = True,
                isolation: str = READ_UNCOMMITTED, max_records: Optional[int] = None
                ) -> Iterator[ConsumerRecord]:
        """Yield the records of one partition (or of every partition, one after the other), up to
        the end of the log as it is when each partition is reached (use :meth:`consumer` to wait
        for new data).

        Start: ``offset`` (clamped to the log start offset), else the first offset whose timestamp
        is >= ``timestamp``, else the log start offset (``from_beginning``, the default) or the log
        end offset. ``isolation="read_committed"`` stops at the last stable offset and skips
        aborted transactions (Kafka's consumer rules). Control records are never yielded."""
        iso = IsolationLevel.of(isolation)
        m = self.manager
        parts = m.partitions_of(topic)
        if not parts:
            raise InvalidTopicError(f"Unknown topic {topic!r}", file=m.data_dir)
        if partition is not None:
            if partition not in parts:
                raise InvalidTopicError(f"Partition {partition} of topic {topic!r} does not exist",
                                        file=m.data_dir)
            parts = [partition]
        remaining = max_records
        for p in parts:
            if remaining is not None and remaining <= 0:
                return
            for rec in self._consume_partition(topic, p, offset, timestamp, from_beginning, iso):
                yield rec
                if remaining is not None:
                    remaining -= 1
                    if remaining <= 0:
                        return

    def _start_offset(self, log, offset, timestamp, from_beginning) -> int:
        if offset is not None:
            if offset < 0:
                raise OffsetOutOfRangeError(f"Negative offset {offset}", file=log.dir)
            return max(offset, log.log_start_offset)
        if timestamp is not None:
            r = log.offset_for_timestamp(timestamp)
            return log.log_end_offset if r is None else max(r.offset, log.log_start_offset)
        return log.log_start_offset if from_beginning else log.log_end_offset

    def _consume_partition(self, topic: str, p: int, offset, timestamp, from_beginning,
                           isolation: IsolationLevel) -> Iterator[ConsumerRecord]:
        log = self.manager.get_log(topic, p)
        start = self._start_offset(log, offset, timestamp, from_beginning)
        reader = log.reader(start)
        end = reader.stable_end(isolation)
        if start >= end:
            return
        for batch, visible in reader.read(start, end, isolation):
            if not visible:
                continue
            try:
                recs = batch_records(batch, topic, p, start, end)
            except KafkalogError as e:
                raise (e.at(reader.log_path_of(batch.last_offset), 0) if e.file is None
                       else e) from None
            yield from recs

    # --- offsets ------------------------------------------------------------------------------------

    def beginning_offsets(self, topic: str) -> Dict[int, int]:
        """Log start offset per partition."""
        return {p: self.manager.get_log(topic, p).log_start_offset
                for p in self._parts(topic)}

    def end_offsets(self, topic: str, isolation: str = READ_UNCOMMITTED) -> Dict[int, int]:
        """High watermark (= log end offset) per partition, or the last stable offset with
        ``read_committed``."""
        out = {}
        for p in self._parts(topic):
            log = self.manager.get_log(topic, p)
            committed = IsolationLevel.of(isolation) is IsolationLevel.READ_COMMITTED
            out[p] = log.last_stable_offset if committed else log.high_watermark
        return out

    def offsets_for_times(self, topic: str, timestamp: int) -> Dict[int, Optional[int]]:
        """Per partition: the first offset whose timestamp is >= ``timestamp`` (None when none)."""
        out: Dict[int, Optional[int]] = {}
        for p in self._parts(topic):
            r = self.manager.get_log(topic, p).offset_for_timestamp(timestamp)
            out[p] = None if r is None else r.offset
        return out

    def _parts(self, topic: str) -> List[int]:
        parts = self.manager.partitions_of(topic)
        if not parts:
            raise InvalidTopicError(f"Unknown topic {topic!r}", file=self.manager.data_dir)
        return parts

    # --- lifecycle ----------------------------------------------------------------------------------

    def delete_old_segments(self) -> Dict[str, dict]:
        """Run retention now (normally done every ``log.retention.check.interval.ms``)."""
        return {k: v.to_json() for k, v in self.manager.cleanup_logs().items()}

    def flush(self) -> None:
        """fsync every partition and write the checkpoints."""
        self.manager.flush()

    def close(self) -> None:
        """Clean shutdown (see :meth:`LogManager.close`); producers still open are closed first
        (what they hold is appended)."""
        try:
            for p in list(self._producers):
                p.close()
        finally:
            self.manager.close()

    def __enter__(self) -> DataLog:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"DataLog({self.manager.data_dir!r})"


def open(data_dir: os.PathLike | str, config: Optional[Mapping[str, Any]] = None, *,
         background: bool = True, progress=None, read_only: bool = False) -> DataLog:
    """Open a Kafka data directory, or make a new or empty path one; any other directory is refused
    with :class:`~kafkalog.errors.LogDirError` naming what it holds (:mod:`kafkalog.log.data_dir`:
    ``meta.properties``, or partition directories of Kafka's files). ``config`` holds broker settings
    (``log.retention.hours``, ``log.segment.bytes``, ``log.cleaner.enable`` ...). Use as a context
    manager so the directory is closed cleanly (no recovery scan on the next open).

    ``read_only=True`` opens an existing directory for reading only, even while a kafkalog
    application or a Kafka broker holds it: no ``.lock`` is taken, nothing is recovered, created
    or changed (``background`` and ``progress`` are ignored). Each partition is read as it was
    when first used; produce, topic changes, retention and flush raise
    :class:`~kafkalog.errors.LogDirError`. Read-only, ``data_dir`` may also be a URI
    (``s3://``, ``s3a://``, ``gs://``, ``abfs(s)://``, ``hdfs://``, ``file://``) read through
    ``pyarrow.fs``; ``config`` then holds its ``fs.*`` options (``fs.s3a.endpoint``, ...; see
    :mod:`kafkalog.tiered.filesystem`). Opened writable, a URI other than ``file://`` is refused.
    Read-only, ``config`` may also name the remote storage of a broker with tiered storage
    (``remoteStorage``, ``remoteStorage.layout``, ...; see
    :mod:`kafkalog.tiered.remote_segments`): partitions then read their older segments from there,
    and ``failOnDataLoss`` (``true``, the default, or ``false``; the Spark source's option) says
    whether offsets deleted from remote storage fail a read with
    :class:`~kafkalog.errors.DataLossError` or are skipped with a warning.

    ``offsets.topic.num.partitions`` and ``transaction.state.log.num.partitions`` give the
    partition count of ``__consumer_offsets`` and ``__transaction_state`` when this directory
    creates them (an existing one keeps its count). An unknown key is refused with
    :class:`~kafkalog.errors.InvalidConfigError` before anything is created."""
    if read_only:
        if not is_remote(data_dir) and os.path.isdir(local_path(data_dir)):
            data_dir_state(local_path(data_dir))   # a directory of other things is refused here too
        return DataLog(_ReadOnlyManager(data_dir, config))
    broker = BrokerConfig(dict(config or {}), strict=True)     # a typo is refused, not ignored
    dl = DataLog(LogManager(data_dir, broker, background=background, progress=progress,
                            cleaner_factory=LogCleaner))
    if dl.manager.has_topic(TRANSACTION_STATE_TOPIC):
        try:
            dl.transaction_coordinator()     # aborts the transactions that timed out meanwhile
        except BaseException:
            dl.close()
            raise
    return dl


# the module defines ``open``; keep the builtin reachable for readers of this file
_builtin_open = builtins.open
