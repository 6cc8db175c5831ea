"""Streaming sink: ``df.writeStream.format("kafkalog")`` appends each micro-batch exactly once.

Tasks stage batches like the batch sink (:mod:`.writer`); ``commit(messages, batchId)`` appends
them and then durably records ``batchId`` in ``<DATA_DIR>/.kafkalog-sink-commits/<sink id>``
(written to a ``.tmp`` file, fsynced, renamed). A batch id at or below the recorded one is a
replay after a restart and is dropped, so a micro-batch is never appended twice. The sink id is
the option ``sinkId``, else derived from ``checkpointLocation``, else the topic.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import uuid
from typing import Iterator, List, Mapping, Optional

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter
from pyspark.sql.types import StructType

from kafkalog.spark.writer import (
    STAGING_DIR, RowGrouper, StagedWrite, commit_staged, validate_sink_schema,
)
from kafkalog.spark.options import parse_write_options

COMMITS_DIR = ".kafkalog-sink-commits"


def _sink_id(options: Mapping[str, str], topic: Optional[str]) -> str:
    lowered = {str(k).lower(): str(v) for k, v in options.items()}
    if lowered.get("sinkid"):
        return lowered["sinkid"]
    source = lowered.get("checkpointlocation") or f"topic:{topic}"
    return hashlib.sha256(source.encode("utf-8")).hexdigest()[:32]


def read_committed_batch(path: str) -> int:
    try:
        with open(path, "r", encoding="utf-8") as f:
            return int(f.read().strip() or -1)
    except FileNotFoundError:
        return -1


def write_committed_batch(path: str, batch_id: int) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(str(batch_id))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class KafkalogStreamWriter(DataSourceStreamArrowWriter):
    """Exactly-once (per micro-batch) appends into the topics of a data directory."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.opts = parse_write_options(options)
        validate_sink_schema(schema, self.opts)
        sink_id = _sink_id(options, self.opts.topic)
        self.commit_file = os.path.join(self.opts.path, COMMITS_DIR, sink_id)
        # deterministic: Spark may build separate writer instances for tasks and for commit()
        self.staging_dir = os.path.join(self.opts.path, STAGING_DIR, "stream-" + sink_id)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedWrite:
        from pyspark import TaskContext
        ctx = TaskContext.get()
        tag = uuid.uuid4().hex if ctx is None else (
            f"{ctx.stageId()}-{ctx.partitionId():05d}-{ctx.attemptNumber()}-{uuid.uuid4().hex[:8]}")
        grouper = RowGrouper(self.opts, self.staging_dir, tag)
        for batch in iterator:
            grouper.add_batch(batch)
        return grouper.finish()

    def commit(self, messages: List[Optional[StagedWrite]], batchId: int) -> None:
        if batchId <= read_committed_batch(self.commit_file):
            self._discard(messages)  # replay of a batch already appended
            return
        commit_staged(self.opts, messages, self.staging_dir)
        write_committed_batch(self.commit_file, batchId)

    def abort(self, messages: List[Optional[StagedWrite]], batchId: int) -> None:
        self._discard(messages)

    def _discard(self, messages: List[Optional[StagedWrite]]) -> None:
        shutil.rmtree(self.staging_dir, ignore_errors=True)
        try:
            os.rmdir(os.path.dirname(self.staging_dir))
        except OSError:
            pass
