"""Validation of an append (Kafka's ``LogValidator``): one header walk over the caller's buffer
(:mod:`kafkalog.record.header_walk`), then the leader's rules per batch, offsets assigned in place.
Returns the per-batch facts the write and the producer-state update need (:class:`ValidatedAppend`);
nothing is written here.

Leader (``assign``): ``max.message.bytes``, CRC, v2 record count == lastOffsetDelta + 1, no control
batches from clients, no LogAppendTime from producers, timestamp bounds, ``LogAppendTime`` rewrites,
the leader epoch stamped. Follower: offsets kept, they must start at the log end offset or later and
increase. A trailing partial batch is ignored (spec §4.1 step 7).
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from typing import Any

from crc32c import crc32c

from kafkalog.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    KafkalogError,
    RecordTooLargeError,
)
from kafkalog.log.producer_state import ORIGIN_CLIENT
from kafkalog.record.constants import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    CRC_START,
    INT32_MAX,
    INT64_MAX,
    LEGACY_ATTRIBUTES_OFFSET,
    LEGACY_CRC_OFFSET,
    LEGACY_MAGIC_OFFSET,
    LEGACY_TIMESTAMP_OFFSET,
    LEGACY_TIMESTAMP_TYPE_MASK,
    MAGIC_OFFSET,
    MAX_TIMESTAMP_OFFSET,
    PARTITION_LEADER_EPOCH_OFFSET,
    PRODUCER_ID_OFFSET,
    TIMESTAMP_TYPE_MASK,
)
from kafkalog.record.header_walk import (
    F_ATTRIBUTES,
    F_BASE_OFFSET,
    F_FIRST_TIMESTAMP,
    F_LAST_OFFSET,
    F_MAGIC,
    F_MAX_TIMESTAMP,
    F_PARTITION_LEADER_EPOCH,
    F_POSITION,
    F_RECORD_COUNT,
    F_SIZE,
    Finding,
    FindingKind,
    HeaderWalk,
    walk,
)

_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_pack_q = _INT64.pack_into


class NeedsConversion(Exception):
    """A legacy compressed wrapper that cannot take offsets in place (v0, or v1 inner offsets other
    than 0..n-1): the buffer is converted to v2 batches first, as Kafka's leader does."""


@dataclass(frozen=True)
class AppendRules:
    """The topic configuration an append is validated against."""

    max_message_bytes: int
    log_append_time: bool                 # message.timestamp.type = LogAppendTime
    ts_before_max: int = INT64_MAX         # message.timestamp.before.max.ms
    ts_after_max: int = INT64_MAX          # message.timestamp.after.max.ms

    @property
    def checks_timestamps(self) -> bool:
        return self.ts_before_max < INT64_MAX or self.ts_after_max < INT64_MAX

    @property
    def needs_clock(self) -> bool:
        return self.log_append_time or self.checks_timestamps


@dataclass
class ValidatedAppend:
    """Per-batch facts of a validated buffer (offsets as written): ``positions`` / ``last_offsets``
    / ``max_timestamps`` per batch, ``valid_bytes`` (whole batches), the append's first/last offset,
    max timestamp and its offset, record count, whether v0/v1 entries were seen, the leader epochs
    with their start offsets (v2 batches carrying one) and the LogAppendTime used (-1: none)."""

    positions: list[int] = field(default_factory=list)
    last_offsets: list[int] = field(default_factory=list)
    max_timestamps: list[int] = field(default_factory=list)
    valid_bytes: int = 0
    first_offset: int = -1
    last_offset: int = -1
    max_timestamp: int = -1
    offset_of_max_timestamp: int = -1
    num_records: int = 0
    legacy: bool = False
    epochs: list[tuple[int, int]] = field(default_factory=list)
    log_append_time: int = -1

    @property
    def num_batches(self) -> int:
        return len(self.positions)

    def producer_batches(self, buf: Any) -> list[tuple[int, memoryview]]:
        """``(position, bytes)`` of the v2 batches that carry a producer id."""
        out = []
        n = len(self.positions)
        for i, p in enumerate(self.positions):
            if buf[p + MAGIC_OFFSET] == 2 and _INT64.unpack_from(buf, p + PRODUCER_ID_OFFSET)[0] != -1:
                end = self.positions[i + 1] if i + 1 < n else self.valid_bytes
                out.append((p, memoryview(buf)[p:end]))
        return out


