"""Reading ``.log`` byte ranges of a remote segment: located through the ``.index``, coalesced
into large requests and prefetched.

A segment in object storage is read with ranged GETs, never whole: :func:`byte_range` turns the
``.index`` entries (``(last offset of a batch, position of that batch)``, as Kafka's
``LogSegment.append`` writes them) into the byte range holding the offsets ``[start, end)``, and
:class:`ChunkedBatches` walks that range in requests of ``chunk_bytes`` (whole batches handed out
as one buffer per request; a batch cut by a request boundary is completed by the next request),
fetching the next chunk on a background thread while the caller decodes the current one. A
pushdown read of a few records thus fetches about one index interval (``index.interval.bytes``,
4 KiB by default) of ``.log``; a full scan streams the segment in large requests.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from kafkalog.errors import CorruptRecordError

#: Bytes of one ranged request of a sequential scan, once it has ramped up.
DEFAULT_CHUNK_BYTES = 8 << 20
#: Bytes of the first request: a read of a few records stops after it.
FIRST_CHUNK_BYTES = 64 << 10
#: baseOffset (8) + batchLength (4): the bytes before a batch's length field ends.
LOG_OVERHEAD = 12


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
    """Whole batches of ``[lo, hi)`` of one file, read ``chunk_bytes`` at a time with the next
    request in flight while the current chunk is used. Iterating yields ``(position, buffer)``:
    ``buffer`` holds whole batches starting at file position ``position``. ``name`` is used in
    errors. A range ending inside a batch raises :class:`CorruptRecordError`, unless
    ``partial_tail`` (the last segment of a log being appended: its partial batch ends it)."""

    def __init__(self, read: ReadRange, lo: int, hi: int, name: str, *,
                 chunk_bytes: int = DEFAULT_CHUNK_BYTES, first_chunk: int = FIRST_CHUNK_BYTES,
                 prefetch: bool = True, partial_tail: bool = False) -> None:
        self.read = read
        self.lo, self.hi = lo, hi
        self.name = name
        self.chunk_bytes = max(LOG_OVERHEAD, chunk_bytes)
        self.first_chunk = max(LOG_OVERHEAD, min(first_chunk, self.chunk_bytes))
        self.prefetch = prefetch
        self.partial_tail = partial_tail

    def _fetch(self, pos: int, size: int) -> bytes:
        return self.read(pos, min(size, self.hi - pos)) if pos < self.hi else b""

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        pool: ThreadPoolExecutor | None = None
        pending: Future[bytes] | None = None
        pos = fetched_to = self.lo         # first byte not yet handed out / not yet fetched
        size = self.first_chunk
        carry = b""
        requests = 0
        try:
            while fetched_to < self.hi:
                data = pending.result() if pending is not None else self._fetch(fetched_to, size)
                pending = None
                if not data:
                    break
                fetched_to += len(data)
                buf = carry + data if carry else data
                whole = _whole_batches(buf)
                if not whole and fetched_to < self.hi:
                    rest = _needed(buf) - len(buf)   # a batch bigger than the request
                    if rest > 0:
                        more = self._fetch(fetched_to, rest)
                        fetched_to += len(more)
                        buf += more
                        whole = _whole_batches(buf)
                carry = buf[whole:]
                size = min(size * 2, self.chunk_bytes)
                requests += 1
                if self.prefetch and requests >= 2 and fetched_to < self.hi:
                    pool = pool or ThreadPoolExecutor(max_workers=1)
                    pending = pool.submit(self._fetch, fetched_to, size)
                if whole:
                    yield pos, buf[:whole]
                    pos += whole
            if carry and not self.partial_tail:  # the range ends inside a batch
                raise CorruptRecordError(f"the last batch of the range [{self.lo}, {self.hi}) "
                                         f"is incomplete ({len(carry)} of {_needed(carry)} bytes)",
                                         file=self.name, position=pos)
        finally:
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)


def _needed(buf: bytes) -> int:
    """Bytes of the first batch of ``buf`` (``LOG_OVERHEAD`` while its header is incomplete)."""
    if len(buf) < LOG_OVERHEAD:
        return LOG_OVERHEAD
    return LOG_OVERHEAD + int(struct.unpack_from(">i", buf, 8)[0])


def _whole_batches(buf: bytes) -> int:
    """Length of the prefix of ``buf`` made of whole batches."""
    pos = 0
    n = len(buf)
    while pos + LOG_OVERHEAD <= n:
        size = LOG_OVERHEAD + struct.unpack_from(">i", buf, pos + 8)[0]
        if size <= LOG_OVERHEAD or pos + size > n:
            break
        pos += size
    return pos
