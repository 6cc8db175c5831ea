"""Fetch: long-poll (a fetch waits until ``min_bytes`` are available or ``max_wait`` passes, woken
by appends, never by polling), ``max_bytes`` and per-partition limits with KIP-74's first-batch
rule, ``isolation_level`` with the last stable offset and the aborted transactions from the
``.txnindex``, OffsetOutOfRange with the log start and end, topics by ID from v13, incremental
fetch sessions from v7 (:mod:`kafkalog.server.fetch_session`).

The response is written here: the record bytes of each partition follow a header written
separately. Slices of at least :data:`SENDFILE_MIN_BYTES` are sent from the segment file with
``sendfile`` (through a duplicated descriptor, so a segment deleted meanwhile stays readable);
smaller ones are copied. An empty record set is zero-length, never null."""

from __future__ import annotations

import asyncio
import functools
import os
import struct
import time
from collections.abc import Awaitable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from kafkalog.errors import KafkalogError, OffsetOutOfRangeError
from kafkalog.log.fetch_data_info import FileSlice
from kafkalog.log.naming import TopicPartition
from kafkalog.record.constants import IsolationLevel
from kafkalog.server import error_codes
from kafkalog.server.error_codes import error_code
from kafkalog.server.fetch_session import FetchContext
from kafkalog.server.handlers.handler import Response
from kafkalog.server.handlers.slices import (
    ENTRIES_PER_SLICE,
    PARTITIONS_PER_SLICE,
    SliceCounter,
    release_in_slices,
    run_in_slices,
    run_now,
)
from kafkalog.server.handlers.throttling import fetch_window_bytes
from kafkalog.server.requests import wire
from kafkalog.server.requests.protocol import Request, response_header
from kafkalog.server.security.acl_operations import READ, TOPIC

if TYPE_CHECKING:      # the state owner that dispatches to this handler
    from kafkalog.server.broker import Broker

FIRST_FLEXIBLE = 12
FIRST_TOPIC_ID = 13
SENDFILE_MIN_BYTES = 64 * 1024
FIRST_SESSION = 7
#: partition index, error code, high watermark, last stable offset
_PARTITION_HEAD = struct.Struct(">ihqq")
#: ... and the log start offset (v5+)
_PARTITION_HEAD_V5 = struct.Struct(">ihqqq")
#: throttle_time_ms, error_code, session_id (v7+)
_THROTTLE_ERROR_SESSION = struct.Struct(">ihi")
_NO_THROTTLE = bytes(4)
_ABORTED = struct.Struct(">qq")
_NO_PREFERRED_REPLICA = struct.pack(">i", -1)
#: a read_committed partition's empty aborted-transaction list, shared (a list per partition was
#: 100,000 more objects for the collector to walk in each Fetch of 100,000 partitions)
_NONE_ABORTED: tuple[tuple[int, int], ...] = ()


class PartitionData:
    __slots__ = (
        "aborted",
        "error",
        "high_watermark",
        "index",
        "last_stable_offset",
        "log_start_offset",
        "records",
    )

    def __init__(self, index: int, error: int = 0, high_watermark: int = -1,
                 last_stable_offset: int = -1, log_start_offset: int = -1,
                 aborted: Sequence[tuple[int, int]] | None = None,
                 records: bytes | FileSlice = b"") -> None:
        self.index = index
        self.error = error
        self.high_watermark = high_watermark
        self.last_stable_offset = last_stable_offset
        self.log_start_offset = log_start_offset
        self.aborted = aborted
        self.records = records

    @property
    def size(self) -> int:
        return len(self.records)


class _Wanted:
    __slots__ = ("index", "key", "max_bytes", "offset", "topic")

    def __init__(self, key: Any, topic: str | None, index: int, offset: int, max_bytes: int) -> None:
        self.key = key
        self.topic = topic
        self.index = index
        self.offset = offset
        self.max_bytes = max_bytes


