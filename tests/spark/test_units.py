"""Spark-free checks of the source's building blocks: options, schema, decode, planning."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_schema

from kafkalog.spark.log_view import PartitionDir, partition_bounds
from kafkalog.spark.options import InvalidOptionError, parse_read_options, parse_write_options
from kafkalog.spark.planning import OffsetRange, plan_tasks
from kafkalog.spark.schema import source_arrow_schema, source_schema
from kafkalog.spark.segment_reader import read_range

from .helpers import VECTORS, make_partition, vector_bytes


@pytest.mark.parametrize("headers", [False, True])
def test_arrow_schema_is_what_spark_checks(headers):
    expected = to_arrow_schema(source_schema(headers), timezone="UTC")
    got = source_arrow_schema(headers)
    assert [f.name for f in got] == [f.name for f in expected]
    for a, b in zip(got, expected):
        assert a.nullable == b.nullable
        if not pa.types.is_list(a.type):
            assert a.type == b.type


def test_options_validation():
    ok = parse_read_options({"path": "/d", "subscribe": "a,b",
                             "startingOffsets": '{"a":{"0":5,"1":-2}}',
                             "kafka.isolation.level": "read_committed"})
    assert ok.subscribe == ("a", "b") and ok.read_committed
    assert not parse_read_options({"path": "/d", "subscribe": "a"}).read_committed
    assert parse_read_options({"path": "/d", "subscribe": "a",
                               "kafka.isolation.level": "READ_COMMITTED"}).read_committed
    with pytest.raises(InvalidOptionError, match="'read_uncommitted' or 'read_committed', got 'committed'"):
        parse_read_options({"path": "/d", "subscribe": "a", "kafka.isolation.level": "committed"})
    assert ok.starting.offsets[("a", 0)] == 5
    with pytest.raises(InvalidOptionError, match="exactly one"):
        parse_read_options({"path": "/d", "subscribe": "a", "assign": '{"a":[0]}'})
    with pytest.raises(InvalidOptionError, match="latest"):
        parse_read_options({"path": "/d", "subscribe": "a", "startingOffsets": "latest"})
    with pytest.raises(InvalidOptionError, match="not valid JSON"):
        parse_read_options({"path": "/d", "subscribe": "a", "endingOffsets": "{bad"})
    with pytest.raises(InvalidOptionError, match="minPartitions"):
        parse_read_options({"path": "/d", "subscribe": "a", "minPartitions": "0"})
    with pytest.raises(InvalidOptionError, match="compression"):
        parse_write_options({"path": "/d", "kafka.compression.type": "brotli"})
    w = parse_write_options({"path": "/d", "topic.cleanup.policy": "compact", "partitions": "4"})
    assert w.topic_config_dict == {"cleanup.policy": "compact"} and w.partitions == 4


def test_read_range_matches_oracle_and_filters_offsets(tmp_path):
    for name in ("v2-none", "v2-zstd", "v1-gzip", "v0-snappy", "v2-mixed-segment", "v2-offset-gaps"):
        make_partition(str(tmp_path), name, 0, vector_bytes(name))
        pdir = PartitionDir(name, 0, str(tmp_path / f"{name}-0"))
        b = partition_bounds(pdir)
        rows = [r for rb in read_range(pdir, b.log_start_offset, b.log_end_offset) for r in rb.to_pylist()]
        expected = [json.loads(line) for line in open(os.path.join(VECTORS, name + ".oracle.jsonl"))]
        expected = [e for e in expected if e["type"] == "record"]
        assert [r["offset"] for r in rows] == [e["offset"] for e in expected]
        assert [None if r["value"] is None else r["value"].hex() for r in rows] == \
            [e.get("value") for e in expected]
        sub = [r["offset"] for rb in read_range(pdir, expected[1]["offset"], expected[-1]["offset"])
               for r in rb.to_pylist()]
        assert sub == [e["offset"] for e in expected[1:-1]]


def test_planning_packs_small_and_splits_large():
    small = [OffsetRange("t", p, "/x", 0, 10) for p in range(8)]
    assert len(plan_tasks(small)) == 1
    big = [OffsetRange("t", 0, "/x", 0, 1_000_000), OffsetRange("t", 1, "/x", 0, 10)]
    tasks = plan_tasks(big, min_partitions=4)
    covered = sorted((r.partition, r.start, r.end) for t in tasks for r in t.ranges)
    assert 4 <= len(tasks) <= 6
    assert sum(e - s for p, s, e in covered if p == 0) == 1_000_000
    assert covered[0][1] == 0
