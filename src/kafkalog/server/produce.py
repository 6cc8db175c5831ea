"""Produce: acks 0/1/all (on one node "all" means appended; durability follows the flush policy,
as in Kafka), one v2 batch per partition (Kafka's rule for v3+), idempotent producers
deduplicated by the log's producer state, per-partition errors as Kafka returns them, topics by ID
in v13. The response is written here (no kio): it is the hot path."""

from __future__ import annotations

import logging
import struct
from typing import Any

from kafkalog.coordinator.transaction_log import TransactionState
from kafkalog.errors import KafkalogError, KafkalogIOError
from kafkalog.log.naming import TopicPartition
from kafkalog.server import error_codes, wire
from kafkalog.server.broker import Broker, Response
from kafkalog.server.error_codes import error_code
from kafkalog.server.frames import frame
from kafkalog.server.protocol import Request, response_header

logger = logging.getLogger("kafkalog.server")

FIRST_FLEXIBLE = 9
FIRST_TOPIC_ID = 13
_BATCH_HEADER = 61
#: the batch attributes' transactional bit (low byte of the int16 at offset 21)
_TRANSACTIONAL = 0x10
_PRODUCER = struct.Struct(">qh")


class AcksZeroFailure(KafkalogError):
    """A Produce with acks=0 had an error: the connection is closed instead of answering."""


class PartitionResult:
    __slots__ = ("base_offset", "error", "index", "log_append_time", "log_start_offset", "message")

    def __init__(self, index: int, error: int, base_offset: int = -1, log_append_time: int = -1,
                 log_start_offset: int = -1, message: str | None = None) -> None:
        self.index = index
        self.error = error
        self.base_offset = base_offset
        self.log_append_time = log_append_time
        self.log_start_offset = log_start_offset
        self.message = message


def check_batch(records: bytes | None) -> str | None:
    """Kafka's rule for Produce v3+: exactly one whole v2 batch. None when it holds, else why not."""
    if not records:
        return "no record batch"
    n = len(records)
    if n < _BATCH_HEADER:
        return f"{n} bytes are less than a record batch header"
    length = struct.unpack_from(">i", records, 8)[0]
    if length + 12 != n:
        return f"the request holds {n} bytes but its batch declares {length + 12}: " \
               f"Produce v3+ requires exactly one record batch"
    if records[16] != 2:
        return f"Produce v3+ requires record batch magic 2, not {records[16]}"
    return None


def _transaction_error(broker: Broker, topic: str, index: int, records: bytes) -> int:
    """Kafka's check of a transactional batch (KIP-890 part 1): its producer's current epoch, and
    the partition added to the open transaction (AddPartitionsToTxn) before data is written."""
    producer_id, producer_epoch = _PRODUCER.unpack_from(records, 43)
    m = broker.transactions.transaction_of_producer(producer_id)
    if m is not None and producer_epoch < m.producer_epoch:
        return error_codes.INVALID_PRODUCER_EPOCH
    if m is None or m.producer_epoch != producer_epoch or m.state != TransactionState.ONGOING \
            or (topic, index) not in m.partitions:
        return error_codes.INVALID_TXN_STATE
    return error_codes.NONE


def _append(broker: Broker, topic: str, index: int, records: bytes | None) -> PartitionResult:
    log = broker.log(topic, index)
    if log is None:
        return PartitionResult(index, error_codes.UNKNOWN_TOPIC_OR_PARTITION)
    problem = check_batch(records)
    if problem is not None:
        return PartitionResult(index, error_codes.INVALID_RECORD, log_start_offset=log.log_start_offset,
                               message=problem)
    assert records is not None
    if records[22] & _TRANSACTIONAL:
        err = _transaction_error(broker, topic, index, records)
        if err:
            return PartitionResult(index, err, log_start_offset=log.log_start_offset,
                                   message=f"{topic}-{index} is not in the producer's open transaction"
                                   if err == error_codes.INVALID_TXN_STATE else None)
    failure = broker.log_dir_failure
    if failure is not None:
        return PartitionResult(index, error_codes.KAFKA_STORAGE_ERROR, log_start_offset=log.log_start_offset,
                               message=f"the data directory is offline since: {failure}")
    try:
        info = log.append(bytearray(records))
    except KafkalogIOError as e:
        broker.log_dir_failed(TopicPartition(topic, index), e)
        return PartitionResult(index, error_codes.KAFKA_STORAGE_ERROR, log_start_offset=log.log_start_offset,
                               message=str(e))
    except KafkalogError as e:
        code = error_code(e)
        if code == error_codes.UNKNOWN_SERVER_ERROR:
            logger.error("append to %s-%d failed: %s", topic, index, e)
        return PartitionResult(index, code, log_start_offset=log.log_start_offset, message=e.message)
    if not info.duplicate:
        broker.notify_append(TopicPartition(topic, index))
    return PartitionResult(index, error_codes.NONE, info.first_offset, info.log_append_time,
                           info.log_start_offset)


def handle_produce(broker: Broker, request: Request) -> Response:
    body = request.body
    version = request.api_version
    by_id = version >= FIRST_TOPIC_ID
    acks = body.acks
    results: list[tuple[Any, list[PartitionResult]]] = []
    for td in body.topic_data:
        key: Any = td.topic_id if by_id else td.name
        name = broker.topic_ids.name_of(td.topic_id) if by_id else td.name
        parts: list[PartitionResult] = []
        for pd in td.partition_data:
            if acks not in (0, 1, -1):
                parts.append(PartitionResult(pd.index, error_codes.INVALID_REQUIRED_ACKS))
            elif name is None:
                parts.append(PartitionResult(pd.index, error_codes.UNKNOWN_TOPIC_ID))
            else:
                parts.append(_append(broker, name, pd.index, pd.records))
        results.append((key, parts))
    if acks == 0:
        failed = [(key, p.index, p.error) for key, parts in results for p in parts if p.error]
        if failed:
            # Kafka's rule: a producer that wants no response learns of an error by a closed
            # connection (it then refreshes its metadata)
            raise AcksZeroFailure(f"produce with acks=0 failed for {failed[:5]}: closing the connection")
        return None
    return encode_produce_response(request.correlation_id, version, results)


def encode_produce_response(correlation_id: int, version: int,
                            results: list[tuple[Any, list[PartitionResult]]]) -> bytes:
    flex = version >= FIRST_FLEXIBLE
    i32, i64, i16 = wire.INT32.pack, wire.INT64.pack, wire.INT16.pack
    out = [response_header(correlation_id, flex), wire.array_len(len(results), flex)]
    for key, parts in results:
        out.append(wire.topic_key(key, version >= FIRST_TOPIC_ID, flex))
        out.append(wire.array_len(len(parts), flex))
        for p in parts:
            out.append(i32(p.index) + i16(p.error) + i64(p.base_offset) + i64(p.log_append_time))
            if version >= 5:
                out.append(i64(p.log_start_offset))
            if version >= 8:
                out.append(wire.array_len(0, flex))
                out.append(wire.nullable_string(p.message, flex))
            if flex:
                out.append(wire.EMPTY_TAGS)
        if flex:
            out.append(wire.EMPTY_TAGS)
    out.append(i32(0))                      # throttle_time_ms
    if flex:
        out.append(wire.EMPTY_TAGS)
    return frame(b"".join(out))