def _read(broker: Broker, w: _Wanted, budget: int, first: bool, committed: bool,
          unknown_code: int) -> PartitionData:
    topic = w.topic
    if topic is not None and broker.authorizer is not None and not broker.authorize(READ, TOPIC, topic):
        return PartitionData(w.index, error_codes.TOPIC_AUTHORIZATION_FAILED, aborted=_NONE_ABORTED)
    log = broker.log(topic, w.index) if topic is not None else None
    if log is None:
        # as Kafka: UNKNOWN_TOPIC_ID only for a topic id it does not know (a known topic's missing
        # partition is UNKNOWN_TOPIC_OR_PARTITION, one being made NOT_LEADER_OR_FOLLOWER), offsets -1
        # and an empty aborted list
        code = unknown_code if topic is None else broker.missing_partition_error(topic, w.index)
        return PartitionData(w.index, code, aborted=_NONE_ABORTED)
    log_start, hw, lso = log.fetch_offset_snapshot()
    limit = min(w.max_bytes, budget)
    if limit <= 0 and not first:
        return PartitionData(w.index, 0, hw, lso, log_start, [] if committed else None)
    try:
        if committed:
            info = log.read(w.offset, max(limit, 0), min_one_message=first,
                            isolation=IsolationLevel.READ_COMMITTED)
        else:
            info = log.read(w.offset, max(limit, 0), min_one_message=first)
    except OffsetOutOfRangeError:
        # Kafka answers an out-of-range fetch without the partition's offsets (-1)
        return PartitionData(w.index, error_codes.OFFSET_OUT_OF_RANGE, aborted=_NONE_ABORTED if committed else None)
    except KafkalogError as e:
        return PartitionData(w.index, error_code(e), hw, lso, log_start, _NONE_ABORTED if committed else None)
    aborted: Sequence[tuple[int, int]] | None = None
    if committed:
        txns = info.aborted_transactions
        aborted = [(a.producer_id, a.first_offset) for a in txns] if txns else _NONE_ABORTED
    sl = info.records
    size = sl.size
    records: bytes | FileSlice
    if size >= SENDFILE_MIN_BYTES:
        records = sl.duplicate()
    else:
        records = sl.read() if size else b""
    return PartitionData(w.index, 0, hw, lso, log_start, aborted, records)


class _Collected:
    """What a read of the wanted partitions found: the partitions read, their record bytes,
    whether one has an error, each one's high watermark (the marks a long poll's watch compares
    with), and those answered from the file (a duplicated descriptor each)."""

    __slots__ = ("failed", "files", "marks", "parts", "size")

    def __init__(self) -> None:
        self.parts: list[PartitionData] = []
        self.marks: list[int] = []
        self.files: list[PartitionData] = []
        self.size = 0
        self.failed = False

    def release(self) -> None:
        """Close the duplicated descriptors (the read is not answered)."""
        _release(self.files)


def _collect_steps(broker: Broker, wanted: list[_Wanted], max_bytes: int, committed: bool,
                   unknown_code: int, into: _Collected) -> Iterator[None]:
    """Read the wanted partitions in order into ``into``, yielding after each slice
    (:mod:`.slices`)."""
    out = into.parts
    marks = into.marks
    budget = max_bytes
    first = True
    count = SliceCounter()
    try:
        for w in wanted:
            pd = _read(broker, w, budget, first, committed, unknown_code)
            size = len(pd.records)
            if size:
                budget -= size
                into.size += size
                first = False
                if isinstance(pd.records, FileSlice):
                    into.files.append(pd)
            if pd.error:
                into.failed = True
            out.append(pd)
            marks.append(pd.high_watermark)
            if count.tick():
                yield
    except BaseException:
        into.release()          # no duplicated descriptor outlives a failed (or abandoned) read
        raise


def _collect(broker: Broker, wanted: list[_Wanted], max_bytes: int, committed: bool,
             unknown_code: int) -> _Collected:
    """The wanted partitions read at once."""
    got = _Collected()
    run_now(_collect_steps(broker, wanted, max_bytes, committed, unknown_code, got))
    return got


async def _collect_in_slices(broker: Broker, wanted: list[_Wanted], max_bytes: int, committed: bool,
                             unknown_code: int) -> _Collected:
    """As :func:`_collect`, the event loop serving other clients between two slices."""
    got = _Collected()
    await run_in_slices(_collect_steps(broker, wanted, max_bytes, committed, unknown_code, got))
    return got


