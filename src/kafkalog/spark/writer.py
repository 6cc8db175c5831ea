"""Batch sink of the ``kafkalog`` format: Spark's Kafka sink schema into a data directory.

1. ``writer()`` (driver) picks a job id; staging files are regular files at the data-directory
   root, ``<DATA_DIR>/.kafkalog-staging.<job-id>.<task>.<n>`` (never a subdirectory: a Kafka
   broker takes every subdirectory of a log dir for a partition and refuses names that are not
   ``<topic>-<partition>``; it ignores regular files).
2. Each task (executor) receives Arrow batches (``DataSourceArrowWriter``) and works on whole
   columns: Kafka's murmur2 partitioner runs over the key column in the kernel
   (``murmur2_partitions``), an explicit ``partition`` column wins, rows with neither go to one
   sticky partition per input batch (Kafka's sticky partitioner); rows are grouped per partition
   with Arrow compute, and the kernel encodes each group straight from the Arrow buffers into v2
   record bodies of about ``kafka.batch.size`` bytes (``encode_columns_v2``), which become
   producer batches (``kafkalog.record.builder.v2_header``, compressed with
   ``kafkalog.record.compression``) appended to one staging file per topic-partition. The task
   returns a :class:`StagedWrite` naming its files (and their topic-partition); a retried or
   speculative attempt writes other files, which nobody commits.
3. ``commit()`` (driver) publishes everything all-or-nothing (:mod:`kafkalog.spark.commit`) and
   deletes every staging file of the job.
4. ``abort()`` deletes every staging file of the job: a failed job leaves no data and no staging
   files.
"""

from __future__ import annotations

import mmap
import os
import random
import time
import uuid
from bisect import bisect_left
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, StringType, StructType

from kafkalog.errors import InvalidRecordError, KafkalogError
from kafkalog.log import fsutil
from kafkalog.log.config import LogConfig, parse_properties
from kafkalog.log.data_dir import NEW, check_data_dir
from kafkalog.log.naming import topic_config_file
from kafkalog.record.builder import v2_header
from kafkalog.record.compression import compress
from kafkalog.record.constants import PRODUCER_COMPRESSION_TYPES, RECORD_BATCH_OVERHEAD, CompressionType
from kafkalog.spark import kernel
from kafkalog.spark.commit import (  # noqa: F401 - re-exported
    STAGING_PREFIX,
    commit_staged,
    move_threshold,
    profile,
    remove_staging,
    remove_stale_staging,
    staging_files,
    staging_prefix,
)
from kafkalog.spark.log_view import list_partitions
from kafkalog.spark.options import InvalidOptionError, WriteOptions, parse_write_options

CODEC_IDS = {n: int(CompressionType.for_name(n)) for n in PRODUCER_COMPRESSION_TYPES}


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


def _binary_buffers(arr: Optional[pa.Array]):
    """``(validity, offsets, data, offset)`` of a binary/string Arrow array for the kernel."""
    if arr is None:
        return None
    if not pa.types.is_binary(arr.type):
        arr = arr.cast(pa.binary())
    if arr.null_count == len(arr):
        return None
    validity, offsets, data = arr.buffers()
    return (validity if arr.null_count else None, offsets, data, arr.offset)


def _timestamp_buffers(arr: Optional[pa.Array]):
    if arr is None or arr.null_count == len(arr):
        return None
    if not (pa.types.is_timestamp(arr.type) and arr.type.unit == "us"):
        arr = arr.cast(pa.timestamp("us", tz="UTC"))
    validity, data = arr.buffers()
    return (validity if arr.null_count else None, data, arr.offset)


def _headers(arr: Optional[pa.Array]) -> Optional[list]:
    if arr is None or arr.null_count == len(arr):
        return None
    def val(v):
        return v.encode("utf-8") if isinstance(v, str) else v
    return [None if not row else [(h["key"], val(h["value"])) for h in row]
            for row in arr.to_pylist()]


