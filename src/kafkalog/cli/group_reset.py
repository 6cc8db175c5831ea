"""The plan of ``kafkalog groups --reset-offsets``: the new committed offset of each partition, as
kafka-consumer-groups.sh computes it (``ConsumerGroupCommand.prepareOffsetsToReset``).

* ``--to-earliest`` / ``--to-latest``: the log start / log end offset.
* ``--to-offset N`` and ``--shift-by N`` (from the committed offset; a partition without one cannot
  be shifted): clamped into ``[log start, log end]``, with Kafka's warning when clamped.
* ``--to-datetime`` / ``--by-duration`` (now minus an ISO-8601 duration): the first offset whose
  timestamp is at or after the time; a partition with none falls back to the log end offset, with
  Kafka's warning.
* ``--to-current``: the committed offset, or the log end offset for a partition without one.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from kafkalog.coordinator.offsets import OffsetAndMetadata
from kafkalog.errors import InvalidConfigError
from kafkalog.log.naming import TopicPartition

__all__ = ["ResetSpec", "parse_datetime", "parse_duration", "plan_reset"]


class _Offsets(Protocol):
    """What the plan reads of the data directory (:class:`kafkalog.client.datalog.DataLog`)."""

    def beginning_offsets(self, topic: str) -> dict[int, int]: ...
    def end_offsets(self, topic: str, isolation: str = ...) -> dict[int, int]: ...
    def offsets_for_times(self, topic: str, timestamp: int) -> dict[int, int | None]: ...


@dataclass(frozen=True)
class ResetSpec:
    """One of the reset scenarios: ``kind`` is earliest, latest, offset, shift, timestamp or current;
    ``value`` the offset, shift or timestamp in ms."""

    kind: str
    value: int = 0


def parse_datetime(text: str) -> int:
    """Kafka's ``--to-datetime`` (``YYYY-MM-DDTHH:mm:SS.sss``, optionally with a zone such as ``Z``
    or ``+01:00``; without one, local time as Kafka uses the JVM's zone) in ms since the epoch."""
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidConfigError(f"--to-datetime: {text!r} is not a date-time like "
                                 f"2024-01-31T12:00:00.000 (optionally with Z or +hh:mm)") from None
    return int(dt.timestamp() * 1000)


_DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?", re.IGNORECASE)


def parse_duration(text: str) -> int:
    """Kafka's ``--by-duration`` (an ISO-8601 duration ``PnDTnHnMnS``, Java's ``Duration.parse``)
    in ms."""
    m = _DURATION.fullmatch(text.strip())
    if m is None or not any(m.groups()) or text.upper().endswith("T"):
        raise InvalidConfigError(f"--by-duration: {text!r} is not an ISO-8601 duration like P1DT2H30M")
    d, h, mi, s = m.groups()
    return int(timedelta(days=int(d or 0), hours=int(h or 0), minutes=int(mi or 0),
                         seconds=float(s or 0)).total_seconds() * 1000)


def _warn(message: str) -> None:
    sys.stderr.write(f"Warn: {message}\n")


def _clamp(tp: TopicPartition, offset: int, earliest: int, latest: int) -> int:
    if offset < earliest:
        _warn(f"New offset ({offset}) is lower than earliest offset for topic partition "
              f"{tp.topic}-{tp.partition}. Value will be set to {earliest}")
        return earliest
    if offset > latest:
        _warn(f"New offset ({offset}) is higher than latest offset for topic partition "
              f"{tp.topic}-{tp.partition}. Value will be set to {latest}")
        return latest
    return offset


def plan_reset(dl: _Offsets, partitions: list[TopicPartition],
               committed: Mapping[TopicPartition, OffsetAndMetadata], spec: ResetSpec
               ) -> dict[TopicPartition, int]:
    """The new offset of every partition in ``partitions``."""
    topics = sorted({tp.topic for tp in partitions})
    starts = {t: dl.beginning_offsets(t) for t in topics}
    ends = {t: dl.end_offsets(t) for t in topics}
    by_time: dict[str, dict[int, int | None]] = {}
    if spec.kind == "timestamp":
        by_time = {t: dl.offsets_for_times(t, spec.value) for t in topics}
    out: dict[TopicPartition, int] = {}
    for tp in partitions:
        earliest, latest = starts[tp.topic][tp.partition], ends[tp.topic][tp.partition]
        current = committed.get(tp)
        if spec.kind == "earliest":
            out[tp] = earliest
        elif spec.kind == "latest":
            out[tp] = latest
        elif spec.kind == "offset":
            out[tp] = _clamp(tp, spec.value, earliest, latest)
        elif spec.kind == "shift":
            if current is None:
                raise InvalidConfigError(f"Cannot shift offset for partition {tp.topic}-{tp.partition} "
                                         f"since there is no current committed offset")
            out[tp] = _clamp(tp, current.offset + spec.value, earliest, latest)
        elif spec.kind == "timestamp":
            found = by_time[tp.topic].get(tp.partition)
            if found is None:
                _warn(f"Partition {tp.partition} from topic {tp.topic} is empty. Falling back to "
                      f"latest known offset.")
                found = latest
            out[tp] = found
        elif spec.kind == "current":
            out[tp] = latest if current is None else current.offset
        else:
            raise InvalidConfigError(f"unknown reset scenario {spec.kind!r}")
    return out


def now_ms() -> int:
    return int(time.time() * 1000)
