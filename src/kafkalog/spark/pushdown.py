"""Translating Spark's pushed filters into :class:`~kafkalog.spark.planning.PushedFilters`.

Exact (not returned to Spark): comparisons, ``=``, ``IN`` on ``partition`` and ``topic``;
comparisons and ``=`` on ``offset``; ``IS NOT NULL`` on the never-null metadata columns.
Pruning only (returned to Spark, which re-checks them): ``IN`` on ``offset`` (narrowed to its
min..max) and lower bounds on ``timestamp`` (resolved through the ``.timeindex``).
"""

from __future__ import annotations

import datetime as _dt
from typing import Iterable, Iterator, List

from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
)

from kafkalog.spark.planning import PushedFilters

_NEVER_NULL = {("topic",), ("partition",), ("offset",), ("timestamp",), ("timestampType",)}
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)


def _ms(value) -> int:
    """Epoch milliseconds (floor) of a pushed timestamp literal."""
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.UTC)
        return (value - _EPOCH) // _dt.timedelta(milliseconds=1)
    return int(value)


def _max(a, b):
    return b if a is None else max(a, b)


def _min(a, b):
    return b if a is None else min(a, b)


def _int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def apply_filters(filters: Iterable[Filter], pushed: PushedFilters) -> Iterator[Filter]:
    """Fold ``filters`` into ``pushed``; yield those Spark must still evaluate."""
    for f in filters:
        col = getattr(f, "attribute", None)
        value = getattr(f, "value", None)
        if isinstance(f, IsNotNull) and col in _NEVER_NULL:
            continue
        if col == ("offset",) and (_int(value) or isinstance(f, In)):
            if isinstance(f, (EqualTo, EqualNullSafe)):
                pushed.min_offset = _max(pushed.min_offset, value)
                pushed.max_offset = _min(pushed.max_offset, value + 1)
            elif isinstance(f, GreaterThan):
                pushed.min_offset = _max(pushed.min_offset, value + 1)
            elif isinstance(f, GreaterThanOrEqual):
                pushed.min_offset = _max(pushed.min_offset, value)
            elif isinstance(f, LessThan):
                pushed.max_offset = _min(pushed.max_offset, value)
            elif isinstance(f, LessThanOrEqual):
                pushed.max_offset = _min(pushed.max_offset, value + 1)
            elif isinstance(f, In) and value and all(_int(v) for v in value):
                pushed.min_offset = _max(pushed.min_offset, min(value))
                pushed.max_offset = _min(pushed.max_offset, max(value) + 1)
                yield f
            else:
                yield f
            continue
        if col == ("partition",) and (_int(value) or isinstance(f, In)):
            if isinstance(f, (EqualTo, EqualNullSafe)):
                _restrict_partitions(pushed, {value})
            elif isinstance(f, In) and all(_int(v) for v in value):
                _restrict_partitions(pushed, set(value))
            elif isinstance(f, GreaterThan):
                pushed.min_partition = _max(pushed.min_partition, value + 1)
            elif isinstance(f, GreaterThanOrEqual):
                pushed.min_partition = _max(pushed.min_partition, value)
            elif isinstance(f, LessThan):
                pushed.max_partition = _min(pushed.max_partition, value - 1)
            elif isinstance(f, LessThanOrEqual):
                pushed.max_partition = _min(pushed.max_partition, value)
            else:
                yield f
            continue
        if col == ("topic",) and isinstance(f, (EqualTo, EqualNullSafe, In)):
            names = {value} if not isinstance(f, In) else set(value)
            if all(isinstance(n, str) for n in names):
                pushed.topics = names if pushed.topics is None else pushed.topics & names
                continue
            yield f
            continue
        if col == ("timestamp",) and value is not None and isinstance(
                f, (GreaterThan, GreaterThanOrEqual, EqualTo, EqualNullSafe)):
            pushed.min_timestamp = _max(pushed.min_timestamp, _ms(value))
        yield f


def _restrict_partitions(pushed: PushedFilters, values: set) -> None:
    pushed.partitions = values if pushed.partitions is None else pushed.partitions & values


def describe(pushed: PushedFilters) -> List[str]:
    """Human-readable summary (for logs and tests)."""
    return [f"{k}={v}" for k, v in vars(pushed).items() if v is not None]
