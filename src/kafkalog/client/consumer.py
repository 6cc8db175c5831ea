"""The embedded consumer, in kafka-python's shape and with Kafka's consumer semantics::

    consumer = kafkalog.open(path).consumer("orders", group_id="billing", auto_offset_reset="earliest")
    for record in consumer:                     # waits for new data
        handle(record.key, record.value)

``conf`` takes Kafka's dotted keys (as confluent-kafka does), keyword arguments take underscores (as
kafka-python does); :data:`~kafkalog.client.config.CONSUMER_DEFAULTS` lists the keys. Positions,
``auto.offset.reset``, ``isolation.level`` (the last stable offset and aborted transactions), committed
offsets (``__consumer_offsets``, :class:`~kafkalog.coordinator.offsets.OffsetsStore`), auto-commit and
out-of-range handling follow Kafka's ``KafkaConsumer``. A waiting ``poll`` is woken by an append in this
process (the log's publish listener) or, on a read-only directory another process writes, by inotify
(:mod:`kafkalog.client.wakeup`). A corrupt batch raises :class:`~kafkalog.errors.CorruptRecordError`
naming the file and byte position.

There is no group management: a consumer owns every partition it subscribes to (a group of one member),
and a subscription by pattern picks up topics created later.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from re import Pattern
from typing import Any, NamedTuple, Self, TypeVar, cast

from kafkalog.client.config import CONSUMER_DEFAULTS, client_config
from kafkalog.client.kernel import ConsumerRecord, decode_consumer_records
from kafkalog.client.readonly import _ReadOnlyManager
from kafkalog.client.wakeup import AppendNotifier, FileWatcher, Wakeup
from kafkalog.coordinator.group_metadata import ConsumerGroupMetadata
from kafkalog.coordinator.offsets import OffsetAndMetadata, OffsetsStore
from kafkalog.errors import (
    ConsumerOffsetOutOfRangeError,
    IllegalStateError,
    InvalidConfigError,
    InvalidTopicError,
    KafkalogError,
    LogDirError,
    NoOffsetForPartitionError,
)
from kafkalog.log.log import Log
from kafkalog.log.naming import TopicPartition
from kafkalog.log.read.reader import PartitionReader, ReadablePartition
from kafkalog.log.read.walk import ViewBatch
from kafkalog.record.batch import DefaultRecordBatch
from kafkalog.record.constants import IsolationLevel, TimestampType
from kafkalog.record.legacy import LegacyRecordBatch

__all__ = [
    "Consumer",
    "ConsumerRecord",
    "IllegalStateError",
    "NoOffsetForPartitionError",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "TopicPartition",
    "batch_records",
]

_RESETS = ("earliest", "latest", "none")
#: how often a read-only consumer looks at the files where inotify is not available
FILE_POLL_INTERVAL_MS = 50


class OffsetAndTimestamp(NamedTuple):
    offset: int
    timestamp: int
    leader_epoch: int | None = None


# --- records as a consumer sees them ----------------------------------------------------------------

def batch_records(batch: ViewBatch, topic: str, partition: int, start: int,
                  end: int) -> list[ConsumerRecord]:
    """The records of one batch (any magic) with offsets in ``[start, end)`` as
    :class:`ConsumerRecord` s: a v2 batch decoded by the kernel straight into them. A batch that
    does not decode raises :class:`~kafkalog.errors.KafkalogError` at its position in the file."""
    if batch.magic >= 2:
        b = cast(DefaultRecordBatch, batch)
        tst = b.timestamp_type
        epoch = b.partition_leader_epoch
        body = b.records_body()
        try:
            return decode_consumer_records(
                body, b.count, b.base_offset, b.base_timestamp,
                b.max_timestamp if tst == TimestampType.LOG_APPEND_TIME else -1, topic, partition,
                epoch if epoch >= 0 else None, tst, start, end)
        except KafkalogError:
            b.records()                     # the decoder of positions: raises where it fails
            raise
        finally:
            if isinstance(body, memoryview):
                body.release()
    recs = batch.records()
    legacy = cast(LegacyRecordBatch, batch)
    tst = legacy.timestamp_type
    if recs and (recs[0].offset < start or batch.last_offset >= end):
        recs = [r for r in recs if start <= r.offset < end]
    return [ConsumerRecord(topic, partition, None, r.offset, r.timestamp, tst, r.key, r.value,
                           list(cast(Any, r).headers)) for r in recs]


# --- where the logs come from -----------------------------------------------------------------------

T = TypeVar("T")


class _Source:
    """The consumer's view of the data directory. A writable directory is this process's: its logs
    are live and an append notifies. A read-only directory belongs to another process: its snapshot
    is renewed when the watched files change."""

    def __init__(self, manager: Any, poll_interval_ms: int) -> None:
        self.read_only = isinstance(manager, _ReadOnlyManager)
        self._manager = manager
        self._own: _ReadOnlyManager | None = None
        self.wakeup: Wakeup
        if self.read_only:
            self._own = manager.reopened()
            self._watcher = FileWatcher(poll_interval_ms=poll_interval_ms)
            self._watcher.watch(manager.data_dir)
            self.wakeup = self._watcher
        else:
            self._notifier = AppendNotifier()
            self.wakeup = self._notifier

    @property
    def manager(self) -> Any:
        return self._own if self._own is not None else self._manager

    def log(self, tp: TopicPartition) -> ReadablePartition:
        log: ReadablePartition = self.manager.get_log(tp.topic, tp.partition)
        if self.read_only:
            self._watcher.watch(log.dir)
        else:
            self._notifier.watch(cast(Log, log))      # a writable directory's: a live log
        return log

    def refresh(self) -> None:
        """A new snapshot of a read-only directory (after the watcher saw a change)."""
        if self._own is not None:
            old = self._own
            self._own = old.reopened()
            old.close()

    def close(self) -> None:
        self.wakeup.close()
        if self._own is not None:
            self._own.close()

    def poll(self, take: Callable[[], T], deadline: float, closed: Callable[[], bool],
             wait_s: float | None = None) -> T:
        """What ``take()`` returns once it returns something, the consumer closes or ``deadline``
        (monotonic s) passes; between tries it waits for a change (at most ``wait_s`` at a time)."""
        wakeup = self.wakeup
        changed = False
        while True:
            # take the changes, then look: a change after this point wakes the wait below
            if wakeup.arm() or changed:
                self.refresh()
            out = take()
            if out or closed():
                return out
            left = deadline - time.monotonic()
            if left <= 0:
                return out
            changed = wakeup.wait(left if wait_s is None else min(left, wait_s)) and not closed()


class _PartitionState:
    __slots__ = ("buffer", "buffer_i", "buffer_next", "paused", "position", "reset", "tp")

    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        self.position: int | None = None
        # the records of the last fetch not yet returned: buffer[buffer_i:] (position =
        # buffer[buffer_i].offset); buffer_next is the position once they are all returned
        self.buffer: list[ConsumerRecord] = []
        self.buffer_i = 0
        self.buffer_next = 0
        self.paused = False
        self.reset: str | None = None            # a pending seek_to_beginning/_end

    def drop_buffer(self) -> None:
        self.buffer = []
        self.buffer_i = 0

    def take(self, budget: int) -> list[ConsumerRecord]:
        """Up to ``budget`` buffered records, advancing the position past them."""
        buf, i = self.buffer, self.buffer_i
        j = i + budget
        recs = buf[i:j]
        if j >= len(buf):
            self.buffer, self.buffer_i = [], 0
            self.position = self.buffer_next
        else:
            self.buffer_i = j
            self.position = buf[j].offset
        return recs


TopicPartitionLike = TopicPartition | tuple[str, int]


def _tp(x: Any) -> TopicPartition:
    if isinstance(x, TopicPartition):
        return x
    try:
        topic, partition = x
    except (TypeError, ValueError):
        raise InvalidConfigError(f"expected a TopicPartition (topic, partition), got {x!r}") from None
    if not isinstance(topic, str) or not isinstance(partition, int):
        raise InvalidConfigError(f"expected a TopicPartition (topic, partition), got {x!r}")
    return TopicPartition(topic, partition)


class Consumer:
    """kafka-python's ``KafkaConsumer`` over an embedded data directory (see the module docstring).

    Create with :meth:`kafkalog.client.DataLog.consumer`. Not thread-safe (as Kafka's consumer),
    except :meth:`close`, which may be called from another thread to end a waiting :meth:`poll`.
    """

    def __init__(self, dl: Any, *topics: str, conf: Mapping[str, Any] | None = None,
                 offsets_store: OffsetsStore | None = None, **config: Any) -> None:
        self.config = cfg = client_config(CONSUMER_DEFAULTS, conf, **config)
        iso = cfg["isolation.level"]
        if iso not in (IsolationLevel.READ_UNCOMMITTED.config_name,
                       IsolationLevel.READ_COMMITTED.config_name):
            raise InvalidConfigError(f"Invalid value {iso!r} for configuration isolation.level: "
                                     f"String must be one of: read_committed, read_uncommitted")
        reset = cfg["auto.offset.reset"]
        if reset not in _RESETS:
            raise InvalidConfigError(f"Invalid value {reset!r} for configuration auto.offset.reset: "
                                     f"String must be one of: latest, earliest, none")
        max_poll = cfg["max.poll.records"]
        if not isinstance(max_poll, int) or max_poll < 1:
            raise InvalidConfigError(f"Invalid value {max_poll!r} for configuration max.poll.records: "
                                     f"Value must be at least 1")
        group = cfg["group.id"]
        auto_commit_given = "enable.auto.commit" in (conf or {}) or "enable_auto_commit" in config
        if group is None or group == "":
            if auto_commit_given and cfg["enable.auto.commit"]:
                raise InvalidConfigError("enable.auto.commit cannot be set to true when default group id "
                                         "(null) is used.")
            group = None
            cfg["enable.auto.commit"] = False
        if isinstance(dl.manager, _ReadOnlyManager) and cfg["enable.auto.commit"]:
            # a read-only directory takes no commit: refuse an explicit request, default to off
            if auto_commit_given:
                raise InvalidConfigError("enable.auto.commit cannot be true on a data directory "
                                         "opened read-only", file=dl.manager.data_dir)
            cfg["enable.auto.commit"] = False
        for key in ("key.deserializer", "value.deserializer"):
            if cfg[key] is not None and not callable(cfg[key]):
                raise InvalidConfigError(f"{key} must be a callable (bytes -> object), got {cfg[key]!r}")
        self._group: str | None = group
        self._isolation = IsolationLevel.of(iso)
        self._reset = reset
        self._max_poll = max_poll
        self._max_bytes = int(cfg["max.partition.fetch.bytes"])
        self._key_de: Callable[[bytes], Any] | None = cfg["key.deserializer"]
        self._value_de: Callable[[bytes], Any] | None = cfg["value.deserializer"]
        self._auto_commit = bool(cfg["enable.auto.commit"])
        self._auto_commit_ms = int(cfg["auto.commit.interval.ms"])
        timeout = cfg["consumer.timeout.ms"]
        self._iter_timeout_ms = float("inf") if timeout is None else float(timeout)
        self._exclude_internal = bool(cfg["exclude.internal.topics"])
        self._dl = dl
        self._source = _Source(dl.manager, FILE_POLL_INTERVAL_MS)
        self._store_arg = offsets_store
        self._store: OffsetsStore | None = offsets_store
        self._states: dict[TopicPartition, _PartitionState] = {}
        self._subscribed: set[str] | None = None
        self._pattern: Pattern[str] | None = None
        self._manual = False
        self._next_commit = time.monotonic() + self._auto_commit_ms / 1000.0
        self._rr = 0
        self._iter_buf: list[ConsumerRecord] = []
        self._iter_i = 0
        self._closed = False
        if topics:
            self.subscribe(list(topics))

    # --- assignment ---------------------------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartitionLike]) -> None:
        """Manually assign partitions (replaces the previous assignment; not with :meth:`subscribe`)."""
        self._check_open()
        if self._subscribed is not None or self._pattern is not None:
            raise IllegalStateError("Subscription to topics, partitions and pattern are mutually exclusive")
        tps = [_tp(x) for x in partitions]
        for tp in tps:
            self._check_partition(tp)
        self._manual = bool(tps)
        self._set_assignment(tps)

    def subscribe(self, topics: Iterable[str] = (), pattern: str | Pattern[str] | None = None,
                  listener: Any = None) -> None:
        """Subscribe to a list of topics or to a regex ``pattern`` (matched against whole topic names,
        re-evaluated on every poll, so topics created later join). This consumer is the only member
        of its group: every partition is assigned to it."""
        self._check_open()
        if self._manual:
            raise IllegalStateError("Subscription to topics, partitions and pattern are mutually exclusive")
        if listener is not None:
            raise InvalidConfigError("a ConsumerRebalanceListener is not supported: an embedded consumer "
                                     "is the only member of its group")
        topic_list = [topics] if isinstance(topics, str) else list(topics)
        if bool(topic_list) == (pattern is not None):
            raise IllegalStateError("You must choose topics or pattern, but not both")
        if pattern is not None:
            self._pattern = re.compile(pattern) if isinstance(pattern, str) else pattern
            self._subscribed = None
        else:
            for t in topic_list:
                if not isinstance(t, str) or not t:
                    raise InvalidTopicError(f"invalid topic name {t!r}")
            self._subscribed = set(topic_list)
            self._pattern = None
        self._update_subscription()

    def unsubscribe(self) -> None:
        self._subscribed = None
        self._pattern = None
        self._manual = False
        self._set_assignment([])

    def subscription(self) -> set[str] | None:
        if self._pattern is not None:
            return {tp.topic for tp in self._states}
        return None if self._subscribed is None else set(self._subscribed)

    def assignment(self) -> set[TopicPartition]:
        return set(self._states)

    def is_assigned(self, tp: TopicPartition) -> bool:
        """Whether ``tp`` is assigned (Kafka's ``SubscriptionState.isAssigned``): a look-up, not a
        copy of the assignment (``AIOKafkaConsumer`` asks it for each partition it holds records of)."""
        return tp in self._states

    def is_paused(self, tp: TopicPartition) -> bool:
        """Whether ``tp`` is assigned and paused (Kafka's ``SubscriptionState.isPaused``)."""
        st = self._states.get(tp)
        return st is not None and st.paused

    def topics(self) -> set[str]:
        return set(self._source.manager.topics())

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        parts = self._source.manager.partitions_of(topic)
        return set(parts) if parts else None

    def _check_partition(self, tp: TopicPartition) -> None:
        if tp.partition not in self._source.manager.partitions_of(tp.topic):
            raise InvalidTopicError(f"Unknown topic or partition: {tp}", file=self._source.manager.data_dir)

    def _set_assignment(self, tps: Sequence[TopicPartition]) -> None:
        keep = {tp: self._states[tp] for tp in tps if tp in self._states}
        for tp in tps:
            if tp not in keep:
                keep[tp] = _PartitionState(tp)
        self._states = keep

    def _update_subscription(self) -> None:
        if self._manual or (self._subscribed is None and self._pattern is None):
            return
        m = self._source.manager
        if self._pattern is not None:
            pat = self._pattern
            names = [t for t in m.topics() if pat.fullmatch(t)
                     and not (self._exclude_internal and t.startswith("__"))]
        else:
            names = sorted(self._subscribed or ())
        tps = [TopicPartition(t, p) for t in names for p in m.partitions_of(t)]
        if set(tps) != set(self._states):
            self._set_assignment(tps)

    def _state(self, tp: Any) -> _PartitionState:
        st = self._states.get(_tp(tp))
        if st is None:
            raise IllegalStateError(f"No current assignment for partition {_tp(tp)}")
        return st

    # --- positions ----------------------------------------------------------------------------

    def seek(self, partition: TopicPartitionLike, offset: int) -> None:
        """The next :meth:`poll` returns records from ``offset`` (out of range: ``auto.offset.reset``)."""
        st = self._seek_state(partition, offset)
        st.position = offset
        st.drop_buffer()
        st.reset = None
        self._drop_iterated([st.tp])

    def check_seek(self, partition: TopicPartitionLike, offset: int) -> None:
        """What :meth:`seek` refuses, refused without seeking (``AIOKafkaConsumer`` checks a seek
        it makes once a poll in flight has ended)."""
        self._seek_state(partition, offset)

    def _seek_state(self, partition: TopicPartitionLike, offset: int) -> _PartitionState:
        if not isinstance(offset, int) or offset < 0:
            raise InvalidConfigError(f"seek offset must not be a negative number, got {offset!r}")
        return self._state(partition)

    def seek_to_beginning(self, *partitions: TopicPartitionLike) -> None:
        states = self._states_of(partitions)
        for st in states:
            st.reset = "earliest"
            st.drop_buffer()
        self._drop_iterated([st.tp for st in states])

    def seek_to_end(self, *partitions: TopicPartitionLike) -> None:
        """To the high watermark (the last stable offset with ``read_committed``), evaluated lazily at
        the next :meth:`poll` or :meth:`position`, as Kafka does."""
        states = self._states_of(partitions)
        for st in states:
            st.reset = "latest"
            st.drop_buffer()
        self._drop_iterated([st.tp for st in states])

    def _drop_iterated(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """Forget the records of ``tps`` fetched for iteration but not yet yielded; returns the
        first such offset per partition."""
        rest = self._iter_buf[self._iter_i:]
        gone = set(tps)
        first: dict[TopicPartition, int] = {}
        for r in rest:
            tp = TopicPartition(r.topic, r.partition)
            if tp in gone and tp not in first:
                first[tp] = r.offset
        self._iter_buf = [r for r in rest if TopicPartition(r.topic, r.partition) not in gone]
        self._iter_i = 0
        return first

    def _states_of(self, partitions: Sequence[TopicPartitionLike]) -> list[_PartitionState]:
        if not partitions:
            return list(self._states.values())
        return [self._state(p) for p in partitions]

    def position(self, partition: TopicPartitionLike) -> int:
        """The offset of the next record :meth:`poll` returns for ``partition``."""
        st = self._state(partition)
        self._ensure_positions([st])
        assert st.position is not None
        return st.position

    def _offset_for_reset(self, tp: TopicPartition, strategy: str) -> int:
        reader = self._source.log(tp).reader()
        return reader.log_start_offset if strategy == "earliest" else reader.stable_end(self._isolation)

    def _ensure_positions(self, states: Iterable[_PartitionState]) -> None:
        missing = []
        for st in states:
            if st.reset is not None:
                st.position, st.reset = self._offset_for_reset(st.tp, st.reset), None
            elif st.position is None:
                missing.append(st)
        if not missing:
            return
        committed = self._committed_offsets([st.tp for st in missing])
        no_offset = []
        for st in missing:
            oam = committed.get(st.tp)
            if oam is not None:
                st.position = oam.offset
            elif self._reset == "none":
                no_offset.append(st.tp)
            else:
                st.position = self._offset_for_reset(st.tp, self._reset)
        if no_offset:
            raise NoOffsetForPartitionError(
                f"Undefined offset with no reset policy for partitions: "
                f"{', '.join(str(tp) for tp in no_offset)}", no_offset)

    # --- offsets of the log -------------------------------------------------------------------

    def beginning_offsets(self, partitions: Iterable[TopicPartitionLike]) -> dict[TopicPartition, int]:
        return {tp: self._log_of(tp).log_start_offset for tp in map(_tp, partitions)}

    def end_offsets(self, partitions: Iterable[TopicPartitionLike]) -> dict[TopicPartition, int]:
        """The high watermark, or the last stable offset for a ``read_committed`` consumer."""
        return {tp: self._log_of(tp).reader().stable_end(self._isolation)
                for tp in map(_tp, partitions)}

    def offsets_for_times(self, timestamps: Mapping[TopicPartitionLike, int]
                          ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """Per partition: the first offset whose timestamp is >= the given one (None when none)."""
        out: dict[TopicPartition, OffsetAndTimestamp | None] = {}
        for x, ts in timestamps.items():
            tp = _tp(x)
            if not isinstance(ts, int) or ts < 0:
                raise InvalidConfigError(f"The target time for partition {tp} is {ts!r}. The target time "
                                         f"cannot be negative.")
            r = self._log_of(tp).offset_for_timestamp(ts)
            out[tp] = None if r is None else OffsetAndTimestamp(r.offset, r.timestamp)
        return out

    def _log_of(self, tp: TopicPartition) -> ReadablePartition:
        self._check_partition(tp)
        return self._source.log(tp)

    # --- pause / resume -----------------------------------------------------------------------

    def pause(self, *partitions: TopicPartitionLike) -> None:
        for st in self._states_of(partitions) if partitions else []:
            st.paused = True

    def resume(self, *partitions: TopicPartitionLike) -> None:
        for st in self._states_of(partitions) if partitions else []:
            st.paused = False

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, st in self._states.items() if st.paused}

    # --- committed offsets --------------------------------------------------------------------

    def _offsets_store(self) -> OffsetsStore:
        if self._store is None:
            if self._source.read_only:
                self._store = OffsetsStore(self._source.manager)
            else:
                self._store = self._dl._offsets_store()
        return self._store

    def group_metadata(self) -> ConsumerGroupMetadata:
        """Kafka's ``groupMetadata()``: what a transactional producer's
        ``send_offsets_to_transaction`` takes to commit this group's offsets in a transaction."""
        if self._group is None:
            raise InvalidConfigError("group metadata needs a group.id")
        return ConsumerGroupMetadata(self._group)

    def _committed_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets of ``tps``; a negative one (a broker's client committed -1
        or -2, as kafkajs' ``resetOffsets`` does) is no committed offset, as in Kafka's consumer."""
        if self._group is None:
            return {}
        return {tp: oam for tp, oam in self._offsets_store().fetch(self._group, tps).items() if oam.offset >= 0}

    def committed(self, partition: TopicPartitionLike, metadata: bool = False
                  ) -> None | int | OffsetAndMetadata:
        """The last committed offset of ``partition`` for this group (None when none);
        ``metadata=True`` returns the :class:`OffsetAndMetadata`."""
        if self._group is None:
            raise InvalidConfigError("committed offsets need a group.id")
        tp = _tp(partition)
        oam = self._committed_offsets([tp]).get(tp)
        if oam is None or metadata:
            return oam
        return oam.offset

    def commit(self, offsets: Mapping[TopicPartitionLike, Any] | None = None) -> None:
        """Commit ``offsets`` (``{tp: offset | OffsetAndMetadata | (offset, metadata)}``), by default
        the current position of every assigned partition, durably, in ``__consumer_offsets``."""
        self._check_open()
        if self._group is None:
            raise InvalidConfigError("committing offsets needs a group.id")
        if self._source.read_only:
            raise LogDirError("the data directory is open read-only: offsets cannot be committed",
                              file=self._source.manager.data_dir)
        if offsets is None:
            todo: dict[TopicPartition, Any] = {
                tp: OffsetAndMetadata(st.position) for tp, st in self._states.items()
                if st.position is not None}
        else:
            todo = {_tp(k): v for k, v in offsets.items()}
        if todo:
            self._offsets_store().commit(self._group, todo)
        self._next_commit = time.monotonic() + self._auto_commit_ms / 1000.0

    commit_async = commit

    def _maybe_auto_commit(self) -> None:
        if self._auto_commit and time.monotonic() >= self._next_commit:
            self.commit()

    # --- poll ---------------------------------------------------------------------------------

    def poll(self, timeout_ms: float = 0, max_records: int | None = None,
             update_offsets: bool = True) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records per partition, at most ``max_records`` (default ``max.poll.records``) in all; waits
        up to ``timeout_ms`` for new data when there is none."""
        self._check_open()
        if timeout_ms < 0:
            raise InvalidConfigError(f"Timeout must not be negative, got {timeout_ms!r}")
        budget = self._max_poll if max_records is None else max_records
        if budget < 1:
            raise InvalidConfigError(f"max_records must be at least 1, got {budget!r}")
        self._maybe_auto_commit()

        def take() -> dict[TopicPartition, list[ConsumerRecord]]:
            self._update_subscription()
            return self._fetch(budget)
        return self._source.poll(take, time.monotonic() + timeout_ms / 1000.0, lambda: self._closed)

    def _fetch(self, budget: int) -> dict[TopicPartition, list[ConsumerRecord]]:
        states = [st for st in self._states.values() if not st.paused]
        if not states:
            return {}
        self._ensure_positions(states)
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        n = len(states)
        start = self._rr % n
        self._rr += 1
        for i in range(n):
            st = states[(start + i) % n]
            recs = self._fetch_partition(st, budget)
            if recs:
                out[st.tp] = recs
                budget -= len(recs)
                if budget <= 0:
                    break
        return out

    def _fetch_partition(self, st: _PartitionState, budget: int) -> list[ConsumerRecord]:
        if st.buffer:
            return st.take(budget)
        tp = st.tp
        log = self._source.log(tp)
        pos = st.position
        assert pos is not None
        iso = self._isolation
        reader = log.reader(pos)
        end = reader.stable_end(iso)
        if pos >= end or pos < reader.log_start_offset:
            if pos > reader.log_end_offset or pos < reader.log_start_offset:
                self._out_of_range(st, reader)
                pos = st.position
                assert pos is not None
                reader = log.reader(pos)
                end = reader.stable_end(iso)
            if pos >= end:
                return []
        out: list[ConsumerRecord] = []
        topic, partition = tp
        kd, vd = self._key_de, self._value_de
        size = 0
        next_pos = pos
        batches = reader.read(pos, end, iso)
        while True:
            # a damaged batch after some records: those are returned first (the fetch stops before
            # it), and the next fetch raises at it, as Kafka's consumer does
            try:
                batch, visible = next(batches)
            except StopIteration:
                break
            except KafkalogError:
                if not out:
                    raise
                break
            last = batch.last_offset
            if visible:
                try:
                    got = batch_records(batch, topic, partition, pos, end)
                except KafkalogError as e:
                    if out:
                        break
                    raise (e.at(reader.log_path_of(last), 0) if e.file is None else e) from None
                if kd is not None or vd is not None:
                    got = [r._replace(key=r.key if kd is None or r.key is None else kd(r.key),
                                      value=r.value if vd is None or r.value is None else vd(r.value))
                           for r in got]
                out.extend(got)
            next_pos = min(last + 1, end) if last >= end else last + 1
            size += batch.size_in_bytes
            if size >= self._max_bytes:         # a fetch: max.partition.fetch.bytes, at least a batch
                break
        # the fetched records are buffered; a poll returns at most ``budget`` of them (Kafka's
        # fetch buffer and max.poll.records)
        st.buffer, st.buffer_i, st.buffer_next = out, 0, max(next_pos, pos)
        if not out:
            st.position = st.buffer_next
            return out
        return st.take(budget)

    def _out_of_range(self, st: _PartitionState, reader: PartitionReader) -> None:
        """Kafka's handling of an OffsetOutOfRange fetch error: reset by ``auto.offset.reset``, or
        raise with ``none``."""
        pos = st.position
        assert pos is not None
        if self._reset == "none":
            raise ConsumerOffsetOutOfRangeError(
                f"Fetch position {pos} is out of range for partition {st.tp} (log start offset "
                f"{reader.log_start_offset}, log end offset {reader.log_end_offset}) and "
                f"auto.offset.reset is none", {st.tp: pos}, file=reader.name)
        st.position = self._offset_for_reset(st.tp, self._reset)
        st.drop_buffer()

    # --- iteration ----------------------------------------------------------------------------

    def __iter__(self) -> Consumer:
        return self

    def __next__(self) -> ConsumerRecord:
        """The next record, waiting for new data (at most ``consumer.timeout.ms``, then
        StopIteration)."""
        if self._iter_i < len(self._iter_buf):
            rec = self._iter_buf[self._iter_i]
            self._iter_i += 1
            return rec
        deadline = time.monotonic() + self._iter_timeout_ms / 1000.0
        while not self._closed:
            left = max(0.0, deadline - time.monotonic())
            got = self.poll(timeout_ms=min(left * 1000.0, 1000.0))
            if got:
                self._iter_buf = [r for recs in got.values() for r in recs]
                self._iter_i = 1
                return self._iter_buf[0]
            if time.monotonic() >= deadline:
                break
        raise StopIteration

    # --- lifecycle ----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("This consumer has already been closed.")

    def close(self, autocommit: bool = True) -> None:
        """Commit the positions (with ``enable.auto.commit`` and ``autocommit``) and release the
        watches. A :meth:`poll` waiting in another thread returns."""
        if self._closed:
            return
        try:
            # records fetched for iteration but never yielded are not consumed
            for tp, offset in self._drop_iterated(list(self._states)).items():
                self._states[tp].position = offset
            if autocommit and self._auto_commit:
                self.commit()
        finally:
            self._closed = True
            self._source.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Consumer(group_id={self._group!r}, assignment={sorted(self._states)!r})"