def validate_append(buf: Any, log_end_offset: int, rules: AppendRules, now: int, *, assign: bool,
                    origin: str, leader_epoch: int | None, verify_crc: bool) -> ValidatedAppend:
    """Walk and validate ``buf`` (see the module docstring); ``now`` is the clock's time when
    ``rules.needs_clock`` (else ignored). Raises the typed error of the first bad batch, with its
    byte position."""
    w = walk(buf, 0, len(buf), verify_crc=verify_crc,
             max_size=rules.max_message_bytes if assign else -1,
             expect_next=None if assign else log_end_offset)
    v = ValidatedAppend(log_append_time=now if rules.log_append_time else -1)
    next_off = log_end_offset
    for i in range(w.count):
        row = w.batch(i)
        if assign:
            next_off = _assign_batch(buf, row, next_off, rules, now, origin, leader_epoch, v)
        else:
            _check_follower_batch(row, v)
    f = w.finding
    if f is not None and f.kind not in (FindingKind.SHORT_TAIL, FindingKind.PARTIAL_TAIL):
        raise _finding_error(f, next_off, rules.max_message_bytes, log_end_offset)
    v.valid_bytes = w.end if w.count else 0
    if not verify_crc and v.valid_bytes != len(buf):
        # without the checksums, a damaged length field would read as a torn tail after a
        # batch cut short: a trusted buffer must hold whole batches, nothing else
        raise CorruptRecordError(f"{len(buf) - v.valid_bytes} bytes after the last whole batch (a "
                                 f"partial or damaged batch)", position=v.valid_bytes)
    if w.count:
        _set_range(buf, w, v, assign, log_end_offset)
    return v


def _assign_batch(buf: Any, row: tuple[int, ...], next_off: int, rules: AppendRules, now: int,
                  origin: str, leader_epoch: int | None, v: ValidatedAppend) -> int:
    """Leader rules for one batch, offsets from ``next_off`` written in place; returns the next
    offset."""
    pos, sz, magic = row[F_POSITION], row[F_SIZE], row[F_MAGIC]
    attrs, mts = row[F_ATTRIBUTES], row[F_MAX_TIMESTAMP]
    if magic == 2:
        count = row[F_RECORD_COUNT]
        lod = row[F_LAST_OFFSET] - row[F_BASE_OFFSET]
        if count <= 0 or count != lod + 1:
            raise InvalidRecordError(f"Record count {count} does not match lastOffsetDelta {lod} + 1",
                                     position=pos)
        if attrs & 0x20 and origin == ORIGIN_CLIENT:
            raise InvalidRecordError("Clients are not allowed to write control records", position=pos)
        if row[F_BASE_OFFSET] != next_off:   # (a moved file's page stays clean)
            _pack_q(buf, pos, next_off)
        if attrs & 0x08 and not rules.log_append_time:
            raise InvalidTimestampError("Producer should not set timestamp type to LogAppendTime",
                                        position=pos)
        if rules.log_append_time:
            mts = now
            _set_v2_log_append_time(buf, pos, sz, attrs, now)
        elif rules.checks_timestamps and mts >= 0:
            _check_timestamps(rules, row[F_FIRST_TIMESTAMP], mts, now, pos)
        ple = row[F_PARTITION_LEADER_EPOCH]
        if leader_epoch is not None:
            _INT32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, leader_epoch)
            ple = leader_epoch
        if ple >= 0:
            v.epochs.append((ple, next_off))
    else:
        count = _legacy_count(buf, pos, sz, magic, attrs)
        _pack_q(buf, pos, next_off + count - 1)
        v.legacy = True
        if magic == 1:
            if rules.log_append_time:
                mts = now
                _set_v1_log_append_time(buf, pos, sz, now)
            elif attrs & 0x08:
                raise InvalidTimestampError("Producer should not set timestamp type to LogAppendTime",
                                            position=pos)
            elif rules.checks_timestamps and mts >= 0:
                _check_timestamps(rules, mts, mts, now, pos)
    _add(v, pos, next_off + count - 1, mts, count)
    return next_off + count


def _check_follower_batch(row: tuple[int, ...], v: ValidatedAppend) -> None:
    """Follower rules for one batch (offset order is checked by the walk)."""
    pos, magic, last = row[F_POSITION], row[F_MAGIC], row[F_LAST_OFFSET]
    if magic == 2:
        lod = last - row[F_BASE_OFFSET]
        if lod < 0:
            raise InvalidRecordError(f"Out of order offsets: batch {row[F_BASE_OFFSET]}..{last} after "
                                     f"{v.last_offsets[-1] if v.last_offsets else '-'}", position=pos)
        if row[F_PARTITION_LEADER_EPOCH] >= 0:
            v.epochs.append((row[F_PARTITION_LEADER_EPOCH], row[F_BASE_OFFSET]))
        count = row[F_RECORD_COUNT]
    else:
        v.legacy = True
        count = 1
    _add(v, pos, last, row[F_MAX_TIMESTAMP], count)


