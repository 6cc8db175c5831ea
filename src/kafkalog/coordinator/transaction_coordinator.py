"""The transaction coordinator (Kafka's ``TransactionCoordinator`` / ``TransactionStateManager`` /
``TransactionMarkerChannelManager`` for one node): transactional ids, their producer id and epoch,
the partitions of the open transaction, and the COMMIT/ABORT markers that end it.

State lives in the compacted ``__transaction_state`` topic (Kafka's key and value formats,
:mod:`kafkalog.coordinator.transaction_log`), one record per change, written before the change is
acted on, as Kafka does: ``Ongoing`` (partitions added), ``PrepareCommit``/``PrepareAbort`` (the
decision), then the markers in every partition of the transaction, then
``CompleteCommit``/``CompleteAbort``. Loading the topic finishes a decision left half-done (its
markers are written again) and a transaction open for longer than its ``transaction.timeout.ms`` is
aborted with a bumped epoch (fencing its producer), at load and then every
``transaction.abort.timed.out.transaction.cleanup.interval.ms`` by the data directory's scheduler.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from kafkalog.coordinator.producer_ids import ProducerIdManager
from kafkalog.coordinator.transaction_log import (
    TRANSACTION_STATE_TOPIC,
    TransactionMetadata,
    TransactionState,
    key_from_bytes,
    key_to_bytes,
    partition_for,
    value_from_bytes,
    value_to_bytes,
)
from kafkalog.errors import InvalidTransactionTimeoutError, ProducerFencedError
from kafkalog.log.producer_state import ORIGIN_COORDINATOR, InvalidTxnStateError
from kafkalog.record.builder import build_batch, build_end_txn_marker
from kafkalog.record.constants import ControlRecordType

__all__ = [
    "DEFAULT_TRANSACTION_STATE_PARTITIONS",
    "TRANSACTION_STATE_CONFIG",
    "InvalidTransactionTimeoutError",
    "InvalidTxnStateError",
    "ProducerFencedError",
    "TransactionCoordinator",
]

#: ``transaction.state.log.num.partitions`` (Kafka's default)
DEFAULT_TRANSACTION_STATE_PARTITIONS = 50
#: the topic configuration Kafka gives ``__transaction_state``
TRANSACTION_STATE_CONFIG = {"cleanup.policy": "compact", "segment.bytes": 104857600,
                            "compression.type": "uncompressed"}
_MAX_EPOCH = 32767


def _epoch_exhausted(epoch: int) -> bool:
    """Kafka's ``TransactionMetadata.isEpochExhausted``: no room for a bump and a fencing bump."""
    return epoch >= _MAX_EPOCH - 1


class _Log(Protocol):
    def append(self, records: bytes | bytearray, *, assign_offsets: bool = ...,
               leader_epoch: int | None = ..., origin: str | None = ...) -> object: ...

    def records(self, from_offset: int | None = ..., isolation: str = ...) -> Iterable: ...

    def flush(self, up_to: int | None = ..., include_active: bool = ...) -> None: ...


class _Manager(Protocol):
    """The part of :class:`kafkalog.log.manager.LogManager` the coordinator uses."""

    def has_topic(self, topic: str) -> bool: ...

    def partitions_of(self, topic: str) -> list[int]: ...

    def create_topic(self, topic: str, partitions: int = ..., config: dict | None = ..., *,
                     exist_ok: bool = ...) -> object: ...

    def get_log(self, topic: str, partition: int) -> _Log: ...


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


#: Called after a transaction's markers are written: ``(producer id, partitions, committed)`` (the
#: offsets store makes the transaction's offsets visible or drops them).
CompletionListener = Callable[[int, frozenset[tuple[str, int]], bool], None]


