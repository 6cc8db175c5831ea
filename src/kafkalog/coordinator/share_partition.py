"""A share partition (KIP-932, Kafka 4.4's ``SharePartition``): the delivery state of one topic
partition for one share group, shared by every consumer of the group.

Records from the share-partition start offset (SPSO) on are *in flight* while not settled: each
offset is Available, Acquired (by one member, until its acquisition lock expires), Acknowledged or
Archived, with a delivery count. :meth:`SharePartition.acquire` hands a member the available
records of a fetch (the ones released or timed out first, then new ones up to
``share.partition.max.record.locks`` in flight), each delivery counted and locked for
``share.record.lock.duration.ms``; :meth:`SharePartition.acknowledge` settles them (Accept:
Acknowledged, Release: Available again, Reject: Archived, Renew: the lock restarted; a gap, type 0,
Archived); a lock that expires, or a member that leaves, makes its records Available again. A
record delivered ``share.delivery.count.limit`` times is Archived instead of becoming Available, as
Kafka's ``InFlightState`` decides. The SPSO moves past every settled record at its head; the state
(SPSO and the unsettled or settled offsets above it, never the acquisitions) is what is persisted
(:mod:`kafkalog.coordinator.share_state_store`), as Kafka's persister writes it.

The operations that settle records leave the SPSO where it is: :meth:`SharePartition.advance` moves
it once the change is persisted (Kafka writes the state with the start offset before the change,
then updates its cache). Time is passed in (milliseconds); nothing here does I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kafkalog.coordinator.share_state_records import StateBatch
from kafkalog.errors import InvalidConfigError, KafkalogError

__all__ = [
    "ACCEPT",
    "ACKNOWLEDGED",
    "ACQUIRED",
    "ARCHIVED",
    "AVAILABLE",
    "GAP",
    "REJECT",
    "RELEASE",
    "RENEW",
    "InvalidAcknowledgementError",
    "InvalidRecordStateError",
    "SharePartition",
    "SharePartitionConfig",
]

# record states (Kafka's RecordState ids; Acquired is never persisted)
AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = 0, 1, 2, 4
# acknowledge types (Kafka's AcknowledgeType ids; 0 is a gap in the batch)
GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4
_TERMINAL = (ACKNOWLEDGED, ARCHIVED)


_DURATION = re.compile(r"^([-+]?)P(?:([-+]?\d+)D)?"
                       r"(?:T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?$", re.IGNORECASE)


def parse_duration_ms(text: str) -> int:
    """Java's ``Duration.parse`` (ISO-8601 ``PnDTnHnMn.nS``) in milliseconds; negative is refused,
    as Kafka's ``by_duration`` refuses it."""
    m = _DURATION.match(text.strip())
    if m is None or text.strip().upper() in ("P", "PT") or text.strip().upper().endswith("T"):
        raise InvalidConfigError(f"Unable to parse the duration {text!r} (ISO-8601: PnDTnHnMn.nS)")
    sign, d, h, mi, s, frac = m.groups()
    ms = (int(d or 0) * 86400 + int(h or 0) * 3600 + int(mi or 0) * 60 + int(s or 0)) * 1000
    if frac:
        ms += int((frac + "000")[:3]) * (-1 if (s or "").startswith("-") else 1)
    if sign == "-":
        ms = -ms
    if ms < 0:
        raise InvalidConfigError(f"Negative duration is not allowed: {text}")
    return ms


class InvalidRecordStateError(KafkalogError):
    """Kafka: InvalidRecordStateException (an acknowledgement of records not acquired by the member)."""


class InvalidAcknowledgementError(KafkalogError):
    """Kafka: InvalidRequestException from ``SharePartition.acknowledge`` (offsets past the records
    in flight)."""


