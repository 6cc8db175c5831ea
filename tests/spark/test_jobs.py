"""Distributed compaction/retention and statistics jobs (kafkalog.spark.jobs) on real files."""

from __future__ import annotations

import os
import shutil

from kafkalog.cleaner import compact_data_dir
from kafkalog.record.records import iter_batches
from kafkalog.spark import jobs
from kafkalog.spark.log_view import list_partitions, read_cleaner_checkpoint, segment_bases


def _write_keyed(spark, path, topic, n, keys, partitions=2, config=None):
    w = (spark.range(n).selectExpr(f"cast(concat('key-', id % {keys}) as binary) key",
                                   "cast(concat('v-', id) as binary) value")
         .write.format("kafkalog").option("topic", topic).option("partitions", partitions))
    for k, v in (config or {}).items():
        w = w.option(f"topic.{k}", v)
    w.mode("append").save(str(path))


def _records(partition_dir):
    out = []
    for base in segment_bases(partition_dir):
        with open(os.path.join(partition_dir, f"{base:020d}.log"), "rb") as f:
            data = f.read()
        for b in iter_batches(data):
            b.ensure_valid()
            out += [(r.offset, r.key, r.value) for r in b.records()]
    return out


COMPACT = {"cleanup.policy": "compact", "segment.bytes": "4096", "min.cleanable.dirty.ratio": "0.01"}


def test_compact_cleans_partitions_like_the_local_cleaner(spark, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _write_keyed(spark, a, "users", 3000, 40, config=COMPACT)
    _write_keyed(spark, a, "events", 500, 500, config={"segment.bytes": "4096"})  # delete policy
    shutil.copytree(a, b)
    before = {p.partition: _records(p.path) for p in list_partitions(str(a)) if p.topic == "users"}

    results = jobs.compact(spark, str(a))
    by_tp = {(r["topic"], r["partition"]): r for r in results}
    assert {r["mode"] for tp, r in by_tp.items() if tp[0] == "users"} == {"cleaner"}
    assert by_tp[("events", 0)]["mode"] == "retention"
    assert all(r["error"] is None for r in results)
    compact_data_dir(str(b))  # the local cleaner on an identical copy

    checkpoint = read_cleaner_checkpoint(str(a))
    for p in (p for p in list_partitions(str(a)) if p.topic == "users"):
        after = _records(p.path)
        latest = {}
        for off, k, v in before[p.partition]:
            latest[k] = (off, k, v)
        # every key keeps its latest record (the active segment may keep older ones too)
        assert set(latest.values()) <= set(after)
        assert len(after) < len(before[p.partition])
        assert after == _records(str(b / f"users-{p.partition}"))
        assert by_tp[("users", p.partition)]["bytes_after"] < by_tp[("users", p.partition)]["bytes_before"]
        assert checkpoint[("users", p.partition)] == by_tp[("users", p.partition)]["end_offset"] > 0
    # the data dir was closed cleanly by the job and reads back through Spark
    assert os.path.exists(a / ".kafka_cleanshutdown")
    n = spark.read.format("kafkalog").option("subscribe", "users").load(str(a)).count()
    assert n == sum(len(_records(p.path)) for p in list_partitions(str(a)) if p.topic == "users")


def test_compact_with_spark_offset_map_matches_cleaner(spark, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _write_keyed(spark, a, "big", 4000, 300, partitions=1, config=COMPACT)
    shutil.copytree(a, b)
    # a 24-entry offset map: Kafka's cleaner would need >10 rounds; Spark builds the map instead
    results = jobs.compact(spark, str(a), dedupe_buffer_size=24 * 32)
    assert [r["mode"] for r in results] == ["spark-offset-map"] and results[0]["rounds"] == 1
    assert results[0]["error"] is None
    compact_data_dir(str(b))
    assert _records(str(a / "big-0")) == _records(str(b / "big-0"))
    assert read_cleaner_checkpoint(str(a)) == read_cleaner_checkpoint(str(b))


def test_stats_per_partition(spark, tmp_path):
    _write_keyed(spark, tmp_path, "s", 1000, 10, partitions=2)
    rows = jobs.stats(spark, str(tmp_path)).collect()
    assert [(r.topic, r.partition) for r in rows] == [("s", 0), ("s", 1)]
    assert sum(r.records for r in rows) == 1000
    assert sum(r.keys for r in rows) == 10 and all(r.null_keys == 0 for r in rows)
    for r in rows:
        assert r.bytes == sum(os.path.getsize(os.path.join(tmp_path, f"s-{r.partition}", n))
                              for n in os.listdir(tmp_path / f"s-{r.partition}") if n.endswith(".log"))
        assert r.log_end_offset == r.records and r.first_offset == 0
        assert r.min_timestamp <= r.max_timestamp
        assert 0.0 <= r.dirty_ratio <= 1.0
