"""What ``kafka-transactions.sh`` asks (``Admin.listTransactions``, ``describeTransactions``,
``describeProducers``, ``abortTransaction``): ListTransactions (v0-v2) and DescribeTransactions (v0)
over the transaction coordinator's state (``broker.transactions``), DescribeProducers (v0) over each
partition's producer state, and WriteTxnMarkers (v1-v2; v2's transaction version changes nothing
here), the request ``kafka-transactions.sh abort`` sends a partition's leader to end a hanging
transaction with an ABORT marker; answered as Kafka 4.4's coordinator and ``ReplicaManager``
answer them (tests/server/test_differential.py, tests/ecosystem/test_tools.py)."""

from __future__ import annotations

import datetime
import re
import time
from typing import TYPE_CHECKING, Any

from kafkalog.coordinator.transaction_log import TransactionMetadata, TransactionState
from kafkalog.errors import ProducerStateError
from kafkalog.log.naming import TopicPartition
from kafkalog.log.producer_state import ORIGIN_COORDINATOR
from kafkalog.record.builder import build_end_txn_marker
from kafkalog.record.constants import ControlRecordType
from kafkalog.server import error_codes as ec
from kafkalog.server.requests.protocol import Request
from kafkalog.server.security.acl_operations import CLUSTER, CLUSTER_ACTION, DESCRIBE, READ, TOPIC, TRANSACTIONAL_ID
from kafkalog.server.security.authorizer import CLUSTER_NAME

if TYPE_CHECKING:      # the state owner that dispatches to this handler
    from kafkalog.server.broker import Broker

