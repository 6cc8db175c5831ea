"""AddPartitionsToTxn (v0-v3, the client versions), AddOffsetsToTxn, TxnOffsetCommit and EndTxn over
``broker.transactions`` (:class:`kafkalog.coordinator.transaction_coordinator.TransactionCoordinator`,
the ``__transaction_state`` topic) and ``broker.offsets`` (transactional offsets in
``__consumer_offsets``, visible once the transaction commits), with Kafka's error codes:
INVALID_PRODUCER_ID_MAPPING for an unknown transactional id or another producer id,
PRODUCER_FENCED for a stale epoch (INVALID_PRODUCER_EPOCH for the versions before KIP-588),
INVALID_TXN_STATE for a request the transaction's state does not allow.

Markers are written synchronously while the request is handled (one node, no marker channel), so a
transaction is never seen half-ended and CONCURRENT_TRANSACTIONS is not needed here."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafkalog.coordinator.group_metadata import CONSUMER_OFFSETS_TOPIC
from kafkalog.coordinator.transaction_coordinator import InvalidTxnStateError, ProducerFencedError
from kafkalog.coordinator.transaction_log import TransactionState
from kafkalog.server import error_codes as ec
from kafkalog.server.offset_commit import offsets_to_commit, store_offsets
from kafkalog.server.protocol import Request

if TYPE_CHECKING:      # the state owner that dispatches to this handler
    from kafkalog.server.broker import Broker

#: KIP-588: PRODUCER_FENCED from AddPartitionsToTxn/AddOffsetsToTxn/EndTxn v2+
FIRST_PRODUCER_FENCED = 2
#: KIP-447: TxnOffsetCommit v3 carries the consumer's generation and member id
FIRST_GROUP_METADATA = 3


def producer_error(broker: Broker, transactional_id: str, producer_id: int, producer_epoch: int,
                   version: int) -> int:
    """Kafka's check of a transactional request's producer: NONE when it is the current one."""
    m = broker.transactions.transaction(transactional_id)
    if m is None or m.producer_id != producer_id:
        return ec.INVALID_PRODUCER_ID_MAPPING
    if m.producer_epoch != producer_epoch:
        return ec.PRODUCER_FENCED if version >= FIRST_PRODUCER_FENCED else ec.INVALID_PRODUCER_EPOCH
    return ec.NONE


def _add(broker: Broker, request: Request, transactional_id: str, producer_id: int,
         producer_epoch: int, partitions: list[tuple[str, int]]) -> int:
    err = producer_error(broker, transactional_id, producer_id, producer_epoch, request.api_version)
    if err:
        return err
    try:
        broker.transactions.add_partitions_to_txn(transactional_id, producer_id, producer_epoch,
                                                  partitions)
    except ProducerFencedError:
        return ec.PRODUCER_FENCED if request.api_version >= FIRST_PRODUCER_FENCED else ec.INVALID_PRODUCER_EPOCH
    except InvalidTxnStateError:
        return ec.INVALID_TXN_STATE
    return ec.NONE


def handle_add_partitions_to_txn(broker: Broker, request: Request) -> Any:
    b = request.body
    wanted = [(t.name, int(p)) for t in b.v3_and_below_topics for p in t.partitions]
    unknown = {(t, p) for t, p in wanted if broker.log(t, p) is None}
    if unknown:       # Kafka: the unknown partitions fail, the others are not attempted
        errors = {tp: ec.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else ec.OPERATION_NOT_ATTEMPTED
                  for tp in wanted}
    else:
        err = _add(broker, request, b.v3_and_below_transactional_id, b.v3_and_below_producer_id,
                   b.v3_and_below_producer_epoch, wanted)
        errors = dict.fromkeys(wanted, err)
    by_topic: dict[str, list[dict[str, int]]] = {}
    for (t, p), e in errors.items():
        by_topic.setdefault(t, []).append({"partition_index": p, "partition_error_code": e})
    return broker.response(request, {"throttle_time": 0, "results_by_topic_v3_and_below": [
        {"name": t, "results_by_partition": rows} for t, rows in by_topic.items()]})


def handle_add_offsets_to_txn(broker: Broker, request: Request) -> Any:
    b = request.body
    if not b.group_id:
        err = ec.INVALID_GROUP_ID
    else:
        err = _add(broker, request, b.transactional_id, b.producer_id, b.producer_epoch,
                   [(CONSUMER_OFFSETS_TOPIC, broker.offsets.partition_for(b.group_id))])
    return broker.response(request, {"throttle_time": 0, "error_code": err})


def _txn_offset_error(broker: Broker, request: Request) -> int:
    b = request.body
    if not b.group_id:
        return ec.INVALID_GROUP_ID
    m = broker.transactions.transaction(b.transactional_id)
    if m is None or m.producer_id != b.producer_id:
        return ec.INVALID_PRODUCER_ID_MAPPING
    if m.producer_epoch != b.producer_epoch:
        return ec.INVALID_PRODUCER_EPOCH
    if m.state != TransactionState.ONGOING or \
            (CONSUMER_OFFSETS_TOPIC, broker.offsets.partition_for(b.group_id)) not in m.partitions:
        return ec.INVALID_TXN_STATE          # AddOffsetsToTxn first
    if request.api_version >= FIRST_GROUP_METADATA and (b.generation_id >= 0 or b.member_id):
        return broker.groups.check_commit(b.group_id, b.generation_id, b.member_id,
                                          b.group_instance_id, has_offsets=b.group_id in broker.offsets.groups(),
                                          transactional=True)
    return ec.NONE


#: KIP-890: TxnOffsetCommit v4+ answers TRANSACTION_ABORTABLE where older versions get INVALID_TXN_STATE
FIRST_TRANSACTION_ABORTABLE = 4


def handle_txn_offset_commit(broker: Broker, request: Request) -> Any:
    b = request.body
    err = _txn_offset_error(broker, request)
    if err == ec.INVALID_TXN_STATE and request.api_version >= FIRST_TRANSACTION_ABORTABLE:
        err = ec.TRANSACTION_ABORTABLE
    topics, offsets = offsets_to_commit(broker, b.topics, err, request.api_version >= 2)
    if offsets:
        store_offsets(broker, b.group_id, topics, lambda: broker.offsets.commit_transactional(
            b.group_id, offsets, b.producer_id, b.producer_epoch, any_offset=True))
    return broker.response(request, {"throttle_time": 0, "topics": topics})


def handle_end_txn(broker: Broker, request: Request) -> Any:
    b = request.body
    err = producer_error(broker, b.transactional_id, b.producer_id, b.producer_epoch, request.api_version)
    m = broker.transactions.transaction(b.transactional_id)
    if not err and m is not None:
        done = TransactionState.COMPLETE_COMMIT if b.committed else TransactionState.COMPLETE_ABORT
        if m.state == TransactionState.EMPTY or (
                m.state in (TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT)
                and m.state != done):
            err = ec.INVALID_TXN_STATE       # Kafka: nothing to end, or ended the other way
    if not err:
        try:
            broker.transactions.end_txn(b.transactional_id, b.producer_id, b.producer_epoch, b.committed)
        except ProducerFencedError:
            err = ec.PRODUCER_FENCED if request.api_version >= FIRST_PRODUCER_FENCED else ec.INVALID_PRODUCER_EPOCH
        except InvalidTxnStateError:
            err = ec.INVALID_TXN_STATE
    return broker.response(request, {"throttle_time": 0, "error_code": err})
