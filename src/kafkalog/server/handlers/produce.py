"""Produce: acks 0/1/all (on one node "all" means appended; durability follows the flush policy,
as in Kafka), one v2 batch per partition (Kafka's rule for v3+), idempotent producers
deduplicated by the log's producer state, per-partition errors as Kafka returns them, topics by ID
in v13. Transactional batches are checked with the transaction coordinator before they are
appended, as Kafka 4.4's partition leader checks them (KIP-890): their partitions must be in the
producer's transaction (v3-v11) or join it (v12+, transactions v2). The response is written here
(no kio): it is the hot path."""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import struct
import threading
from collections.abc import Awaitable, Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from kafkalog.errors import AcksZeroFailure, KafkalogError, KafkalogIOError
from kafkalog.log.naming import TopicPartition
from kafkalog.server import error_codes
from kafkalog.server.error_codes import error_code
from kafkalog.server.handlers.handler import Response
from kafkalog.server.handlers.slices import (
    ENTRIES_PER_SLICE,
    PARTITIONS_PER_SLICE,
    SliceCounter,
    run_in_slices,
    run_now,
)
from kafkalog.server.handlers.transactions import verify_or_add
from kafkalog.server.requests import wire
from kafkalog.server.requests.frames import frame
from kafkalog.server.requests.protocol import Request, response_header
from kafkalog.server.security.acl_operations import TOPIC, TRANSACTIONAL_ID, WRITE

if TYPE_CHECKING:      # the state owner that dispatches to this handler
    from kafkalog.log.log import Log
    from kafkalog.log.log_append_info import AppendInfo
    from kafkalog.server.broker import Broker

logger = logging.getLogger("kafkalog.server")

FIRST_FLEXIBLE = 9
FIRST_TOPIC_ID = 13
#: KIP-890: Produce v11 takes TRANSACTION_ABORTABLE; v12 is a transactions v2 client's, whose
#: partitions join its transaction by being written to
FIRST_GENERIC_ERROR = 11
FIRST_ADD_PARTITION = 12
_BATCH_HEADER = 61
#: the batch attributes' transactional bit (low byte of the int16 at offset 21)
_TRANSACTIONAL = 0x10
_PRODUCER = struct.Struct(">qh")
#: a response partition's index, error, base offset, log append time and log start offset (v5+)
_PLAIN_PARTITION = struct.Struct(">ihqqq")
#: after them, no record errors and a null message: compact (empty array, null string, no tags) and
#: classic (v8)
_PLAIN_TAIL_FLEXIBLE = b"\x01\x00\x00"
_PLAIN_TAIL_V8 = struct.pack(">ih", 0, -1)
_BASE_OFFSET_ZERO = bytes(8)
#: errors of a batch Kafka's ReplicaManager answers with LogAppendInfo.UNKNOWN_LOG_APPEND_INFO
_UNREAD_BATCH_ERRORS = frozenset({error_codes.MESSAGE_TOO_LARGE, error_codes.RECORD_LIST_TOO_LARGE,
                                  error_codes.CORRUPT_MESSAGE, error_codes.INVALID_RECORD,
                                  error_codes.UNSUPPORTED_COMPRESSION_TYPE, error_codes.UNKNOWN_SERVER_ERROR})

#: errors Kafka's ReplicaManager does not count as FailedProduceRequests (metrics)
_NOT_FAILED = frozenset({error_codes.NONE, error_codes.UNKNOWN_TOPIC_OR_PARTITION, error_codes.NOT_LEADER_OR_FOLLOWER,
                         error_codes.MESSAGE_TOO_LARGE,
                         error_codes.RECORD_LIST_TOO_LARGE, error_codes.CORRUPT_MESSAGE,
                         error_codes.KAFKA_STORAGE_ERROR})


class PartitionResult:
    __slots__ = ("base_offset", "error", "index", "log_append_time", "log_start_offset", "message",
                 "record_errors")

    def __init__(self, index: int, error: int, base_offset: int = -1, log_append_time: int = -1,
                 log_start_offset: int = -1, message: str | None = None,
                 record_errors: tuple[tuple[int, str], ...] = ()) -> None:
        self.index = index
        self.error = error
        self.base_offset = base_offset
        self.log_append_time = log_append_time
        self.log_start_offset = log_start_offset
        self.message = message
        #: (index of the record in its batch, why it was refused) (v8+)
        self.record_errors = record_errors


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