class ArrowStager:
    """Partitions Arrow batches of one task and encodes them into staging files."""

    def __init__(self, opts: WriteOptions, staging_prefix: str, task_tag: str) -> None:
        self.opts = opts
        self.staging_prefix = staging_prefix   # <DATA_DIR>/.kafkalog-staging.<job>
        self.task_tag = task_tag
        self.counts = topic_partition_counts(opts.path)
        self.codec = CODEC_IDS[opts.compression_type]
        self.staged: List[_OpenStaging] = []   # every staging file, in the order written
        self.current: Dict[Tuple[str, int], _OpenStaging] = {}  # the file each tp is writing
        self.rng = random.Random()
        self.flusher = fsutil.BackgroundFlusher()
        self.scratch = bytearray()             # record bodies of one encode call
        self._limits: Dict[str, Tuple[int, int]] = {}
        self.write_seconds = 0.0
        self.finish_seconds = 0.0

    def num_partitions(self, topic: str) -> int:
        return self.counts.get(topic) or self.opts.partitions

    def _topic_limits(self, topic: str) -> Tuple[int, int]:
        """``(max batch bytes, max staging file bytes)`` of ``topic``: batches of
        ``kafka.batch.size`` capped to fit ``max.message.bytes`` and ``segment.bytes`` (the
        persisted config of an existing topic, else the ``topic.*`` options), staging files of at
        most ``segment.bytes`` (each can become one segment at commit)."""
        cached = self._limits.get(topic)
        if cached is None:
            conf: Mapping[str, str] = {}
            if topic in self.counts:
                path = topic_config_file(self.opts.path, topic)
                if os.path.exists(path):
                    with open(path, encoding="utf-8") as f:
                        conf = parse_properties(f.read(1 << 20), file=path)
            else:
                conf = self.opts.topic_config_dict
            cfg = LogConfig(conf)
            segment_bytes = cfg.segment_bytes
            batch = min(self.opts.batch_size, cfg.max_message_bytes - RECORD_BATCH_OVERHEAD,
                        segment_bytes - RECORD_BATCH_OVERHEAD)
            cached = self._limits[topic] = (max(1, batch), segment_bytes)
        return cached

    def _no_such_partition(self, topic: str, partition: int, count: int) -> InvalidRecordError:
        """A row's ``partition`` column names a partition the topic does not have. Spark's Kafka
        sink hands the column to Kafka's producer, which waits ``max.block.ms`` for it and fails
        ("Partition 1 of topic t with partition count 1 is not present in metadata"); here the
        task fails at once, and the job commits nothing."""
        new = topic not in self.counts
        how = (f"this write creates the topic with the 'partitions' option's count ({count}; "
               f"default 1, Kafka's num.partitions)" if new else "the topic exists with that count")
        return InvalidRecordError(f"Partition {partition} of topic {topic} with partition count "
                                  f"{count} is not present: a row's 'partition' column names it "
                                  f"({how}); give .option('partitions', N) for a new topic, or drop "
                                  f"the column to place rows by key", file=self.opts.path)

    def max_batch_bytes(self, topic: str) -> int:
        return self._topic_limits(topic)[0]

    def add_batch(self, batch: pa.RecordBatch) -> None:
        if not batch.num_rows:
            return
        cols = {name.lower(): batch.column(i) for i, name in enumerate(batch.schema.names)}
        if self.opts.topic is not None:
            self._add_topic(self.opts.topic, cols, batch.num_rows)
            return
        topics = cols["topic"]
        if topics.null_count:
            raise InvalidRecordError("null topic present in the data; use the option 'topic' or "
                                     "give every row a topic")
        for topic in pc.unique(topics).to_pylist():
            idx = pc.indices_nonzero(pc.equal(topics, topic))
            self._add_topic(topic, {k: v.take(idx) for k, v in cols.items()}, len(idx))

    def _add_topic(self, topic: str, cols: Dict[str, pa.Array], n: int) -> None:
        count = self.num_partitions(topic)
        key = cols.get("key")
        pcol = cols.get("partition")
        if pcol is not None and pcol.null_count < n:
            lo, hi = pc.min_max(pcol).values()
            if lo.as_py() < 0 or hi.as_py() >= count:
                raise self._no_such_partition(topic, lo.as_py() if lo.as_py() < 0 else hi.as_py(), count)
        else:
            pcol = None
        groups: List[Tuple[int, Optional[memoryview]]]     # (partition, its rows; None: all)
        if count == 1:
            groups = [(0, None)]
        else:
            keys = _binary_buffers(key)
            if keys is not None:
                parts = pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(
                    kernel.murmur2_partitions(keys, n, count))])
                if key is not None and key.null_count:     # (keys: key is not None)
                    parts = pc.if_else(pc.equal(parts, -1), self.rng.randrange(count), parts)
            else:
                parts = None
            if pcol is not None:
                parts = pc.coalesce(pcol, parts if parts is not None else self.rng.randrange(count))
            if parts is None:
                groups = [(self.rng.randrange(count), None)]
            else:
                if parts.offset:
                    parts = pa.concat_arrays([parts])   # (a sliced array: its own buffer)
                order, bounds = kernel.partition_groups(parts.buffers()[1], n, count)
                present = [p for p in range(count) if bounds[p + 1] > bounds[p]]
                if len(present) == 1:
                    groups = [(present[0], None)]
                else:
                    view = memoryview(order)
                    groups = [(p, view[8 * bounds[p]:8 * bounds[p + 1]]) for p in present]
        keys = _binary_buffers(key)
        values = _binary_buffers(cols["value"])
        stamps = _timestamp_buffers(cols.get("timestamp"))
        headers = _headers(cols.get("headers")) if self.opts.include_headers else None
        now_ms = int(time.time() * 1000)
        for partition, rows in groups:
            m = n if rows is None else len(rows) // 8
            # bodies are encoded into the reused scratch buffer (views of it, released when
            # _write returns: nothing else may hold them)
            self._write((topic, partition), kernel.encode_columns_v2(
                rows, m, keys, values, stamps, now_ms, headers, self.max_batch_bytes(topic),
                self.scratch), m)

    def _write(self, tp: Tuple[str, int], chunks: list, records: int) -> None:
        t0 = time.perf_counter()
        codec = self.codec
        file_limit = self._topic_limits(tp[0])[1]
        cur = self.current.get(tp)
        in_file = (cur.size, cur.records) if cur is not None else (0, 0)  # before `parts`
        parts: list = []
        headers: List[int] = []    # file positions of the batch headers in ``parts``
        size = 0
        count = 0
        for body, n, base_ts, max_ts in chunks:
            if codec:
                body = compress(codec, body, magic=2)
            if (in_file[0] or size) and \
                    in_file[0] + size + len(body) + RECORD_BATCH_OVERHEAD > file_limit:
                self._flush_parts(tp, parts, size, count, headers)   # this file is full
                self._close(tp)
                parts, headers, size, count, in_file = [], [], 0, 0, (0, 0)
            # offsets counted from 0 in each staging file: a file that starts a new partition
            # needs no offset rewrite at commit
            parts.append(v2_header(body, base_offset=in_file[1] + count, attributes=codec,
                                   last_offset_delta=n - 1, base_timestamp=base_ts,
                                   max_timestamp=max_ts, producer_id=-1, producer_epoch=-1,
                                   base_sequence=-1, count=n, partition_leader_epoch=-1))
            parts.append(body)   # header and body of each batch, written without concatenating
            headers.append(in_file[0] + size)
            size += RECORD_BATCH_OVERHEAD + len(body)
            count += n
        self._flush_parts(tp, parts, size, count, headers)
        self.write_seconds += time.perf_counter() - t0

    def _flush_parts(self, tp: Tuple[str, int], parts: list, size: int, records: int,
                     headers: List[int]) -> None:
        if not parts:
            return
        cur = self.current.get(tp)
        if cur is None:
            path = f"{self.staging_prefix}.{self.task_tag}.{len(self.staged)}"
            with fsutil.wrap_os_errors(path, "create staging file"):
                os.makedirs(os.path.dirname(path), exist_ok=True)
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            cur = self.current[tp] = _OpenStaging(
                tp, fd, path, move_min=move_threshold(self._topic_limits(tp[0])[1]))
            self.staged.append(cur)
        with fsutil.wrap_os_errors(cur.path, f"write at byte {cur.size} of staging file"):
            _write_all(cur.fd, parts)   # (a full disk: a typed error naming the file; the task
                                        # fails and its staging files are deleted)
        cur.size += size
        cur.records += records
        cur.headers.extend(headers)
        if cur.size - cur.synced >= _SYNC_BYTES:
            # write the file out while Spark computes the next rows (disk writes at the pace of
            # the task, not in one burst at its end, whose fdatasync then has little to do)
            self.flusher.submit(cur.fd, cur.path, *cur.take_drop_behind())
            cur.synced = cur.size

    def _close(self, tp: Tuple[str, int]) -> None:
        cur = self.current.pop(tp)
        self.flusher.release(cur.fd, cur.path, *cur.take_drop_behind())

    def finish(self) -> StagedWrite:
        # a staging file missing or torn at commit fails the commit, which rolls back
        t0 = time.perf_counter()
        for tp in list(self.current):
            self._close(tp)
        self.flusher.close()      # staging files durable: the commit only syncs its own changes
        self.finish_seconds = time.perf_counter() - t0
        self.write_seconds += self.finish_seconds
        files = [StagedFile(s.tp[0], s.tp[1], s.path, s.records) for s in self.staged]
        return StagedWrite(sorted(files, key=lambda f: (f.topic, f.partition)))

    def discard(self) -> None:
        """A failed task: close and delete what it staged (the job's abort sweeps again)."""
        for cur in self.current.values():
            self.flusher.release(cur.fd, cur.path)
        self.current.clear()
        try:
            self.flusher.close()
        except KafkalogError:
            pass
        for f in self.staged:
            try:
                os.unlink(f.path)
            except OSError:
                pass


