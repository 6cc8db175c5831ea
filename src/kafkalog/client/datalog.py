"""The friendly Python API: an embedded, durable log with Kafka's semantics and Kafka's files.

::

    import kafkalog

    with kafkalog.open("/var/lib/myapp/log") as dl:
        dl.create_topic("orders", partitions=3, config={"retention.ms": 86_400_000})
        dl.produce("orders", value=b"...", key=b"customer-42")
        with dl.producer(compression="zstd") as p:          # batched, the fast path
            for event in events:
                p.send("orders", value=event.payload, key=event.id)
        for rec in dl.consume("orders", from_beginning=True):
            print(rec.partition, rec.offset, rec.key, rec.value)

Partitioning follows Kafka's Java producer: a record with a key goes to
``toPositive(murmur2(key)) % partitions`` (:mod:`kafkalog.log.partitioner`), so the same key lands in
the same partition as with a Kafka client; a keyless record goes to a *sticky* partition that
changes (round-robin) each time a batch is completed (Kafka's sticky partitioner, KIP-480, without
the randomness). An explicit ``partition=`` wins.

The :class:`Producer` keeps one open v2 batch per partition, encoded record by record by the
compiled record kernel (``RecordsEncoder``), and appends a batch to the log when it reaches
``batch_size`` bytes, on :meth:`Producer.flush` and on close. Offsets are known once a batch is
appended (:meth:`Producer.flush` returns them); :meth:`DataLog.produce` appends at once and
returns the record's offset.
"""

from __future__ import annotations

import builtins
import os
import time
from dataclasses import dataclass
from typing import Any, Dict, Iterable, Iterator, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from kafkalog.errors import (InvalidConfigError, InvalidTopicError, KafkalogError,
                             LogDirError, OffsetOutOfRangeError)
from kafkalog.cleaner import LogCleaner
from kafkalog.log.manager import LogManager
from kafkalog.log.partitioner import partition_for_key as _partition_for_key
from kafkalog.record import kernel
from kafkalog.record.builder import write_v2_header
from kafkalog.record.compression import compress
from kafkalog.record.constants import PRODUCER_COMPRESSION_TYPES, TOPIC_COMPRESSION_TYPES, CompressionType
from kafkalog.client.readonly import (_ReadOnlyManager, _committed_view, _is_abort_marker, _iter_batches,
                                      _legacy_ts_type)

__all__ = ["open", "DataLog", "Producer", "ConsumerRecord", "RecordMetadata", "ProduceResult"]

_CODECS = {n: int(CompressionType.for_name(n, CompressionType.NONE)) for n in PRODUCER_COMPRESSION_TYPES + TOPIC_COMPRESSION_TYPES}
_TS_TYPES = {0: "CreateTime", 1: "LogAppendTime"}
DEFAULT_BATCH_SIZE = 256 * 1024
READ_UNCOMMITTED = "read_uncommitted"
READ_COMMITTED = "read_committed"
_time_ns = time.time_ns
_Encoder = kernel.RecordsEncoder