def _release(parts: list[PartitionData]) -> None:
    for p in parts:
        if isinstance(p.records, FileSlice):
            os.close(p.records.fd)
            p.records = b""


def handle_fetch(broker: Broker, request: Request) -> Response | Awaitable[Response]:
    """The answer at once when the first read satisfies ``min_bytes`` (or has an error, or there
    is nothing to wait for): no coroutine, task or future; else the long poll (:func:`_long_poll`).
    A Fetch of more partitions than one slice is done in slices from its partition list to its
    encoded answer (:func:`_fetch_in_slices`)."""
    start = time.monotonic()
    if sum(len(t.partitions) for t in request.body.topics) > PARTITIONS_PER_SLICE:
        return _fetch_in_slices(broker, request, start)
    wanted: list[_Wanted] = []
    run_now(_wanted_steps(broker, request, wanted))
    prepared = _prepare(broker, request, wanted)
    if not isinstance(prepared, _Prepared):
        return prepared
    got = _collect(broker, prepared.wanted, prepared.max_bytes, prepared.committed, prepared.unknown_code)
    return _answer_or_wait(broker, request, prepared, start, got)


def _wanted_steps(broker: Broker, request: Request, into: list[_Wanted]) -> Iterator[None]:
    """The request's partitions in its order into ``into``, yielding after each slice of
    :data:`ENTRIES_PER_SLICE`."""
    by_id = request.api_version >= FIRST_TOPIC_ID
    count = SliceCounter(ENTRIES_PER_SLICE)
    for t in request.body.topics:
        key = t.topic_id if by_id else t.topic
        name = broker.topic_ids.name_of(t.topic_id) if by_id else t.topic
        for p in t.partitions:
            into.append(_Wanted(key, name, p.partition, p.fetch_offset, p.partition_max_bytes))
            if count.tick():
                yield


class _Prepared:
    """A Fetch's session context and read limits, once its partition list is known."""

    __slots__ = ("committed", "ctx", "max_bytes", "unknown_code", "wanted")

    def __init__(self, ctx: FetchContext, wanted: list[_Wanted], max_bytes: int, committed: bool,
                 unknown_code: int) -> None:
        self.ctx = ctx
        self.wanted = wanted
        self.max_bytes = max_bytes
        self.committed = committed
        self.unknown_code = unknown_code


def _prepare(broker: Broker, request: Request, wanted: list[_Wanted]) -> _Prepared | Response:
    """The session context (v7+) and the read limits of a Fetch naming ``wanted``, or the error
    response of a session that cannot be used."""
    body = request.body
    version = request.api_version
    by_id = version >= FIRST_TOPIC_ID
    unknown_code = error_codes.UNKNOWN_TOPIC_ID if by_id else error_codes.UNKNOWN_TOPIC_OR_PARTITION
    if version >= FIRST_SESSION:
        forgotten = [(f.topic_id if by_id else f.topic, p)
                     for f in body.forgotten_topics_data for p in f.partitions]
        ctx = broker.fetch_sessions.new_context(body.session_id, body.session_epoch, by_id,
                                                list(wanted), forgotten)
        if ctx.error:
            return encode_fetch_response(request.correlation_id, version, ctx.error, [])
        wanted = [w for w in ctx.wanted if isinstance(w, _Wanted)]
    else:
        ctx = FetchContext(list(wanted))
    # isolation_level from v4 and max_bytes from v3: every served version (4+) has both
    committed = body.isolation_level == IsolationLevel.READ_COMMITTED
    # Kafka's broker-side cap: fetch.max.bytes
    max_bytes = min(body.max_bytes, broker.config.fetch_max_bytes)
    if broker.client_quotas.active:     # Kafka's cap: at most what the consumer's quota allows a window
        max_bytes = min(max_bytes, fetch_window_bytes(broker, request))
    return _Prepared(ctx, wanted, max_bytes, committed, unknown_code)


