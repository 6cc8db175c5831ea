"""The group framework the group coordinators build on (Kafka's ``coordinator/group``: ``Group``,
``ModernGroup`` and the shard's timers), so each coordinator keeps only what its protocol adds:
the classic protocol (:mod:`.classic_group`), the consumer group protocol of KIP-848
(:mod:`.consumer_group`), share groups of KIP-932 (:mod:`.share_group`) and streams groups of
KIP-1071 (:mod:`.streams_group`).

What a coordinator gets:

* :class:`GroupCoordinatorBase` ``[G]``: the groups of the node by id (``groups``), the clocks
  (``_clock`` monotonic ms for deadlines, ``_wall`` epoch ms for what is written), the durable
  write of a group's state (``_persist(group_id, state)``: raising fails the request; the state is
  the coordinator's: records for the modern protocols, a ``GroupMetadataValue`` for the classic
  one; ``_write(group, records)`` persists a modern group's records and holds it), DeleteGroups
  (``delete``, with the coordinator's ``tombstones``), and :meth:`~GroupCoordinatorBase.tick`,
  the session and rebalance timers: for each group whose time may have come it asks
  :meth:`~GroupCoordinatorBase.timed_out` which members ran out of time and why, then
  :meth:`~GroupCoordinatorBase.fence_member` each one still in its group (a failure is logged,
  the others are fenced all the same, and the group looked at again ``TIMER_RETRY_MS`` later).
  The broker calls ``tick`` every ``GROUP_TICK_S``; a tick
  looks only at the groups whose next deadline passed (a heap of them, one live entry a group:
  Kafka's coordinator timer) and at those a request looked up since the last tick (:class:`Groups`
  notes them: a request may have moved their deadlines), never at every group of the node. A
  coordinator with timers of its own (the classic protocol's) overrides :meth:`~GroupCoordinatorBase.expire`
  and :meth:`~GroupCoordinatorBase.next_deadline`.
* :class:`ModernGroup` ``[M, T]``: the state every group of the modern protocols (KIP-848 and after)
  has: members by id, the target assignment with its epoch and time, the subscription's metadata
  hash (:meth:`~ModernGroup.compute_metadata_hash`, Kafka's ``computeMetadataHash``), the session and
  rebalance deadlines of each member (``timed_out``); each protocol adds its group epoch field and
  its own state (regular expressions, initialized share partitions...).
* :class:`GroupError` (an error code answered to the request), :data:`Record` (a key and value of
  ``__consumer_offsets``, None for a tombstone), :data:`Assignment`, and the hashes the metadata
  hash is made of (:class:`TopicImage`, :func:`topic_hash`, :func:`group_hash`: Kafka's
  ``computeTopicHash`` and ``computeGroupHash``).

The state records themselves and their replay are each protocol's (their types are Kafka's, one
set per protocol, in :mod:`kafkalog.coordinator`); a coordinator rebuilds a group with
``restore(group_id, records)`` from the live records the offsets store hands it at start.
"""

from __future__ import annotations

import functools
import heapq
import logging
import struct
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, Protocol, TypeVar, cast

import xxhash

from kafkalog.server import error_codes as ec

__all__ = ["Assignment", "GroupCoordinatorBase", "GroupError", "ModernGroup", "Record", "TopicImage",
           "group_hash", "topic_hash"]

logger = logging.getLogger("kafkalog.server")

#: topic id -> partitions
Assignment = dict[uuid.UUID, frozenset[int]]
#: what a modern coordinator persists: (key bytes, value bytes or None for a tombstone)
Record = tuple[bytes, bytes | None]

M = TypeVar("M")

#: a group whose timers failed (a fence whose write raised) is looked at again this much later
#: (Kafka's coordinator timer retries a failed operation after a backoff of 500 ms)
TIMER_RETRY_MS = 500
#: what a member's target assignment is: partitions by topic id, or a streams member's tasks
T = TypeVar("T")


class _Group(Protocol):
    """What the framework reads of any group: its id and its members by id."""
    group_id: str

    @property
    def members(self) -> Mapping[str, Any]: ...


G = TypeVar("G", bound=_Group)


class GroupError(Exception):
    """An error answered to the request: Kafka's error code and message."""

    def __init__(self, code: int, message: str | None = None) -> None:
        super().__init__(message or "")
        self.code = code
        self.message = message


class TopicImage(NamedTuple):
    """A topic as the coordinator sees it: its id and partition count."""
    topic_id: uuid.UUID
    partitions: int


