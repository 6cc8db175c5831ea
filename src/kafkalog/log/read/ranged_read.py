"""Reading ``.log`` byte ranges of a remote segment: located through the ``.index``, coalesced
into large requests and prefetched.

A segment in object storage is read with ranged GETs, never whole: :func:`byte_range` turns the
``.index`` entries (``(last offset of a batch, position of that batch)``, as Kafka's
``LogSegment.append`` writes them) into the byte range holding the offsets ``[start, end)``, and
:class:`ChunkedBatches` walks a range in requests of up to ``chunk_bytes`` (whole batches handed
out as one buffer per request; a batch cut by a request boundary is completed by the next
request), with the next ``prefetch`` requests in flight on background threads while the caller
decodes the current one. A pushdown read of a few records thus fetches about one index interval
(``index.interval.bytes``, 4 KiB by default) of ``.log``; a full scan streams the segment in large
requests. Object stores (and S3-compatible servers especially) charge per request, so a scan
that will read the whole range asks for it in few large requests from the start (``whole``).
"""

from __future__ import annotations

import bisect
import struct
from collections import deque
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from kafkalog.errors import CorruptRecordError, KafkalogIOError
from kafkalog.record.constants import LOG_OVERHEAD
from kafkalog.record.header_walk import FindingKind, walk

#: Bytes of one ranged request of a sequential scan, once it has ramped up.
DEFAULT_CHUNK_BYTES = 32 << 20
#: Bytes of the first request: a read of a few records stops after it.
FIRST_CHUNK_BYTES = 64 << 10
#: Requests of a sequential scan fetched or in flight beyond the chunk being decoded.
DEFAULT_PREFETCH = 2


#: reads ``length`` bytes at ``offset`` of one file (fewer at its end)
ReadRange = Callable[[int, int], bytes]


def byte_range(entries: Sequence[tuple[int, int]], size: int, start: int, end: int
               ) -> tuple[int, int]:
    """``(lo, hi)``: the bytes of a segment of ``size`` bytes that hold the batches with offsets in
    ``[start, end)``, from its index ``entries`` (``(offset, position)`` sorted; an entry's offset
    is the last offset of the batch starting at its position). ``lo`` is the position of the
    largest entry with an offset <= ``start`` (that batch ends at or before ``start``, so the one
    holding ``start`` starts there or later), else 0; ``hi`` is the position of the entry after
    the first one with an offset >= ``end - 1`` (that entry's batch holds or follows ``end - 1``),
    else ``size``."""
    offsets = [o for o, _p in entries]
    i = bisect.bisect_right(offsets, start) - 1         # last entry with offset <= start
    lo = entries[i][1] if i >= 0 else 0
    j = bisect.bisect_left(offsets, end - 1)            # first entry with offset >= end - 1
    hi = entries[j + 1][1] if j + 1 < len(entries) else size
    return lo, max(lo, min(hi, size))


