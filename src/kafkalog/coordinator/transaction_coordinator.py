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

Transactions v2 (KIP-890 part 2), with ``transaction.version`` 2 finalized (:attr:`level`): a client
of version 2 (EndTxn v5+, Produce v12+, TxnOffsetCommit v5+) has its partitions added by its writes,
and every commit or abort bumps its epoch (the markers carry the bumped epoch, so a late write of
the old epoch is refused by the log); the epoch's last value hands over to a new producer id
(``nextProducerId``). A client of version 0/1 keeps the explicit AddPartitionsToTxn and its epoch.
The coordinator's own aborts (a fenced or timed-out transaction) follow :attr:`level`. Each method
follows the transitions of Kafka 4.4's ``TransactionMetadata`` and raises Kafka's errors as the
typed errors below. Markers are written while the request is handled (one node, no marker channel),
so no transition is ever pending between two requests.
"""

from __future__ import annotations

import dataclasses
import heapq
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
from kafkalog.errors import (
    ConcurrentTransactionsError,
    InvalidProducerIdMappingError,
    InvalidTransactionTimeoutError,
    ProducerFencedError,
)
from kafkalog.log.producer_state import ORIGIN_COORDINATOR, ORIGIN_COORDINATOR_TV2, InvalidTxnStateError
from kafkalog.record.builder import build_batch, build_end_txn_marker
from kafkalog.record.constants import ControlRecordType

__all__ = [
    "DEFAULT_TRANSACTION_STATE_PARTITIONS",
    "TRANSACTION_STATE_CONFIG",
    "ConcurrentTransactionsError",
    "InvalidProducerIdMappingError",
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
#: Kafka's ``TransactionVersion.TV_2``: the first version that bumps the epoch on every end
TV_2 = 2

_ONGOING_OR_EMPTY = (TransactionState.ONGOING, TransactionState.EMPTY)
_PREPARED = (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT)
_COMPLETED = (TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT)


def _epoch_exhausted(epoch: int) -> bool:
    """Kafka's ``TransactionMetadata.isEpochExhausted``: no room for a bump and a fencing bump."""
    return epoch >= _MAX_EPOCH - 1


