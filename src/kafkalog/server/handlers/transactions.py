"""AddPartitionsToTxn (v0-v3, the client versions), AddOffsetsToTxn, TxnOffsetCommit and EndTxn over
``broker.transactions`` (:class:`kafkalog.coordinator.transaction_coordinator.TransactionCoordinator`,
the ``__transaction_state`` topic) and ``broker.offsets`` (transactional offsets in
``__consumer_offsets``, visible once the transaction commits), with Kafka's error codes:
INVALID_PRODUCER_ID_MAPPING for an unknown transactional id or another producer id,
PRODUCER_FENCED for a stale epoch (INVALID_PRODUCER_EPOCH for the versions before KIP-588),
INVALID_TXN_STATE for a request the transaction's state does not allow.

Transactions v2 (KIP-890, ``transaction.version`` 2): EndTxn v5 ends with a bumped epoch and answers
the producer id and epoch to go on with; TxnOffsetCommit v5 adds the group's ``__consumer_offsets``
partition to the transaction itself (no AddOffsetsToTxn), v0-v4 are verified against it as
Kafka 4.4 verifies them (KIP-890 part 1). :func:`verify_or_add` is that step for Produce too.

Markers are written synchronously while the request is handled (one node, no marker channel), so a
transaction is never seen half-ended and CONCURRENT_TRANSACTIONS is not needed here."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from kafkalog.coordinator.group_metadata import CONSUMER_OFFSETS_TOPIC
from kafkalog.coordinator.transaction_coordinator import TV_2, InvalidTxnStateError
from kafkalog.errors import ConcurrentTransactionsError, InvalidProducerIdMappingError, ProducerFencedError
from kafkalog.server import error_codes as ec
from kafkalog.server.coordinator.group import GroupError
from kafkalog.server.handlers.offset_commit import offsets_to_commit, store_offsets
from kafkalog.server.requests.protocol import Request
from kafkalog.server.security.acl_operations import GROUP, READ, TOPIC, TRANSACTIONAL_ID, WRITE

if TYPE_CHECKING:      # the state owner that dispatches to this handler
    from kafkalog.server.broker import Broker

#: KIP-588: PRODUCER_FENCED from AddPartitionsToTxn/AddOffsetsToTxn/EndTxn v2+
FIRST_PRODUCER_FENCED = 2
#: KIP-447: TxnOffsetCommit v3 carries the consumer's generation and member id
FIRST_GROUP_METADATA = 3
#: KIP-890: EndTxn v5 and TxnOffsetCommit v5 are the requests of a transactions v2 client
FIRST_EPOCH_BUMP_END_TXN = 5
FIRST_ADD_PARTITION_TXN_OFFSET_COMMIT = 5
#: TxnOffsetCommit v4 / Produce v11: a partition missing from the transaction is
#: TRANSACTION_ABORTABLE (older versions get INVALID_TXN_STATE)
FIRST_GENERIC_ERROR_TXN_OFFSET_COMMIT = 4

Partitions = Iterable[tuple[str, int]]


def _fenced(version: int) -> int:
    return ec.PRODUCER_FENCED if version >= FIRST_PRODUCER_FENCED else ec.INVALID_PRODUCER_EPOCH


def verify_or_add(broker: Broker, transactional_id: str | None, producer_id: int, producer_epoch: int,
                  partitions: Partitions, add: bool, generic_error: bool) -> dict[tuple[str, int], int]:
    """Kafka's verification of a transactional write before it is appended (ReplicaManager's
    ``maybeSendPartitionsToTransactionCoordinator`` through the AddPartitionsToTxnManager): a
    transactions v2 client's partitions are added to its transaction (``add``), a v0/v1 client's
    must be in it already. The error of each partition (none: NONE), mapped as the partition
    leader maps the coordinator's answer: PRODUCER_FENCED is INVALID_PRODUCER_EPOCH, a partition
    not in the transaction TRANSACTION_ABORTABLE (``generic_error``) or INVALID_TXN_STATE, a
    transaction being ended NOT_ENOUGH_REPLICAS (retried by a v2 add, which never sees one here)."""
    partitions = list(partitions)
    coordinator = broker.transactions
    if transactional_id is None or transactional_id == "":
        return dict.fromkeys(partitions, ec.INVALID_REQUEST)
    try:
        if add:
            coordinator.add_partitions_to_txn(transactional_id, producer_id, producer_epoch, partitions,
                                              client_version=TV_2)
            return dict.fromkeys(partitions, ec.NONE)
        missing = coordinator.partitions_not_in_txn(transactional_id, producer_id, producer_epoch,
                                                    partitions)
    except InvalidProducerIdMappingError:
        return dict.fromkeys(partitions, ec.INVALID_PRODUCER_ID_MAPPING)
    except ProducerFencedError:
        return dict.fromkeys(partitions, ec.INVALID_PRODUCER_EPOCH)
    except ConcurrentTransactionsError:
        return dict.fromkeys(partitions, ec.NOT_ENOUGH_REPLICAS)
    except InvalidTxnStateError:
        return dict.fromkeys(partitions, ec.INVALID_TXN_STATE)
    missing_error = ec.TRANSACTION_ABORTABLE if generic_error else ec.INVALID_TXN_STATE
    return {tp: missing_error if tp in missing else ec.NONE for tp in partitions}


def _add(broker: Broker, request: Request, transactional_id: str, producer_id: int,
         producer_epoch: int, partitions: list[tuple[str, int]]) -> int:
    """AddPartitionsToTxn v0-v3 / AddOffsetsToTxn: a transactions v0/v1 client adds partitions."""
    if not transactional_id:
        return ec.INVALID_REQUEST
    try:
        broker.transactions.add_partitions_to_txn(transactional_id, producer_id, producer_epoch,
                                                  partitions)
    except InvalidProducerIdMappingError:
        return ec.INVALID_PRODUCER_ID_MAPPING
    except ProducerFencedError:
        return _fenced(request.api_version)
    except ConcurrentTransactionsError:
        return ec.CONCURRENT_TRANSACTIONS
    except InvalidTxnStateError:
        return ec.INVALID_TXN_STATE
    return ec.NONE


def handle_add_partitions_to_txn(broker: Broker, request: Request) -> Any:
    b = request.body
    wanted = [(t.name, int(p)) for t in b.v3_and_below_topics for p in t.partitions]
    auth = broker.authorizer
    denied = {(t, p) for t, p in wanted if not broker.authorize(WRITE, TOPIC, t)} if auth is not None else set()
    unknown = {(t, p) for t, p in wanted if (t, p) not in denied and broker.log(t, p) is None}
    if auth is not None and not broker.authorize(WRITE, TRANSACTIONAL_ID, b.v3_and_below_transactional_id):
        errors = dict.fromkeys(wanted, ec.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    elif unknown or denied:       # Kafka: the unknown partitions fail, the others are not attempted
        errors = {tp: ec.TOPIC_AUTHORIZATION_FAILED if tp in denied else
                  ec.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else ec.OPERATION_NOT_ATTEMPTED
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


def _denied(broker: Broker, transactional_id: str, group_id: str) -> int | None:
    """AddOffsetsToTxn's and TxnOffsetCommit's ACLs: WRITE on the transactional id, READ on the group."""
    if broker.authorizer is None:
        return None
    if not broker.authorize(WRITE, TRANSACTIONAL_ID, transactional_id):
        return ec.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    if not broker.authorize(READ, GROUP, group_id):
        return ec.GROUP_AUTHORIZATION_FAILED
    return None


def handle_add_offsets_to_txn(broker: Broker, request: Request) -> Any:
    b = request.body
    denied = _denied(broker, b.transactional_id, b.group_id)
    if denied is not None:
        err = denied
    elif not b.group_id:
        err = ec.INVALID_GROUP_ID
    else:
        err = _add(broker, request, b.transactional_id, b.producer_id, b.producer_epoch,
                   [(CONSUMER_OFFSETS_TOPIC, broker.offsets.partition_for(b.group_id))])
    return broker.response(request, {"throttle_time": 0, "error_code": err})


#: how Kafka's group coordinator answers a TxnOffsetCommit whose verification failed
#: (CoordinatorOperationExceptionHelper: a transaction being ended is COORDINATOR_NOT_AVAILABLE)
_TXN_OFFSET_COMMIT_ERRORS = {ec.NOT_ENOUGH_REPLICAS: ec.COORDINATOR_NOT_AVAILABLE}


def _txn_offset_error(broker: Broker, request: Request) -> int:
    b = request.body
    version = request.api_version
    if not b.group_id:
        return ec.INVALID_GROUP_ID
    tp = (CONSUMER_OFFSETS_TOPIC, broker.offsets.partition_for(b.group_id))
    err = verify_or_add(broker, b.transactional_id, b.producer_id, b.producer_epoch, [tp],
                        add=version >= FIRST_ADD_PARTITION_TXN_OFFSET_COMMIT,
                        generic_error=version >= FIRST_GENERIC_ERROR_TXN_OFFSET_COMMIT)[tp]
    if err:
        return _TXN_OFFSET_COMMIT_ERRORS.get(err, err)
    if version >= FIRST_GROUP_METADATA and (b.generation_id >= 0 or b.member_id
                                            or b.group_instance_id is not None):
        if b.group_id in broker.consumer_groups.groups:    # KIP-848: validated by member epoch
            return _consumer_group_error(broker, b, version)
        if b.group_id in broker.streams_groups.groups:     # KIP-1071: validated by member epoch
            try:
                broker.streams_groups.validate_commit(b.group_id, b.member_id, b.generation_id, transactional=True)
            except GroupError as e:
                return e.code
            return ec.NONE
        return broker.groups.check_commit(b.group_id, b.generation_id, b.member_id,
                                          b.group_instance_id, has_offsets=broker.offsets.has_group(b.group_id),
                                          transactional=True)
    return ec.NONE


def _consumer_group_error(broker: Broker, b: Any, version: int) -> int:
    """A consumer group's check of a transactional commit (Kafka's ``ConsumerGroup
    .validateOffsetCommit`` with ``isTransactional``): the member and its epoch."""
    try:
        broker.consumer_groups.validate_commit(b.group_id, b.member_id, b.group_instance_id,
                                               b.generation_id, version, transactional=True)
    except GroupError as e:
        return e.code
    return ec.NONE


#: KIP-890: TxnOffsetCommit v4+ answers TRANSACTION_ABORTABLE where older versions get INVALID_TXN_STATE
FIRST_TRANSACTION_ABORTABLE = 4


def handle_txn_offset_commit(broker: Broker, request: Request) -> Any:
    b = request.body
    denied = _denied(broker, b.transactional_id, b.group_id)
    err = denied if denied is not None else _txn_offset_error(broker, request)
    if err == ec.INVALID_TXN_STATE and request.api_version >= FIRST_TRANSACTION_ABORTABLE:
        err = ec.TRANSACTION_ABORTABLE
    topics, offsets = offsets_to_commit(broker, b.topics, err, request.api_version >= 2)
    if offsets:
        store_offsets(broker, b.group_id, topics, lambda: broker.offsets.commit_transactional(
            b.group_id, offsets, b.producer_id, b.producer_epoch, any_offset=True))
    return broker.response(request, {"throttle_time": 0, "topics": topics})


def handle_end_txn(broker: Broker, request: Request) -> Any:
    b = request.body
    version = request.api_version
    bump = version >= FIRST_EPOCH_BUMP_END_TXN
    err, pid, epoch = ec.NONE, -1, -1
    if broker.authorizer is not None and not broker.authorize(WRITE, TRANSACTIONAL_ID, b.transactional_id):
        err = ec.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not b.transactional_id:
        err = ec.INVALID_REQUEST
    else:
        try:
            pid, epoch = broker.transactions.end_txn(b.transactional_id, b.producer_id, b.producer_epoch,
                                                     b.committed, client_version=TV_2 if bump else 0)
        except InvalidProducerIdMappingError:
            err = ec.INVALID_PRODUCER_ID_MAPPING
        except ProducerFencedError:
            err = _fenced(version)
        except ConcurrentTransactionsError:
            err = ec.CONCURRENT_TRANSACTIONS
        except InvalidTxnStateError:
            err = ec.INVALID_TXN_STATE
    values: dict[str, Any] = {"throttle_time": 0, "error_code": err}
    if bump:
        values.update({"producer_id": pid if not err else -1, "producer_epoch": epoch if not err else -1})
    return broker.response(request, values)
