"""Pure-Python twin of the client kernel: the embedded client's per-record classes (the producer's
send path, batch and record future; the consumer's record and a batch decoded into it). Same API
and behaviour as the compiled ``_kernel.pyx``; :mod:`kafkalog.client.kernel` selects one of the
two for the whole process (all or nothing with the other layers' kernels). It builds on the pure
record kernel (its encoder, decoder and murmur2), as the compiled one does on the compiled."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from operator import index
from typing import Any, ClassVar, Literal, SupportsIndex, overload

from kafkalog.client.record_metadata import RecordMetadata
from kafkalog.errors import InvalidRecordError, ProducerTimeoutError
from kafkalog.record._kernel_py import Header, HeaderIn, RecordsEncoder, decode_records_v2, murmur2
from kafkalog.record.constants import INT32_MAX, INT64_MAX, INT64_MIN
from kafkalog.record.crc import Buffer

__all__ = ["IMPLEMENTATION", "ConsumerRecord", "ProducerBatch", "ProducerSendPath", "ProducerTopic",
           "RecordFuture", "decode_consumer_records"]

IMPLEMENTATION = "python"


def _int64(v: Any, what: str) -> int:
    v = int(v)
    if not INT64_MIN <= v <= INT64_MAX:
        raise InvalidRecordError(f"{what} {v} does not fit in a 64-bit varlong")
    return v


_OK, _ERR, _DONE, _DELIVERY = 0, 1, 2, 3     # the kinds of callback a future holds


class RecordFuture:
    """The producer's per-record future (kafka-python's ``FutureRecordMetadata``, plus the
    ``concurrent.futures`` and confluent-kafka spellings): the batch result it points at
    (``produce_result``, a :class:`~kafkalog.client.producer_future.ProduceRequestResult`), the
    record's index in the batch, its timestamp and serialized key/value sizes (-1 for null).

    A future resolves when its batch is appended to the log (or fails). Callbacks:
    :meth:`add_callback` (``fn(metadata)``), :meth:`add_errback` (``fn(exception)``),
    :meth:`add_done_callback` (``fn(future)``) and :meth:`add_delivery_callback`
    (``fn(err, metadata)``); they run in the thread that appended the batch, after the
    producer's lock is released (``ProduceRequestResult.fire``)."""

    __slots__ = ("index", "key_size", "produce_result", "timestamp", "value_size")
    produce_result: Any
    index: int
    timestamp: int
    key_size: int
    value_size: int

    # --- state ---------------------------------------------------------------------------------

    def is_done(self) -> bool:
        return bool(self.produce_result.done)

    def done(self) -> bool:
        """``concurrent.futures`` spelling of :meth:`is_done`."""
        return bool(self.produce_result.done)

    def succeeded(self) -> bool:
        r = self.produce_result
        return bool(r.done and r.error is None)

    def failed(self) -> bool:
        r = self.produce_result
        return bool(r.done and r.error is not None)

    @property
    def exception(self) -> BaseException | None:
        """kafka-python: the error once failed (None while pending or succeeded)."""
        error: BaseException | None = self.produce_result.error
        return error

    @property
    def value(self) -> RecordMetadata | None:
        """kafka-python: the metadata once succeeded (None otherwise)."""
        r = self.produce_result
        return self._metadata() if r.done and r.error is None else None

    @property
    def partition(self) -> int:
        """The partition the record was given to (known at ``send``)."""
        partition: int = self.produce_result.partition
        return partition

    def _metadata(self) -> RecordMetadata:
        r = self.produce_result
        ts = r.log_append_time if r.log_append_time >= 0 else self.timestamp
        return RecordMetadata(r.topic, r.partition, r.base_offset + self.index, ts, self.key_size,
                              self.value_size, -1, r.log_start_offset)

    def get(self, timeout: float | None = None) -> RecordMetadata:
        """Wait (at most ``timeout`` seconds; None: no limit) and return the metadata, or raise the
        record's error; :class:`~kafkalog.errors.ProducerTimeoutError` when still pending after
        ``timeout``."""
        r = self.produce_result
        if not r.done and not r.wait(timeout):
            raise ProducerTimeoutError(f"Timeout after waiting for {timeout} s for the record "
                                       f"to {r.topic}-{r.partition} to be appended")
        if r.error is not None:
            raise r.error
        return self._metadata()

    def result(self, timeout: float | None = None) -> RecordMetadata:
        """``concurrent.futures`` spelling of :meth:`get`."""
        return self.get(timeout)

    # --- callbacks -------------------------------------------------------------------------------

    def _add(self, kind: int, fn: Callable[..., Any]) -> RecordFuture:
        r = self.produce_result
        with r.lock:
            if not r.done:
                if r.callbacks is None:
                    r.callbacks = []
                r.callbacks.append((self, kind, fn))
                return self
        self._call(kind, fn)
        return self

    def _call(self, kind: int, fn: Callable[..., Any]) -> None:
        """Run one callback of ``kind`` (the batch is done)."""
        err = self.produce_result.error
        if kind == _OK:
            if err is None:
                fn(self._metadata())
        elif kind == _ERR:
            if err is not None:
                fn(err)
        elif kind == _DONE:
            fn(self)
        else:
            fn(err, None if err is not None else self._metadata())

    def add_callback(self, fn: Callable[[RecordMetadata], object]) -> RecordFuture:
        """kafka-python: ``fn(metadata)`` on success."""
        return self._add(_OK, fn)

    def add_errback(self, fn: Callable[[BaseException], object]) -> RecordFuture:
        """kafka-python: ``fn(exception)`` on failure."""
        return self._add(_ERR, fn)

    def add_both(self, fn: Callable[[Any], object]) -> RecordFuture:
        """kafka-python: ``fn`` with the metadata or the exception."""
        self._add(_OK, fn)
        return self._add(_ERR, fn)

    def add_done_callback(self, fn: Callable[[RecordFuture], object]) -> RecordFuture:
        """``concurrent.futures`` style: ``fn(future)`` once done."""
        return self._add(_DONE, fn)

    def add_delivery_callback(
        self, fn: Callable[[BaseException | None, RecordMetadata | None], object]
    ) -> RecordFuture:
        """confluent-kafka's ``on_delivery(err, metadata)``."""
        return self._add(_DELIVERY, fn)

    def __repr__(self) -> str:
        r = self.produce_result
        state = "pending" if not r.done else ("error" if r.error is not None else "done")
        return f"<FutureRecordMetadata {r.topic}-{r.partition} #{self.index} {state}>"


