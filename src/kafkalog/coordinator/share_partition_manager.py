"""The share partitions of a data directory (Kafka's ``SharePartitionManager`` with its persister): each
share group's :class:`~kafkalog.coordinator.share_partition.SharePartition` per topic partition,
loaded from ``__share_group_state`` (:class:`~kafkalog.coordinator.share_state_store.ShareStateStore`)
or started by the group's ``share.auto.offset.reset``, records read through the log's read path
(``Log.read``, bounded by the last stable offset with ``share.isolation.level=read_committed``,
aborted transactions' batches archived), every change of delivery state written back before it is
answered. The broker's ShareFetch/ShareAcknowledge and the embedded share consumer use it alike.

Acquisition locks end on a timer (:meth:`SharePartitionManager.expire_locks`, the broker's group
timer): a heap of the partitions whose first lock may end, one live entry a partition, pushed when
records are acquired, so a tick looks at the partitions whose time came, not at every share
partition of the node. A group's partitions are held by group, so what a member's leave or a
group's deletion does costs what that group holds.
"""

from __future__ import annotations

import heapq
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from kafkalog.coordinator.share_partition import SharePartition, SharePartitionConfig, reset_start_offset
from kafkalog.coordinator.share_state_store import ShareStateStore
from kafkalog.errors import KafkalogError, OffsetOutOfRangeError
from kafkalog.record.constants import IsolationLevel

__all__ = ["ShareFetchResult", "ShareGroupSettings", "SharePartitionManager"]

_HEAD = struct.Struct(">qi")


@dataclass
class ShareGroupSettings:
    """What a share group's configs decide (Kafka's group configs ``share.*`` over the broker's
    ``group.share.*`` defaults)."""

    partition: SharePartitionConfig
    #: ``share.auto.offset.reset``: ``latest``, ``earliest`` or ``by_duration:<ISO-8601 duration>``
    auto_offset_reset: str = "latest"
    #: ``share.isolation.level``
    isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED


class _Manager(Protocol):
    def has_topic(self, topic: str) -> bool: ...

    def partitions_of(self, topic: str) -> list[int]: ...

    def get_log(self, topic: str, partition: int) -> Any: ...


@dataclass
class ShareFetchResult:
    """The answer of one partition: the log's bytes from the fetch offset and the records acquired
    in them ``(first, last, delivery count)``."""

    records: bytes = b""
    acquired: tuple[tuple[int, int, int], ...] = ()
    error: int = 0


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def batch_headers(data: bytes) -> list[tuple[int, int, int, int, int]]:
    """``(base offset, last offset, attributes, producer id, size)`` of each whole batch in ``data``."""
    out = []
    pos = 0
    while pos + 61 <= len(data):
        base, length = _HEAD.unpack_from(data, pos)
        size = length + 12
        if length < 49 or pos + size > len(data):
            break
        attrs = struct.unpack_from(">h", data, pos + 21)[0]
        last = base + struct.unpack_from(">i", data, pos + 23)[0]
        pid = struct.unpack_from(">q", data, pos + 43)[0]
        out.append((base, last, attrs, pid, size))
        pos += size
    return out