#: Kafka's ``TransactionState.stateName()``
STATE_NAMES: dict[TransactionState, str] = {
    TransactionState.EMPTY: "Empty", TransactionState.ONGOING: "Ongoing",
    TransactionState.PREPARE_COMMIT: "PrepareCommit", TransactionState.PREPARE_ABORT: "PrepareAbort",
    TransactionState.COMPLETE_COMMIT: "CompleteCommit", TransactionState.COMPLETE_ABORT: "CompleteAbort",
    TransactionState.DEAD: "Dead", TransactionState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_NAME = {v: k for k, v in STATE_NAMES.items()}
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def _time(ms: int) -> datetime.datetime:
    """A timestamp field that is not nullable: -1 (none) is written as -1, as Kafka writes it."""
    return _EPOCH + datetime.timedelta(milliseconds=ms)


def _transactions(broker: Broker) -> list[TransactionMetadata]:
    tc = broker.transactions
    with tc._lock:
        return list(tc._txns.values())


def handle_list_transactions(broker: Broker, request: Request) -> Any:
    body = request.body
    unknown = [s for s in body.state_filters if s not in _BY_NAME]
    states = {_BY_NAME[s] for s in body.state_filters if s in _BY_NAME}
    producer_ids = set(body.producer_id_filters)
    duration = body.duration_filter if request.api_version >= 1 else -1            # v1+
    pattern = body.transactional_id_pattern if request.api_version >= 2 else None  # v2+
    regex = None
    if pattern:
        try:
            regex = re.compile(pattern)
        except re.error as e:
            return broker.response(request, {"throttle_time": 0, "error_code": ec.INVALID_REGULAR_EXPRESSION,
                                             "unknown_state_filters": [], "transaction_states": [],
                                             "error_message": str(e)})
    now = int(time.time() * 1000)
    out = []
    auth = broker.authorizer
    for m in _transactions(broker):
        if m.state == TransactionState.DEAD:
            continue
        if producer_ids and m.producer_id not in producer_ids:
            continue
        if body.state_filters and m.state not in states:
            continue
        if duration >= 0 and now - m.txn_start_timestamp <= duration:
            continue
        if regex is not None and not regex.fullmatch(m.transactional_id):
            continue
        if auth is not None and not broker.authorize(DESCRIBE, TRANSACTIONAL_ID, m.transactional_id):
            continue            # Kafka lists the transactional ids one may describe
        out.append({"transactional_id": m.transactional_id, "producer_id": m.producer_id,
                    "transaction_state": STATE_NAMES[m.state]})
    return broker.response(request, {"throttle_time": 0, "error_code": ec.NONE,
                                     "unknown_state_filters": unknown, "transaction_states": out})


def handle_describe_transactions(broker: Broker, request: Request) -> Any:
    out = []
    for tid in request.body.transactional_ids:
        m = broker.transactions.transaction(tid)
        if broker.authorizer is not None and not broker.authorize(DESCRIBE, TRANSACTIONAL_ID, tid):
            out.append({"error_code": ec.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "transactional_id": tid,
                        "transaction_state": "", "transaction_timeout": 0, "transaction_start_time": _time(-1),
                        "producer_id": -1, "producer_epoch": -1, "topics": []})
            continue
        if m is None or m.state == TransactionState.DEAD:
            out.append({"error_code": ec.TRANSACTIONAL_ID_NOT_FOUND, "transactional_id": tid,
                        "transaction_state": "", "transaction_timeout": 0, "transaction_start_time": _time(-1),
                        "producer_id": -1, "producer_epoch": -1, "topics": []})
            continue
        topics: dict[str, list[int]] = {}
        for topic, p in sorted(m.partitions):
            if broker.authorizer is None or broker.authorize(DESCRIBE, TOPIC, topic):   # Kafka: describable only
                topics.setdefault(topic, []).append(p)
        out.append({"error_code": ec.NONE, "transactional_id": tid, "transaction_state": STATE_NAMES[m.state],
                    "transaction_timeout": m.txn_timeout_ms, "transaction_start_time": _time(m.txn_start_timestamp),
                    "producer_id": m.producer_id, "producer_epoch": m.producer_epoch,
                    "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()]})
    return broker.response(request, {"throttle_time": 0, "transaction_states": out})


def handle_describe_producers(broker: Broker, request: Request) -> Any:
    topics = []
    for t in request.body.topics:
        parts = []
        denied = broker.authorizer is not None and not broker.authorize(READ, TOPIC, t.name)
        for p in t.partition_indexes:
            if denied:
                parts.append({"partition_index": p, "error_code": ec.TOPIC_AUTHORIZATION_FAILED,
                              "error_message": ec.message(ec.TOPIC_AUTHORIZATION_FAILED), "active_producers": []})
                continue
            log = broker.log(t.name, p)
            psm = log.producer_state_manager if log is not None else None
            if log is None or psm is None:          # Kafka's message only for a topic it does not know
                message = None if broker.manager.has_topic(t.name) else ec.message(ec.UNKNOWN_TOPIC_OR_PARTITION)
                parts.append({"partition_index": p, "error_code": ec.UNKNOWN_TOPIC_OR_PARTITION,
                              "error_message": message, "active_producers": []})
                continue
            producers = [{"producer_id": pid, "producer_epoch": e.producer_epoch, "last_sequence": e.last_seq,
                          "last_timestamp": e.last_timestamp, "coordinator_epoch": e.coordinator_epoch,
                          "current_txn_start_offset": -1 if e.current_txn_first_offset is None
                          else e.current_txn_first_offset}
                         for pid, e in sorted(psm.producers.items())]
            parts.append({"partition_index": p, "error_code": ec.NONE, "error_message": None,
                          "active_producers": producers})
        topics.append({"name": t.name, "partitions": parts})
    return broker.response(request, {"throttle_time": 0, "topics": topics})


def handle_write_txn_markers(broker: Broker, request: Request) -> Any:
    """Each marker's COMMIT/ABORT control batch appended to its partitions (the partitions' producer
    state checks its epoch, as Kafka's leader does); an unknown partition answers
    UNKNOWN_TOPIC_OR_PARTITION."""
    markers = []
    if broker.authorizer is not None and not broker.authorize(CLUSTER_ACTION, CLUSTER, CLUSTER_NAME):
        return broker.response(request, {"markers": [
            {"producer_id": mk.producer_id, "topics": [
                {"name": t.name, "partitions": [{"partition_index": p, "error_code": ec.CLUSTER_AUTHORIZATION_FAILED}
                                                for p in t.partition_indexes]} for t in mk.topics]}
            for mk in request.body.markers]})
    for mk in request.body.markers:
        kind = ControlRecordType.COMMIT if mk.transaction_result else ControlRecordType.ABORT
        topics = []
        done: set[tuple[str, int]] = set()
        for t in mk.topics:
            parts = []
            for p in t.partition_indexes:
                log = broker.log(t.name, p)
                error = ec.NONE
                if log is None:
                    error = ec.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    try:
                        log.append(build_end_txn_marker(kind, producer_id=mk.producer_id,
                                                        producer_epoch=mk.producer_epoch,
                                                        timestamp=int(time.time() * 1000),
                                                        coordinator_epoch=mk.coordinator_epoch),
                                   origin=ORIGIN_COORDINATOR, leader_epoch=broker.leader_epoch(log))
                        done.add((t.name, p))
                    except ProducerStateError:
                        error = ec.INVALID_PRODUCER_EPOCH
                    broker.notify_append(TopicPartition(t.name, p))
                parts.append({"partition_index": p, "error_code": error})
            topics.append({"name": t.name, "partitions": parts})
        if done:
            broker.offsets.complete_transaction(mk.producer_id, frozenset(done), bool(mk.transaction_result))
        markers.append({"producer_id": mk.producer_id, "topics": topics})
    return broker.response(request, {"markers": markers})