def _keyless_records(records: bytes) -> list[int]:
    """The indexes in the batch of its records without a key (empty when it cannot be read: the
    append then refuses it with the reason)."""
    from kafkalog.record.records import iter_batches
    try:
        return [i for b in iter_batches(records) for i, r in enumerate(b.records()) if not r.has_key]
    except KafkalogError:
        return []


def _keyless_in_compacted_topic(topic: str, index: int, missing: list[int], log_start_offset: int
                                ) -> PartitionResult:
    """Kafka's ``LogValidator`` answer to records without a key in a compacted topic: INVALID_RECORD
    with one record error per record and a summary of the first three."""
    why = f"Compacted topic cannot accept message without key in topic partition {topic}-{index}"
    errors = tuple((i, why) for i in missing)
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
    return PartitionResult(index, error_codes.INVALID_RECORD, log_start_offset=log_start_offset,
                           message=f"One or more records have been rejected due to {len(errors)} record "
                                   f"errors in total, and only showing the first three errors at most: [{shown}]",
                           record_errors=errors)


#: the partition leader's words for a write its transaction coordinator did not verify
_VERIFICATION_MESSAGES = {
    error_codes.INVALID_TXN_STATE: "Partition was not added to the transaction",
    error_codes.NOT_ENOUGH_REPLICAS: "Unable to verify the partition has been added to the transaction. "
                                     "Underlying error: CONCURRENT_TRANSACTIONS",
}


def _is_transactional(records: bytes | None) -> bool:
    return records is not None and len(records) >= _BATCH_HEADER and bool(records[22] & _TRANSACTIONAL)


def _any_transactional(body: Any) -> bool:
    for td in body.topic_data:
        for pd in td.partition_data:
            if _is_transactional(pd.records):
                return True
    return False


def _verify_transactional(broker: Broker, body: Any, version: int,
                          parts: list[tuple[str, int, bytes]]) -> dict[tuple[str, int], int] | int:
    """Kafka's check of the transactional batches of a Produce before they are appended (KIP-890):
    one producer (INVALID_PRODUCER_ID_MAPPING for the whole request otherwise), its transactional
    id, and each partition verified by (v3-v11) or added to (v12+, transactions v2) its open
    transaction (:func:`kafkalog.server.handlers.transactions.verify_or_add`): the error of each partition,
    or one error for the whole request."""
    producers = {_PRODUCER.unpack_from(records, 43) for _t, _p, records in parts}
    if len(producers) > 1:
        return error_codes.INVALID_PRODUCER_ID_MAPPING
    producer_id, producer_epoch = producers.pop()
    return verify_or_add(broker, body.transactional_id, producer_id, producer_epoch,
                         [(t, p) for t, p, _r in parts], add=version >= FIRST_ADD_PARTITION,
                         generic_error=version >= FIRST_GENERIC_ERROR)


class _Job:
    """One partition's append, checked on the event loop and run by :func:`_run_job` (on the
    loop, or on the appending thread for a Produce of more than one slice or one whose partitions'
    files are not all open)."""

    __slots__ = ("epoch", "index", "log", "records", "topic")

    def __init__(self, topic: str, index: int, log: Log, records: bytes, epoch: int) -> None:
        self.topic = topic
        self.index = index
        self.log = log
        self.records = records
        self.epoch = epoch


def _prepare(broker: Broker, topic: str, index: int, records: bytes | None,
             verified: int = error_codes.NONE) -> PartitionResult | _Job:
    """The partition's answer when its batch is refused before the append, else its append."""
    log = broker.log(topic, index)
    if log is None:
        return PartitionResult(index, broker.missing_partition_error(topic, index))
    problem = check_batch(records)
    if problem is not None:
        # Kafka answers INVALID_RECORD without a message or log start offset here; the reason is logged
        logger.debug("produce to %s-%d refused: %s", topic, index, problem)
        return PartitionResult(index, error_codes.INVALID_RECORD)
    assert records is not None
    if verified:
        # Kafka's verification (KIP-890): no log start offset
        logger.debug("transactional produce to %s-%d refused: %d", topic, index, verified)
        return PartitionResult(index, verified, message=_VERIFICATION_MESSAGES.get(verified))
    if records[:8] != _BASE_OFFSET_ZERO:
        # Kafka's LogValidator: a client's batch starts at offset 0 (the broker assigns offsets)
        logger.debug("produce to %s-%d refused: the batch's base offset is %d, not 0", topic, index,
                     struct.unpack_from(">q", records, 0)[0])
        return PartitionResult(index, error_codes.INVALID_RECORD, log_start_offset=log.log_start_offset)
    if log.compact:
        missing = _keyless_records(records)
        if missing:
            return _keyless_in_compacted_topic(topic, index, missing, log.log_start_offset)
    failure = broker.log_dir_failure
    if failure is not None:
        return PartitionResult(index, error_codes.KAFKA_STORAGE_ERROR, log_start_offset=log.log_start_offset,
                               message=f"the data directory is offline since: {failure}")
    # the leader's epoch stamped into the batch and recorded in leader-epoch-checkpoint, as Kafka's
    # appendAsLeader does
    return _Job(topic, index, log, records, broker.leader_epoch(log))