@dataclass
class ModernGroup(Generic[M, T]):
    """What every group of the modern protocols holds (Kafka's ``ModernGroup``)."""
    group_id: str
    metadata_hash: int = 0
    assignment_epoch: int = 0
    assignment_timestamp: int = 0
    members: dict[str, M] = field(default_factory=dict)
    #: member id -> its target assignment
    target: dict[str, T] = field(default_factory=dict)
    #: member id -> session deadline (monotonic ms)
    session_deadline: dict[str, int] = field(default_factory=dict)
    #: member id -> (rebalance deadline (monotonic ms), the member epoch it was set at): a member
    #: that still has something to revoke at the deadline is fenced
    rebalance_deadline: dict[str, tuple[int, int]] = field(default_factory=dict)

    def timed_out(self, now: int, epoch_of: Callable[[M], int], revoking: str) -> list[tuple[str, str]]:
        """The members whose session expired, then those that did not revoke their ``revoking``
        (partitions, tasks) within their rebalance timeout: (member id, why)."""
        expired = [mid for mid, deadline in self.session_deadline.items() if now >= deadline and mid in self.members]
        late = [(mid, f"it did not revoke its {revoking} within its rebalance timeout")
                for mid, (deadline, epoch) in self.rebalance_deadline.items()
                if now >= deadline and mid in self.members and epoch_of(self.members[mid]) == epoch
                and mid not in expired]
        return [(mid, "its session expired") for mid in expired] + late

    def next_deadline(self, now: int) -> int | None:
        """The first session or rebalance deadline after ``now`` (those at or before it were
        looked at: fenced, or moot), None if there is none."""
        later = [d for d in self.session_deadline.values() if d > now]
        later += [d for d, _epoch in self.rebalance_deadline.values() if d > now]
        return min(later, default=None)

    @staticmethod
    def compute_metadata_hash(names: Iterable[str], image: Mapping[str, TopicImage | None]) -> int:
        """Kafka's ``ModernGroup.computeMetadataHash``: the metadata hash of a group subscribed to
        ``names``, the group hash of the topic hash of each of them that exists in ``image``."""
        return group_hash({n: topic_hash(n, i) for n in names if (i := image.get(n)) is not None})


class Groups(dict[str, G]):
    """A coordinator's groups by id. A group looked up (``[]``, ``get``) or stored here is *touched*:
    a request is at it and may move its deadlines (a heartbeat, a join, a rebalance started), so
    the next tick looks at it again (``touched``). Membership tests and iteration (a listing, a
    metrics scrape, a topic change marking the groups subscribed to it) touch nothing; ``peek``
    looks a group up without touching it (the timer's own look)."""

    __slots__ = ("touched",)

    def __init__(self) -> None:
        super().__init__()
        self.touched: set[str] = set()

    def __getitem__(self, group_id: str) -> G:
        self.touched.add(group_id)
        return super().__getitem__(group_id)

    def get(self, group_id: str, default: Any = None) -> Any:
        self.touched.add(group_id)
        return super().get(group_id, default)

    def __setitem__(self, group_id: str, group: G) -> None:
        self.touched.add(group_id)
        super().__setitem__(group_id, group)

    def setdefault(self, group_id: str, default: Any = None) -> Any:
        self.touched.add(group_id)
        return super().setdefault(group_id, default)

    def peek(self, group_id: str) -> G | None:
        return super().get(group_id)