@dataclass
class _OpenStaging:
    """One staging file of a task (``fd`` is open while ``tp`` writes to it).

    Drop-behind: once the file is big enough to be moved into the log at commit (``move_min``),
    what was written out leaves the page cache, and the pages holding batch headers are read back
    at once (asynchronously): the commit reads and rewrites the headers and nothing else
    (:func:`kafkalog.spark.commit._append_files`), so a write of gigabytes recycles a few megabytes
    of page cache instead of filling it. (On a VM whose free memory goes back to its host, each
    page the page cache grows into costs a host fault: ~1.5 CPU-seconds per 600 MB here, more
    than the write itself.) Where batches average under ``DROP_MIN_BATCH`` bytes, reading their
    headers back would read most pages again, so those stay cached; so does a smaller file, which
    the commit copies (reading all of it)."""
    tp: Tuple[str, int]
    fd: int
    path: str
    move_min: int = 0     # size from which the commit moves the file (commit.move_threshold)
    size: int = 0
    records: int = 0
    synced: int = 0       # bytes handed to the flusher
    headers: List[int] = field(default_factory=list)   # batch header positions >= dropped_to
    dropped_to: int = 0   # page-aligned: what is before it was dropped (or left cached)

    def take_drop_behind(self) -> Tuple[List[Tuple[int, int]], List[Tuple[int, int]]]:
        """``(ranges to drop, ranges to read back)`` for what was written since the last call."""
        if self.size < self.move_min:
            return [], []
        start, end = self.dropped_to, self.size - self.size % _PAGE
        if end <= start:
            return [], []
        cut = bisect_left(self.headers, end)
        inside, self.headers = self.headers[:cut], self.headers[cut:]
        self.dropped_to = end
        if inside and (end - start) // len(inside) < DROP_MIN_BATCH:
            return [], []
        return [(start, end)], [(h, h + RECORD_BATCH_OVERHEAD) for h in inside]