class ConsumerRecord(NamedTuple):
    """One record read from a partition (the fields of Kafka's ``ConsumerRecord``)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: str               # CreateTime | LogAppendTime | NoTimestampType
    key: Optional[bytes]
    value: Optional[bytes]
    headers: List[Tuple[str, Optional[bytes]]]


class RecordMetadata(NamedTuple):
    """Where a produced record landed."""

    topic: str
    partition: int
    offset: int
    timestamp: int


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


def _codec(compression: Any) -> int:
    if compression is None:
        return 0
    if isinstance(compression, int):
        if not 0 <= compression <= 4:
            raise InvalidConfigError(f"Unknown compression codec id {compression}")
        return compression
    c = _CODECS.get(str(compression).lower())
    if c is None:
        raise InvalidConfigError(f"Unknown compression type {compression!r}: expected one of "
                                 f"none, gzip, snappy, lz4, zstd")
    return c


def _as_bytes(x: Any) -> Optional[bytes]:
    if x is None or type(x) is bytes:
        return x
    if isinstance(x, str):
        return x.encode("utf-8")
    return bytes(x)


def _headers(headers: Any) -> Optional[list]:
    if not headers:
        return None
    if isinstance(headers, Mapping):
        headers = headers.items()
    return [(k if isinstance(k, str) else bytes(k).decode("utf-8"), _as_bytes(v)) for k, v in headers]


class _TopicState:
    """A topic as seen by one :class:`Producer`: its logs and one open batch (a kernel
    ``RecordsEncoder``, or None) per partition."""

    __slots__ = ("name", "n", "sticky", "encoders", "logs", "codec", "level")

    def __init__(self, name: str, logs: list, codec: int, level: Optional[int]) -> None:
        self.name = name
        self.logs = logs
        self.n = len(logs)
        self.sticky = 0
        self.encoders: List[Any] = [None] * self.n
        self.codec = codec
        self.level = level


class Producer:
    """Batches records per partition and appends whole v2 batches.

    Args:
        dl: the :class:`DataLog`.
        compression: ``none`` | ``gzip`` | ``snappy`` | ``lz4`` | ``zstd``; None = the topic's
            ``compression.type`` when it names a codec, else none.
        compression_level: KIP-390 level (None = Kafka's default for the codec).
        batch_size: bytes of encoded records after which a batch is appended (kept below the
            topic's ``max.message.bytes``).
        create_topics: create a missing topic (1 partition, or ``partitions``) on first send.
    """

    def __init__(self, dl: "DataLog", *, compression: Any = None, compression_level: Optional[int] = None,
                 batch_size: int = DEFAULT_BATCH_SIZE, create_topics: bool = True,
                 partitions: int = 1) -> None:
        self._dl = dl
        self._compression = compression
        self._level = compression_level
        self._batch_size = max(1, int(batch_size))
        self._create = create_topics
        self._partitions = partitions
        self._topics: Dict[str, _TopicState] = {}
        self._results: Dict[Tuple[str, int], List[int]] = {}
        self._count = 0
        self._batches = 0
        self._closed = False

    def _state(self, topic: str) -> _TopicState:
        st = self._topics.get(topic)
        if st is not None:
            return st
        m = self._dl.manager
        if getattr(m, "read_only", False):
            raise LogDirError("the data directory is open read-only", file=m.data_dir)
        if not m.has_topic(topic):
            if not self._create:
                raise InvalidTopicError(f"Unknown topic {topic!r}", file=m.data_dir)
            m.create_topic(topic, self._partitions, exist_ok=True)
        logs = [m.get_log(topic, p) for p in m.partitions_of(topic)]
        if self._compression is None:
            ct = str(m.topic_config(topic).compression_type)
            codec = _CODECS.get(ct, 0)
        else:
            codec = _codec(self._compression)
        limit = int(m.topic_config(topic).max_message_bytes) - 61 - 64
        self._batch_size = max(1, min(self._batch_size, limit))
        st = self._topics[topic] = _TopicState(topic, logs, codec, self._level)
        return st

    def send(self, topic: str, value: Any = None, key: Any = None, headers: Any = None,
             timestamp: Optional[int] = None, partition: Optional[int] = None) -> int:
        """Add one record; returns its partition. ``key``/``value``: bytes-like, ``str`` (UTF-8) or
        None; ``headers``: ``[(str, bytes | None)]`` or a mapping; ``timestamp``: ms (default now)."""
        # the per-record path: one dict lookup, the compiled partitioner (keyed records), one
        # kernel append into the partition's open batch; everything else only when a batch fills
        st = self._topics.get(topic)
        if st is None:
            if self._closed:
                raise KafkalogError("producer is closed")
            st = self._state(topic)
        if value is not None and type(value) is not bytes:
            value = _as_bytes(value)
        if headers:
            headers = _headers(headers)
        if key is not None:
            if type(key) is not bytes:
                key = _as_bytes(key)
            if partition is None:
                partition = _partition_for_key(key, st.n)
            elif not 0 <= partition < st.n:
                raise self._bad_partition(st, partition)
        elif partition is None:
            partition = st.sticky
        elif not 0 <= partition < st.n:
            raise self._bad_partition(st, partition)
        enc = st.encoders[partition]
        if enc is None:
            enc = st.encoders[partition] = _Encoder()
        enc.append(key, value, _time_ns() // 1000000 if timestamp is None else timestamp, headers)
        if enc.size_in_bytes >= self._batch_size:
            self._drain(st, partition)
            if key is None and partition == st.sticky:
                st.sticky = (partition + 1) % st.n
        return partition

    @staticmethod
    def _bad_partition(st: _TopicState, partition: Any) -> InvalidTopicError:
        return InvalidTopicError(f"Partition {partition} of topic {st.name!r} does not exist "
                                 f"(it has {st.n} partitions)")

    def send_many(self, topic: str, values: Sequence[Any], *, partition: Optional[int] = None,
                  timestamp: Optional[int] = None) -> None:
        """Add keyless records (values only) in bulk: the whole sequence is split into batches
        of about ``batch_size`` bytes, each encoded by one kernel call."""
        st = self._topics.get(topic) or self._state(topic)
        ts = _time_ns() // 1000000 if timestamp is None else timestamp
        n = len(values)
        i = 0
        encode = kernel.encode_records_v2
        while i < n:
            p = st.sticky if partition is None else partition
            if not 0 <= p < st.n:
                raise self._bad_partition(st, p)
            if st.encoders[p] is not None:
                self._drain(st, p)
            first = values[i]
            est = (len(first) if first is not None else 0) + 12
            per = max(1, self._batch_size // est)
            chunk = values[i:i + per]
            recs = [(None, v if (v is None or type(v) is bytes) else _as_bytes(v), ts, None)
                    for v in chunk]
            body = encode(recs, ts)
            self._append(st, p, body, len(recs), ts, ts)
            i += len(chunk)
            if partition is None:
                st.sticky = (st.sticky + 1) % st.n

    def _drain(self, st: _TopicState, partition: int) -> None:
        enc = st.encoders[partition]
        if enc is None:
            return
        st.encoders[partition] = None
        if enc.count == 0:
            return
        self._append(st, partition, enc.finish(), enc.count, enc.base_timestamp, enc.max_timestamp)

    def _append(self, st: _TopicState, partition: int, body: bytes, count: int, base_ts: int,
                max_ts: int) -> None:
        if st.codec:
            body = compress(st.codec, body, magic=2, level=st.level)
        data = write_v2_header(body, base_offset=0, attributes=st.codec, last_offset_delta=count - 1,
                               base_timestamp=base_ts, max_timestamp=max_ts, producer_id=-1,
                               producer_epoch=-1, base_sequence=-1, count=count,
                               partition_leader_epoch=-1)
        info = st.logs[partition].append(bytearray(data))
        key = (st.name, partition)
        r = self._results.get(key)
        if r is None:
            self._results[key] = [info.first_offset, info.last_offset]
        else:
            r[1] = info.last_offset
        self._count += count
        self._batches += 1

    def flush(self) -> Dict[Tuple[str, int], Tuple[int, int]]:
        """Append every open batch. Returns ``{(topic, partition): (first, last offset)}`` of
        everything appended since the previous flush."""
        for st in self._topics.values():
            for p in range(st.n):
                if st.encoders[p] is not None:
                    self._drain(st, p)
        out = {k: (v[0], v[1]) for k, v in self._results.items()}
        self._results = {}
        return out

    @property
    def records_sent(self) -> int:
        """Records appended to logs so far (open batches not included)."""
        return self._count

    @property
    def batches_sent(self) -> int:
        return self._batches

    def close(self) -> None:
        """Flush and stop accepting records."""
        if not self._closed:
            self.flush()
            self._closed = True

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is None:
            self.close()
        else:
            self._closed = True


class DataLog:
    """A data directory opened with :func:`open`; wraps a :class:`~kafkalog.log.manager.LogManager`
    (available as :attr:`manager` for everything below this API)."""

    def __init__(self, manager: LogManager) -> None:
        self.manager = manager

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

    def producer(self, **kwargs: Any) -> Producer:
        """A batching :class:`Producer` (use as a context manager)."""
        return Producer(self, **kwargs)

    def produce(self, topic: str, value: Any = None, key: Any = None, headers: Any = None,
                timestamp: Optional[int] = None, partition: Optional[int] = None,
                compression: Any = None) -> RecordMetadata:
        """Append one record now (a batch of one) and return where it landed. For many records
        use :meth:`produce_many` or :meth:`producer`."""
        p = Producer(self, compression=compression)
        st = p._state(topic)
        if partition is None and key is None:
            partition = self._next_sticky(topic, st.n)
        part = p.send(topic, value, key, headers, timestamp, partition)
        ts = st.encoders[part].max_timestamp
        offsets = p.flush()
        return RecordMetadata(topic, part, offsets[(topic, part)][0], ts)

    def _next_sticky(self, topic: str, n: int) -> int:
        rr = self.__dict__.setdefault("_rr", {})
        i = rr.get(topic, -1) + 1
        rr[topic] = i % n
        return i % n

    def produce_many(self, topic: str, records: Iterable[Any], *, partition: Optional[int] = None,
                     compression: Any = None, batch_size: int = DEFAULT_BATCH_SIZE) -> ProduceResult:
        """Append many records. Each item is a value (bytes/str/None), a ``(key, value)`` or
        ``(key, value, headers)`` or ``(key, value, headers, timestamp)`` tuple, or a mapping with
        ``key``/``value``/``headers``/``timestamp``/``partition``."""
        p = Producer(self, compression=compression, batch_size=batch_size)
        if isinstance(records, (list, tuple)) and records and all(
                r is None or isinstance(r, (bytes, bytearray, memoryview, str)) for r in records[:1]) \
                and all(r is None or isinstance(r, (bytes, str)) for r in records):
            p.send_many(topic, records, partition=partition)
        else:
            send = p.send
            for r in records:
                t = type(r)
                if t is tuple and len(r) == 2:          # (key, value): the common keyed form
                    send(topic, r[1], r[0], None, None, partition)
                elif t is bytes or r is None or isinstance(r, (bytearray, memoryview, str)):
                    send(topic, r, None, None, None, partition)
                elif isinstance(r, tuple):
                    k = r[0]
                    v = r[1] if len(r) > 1 else None
                    h = r[2] if len(r) > 2 else None
                    ts = r[3] if len(r) > 3 else None
                    send(topic, v, k, h, ts, partition)
                elif isinstance(r, Mapping):
                    send(topic, r.get("value"), r.get("key"), r.get("headers"), r.get("timestamp"),
                         r.get("partition", partition))
                else:
                    send(topic, getattr(r, "value", None), getattr(r, "key", None),
                         getattr(r, "headers", None), getattr(r, "timestamp", None),
                         getattr(r, "partition", partition))
        count_before = p.records_sent
        offsets = p.flush()
        return ProduceResult(topic, p.records_sent if p.records_sent else count_before, p.batches_sent,
                             {tp[1]: v for tp, v in offsets.items()})

    # --- consume ------------------------------------------------------------------------------------

    def consume(self, topic: str, partition: Optional[int] = None, *, offset: Optional[int] = None,
                timestamp: Optional[int] = None, from_beginning: bool = True,
                isolation: str = READ_UNCOMMITTED, max_records: Optional[int] = None
                ) -> Iterator[ConsumerRecord]:
        """Yield the records of one partition (or of every partition, one after the other).

        Start: ``offset`` (clamped to the log start offset), else the first offset whose timestamp
        is >= ``timestamp``, else the log start offset (``from_beginning``, the default) or the log
        end offset. ``isolation="read_committed"`` stops at the last stable offset and skips
        aborted transactions (Kafka's consumer rules). Control records are never yielded."""
        if isolation not in (READ_UNCOMMITTED, READ_COMMITTED):
            raise InvalidConfigError(f"Invalid isolation level {isolation!r}: expected "
                                     f"read_uncommitted or read_committed")
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
            for rec in self._consume_partition(topic, p, offset, timestamp, from_beginning, isolation):
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
                           isolation: str) -> Iterator[ConsumerRecord]:
        log = self.manager.get_log(topic, p)
        start = self._start_offset(log, offset, timestamp, from_beginning)
        committed = isolation == READ_COMMITTED
        aborted: List[Tuple[int, int]] = []
        if committed:
            # the last stable offset and the aborted transactions (pid, first offset) that
            # overlap [start, LSO), from the producer state / .txnindex of a writable log, or
            # from the batches themselves for a read-only view
            end, aborted = _committed_view(log, start)
        else:
            end = log.high_watermark
        if start >= end:
            return
        aborted.sort(key=lambda a: a[1])
        aborted_pids: set = set()
        ai = 0
        for batch in _iter_batches(log, start, end):
            magic = batch.magic
            if magic >= 2:
                if batch.base_offset >= end:
                    return
                ctrl = batch.is_control
                if committed and batch.producer_id >= 0:
                    last = batch.last_offset
                    while ai < len(aborted) and aborted[ai][1] <= last:
                        aborted_pids.add(aborted[ai][0])
                        ai += 1
                    pid = batch.producer_id
                    if ctrl:
                        if pid in aborted_pids and _is_abort_marker(batch):
                            aborted_pids.discard(pid)
                        continue
                    if batch.is_transactional and pid in aborted_pids:
                        continue
                if ctrl:
                    continue
                tst = _TS_TYPES[int(batch.timestamp_type) & 1]
            else:
                tst = "NoTimestampType" if magic == 0 else None
            for rec in batch:
                o = rec.offset
                if o < start:
                    continue
                if o >= end:
                    return
                t = tst
                if t is None:
                    t = _legacy_ts_type(batch)
                yield ConsumerRecord(topic, p, o, rec.timestamp, t, rec.key, rec.value,
                                     list(rec.headers))

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
            out[p] = log.last_stable_offset if isolation == READ_COMMITTED else log.high_watermark
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
        """Clean shutdown (see :meth:`LogManager.close`)."""
        self.manager.close()

    def __enter__(self) -> "DataLog":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"DataLog({self.manager.data_dir!r})"


def open(data_dir: os.PathLike | str, config: Optional[Mapping[str, Any]] = None, *,
         background: bool = True, progress=None, read_only: bool = False) -> DataLog:
    """Open (creating when missing) a Kafka data directory. ``config`` holds broker settings
    (``log.retention.hours``, ``log.segment.bytes``, ``log.cleaner.enable`` ...). Use as a context
    manager so the directory is closed cleanly (no recovery scan on the next open).

    ``read_only=True`` opens an existing directory for reading only, even while a kafkalog
    application or a Kafka broker holds it: no ``.lock`` is taken, nothing is recovered, created
    or changed (``background`` and ``progress`` are ignored). Each partition is read as it was
    when first used; produce, topic changes, retention and flush raise
    :class:`~kafkalog.errors.LogDirError`. Read-only, ``data_dir`` may also be a URI
    (``s3://``, ``s3a://``, ``gs://``, ``abfs(s)://``, ``hdfs://``, ``file://``) read through
    ``pyarrow.fs``; ``config`` then holds its ``fs.*`` options (``fs.s3a.endpoint``, ...; see
    :mod:`kafkalog.log.filesystem`). Opened writable, a URI other than ``file://`` is refused."""
    if read_only:
        return DataLog(_ReadOnlyManager(data_dir, config))
    return DataLog(LogManager(data_dir, config, background=background, progress=progress, cleaner_factory=LogCleaner))


# the module defines ``open``; keep the builtin reachable for readers of this file
_builtin_open = builtins.open
