"""Distributed jobs over a data directory: compaction + retention of many partitions, statistics.

:func:`compact` runs the real cleaner (:mod:`kafkalog.cleaner`) on every selected partition as one
Spark job, partitions cleaned in parallel by executors:

1. The driver opens the data directory with :class:`~kafkalog.log.manager.LogManager` (taking
   ``.lock`` for the whole job, so no other writer or broker can open it; recovering it and any
   unfinished Spark commit), reads each partition's first dirty offset from
   ``cleaner-offset-checkpoint`` and its first uncleanable offset (the cleaner's
   ``cleanable_offsets``: last stable offset, active segment, ``min.compaction.lag.ms``), then
   closes the partition logs (cleanly) so executors can open them.
2. A partition whose dirty section has more offsets than the cleaner's offset map can hold
   (``dedupe_buffer_size / 24 * load factor``) gets its offset map from Spark: a groupBy over
   ``(topic, partition, key) -> max(offset)`` of the dirty section, read with
   ``read_committed`` (aborted records never win a key, as in Kafka's map) and null keys dropped.
   Such a partition is then cleaned in **one pass** with a map sized to its keys - Kafka's own
   cleaner needs one round per map-full of keys (and rewrites the whole log each round).
3. Each task (``groupBy(topic, partition).applyInArrow``) opens its partition's
   :class:`~kafkalog.log.log.Log`, runs :class:`kafkalog.cleaner.Cleaner` rounds until the
   cleanable range is done (same filter, delete horizons, transaction and producer-state rules,
   ``.cleaned``/``.swap`` crash safety as the local cleaner), then retention
   (``kafkalog.log.retention.delete_old_segments``), closes the log and reports.
4. The driver writes the new first dirty offsets to ``cleaner-offset-checkpoint`` and the new log
   start offsets, and closes the data directory cleanly.

:func:`stats` returns a DataFrame per topic-partition: records, bytes on disk, key cardinality,
dirty ratio and timestamp range.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, Iterable, List, Optional, Sequence, Tuple, TypedDict

from kafkalog.errors import CleanerError
from kafkalog.log.naming import TopicPartition

if TYPE_CHECKING:
    from kafkalog.cleaner import Cleaner, CleanerConfig
    from kafkalog.cleaner.stats import CleanerStats
    from kafkalog.log.config import LogConfig
    from kafkalog.log.log import Log
    from kafkalog.log.manager import LogManager


@dataclass
class PartitionPlan:
    """What an executor needs to clean one partition (pickled into the task)."""
    topic: str
    partition: int
    path: str
    config: LogConfig
    log_start_offset: int
    recovery_point: int
    first_dirty_offset: int
    first_uncleanable_offset: int
    compacted: bool
    spark_offset_map: bool


def _is_compacted(config: LogConfig) -> bool:
    return config.compact


class _ExternalMapCleaner:
    """Factory of a :class:`kafkalog.cleaner.Cleaner` whose offset map comes from Spark instead of
    a scan of the dirty section (the cleaner's ``build_offset_map`` hook)."""

    @staticmethod
    def create(keys: Sequence[bytes], offsets: Sequence[int], end: int,
               cleaner_config: CleanerConfig) -> Cleaner:
        from kafkalog.cleaner import Cleaner, SkimpyOffsetMap

        class SparkMapCleaner(Cleaner):
            def build_offset_map(self, log: Log, tp: TopicPartition, start: int, end_: int,
                                 stats: CleanerStats) -> None:
                m = self.offset_map
                m.clear()
                for k, o in zip(keys, offsets):
                    m.put(k, o)
                m.update_latest_offset(end - 1)
                stats.distinct_keys = m.entries
                stats.buffer_utilization = m.utilization

        lf = cleaner_config.dedupe_buffer_load_factor
        memory = max(int(len(keys) / lf * 24) + 24 * 64, 24 * 64)
        return SparkMapCleaner(SkimpyOffsetMap(memory, lf),
                               io_buffer_size=cleaner_config.io_buffer_per_thread,
                               max_io_buffer_size=cleaner_config.max_message_size)


class PartitionResult(TypedDict):
    """What cleaning one partition reports (one row of :func:`compact`'s result)."""

    topic: str
    partition: int
    mode: str                       # "retention", "cleaner" or "spark-offset-map"
    rounds: int
    first_dirty_offset: int
    end_offset: Optional[int]       # the new first dirty offset (None: not compacted, or failed)
    log_start_offset: int
    bytes_before: int
    bytes_after: Optional[int]
    segments_deleted: int
    error: Optional[str]


def clean_partition(plan: PartitionPlan, cleaner_config: CleanerConfig, keys: Optional[Sequence[bytes]] = None,
                    offsets: Optional[Sequence[int]] = None, max_rounds: int = 1000) -> PartitionResult:
    """Executor side: clean (when compacted) and apply retention to one partition (``keys`` and
    their latest ``offsets``, the offset map Spark computed, come together or not at all)."""
    if (keys is None) != (offsets is None):
        raise TypeError("clean_partition: keys and offsets are given together or not at all")
    from kafkalog.cleaner import Cleaner, SkimpyOffsetMap
    from kafkalog.cleaner.manager import cleanable_offsets, log_to_clean
    from kafkalog.log.log import Log
    from kafkalog.log.retention import delete_old_segments

    log = Log.open(plan.path, plan.config, log_start_offset=plan.log_start_offset,
                   recovery_point=plan.recovery_point, had_clean_shutdown=True)
    out: PartitionResult = {"topic": plan.topic, "partition": plan.partition, "mode": "retention", "rounds": 0,
                            "first_dirty_offset": plan.first_dirty_offset, "end_offset": None,
                            "log_start_offset": log.log_start_offset, "bytes_before": log.size,
                            "bytes_after": None, "segments_deleted": 0, "error": None}
    try:
        tp = TopicPartition(plan.topic, plan.partition)
        if plan.compacted:
            now = int(time.time() * 1000)
            first_dirty = plan.first_dirty_offset
            if keys is not None and offsets is not None:
                out["mode"] = "spark-offset-map"
                cleaner = _ExternalMapCleaner.create(keys, offsets, plan.first_uncleanable_offset,
                                                     cleaner_config)
            else:
                out["mode"] = "cleaner"
                cleaner = Cleaner(SkimpyOffsetMap(cleaner_config.dedupe_buffer_size,
                                                  cleaner_config.dedupe_buffer_load_factor),
                                  io_buffer_size=cleaner_config.io_buffer_per_thread,
                                  max_io_buffer_size=cleaner_config.max_message_size)
            for _ in range(1 if keys is not None else max_rounds):
                fd, uncleanable, _force = cleanable_offsets(log, first_dirty, now)
                if keys is not None:
                    uncleanable = min(uncleanable, plan.first_uncleanable_offset)
                ltc = log_to_clean(tp, log, fd, uncleanable)
                if ltc.cleanable_bytes <= 0 and ltc.first_uncleanable_offset <= fd:
                    first_dirty = fd
                    break
                end, _stats = cleaner.clean(ltc)
                out["rounds"] += 1
                if end <= fd < ltc.first_uncleanable_offset:
                    raise CleanerError(f"The offset map ({cleaner.offset_map.memory} bytes) cannot "
                                       f"hold a single record of the dirty section at offset {fd}",
                                       file=plan.path)
                first_dirty = end
                if end >= ltc.first_uncleanable_offset:
                    break
            out["end_offset"] = first_dirty
        retention = delete_old_segments(log)
        out["segments_deleted"] = retention.num_deleted
        out["log_start_offset"] = log.log_start_offset
    except Exception as err:
        out["error"] = f"{type(err).__name__}: {err}"
    finally:
        log.close()
    out["bytes_after"] = sum(os.path.getsize(os.path.join(plan.path, n))
                             for n in os.listdir(plan.path) if n.endswith(".log"))
    return out


def _plan(mgr: LogManager, topics: Optional[Iterable[str]], map_capacity: int, spark_offset_map: Optional[bool]
          ) -> List[PartitionPlan]:
    from kafkalog.cleaner.manager import cleanable_offsets
    from kafkalog.spark.log_view import read_cleaner_checkpoint
    wanted = set(topics) if topics is not None else None
    checkpoint = read_cleaner_checkpoint(mgr.data_dir)
    now = int(time.time() * 1000)
    plans = []
    for tp, log in mgr.logs():
        if wanted is not None and tp.topic not in wanted:
            continue
        compacted = _is_compacted(log.config)
        first_dirty, uncleanable = log.log_start_offset, log.log_start_offset
        if compacted:
            first_dirty, uncleanable, _ = cleanable_offsets(
                log, checkpoint.get((tp.topic, tp.partition)), now)
        dirty = uncleanable - first_dirty
        use_spark = compacted and dirty > 0 and (
            spark_offset_map if spark_offset_map is not None else dirty > map_capacity)
        plans.append(PartitionPlan(tp.topic, tp.partition, log.dir, log.config, log.log_start_offset,
                                   log.recovery_point, first_dirty, uncleanable, compacted, use_spark))
    return plans


def compact(spark, data_dir: str, topics: Optional[Iterable[str]] = None, *,
            dedupe_buffer_size: Optional[int] = None, spark_offset_map: Optional[bool] = None,
            broker_config: Optional[dict] = None):
    """Compact (``cleanup.policy`` with ``compact``) and apply retention to every partition of
    ``data_dir`` (or of ``topics``) as one Spark job; returns a list of per-partition result dicts
    (``mode``: ``cleaner`` / ``spark-offset-map`` / ``retention``; ``error`` when a partition
    failed, the others are still done).

    ``dedupe_buffer_size`` is the cleaner's offset-map memory per task (default
    ``log.cleaner.dedupe.buffer.size``, 128 MiB). ``spark_offset_map``: None (default) computes
    the offset map with Spark only for partitions whose dirty section may not fit that memory;
    True/False forces it for every/no compacted partition.
    """
    from pyspark.sql import functions as F

    from kafkalog.cleaner import CleanerConfig
    from kafkalog.log.checkpoint import CLEANER_OFFSET_CHECKPOINT_FILE, OffsetCheckpointFile
    from kafkalog.log.manager import LogManager
    from kafkalog.spark import register
    from kafkalog.spark.commit import recover

    register(spark)
    mgr = LogManager(data_dir, broker_config, background=False)
    try:
        recover(mgr)
        ccfg = CleanerConfig.from_broker(mgr.broker_config)
        if dedupe_buffer_size is not None:
            ccfg = dataclasses.replace(ccfg, dedupe_buffer_size=int(dedupe_buffer_size))
        capacity = int(ccfg.dedupe_buffer_size // 24 * ccfg.dedupe_buffer_load_factor)
        plans = _plan(mgr, topics, capacity, spark_offset_map)
        if not plans:
            return []
        for p in plans:  # executors open these partitions; the driver keeps only the lock
            mgr.get_log(p.topic, p.partition).close()
        by_tp = {(p.topic, p.partition): p for p in plans}

        marker = spark.createDataFrame(
            [(p.topic, p.partition, None, None) for p in plans],
            "topic string, partition int, key binary, offset long")
        big = [p for p in plans if p.spark_offset_map]
        frames = marker
        if big:
            assign: Dict[str, List[int]] = {}
            starts: Dict[str, Dict[str, int]] = {}
            ends: Dict[str, Dict[str, int]] = {}
            for p in big:
                assign.setdefault(p.topic, []).append(p.partition)
                starts.setdefault(p.topic, {})[str(p.partition)] = p.first_dirty_offset
                ends.setdefault(p.topic, {})[str(p.partition)] = p.first_uncleanable_offset
            latest = (spark.read.format("kafkalog").option("assign", json.dumps(assign))
                      .option("startingOffsets", json.dumps(starts))
                      .option("endingOffsets", json.dumps(ends))
                      .option("kafka.isolation.level", "read_committed")
                      .option("failOnDataLoss", "false").load(data_dir)
                      .where(F.col("key").isNotNull())
                      .groupBy("topic", "partition", "key").agg(F.max("offset").alias("offset")))
            frames = marker.unionByName(latest)

        def clean_groups(rows):
            # rows of one task, sorted by (topic, partition): one group per topic-partition
            # (pandas-free: Spark's applyInArrow/mapInArrow need pandas, the RDD API does not)
            current: Optional[Tuple[str, int]] = None
            keys: List[bytes] = []
            offsets: List[int] = []
            for row in rows:
                tp = (row[0], row[1])
                if tp != current:
                    if current is not None:
                        yield _clean_one(by_tp[current], ccfg, keys, offsets)
                    current, keys, offsets = tp, [], []
                if row[2] is not None:
                    keys.append(bytes(row[2]))
                    offsets.append(row[3])
            if current is not None:
                yield _clean_one(by_tp[current], ccfg, keys, offsets)

        results = (frames.repartition(len(plans), "topic", "partition")
                   .sortWithinPartitions("topic", "partition").rdd
                   .mapPartitions(clean_groups).collect())

        cp = OffsetCheckpointFile(os.path.join(mgr.data_dir, CLEANER_OFFSET_CHECKPOINT_FILE))
        current = {(tp[0], tp[1]): off for tp, off in cp.read().items()}
        for r in results:
            tp = (r["topic"], r["partition"])
            if r["end_offset"] is not None and r["error"] is None:
                current[tp] = r["end_offset"]
            log = mgr.get_log(*tp)
            log.log_start_offset = max(log.log_start_offset, r["log_start_offset"])
        cp.write(current)
        return sorted(results, key=lambda r: (r["topic"], r["partition"]))
    finally:
        mgr.close()


def _clean_one(plan: PartitionPlan, ccfg: CleanerConfig, keys: List[bytes], offsets: List[int]) -> PartitionResult:
    if plan.spark_offset_map:
        return clean_partition(plan, ccfg, keys, offsets)
    return clean_partition(plan, ccfg)


def stats(spark, data_dir: str, topics: Optional[Iterable[str]] = None):
    """A DataFrame with one row per topic-partition: ``records``, ``bytes`` (on disk, ``.log``
    files), ``keys`` (exact distinct non-null keys), ``null_keys``, ``first_offset``,
    ``log_end_offset``, ``dirty_ratio`` (bytes past the ``cleaner-offset-checkpoint``, excluding
    the active segment, over all bytes: Kafka's cleanable ratio), ``min_timestamp``,
    ``max_timestamp``. Reads the data directory without locking it."""
    from pyspark.sql import functions as F

    from kafkalog.spark import register
    from kafkalog.spark.log_view import (
        list_partitions,
        partition_bounds,
        read_cleaner_checkpoint,
        read_log_start_checkpoint,
        segment_bases,
        segment_path,
    )

    register(spark)
    wanted = set(topics) if topics is not None else None
    cleaner_cp = read_cleaner_checkpoint(data_dir)
    start_cp = read_log_start_checkpoint(data_dir)
    disk = []
    for pdir in list_partitions(data_dir):
        if wanted is not None and pdir.topic not in wanted:
            continue
        bases = segment_bases(pdir.path)
        sizes = [os.path.getsize(segment_path(pdir.path, b)) for b in bases]
        bounds = partition_bounds(pdir, start_cp)
        first_dirty = cleaner_cp.get((pdir.topic, pdir.partition), bounds.log_start_offset)
        dirty = sum(s for b, s, nxt in zip(bases, sizes, bases[1:] + [None])
                    if nxt is not None and nxt > first_dirty)
        total = sum(sizes)
        disk.append((pdir.topic, pdir.partition, total, bounds.log_start_offset,
                     bounds.log_end_offset, dirty / total if total else 0.0))
    disk_df = spark.createDataFrame(disk, "topic string, partition int, bytes long, "
                                          "first_offset long, log_end_offset long, "
                                          "dirty_ratio double")
    names = sorted({d[0] for d in disk})
    if not names:
        return disk_df.withColumn("records", F.lit(0).cast("long"))
    records = (spark.read.format("kafkalog").option("subscribe", ",".join(names))
               .option("failOnDataLoss", "false").load(data_dir)
               .groupBy("topic", "partition")
               .agg(F.count(F.lit(1)).alias("records"),
                    F.countDistinct("key").alias("keys"),
                    F.sum(F.col("key").isNull().cast("long")).alias("null_keys"),
                    F.min("timestamp").alias("min_timestamp"),
                    F.max("timestamp").alias("max_timestamp")))
    return (disk_df.join(records, ["topic", "partition"], "left")
            .fillna(0, ["records", "keys", "null_keys"])
            .select("topic", "partition", "records", "bytes", "keys", "null_keys", "first_offset",
                    "log_end_offset", "dirty_ratio", "min_timestamp", "max_timestamp")
            .orderBy("topic", "partition"))