def aborted_batches(headers: list[tuple[int, int, int, int, int]],
                    aborted: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """The data batches of aborted transactions among ``headers`` (Kafka's
    ``fetchAbortedTransactionRecordBatches``), ``aborted`` being ``(producer id, first offset)``."""
    pending = sorted(aborted, key=lambda a: a[1])
    live: set[int] = set()
    out = []
    for base, last, attrs, pid, _size in headers:
        if pid < 0:
            continue
        while pending and pending[0][1] <= last:
            live.add(pending.pop(0)[0])
        if attrs & 0x20:                      # a control batch: the marker ends the transaction
            live.discard(pid)
            continue
        if attrs & 0x10 and pid in live:
            out.append((base, last))
    return out


Key = tuple[str, str, int]


class SharePartitionManager:
    """Every share partition of one data directory."""

    def __init__(self, manager: _Manager, store: ShareStateStore, topic_id_of: Callable[[str], uuid.UUID],
                 settings_of: Callable[[str], ShareGroupSettings], clock: Callable[[], int] = _now_ms) -> None:
        self._manager = manager
        self.store = store
        self._topic_id_of = topic_id_of
        self._settings_of = settings_of
        self._clock = clock
        self._lock = threading.RLock()
        #: group -> (topic, partition) -> its share partition, loaded
        self._partitions: dict[str, dict[tuple[str, int], SharePartition]] = {}
        #: (deadline, group, topic, partition): when a partition's first acquisition lock may end;
        #: an entry is live while ``_lock_due`` holds its deadline (one live entry a partition)
        self._lock_timers: list[tuple[int, str, str, int]] = []
        self._lock_due: dict[Key, int] = {}

    # --- loading ----------------------------------------------------------------------------------

    def _log(self, topic: str, partition: int) -> Any:
        if not self._manager.has_topic(topic) or partition not in self._manager.partitions_of(topic):
            return None
        return self._manager.get_log(topic, partition)

    def _start_offset(self, group: str, log: Any) -> int:
        """Kafka's ``share.auto.offset.reset`` for a share partition without a state."""
        log_start, hw, _lso = log.fetch_offset_snapshot()
        return reset_start_offset(self._settings_of(group).auto_offset_reset, log_start, hw,
                                  log.offset_for_timestamp, self._clock())

    def get(self, group: str, topic: str, partition: int) -> SharePartition | None:
        """The share partition, loaded or started on first use (None: no such topic partition)."""
        with self._lock:
            sp = self._partitions.get(group, {}).get((topic, partition))
            if sp is not None:
                sp.config = self._settings_of(group).partition
                return sp
            log = self._log(topic, partition)
            if log is None:
                return None
            topic_id = self._topic_id_of(topic)
            stored = self.store.read(group, topic_id, partition)
            config = self._settings_of(group).partition
            if stored is None or stored.start_offset < 0:
                start = self._start_offset(group, log)
                sp = SharePartition(start, config, state_epoch=0 if stored is None else stored.state_epoch)
            else:
                sp = SharePartition.restore(stored.start_offset, stored.batches, config, stored.state_epoch,
                                            max(stored.leader_epoch, 0))
            log_start = log.fetch_offset_snapshot()[0]
            sp.move_start(log_start)
            self._partitions.setdefault(group, {})[(topic, partition)] = sp
            return sp

    def loaded(self, group: str) -> dict[tuple[str, int], SharePartition]:
        with self._lock:
            return dict(self._partitions.get(group, {}))

    def forget(self, group: str, topics: Iterable[tuple[str, int]] | None = None) -> None:
        """Drop the in-memory share partitions of ``group`` (reloaded from the store on next use)."""
        with self._lock:
            held = self._partitions.get(group)
            if held is None:
                return
            if topics is None:
                held.clear()
            else:
                for tp in set(topics):
                    held.pop(tp, None)
            if not held:
                del self._partitions[group]

    # --- persistence ------------------------------------------------------------------------------

    def _persist(self, group: str, changed: dict[tuple[str, int], list[int]]) -> None:
        """Write the changed delivery states of ``group``'s partitions (Kafka's
        WriteShareGroupState), before the change is answered."""
        writes = []
        held = self._partitions.get(group, {})
        for (topic, partition), offsets in changed.items():
            sp = held.get((topic, partition))
            if sp is None:
                continue
            stored = self.store.read(group, self._topic_id_of(topic), partition)
            if not offsets and stored is not None and stored.start_offset == sp.start_offset:
                continue
            writes.append((group, self._topic_id_of(topic), partition, sp.start_offset,
                           sp.state_batches(offsets), sp.delivery_complete_count(), sp.leader_epoch))
        if writes:
            self.store.write(writes)
        for (topic, partition) in changed:
            sp = held.get((topic, partition))
            if sp is not None:
                sp.advance()

    # --- fetch and acknowledge --------------------------------------------------------------------

    def fetch(self, group: str, member: str, topic: str, partition: int, max_records: int, max_bytes: int,
              record_limit: bool = False, now: int | None = None,
              settling: frozenset[int] = frozenset()) -> ShareFetchResult:
        """Read from the next fetch offset and acquire for ``member`` what is available there
        (``settling``: offsets the same request acknowledged, not taken again at once)."""
        now = self._clock() if now is None else now
        with self._lock:
            sp = self.get(group, topic, partition)
            if sp is None:
                return ShareFetchResult(error=3)              # UNKNOWN_TOPIC_OR_PARTITION
            log = self._log(topic, partition)
            changed: dict[tuple[str, int], list[int]] = {}
            expired = sp.expire_locks(now)
            if expired:
                changed[(topic, partition)] = expired
            log_start, hw, lso = log.fetch_offset_snapshot()
            moved = sp.move_start(log_start)
            if moved:
                changed.setdefault((topic, partition), []).extend(moved)
            isolation = self._settings_of(group).isolation_level
            committed = isolation is IsolationLevel.READ_COMMITTED
            offset = min((o for o, r in sp.records.items() if r.state == 0 and o not in settling),
                         default=sp.end_offset + 1)
            bound = lso if committed else hw
            result = ShareFetchResult()
            if offset < bound and max_records > 0:
                try:
                    info = log.read(offset, max(max_bytes, 1), isolation=isolation)
                except OffsetOutOfRangeError:
                    info = None
                if info is not None:
                    data = info.read()
                    headers = batch_headers(data)
                    excluded = aborted_batches(headers, [(a.producer_id, a.first_offset)
                                                         for a in info.aborted_transactions or ()]) \
                        if committed else []
                    acquired = sp.acquire(member, [(h[0], h[1]) for h in headers], max_records, now,
                                          record_limit, excluded, settling)
                    if excluded:
                        changed.setdefault((topic, partition), []).extend(
                            o for a, b in excluded for o in range(a, b + 1))
                    if acquired:
                        result = ShareFetchResult(data, tuple(acquired))
                        self._schedule_locks((group, topic, partition), now + sp.config.record_lock_duration_ms)
            if changed:
                self._persist(group, changed)
            return result

    def acknowledge(self, group: str, member: str, topic: str, partition: int,
                    batches: Iterable[tuple[int, int, list[int]]], now: int | None = None) -> None:
        """Settle ``member``'s acquired records (raises
        :class:`~kafkalog.coordinator.share_partition.InvalidRecordStateError`)."""
        now = self._clock() if now is None else now
        with self._lock:
            sp = self.get(group, topic, partition)
            if sp is None:
                raise KafkalogError(f"unknown topic partition {topic}-{partition}")
            changed = sp.acknowledge(member, list(batches), now)
            self._persist(group, {(topic, partition): changed})

    def release_member(self, group: str, member: str, topics: Iterable[tuple[str, int]] | None = None) -> None:
        """A member left (or its share session closed): its acquired records are released."""
        with self._lock:
            changed = {}
            held = self._partitions.get(group, {})
            for tp in list(held) if topics is None else set(topics):
                sp = held.get(tp)
                if sp is None:
                    continue
                got = sp.release_member(member)
                if got:
                    changed[tp] = got
            if changed:
                self._persist(group, changed)

    def _schedule_locks(self, key: Key, deadline: int) -> None:
        """A lock of ``key``'s partition ends at ``deadline``: an entry unless an earlier one is
        live (it looks again then, and schedules what is left). Renewed locks end later: the
        entry stays."""
        live = self._lock_due.get(key)
        if live is not None and live <= deadline:
            return
        self._lock_due[key] = deadline
        heapq.heappush(self._lock_timers, (deadline, *key))

    def expire_locks(self, now: int | None = None) -> bool:
        """Expire the locks past their deadline (the broker's timer): the partitions whose entry
        came due; True if any expired."""
        now = self._clock() if now is None else now
        any_expired = False
        with self._lock:
            by_group: dict[str, dict[tuple[str, int], list[int]]] = {}
            timers = self._lock_timers
            while timers and timers[0][0] <= now:
                deadline, g, t, p = heapq.heappop(timers)
                key = (g, t, p)
                if self._lock_due.get(key) != deadline:
                    continue                                  # an earlier entry replaced it
                del self._lock_due[key]
                sp = self._partitions.get(g, {}).get((t, p))
                if sp is None:
                    continue                                  # forgotten: reloaded without locks
                got = sp.expire_locks(now)
                if got:
                    by_group.setdefault(g, {})[(t, p)] = got
                left = sp.next_deadline()
                if left is not None:
                    self._schedule_locks(key, left)
            for g, changed in by_group.items():
                self._persist(g, changed)
                any_expired = True
        return any_expired