def _run_job(job: _Job) -> AppendInfo | KafkalogError:
    """The append itself (the writes to the partition's files): its outcome, an error included."""
    try:
        return job.log.append(bytearray(job.records), leader_epoch=job.epoch)
    except KafkalogError as e:
        return e


def _run_jobs(jobs: list[_Job]) -> list[AppendInfo | KafkalogError]:
    return [_run_job(job) for job in jobs]


def _complete(broker: Broker, job: _Job, outcome: AppendInfo | KafkalogError) -> PartitionResult:
    """The partition's answer once its append ran (on the event loop: the fetches waiting for the
    partition are woken here)."""
    topic, index, log = job.topic, job.index, job.log
    if isinstance(outcome, KafkalogIOError):
        broker.log_dir_failed(TopicPartition(topic, index), outcome)
        return PartitionResult(index, error_codes.KAFKA_STORAGE_ERROR, log_start_offset=log.log_start_offset,
                               message=str(outcome))
    if isinstance(outcome, KafkalogError):
        code = error_code(outcome)
        if code == error_codes.UNKNOWN_SERVER_ERROR:
            logger.error("append to %s-%d failed: %s", topic, index, outcome)
        else:
            logger.debug("append to %s-%d refused: %s", topic, index, outcome)
        # as Kafka's ReplicaManager answers: a batch it refuses to read gets no log start offset,
        # a producer-state error the partition's; only a timestamp error says why
        return PartitionResult(index, code,
                               log_start_offset=-1 if code in _UNREAD_BATCH_ERRORS else log.log_start_offset,
                               message=outcome.message if code == error_codes.INVALID_TIMESTAMP else None)
    info = outcome
    if info.duplicate:
        # Kafka answers a retried batch with the original's offsets and its timestamp
        return PartitionResult(index, error_codes.NONE, info.first_offset, info.max_timestamp,
                               info.log_start_offset)
    broker.notify_append(TopicPartition(topic, index))
    if broker.metrics is not None:
        broker.metrics.produced(topic, len(job.records), info.num_records)
    return PartitionResult(index, error_codes.NONE, info.first_offset, info.log_append_time,
                           info.log_start_offset)


def handle_produce(broker: Broker, request: Request, waited: bool = False) -> Response | Awaitable[Response]:
    body = request.body
    version = request.api_version
    by_id = version >= FIRST_TOPIC_ID
    if not waited:
        # a partition of a topic just committed, not made yet: answered once it is made (Kafka
        # answers NOT_LEADER_OR_FOLLOWER: every producer retrying and refreshing its metadata)
        needed = broker.pending_asked((broker.topic_ids.name_of(td.topic_id) if by_id else td.name, pd.index)
                                      for td in body.topic_data for pd in td.partition_data)
        if needed:
            return _when_made(broker, request, needed)
    acks = body.acks
    results: list[tuple[Any, list[PartitionResult]]] = []
    any_transactional = acks in (0, 1, -1) and _any_transactional(body)
    # (an idempotent or plain producer's request looks up no topic or log here: _append_all does)
    transactional = [(name, pd.index, pd.records) for td in body.topic_data
                     for name in [broker.topic_ids.name_of(td.topic_id) if by_id else td.name]
                     for pd in td.partition_data
                     if _is_transactional(pd.records) and name is not None
                     and broker.log(name, pd.index) is not None] if any_transactional else []
    verified: dict[tuple[str, int], int] | int = {}
    auth = broker.authorizer
    if auth is not None and any_transactional and (
            body.transactional_id is None or not broker.authorize(WRITE, TRANSACTIONAL_ID, body.transactional_id)):
        verified = error_codes.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif transactional:
        verified = (error_codes.TRANSACTIONAL_ID_AUTHORIZATION_FAILED if body.transactional_id is None
                    else _verify_transactional(broker, body, version, transactional))
    steps = _append_all(broker, body, by_id, verified, results)
    if sum(len(td.partition_data) for td in body.topic_data) <= PARTITIONS_PER_SLICE:
        for jobs in steps:
            if not all(job.log.active_descriptor_open for _parts, _i, job in jobs):
                # a file to open first (its descriptor evicted, or not opened since the load),
                # which may evict another's and wait for the disk's fsyncs: off the event loop,
                # as a large Produce's appends (a producer writing to 100,000 partitions made the
                # loop open a file and hand another's fsync on for each of its appends)
                return _append_in_slices(broker, request, _first_then(jobs, steps), results)
            _complete_all(broker, jobs, _run_jobs([job for _parts, _i, job in jobs]))
        return _answer(request, results)
    return _append_in_slices(broker, request, steps, results)


