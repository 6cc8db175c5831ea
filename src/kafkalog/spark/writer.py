"""Batch sink of the ``kafkalog`` format: Spark's Kafka sink schema into a data directory.

Commit protocol (a write is atomic per job):

1. ``writer()`` (driver) picks a job id; staging lives in ``<DATA_DIR>/.kafkalog-staging/<job-id>/``.
2. Each task (executor) groups its rows by topic-partition (Kafka's murmur2 partitioner for rows
   with a key and no partition; one sticky partition per input batch for rows with neither),
   encodes v2 batches and writes one staging file per topic-partition, then returns a
   :class:`StagedWrite` naming them. Retried or speculative attempts write other files, which
   nobody commits.
3. ``commit()`` (driver) creates missing topics with ``partitions`` partitions, appends the staged
   batches of each topic-partition in task order (rewriting base offsets only), and deletes the
   staging directory. If an append fails, every partition appended so far is truncated back.
4. ``abort()`` deletes the staging directory: a failed job leaves no data and no staging files.
"""

from __future__ import annotations

import os
import random
import shutil
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, StringType, StructType

from kafkalog.errors import InvalidRecordError
from kafkalog.spark.appender import (
    AppendResult, append_staged, ensure_partition_dir, truncate_partition,
)
from kafkalog.spark.batch_encoding import build_v2_batch, partition_for_key, split_batches
from kafkalog.spark.log_files import list_partitions
from kafkalog.spark.options import InvalidOptionError, WriteOptions, parse_write_options

STAGING_DIR = ".kafkalog-staging"


@dataclass(frozen=True)
class StagedFile:
    topic: str
    partition: int
    path: str
    records: int


@dataclass
class StagedWrite(WriterCommitMessage):
    """What one task staged."""
    files: List[StagedFile] = field(default_factory=list)


def validate_sink_schema(schema: StructType, opts: WriteOptions) -> None:
    """Spark's Kafka sink rules (``KafkaWriter.validateQuery``) with clear errors."""
    names = {f.name.lower(): f for f in schema.fields}
    if "value" not in names:
        raise InvalidOptionError("required attribute 'value' not found in the DataFrame")
    for col in ("key", "value"):
        if col in names and not isinstance(names[col].dataType, (BinaryType, StringType)):
            raise InvalidOptionError(f"{col} attribute type must be a string or binary, got "
                                     f"{names[col].dataType.simpleString()}")
    if opts.topic is None and "topic" not in names:
        raise InvalidOptionError("topic option required when no 'topic' attribute is present; "
                                 "use the option 'topic'")
    if "partition" in names and names["partition"].dataType.simpleString() != "int":
        raise InvalidOptionError("partition attribute type must be an int, got "
                                 f"{names['partition'].dataType.simpleString()}")


def topic_partition_counts(data_dir: str) -> Dict[str, int]:
    """Number of partitions of every topic of a data directory (highest partition + 1)."""
    counts: Dict[str, int] = {}
    if os.path.isdir(data_dir):
        for p in list_partitions(data_dir):
            counts[p.topic] = max(counts.get(p.topic, 0), p.partition + 1)
    return counts


def _as_bytes(value) -> Optional[bytes]:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    return bytes(value)