def _answer_or_wait(broker: Broker, request: Request, prep: _Prepared, start: float,
                    got: _Collected) -> Response | Awaitable[Response]:
    """After the first read: the answer, or the long poll when fewer than ``min_bytes`` were there
    and ``max_wait`` has not passed."""
    body = request.body
    # a throttled consumer's min_bytes is capped by its quota's window too (Kafka's)
    min_bytes = min(body.min_bytes, prep.max_bytes) if broker.client_quotas.active else body.min_bytes
    if got.size < min_bytes and not got.failed:
        deadline = start + max(body.max_wait.total_seconds(), 0.0)
        if deadline > time.monotonic() and any(w.topic is not None for w in prep.wanted):
            got.release()
            return _long_poll(broker, request, prep, deadline, got.marks)
    if len(got.parts) > PARTITIONS_PER_SLICE:
        return _answer_in_slices(broker, request, prep.ctx, got.parts)
    return _answer(broker, request, prep.ctx, got.parts)


async def _fetch_in_slices(broker: Broker, request: Request, start: float) -> Response:
    """A Fetch of more partitions than one slice (a consumer assigned thousands): its partition
    list built, the partitions read and the answer encoded in slices, the event loop serving other
    clients between two (:mod:`.slices`); otherwise as :func:`handle_fetch`."""
    wanted: list[_Wanted] = []
    await run_in_slices(_wanted_steps(broker, request, wanted))
    prepared = _prepare(broker, request, wanted)
    if not isinstance(prepared, _Prepared):
        return prepared
    got = await _collect_in_slices(broker, prepared.wanted, prepared.max_bytes, prepared.committed,
                                   prepared.unknown_code)
    result = _answer_or_wait(broker, request, prepared, start, got)
    if isinstance(result, Awaitable):
        result = await result
    await release_in_slices(prepared.wanted)
    await release_in_slices(wanted)
    return result


async def _long_poll(broker: Broker, request: Request, prep: _Prepared, deadline: float,
                     marks: list[int]) -> Response:
    """Wait for appends to the wanted partitions until ``min_bytes`` are there, a read fails or
    ``deadline`` passes (``max_wait``), then answer with the last read. ``marks``: each wanted
    partition's high watermark as the last read found it (a long poll follows a read without
    errors, so every wanted partition has a log)."""
    min_bytes = request.body.min_bytes
    wanted = prep.wanted
    watched: list[TopicPartition] = []
    loop = asyncio.get_running_loop()
    while True:
        if deadline - time.monotonic() > 0:
            fut: asyncio.Future[None] = loop.create_future()
            done = [0]
            try:
                await _in_slices_if_many(_watch_steps(broker, wanted, marks, watched, fut, done), len(wanted))
                await asyncio.wait_for(fut, max(deadline - time.monotonic(), 0.0))
            except TimeoutError:
                pass
            finally:
                await _unwatch(broker, watched[:done[0]], fut)
        got = await _collect_in_slices(broker, wanted, prep.max_bytes, prep.committed, prep.unknown_code)
        if got.size >= min_bytes or got.failed or deadline - time.monotonic() <= 0:
            return await _answer_in_slices(broker, request, prep.ctx, got.parts)
        marks = got.marks
        got.release()


def _watch_steps(broker: Broker, wanted: list[_Wanted], marks: list[int], watched: list[TopicPartition],
                 fut: asyncio.Future[None], done: list[int]) -> Iterator[None]:
    """Make ``fut`` a waiter of each wanted partition (their ``TopicPartition`` made into
    ``watched`` the first time; ``done[0]``: how many are watched), a slice of
    :data:`ENTRIES_PER_SLICE` at a time, and set it at once when a partition's high watermark has
    moved from its mark: an append made between the read and the watch, which no wake reports
    (the read and the watch are steps of the event loop apart, many when they are sliced)."""
    for start in range(0, len(wanted), ENTRIES_PER_SLICE):
        end = min(start + ENTRIES_PER_SLICE, len(wanted))
        if len(watched) < end:
            watched.extend(TopicPartition(w.topic, w.index) for w in wanted[start:end])  # type: ignore[arg-type]
        broker.add_waiter(watched[start:end], fut)
        done[0] = end
        if not fut.done():
            for i in range(start, end):
                w = wanted[i]
                log = broker.log(w.topic, w.index)  # type: ignore[arg-type]
                if log is not None and log.log_end_offset != marks[i]:
                    fut.set_result(None)
                    break
        yield


