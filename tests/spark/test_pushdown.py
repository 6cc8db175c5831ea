"""Spark-free checks of the pushed-filter translation (``kafkalog.spark.pushdown``): which filters
are applied exactly (and not returned to Spark), which only prune, and which are left alone."""

from __future__ import annotations

import datetime as dt

from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    StringStartsWith,
)

from kafkalog.spark.planning import PushedFilters
from kafkalog.spark.pushdown import apply_filters, describe


def _apply(*filters):
    pushed = PushedFilters()
    return pushed, list(apply_filters(list(filters), pushed))


def test_offset_comparisons_are_exact():
    pushed, rest = _apply(GreaterThan(("offset",), 4), LessThanOrEqual(("offset",), 10),
                          GreaterThanOrEqual(("offset",), 3), LessThan(("offset",), 12))
    assert rest == []
    assert (pushed.min_offset, pushed.max_offset) == (5, 11)
    pushed, rest = _apply(EqualTo(("offset",), 7))
    assert rest == [] and (pushed.min_offset, pushed.max_offset) == (7, 8)
    pushed, rest = _apply(EqualNullSafe(("offset",), 7), EqualTo(("offset",), 9))
    assert rest == [] and (pushed.min_offset, pushed.max_offset) == (9, 8)   # empty range


def test_offset_in_prunes_and_is_returned():
    f = In(("offset",), (9, 3, 5))
    pushed, rest = _apply(f)
    assert rest == [f] and (pushed.min_offset, pushed.max_offset) == (3, 10)
    for odd in (In(("offset",), ()), In(("offset",), (1, "2")), In(("offset",), (True,))):
        pushed, rest = _apply(odd)
        assert rest == [odd] and (pushed.min_offset, pushed.max_offset) == (None, None)


def test_non_integer_offset_literals_are_left_to_spark():
    filters = [EqualTo(("offset",), "7"), GreaterThan(("offset",), 1.5), EqualTo(("offset",), True),
               IsNull(("offset",))]
    pushed, rest = _apply(*filters)
    assert rest == filters and describe(pushed) == []


def test_partition_filters():
    pushed, rest = _apply(In(("partition",), (0, 1, 2, 5)), EqualTo(("partition",), 2))
    assert rest == [] and pushed.partitions == {2}
    pushed, rest = _apply(GreaterThan(("partition",), 0), LessThan(("partition",), 4),
                          GreaterThanOrEqual(("partition",), 0), LessThanOrEqual(("partition",), 6))
    assert rest == [] and (pushed.min_partition, pushed.max_partition) == (1, 3)
    pushed, rest = _apply(In(("partition",), ()))
    assert rest == [] and pushed.partitions == set()
    odd = [In(("partition",), (1, None)), EqualTo(("partition",), "1"),
           StringStartsWith(("partition",), "1")]
    pushed, rest = _apply(*odd)
    assert rest == odd and describe(pushed) == []


def test_topic_filters():
    pushed, rest = _apply(In(("topic",), ("a", "b", "c")), EqualNullSafe(("topic",), "b"))
    assert rest == [] and pushed.topics == {"b"}
    odd = [In(("topic",), ("a", 1)), EqualTo(("topic",), 1), GreaterThan(("topic",), "a")]
    pushed, rest = _apply(*odd)
    assert rest == odd and describe(pushed) == []


def test_timestamp_lower_bounds_prune_and_are_returned():
    t = dt.datetime(2024, 1, 2, 3, 4, 5, 678_999)
    filters = [GreaterThan(("timestamp",), t), GreaterThanOrEqual(("timestamp",), 1000),
               LessThan(("timestamp",), t), EqualTo(("timestamp",), None)]
    pushed, rest = _apply(*filters)
    assert rest == filters
    aware = t.replace(tzinfo=dt.UTC)
    assert pushed.min_timestamp == int(aware.timestamp() * 1000)


def test_is_not_null_on_metadata_columns_is_dropped():
    keep = [IsNotNull(("key",)), IsNotNull(("value",))]
    pushed, rest = _apply(IsNotNull(("topic",)), IsNotNull(("offset",)),
                          IsNotNull(("timestampType",)), *keep)
    assert rest == keep and describe(pushed) == []
