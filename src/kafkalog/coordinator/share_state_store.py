"""The share coordinator's state store (Kafka's ``ShareCoordinatorShard`` behind its persister): the
persisted state of every share partition, kept in ``__share_group_state`` as Kafka 4.4 keeps it.

Initializing a share partition writes a ``ShareSnapshot`` (snapshot epoch 0, the state epoch and the
start offset); each change writes a ``ShareUpdate`` with the changed state batches, merged over the
snapshot (later batches win, offsets below the start offset dropped: Kafka's
``PersisterStateBatchCombiner``); after ``share.coordinator.snapshot.update.records.per.snapshot``
updates the merged state is written as a new snapshot instead. Loading replays the topic. Writes
are fsynced before the change they record is answered.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from kafkalog.coordinator.share_state_records import (
    DEFAULT_SHARE_GROUP_STATE_PARTITIONS,
    SHARE_GROUP_STATE_CONFIG,
    SHARE_GROUP_STATE_TOPIC,
    SHARE_SNAPSHOT,
    SHARE_UPDATE,
    ShareStateKey,
    ShareStateValue,
    StateBatch,
    decode_record,
    encode_key,
    encode_value,
    partition_for,
)
from kafkalog.record.builder import build_batch

__all__ = ["ShareStateStore", "StoredShareState", "merge_batches"]

#: ``share.coordinator.snapshot.update.records.per.snapshot`` (Kafka's default)
UPDATES_PER_SNAPSHOT = 500


class _Manager(Protocol):
    def has_topic(self, topic: str) -> bool: ...

    def partitions_of(self, topic: str) -> list[int]: ...

    def create_topic(self, topic: str, partitions: int = ..., config: dict | None = ..., *,
                     exist_ok: bool = ...) -> object: ...

    def get_log(self, topic: str, partition: int) -> Any: ...


@dataclass(frozen=True)
class StoredShareState:
    """A share partition's persisted state (Kafka's ``ShareGroupOffset``)."""

    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    batches: tuple[StateBatch, ...]
    delivery_complete_count: int = -1
    create_timestamp: int = 0
    write_timestamp: int = 0


def merge_batches(current: Iterable[StateBatch], new: Iterable[StateBatch], start_offset: int
                  ) -> tuple[StateBatch, ...]:
    """``new`` over ``current`` (offset by offset, the later wins), nothing below ``start_offset``,
    adjacent runs of one state and count joined (what Kafka's ``PersisterStateBatchCombiner``
    produces)."""
    by_offset: dict[int, tuple[int, int]] = {}
    for b in (*current, *new):
        for off in range(max(b.first_offset, start_offset), b.last_offset + 1):
            by_offset[off] = (b.delivery_state, b.delivery_count)
    out: list[StateBatch] = []
    for off in sorted(by_offset):
        state, count = by_offset[off]
        prev = out[-1] if out else None
        if prev is not None and prev.last_offset == off - 1 \
                and (prev.delivery_state, prev.delivery_count) == (state, count):
            out[-1] = out[-1]._replace(last_offset=off)
        else:
            out.append(StateBatch(off, off, state, count))
    return tuple(out)


Key = tuple[str, uuid.UUID, int]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class ShareStateStore:
    """Every share partition's persisted state in one data directory."""

    def __init__(self, manager: _Manager, *, num_partitions: int = DEFAULT_SHARE_GROUP_STATE_PARTITIONS,
                 updates_per_snapshot: int = UPDATES_PER_SNAPSHOT, clock: Callable[[], int] = _now_ms) -> None:
        self._manager = manager
        self._updates_per_snapshot = updates_per_snapshot
        self._clock = clock
        self._lock = threading.RLock()
        self._states: dict[Key, StoredShareState] = {}
        self._updates: dict[Key, int] = {}
        if manager.has_topic(SHARE_GROUP_STATE_TOPIC):
            self._partitions = len(manager.partitions_of(SHARE_GROUP_STATE_TOPIC))
            self.load()
        else:
            self._partitions = num_partitions

    def load(self) -> None:
        """Replay ``__share_group_state``."""
        with self._lock:
            self._states.clear()
            self._updates.clear()
            for p in self._manager.partitions_of(SHARE_GROUP_STATE_TOPIC):
                for rec in self._manager.get_log(SHARE_GROUP_STATE_TOPIC, p).records():
                    if rec.key is None:
                        continue
                    got = decode_record(bytes(rec.key), None if rec.value is None else bytes(rec.value))
                    if got is not None:
                        self._replay(*got)

    def _replay(self, key: ShareStateKey, value: ShareStateValue | None) -> None:
        k = (key.group_id, key.topic_id, key.partition)
        if value is None:
            self._states.pop(k, None)
            self._updates.pop(k, None)
            return
        if key.record_type == SHARE_SNAPSHOT:
            self._states[k] = StoredShareState(value.snapshot_epoch, value.state_epoch, value.leader_epoch,
                                               value.start_offset, value.state_batches,
                                               value.delivery_complete_count, value.create_timestamp,
                                               value.write_timestamp)
            if self._updates.get(k, 0) >= self._updates_per_snapshot:
                self._updates[k] = 0
            return
        current = self._states.get(k)
        start = value.start_offset if value.start_offset != -1 else (current.start_offset if current else -1)
        if current is None:
            self._states[k] = StoredShareState(value.snapshot_epoch, -1, value.leader_epoch, start,
                                               merge_batches((), value.state_batches, start),
                                               value.delivery_complete_count)
        else:
            self._states[k] = replace(
                current, start_offset=start,
                leader_epoch=current.leader_epoch if value.leader_epoch == -1 else value.leader_epoch,
                delivery_complete_count=value.delivery_complete_count,
                batches=merge_batches(current.batches, value.state_batches, start))
        self._updates[k] = self._updates.get(k, 0) + 1

    # --- reads ----------------------------------------------------------------------------------------

    def read(self, group: str, topic_id: uuid.UUID, partition: int) -> StoredShareState | None:
        with self._lock:
            return self._states.get((group, topic_id, partition))

    def partitions_of_group(self, group: str) -> dict[tuple[uuid.UUID, int], StoredShareState]:
        with self._lock:
            return {(t, p): s for (g, t, p), s in self._states.items() if g == group}

    # --- writes ---------------------------------------------------------------------------------------

    def _append(self, records: list[tuple[ShareStateKey, ShareStateValue | None]]) -> None:
        mgr = self._manager
        if not mgr.has_topic(SHARE_GROUP_STATE_TOPIC):
            mgr.create_topic(SHARE_GROUP_STATE_TOPIC, self._partitions, dict(SHARE_GROUP_STATE_CONFIG),
                             exist_ok=True)
            self._partitions = len(mgr.partitions_of(SHARE_GROUP_STATE_TOPIC))
        now = self._clock()
        by_partition: dict[int, list[tuple[bytes, bytes | None, int]]] = {}
        for key, value in records:
            p = partition_for(key.group_id, key.topic_id, key.partition, self._partitions)
            by_partition.setdefault(p, []).append(
                (encode_key(key), None if value is None else encode_value(key.record_type, value), now))
        for p, recs in sorted(by_partition.items()):
            log = mgr.get_log(SHARE_GROUP_STATE_TOPIC, p)
            log.append(build_batch(recs))
            log.flush(include_active=True)
        for key, value in records:
            self._replay(key, value)

    def initialize(self, states: Iterable[tuple[str, uuid.UUID, int, int, int]]) -> None:
        """Kafka's InitializeShareGroupState: ``(group, topic id, partition, state epoch, start
        offset)`` each get a new snapshot (its epoch after the current one)."""
        now = self._clock()
        out: list[tuple[ShareStateKey, ShareStateValue | None]] = []
        with self._lock:
            for group, topic_id, partition, state_epoch, start in states:
                cur = self._states.get((group, topic_id, partition))
                epoch = 0 if cur is None else cur.snapshot_epoch + 1
                # as Kafka's share coordinator writes it: leader epoch 0, no delivery complete count
                out.append((ShareStateKey(SHARE_SNAPSHOT, group, topic_id, partition),
                            ShareStateValue(epoch, 0, start, (), -1, state_epoch, now, now)))
            if out:
                self._append(out)

    def write(self, changes: Iterable[tuple[str, uuid.UUID, int, int, tuple[StateBatch, ...], int, int]]) -> None:
        """Kafka's WriteShareGroupState: ``(group, topic id, partition, start offset, changed
        batches, delivery complete count, leader epoch)`` each an update (or, every
        ``updates_per_snapshot``, a snapshot of the merged state)."""
        now = self._clock()
        out: list[tuple[ShareStateKey, ShareStateValue | None]] = []
        with self._lock:
            for group, topic_id, partition, start, batches, dcc, leader_epoch in changes:
                k = (group, topic_id, partition)
                cur = self._states.get(k)
                if cur is None:
                    cur = StoredShareState(-1, 0, leader_epoch, start, ())
                    out.append((ShareStateKey(SHARE_SNAPSHOT, group, topic_id, partition),
                                ShareStateValue(0, leader_epoch, start, (), 0, 0, now, now)))
                new_start = max(start, cur.start_offset)
                if start == cur.start_offset:
                    dcc = max(dcc, cur.delivery_complete_count)
                elif start < cur.start_offset:
                    dcc = cur.delivery_complete_count
                if self._updates.get(k, 0) >= self._updates_per_snapshot:
                    out.append((ShareStateKey(SHARE_SNAPSHOT, group, topic_id, partition),
                                ShareStateValue(cur.snapshot_epoch + 1, leader_epoch, new_start,
                                                merge_batches(cur.batches, batches, new_start), dcc,
                                                cur.state_epoch, now, now)))
                else:
                    out.append((ShareStateKey(SHARE_UPDATE, group, topic_id, partition),
                                ShareStateValue(max(cur.snapshot_epoch, 0), leader_epoch, new_start,
                                                merge_batches((), batches, new_start), dcc)))
            if out:
                self._append(out)

    def delete(self, keys: Iterable[tuple[str, uuid.UUID, int]]) -> None:
        """Kafka's DeleteShareGroupState: tombstones."""
        with self._lock:
            out: list[tuple[ShareStateKey, ShareStateValue | None]] = [
                (ShareStateKey(SHARE_SNAPSHOT, g, t, p), None) for g, t, p in keys if (g, t, p) in self._states]
            if out:
                self._append(out)