async def _unwatch(broker: Broker, watched: list[TopicPartition], fut: asyncio.Future[None]) -> None:
    """Remove ``fut`` from the waiters of ``watched``, a slice at a time; at once for what is left
    when the coroutine is cancelled meanwhile (its connection closed): no waiter outlives its fetch."""
    start = 0
    try:
        while start < len(watched):
            broker.remove_waiter(watched[start:start + ENTRIES_PER_SLICE], fut)
            start += ENTRIES_PER_SLICE
            if start < len(watched):
                await asyncio.sleep(0)
    except BaseException:
        broker.remove_waiter(watched[start:], fut)
        raise


async def _in_slices_if_many(steps: Iterator[None], n: int) -> None:
    """``steps`` at once for at most one slice of partitions, else in slices."""
    if n > PARTITIONS_PER_SLICE:
        await run_in_slices(steps)
    else:
        run_now(steps)


def _answer_steps(broker: Broker, request: Request, ctx: FetchContext, parts: list[PartitionData],
                  into: list[bytes | FileSlice]) -> Iterator[None]:
    """The response of the partitions the session context picks from ``parts`` (the others'
    duplicated descriptors closed), as frame parts into ``into``, yielding after each slice of
    :data:`ENTRIES_PER_SLICE` partitions. Abandoned, it closes every descriptor of ``parts``."""
    try:
        answered: list[tuple[Any, PartitionData]] = []
        session_id = yield from ctx.respond_steps(parts, answered, ENTRIES_PER_SLICE)
        if len(answered) != len(parts):
            kept = {id(pd) for _w, pd in answered}
            _release([p for p in parts if id(p) not in kept])
        yield
        metrics = broker.metrics
        grouped: list[tuple[Any, list[PartitionData]]] = []
        last_key: Any = _NO_KEY
        count = SliceCounter(ENTRIES_PER_SLICE)
        for w, pd in answered:              # consecutive partitions of one topic share its entry
            if w.key == last_key:
                grouped[-1][1].append(pd)
            else:
                last_key = w.key
                grouped.append((last_key, [pd]))
            if metrics is not None and w.topic is not None:
                metrics.fetched(w.topic, len(pd.records), pd.error != 0)
            if count.tick():
                yield
        del answered
        yield from _encode_steps(request.correlation_id, request.api_version, 0, grouped, session_id, into)
    except BaseException:
        _release(parts)
        into.clear()
        raise


def _answer(broker: Broker, request: Request, ctx: FetchContext, parts: list[PartitionData]) -> Response:
    """:func:`_answer_steps` at once."""
    out: list[bytes | FileSlice] = []
    run_now(_answer_steps(broker, request, ctx, parts, out))
    return out


async def _answer_in_slices(broker: Broker, request: Request, ctx: FetchContext,
                            parts: list[PartitionData]) -> Response:
    """:func:`_answer_steps`, the event loop serving other clients between two slices (at once for
    at most one slice of partitions)."""
    out: list[bytes | FileSlice] = []
    await _in_slices_if_many(_answer_steps(broker, request, ctx, parts, out), len(parts))
    await release_in_slices(parts)
    return out


_NO_KEY = object()


@functools.cache
def _partition_head(version: int) -> struct.Struct:
    """A partition's fields before its records when it has no aborted-transaction list (as in
    every read_uncommitted answer): partition index, error code, high watermark, last stable
    offset, log start offset (v5+), the null aborted-transactions array, the preferred read
    replica (v11+, -1) and, before the flexible versions, the records' int32 size."""
    fmt = ">ihqq" + ("q" if version >= 5 else "")
    if version >= FIRST_FLEXIBLE:
        return struct.Struct(fmt + "Bi")         # null compact array; the size is a varint
    return struct.Struct(fmt + "i" + ("i" if version >= 11 else "") + "i")


@functools.lru_cache(maxsize=4096)
def _topic_entry(key: Any, by_id: bool, flex: bool) -> bytes:
    """A response topic's name or ID, encoded once per topic and form."""
    return wire.topic_key(key, by_id, flex)


