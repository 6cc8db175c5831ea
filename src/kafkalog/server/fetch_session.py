"""Incremental fetch sessions (KIP-227), with the rules of Kafka's ``FetchSession.scala``.

A Fetch (v7+) carries ``session_id`` and ``session_epoch``:

* epoch 0 (initial) is a full fetch: a session named in it is closed, and a new session holding every
  requested partition is created (its id returned in the response; 0 when the cache has no room);
* epoch -1 (final) is a full fetch without a session (a session named in it is closed);
* any other epoch is incremental: the session must exist (``FETCH_SESSION_ID_NOT_FOUND``) and be at
  that epoch (``INVALID_FETCH_SESSION_EPOCH``); the request's partitions are added to or updated in
  the session, its forgotten partitions removed, and the fetch reads every partition of the session.
  The response leaves out partitions with no records, no error and an unchanged high watermark and
  log start offset. A session emptied by the request is closed and the fetch is sessionless. A
  session opened with topic IDs (v13+) is only continued with topic IDs and the other way round
  (``FETCH_SESSION_TOPIC_ID_ERROR``). The epoch goes 1, 2, ... and wraps to 1.

The cache holds ``max.incremental.fetch.session.cache.slots`` sessions (Kafka's default 1000). When it
is full, a new session evicts the least recently used one if that was idle for more than
:data:`EVICTION_MS` (Kafka's ``MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS``), else the smallest session
if it has fewer partitions than the new one; otherwise the new fetch gets no session.
"""

from __future__ import annotations

import random
import time
from collections import OrderedDict
from collections.abc import Callable, Generator, Iterable, Sequence
from typing import Any, Protocol

from kafkalog.record.constants import INT32_MAX

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
INVALID_SESSION_ID = 0
EVICTION_MS = 120_000

FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71
FETCH_SESSION_TOPIC_ID_ERROR = 106

#: (topic key -- the name, or the topic ID from v13 --, partition)
PartitionKey = tuple[Any, int]


class Wanted(Protocol):
    """A partition to fetch, as the Fetch handler names it."""

    key: Any
    topic: str | None
    index: int
    offset: int
    max_bytes: int


class Result(Protocol):
    """What the read of one partition gave."""

    error: int
    high_watermark: int
    log_start_offset: int

    @property
    def size(self) -> int: ...


class CachedPartition:
    """A partition of a session: its last requested position and the last answered state."""

    __slots__ = ("high_watermark", "log_start_offset", "wanted")

    def __init__(self, wanted: Wanted) -> None:
        self.wanted = wanted
        self.high_watermark = -1
        self.log_start_offset = -1

    def must_respond(self, r: Result) -> bool:
        """Whether the response carries this partition; records what it tells the client."""
        respond = r.size > 0
        if self.high_watermark != r.high_watermark:
            respond = True
            self.high_watermark = r.high_watermark
        if self.log_start_offset != r.log_start_offset:
            respond = True
            self.log_start_offset = r.log_start_offset
        if r.error:
            respond = True
            self.high_watermark = -1           # as Kafka: a partition in error is answered again
        return respond


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= INT32_MAX else epoch + 1


class FetchSession:
    __slots__ = ("created_ms", "epoch", "id", "last_used_ms", "partitions", "uses_topic_ids")

    def __init__(self, session_id: int, now_ms: int, uses_topic_ids: bool,
                 partitions: OrderedDict[PartitionKey, CachedPartition]) -> None:
        self.id = session_id
        self.epoch = next_epoch(INITIAL_EPOCH)
        self.created_ms = now_ms
        self.last_used_ms = now_ms
        self.uses_topic_ids = uses_topic_ids
        self.partitions = partitions