def _add(v: ValidatedAppend, pos: int, last: int, mts: int, count: int) -> None:
    v.positions.append(pos)
    v.last_offsets.append(last)
    v.max_timestamps.append(mts)
    v.num_records += count
    if mts > v.max_timestamp:
        v.max_timestamp = mts
        v.offset_of_max_timestamp = last


def _set_range(buf: Any, w: HeaderWalk, v: ValidatedAppend, assign: bool, log_end_offset: int) -> None:
    """First and last offset of the append."""
    v.last_offset = v.last_offsets[-1]
    if assign:
        v.first_offset = log_end_offset
        return
    row = w.batch(0)
    v.first_offset = row[F_BASE_OFFSET] if row[F_MAGIC] >= 2 else row[F_LAST_OFFSET]
    if v.first_offset < log_end_offset:
        raise InvalidRecordError(f"Unexpected append offset {v.first_offset}: the log end offset is "
                                 f"{log_end_offset}", position=0)


def _finding_error(f: Finding, next_off: int, max_message_bytes: int, leo: int) -> KafkalogError:
    """The typed error of a walk finding, with Kafka's words."""
    k, pos = f.kind, f.position
    if k is FindingKind.TOO_LARGE:
        return RecordTooLargeError(f"The record batch size at offset {next_off} is {f.a} bytes which "
                                   f"exceeds the maximum configured value of {max_message_bytes}",
                                   position=pos)
    if k is FindingKind.OFFSET_OVERLAP:
        return InvalidRecordError(f"Out of order offsets: batch {f.a}..{f.b} after {f.c - 1} (log end "
                                  f"offset {leo})", position=pos)
    return CorruptRecordError(f.message, position=pos)


def _check_timestamps(rules: AppendRules, first_ts: int, max_ts: int, now: int, pos: int) -> None:
    # batch-granular: the header's base and max timestamps bound the records' timestamps
    if now - first_ts > rules.ts_before_max or max_ts - now > rules.ts_after_max:
        raise InvalidTimestampError(
            f"Timestamp {first_ts}..{max_ts} of a batch is out of range: it must be within "
            f"[{now - rules.ts_before_max}, {now + rules.ts_after_max}]", position=pos)


def _legacy_count(buf: Any, pos: int, sz: int, magic: int, attrs: int) -> int:
    """Messages of a v0/v1 entry: 1, or the inner count of a compressed wrapper whose inner offsets
    are 0..n-1 (relative) for in-place assignment (spec §4.1 (c)); else :class:`NeedsConversion`."""
    if not attrs & 0x07:
        return 1
    if magic == 0:
        raise NeedsConversion()
    from kafkalog.log._encode import legacy_wrapper_inner_offsets
    try:
        offsets = legacy_wrapper_inner_offsets(bytes(memoryview(buf)[pos:pos + sz]))
    except KafkalogError as e:
        raise e.at(None, pos) from None
    if offsets != list(range(len(offsets))):
        raise NeedsConversion()
    return len(offsets)


def _set_v2_log_append_time(buf: Any, pos: int, sz: int, attrs: int, now: int) -> None:
    """setMaxTimestamp(LOG_APPEND_TIME, now): attribute bit 3 + maxTimestamp, then the CRC."""
    new_attrs = (attrs | TIMESTAMP_TYPE_MASK) & 0xFFFF
    if new_attrs == attrs and _INT64.unpack_from(buf, pos + MAX_TIMESTAMP_OFFSET)[0] == now:
        return
    struct.pack_into(">H", buf, pos + ATTRIBUTES_OFFSET, new_attrs)
    _INT64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, now)
    with memoryview(buf) as mv:
        _UINT32.pack_into(buf, pos + CRC_OFFSET, crc32c(mv[pos + CRC_START:pos + sz]))


def _set_v1_log_append_time(buf: Any, pos: int, sz: int, now: int) -> None:
    """v1: timestamp field + timestamp-type attribute of the (wrapper) message, then its CRC-32."""
    buf[pos + LEGACY_ATTRIBUTES_OFFSET] = buf[pos + LEGACY_ATTRIBUTES_OFFSET] | LEGACY_TIMESTAMP_TYPE_MASK
    _INT64.pack_into(buf, pos + LEGACY_TIMESTAMP_OFFSET, now)
    with memoryview(buf) as mv:
        _UINT32.pack_into(buf, pos + LEGACY_CRC_OFFSET, zlib.crc32(mv[pos + LEGACY_MAGIC_OFFSET:pos + sz]))


__all__ = ["INT32_MAX", "AppendRules", "NeedsConversion", "ValidatedAppend", "validate_append"]