def _first_then(first: _Slice, rest: Generator[_Slice, None, None]) -> Generator[_Slice, None, None]:
    """``first``, then ``rest``'s slices (``rest`` closed with this generator)."""
    try:
        yield first
        yield from rest
    finally:
        rest.close()


async def _when_made(broker: Broker, request: Request, needed: dict[str, int]) -> Response:
    """:func:`handle_produce` once the partitions ``needed`` are made (or the request's timeout,
    at most 30 s, passed: those not made then answer NOT_LEADER_OR_FOLLOWER)."""
    await broker.wait_made(needed, min(max(request.body.timeout.total_seconds(), 0.0), 30.0))
    answer = handle_produce(broker, request, waited=True)
    return await answer if inspect.isawaitable(answer) else answer


async def _append_in_slices(broker: Broker, request: Request, steps: Iterator[_Slice],
                            results: list[tuple[Any, list[PartitionResult]]]) -> Response:
    """A Produce to more partitions than one slice: each slice's appends run on the appending
    thread (:func:`_appending_thread`) while the event loop serves other clients, and the
    response is encoded a slice at a time (:mod:`.slices`). An append's writes can wait on the
    file system (a journal commit, a page under write-back: 10-20 ms each, measured with strace at
    100,000 partitions, several in one slice), which on the loop made every other client wait
    with it; the loop keeps the checks before each append and the answers after it."""
    loop = asyncio.get_running_loop()
    try:
        for jobs in steps:
            if jobs:
                outcomes = await loop.run_in_executor(_appending_thread(), _run_jobs,
                                                      [job for _parts, _i, job in jobs])
                _complete_all(broker, jobs, outcomes)
            else:
                await asyncio.sleep(0)
    finally:
        if isinstance(steps, Generator):
            steps.close()
    if request.body.acks == 0:
        return _answer(request, results)
    out: list[bytes] = []
    await run_in_slices(_encode_response_steps(request.correlation_id, request.api_version, results, out))
    return out[0]


#: the place of an answer its append has not given yet
_UNANSWERED = PartitionResult(-1, error_codes.UNKNOWN_SERVER_ERROR)

#: one slice's appends: (the partition's topic answers, its place in them, its append)
_Slice = list[tuple[list[PartitionResult], int, _Job]]


def _complete_all(broker: Broker, jobs: _Slice, outcomes: list[AppendInfo | KafkalogError]) -> None:
    for (parts, i, job), outcome in zip(jobs, outcomes):
        parts[i] = _complete(broker, job, outcome)
        if broker.metrics is not None:
            broker.metrics.produce_partition(job.topic, parts[i].error not in _NOT_FAILED)


class _Appending:
    #: the thread of a sliced Produce's appends, with the process that made it (a child forked
    #: since has none: it makes its own)
    pool: ThreadPoolExecutor | None = None
    pid = 0
    lock = threading.Lock()


def _appending_thread() -> ThreadPoolExecutor:
    """One thread for every broker of the process: the appends of one Produce stay in order, and
    those of two large ones take turns a slice at a time."""
    with _Appending.lock:
        if _Appending.pool is None or _Appending.pid != os.getpid():
            _Appending.pool = ThreadPoolExecutor(1, thread_name_prefix="kafkalog-append")
            _Appending.pid = os.getpid()
        return _Appending.pool