class _Log(Protocol):
    def append(self, records: bytes | bytearray, *, assign_offsets: bool = ...,
               leader_epoch: int | None = ..., origin: str | None = ...) -> object: ...

    def records(self, from_offset: int | None = ..., isolation: str = ...) -> Iterable: ...

    def flush(self, up_to: int | None = ..., include_active: bool = ...) -> None: ...

    def current_leader_epoch(self) -> int: ...


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
                 marker_leader_epoch: Callable[[Any], int] | None = None, transaction_version: int = TV_2) -> None:
        self._manager = manager
        self._on_complete = on_complete
        #: the leader epoch a marker (and a __transaction_state record) carries in a partition (the
        #: broker's, as Kafka's leader stamps it); None: -1 (the embedded client)
        self._marker_leader_epoch = marker_leader_epoch
        self._max_timeout = max_timeout_ms
        self._ids = producer_ids
        self._clock = clock
        #: the finalized ``transaction.version``: the version of the coordinator's own aborts, and
        #: of the ``TransactionLogValue`` written (v1 from level 1)
        self.level = transaction_version
        self._lock = threading.RLock()
        self._txns: dict[str, TransactionMetadata] = {}
        #: (deadline, transactional id): when an open transaction times out (its start plus its
        #: timeout); an entry is live while ``_timeouts_due`` holds its deadline for the id, so the
        #: timer looks at the transactions whose time came, not at every transactional id
        self._timeouts: list[tuple[int, str]] = []
        self._timeouts_due: dict[str, int] = {}
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
            if m.state in _PREPARED:
                self._complete(m)
            elif m.state == TransactionState.ONGOING:
                self._schedule_timeout(m)

    def _write(self, m: TransactionMetadata) -> TransactionMetadata:
        """Write ``m`` (a transition of its transactional id) to its ``__transaction_state``
        partition and fsync it, then make it the current state (written before acted on)."""
        mgr = self._manager
        if not mgr.has_topic(TRANSACTION_STATE_TOPIC):
            mgr.create_topic(TRANSACTION_STATE_TOPIC, self._partitions, dict(TRANSACTION_STATE_CONFIG),
                             exist_ok=True)
        log = mgr.get_log(TRANSACTION_STATE_TOPIC, partition_for(m.transactional_id, self._partitions))
        epoch = self._marker_leader_epoch(log) if self._marker_leader_epoch is not None else None
        log.append(build_batch([(key_to_bytes(m.transactional_id),
                                 value_to_bytes(m, 1 if self.level >= 1 else 0),
                                 m.txn_last_update_timestamp)]), leader_epoch=epoch)
        log.flush(include_active=True)
        self._txns[m.transactional_id] = m
        if m.state == TransactionState.ONGOING:
            self._schedule_timeout(m)
        return m

    def _schedule_timeout(self, m: TransactionMetadata) -> None:
        """``m``'s open transaction times out at its start plus its timeout: an entry, once."""
        deadline = m.txn_start_timestamp + m.txn_timeout_ms
        if self._timeouts_due.get(m.transactional_id) != deadline:
            self._timeouts_due[m.transactional_id] = deadline
            heapq.heappush(self._timeouts, (deadline, m.transactional_id))

    def _transit(self, m: TransactionMetadata, state: TransactionState, **changes: object) -> TransactionMetadata:
        """Kafka's ``prepareTransitionTo``: ``m`` in ``state`` with ``changes``; the previous producer
        id is the current one, the update time now."""
        return dataclasses.replace(m, state=state, previous_producer_id=m.producer_id,
                                   txn_last_update_timestamp=self._clock(), **changes)  # type: ignore[arg-type]

    # --- requests -------------------------------------------------------------------------------------

    def transaction(self, transactional_id: str) -> TransactionMetadata | None:
        """The current state of ``transactional_id`` (None when unknown)."""
        with self._lock:
            return self._txns.get(transactional_id)

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
            if m is None:                    # Kafka creates the id with epoch -1
                m = TransactionMetadata(transactional_id, self._ids.generate_producer_id(), -1,
                                        txn_timeout_ms, txn_last_update_timestamp=self._clock())
            self._check_expected(m, expected)
            if m.state == TransactionState.ONGOING:
                # Kafka fences (bump), aborts, answers CONCURRENT_TRANSACTIONS and decides on the
                # client's retry: both steps at once here
                m = self._fence_and_abort(m)
                self._check_expected(m, expected)
            if _epoch_exhausted(m.producer_epoch) and (expected is None or expected[1] == m.producer_epoch):
                m = self._transit(m, TransactionState.EMPTY, producer_id=self._ids.generate_producer_id(),
                                  producer_epoch=0,
                                  last_producer_epoch=m.producer_epoch if expected is not None else -1,
                                  txn_timeout_ms=txn_timeout_ms, partitions=set(), txn_start_timestamp=-1)
            else:
                if expected is None:
                    epoch, last = m.producer_epoch + 1, -1
                elif m.producer_epoch == -1 or expected[1] == m.producer_epoch:
                    epoch, last = m.producer_epoch + 1, m.producer_epoch
                elif expected[1] == m.last_producer_epoch:   # a retry of a bump whose answer was lost
                    epoch, last = m.producer_epoch, m.last_producer_epoch
                else:
                    raise self._fenced(m, expected)
                m = self._transit(m, TransactionState.EMPTY, producer_epoch=epoch, last_producer_epoch=last,
                                  txn_timeout_ms=txn_timeout_ms, partitions=set(), txn_start_timestamp=-1)
            self._write(m)
            return m.producer_id, m.producer_epoch

    def _check_expected(self, m: TransactionMetadata, expected: tuple[int, int] | None) -> None:
        """Kafka's ``isValidProducerId`` of a re-initializing producer (KIP-360)."""
        if expected is not None and not (
                m.producer_epoch == -1 or expected[0] == m.producer_id
                or (expected[0] == m.previous_producer_id and _epoch_exhausted(expected[1]))):
            raise self._fenced(m, expected)

    @staticmethod
    def _fenced(m: TransactionMetadata, expected: tuple[int, int]) -> ProducerFencedError:
        return ProducerFencedError(
            f"Producer {expected[0]} epoch {expected[1]} of transactional id {m.transactional_id!r} is "
            f"fenced: the current one is producer {m.producer_id} epoch {m.producer_epoch}")

    def _known(self, transactional_id: str, producer_id: int) -> TransactionMetadata:
        m = self._txns.get(transactional_id)
        if m is None:
            raise InvalidProducerIdMappingError(
                f"Unknown transactional id {transactional_id!r} (call init_transactions first)")
        if m.producer_id != producer_id:
            raise InvalidProducerIdMappingError(
                f"Producer {producer_id} is not the producer of transactional id {transactional_id!r} "
                f"(producer {m.producer_id})")
        return m

    def _current(self, transactional_id: str, producer_id: int, producer_epoch: int) -> TransactionMetadata:
        """The state of ``transactional_id`` whose producer is ``producer_id`` at ``producer_epoch``."""
        m = self._known(transactional_id, producer_id)
        if m.producer_epoch != producer_epoch:
            raise ProducerFencedError(
                f"Producer {producer_id} epoch {producer_epoch} of transactional id {transactional_id!r} "
                f"is fenced: the current one is producer {m.producer_id} epoch {m.producer_epoch} (another "
                f"producer with the same transactional.id was initialized, or the transaction timed out)")
        return m

    def add_partitions_to_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                              partitions: Iterable[tuple[str, int]], client_version: int = 0) -> None:
        """Kafka's AddPartitionsToTxn (``client_version`` 0), or the partitions a transactions v2
        client writes to (``client_version`` 2: Produce v12+, TxnOffsetCommit v5+): they join the
        transaction, which starts if none is open (persisted before the producer writes to them)."""
        partitions = set(partitions)
        with self._lock:
            m = self._current(transactional_id, producer_id, producer_epoch)
            if m.state in _PREPARED:
                raise ConcurrentTransactionsError(f"Transactional id {transactional_id!r} is being ended")
            if m.state == TransactionState.ONGOING and partitions <= m.partitions:
                return
            if m.state not in _ONGOING_OR_EMPTY + _COMPLETED:
                raise InvalidTxnStateError(f"Transactional id {transactional_id!r} is in state "
                                           f"{m.state.name}: cannot add partitions")
            start = m.txn_start_timestamp if m.state == TransactionState.ONGOING else self._clock()
            self._write(self._transit(m, TransactionState.ONGOING, partitions=m.partitions | partitions,
                                      txn_start_timestamp=start, client_transaction_version=client_version))

    def partitions_not_in_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                              partitions: Iterable[tuple[str, int]]) -> set[tuple[str, int]]:
        """Kafka's verification of a write of a transactions v0/v1 client (KIP-890 part 1,
        ``handleVerifyPartitionsInTransaction``): the ``partitions`` not in its open transaction
        (Kafka answers TRANSACTION_ABORTABLE for them); raises for an unknown or other producer, a
        stale epoch, or a transaction being ended."""
        with self._lock:
            m = self._current(transactional_id, producer_id, producer_epoch)
            if m.state in _PREPARED:
                raise ConcurrentTransactionsError(f"Transactional id {transactional_id!r} is being ended")
            return set(partitions) - m.partitions

    def _coordinator_epoch(self, transactional_id: str) -> int:
        """The coordinator epoch of the markers: as Kafka, the leader epoch of the transactional id's
        ``__transaction_state`` partition (0 when it has none), so a marker is never older than
        those a Kafka broker wrote before into the same logs (its producer state would refuse it)."""
        if not self._manager.has_topic(TRANSACTION_STATE_TOPIC):
            return 0
        log = self._manager.get_log(TRANSACTION_STATE_TOPIC, partition_for(transactional_id, self._partitions))
        return log.current_leader_epoch()

    def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                client_version: int = 0) -> tuple[int, int]:
        """Kafka's EndTxn: COMMIT or ABORT markers in every partition of the transaction; returns
        the producer id and epoch the producer goes on with (bumped for a transactions v2 client,
        ``client_version`` 2, which may also end a transaction with nothing written, or retry an
        end whose answer was lost). Raises :class:`InvalidTxnStateError` for an end the state does
        not allow (nothing to end, or ended the other way)."""
        with self._lock:
            if client_version >= TV_2:
                return self._end_txn_v2(transactional_id, producer_id, producer_epoch, commit)
            m = self._current(transactional_id, producer_id, producer_epoch)
            done = TransactionState.COMPLETE_COMMIT if commit else TransactionState.COMPLETE_ABORT
            if m.state == done:
                return m.producer_id, m.producer_epoch          # a retry
            if m.state != TransactionState.ONGOING:
                raise self._invalid_end(m, commit)
            m = self._write(self._transit(
                m, TransactionState.PREPARE_COMMIT if commit else TransactionState.PREPARE_ABORT,
                next_producer_id=-1, client_transaction_version=0))
            m = self._complete(m)
            return m.producer_id, m.producer_epoch

    @staticmethod
    def _invalid_end(m: TransactionMetadata, commit: bool) -> InvalidTxnStateError:
        return InvalidTxnStateError(f"Transactional id {m.transactional_id!r} is in state {m.state.name}: "
                                    f"cannot {'commit' if commit else 'abort'}")

    def _end_txn_v2(self, transactional_id: str, producer_id: int, producer_epoch: int,
                    commit: bool) -> tuple[int, int]:
        m = self._txns.get(transactional_id)
        if m is None:
            raise InvalidProducerIdMappingError(f"Unknown transactional id {transactional_id!r}")
        retry_on_overflow = (m.previous_producer_id == producer_id and producer_epoch == _MAX_EPOCH - 1
                             and m.producer_epoch == 0)
        retry_on_bump = m.producer_epoch == producer_epoch + 1
        if m.state in _COMPLETED:
            valid = retry_on_bump or retry_on_overflow or producer_epoch == m.producer_epoch
        else:
            valid = producer_epoch == m.producer_epoch
        retry = retry_on_bump or retry_on_overflow
        if m.producer_id != producer_id and not retry_on_overflow:
            raise InvalidProducerIdMappingError(
                f"Producer {producer_id} is not the producer of transactional id {transactional_id!r}")
        if not valid:
            raise ProducerFencedError(
                f"Producer {producer_id} epoch {producer_epoch} of transactional id {transactional_id!r} "
                f"is fenced: the current one is producer {m.producer_id} epoch {m.producer_epoch}")
        no_partition_added = False
        if m.state == TransactionState.ONGOING:
            pass
        elif m.state == TransactionState.COMPLETE_COMMIT and commit:
            if retry:
                return m.producer_id, m.producer_epoch
            raise self._invalid_end(m, commit)
        elif m.state == TransactionState.COMPLETE_ABORT and not commit:
            if retry:
                return m.producer_id, m.producer_epoch
            no_partition_added = True
        elif m.state == TransactionState.COMPLETE_COMMIT and not retry:
            no_partition_added = True                    # an abort with nothing written
        elif m.state == TransactionState.EMPTY and not commit:
            no_partition_added = True
        else:
            raise self._invalid_end(m, commit)
        m = self._write(self._prepare_end(m, commit, TV_2, no_partition_added))
        m = self._complete(m)
        return m.producer_id, m.producer_epoch

    def _prepare_end(self, m: TransactionMetadata, commit: bool, client_version: int,
                     no_partition_added: bool) -> TransactionMetadata:
        """Kafka's ``prepareAbortOrCommit``: transactions v2 bump the epoch (and hand an exhausted
        one over to a new producer id, taken now), v0/v1 keep it."""
        changes: dict[str, object] = {"client_transaction_version": client_version}
        if client_version >= TV_2:
            changes["next_producer_id"] = (self._ids.generate_producer_id()
                                           if _epoch_exhausted(m.producer_epoch) else -1)
            if m.producer_epoch < _MAX_EPOCH or commit:
                changes["producer_epoch"] = min(m.producer_epoch + 1, _MAX_EPOCH)
            changes["last_producer_epoch"] = m.producer_epoch
        else:
            changes["next_producer_id"] = -1
        if no_partition_added:
            changes["txn_start_timestamp"] = self._clock()
        state = TransactionState.PREPARE_COMMIT if commit else TransactionState.PREPARE_ABORT
        return self._transit(m, state, **changes)

    def _complete(self, m: TransactionMetadata) -> TransactionMetadata:
        """Write the markers of ``m`` (prepared) in every partition of its transaction, then its
        ``CompleteCommit``/``CompleteAbort`` (Kafka's ``prepareComplete``: a transactions v2 end with
        a next producer id moves to it at epoch 0)."""
        commit = m.state == TransactionState.PREPARE_COMMIT
        marker = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
        origin = ORIGIN_COORDINATOR_TV2 if m.client_transaction_version >= TV_2 else ORIGIN_COORDINATOR
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
                       origin=origin, leader_epoch=epoch)
        done = frozenset(m.partitions)
        marked_by = m.producer_id
        rotate = m.client_transaction_version >= TV_2 and m.next_producer_id != -1
        m = self._write(self._transit(
            m, TransactionState.COMPLETE_COMMIT if commit else TransactionState.COMPLETE_ABORT,
            producer_id=m.next_producer_id if rotate else m.producer_id,
            producer_epoch=0 if rotate else m.producer_epoch, next_producer_id=-1, partitions=set()))
        if self._on_complete is not None and done:
            self._on_complete(marked_by, done, commit)
        return m

    def _fence_and_abort(self, m: TransactionMetadata) -> TransactionMetadata:
        """Abort ``m``'s open transaction with a bumped epoch, fencing its producer (Kafka's
        ``prepareFenceProducerEpoch`` then an abort as of the finalized transaction version)."""
        if self.level >= TV_2:
            prepared = self._prepare_end(m, False, TV_2, False)
        else:
            fenced = dataclasses.replace(m, producer_epoch=min(m.producer_epoch + 1, _MAX_EPOCH),
                                         last_producer_epoch=-1)
            prepared = self._prepare_end(fenced, False, 0, False)
        return self._complete(self._write(prepared))

    def abort_timed_out_transactions(self, now: int | None = None) -> list[str]:
        """Abort every transaction open for longer than its timeout (those whose timer entry came
        due); returns their ids."""
        now = self._clock() if now is None else now
        out = []
        with self._lock:
            timeouts = self._timeouts
            while timeouts and timeouts[0][0] < now:
                deadline, tid = heapq.heappop(timeouts)
                if self._timeouts_due.get(tid) != deadline:
                    continue                              # a later transaction of the id replaced it
                del self._timeouts_due[tid]
                m = self._txns.get(tid)
                if m is not None and m.state == TransactionState.ONGOING \
                        and m.txn_start_timestamp + m.txn_timeout_ms == deadline:
                    try:
                        self._fence_and_abort(m)
                    except Exception:
                        self._schedule_timeout(m)     # the next pass tries it again
                        raise
                    out.append(tid)
        return out