class ChunkedBatches:
    """Whole batches of ``[lo, hi)`` of one file, read in ranged requests, up to ``prefetch``
    further requests in flight on background threads while the caller decodes the current chunk.

    Requests start at ``first_chunk`` bytes and double up to ``chunk_bytes``, and prefetching
    starts with the second chunk, so a read of a few records stops after one small request. A
    caller that reads the whole range (a scan up to an end offset) passes ``whole=True``: every
    request is ``chunk_bytes`` and the first ones are all sent at once.

    Iterating yields ``(position, buffer)``: ``buffer`` holds whole batches starting at file
    position ``position``. ``name`` is used in errors. The file ending before ``hi`` (an object
    truncated or replaced since it was listed) raises :class:`KafkalogIOError` at the position
    where it ended; a range ending inside a batch raises :class:`CorruptRecordError`, unless
    ``partial_tail`` (the last segment of a log being appended: its partial batch ends it).

    Memory is bounded: besides the chunk being decoded and the start of a batch it cut, at most
    ``prefetch`` chunks are fetched or in flight. :attr:`requests`, :attr:`bytes_fetched` and
    :attr:`max_in_flight` (the most chunks fetched or in flight and not handed out yet) count
    what the last iteration did."""

    def __init__(self, read: ReadRange, lo: int, hi: int, name: str, *,
                 chunk_bytes: int = DEFAULT_CHUNK_BYTES, first_chunk: int = FIRST_CHUNK_BYTES,
                 prefetch: int = DEFAULT_PREFETCH, whole: bool = False,
                 partial_tail: bool = False) -> None:
        self.read = read
        self.lo, self.hi = lo, hi
        self.name = name
        self.chunk_bytes = max(LOG_OVERHEAD, chunk_bytes)
        self.first_chunk = self.chunk_bytes if whole else max(LOG_OVERHEAD,
                                                              min(first_chunk, self.chunk_bytes))
        self.prefetch = max(0, prefetch)
        self.whole = whole
        self.partial_tail = partial_tail
        self.requests = 0
        self.bytes_fetched = 0
        self.max_in_flight = 0

    def _plan(self) -> Iterator[tuple[int, int]]:
        """``(position, length)`` of the requests covering ``[lo, hi)``, in order."""
        pos, size = self.lo, self.first_chunk
        while pos < self.hi:
            n = min(size, self.hi - pos)
            yield pos, n
            pos += n
            size = min(size * 2, self.chunk_bytes)

    def _fetch(self, pos: int, length: int) -> bytes:
        data = self.read(pos, length)
        if len(data) < length:
            raise KafkalogIOError(f"the file ends here, before the end of the range "
                                  f"[{self.lo}, {self.hi}) being read (truncated or replaced "
                                  "since it was listed)", file=self.name,
                                  position=pos + len(data))
        return data

    def _chunks(self) -> Generator[bytes, None, None]:
        """The bytes of ``[lo, hi)`` in order, one request each."""
        self.requests = self.bytes_fetched = self.max_in_flight = 0
        plan = self._plan()
        nxt = next(plan, None)
        queue: deque[Future[bytes]] = deque()
        pool: ThreadPoolExecutor | None = None

        def top_up() -> None:
            nonlocal nxt, pool
            while nxt is not None and len(queue) < self.prefetch:
                pool = pool or ThreadPoolExecutor(max_workers=self.prefetch,
                                                  thread_name_prefix="kafkalog-ranged-read")
                queue.append(pool.submit(self._fetch, *nxt))
                self.requests += 1
                self.max_in_flight = max(self.max_in_flight, len(queue))
                nxt = next(plan, None)

        started = self.whole
        try:
            if started:
                top_up()
            while True:
                if queue:
                    data = queue.popleft().result()
                elif nxt is not None:
                    self.requests += 1
                    self.max_in_flight = max(self.max_in_flight, 1)
                    data = self._fetch(*nxt)
                    nxt = next(plan, None)
                else:
                    return
                self.bytes_fetched += len(data)
                if started:
                    top_up()
                yield data
                started = True
        finally:
            for f in queue:
                f.cancel()
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        pos = self.lo                      # file position of the first byte not handed out
        carry = b""                        # the start of a batch cut by a request boundary
        parts: list[bytes] = []            # the chunks after it while that batch is incomplete
        have = need = 0
        chunks = self._chunks()
        try:
            for data in chunks:
                if carry:
                    parts.append(data)
                    have += len(data)
                    if have < need:
                        continue
                    buf = b"".join([carry, *parts])
                    parts.clear()
                else:
                    buf = data
                whole = _whole_batches(buf)
                carry = buf[whole:]
                have, need = len(carry), _needed(carry)
                if whole:
                    yield pos, buf if whole == len(buf) else buf[:whole]
                    pos += whole
                if have >= LOG_OVERHEAD and (need <= LOG_OVERHEAD or pos + need > self.hi):
                    # a batch that cannot end in the range: the walker reports a bad length at
                    # its position, or stops at a partial one
                    yield pos, carry
                    break
        finally:
            chunks.close()
        if parts:
            carry = b"".join([carry, *parts])
        if carry and not self.partial_tail:  # the range ends inside a batch
            raise CorruptRecordError(f"the last batch of the range [{self.lo}, {self.hi}) "
                                     f"is incomplete ({len(carry)} of {_needed(carry)} bytes)",
                                     file=self.name, position=pos)


def _needed(buf: bytes) -> int:
    """Bytes of the first batch of ``buf`` (``LOG_OVERHEAD`` while its header is incomplete)."""
    if len(buf) < LOG_OVERHEAD:
        return LOG_OVERHEAD
    return LOG_OVERHEAD + int(struct.unpack_from(">i", buf, 8)[0])


def _whole_batches(buf: bytes) -> int:
    """Length of the prefix of ``buf`` made of whole batches (the header walker's), or all of it
    when the walk stops at damage (the reader's walk of it raises there)."""
    found = walk(buf, 0, len(buf), verify_crc=False)
    f = found.finding
    if f is None or f.kind in (FindingKind.SHORT_TAIL, FindingKind.PARTIAL_TAIL):
        return int(found.end)
    return len(buf)