_PAGE = mmap.PAGESIZE

#: batches smaller than this on average stay in the page cache (their headers are too dense)
DROP_MIN_BATCH = 32 << 10


#: a staging file is synced in the background every this many bytes
_SYNC_BYTES = 8 << 20

_IOV_MAX = 512


def _write_all(fd: int, parts: list) -> None:
    """``os.writev`` of ``parts`` (bytes-like), resuming after short writes."""
    for i in range(0, len(parts), _IOV_MAX):
        group = [memoryview(p) for p in parts[i:i + _IOV_MAX]]
        while group:
            done = os.writev(fd, group)
            while group and done >= len(group[0]):
                done -= len(group[0])
                group.pop(0)
            if group and done:
                group[0] = group[0][done:]


def staged_by_partition(messages: Sequence[Optional[StagedWrite]]) -> Dict[Tuple[str, int], List[str]]:
    """Staging files per topic-partition, in task order (failed tasks appear as None)."""
    by_tp: Dict[Tuple[str, int], List[str]] = defaultdict(list)
    for msg in messages:
        if msg is None:
            continue
        for f in msg.files:
            by_tp[(f.topic, f.partition)].append(f.path)
    return by_tp


def staged_writes(messages: Sequence[Optional[WriterCommitMessage]]) -> List[Optional[StagedWrite]]:
    """The messages Spark hands ``commit``/``abort``: what the tasks' ``write`` returned (None for
    a task that failed), checked to be this writer's."""
    out: List[Optional[StagedWrite]] = []
    for msg in messages:
        if msg is not None and not isinstance(msg, StagedWrite):
            raise TypeError(f"not a kafkalog staged write: {type(msg).__name__}")
        out.append(msg)
    return out