class RowGrouper:
    """Assigns rows to topic-partitions and encodes them into staging files."""

    def __init__(self, opts: WriteOptions, staging_dir: str, task_tag: str) -> None:
        self.opts = opts
        self.staging_dir = staging_dir
        self.task_tag = task_tag
        self.counts = topic_partition_counts(opts.path)
        self.pending: Dict[Tuple[str, int], list] = defaultdict(list)
        self.files: Dict[Tuple[str, int], StagedFile] = {}
        self.rng = random.Random()

    def num_partitions(self, topic: str) -> int:
        return self.counts.get(topic) or self.opts.partitions

    def add_batch(self, batch: pa.RecordBatch) -> None:
        n = batch.num_rows
        if not n:
            return
        cols = {name.lower(): batch.column(i) for i, name in enumerate(batch.schema.names)}
        values = cols["value"].to_pylist()
        keys = cols["key"].to_pylist() if "key" in cols else [None] * n
        if self.opts.topic is not None:
            topics = None
        else:
            topics = cols["topic"].to_pylist()
        parts = cols["partition"].to_pylist() if "partition" in cols else [None] * n
        headers = (cols["headers"].to_pylist() if "headers" in cols and self.opts.include_headers
                   else None)
        if "timestamp" in cols:
            ts_col = cols["timestamp"].cast(pa.int64()).to_pylist()
            timestamps = [None if t is None else t // 1000 for t in ts_col]
        else:
            timestamps = None
        now_ms = int(__import__("time").time() * 1000)
        sticky: Dict[str, int] = {}
        for i in range(n):
            topic = self.opts.topic if topics is None else topics[i]
            if topic is None:
                raise InvalidRecordError("null topic present in the data; use the option 'topic' "
                                         "or give every row a topic")
            count = self.num_partitions(topic)
            key = _as_bytes(keys[i])
            part = parts[i]
            if part is None:
                if key is not None:
                    part = partition_for_key(key, count)
                else:
                    part = sticky.get(topic)
                    if part is None:
                        part = sticky[topic] = self.rng.randrange(count)
            elif not 0 <= part < count:
                raise InvalidOptionError(f"partition {part} of topic {topic!r} does not exist "
                                         f"(the topic has {count} partitions)")
            hdrs = None
            if headers is not None and headers[i]:
                hdrs = [(h["key"], _as_bytes(h["value"])) for h in headers[i]]
            ts = now_ms if timestamps is None or timestamps[i] is None else timestamps[i]
            self.pending[(topic, part)].append((key, _as_bytes(values[i]), ts, hdrs))
        self._spill()

    def _spill(self, force: bool = False) -> None:
        for tp, records in list(self.pending.items()):
            if not records:
                continue
            if not force and len(records) < 4096:
                continue
            self._write(tp, records)
            self.pending[tp] = []

    def _write(self, tp: Tuple[str, int], records: list) -> None:
        staged = self.files.get(tp)
        if staged is None:
            path = os.path.join(self.staging_dir, f"{tp[0]}-{tp[1]}", f"{self.task_tag}.batches")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            staged = StagedFile(tp[0], tp[1], path, 0)
        with open(staged.path, "ab") as out:
            for group in split_batches(records, self.opts.batch_size):
                out.write(build_v2_batch(group, self.opts.compression_type))
        self.files[tp] = StagedFile(tp[0], tp[1], staged.path, staged.records + len(records))

    def finish(self) -> StagedWrite:
        self._spill(force=True)
        for staged in self.files.values():
            with open(staged.path, "rb+") as f:
                os.fsync(f.fileno())
        return StagedWrite(sorted(self.files.values(), key=lambda s: (s.topic, s.partition)))


def commit_staged(opts: WriteOptions, messages: Sequence[Optional[StagedWrite]],
                  staging_dir: str) -> Dict[Tuple[str, int], AppendResult]:
    """Append everything staged by ``messages`` (task order) to the logs; all or nothing."""
    by_tp: Dict[Tuple[str, int], List[str]] = defaultdict(list)
    for msg in messages:
        if msg is None:
            continue
        for f in msg.files:
            by_tp[(f.topic, f.partition)].append(f.path)
    counts = topic_partition_counts(opts.path)
    done: Dict[Tuple[str, int], AppendResult] = {}
    try:
        for topic in sorted({t for t, _ in by_tp}):
            if topic not in counts:  # create the topic with all its partitions
                for p in range(opts.partitions):
                    ensure_partition_dir(opts.path, topic, p)
        segment_bytes = int(opts.topic_config_dict.get("segment.bytes", 1 << 30))
        for tp in sorted(by_tp):
            pdir = ensure_partition_dir(opts.path, *tp)
            done[tp] = append_staged(pdir, by_tp[tp], segment_bytes=segment_bytes)
    except BaseException:
        for result in done.values():
            truncate_partition(result)
        raise
    finally:
        shutil.rmtree(staging_dir, ignore_errors=True)
        _remove_if_empty(os.path.dirname(staging_dir))
    return done


def _remove_if_empty(path: str) -> None:
    try:
        os.rmdir(path)
    except OSError:
        pass


class KafkalogArrowWriter(DataSourceArrowWriter):
    """``df.write.format("kafkalog").option("topic", "orders").mode("append").save(DATA_DIR)``."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.opts = parse_write_options(options)
        validate_sink_schema(schema, self.opts)
        self.job_id = uuid.uuid4().hex
        self.staging_dir = os.path.join(self.opts.path, STAGING_DIR, self.job_id)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedWrite:
        from pyspark import TaskContext
        ctx = TaskContext.get()
        tag = (f"{ctx.partitionId():05d}-{ctx.attemptNumber()}-{uuid.uuid4().hex[:8]}" if ctx
               else uuid.uuid4().hex)
        grouper = RowGrouper(self.opts, self.staging_dir, tag)
        for batch in iterator:
            grouper.add_batch(batch)
        return grouper.finish()

    def commit(self, messages: List[Optional[StagedWrite]]) -> None:
        commit_staged(self.opts, messages, self.staging_dir)

    def abort(self, messages: List[Optional[StagedWrite]]) -> None:
        # Tasks of a failed job that are still being killed may stage files after the first
        # removal: sweep a few times.
        import time
        for attempt in range(4):
            if attempt:
                time.sleep(1.0)
            shutil.rmtree(self.staging_dir, ignore_errors=True)
        _remove_if_empty(os.path.dirname(self.staging_dir))