class ProducerBatch:
    """One open producer batch (reference of the compiled ``ProducerBatch``).

    The compiled ``append`` and ``seal`` run without executing Python code in between, so under
    the GIL they are atomic against each other: the producer's send path appends without its lock.
    Here each is Python code that another thread may interrupt anywhere, so a lock of the batch
    makes them atomic in the same way (without it two senders took one record index, and a record
    appended while another thread sealed the batch was lost or left the batch's count wrong)."""

    def __init__(self, result: object, cap: int, full: int) -> None:
        self.encoder = RecordsEncoder()
        self.result = result
        self.cap = cap
        self.full_at = full
        self.sealed = False
        self.full = False
        self._lock = threading.Lock()

    def append(self, key: bytes | None, value: bytes | None, timestamp: int | None,
               headers: Iterable[HeaderIn] | None) -> RecordFuture | Literal[False] | None:
        if timestamp is None:
            ts = time.time_ns() // 1_000_000
        else:
            ts = _int64(timestamp, "timestamp")
            if ts < -1:
                raise InvalidRecordError(f"Invalid negative timestamp {ts}")
        with self._lock:
            if self.sealed:
                return None
            e = self.encoder
            saved = (len(e._buf), e._count, e._max_ts, e._last_delta, e._base_ts)
            e.append(key, value, ts, headers)
            if len(e._buf) > self.cap:
                del e._buf[saved[0]:]
                e._count, e._max_ts, e._last_delta, e._base_ts = saved[1:]
                return False
            if len(e._buf) >= self.full_at:
                self.full = True
        f = RecordFuture()
        f.produce_result = self.result
        f.index = saved[1]
        f.timestamp = ts
        f.key_size = -1 if key is None else len(key)
        f.value_size = -1 if value is None else len(value)
        return f

    def seal(self) -> bytes:
        with self._lock:
            self.sealed = True
            return self.encoder.finish()

    @property
    def count(self) -> int:
        return self.encoder.count

    @property
    def size_in_bytes(self) -> int:
        return self.encoder.size_in_bytes


