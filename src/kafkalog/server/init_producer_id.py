"""InitProducerId for idempotent producers (no ``transactional.id``): a new producer ID, epoch 0,
from the crash-safe allocator. Transactional producers are refused until the transaction
coordinator lands (COORDINATOR_NOT_AVAILABLE is what a client retries; FindCoordinator is not
advertised, so clients do not start transactions)."""

from __future__ import annotations

from typing import Any

from kafkalog.server import error_codes
from kafkalog.server.broker import Broker
from kafkalog.server.protocol import Request


def handle_init_producer_id(broker: Broker, request: Request) -> Any:
    body = request.body
    if body.transactional_id is not None:
        return broker.response(request, {"throttle_time": 0,
                                         "error_code": error_codes.COORDINATOR_NOT_AVAILABLE,
                                         "producer_id": -1, "producer_epoch": -1})
    pid = broker.producer_ids.generate_producer_id()
    return broker.response(request, {"throttle_time": 0, "error_code": 0, "producer_id": pid,
                                     "producer_epoch": 0})