class GroupCoordinatorBase(Generic[G]):
    """Every group of one kind on the node, and their timers (see the module's docstring)."""

    #: how the log names a group of this kind
    kind = "group"

    def __init__(self, persist: Callable[[str, Any], None],
                 clock: Callable[[], int] = lambda: int(time.monotonic() * 1000),
                 wall_clock: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self._persist = persist
        self._clock = clock
        self._wall = wall_clock
        self.groups: Groups[G] = Groups()
        #: (deadline, group id): when a group's time may come; an entry is live while ``_due``
        #: holds its deadline for the group (one live entry a group, the earliest known)
        self._timers: list[tuple[int, str]] = []
        self._due: dict[str, int] = {}

    def timed_out(self, group: G, now: int) -> list[tuple[str, str]]:
        """The members of ``group`` whose time ran out at ``now``: (member id, why), in the order
        they are fenced."""
        raise NotImplementedError

    def fence_member(self, group: G, member_id: str) -> None:
        """Remove a member that ran out of time, as the protocol does."""
        raise NotImplementedError

    def _write(self, group: G, records: list[Record]) -> None:
        """Persist a group's new records (one batch; raising fails the request), then keep the
        group (:meth:`_keep`)."""
        if records:
            self._persist(group.group_id, records)
        self._keep(group)

    def _keep(self, group: G) -> None:
        """Hold ``group`` after a write (a coordinator that registers its groups elsewhere
        overrides this)."""
        self.groups[group.group_id] = group

    def tombstones(self, group: G) -> list[Record]:
        """The records that delete ``group`` (none when the protocol writes none)."""
        return []

    def delete(self, group_id: str) -> int:
        """DeleteGroups: NON_EMPTY_GROUP unless the group is empty; its records tombstoned."""
        g = self.groups.get(group_id)
        if g is None:
            return ec.GROUP_ID_NOT_FOUND
        if g.members:
            return ec.NON_EMPTY_GROUP
        records = self.tombstones(g)
        if records:
            self._persist(group_id, records)
        del self.groups[group_id]
        return ec.NONE

    def tick(self) -> None:
        """Fence the members whose session or rebalance timed out: in the groups whose next
        deadline passed and those touched since the last tick (:class:`Groups`), then schedule
        each one's next deadline. Nothing here grows with the groups no one is at."""
        now = self._clock()
        due = self.groups.touched
        self.groups.touched = set()
        timers = self._timers
        while timers and timers[0][0] <= now:
            deadline, group_id = heapq.heappop(timers)
            if self._due.get(group_id) == deadline:
                del self._due[group_id]
                due.add(group_id)
        for group_id in sorted(due):
            g = self.groups.peek(group_id)
            if g is None:
                continue
            try:
                done = self.expire(g, now)
            except Exception:
                logger.exception("%s %s: its timers failed", self.kind, group_id)
                done = False
            g = self.groups.peek(group_id)                  # (a fence may remove or convert it)
            if g is not None:
                self._schedule(group_id, self.next_deadline(g, now))
                if not done:                                # Kafka's timer retries after a backoff
                    self._schedule(group_id, now + TIMER_RETRY_MS)
        # what the fences looked up of these groups is scheduled already
        self.groups.touched.difference_update(due)

    def _schedule(self, group_id: str, deadline: int | None) -> None:
        """The group's time may come at ``deadline``: an entry unless an earlier one is live (it
        looks again then, and schedules what is left)."""
        if deadline is None:
            return
        live = self._due.get(group_id)
        if live is not None and live <= deadline:
            return
        self._due[group_id] = deadline
        heapq.heappush(self._timers, (deadline, group_id))

    def expire(self, group: G, now: int) -> bool:
        """What ran out of time in ``group`` at ``now``: the members :meth:`timed_out` names,
        fenced. False when a fence failed (logged; the others are fenced all the same): the tick
        looks at the group again ``TIMER_RETRY_MS`` later."""
        group_id = group.group_id
        expired = self.timed_out(group, now)
        for member_id, why in expired:
            logger.info("%s %s: member %s fenced: %s", self.kind, group_id, member_id, why)
        done = True
        for member_id, _why in expired:
            current = self.groups.peek(group_id)
            if current is None or member_id not in current.members:     # fenced meanwhile
                continue
            try:
                self.fence_member(current, member_id)
            except Exception:
                logger.exception("%s %s: fencing member %s failed", self.kind, group_id, member_id)
                done = False
        return done

    def next_deadline(self, group: G, now: int) -> int | None:
        """The group's first deadline after ``now``: a modern group's sessions and rebalances (the
        classic coordinator overrides it)."""
        return cast("ModernGroup[Any, Any]", group).next_deadline(now)


# --- metadata hash (Kafka's Utils.computeTopicHash / computeGroupHash, XXH3-64) ---------------------

def _signed64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


@functools.lru_cache(maxsize=1 << 16)
def topic_hash(name: str, image: TopicImage) -> int:
    """Kafka's topic hash: XXH3-64 of a magic byte 0, the topic id, its name (UTF-16 code units and
    their count), its partition count and each partition index (no racks on this node). Kept by
    topic and image (Kafka's ``topicHashCache``): a heartbeat's metadata hash looks its topics'
    up instead of packing every partition index of each again."""
    tid = image.topic_id.int
    data = bytearray(b"\x00")
    data += struct.pack("<qq", _signed64(tid >> 64), _signed64(tid & ((1 << 64) - 1)))
    units = name.encode("utf-16-le")
    data += units + struct.pack("<i", len(units) // 2)
    data += struct.pack("<i", image.partitions)
    data += b"".join(struct.pack("<i", i) for i in range(image.partitions))
    return _signed64(xxhash.xxh3_64_intdigest(bytes(data)))


def group_hash(topic_hashes: Mapping[str, int]) -> int:
    if not topic_hashes:
        return 0
    data = b"".join(struct.pack("<q", topic_hashes[name]) for name in sorted(topic_hashes))
    return _signed64(xxhash.xxh3_64_intdigest(data))