class ProducerTopic:
    """A producer's open batches of one topic (reference of the compiled ``ProducerTopic``)."""

    __slots__ = ("batches", "sticky", "num_partitions", "keyed")

    def __init__(self, num_partitions: int, keyed: bool) -> None:
        self.batches: list[ProducerBatch | None] = [None] * num_partitions
        self.sticky = 0
        self.num_partitions = num_partitions
        self.keyed = keyed


#: the producer's full ``send``: ``(topic, value, key, partition, timestamp_ms, headers,
#: on_delivery) -> future``
SendSlow = Callable[[str, object, object, int | None, int | None, object, object], object]


class ProducerSendPath:
    """``Producer.send``'s common case (reference of the compiled ``ProducerSendPath``)."""

    def __init__(self, topics: Mapping[str, ProducerTopic], slow: SendSlow,
                 full: Callable[[ProducerBatch], object]) -> None:
        self._topics = topics
        self._slow = slow
        self._full = full

    def send(self, topic: str, value: object = None, key: object = None, *,
             partition: int | None = None, timestamp_ms: int | None = None, headers: object = None,
             on_delivery: object = None) -> object:
        st = self._topics.get(topic)
        if (st is not None and partition is None and headers is None and on_delivery is None
                and (value is None or type(value) is bytes)
                and (key is None or (st.keyed and type(key) is bytes))):
            if key is None:
                p = st.sticky
            else:
                p = (murmur2(key) & INT32_MAX) % st.num_partitions   # toPositive
            if 0 <= p < len(st.batches):
                b = st.batches[p]
                if b is not None:
                    fut = b.append(key, value, timestamp_ms, None)
                    if fut:
                        if b.full:
                            self._full(b)
                        return fut
        return self._slow(topic, value, key, partition, timestamp_ms, headers, on_delivery)


_CONSUMER_RECORD_FIELDS = ("topic", "partition", "leader_epoch", "offset", "timestamp", "timestamp_type",
                           "key", "value", "headers")


