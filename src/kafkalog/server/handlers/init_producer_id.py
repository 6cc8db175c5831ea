"""InitProducerId: a new producer ID with epoch 0 from the crash-safe allocator for an idempotent
producer; for a ``transactional.id``, the transaction coordinator's producer ID and bumped epoch
(fencing the previous producer with that id and aborting its open transaction)."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from kafkalog.coordinator.transaction_coordinator import (
    InvalidTransactionTimeoutError,
    ProducerFencedError,
)
from kafkalog.server import error_codes
from kafkalog.server.requests.protocol import Request
from kafkalog.server.security.acl_operations import CLUSTER, IDEMPOTENT_WRITE, TOPIC, TRANSACTIONAL_ID, WRITE
from kafkalog.server.security.authorizer import CLUSTER_NAME, current_session

if TYPE_CHECKING:      # the state owner that dispatches to this handler
    from kafkalog.server.broker import Broker

#: KIP-360: InitProducerId v3 carries the producer id and epoch of a producer re-initializing itself
FIRST_EXPECTED_PRODUCER = 3
#: KIP-588: PRODUCER_FENCED for InitProducerId v4+, INVALID_PRODUCER_EPOCH before
FIRST_PRODUCER_FENCED = 4


def handle_init_producer_id(broker: Broker, request: Request) -> Any:
    body = request.body
    if broker.authorizer is not None:
        # Kafka: WRITE on the transactional id; an idempotent producer IDEMPOTENT_WRITE on the cluster or
        # WRITE on some topic
        if body.transactional_id is not None:
            denied = not broker.authorize(WRITE, TRANSACTIONAL_ID, body.transactional_id) and \
                error_codes.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        else:
            denied = not (broker.authorize(IDEMPOTENT_WRITE, CLUSTER, CLUSTER_NAME)
                          or broker.authorizer.authorize_by_resource_type(current_session.get(), WRITE, TOPIC)) \
                and error_codes.CLUSTER_AUTHORIZATION_FAILED
        if denied:
            return broker.response(request, {"throttle_time": 0, "error_code": denied, "producer_id": -1,
                                             "producer_epoch": -1})
    if body.transactional_id is None:
        pid = broker.producer_ids.generate_producer_id()
        return broker.response(request, {"throttle_time": 0, "error_code": 0, "producer_id": pid,
                                         "producer_epoch": 0})
    expected: tuple[int, int] | None = None
    if request.api_version >= FIRST_EXPECTED_PRODUCER:
        given = (int(body.producer_id), int(body.producer_epoch))
        if (given[0] == -1) != (given[1] == -1):     # Kafka: one of the two without the other
            return broker.response(request, {"throttle_time": 0, "error_code": error_codes.INVALID_REQUEST,
                                             "producer_id": -1, "producer_epoch": -1})
        expected = None if given[0] == -1 else given
    timeout_ms = body.transaction_timeout // timedelta(milliseconds=1)
    err, pid, epoch = error_codes.NONE, -1, -1
    try:
        pid, epoch = broker.transactions.init_producer_id(body.transactional_id, timeout_ms, expected)
    except InvalidTransactionTimeoutError:
        err = error_codes.INVALID_TRANSACTION_TIMEOUT
    except ProducerFencedError:
        err = (error_codes.PRODUCER_FENCED if request.api_version >= FIRST_PRODUCER_FENCED
               else error_codes.INVALID_PRODUCER_EPOCH)
    return broker.response(request, {"throttle_time": 0, "error_code": err, "producer_id": pid,
                                     "producer_epoch": epoch})