class FetchContext:
    """One Fetch's view of the session: the partitions to read, then :meth:`respond` picks those
    the response carries and names the session in it (:meth:`respond_steps`: the same a slice at
    a time, for a Fetch of thousands of partitions)."""

    def __init__(self, wanted: list[Wanted], error: int = 0, session: FetchSession | None = None,
                 create: Callable[[list[Wanted], Sequence[Result], int], Generator[None, None, int]]
                 | None = None) -> None:
        self.wanted = wanted
        self.error = error
        self._session = session
        self._create = create

    def respond(self, results: Sequence[Result]) -> tuple[int, list[tuple[Wanted, Any]]]:
        """(response session id, the (partition, result) pairs to answer) for ``results`` read in
        the order of :attr:`wanted`."""
        pairs: list[tuple[Wanted, Any]] = []
        steps = self.respond_steps(results, pairs, max(len(results), 1))
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value, pairs

    def respond_steps(self, results: Sequence[Result], into: list[tuple[Wanted, Any]],
                      per_slice: int) -> Generator[None, None, int]:
        """:meth:`respond`, the pairs into ``into``, yielding after each ``per_slice`` partitions;
        returns the response's session id."""
        wanted = self.wanted
        if len(wanted) != len(results):
            raise ValueError(f"{len(results)} results for {len(wanted)} partitions")
        session = self._session
        if session is None:
            for start in range(0, len(wanted), per_slice):
                into.extend(zip(wanted[start:start + per_slice], results[start:start + per_slice]))
                yield
            if self._create is None:
                return INVALID_SESSION_ID
            return (yield from self._create(wanted, results, per_slice))
        parts = session.partitions
        for i, (w, r) in enumerate(zip(wanted, results)):
            key = (w.key, w.index)
            cached = parts.get(key)
            if cached is not None and cached.must_respond(r):     # (None: forgotten while it waited)
                into.append((w, r))
                parts.move_to_end(key)          # answered partitions go last (fairness)
            if i % per_slice == per_slice - 1:
                yield
        return session.id


class FetchSessionCache:
    """The broker's sessions, by id."""

    def __init__(self, slots: int, eviction_ms: int = EVICTION_MS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.slots = slots
        self.eviction_ms = eviction_ms
        self._clock = clock
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()   # least recently used first

    def __len__(self) -> int:
        return len(self._sessions)

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def new_context(self, session_id: int, epoch: int, uses_topic_ids: bool, wanted: list[Wanted],
                    forgotten: Iterable[PartitionKey]) -> FetchContext:
        """The context of a Fetch (v7+) naming ``session_id`` at ``epoch``."""
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self._sessions.pop(session_id, None)
            if epoch == FINAL_EPOCH:
                return FetchContext(wanted)
            return FetchContext(wanted, create=lambda ws, rs, per_slice: self._create(ws, rs, uses_topic_ids,
                                                                                     per_slice))
        session = self._sessions.get(session_id)
        if session is None:
            return FetchContext([], FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            return FetchContext([], INVALID_FETCH_SESSION_EPOCH)
        if session.uses_topic_ids != uses_topic_ids:
            return FetchContext([], FETCH_SESSION_TOPIC_ID_ERROR)
        parts = session.partitions
        for w in wanted:
            key = (w.key, w.index)
            cached = parts.get(key)
            if cached is None:
                parts[key] = CachedPartition(w)
            else:
                cached.wanted = w
        for key in forgotten:
            parts.pop(key, None)
        if not parts:
            del self._sessions[session_id]
            return FetchContext(wanted)
        session.epoch = next_epoch(session.epoch)
        session.last_used_ms = self._now_ms()
        self._sessions.move_to_end(session_id)
        return FetchContext([c.wanted for c in parts.values()], session=session)

    def _create(self, wanted: list[Wanted], results: Sequence[Result], uses_topic_ids: bool,
                per_slice: int) -> Generator[None, None, int]:
        """A new session of ``wanted`` (their ``results`` recorded), its partitions made
        ``per_slice`` at a time; its id, or :data:`INVALID_SESSION_ID` when the cache has no room
        (asked once they are made: another session may have taken a slot meanwhile)."""
        parts: OrderedDict[PartitionKey, CachedPartition] = OrderedDict()
        for i, (w, r) in enumerate(zip(wanted, results, strict=True)):
            c = CachedPartition(w)
            c.must_respond(r)
            parts[(w.key, w.index)] = c
            if i % per_slice == per_slice - 1:
                yield
        now = self._now_ms()
        if not self._make_room(len(wanted), now):
            return INVALID_SESSION_ID
        sid = INVALID_SESSION_ID
        while sid == INVALID_SESSION_ID or sid in self._sessions:
            sid = random.randint(1, INT32_MAX)
        self._sessions[sid] = FetchSession(sid, now, uses_topic_ids, parts)
        return sid

    def _make_room(self, size: int, now: int) -> bool:
        if len(self._sessions) < self.slots:
            return True
        if not self._sessions:
            return False                            # no slots at all
        lru_id, lru = next(iter(self._sessions.items()))
        if now - lru.last_used_ms > self.eviction_ms:
            del self._sessions[lru_id]
            return True
        old = [s for s in self._sessions.values() if now - s.created_ms > self.eviction_ms]
        if not old:
            return False
        smallest = min(old, key=lambda s: (len(s.partitions), s.id))
        if len(smallest.partitions) < size:
            del self._sessions[smallest.id]
            return True
        return False
