"""The embedded producer: Kafka's ``KafkaProducer`` semantics over a data directory.

::

    with dl.producer({"linger.ms": 5, "compression.type": "lz4"}) as p:      # or linger_ms=5
        fut = p.send("orders", b"payload", key=b"customer-42")
        md = fut.get()                   # RecordMetadata(topic, partition, offset, timestamp, ...)

Kafka's configuration keys and defaults (:data:`kafkalog.client.config.PRODUCER_DEFAULTS`), as a dict
of dotted keys or underscored keyword arguments.

* Partitioning as Kafka's Java client: ``toPositive(murmur2(key)) % partitions`` for a keyed record,
  a *sticky* partition for keyless records that moves on (round-robin) whenever its batch is
  completed; an explicit ``partition`` wins; ``partitioner.class`` may be a kafka-python style
  callable ``fn(key_bytes, all_partitions, available_partitions) -> partition``.
* One open v2 batch per partition, encoded record by record by the compiled record kernel
  (``ProducerBatch``; ``send``'s common case is the kernel's ``ProducerSendPath``). A batch is
  appended once its records reach ``batch.size`` bytes (uncompressed), when the next record would
  take it past the topic's limits, when it is ``linger.ms`` old (the producer's one background thread:
no further call is needed), on
  :meth:`Producer.flush` and on :meth:`Producer.close`. A batch never exceeds the topic's
  ``max.message.bytes``, its ``segment.bytes`` or ``max.request.size``; a record that alone exceeds
  one of them fails (through its future) with :class:`~kafkalog.errors.RecordTooLargeError` naming
  the sizes.
* ``send`` returns a :class:`~kafkalog.client.producer_future.FutureRecordMetadata`; errors arrive
  through it. ``on_delivery(err, metadata)`` (confluent-kafka) may be given to ``send``.
* ``enable.idempotence`` (default true): a producer id from the data directory's
  :class:`~kafkalog.coordinator.producer_ids.ProducerIdManager`, epoch, and a sequence per
  partition, checked by the log's producer state, so a batch appended twice is stored once.
* ``transactional.id``: :meth:`init_transactions`, :meth:`begin_transaction`,
  :meth:`commit_transaction`, :meth:`abort_transaction` through the data directory's
  :class:`~kafkalog.coordinator.transaction_coordinator.TransactionCoordinator` (COMMIT/ABORT
  markers, ``__transaction_state``, timeout abort).
* A topic that does not exist is created with one partition on first send (a Kafka broker's
  ``auto.create.topics.enable`` / ``num.partitions`` defaults).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import (
    Any,
    Protocol,
    Self,
    cast,
)

from kafkalog.client import kernel as client_kernel
from kafkalog.client.config import PRODUCER_DEFAULTS, client_config
from kafkalog.client.partitioner import partition_for_key as _partition_for_key
from kafkalog.client.producer_future import (
    FutureRecordMetadata,
    ProduceRequestResult,
    RecordMetadata,
    new_future,
    refused,
)
from kafkalog.coordinator.group_metadata import ConsumerGroupMetadata
from kafkalog.coordinator.offsets import OffsetsStore
from kafkalog.coordinator.producer_ids import ProducerIdManager
from kafkalog.coordinator.transaction_coordinator import TransactionCoordinator
from kafkalog.errors import (
    IllegalStateError,
    InvalidConfigError,
    InvalidTopicError,
    KafkalogError,
    LogDirError,
    ProducerStateError,
    RecordTooLargeError,
)
from kafkalog.log.manager import LogManager
from kafkalog.record import kernel
from kafkalog.record.builder import v2_header
from kafkalog.record.compression import compress, validate_level
from kafkalog.record.constants import INT32_MAX, RECORD_BATCH_OVERHEAD, CompressionType

#: a producer's topic state extends the client kernel's (its open batches, for the send path)
_KernelTopic = client_kernel.ProducerTopic

__all__ = ["FutureRecordMetadata", "IllegalStateError", "Producer", "RecordMetadata", "codec_id"]

_MAX_SEQUENCE = INT32_MAX
_time_ns = time.time_ns
_monotonic = time.monotonic
_Encoder = kernel.RecordsEncoder
_ProducerBatch = client_kernel.ProducerBatch


class _Coordinators(Protocol):
    """What the producer needs from the :class:`~kafkalog.client.datalog.DataLog` it belongs to."""

    @property
    def manager(self) -> Any: ...

    def producer_id_manager(self) -> ProducerIdManager: ...

    def transaction_coordinator(self) -> TransactionCoordinator: ...

    def offsets_store(self) -> OffsetsStore: ...


def codec_id(compression: Any) -> int:
    """The codec id of a ``compression.type`` value (Kafka's codec name, None or an id); the
    topic-level spellings ``producer`` and ``uncompressed`` give 0."""
    if compression is None:
        return 0
    if isinstance(compression, int) and not isinstance(compression, bool):
        if not 0 <= compression <= 4:
            raise InvalidConfigError(f"Unknown compression codec id {compression}")
        return compression
    name = str(compression).lower()
    if name in ("producer", "uncompressed"):
        return 0
    try:
        return int(CompressionType.for_name(name))
    except KeyError:
        raise InvalidConfigError(f"Invalid value {compression!r} for configuration compression.type: "
                                 f"expected one of none, gzip, snappy, lz4, zstd") from None


def as_bytes(x: Any) -> bytes | None:
    """``bytes`` of a key/value: bytes-like, ``str`` (UTF-8) or None."""
    if x is None or type(x) is bytes:
        return x
    if isinstance(x, str):
        return x.encode("utf-8")
    return bytes(x)


def normalise_headers(headers: Any) -> list[tuple[str, bytes | None]] | None:
    """``[(str, bytes | None)]`` from a list of pairs or a mapping."""
    if not headers:
        return None
    if isinstance(headers, Mapping):
        headers = headers.items()
    return [(k if isinstance(k, str) else bytes(k).decode("utf-8"), as_bytes(v)) for k, v in headers]


def _int(cfg: Mapping[str, Any], key: str, minimum: int) -> int:
    v = cfg[key]
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise InvalidConfigError(f"Invalid value {v!r} for configuration {key}: expected an integer")
    try:
        n = int(v)
    except ValueError:
        raise InvalidConfigError(f"Invalid value {v!r} for configuration {key}: expected an integer") from None
    if n < minimum:
        raise InvalidConfigError(f"Invalid value {n} for configuration {key}: Value must be at least {minimum}")
    return n


def _bool(cfg: Mapping[str, Any], key: str) -> bool:
    v = cfg[key]
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.lower() in ("true", "false"):
        return v.lower() == "true"
    raise InvalidConfigError(f"Invalid value {v!r} for configuration {key}: expected a boolean")


class _TopicState(_KernelTopic):
    """A topic as seen by one producer: (from the kernel's ``ProducerTopic``) its open batch per
    partition, sticky partition and partitioner flag; its logs, next sequence per partition, and
    the batch limits derived from the topic's configuration."""

    __slots__ = ("batch_size", "body_cap", "cap_reason", "codec", "logs", "n", "name", "seqs")

    def __init__(self, name: str, logs: list, codec: int, body_cap: int, batch_size: int,
                 cap_reason: str, keyed: bool) -> None:
        super().__init__(len(logs), keyed)
        self.name = name
        self.logs = logs
        self.n = len(logs)
        self.seqs = [0] * self.n
        self.codec = codec
        self.body_cap = body_cap          # record bytes a batch may hold (a hard limit)
        self.batch_size = batch_size      # record bytes after which a batch is complete
        self.cap_reason = cap_reason


class Producer:
    """Kafka's producer over a data directory (see the module documentation). Get one with
    :meth:`kafkalog.client.datalog.DataLog.producer`; use it as a context manager or :meth:`close`
    it (which appends what is still open)."""

    def __init__(self, dl: _Coordinators, conf: Mapping[str, Any] | None = None, *,
                 linger_thread: bool = True, **config: Any) -> None:
        cfg = client_config(PRODUCER_DEFAULTS, conf, **config)
        self.config = cfg
        self._dl = dl
        self._batch_size = _int(cfg, "batch.size", 0)
        self._linger = _int(cfg, "linger.ms", 0) / 1000.0
        self._max_request = _int(cfg, "max.request.size", 1)
        self._codec = codec_id(cfg["compression.type"])
        self._level = cfg["compression.level"]
        validate_level(self._codec, self._level)
        self._txn_timeout = _int(cfg, "transaction.timeout.ms", 1)
        # appends are synchronous and memory is bounded by one open batch per partition, so
        # these hold by construction once valid; Kafka's own rule between them is checked
        _int(cfg, "buffer.memory", 0)
        _int(cfg, "max.block.ms", 0)
        request_timeout = _int(cfg, "request.timeout.ms", 0)
        if _int(cfg, "delivery.timeout.ms", 0) < _int(cfg, "linger.ms", 0) + request_timeout:
            raise InvalidConfigError(f"delivery.timeout.ms should be equal to or larger than linger.ms + "
                                     f"request.timeout.ms ({cfg['linger.ms']} + {request_timeout})")
        acks = str(cfg["acks"]).lower()
        if acks not in ("all", "-1", "0", "1"):
            raise InvalidConfigError(f"Invalid value {cfg['acks']!r} for configuration acks: expected "
                                     f"all, -1, 0 or 1")
        part = cfg["partitioner.class"]
        if part in ("murmur2_random", "murmur2", "default", "DefaultPartitioner"):
            part = None
        if part is not None and not callable(part):
            raise InvalidConfigError(f"Invalid value {part!r} for configuration partitioner.class: "
                                     f"expected None (Kafka's default) or a callable")
        self._partitioner: Callable[..., int] | None = part
        self._ignore_keys = _bool(cfg, "partitioner.ignore.keys")
        self._transactional_id: str | None = cfg["transactional.id"]
        idempotent = _bool(cfg, "enable.idempotence")
        if self._transactional_id is not None:
            if not isinstance(self._transactional_id, str) or not self._transactional_id:
                raise InvalidConfigError(f"Invalid transactional.id {self._transactional_id!r}")
            if ("enable.idempotence" in (conf or {}) or "enable_idempotence" in config) and not idempotent:
                raise InvalidConfigError("Cannot set a transactional.id without also enabling idempotence.")
            idempotent = True
        if idempotent and acks not in ("all", "-1"):
            raise InvalidConfigError("Must set acks to all in order to use the idempotent producer.")
        m = dl.manager
        if not isinstance(m, LogManager):
            raise LogDirError("the data directory is open read-only", file=m.data_dir)
        self._manager: LogManager = m
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._topics: dict[str, _TopicState] = {}
        # open batches -> (topic, partition, linger deadline)
        self._open: dict[Any, tuple[_TopicState, int, float]] = {}
        self._appended: dict[tuple[str, int], list[int]] = {}
        self._count = 0
        self._batches = 0
        self._closed = False
        #: the first error of an append (also delivered through the futures): for bulk use
        self.first_error: BaseException | None = None
        self._pid = -1
        self._epoch = -1
        # transactions: None (not transactional), "uninitialized", "ready", "in_transaction", "fatal"
        self._txn_state: str | None = "uninitialized" if self._transactional_id else None
        self._txn_partitions: set[tuple[str, int]] = set()
        self._txn_error: BaseException | None = None
        if idempotent and self._transactional_id is None:
            self._pid = dl.producer_id_manager().generate_producer_id()
            self._epoch = 0
        self._use_thread = linger_thread
        self._thread: threading.Thread | None = None
        self._thread_idle = True
        # the common case of send in compiled code (the kernel's ProducerSendPath); the rest,
        # and every check, in _send_slow
        send_path = client_kernel.ProducerSendPath(self._topics, cast(Any, self._send_slow),
                                                   self._batch_full)
        self.send = cast(Any, send_path.send)  # type: ignore[method-assign]

    # --- properties ---------------------------------------------------------------------------------

    @property
    def producer_id(self) -> int:
        """The producer id (-1 when not idempotent, or before :meth:`init_transactions`)."""
        return self._pid

    @property
    def producer_epoch(self) -> int:
        return self._epoch

    @property
    def records_sent(self) -> int:
        """Records appended to logs so far (open batches not included)."""
        return self._count

    @property
    def batches_sent(self) -> int:
        return self._batches

    def appended_offsets(self) -> dict[tuple[str, int], tuple[int, int]]:
        """``{(topic, partition): (first, last offset)}`` appended since the previous call."""
        with self._lock:
            out = {k: (v[0], v[1]) for k, v in self._appended.items()}
            self._appended = {}
        return out

    # --- topics -------------------------------------------------------------------------------------

    def _topic(self, topic: str) -> _TopicState:
        with self._lock:
            if self._closed:
                raise IllegalStateError("Cannot perform operation after producer has been closed")
            st = self._topics.get(topic)
            if st is not None:
                return st
            m = self._manager
            if not isinstance(topic, str):
                raise InvalidTopicError(f"Invalid topic {topic!r}")
            if not m.has_topic(topic):
                m.create_topic(topic, 1, exist_ok=True)
            tc = m.topic_config(topic)
            logs = [m.get_log(topic, p) for p in m.partitions_of(topic)]
            # the topic's compression.type names a codec: the data is stored with it, as a broker
            # recompresses to it; "producer" keeps the producer's; "uncompressed" stores none
            ct = str(tc.compression_type).lower()
            codec = self._codec if ct == "producer" else codec_id(ct)
            limits = {"max.message.bytes": int(tc.max_message_bytes), "segment.bytes": int(tc.segment_bytes),
                      "max.request.size": self._max_request}
            reason = min(limits, key=lambda k: limits[k])
            cap = limits[reason] - RECORD_BATCH_OVERHEAD
            if codec == 2:                         # snappy's worst case: n + n/6 + 32
                cap = cap * 6 // 7 - 64
            elif codec:                            # gzip, lz4, zstd: well under 1% + a frame
                cap = cap - cap // 100 - 128
            cap = max(cap, 1)
            st = _TopicState(topic, logs, codec, cap, min(max(self._batch_size, 1), cap), reason,
                             self._partitioner is None and not self._ignore_keys)
            self._topics[topic] = st
            return st

    def partitions_for(self, topic: str) -> set[int]:
        """kafka-python: the partition numbers of ``topic``."""
        return set(range(self._topic(topic).n))

    # --- send ---------------------------------------------------------------------------------------

    def send(self, topic: str, value: Any = None, key: Any = None, *, partition: int | None = None,
             timestamp_ms: int | None = None, headers: Any = None,
             on_delivery: Callable[[BaseException | None, RecordMetadata | None], Any] | None = None
             ) -> FutureRecordMetadata:
        """Add one record; returns its future. ``key``/``value``: bytes-like, ``str`` (UTF-8) or
        None; ``headers``: ``[(str, bytes | None)]`` or a mapping; ``timestamp_ms``: ms (default
        now). ``on_delivery(err, metadata)`` is called once the record is appended or failed."""
        return self._send_slow(topic, value, key, partition, timestamp_ms, headers, on_delivery)

    def _batch_full(self, b: Any) -> None:
        """A record filled batch ``b`` (called by the compiled send path): append it, and open
        the next batch of the topic's sticky partition at once, so that the next keyless record
        stays on the compiled path (an open batch still empty at its linger deadline is dropped)."""
        completed: list[ProduceRequestResult] = []
        with self._lock:
            entry = self._open.get(b)
            self._drain_locked(b, completed)
            if entry is not None and not self._closed and self._txn_state in (None, "in_transaction"):
                st = entry[0]
                if st.batches[st.sticky] is None:
                    self._new_batch(st, st.sticky)
        for r in completed:
            r.fire()

    def _send_slow(self, topic: str, value: Any, key: Any, partition: int | None,
                   timestamp_ms: int | None, headers: Any,
                   on_delivery: Callable[[BaseException | None, RecordMetadata | None], Any] | None
                   ) -> FutureRecordMetadata:
        st = self._topics.get(topic)
        if st is None or self._closed:
            st = self._topic(topic)
        if self._txn_state is not None and self._txn_state != "in_transaction":
            raise IllegalStateError(f"Cannot call send in state {self._txn_state}: call "
                                    f"begin_transaction first")
        if value is not None and type(value) is not bytes:
            value = as_bytes(value)
        if key is not None and type(key) is not bytes:
            key = as_bytes(key)
        if partition is None:
            if self._partitioner is not None:
                parts = list(range(st.n))
                partition = self._partitioner(key, parts, parts)
            elif key is not None and not self._ignore_keys:
                partition = _partition_for_key(key, st.n)
            else:
                partition = st.sticky
        if type(partition) is not int or not 0 <= partition < st.n:
            raise InvalidTopicError(f"Partition {partition} of topic {st.name!r} does not exist "
                                    f"(it has {st.n} partitions)")
        if headers:
            headers = normalise_headers(headers)
        completed: list[ProduceRequestResult] = []
        with self._lock:
            fut = self._append_slow(st, partition, key, value, timestamp_ms, headers, completed)
            if on_delivery is not None:
                r = fut.produce_result
                if r.done:
                    completed.append(r)
                if r.callbacks is None:
                    r.callbacks = []
                r.callbacks.append((fut, 3, on_delivery))
            b = st.batches[partition]
            if b is not None and b.full:
                self._drain_locked(b, completed)
        for r in completed:
            r.fire()
        return fut

    def _append_slow(self, st: _TopicState, partition: int, key: bytes | None, value: bytes | None,
                     timestamp_ms: int | None, headers: list | None,
                     completed: list[ProduceRequestResult]) -> FutureRecordMetadata:
        """Append a record under the lock: to the open batch, else to a new one (the open batch is
        appended first when the record does not fit); a failed future when it alone is too large."""
        while True:
            b = st.batches[partition]
            if b is None:
                if self._closed:
                    raise IllegalStateError("Cannot perform operation after producer has been closed")
                b = self._new_batch(st, partition)
            fut = b.append(key, value, timestamp_ms, headers)
            if fut:     # the kernel's RecordFuture, whose methods are bound at run time
                return cast(FutureRecordMetadata, fut)
            if b.count == 0:
                return self._too_large(st, partition, key, value, headers, timestamp_ms)
            self._drain_locked(b, completed)

    def _new_batch(self, st: _TopicState, partition: int) -> Any:
        """Open a batch for ``partition`` (lock held); its linger deadline starts now."""
        b = _ProducerBatch(ProduceRequestResult(st.name, partition, self._lock), st.body_cap,
                           st.batch_size)
        st.batches[partition] = b
        self._open[b] = (st, partition, _monotonic() + self._linger)
        if self._use_thread:
            if self._thread is None:
                self._start_thread()
            elif self._thread_idle:
                self._cond.notify()
        return b

    def _too_large(self, st: _TopicState, partition: int, key: bytes | None, value: bytes | None,
                   headers: list | None, timestamp_ms: int | None) -> FutureRecordMetadata:
        ts = _time_ns() // 1000000 if timestamp_ms is None else timestamp_ms
        size = _Encoder().append(key, value, ts, headers) + RECORD_BATCH_OVERHEAD
        limit = st.body_cap + RECORD_BATCH_OVERHEAD
        r = ProduceRequestResult(st.name, partition, self._lock)
        r.complete(-1, -1, -1, RecordTooLargeError(
            f"The message is {size} bytes when serialized (in a batch of one) which is larger than "
            f"{limit}, the limit set by {st.cap_reason} of topic {st.name!r}"
            f"{' (less the compression margin)' if st.codec else ''}"))
        return new_future(r, 0, ts, -1 if key is None else len(key), -1 if value is None else len(value))

    def send_many(self, topic: str, values: Sequence[Any], *, partition: int | None = None,
                  timestamp_ms: int | None = None) -> None:
        """Add keyless records (values only): a record refused at once raises its error; an append
        that fails later is delivered to :attr:`first_error`."""
        st = self._topic(topic)
        if partition is not None and (type(partition) is not int or not 0 <= partition < st.n):
            raise InvalidTopicError(f"Partition {partition} of topic {st.name!r} does not exist "
                                    f"(it has {st.n} partitions)")
        ts = _time_ns() // 1000000 if timestamp_ms is None else timestamp_ms
        send = self.send
        for v in values:
            f = send(topic, v, None, partition=partition, timestamp_ms=ts)
            err = refused(f)
            if err is not None:
                raise err

    # --- appending batches --------------------------------------------------------------------------

    def _drain_locked(self, b: Any, completed: list[ProduceRequestResult]) -> None:
        """Append batch ``b`` to its log and resolve its futures (lock held). Results with
        callbacks go to ``completed`` (fire them after releasing the lock)."""
        entry = self._open.pop(b, None)
        if entry is None:
            return                                   # appended already
        st, p, _deadline = entry
        body = b.seal()
        r = b.result
        count = b.count
        if st.batches[p] is b:
            st.batches[p] = None
            if count and p == st.sticky and st.n > 1:
                st.sticky = (p + 1) % st.n
        if count == 0:
            r.complete(-1, -1, -1, None)
            return
        enc = b.encoder
        try:
            if st.codec:
                body = compress(st.codec, body, magic=2, level=self._level)
            pid = self._pid
            seq = st.seqs[p] if pid >= 0 else -1
            attrs = st.codec
            if self._txn_state is not None:
                attrs |= 0x10
                self._add_to_txn(st.name, p)
            buf = bytearray(v2_header(body, base_offset=0, attributes=attrs, last_offset_delta=count - 1,
                                      base_timestamp=enc.base_timestamp, max_timestamp=enc.max_timestamp,
                                      producer_id=pid, producer_epoch=self._epoch, base_sequence=seq,
                                      count=count, partition_leader_epoch=-1))
            buf += body
            info = st.logs[p].append(buf)
        except Exception as e:
            if self.first_error is None:
                self.first_error = e
            if self._txn_state is not None:
                self._txn_error = e
            r.complete(-1, -1, -1, e)
        else:
            if pid >= 0:
                st.seqs[p] = (seq + count) & _MAX_SEQUENCE
            r.complete(info.first_offset, info.log_append_time, info.log_start_offset, None)
            key = (st.name, p)
            a = self._appended.get(key)
            if a is None:
                self._appended[key] = [info.first_offset, info.last_offset]
            else:
                a[1] = info.last_offset
            self._count += count
            self._batches += 1
        if r.callbacks:
            completed.append(r)

    def flush(self, timeout: float | None = None) -> None:
        """Append every open batch (everything sent so far is appended, or failed, on return).
        ``timeout`` is accepted for kafka-python compatibility (nothing here waits on a network)."""
        completed: list[ProduceRequestResult] = []
        with self._lock:
            for b in list(self._open):
                self._drain_locked(b, completed)
        for r in completed:
            r.fire()

    # --- the linger thread --------------------------------------------------------------------------

    def _start_thread(self) -> None:
        t = threading.Thread(target=self._run, name=f"kafkalog-producer-{id(self):x}", daemon=True)
        self._thread = t
        self._thread_idle = False
        t.start()

    def _run(self) -> None:
        # Waits for the earliest linger deadline. With nothing open it polls every linger.ms for
        # a while (so that a busy producer creating batch after batch never has to wake it), then
        # sleeps until a new batch notifies it.
        cond = self._cond
        poll = max(self._linger, 0.001)
        idle_polls = 0
        with cond:
            while True:
                now = _monotonic()
                due = [b for b, (_st, _p, deadline) in self._open.items() if deadline <= now]
                if due:
                    completed: list[ProduceRequestResult] = []
                    for b in due:
                        self._drain_locked(b, completed)
                    if completed:
                        cond.release()
                        try:
                            for r in completed:
                                r.fire()
                        finally:
                            cond.acquire()
                    continue
                if self._closed and not self._open:
                    return
                if self._open:
                    idle_polls = 0
                    cond.wait(max(min(e[2] for e in self._open.values()) - now, 0.0))
                elif idle_polls < 20:
                    idle_polls += 1
                    cond.wait(poll)
                else:
                    self._thread_idle = True
                    cond.wait()
                    self._thread_idle = False
                    idle_polls = 0

    # --- transactions -------------------------------------------------------------------------------

    def _coordinator(self) -> TransactionCoordinator:
        if self._transactional_id is None:
            raise IllegalStateError("Transactional method invoked on a non-transactional producer "
                                    "(set transactional.id)")
        return self._dl.transaction_coordinator()

    def init_transactions(self, timeout: float | None = None) -> None:
        """Kafka's ``initTransactions``: get the producer id and epoch for ``transactional.id``,
        aborting a transaction a previous producer with the same id left open, and fencing it."""
        coord = self._coordinator()
        with self._lock:
            if self._txn_state not in ("uninitialized", "fatal"):
                raise IllegalStateError(f"init_transactions called in state {self._txn_state}")
            assert self._transactional_id is not None
            self._pid, self._epoch = coord.init_producer_id(self._transactional_id, self._txn_timeout)
            for st in self._topics.values():
                st.seqs = [0] * st.n
            self._txn_state = "ready"
            self._txn_error = None

    def begin_transaction(self) -> None:
        self._coordinator()
        with self._lock:
            if self._txn_state != "ready":
                raise IllegalStateError(f"begin_transaction called in state {self._txn_state}")
            self._txn_state = "in_transaction"
            self._txn_partitions = set()
            self._txn_error = None

    def _add_to_txn(self, topic: str, partition: int) -> None:
        tp = (topic, partition)
        if tp not in self._txn_partitions:
            assert self._transactional_id is not None
            self._dl.transaction_coordinator().add_partitions_to_txn(
                self._transactional_id, self._pid, self._epoch, [tp])
            self._txn_partitions.add(tp)

    def send_offsets_to_transaction(self, offsets: Mapping[Any, Any],
                                    group_metadata: str | ConsumerGroupMetadata) -> None:
        """Kafka's ``sendOffsetsToTransaction``: commit a consumer group's offsets
        (``{TopicPartition: offset | OffsetAndMetadata | (offset, metadata, leader_epoch)}``, the
        next offsets to read) with the transaction. ``group_metadata`` is the consumer's
        :meth:`~kafkalog.client.consumer.Consumer.group_metadata` or a group id (kafka-python's
        ``consumer_group_id``). The group's ``__consumer_offsets`` partition joins the transaction
        and the offsets are written there in it: they count once the transaction commits, and are
        discarded if it aborts (or its producer dies and it times out): the data directory's
        transaction coordinator tells the offsets store once the markers are written."""
        group = group_metadata if isinstance(group_metadata, str) else group_metadata.group_id
        self._coordinator()
        with self._lock:
            if self._txn_state != "in_transaction":
                raise IllegalStateError(f"send_offsets_to_transaction called in state {self._txn_state}: "
                                        f"begin_transaction first")
        if not offsets:
            return
        store = self._dl.offsets_store()
        tp = store.offsets_partition(group)
        with self._lock:
            self._add_to_txn(tp.topic, tp.partition)
            store.commit_transactional(group, offsets, self._pid, self._epoch)

    def _end(self, commit: bool) -> None:
        coord = self._coordinator()
        with self._lock:
            if self._txn_state != "in_transaction":
                raise IllegalStateError(f"{'commit' if commit else 'abort'}_transaction called in state "
                                        f"{self._txn_state}")
        self.flush()
        with self._lock:
            if commit and isinstance(self._txn_error, ProducerStateError):
                self._txn_state = "fatal"            # fenced / epoch bumped: this producer is done
                raise self._txn_error
            if commit and self._txn_error is not None:
                raise KafkalogError(f"Cannot commit transaction: a record of it failed "
                                    f"({self._txn_error}); abort it") from self._txn_error
            assert self._transactional_id is not None
            if not self._txn_partitions:          # nothing written: nothing to end (as Kafka's client)
                self._txn_state = "ready"
                return
            try:
                coord.end_txn(self._transactional_id, self._pid, self._epoch, commit)
            except KafkalogError:
                self._txn_state = "fatal"
                raise
            self._txn_state = "ready"
            self._txn_partitions = set()

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Append what is open, then write COMMIT markers in every partition of the transaction."""
        self._end(True)

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Append what is open, then write ABORT markers (``read_committed`` readers skip it all)."""
        self._end(False)

    # --- lifecycle ----------------------------------------------------------------------------------

    def close(self, timeout: float | None = None) -> None:
        """Append what is open, stop the linger thread and refuse further sends."""
        if self._closed:
            return
        self.flush()
        with self._lock:
            self._closed = True
            self._cond.notify_all()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Producer(pid={self._pid}, epoch={self._epoch}, topics={sorted(self._topics)})"
