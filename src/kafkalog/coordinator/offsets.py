"""Committed offsets per consumer group, stored as Kafka stores them: records in the compacted
``__consumer_offsets`` topic (Kafka's ``OffsetCommitKey``/``OffsetCommitValue`` and
``GroupMetadataKey``/``GroupMetadataValue``, :mod:`kafkalog.coordinator.group_metadata`), one partition
per group (``abs(hashCode(group)) % offsets.topic.num.partitions``).

:class:`OffsetsStore` is the group coordinator's offset manager for every front end: the embedded
consumer's ``commit``/``committed``, and the network broker's OffsetCommit/OffsetFetch/ListGroups/
DeleteGroups. On open it replays the topic (committed data only: the offsets of an aborted
transactional commit never count); a commit appends one batch holding all the group's offsets (so it
is atomic) and fsyncs it before returning; deleting a group writes tombstones. Thread-safe. A
partition is read through its :class:`~kafkalog.log.read.reader.PartitionReader` (a writable log
or a read-only snapshot alike).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import (
    Any,
    NamedTuple,
    Protocol,
)

from kafkalog.coordinator.consumer_group_records import ConsumerGroupKey
from kafkalog.coordinator.consumer_group_records import Value as ConsumerGroupValue
from kafkalog.coordinator.consumer_group_records import decode_record as decode_consumer_group_record
from kafkalog.coordinator.consumer_group_view import ConsumerGroupView, consumer_group_view
from kafkalog.coordinator.group_metadata import (
    CONSUMER_OFFSETS_TOPIC,
    OFFSETS_TOPIC_NUM_PARTITIONS,
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_value,
    encode_key,
    encode_offset_commit_value,
    partition_for_group,
)
from kafkalog.coordinator.share_group_records import decode_record as decode_share_group_record
from kafkalog.coordinator.streams_group_records import decode_record as decode_streams_group_record
from kafkalog.errors import InvalidConfigError, KafkalogError
from kafkalog.log.naming import TopicPartition
from kafkalog.log.producer_state import ORIGIN_COORDINATOR
from kafkalog.record.builder import build_batch
from kafkalog.record.constants import IsolationLevel

__all__ = ["OFFSETS_TOPIC_CONFIG", "OffsetAndMetadata", "OffsetsStore"]

#: The topic configuration Kafka gives ``__consumer_offsets`` (``offsets.topic.segment.bytes``,
#: ``offsets.topic.compression.codec`` none, compacted).
OFFSETS_TOPIC_CONFIG: dict[str, Any] = {
    "cleanup.policy": "compact",
    "compression.type": "producer",
    "segment.bytes": 104857600,
}


class OffsetAndMetadata(NamedTuple):
    """A committed offset (kafka-python's ``OffsetAndMetadata``, with the commit time)."""

    offset: int
    metadata: str = ""
    leader_epoch: int | None = None
    commit_timestamp: int = -1


OffsetSpec = int | OffsetAndMetadata | tuple[Any, ...]


class _Manager(Protocol):
    data_dir: str

    def has_topic(self, topic: str) -> bool: ...
    def partitions_of(self, topic: str) -> list[int]: ...
    def get_log(self, topic: str, partition: int) -> Any: ...
    def create_topic(self, topic: str, partitions: int = 1,
                     config: Mapping[str, Any] | None = None, *, exist_ok: bool = False) -> Any: ...


def as_offset_and_metadata(spec: OffsetSpec, now: int, *, any_offset: bool = False) -> OffsetAndMetadata:
    """An offset, an :class:`OffsetAndMetadata`, or a tuple ``(offset[, metadata[, leader_epoch]])``
    (kafka-python's and the broker's shapes). A negative offset is refused unless ``any_offset``:
    the broker stores what an OffsetCommit carries, as Kafka's group coordinator does (kafkajs'
    ``resetOffsets`` commits -2 for the earliest offset, -1 for the latest)."""
    if isinstance(spec, OffsetAndMetadata):
        oam = spec
    elif isinstance(spec, tuple):
        if not 1 <= len(spec) <= 3:
            raise InvalidConfigError(f"an offset to commit is (offset, metadata, leader_epoch), "
                                     f"got {spec!r}")
        oam = OffsetAndMetadata(*spec)
    elif isinstance(spec, int) and not isinstance(spec, bool):
        oam = OffsetAndMetadata(spec)
    else:
        raise InvalidConfigError(f"an offset to commit is an int or (offset, metadata, leader_epoch), "
                                 f"got {spec!r}")
    if not isinstance(oam.offset, int) or (oam.offset < 0 and not any_offset):
        raise InvalidConfigError(f"invalid offset to commit: {oam.offset!r}")
    epoch = oam.leader_epoch
    return OffsetAndMetadata(oam.offset, oam.metadata or "", None if epoch is None or epoch < 0 else epoch,
                             now if oam.commit_timestamp < 0 else oam.commit_timestamp)


class OffsetsStore:
    """The committed offsets of every group in a data directory.

    Args:
        manager: the data directory (a :class:`~kafkalog.log.manager.LogManager`, or a read-only
            one: then commits raise its error and the offsets are those on disk when loaded).
        num_partitions: ``offsets.topic.num.partitions`` for a topic this store creates; an existing
            topic keeps its partition count (the group -> partition mapping depends on it).
        clock: milliseconds since the epoch.
    """

    def __init__(self, manager: _Manager, *, num_partitions: int = OFFSETS_TOPIC_NUM_PARTITIONS,
                 clock: Callable[[], int] = lambda: int(time.time() * 1000),
                 leader_epoch: Callable[[Any], int] | None = None) -> None:
        if num_partitions < 1:
            raise InvalidConfigError(f"offsets.topic.num.partitions must be >= 1, got {num_partitions}")
        self._manager = manager
        self._num_partitions = num_partitions
        self._clock = clock
        #: the epoch the broker's batches carry (Kafka's leader stamps its own); None: -1
        self._leader_epoch = leader_epoch
        self._lock = threading.RLock()
        self._offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
        self._groups: dict[str, GroupMetadataValue] = {}
        #: the live records of consumer groups (KIP-848): group -> key bytes -> (key, value)
        self._consumer_groups: dict[str, dict[bytes, tuple[ConsumerGroupKey, ConsumerGroupValue]]] = {}
        #: share groups (KIP-932): group -> record key -> (key, value)
        self._share_groups: dict[str, dict[bytes, tuple[Any, Any]]] = {}
        #: streams groups (KIP-1071): group -> record key -> (key, value)
        self._streams_groups: dict[str, dict[bytes, tuple[Any, Any]]] = {}
        #: offsets written in open transactions: producer id -> group -> offsets (visible on commit)
        self._pending: dict[int, dict[str, dict[TopicPartition, OffsetAndMetadata]]] = {}
        #: group -> the producers with offsets of ``group`` in ``_pending`` (a group's look-up
        #: costs its own open transactions, not every one of the node)
        self._pending_producers: dict[str, set[int]] = {}
        self.load()

    # --- loading ----------------------------------------------------------------------------------

    @property
    def num_partitions(self) -> int:
        return self._num_partitions

    def load(self) -> None:
        """(Re)build the state by replaying ``__consumer_offsets`` from its log start offsets."""
        with self._lock:
            self._offsets = {}
            self._groups = {}
            self._consumer_groups = {}
            self._share_groups = {}
            self._streams_groups = {}
            m = self._manager
            if not m.has_topic(CONSUMER_OFFSETS_TOPIC):
                return
            parts = m.partitions_of(CONSUMER_OFFSETS_TOPIC)
            self._num_partitions = len(parts)
            for p in parts:
                log = m.get_log(CONSUMER_OFFSETS_TOPIC, p)
                # the committed batches only (no aborted transactional commit, no marker, nothing
                # above the last stable offset), through the one read pipeline
                for batch in log.reader().visible_batches(isolation=IsolationLevel.READ_COMMITTED,
                                                          check_offsets=True):
                    for rec in batch:
                        self._replay(rec.key, rec.value, log, rec.offset)

    def _replay(self, key: bytes | None, value: bytes | None, log: Any, offset: int) -> None:
        if key is None:
            return
        try:
            k = decode_key(bytes(key))
            if isinstance(k, OffsetCommitKey):
                tp = TopicPartition(k.topic, k.partition)
                if value is None:
                    group = self._offsets.get(k.group)
                    if group is not None:
                        group.pop(tp, None)
                        if not group:
                            del self._offsets[k.group]
                else:
                    v = decode_offset_commit_value(bytes(value))
                    self._offsets.setdefault(k.group, {})[tp] = OffsetAndMetadata(
                        v.offset, v.metadata, None if v.leader_epoch < 0 else v.leader_epoch,
                        v.commit_timestamp)
            elif isinstance(k, GroupMetadataKey):
                if value is None:
                    self._groups.pop(k.group, None)
                else:
                    self._groups[k.group] = decode_group_metadata_value(bytes(value))
            else:
                self._replay_consumer_group(bytes(key), None if value is None else bytes(value))
        except KafkalogError as e:
            raise type(e)(f"record at offset {offset} of {CONSUMER_OFFSETS_TOPIC}: {e.message}",
                          file=str(log.dir)) from None

    def _replay_consumer_group(self, key: bytes, value: bytes | None) -> None:
        """A record of a consumer group (KIP-848) or a share group (KIP-932): the last value of each
        key is kept in the order of the last writes, a tombstone drops it; so are a streams
        group's (KIP-1071)."""
        got = decode_consumer_group_record(key, value)
        if got is None:
            shared: tuple[Any, Any] | None = decode_share_group_record(key, value)
            if shared is None:
                shared = decode_streams_group_record(key, value)
                into = self._streams_groups
            else:
                into = self._share_groups
            if shared is not None:
                sk, sv = shared
                srecords = into.setdefault(sk.group_id, {})
                srecords.pop(key, None)
                if sv is not None:
                    srecords[key] = (sk, sv)
                elif not srecords:
                    del into[sk.group_id]
            return
        k, v = got
        records = self._consumer_groups.setdefault(k.group_id, {})
        records.pop(key, None)
        if v is not None:
            records[key] = (k, v)
        elif not records:
            del self._consumer_groups[k.group_id]

    # --- queries ----------------------------------------------------------------------------------

    def partition_for(self, group: str) -> int:
        return partition_for_group(group, self._num_partitions)

    def offsets_partition(self, group: str) -> TopicPartition:
        """The ``__consumer_offsets`` partition holding ``group``, the topic created first when
        missing (so the partition count is the one it keeps): what a transactional producer adds to
        its transaction (Kafka's AddOffsetsToTxn) before :meth:`commit_transactional`."""
        self._check_group(group)
        with self._lock:
            m = self._manager
            if not m.has_topic(CONSUMER_OFFSETS_TOPIC):
                m.create_topic(CONSUMER_OFFSETS_TOPIC, self._num_partitions, OFFSETS_TOPIC_CONFIG,
                               exist_ok=True)
                self._num_partitions = len(m.partitions_of(CONSUMER_OFFSETS_TOPIC))
            return TopicPartition(CONSUMER_OFFSETS_TOPIC, self.partition_for(group))

    def fetch(self, group: str, partitions: Iterable[TopicPartition] | None = None
              ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The committed offsets of ``group`` (only those of ``partitions`` when given; partitions
        without a committed offset are left out)."""
        with self._lock:
            got = self._offsets.get(group, {})
            if partitions is None:
                return dict(got)
            return {tp: got[tp] for tp in partitions if tp in got}

    def groups(self) -> list[str]:
        """Every group with committed offsets or stored group metadata, classic or consumer
        (KIP-848)."""
        with self._lock:
            return sorted(set(self._offsets) | set(self._groups) | set(self._consumer_groups)
                          | set(self._share_groups) | set(self._streams_groups))

    def has_group(self, group: str) -> bool:
        """Whether :meth:`groups` lists ``group``: a look-up (a request's check), not the listing."""
        with self._lock:
            return (group in self._offsets or group in self._groups or group in self._consumer_groups
                    or group in self._share_groups or group in self._streams_groups)

    def is_share_group(self, group: str) -> bool:
        """Whether ``group`` has live share group records (:meth:`share_group_records` lists it)."""
        with self._lock:
            return bool(self._share_groups.get(group))

    def consumer_group(self, group: str) -> ConsumerGroupView | None:
        """A consumer group (KIP-848) as its records describe it; None for a classic group."""
        with self._lock:
            records = self._consumer_groups.get(group)
            return None if not records else consumer_group_view(group, records)

    def share_group_records(self) -> dict[str, dict[bytes, tuple[Any, Any]]]:
        """The live records of every share group (KIP-932) read from the topic at load."""
        with self._lock:
            return {g: dict(r) for g, r in self._share_groups.items() if r}

    def streams_group_records(self) -> dict[str, dict[bytes, tuple[Any, Any]]]:
        """The live records of every streams group (KIP-1071) read from the topic at load."""
        with self._lock:
            return {g: dict(r) for g, r in self._streams_groups.items() if r}

    def consumer_group_records(self) -> dict[str, dict[bytes, tuple[ConsumerGroupKey, ConsumerGroupValue]]]:
        """The live records of every consumer group (KIP-848) read from the topic at load."""
        with self._lock:
            return {g: dict(r) for g, r in self._consumer_groups.items() if r}

    def store_records(self, group: str, records: Sequence[tuple[bytes, bytes | None]]) -> None:
        """Write a group coordinator's records (one batch in the group's partition, fsynced)."""
        self._check_group(group)
        with self._lock:
            self._write(group, records)
            for key, value in records:
                k = decode_key(key) if key[:2] in (b"\x00\x00", b"\x00\x01", b"\x00\x02") else None
                if isinstance(k, GroupMetadataKey):
                    if value is None:
                        self._groups.pop(k.group, None)
                    else:
                        self._groups[k.group] = decode_group_metadata_value(value)
                elif k is None:
                    self._replay_consumer_group(key, value)

    def group_metadata(self, group: str) -> GroupMetadataValue | None:
        with self._lock:
            return self._groups.get(group)

    # --- writes -----------------------------------------------------------------------------------

    def offset_commit_records(self, group: str, offsets: Mapping[TopicPartition, OffsetSpec], *,
                              any_offset: bool = False) -> list[tuple[bytes, bytes]]:
        """The ``(key, value)`` records committing ``offsets`` for ``group``, as Kafka encodes them
        (for a transactional producer's ``send_offsets_to_transaction``: append them in the
        transaction to partition :meth:`partition_for` and call :meth:`apply` once it commits)."""
        now = self._clock()
        out = []
        for tp, spec in offsets.items():
            oam = as_offset_and_metadata(spec, now, any_offset=any_offset)
            value = OffsetCommitValue(oam.offset, oam.metadata, oam.commit_timestamp,
                                      -1 if oam.leader_epoch is None else oam.leader_epoch)
            out.append((encode_key(OffsetCommitKey(group, tp.topic, tp.partition)),
                        encode_offset_commit_value(value)))
        return out

    def apply(self, group: str, offsets: Mapping[TopicPartition, OffsetSpec], *,
              any_offset: bool = False) -> None:
        """Make offsets already written to the topic (a committed transaction) visible."""
        now = self._clock()
        with self._lock:
            got = self._offsets.setdefault(group, {})
            for tp, spec in offsets.items():
                got[tp] = as_offset_and_metadata(spec, now, any_offset=any_offset)

    def commit(self, group: str, offsets: Mapping[TopicPartition, OffsetSpec], *,
               any_offset: bool = False) -> None:
        """Commit ``{TopicPartition: offset | (offset, metadata, leader_epoch) | OffsetAndMetadata}``
        for ``group``: one batch in the group's partition, fsynced before this returns.
        ``any_offset``: negative offsets too (the broker's OffsetCommit, as Kafka's)."""
        self._check_group(group)
        if not offsets:
            return
        offsets = {TopicPartition(tp[0], tp[1]): spec for tp, spec in offsets.items()}
        with self._lock:
            records = self.offset_commit_records(group, offsets, any_offset=any_offset)
            self._write(group, records)
            self.apply(group, offsets, any_offset=any_offset)

    def commit_transactional(self, group: str, offsets: Mapping[TopicPartition, OffsetSpec],
                             producer_id: int, producer_epoch: int, *, any_offset: bool = False) -> None:
        """Kafka's TxnOffsetCommit: one transactional batch of ``producer_id`` in the group's
        partition (fsynced); the offsets stay invisible until :meth:`complete_transaction` commits
        them (the transaction coordinator's COMMIT marker), and an abort drops them."""
        self._check_group(group)
        if not offsets:
            return
        offsets = {TopicPartition(tp[0], tp[1]): spec for tp, spec in offsets.items()}
        now = self._clock()
        with self._lock:
            records = self.offset_commit_records(group, offsets, any_offset=any_offset)
            self._write(group, records, producer=(producer_id, producer_epoch))
            got = self._pending.setdefault(producer_id, {}).setdefault(group, {})
            self._pending_producers.setdefault(group, set()).add(producer_id)
            for tp, spec in offsets.items():
                got[tp] = as_offset_and_metadata(spec, now, any_offset=any_offset)

    def pending_transactional(self, group: str) -> set[TopicPartition]:
        """The partitions of ``group`` with offsets of a transaction not ended yet (KIP-447: a
        ``require_stable`` OffsetFetch answers UNSTABLE_OFFSET_COMMIT for them)."""
        with self._lock:
            return {tp for pid in self._pending_producers.get(group, ()) for tp in self._pending[pid][group]}

    def complete_transaction(self, producer_id: int, partitions: frozenset[tuple[str, int]],
                             committed: bool) -> None:
        """A transaction of ``producer_id`` ended (its markers are written): its offsets become
        visible (``committed``) or are dropped. Offsets written before a restart are not in memory:
        the store is then replayed from the topic (the marker decides what counts)."""
        with self._lock:
            pending = self._pending.pop(producer_id, None)
            for group in pending or ():
                producers = self._pending_producers[group]
                producers.discard(producer_id)
                if not producers:
                    del self._pending_producers[group]
            if pending is None:
                if any(t == CONSUMER_OFFSETS_TOPIC for t, _p in partitions):
                    self.load()
                return
            if committed:
                for group, offsets in pending.items():
                    self._offsets.setdefault(group, {}).update(offsets)

    def store_group_metadata(self, group: str, value: GroupMetadataValue) -> None:
        """Write a group's metadata record (the broker's group coordinator, after a rebalance)."""
        self._check_group(group)
        with self._lock:
            self._write(group, [(encode_key(GroupMetadataKey(group)), encode_group_metadata_value(value))])
            self._groups[group] = value

    def delete_offsets(self, group: str, partitions: Iterable[TopicPartition]) -> None:
        """Tombstones for the committed offsets of ``partitions`` (Kafka's OffsetDelete)."""
        with self._lock:
            got = self._offsets.get(group, {})
            tps = [TopicPartition(tp[0], tp[1]) for tp in partitions]
            tps = [tp for tp in tps if tp in got]
            if not tps:
                return
            self._write(group, [(encode_key(OffsetCommitKey(group, tp.topic, tp.partition)), None)
                                for tp in tps])
            for tp in tps:
                del got[tp]
            if not got:
                self._offsets.pop(group, None)

    def delete_group(self, group: str) -> bool:
        """Tombstones for every committed offset of ``group`` and for its metadata (Kafka's
        DeleteGroups); returns False when the group is unknown."""
        with self._lock:
            got = self._offsets.get(group, {})
            consumer = self._consumer_groups.get(group, {})
            share = self._share_groups.get(group, {})
            streams = self._streams_groups.get(group, {})
            if not got and group not in self._groups and not consumer and not share and not streams:
                return False
            records: list[tuple[bytes, bytes | None]] = [
                (encode_key(OffsetCommitKey(group, tp.topic, tp.partition)), None) for tp in got]
            records += [(key, None) for key in consumer]
            records += [(key, None) for key in share]
            records += [(key, None) for key in streams]
            records.append((encode_key(GroupMetadataKey(group)), None))
            self._write(group, records)
            self._offsets.pop(group, None)
            self._groups.pop(group, None)
            self._consumer_groups.pop(group, None)
            self._share_groups.pop(group, None)
            self._streams_groups.pop(group, None)
            return True

    @staticmethod
    def _check_group(group: Any) -> None:
        if not isinstance(group, str) or not group:
            raise InvalidConfigError(f"a group.id is needed to commit offsets, got {group!r}")

    def _write(self, group: str, records: Sequence[tuple[bytes, bytes | None]],
               producer: tuple[int, int] | None = None) -> None:
        m = self._manager
        if not m.has_topic(CONSUMER_OFFSETS_TOPIC):
            m.create_topic(CONSUMER_OFFSETS_TOPIC, self._num_partitions, OFFSETS_TOPIC_CONFIG,
                           exist_ok=True)
            self._num_partitions = len(m.partitions_of(CONSUMER_OFFSETS_TOPIC))
        log = m.get_log(CONSUMER_OFFSETS_TOPIC, self.partition_for(group))
        now = self._clock()
        epoch = self._leader_epoch(log) if self._leader_epoch is not None else None
        if producer is None:
            log.append(bytearray(build_batch([(k, v, now, None) for k, v in records])), leader_epoch=epoch)
        else:    # as Kafka's group coordinator writes it: base sequence 0, appended as the coordinator
            log.append(bytearray(build_batch([(k, v, now, None) for k, v in records],
                                             producer_id=producer[0], producer_epoch=producer[1],
                                             base_sequence=0, is_transactional=True)),
                       origin=ORIGIN_COORDINATOR, leader_epoch=epoch)
        log.flush(include_active=True)