def _append_all(broker: Broker, body: Any, by_id: bool, verified: dict[tuple[str, int], int] | int,
                results: list[tuple[Any, list[PartitionResult]]]) -> Generator[_Slice, None, None]:
    """Each partition's answer into ``results``: the refused ones at once, the appends of each
    slice yielded (their answers' places hold :data:`_UNANSWERED` until :func:`_complete_all` fills
    them)."""
    acks = body.acks
    auth = broker.authorizer
    count = SliceCounter()
    jobs: _Slice = []
    for td in body.topic_data:
        key: Any = td.topic_id if by_id else td.name
        name = broker.topic_ids.name_of(td.topic_id) if by_id else td.name
        parts: list[PartitionResult] = []
        results.append((key, parts))
        for pd in td.partition_data:
            answer: PartitionResult | _Job
            if isinstance(verified, int):        # one error for the whole request
                answer = PartitionResult(pd.index, verified)
            elif acks not in (0, 1, -1):
                answer = PartitionResult(pd.index, error_codes.INVALID_REQUIRED_ACKS)
            elif name is None:
                answer = PartitionResult(pd.index, error_codes.UNKNOWN_TOPIC_ID)
            elif auth is not None and not broker.authorize(WRITE, TOPIC, name):
                answer = PartitionResult(pd.index, error_codes.TOPIC_AUTHORIZATION_FAILED)
            else:
                answer = _prepare(broker, name, pd.index, pd.records,
                                  verified.get((name, pd.index), error_codes.NONE) if verified else 0)
            if isinstance(answer, _Job):
                jobs.append((parts, len(parts), answer))
                parts.append(_UNANSWERED)           # (replaced by _complete_all)
            else:
                parts.append(answer)
                if broker.metrics is not None and name is not None:
                    broker.metrics.produce_partition(name, answer.error not in _NOT_FAILED)
            if count.tick():
                yield jobs
                jobs = []
    if jobs:
        yield jobs


def _answer(request: Request, results: list[tuple[Any, list[PartitionResult]]]) -> Response:
    """The response (acks 0: none, or the connection closed when a partition failed)."""
    if request.body.acks == 0:
        failed = [(key, p.index, p.error) for key, parts in results for p in parts if p.error]
        if failed:
            # Kafka's rule: a producer that wants no response learns of an error by a closed
            # connection (it then refreshes its metadata)
            raise AcksZeroFailure(f"produce with acks=0 failed for {failed[:5]}: closing the connection")
        return None
    return encode_produce_response(request.correlation_id, request.api_version, results)


def encode_produce_response(correlation_id: int, version: int,
                            results: list[tuple[Any, list[PartitionResult]]]) -> bytes:
    out: list[bytes] = []
    run_now(_encode_response_steps(correlation_id, version, results, out))
    return out[0]


def _encode_response_steps(correlation_id: int, version: int,
                           results: list[tuple[Any, list[PartitionResult]]], into: list[bytes]) -> Iterator[None]:
    """The response's frame into ``into``, yielding after each slice of
    :data:`ENTRIES_PER_SLICE` partitions (100,000 partitions: 30 ms in one step), each slice's
    pieces joined as it ends."""
    count = SliceCounter(ENTRIES_PER_SLICE)
    done: list[bytes] = []
    flex = version >= FIRST_FLEXIBLE
    i32, i64, i16 = wire.INT32.pack, wire.INT64.pack, wire.INT16.pack
    # a partition without record errors or message in one pack (v5+: log start offset; v8+: the
    # empty record errors and the null message; flexible: the empty tagged fields)
    plain, plain_tail = (_PLAIN_PARTITION, _PLAIN_TAIL_FLEXIBLE if flex else _PLAIN_TAIL_V8 if version >= 8
                         else b"") if version >= 5 else (None, b"")
    out = [response_header(correlation_id, flex), wire.array_len(len(results), flex)]
    for key, parts in results:
        out.append(wire.topic_key(key, version >= FIRST_TOPIC_ID, flex))
        out.append(wire.array_len(len(parts), flex))
        for p in parts:
            if plain is not None and p.message is None and not p.record_errors:     # the usual answer
                out.append(plain.pack(p.index, p.error, p.base_offset, p.log_append_time, p.log_start_offset)
                           + plain_tail)
            else:
                out.append(i32(p.index) + i16(p.error) + i64(p.base_offset) + i64(p.log_append_time))
                if version >= 5:
                    out.append(i64(p.log_start_offset))
                if version >= 8:
                    out.append(wire.array_len(len(p.record_errors), flex))
                    for i, why in p.record_errors:
                        out.append(i32(i) + wire.nullable_string(why, flex) + (wire.EMPTY_TAGS if flex else b""))
                    out.append(wire.nullable_string(p.message, flex))
                if flex:
                    out.append(wire.EMPTY_TAGS)
            if count.tick():
                done.append(b"".join(out))
                out = []
                yield
        if flex:
            out.append(wire.EMPTY_TAGS)
    out.append(i32(0))                      # throttle_time_ms
    if flex:
        out.append(wire.EMPTY_TAGS)
    done.append(b"".join(out))
    into.append(frame(b"".join(done)))