def stage_task(opts: WriteOptions, prefix: str, iterator: Iterator[pa.RecordBatch]) -> StagedWrite:
    """One task: stage every input batch (timed phases for ``$KAFKALOG_SPARK_PROFILE``)."""
    stager = ArrowStager(opts, prefix, task_tag())
    t0 = time.perf_counter()
    waited = 0.0
    try:
        while True:
            t1 = time.perf_counter()
            batch = next(iterator, None)
            waited += time.perf_counter() - t1
            if batch is None:
                break
            stager.add_batch(batch)
        result = stager.finish()
    except BaseException:
        stager.discard()
        raise
    total = time.perf_counter() - t0
    profile("task.input", waited)
    profile("task.encode", total - waited - stager.write_seconds)
    profile("task.staging_write", stager.write_seconds)
    profile("task.final_sync", stager.finish_seconds)
    return result


def task_tag() -> str:
    from pyspark import TaskContext
    ctx = TaskContext.get()
    if ctx is None:
        return uuid.uuid4().hex
    return f"{ctx.stageId()}-{ctx.partitionId():05d}-{ctx.attemptNumber()}-{uuid.uuid4().hex[:8]}"


class KafkalogArrowWriter(DataSourceArrowWriter):
    """``df.write.format("kafkalog").option("topic", "orders").mode("append").save(DATA_DIR)``."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.opts = parse_write_options(options)
        validate_sink_schema(schema, self.opts)
        # (the driver) a data directory, or a new or empty path this job makes one; anything else
        # refused before a task runs
        self.creates_dir = check_data_dir(self.opts.path, may_create=True) == NEW
        self.job_id = uuid.uuid4().hex
        self.staging_prefix = staging_prefix(self.opts.path, self.job_id)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedWrite:
        return stage_task(self.opts, self.staging_prefix, iterator)

    def commit(self, messages: List[Optional[WriterCommitMessage]]) -> None:
        t0 = time.perf_counter()
        try:
            commit_staged(self.opts.path, staged_by_partition(staged_writes(messages)), job_id=self.job_id,
                          new_topic_partitions=self.opts.partitions,
                          topic_config=self.opts.topic_config_dict)
        finally:
            remove_staging(self.staging_prefix)
            profile("commit.total", time.perf_counter() - t0)

    def abort(self, messages: List[Optional[WriterCommitMessage]]) -> None:
        # Tasks of a failed job that are still being killed may stage files after the first
        # removal: sweep a few times.
        for attempt in range(4):
            if attempt:
                time.sleep(1.0)
            remove_staging(self.staging_prefix)
        if self.creates_dir:
            _remove_if_empty(self.opts.path)         # a failed job leaves no directory behind


def _remove_if_empty(path: str) -> None:
    """Remove the directory a failed job created (its tasks created it for their staging files),
    if nothing else is in it now."""
    try:
        os.rmdir(path)
    except OSError:
        pass                    # not empty (another job's files), or already gone