class ConsumerRecord:
    """One record as the consumer returns it: kafka-python's ``ConsumerRecord`` fields and the
    behaviour of its 9-field named tuple (``topic, partition, leader_epoch, offset, timestamp,
    timestamp_type, key, value, headers``): attributes, read-only; indexing, slicing, ``len``,
    iteration and unpacking; comparison with another record or a tuple as the tuple of the 9
    fields; ``_fields``, ``_asdict()``, ``_replace(**fields)``, ``_make(iterable)``. ``checksum``
    (None: v2 batches checksum whole batches) and ``serialized_key_size`` /
    ``serialized_value_size`` / ``serialized_header_size`` (-1 for a null key/value/no headers) are
    computed when read. ``headers`` is created on first access when the record has none."""

    __slots__ = ("_headers", "key", "leader_epoch", "offset", "partition", "timestamp", "timestamp_type",
                 "topic", "value")
    _fields: ClassVar[tuple[str, ...]] = _CONSUMER_RECORD_FIELDS

    topic: str
    partition: int
    leader_epoch: int | None
    offset: int
    timestamp: int
    timestamp_type: int
    key: Any
    value: Any
    _headers: list[Header] | None

    def __init__(self, topic: str, partition: int, leader_epoch: int | None, offset: int, timestamp: int,
                 timestamp_type: int, key: Any, value: Any, headers: list[Header] | None = None) -> None:
        init = object.__setattr__
        init(self, "topic", topic)
        init(self, "partition", partition)
        init(self, "leader_epoch", leader_epoch)
        init(self, "offset", _int64(index(offset), "offset"))
        init(self, "timestamp", _int64(index(timestamp), "timestamp"))
        init(self, "timestamp_type", timestamp_type)
        init(self, "key", key)
        init(self, "value", value)
        init(self, "_headers", headers)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"ConsumerRecord attribute {name!r} is read-only")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"ConsumerRecord attribute {name!r} is read-only")

    @classmethod
    def _make(cls, iterable: Iterable[Any]) -> ConsumerRecord:
        return cls(*iterable)

    @property
    def headers(self) -> list[Header]:
        h = self._headers
        if h is None:
            h = []
            object.__setattr__(self, "_headers", h)
        return h

    @property
    def checksum(self) -> None:
        return None

    @property
    def serialized_key_size(self) -> int:
        return -1 if self.key is None else len(self.key)

    @property
    def serialized_value_size(self) -> int:
        return -1 if self.value is None else len(self.value)

    @property
    def serialized_header_size(self) -> int:
        h = self._headers
        if not h:
            return -1
        return sum(len(k.encode("utf-8")) + (0 if v is None else len(v)) for k, v in h)

    def _tuple(self) -> tuple[Any, ...]:
        return (self.topic, self.partition, self.leader_epoch, self.offset, self.timestamp,
                self.timestamp_type, self.key, self.value, self.headers)

    def __len__(self) -> int:
        return 9

    @overload
    def __getitem__(self, i: SupportsIndex) -> Any: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[Any, ...]: ...

    def __getitem__(self, i: SupportsIndex | slice) -> Any:
        return self._tuple()[i]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._tuple())

    def __contains__(self, item: object) -> bool:
        return item in self._tuple()

    def _other(self, other: object) -> tuple[Any, ...] | None:
        if isinstance(other, ConsumerRecord):
            return other._tuple()
        return other if isinstance(other, tuple) else None

    def __eq__(self, other: object) -> bool:
        o = self._other(other)
        return NotImplemented if o is None else self._tuple() == o

    def __ne__(self, other: object) -> bool:
        o = self._other(other)
        return NotImplemented if o is None else self._tuple() != o

    def __lt__(self, other: object) -> bool:
        o = self._other(other)
        return NotImplemented if o is None else self._tuple() < o

    def __le__(self, other: object) -> bool:
        o = self._other(other)
        return NotImplemented if o is None else self._tuple() <= o

    def __gt__(self, other: object) -> bool:
        o = self._other(other)
        return NotImplemented if o is None else self._tuple() > o

    def __ge__(self, other: object) -> bool:
        o = self._other(other)
        return NotImplemented if o is None else self._tuple() >= o

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple[type[ConsumerRecord], tuple[Any, ...]]:
        return (ConsumerRecord, self._tuple())

    def __repr__(self) -> str:
        return (f"ConsumerRecord(topic={self.topic!r}, partition={self.partition!r}, "
                f"leader_epoch={self.leader_epoch!r}, offset={self.offset!r}, "
                f"timestamp={self.timestamp!r}, timestamp_type={self.timestamp_type!r}, "
                f"key={self.key!r}, value={self.value!r}, headers={self.headers!r})")

    def _asdict(self) -> dict[str, Any]:
        return dict(zip(_CONSUMER_RECORD_FIELDS, self._tuple(), strict=True))

    def _replace(self, **fields: Any) -> ConsumerRecord:
        """A new record with ``fields`` replaced (``key=``/``value=`` after deserialisation)."""
        unknown = [f for f in fields if f not in _CONSUMER_RECORD_FIELDS]
        if unknown:
            raise ValueError(f"Got unexpected field names: {unknown!r}")
        g = fields.get
        return ConsumerRecord(g("topic", self.topic), g("partition", self.partition),
                              g("leader_epoch", self.leader_epoch), g("offset", self.offset),
                              g("timestamp", self.timestamp), g("timestamp_type", self.timestamp_type),
                              g("key", self.key), g("value", self.value), g("headers", self._headers))


def decode_consumer_records(body: Buffer, count: int, base_offset: int, base_timestamp: int,
                            log_append_time: int, topic: str, partition: int, leader_epoch: int | None,
                            timestamp_type: int, start: int, end: int) -> list[ConsumerRecord]:
    """Decode ``count`` v2 records from ``body`` straight into :class:`ConsumerRecord`s, keeping the
    records whose offset is in ``[start, end)``. Checks and errors as :func:`decode_records_v2`."""
    start = _int64(start, "start")
    end = _int64(end, "end")
    return [ConsumerRecord(topic, partition, leader_epoch, r.offset, r.timestamp, timestamp_type, r.key,
                           r.value, r._headers)
            for r in decode_records_v2(body, count, base_offset, base_timestamp, -1, log_append_time)
            if start <= r.offset < end]