def reset_start_offset(reset: str, log_start_offset: int, high_watermark: int,
                       offset_for_timestamp: Callable[[int], Any], now_ms: int) -> int:
    """Where a share partition without a state starts (Kafka's ``share.auto.offset.reset``):
    ``earliest`` the log start, ``by_duration:<ISO-8601>`` the first offset at or after now less
    the duration (the high watermark when there is none), else (``latest``) the high watermark."""
    if reset == "earliest":
        return int(log_start_offset)
    if reset.startswith("by_duration:"):
        found = offset_for_timestamp(now_ms - parse_duration_ms(reset[len("by_duration:"):]))
        return int(high_watermark) if found is None else int(found.offset)
    return int(high_watermark)


@dataclass
class SharePartitionConfig:
    """A share group's delivery settings (Kafka's group configs over the broker's defaults)."""

    record_lock_duration_ms: int = 30000
    delivery_count_limit: int = 5
    max_record_locks: int = 2000
    renew_enabled: bool = True


@dataclass(slots=True)
class _InFlight:
    state: int
    count: int
    member: str = ""
    deadline: int = 0


@dataclass
class SharePartition:
    """The delivery state of ``topic``-``partition`` for one share group."""

    start_offset: int
    config: SharePartitionConfig = field(default_factory=SharePartitionConfig)
    #: offset -> state, for offsets >= start_offset that were fetched at least once
    records: dict[int, _InFlight] = field(default_factory=dict)
    state_epoch: int = 0
    leader_epoch: int = 0

    @classmethod
    def restore(cls, start_offset: int, batches: Iterable[StateBatch], config: SharePartitionConfig,
                state_epoch: int = 0, leader_epoch: int = 0) -> SharePartition:
        """The share partition a persisted state describes (Kafka's ``maybeInitialize``)."""
        sp = cls(start_offset, config, state_epoch=state_epoch, leader_epoch=leader_epoch)
        for b in batches:
            for off in range(max(b.first_offset, start_offset), b.last_offset + 1):
                sp.records[off] = _InFlight(b.delivery_state if b.delivery_state != ACQUIRED else AVAILABLE,
                                            b.delivery_count)
        sp._advance()
        return sp

    # --- state --------------------------------------------------------------------------------------

    @property
    def end_offset(self) -> int:
        """The last offset in flight (start_offset - 1 when none)."""
        return max(self.records) if self.records else self.start_offset - 1

    def next_fetch_offset(self) -> int:
        """Where the next fetch starts: the first Available record in flight, else after the last."""
        available = [o for o, r in self.records.items() if r.state == AVAILABLE]
        return min(available) if available else self.end_offset + 1

    def in_flight(self) -> int:
        return len(self.records)

    def delivery_complete_count(self) -> int:
        """Settled offsets at or above the SPSO (Kafka's ``deliveryCompleteCount``)."""
        return sum(1 for r in self.records.values() if r.state in _TERMINAL)

    def acquired_by(self, member: str) -> list[int]:
        return sorted(o for o, r in self.records.items() if r.state == ACQUIRED and r.member == member)

    def advance(self) -> list[int]:
        """Move the SPSO past the settled records at its head (after their change is persisted, as
        Kafka moves it once the write completes); returns the offsets passed."""
        passed: list[int] = []
        while True:
            r = self.records.get(self.start_offset)
            if r is None or r.state not in _TERMINAL:
                return passed
            del self.records[self.start_offset]
            passed.append(self.start_offset)
            self.start_offset += 1

    def _advance(self) -> None:
        """Move the SPSO past the settled records at its head."""
        while True:
            r = self.records.get(self.start_offset)
            if r is None or r.state not in _TERMINAL:
                return
            del self.records[self.start_offset]
            self.start_offset += 1

    def _settle(self, off: int, r: _InFlight, state: int) -> None:
        """Kafka's ``InFlightState.tryUpdateState`` without a count change: Available becomes
        Archived once the delivery count reached the limit."""
        if state == AVAILABLE and r.count >= self.config.delivery_count_limit:
            state = ARCHIVED
        r.state, r.member, r.deadline = state, "", 0

    def move_start(self, offset: int) -> list[int]:
        """The log start offset moved past the SPSO (retention, DeleteRecords): the records below
        it are archived and the SPSO moves to it. Returns the offsets changed."""
        if offset <= self.start_offset:
            return []
        changed = [o for o in self.records if o < offset]
        for o in changed:
            del self.records[o]
        self.start_offset = offset
        self._advance()
        return changed

    # --- acquisition --------------------------------------------------------------------------------

    def acquire(self, member: str, batches: list[tuple[int, int]], max_records: int, now: int,
                record_limit: bool = False, excluded: Iterable[tuple[int, int]] = (),
                settling: frozenset[int] = frozenset()) -> list[tuple[int, int, int]]:
        """Acquire for ``member`` the available records of the fetched log ``batches`` ((base
        offset, last offset) in log order). Kafka's batch-optimized mode takes whole log batches,
        so a fetch may exceed ``max_records`` to end on a batch boundary; ``record_limit`` stops at
        ``max_records`` exactly. New records (above the last in flight) are taken while fewer than
        ``share.partition.max.record.locks`` are in flight. Records redelivered near the delivery
        limit are throttled as Kafka isolates a poison record: from ``max(2, ceil(limit / 2))``
        deliveries on, a batch gives half as many records each time, a record on its last
        attempt is delivered alone, and nothing else is acquired with a throttled batch.
        ``excluded`` (an aborted transaction's batches with ``read_committed``) are archived, not
        delivered. ``settling`` are offsets the same request acknowledged: Kafka's fetch does not
        see them available until their state is written, so they are not taken again at once.
        Returns the acquired ranges ``(first, last, delivery count)``."""
        if max_records <= 0 or not batches:
            return []
        deadline = now + self.config.record_lock_duration_ms
        limit = self.config.delivery_count_limit
        throttle_at = max(2, -(-limit // 2))
        skip = list(excluded)
        end = self.end_offset
        acquired: list[int] = []
        room = self.config.max_record_locks - len(self.records)

        def take(off: int, r: _InFlight) -> bool:
            """Acquire ``off`` unless excluded; whether it was."""
            if any(a <= off <= b for a, b in skip):
                r.state, r.member, r.deadline = ARCHIVED, "", 0
                return False
            r.state, r.count, r.member, r.deadline = ACQUIRED, r.count + 1, member, deadline
            acquired.append(off)
            return True

        for base, last in batches:
            if len(acquired) >= max_records:
                break
            if last < self.start_offset:
                continue
            first = max(base, self.start_offset)
            in_flight = [o for o in range(first, last + 1) if o in self.records]
            available = [o for o in in_flight if self.records[o].state == AVAILABLE and o not in settling]
            throttled = any(self.records[o].count >= throttle_at for o in available)
            if throttled and acquired:
                break
            if available:                         # records delivered before: Kafka's subset path
                cap = -1
                got = 0
                for off in available:
                    if record_limit and len(acquired) >= max_records:
                        break
                    r = self.records[off]
                    if limit > 2 and r.count == limit - 1 and got > 0:
                        break                     # its last attempt: alone, in the next fetch
                    if r.count >= throttle_at and cap < 0:
                        cap = max(1, (last - base + 1) >> (r.count - throttle_at + 1))
                    if not take(off, r):
                        continue
                    got += 1
                    if (r.count == limit and limit > 2) or (cap > 0 and got == cap):
                        break
                if throttled and got:
                    break
            if throttled:
                continue
            for off in range(first, last + 1):    # records never delivered
                if off <= end or off in self.records:
                    continue
                if room <= 0 or (record_limit and len(acquired) >= max_records):
                    break
                r = self.records[off] = _InFlight(AVAILABLE, 0)
                room -= 1
                take(off, r)
            if room <= 0:
                break
        return _ranges(acquired, lambda o: self.records[o].count if o in self.records else 0)

    # --- acknowledgement -----------------------------------------------------------------------------

    def acknowledge(self, member: str, batches: Iterable[tuple[int, int, list[int]]], now: int) -> list[int]:
        """Settle records ``member`` acquired: ``(first, last, types)`` where ``types`` has one type
        for the whole range or one per offset. Raises :class:`InvalidRecordStateError`, changing
        nothing, when a record is not acquired by ``member``. Returns the offsets changed."""
        plan: list[tuple[int, int]] = []
        for first, last, types in batches:
            if last < first or not types or (len(types) != 1 and len(types) != last - first + 1):
                raise InvalidAcknowledgementError(f"invalid acknowledgement batch {first}-{last}")
            if last < self.start_offset:
                continue
            end = self.end_offset
            if first > end:
                raise InvalidAcknowledgementError("Batch record not found. The first offset in request is past "
                                                  "acquired records.")
            if last > end:
                raise InvalidAcknowledgementError("Batch record not found. The last offset in request is past "
                                                  "acquired records.")
            for i, off in enumerate(range(first, last + 1)):
                kind = types[0] if len(types) == 1 else types[i]
                if kind not in (GAP, ACCEPT, RELEASE, REJECT, RENEW):
                    raise InvalidRecordStateError(f"unknown acknowledge type {kind}")
                if off < self.start_offset:
                    continue                 # settled and passed already
                r = self.records.get(off)
                if kind == GAP and r is None:
                    continue
                if r is None or r.state != ACQUIRED or r.member != member:
                    raise InvalidRecordStateError("The record state is invalid. The acknowledgement of "
                                                  "delivery could not be completed.")
                if kind == RENEW and not self.config.renew_enabled:
                    raise InvalidRecordStateError("Renewing acquisition locks is not enabled for the group.")
                plan.append((off, kind))
        changed = []
        for off, kind in plan:
            r = self.records[off]
            if kind == RENEW:
                r.deadline = now + self.config.record_lock_duration_ms
                continue
            self._settle(off, r, {GAP: ARCHIVED, ACCEPT: ACKNOWLEDGED, RELEASE: AVAILABLE, REJECT: ARCHIVED}[kind])
            changed.append(off)
        return changed

    def release_member(self, member: str) -> list[int]:
        """A member left (or its share session closed): its acquired records are available again
        (archived at the delivery limit)."""
        changed = []
        for off in self.acquired_by(member):
            self._settle(off, self.records[off], AVAILABLE)
            changed.append(off)
        return changed

    def expire_locks(self, now: int) -> list[int]:
        """Acquisition locks past their deadline: the records are available again (archived at the
        delivery limit). Returns the offsets changed."""
        changed = []
        for off, r in self.records.items():
            if r.state == ACQUIRED and r.deadline <= now:
                self._settle(off, r, AVAILABLE)
                changed.append(off)
        return changed

    def next_deadline(self) -> int | None:
        deadlines = [r.deadline for r in self.records.values() if r.state == ACQUIRED]
        return min(deadlines) if deadlines else None

    # --- persistence --------------------------------------------------------------------------------

    def state_batches(self, offsets: Iterable[int] | None = None) -> tuple[StateBatch, ...]:
        """The persisted form of ``offsets`` (all in flight when None) at or above the SPSO: runs of
        one state and delivery count; an acquired record is persisted as Available with the
        deliveries before this one."""
        wanted = sorted(self.records) if offsets is None else sorted(o for o in set(offsets)
                                                                    if o in self.records)
        out: list[StateBatch] = []
        for off in wanted:
            r = self.records[off]
            state, count = (AVAILABLE, r.count - 1) if r.state == ACQUIRED else (r.state, r.count)
            if out and out[-1].last_offset == off - 1 and out[-1].delivery_state == state \
                    and out[-1].delivery_count == count:
                out[-1] = out[-1]._replace(last_offset=off)
            else:
                out.append(StateBatch(off, off, state, count))
        return tuple(out)


def _ranges(offsets: list[int], count_of: object) -> list[tuple[int, int, int]]:
    out: list[tuple[int, int, int]] = []
    for off in offsets:
        c = count_of(off)  # type: ignore[operator]
        if out and out[-1][1] == off - 1 and out[-1][2] == c:
            out[-1] = (out[-1][0], off, c)
        else:
            out.append((off, off, c))
    return out
