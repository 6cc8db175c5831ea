"""Translating Spark's pushed filters into :class:`~kafkalog.spark.planning.PushedFilters`.

Exact (not returned to Spark): comparisons, ``=``, ``IN`` on ``partition`` and ``topic``;
comparisons and ``=`` on ``offset``; ``IS NOT NULL`` on the never-null metadata columns.
Pruning only (returned to Spark, which re-checks them): ``IN`` on ``offset`` (narrowed to its
min..max) and lower bounds on ``timestamp`` (resolved through the ``.timeindex``).
"""

from __future__ import annotations

import datetime as _dt
from typing import Iterable, Iterator, List, SupportsInt, TypeGuard

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


def _ms(value: _dt.datetime | SupportsInt) -> int:
    """Epoch milliseconds (floor) of a pushed timestamp literal."""
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.UTC)
        return (value - _EPOCH) // _dt.timedelta(milliseconds=1)
    return int(value)


def _max(a: int | None, b: int) -> int:
    return b if a is None else max(a, b)


def _min(a: int | None, b: int) -> int:
    return b if a is None else min(a, b)


def _int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _ints(values: tuple[object, ...]) -> list[int] | None:
    """``values`` when every one is an int, else None."""
    out = [v for v in values if _int(v)]
    return out if len(out) == len(values) else None


def _literal(f: Filter) -> object:
    """The literal a comparison filter holds (None for the filters without one)."""
    return getattr(f, "value", None)        # pyspark's filters: only some have a value


def apply_filters(filters: Iterable[Filter], pushed: PushedFilters) -> Iterator[Filter]:
    """Fold ``filters`` into ``pushed``; yield those Spark must still evaluate."""
    for f in filters:
        col = getattr(f, "attribute", None)     # pyspark's filters: And/Or/Not have none
        if isinstance(f, IsNotNull) and col in _NEVER_NULL:
            continue
        if col == ("offset",):
            exact = _push_offset(f, pushed)
        elif col == ("partition",):
            exact = _push_partition(f, pushed)
        elif col == ("topic",):
            exact = _push_topic(f, pushed)
        else:
            if col == ("timestamp",):
                _push_min_timestamp(f, pushed)
            exact = False
        if not exact:
            yield f


def _push_offset(f: Filter, pushed: PushedFilters) -> bool:
    """Fold a filter on ``offset``; True when it is applied exactly (``IN`` only prunes)."""
    if isinstance(f, In):
        values = _ints(f.value)
        if values:
            pushed.min_offset = _max(pushed.min_offset, min(values))
            pushed.max_offset = _min(pushed.max_offset, max(values) + 1)
        return False
    value = _literal(f)
    if not _int(value):
        return False
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
    else:
        return False
    return True


def _push_partition(f: Filter, pushed: PushedFilters) -> bool:
    """Fold a filter on ``partition``; True when it is applied exactly."""
    if isinstance(f, In):
        values = _ints(f.value)
        if values is None:
            return False
        _restrict_partitions(pushed, set(values))
        return True
    value = _literal(f)
    if not _int(value):
        return False
    if isinstance(f, (EqualTo, EqualNullSafe)):
        _restrict_partitions(pushed, {value})
    elif isinstance(f, GreaterThan):
        pushed.min_partition = _max(pushed.min_partition, value + 1)
    elif isinstance(f, GreaterThanOrEqual):
        pushed.min_partition = _max(pushed.min_partition, value)
    elif isinstance(f, LessThan):
        pushed.max_partition = _min(pushed.max_partition, value - 1)
    elif isinstance(f, LessThanOrEqual):
        pushed.max_partition = _min(pushed.max_partition, value)
    else:
        return False
    return True


def _push_topic(f: Filter, pushed: PushedFilters) -> bool:
    """Fold ``=`` / ``IN`` on ``topic``; True when applied (every literal is a string)."""
    if isinstance(f, In):
        literals: set[object] = set(f.value)
    elif isinstance(f, (EqualTo, EqualNullSafe)):
        literals = {f.value}
    else:
        return False
    names = {n for n in literals if isinstance(n, str)}
    if len(names) != len(literals):
        return False
    pushed.topics = names if pushed.topics is None else pushed.topics & names
    return True


def _push_min_timestamp(f: Filter, pushed: PushedFilters) -> None:
    """A lower bound on ``timestamp`` prunes (Spark still evaluates the filter)."""
    if isinstance(f, (GreaterThan, GreaterThanOrEqual, EqualTo, EqualNullSafe)) and f.value is not None:
        pushed.min_timestamp = _max(pushed.min_timestamp, _ms(f.value))


def _restrict_partitions(pushed: PushedFilters, values: set[int]) -> None:
    pushed.partitions = values if pushed.partitions is None else pushed.partitions & values


def describe(pushed: PushedFilters) -> List[str]:
    """Human-readable summary (for logs and tests)."""
    return [f"{k}={v}" for k, v in vars(pushed).items() if v is not None]