def encode_fetch_response(correlation_id: int, version: int, top_error: int,
                          topics: list[tuple[Any, list[PartitionData]]],
                          session_id: int = 0) -> list[bytes | FileSlice]:
    """The response as frame parts: bytes, with each partition's records (bytes or a
    ``FileSlice``) between them; the first part starts with the frame size."""
    parts: list[bytes | FileSlice] = []
    run_now(_encode_steps(correlation_id, version, top_error, topics, session_id, parts))
    return parts


def _encode_steps(correlation_id: int, version: int, top_error: int,
                  topics: list[tuple[Any, list[PartitionData]]], session_id: int,
                  parts: list[bytes | FileSlice]) -> Iterator[None]:
    """:func:`encode_fetch_response` into ``parts``, yielding after each slice of
    :data:`ENTRIES_PER_SLICE` partitions."""
    flex = version >= FIRST_FLEXIBLE
    by_id = version >= FIRST_TOPIC_ID
    v5 = version >= 5
    v11 = version >= 11
    head = _partition_head(version)
    count = SliceCounter(ENTRIES_PER_SLICE)
    total = 0
    #: each slice's pieces joined as it ends (a join of every piece at the end held the loop 38 ms
    #: at 100,000 partitions); the chunks are parts of their own, never joined again (the 51 MB
    #: of a Fetch of every partition, joined into one, held the loop 25-30 ms and its memory twice)
    done: list[bytes] = []
    cur = [response_header(correlation_id, flex),
           _THROTTLE_ERROR_SESSION.pack(0, top_error, session_id) if version >= 7 else _NO_THROTTLE,
           wire.array_len(len(topics), flex)]
    for key, pds in topics:
        cur.append(_topic_entry(key, by_id, flex))
        cur.append(wire.array_len(len(pds), flex))
        for p in pds:
            records = p.records
            size = len(records)
            aborted = p.aborted
            if aborted is None:
                # one pack: the fixed fields, the null array, -1 (preferred replica), the size
                if flex:
                    cur.append(head.pack(p.index, p.error, p.high_watermark, p.last_stable_offset,
                                         p.log_start_offset, 0, -1))
                    cur.append(wire.uvarint(size + 1))
                elif v11:
                    cur.append(head.pack(p.index, p.error, p.high_watermark, p.last_stable_offset,
                                         p.log_start_offset, -1, -1, size))
                elif v5:
                    cur.append(head.pack(p.index, p.error, p.high_watermark, p.last_stable_offset,
                                         p.log_start_offset, -1, size))
                else:
                    cur.append(head.pack(p.index, p.error, p.high_watermark, p.last_stable_offset,
                                         -1, size))
            else:
                if v5:
                    cur.append(_PARTITION_HEAD_V5.pack(p.index, p.error, p.high_watermark,
                                                       p.last_stable_offset, p.log_start_offset))
                else:
                    cur.append(_PARTITION_HEAD.pack(p.index, p.error, p.high_watermark,
                                                    p.last_stable_offset))
                cur.append(wire.array_len(len(aborted), flex))
                for pid, first in aborted:
                    cur.append(_ABORTED.pack(pid, first) + (wire.EMPTY_TAGS if flex else b""))
                if v11:
                    cur.append(_NO_PREFERRED_REPLICA)
                cur.append(wire.bytes_len(size, flex))
            if size:
                if isinstance(records, FileSlice):
                    done.append(b"".join(cur))
                    total += sum(map(len, done))
                    parts += done
                    parts.append(records)
                    total += size
                    cur = []
                    done = []
                else:
                    cur.append(records)
            if flex:
                cur.append(wire.EMPTY_TAGS)
            if count.tick():
                if cur:
                    done.append(b"".join(cur))
                    cur = []
                yield
        if flex:
            cur.append(wire.EMPTY_TAGS)
    if flex:
        cur.append(wire.EMPTY_TAGS)
    done.append(b"".join(cur))
    total += sum(map(len, done))
    parts += done
    first_part = parts[0]
    assert isinstance(first_part, bytes)       # a response starts with its header
    parts[0] = wire.INT32.pack(total) + first_part