class TransactionCoordinator:
    """Transactions of one data directory (all transactional ids)."""

    def __init__(self, manager: _Manager, producer_ids: ProducerIdManager, *,
                 num_partitions: int = DEFAULT_TRANSACTION_STATE_PARTITIONS,
                 max_timeout_ms: int = 900_000, clock: Callable[[], int] = _now_ms,
                 on_complete: CompletionListener | None = None,
                 marker_leader_epoch: Callable[[Any], int] | None = None) -> None:
        self._manager = manager
        self._on_complete = on_complete
        #: the leader epoch a marker (and a __transaction_state record) carries in a partition (the
        #: broker's, as Kafka's leader stamps it); None: -1 (the embedded client)
        self._marker_leader_epoch = marker_leader_epoch
        self._max_timeout = max_timeout_ms
        self._ids = producer_ids
        self._clock = clock
        self._lock = threading.RLock()
        self._txns: dict[str, TransactionMetadata] = {}
        if manager.has_topic(TRANSACTION_STATE_TOPIC):
            self._partitions = len(manager.partitions_of(TRANSACTION_STATE_TOPIC))
            self._load()
        else:
            self._partitions = num_partitions

    # --- the __transaction_state topic ---------------------------------------------------------------

    def _load(self) -> None:
        for p in self._manager.partitions_of(TRANSACTION_STATE_TOPIC):
            for rec in self._manager.get_log(TRANSACTION_STATE_TOPIC, p).records():
                if rec.key is None:
                    continue
                tid = key_from_bytes(bytes(rec.key))
                if rec.value is None:
                    self._txns.pop(tid, None)
                else:
                    self._txns[tid] = value_from_bytes(tid, bytes(rec.value))
        for m in list(self._txns.values()):          # a decision taken, markers maybe not all written
            if m.state in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT):
                self._complete(m, m.state == TransactionState.PREPARE_COMMIT)

    def _persist(self, m: TransactionMetadata) -> None:
        """Write ``m`` to its ``__transaction_state`` partition and fsync it (written before the
        change is acted on)."""
        mgr = self._manager
        if not mgr.has_topic(TRANSACTION_STATE_TOPIC):
            mgr.create_topic(TRANSACTION_STATE_TOPIC, self._partitions, dict(TRANSACTION_STATE_CONFIG),
                             exist_ok=True)
        log = mgr.get_log(TRANSACTION_STATE_TOPIC, partition_for(m.transactional_id, self._partitions))
        m.txn_last_update_timestamp = self._clock()
        epoch = self._marker_leader_epoch(log) if self._marker_leader_epoch is not None else None
        log.append(build_batch([(key_to_bytes(m.transactional_id), value_to_bytes(m),
                                 m.txn_last_update_timestamp)]), leader_epoch=epoch)
        log.flush(include_active=True)

    # --- requests -------------------------------------------------------------------------------------

    def transaction(self, transactional_id: str) -> TransactionMetadata | None:
        """The current state of ``transactional_id`` (None when unknown)."""
        with self._lock:
            return self._txns.get(transactional_id)

    def transaction_of_producer(self, producer_id: int) -> TransactionMetadata | None:
        """The state of the transactional id whose producer id is ``producer_id`` (None if none)."""
        with self._lock:
            for m in self._txns.values():
                if m.producer_id == producer_id:
                    return m
            return None

    def init_producer_id(self, transactional_id: str, txn_timeout_ms: int,
                         expected: tuple[int, int] | None = None) -> tuple[int, int]:
        """Kafka's InitProducerId: ``(producer id, epoch)`` for ``transactional_id``. An open
        transaction of a previous producer with this id is aborted and that producer fenced (the
        epoch is bumped); a new id gets a new producer id and epoch 0; an exhausted epoch rotates
        to a new producer id. ``expected`` is the ``(producer id, epoch)`` a producer
        re-initializing itself sends (KIP-360): its current epoch is bumped, a retry of a bump
        whose answer was lost gets the current id and epoch again, anything older was fenced
        (:class:`ProducerFencedError`), as Kafka's ``TransactionCoordinator`` decides."""
        if not 0 < txn_timeout_ms <= self._max_timeout:
            raise InvalidTransactionTimeoutError(
                f"The transaction timeout {txn_timeout_ms} ms is larger than the maximum value allowed by "
                f"the broker (as configured by transaction.max.timeout.ms: {self._max_timeout} ms)")
        with self._lock:
            m = self._txns.get(transactional_id)
            if m is None:                    # Kafka creates the id with epoch -1 and accepts any expected
                m = TransactionMetadata(transactional_id, self._ids.generate_producer_id(), 0,
                                        txn_timeout_ms)
                self._txns[transactional_id] = m
                self._persist(m)
                return m.producer_id, m.producer_epoch
            if expected is not None and not (
                    expected[0] == m.producer_id
                    or (expected[0] == m.previous_producer_id and _epoch_exhausted(expected[1]))):
                raise self._fenced(m, expected)
            if m.state == TransactionState.ONGOING:
                # Kafka fences (bump, last epoch -1), aborts, answers CONCURRENT_TRANSACTIONS and
                # decides on the client's retry: both steps at once here
                self._abort_fenced(m)
                if expected is not None:
                    raise self._fenced(m, expected)
            if _epoch_exhausted(m.producer_epoch) and (expected is None or expected[1] == m.producer_epoch):
                m.previous_producer_id = m.producer_id
                m.last_producer_epoch = m.producer_epoch if expected is not None else -1
                m.producer_id = self._ids.generate_producer_id()
                m.producer_epoch = 0
            elif expected is None or expected[1] == m.producer_epoch:
                m.last_producer_epoch = m.producer_epoch if expected is not None else -1
                m.producer_epoch += 1
            elif expected[1] == m.last_producer_epoch:
                return m.producer_id, m.producer_epoch      # a retry of a bump whose answer was lost
            else:
                raise self._fenced(m, expected)
            m.txn_timeout_ms = txn_timeout_ms
            m.state = TransactionState.EMPTY
            m.partitions = set()
            m.txn_start_timestamp = -1
            self._persist(m)
            return m.producer_id, m.producer_epoch

    @staticmethod
    def _fenced(m: TransactionMetadata, expected: tuple[int, int]) -> ProducerFencedError:
        return ProducerFencedError(
            f"Producer {expected[0]} epoch {expected[1]} of transactional id {m.transactional_id!r} is "
            f"fenced: the current one is producer {m.producer_id} epoch {m.producer_epoch}")

    def _check_producer(self, transactional_id: str, producer_id: int, producer_epoch: int
                        ) -> TransactionMetadata:
        m = self._txns.get(transactional_id)
        if m is None:
            raise InvalidTxnStateError(f"Unknown transactional id {transactional_id!r} (call "
                                       f"init_transactions first)")
        if m.producer_id != producer_id or m.producer_epoch != producer_epoch:
            raise ProducerFencedError(
                f"Producer {producer_id} epoch {producer_epoch} of transactional id {transactional_id!r} "
                f"is fenced: the current one is producer {m.producer_id} epoch {m.producer_epoch} (another "
                f"producer with the same transactional.id was initialized, or the transaction timed out)")
        return m

    def add_partitions_to_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                              partitions: Iterable[tuple[str, int]]) -> None:
        """Kafka's AddPartitionsToTxn: the partitions join the open transaction (persisted
        before the producer writes to them)."""
        with self._lock:
            m = self._check_producer(transactional_id, producer_id, producer_epoch)
            new = set(partitions) - m.partitions if m.state == TransactionState.ONGOING else set(partitions)
            if not new and m.state == TransactionState.ONGOING:
                return
            if m.state not in (TransactionState.ONGOING, TransactionState.EMPTY,
                               TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT):
                raise InvalidTxnStateError(f"Transactional id {transactional_id!r} is in state "
                                           f"{m.state.name}: cannot add partitions")
            if m.state != TransactionState.ONGOING:
                m.partitions = set()
                m.txn_start_timestamp = self._clock()
                m.state = TransactionState.ONGOING
            m.partitions |= new
            self._persist(m)

    def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool) -> None:
        """Kafka's EndTxn: COMMIT or ABORT markers in every partition of the transaction."""
        with self._lock:
            m = self._check_producer(transactional_id, producer_id, producer_epoch)
            if m.state in (TransactionState.EMPTY, TransactionState.COMPLETE_COMMIT,
                           TransactionState.COMPLETE_ABORT):
                return                       # nothing was written in this transaction: nothing to end
            if m.state != TransactionState.ONGOING:
                raise InvalidTxnStateError(f"Transactional id {transactional_id!r} is in state "
                                           f"{m.state.name}: cannot {'commit' if commit else 'abort'}")
            m.state = TransactionState.PREPARE_COMMIT if commit else TransactionState.PREPARE_ABORT
            self._persist(m)
            self._complete(m, commit)

    def _coordinator_epoch(self, transactional_id: str) -> int:
        """The coordinator epoch of the markers: as Kafka, the leader epoch of the transactional id's
        ``__transaction_state`` partition (0 when it has none), so a marker is never older than
        those a Kafka broker wrote before into the same logs (its producer state would refuse it)."""
        if not self._manager.has_topic(TRANSACTION_STATE_TOPIC):
            return 0
        log = self._manager.get_log(TRANSACTION_STATE_TOPIC, partition_for(transactional_id, self._partitions))
        cache = getattr(log, "leader_epoch_cache", None)
        latest = None if cache is None else cache.latest_epoch()
        return max(latest or 0, 0)

    def _complete(self, m: TransactionMetadata, commit: bool) -> None:
        marker = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
        now = self._clock()
        coordinator_epoch = self._coordinator_epoch(m.transactional_id)
        for topic, p in sorted(m.partitions):
            if not self._manager.has_topic(topic) or p not in self._manager.partitions_of(topic):
                continue                     # deleted since: nothing to mark
            log = self._manager.get_log(topic, p)
            epoch = self._marker_leader_epoch(log) if self._marker_leader_epoch is not None else None
            log.append(build_end_txn_marker(marker, producer_id=m.producer_id,
                                            producer_epoch=m.producer_epoch, timestamp=now,
                                            coordinator_epoch=coordinator_epoch),
                       origin=ORIGIN_COORDINATOR, leader_epoch=epoch)
        done = frozenset(m.partitions)
        m.state = TransactionState.COMPLETE_COMMIT if commit else TransactionState.COMPLETE_ABORT
        m.partitions = set()
        self._persist(m)
        if self._on_complete is not None:
            self._on_complete(m.producer_id, done, commit)

    def _abort_fenced(self, m: TransactionMetadata) -> None:
        """Abort ``m``'s open transaction with a bumped epoch (the old producer is fenced)."""
        m.producer_epoch = min(m.producer_epoch + 1, _MAX_EPOCH)
        m.last_producer_epoch = -1
        m.state = TransactionState.PREPARE_ABORT
        self._persist(m)
        self._complete(m, False)

    def abort_timed_out_transactions(self, now: int | None = None) -> list[str]:
        """Abort every transaction open for longer than its timeout; returns their ids."""
        now = self._clock() if now is None else now
        out = []
        with self._lock:
            for m in list(self._txns.values()):
                if m.state == TransactionState.ONGOING and m.txn_start_timestamp + m.txn_timeout_ms < now:
                    self._abort_fenced(m)
                    out.append(m.transactional_id)
        return out
