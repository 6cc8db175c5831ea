"""Streaming sink: ``df.writeStream.format("kafkalog")`` appends each micro-batch exactly once.

Tasks stage batches like the batch sink (:mod:`.writer`); ``commit(messages, batchId)`` publishes
them with :func:`kafkalog.spark.commit.commit_staged`, which records ``batchId`` in the same
crash-safe protocol: the commit intent names the sink and the batch id, and the batch id is
written to ``<DATA_DIR>/.kafkalog-sink-<sink id>`` only after the commit point (and again by
recovery if a crash came in between). A batch id at or below the recorded one is a replay after a
restart and is dropped, so a micro-batch is appended exactly once even when the process dies
between the append and the batch-id record: an unfinished append is rolled back (so Spark's
replay appends it once), a finished one is recorded (so the replay is dropped). The sink id is
the option ``sinkId``, else derived from ``checkpointLocation``, else the topic.
"""

from __future__ import annotations

import hashlib
import os
from typing import Iterator, List, Mapping, Optional

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from kafkalog.spark.commit import commit_staged, read_committed_batch, sink_commit_path
from kafkalog.spark.options import parse_write_options
from kafkalog.spark.writer import (
    StagedWrite,
    remove_staging,
    stage_task,
    staged_by_partition,
    staged_writes,
    staging_prefix,
    validate_sink_schema,
)

__all__ = ["KafkalogStreamWriter", "read_committed_batch"]


def _sink_id(options: Mapping[str, str], topic: Optional[str]) -> str:
    lowered = {str(k).lower(): str(v) for k, v in options.items()}
    if lowered.get("sinkid"):
        return lowered["sinkid"]
    source = lowered.get("checkpointlocation") or f"topic:{topic}"
    return hashlib.sha256(source.encode("utf-8")).hexdigest()[:32]


class KafkalogStreamWriter(DataSourceStreamArrowWriter):
    """Exactly-once (per micro-batch) appends into the topics of a data directory."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.opts = parse_write_options(options)
        validate_sink_schema(schema, self.opts)
        self.sink_id = _sink_id(options, self.opts.topic)
        self.commit_file = sink_commit_path(self.opts.path, self.sink_id)
        # deterministic: Spark may build separate writer instances for tasks and for commit()
        # staging files <DATA_DIR>/.kafkalog-staging.stream-<hash of sink id>.<task>.<n>
        tag = hashlib.sha256(self.sink_id.encode("utf-8")).hexdigest()[:16]
        self.staging_prefix = staging_prefix(self.opts.path, "stream-" + tag)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedWrite:
        return stage_task(self.opts, self.staging_prefix, iterator)

    def commit(self, messages: List[Optional[WriterCommitMessage]], batchId: int) -> None:
        staged = staged_writes(messages)
        try:
            commit_staged(self.opts.path, staged_by_partition(staged), job_id=f"stream-{batchId}",
                          new_topic_partitions=self.opts.partitions,
                          topic_config=self.opts.topic_config_dict, sink=self.sink_id,
                          batch_id=batchId)
        finally:
            self._discard(staged)

    def abort(self, messages: List[Optional[WriterCommitMessage]], batchId: int) -> None:
        self._discard(staged_writes(messages))

    def _discard(self, messages: List[Optional[StagedWrite]]) -> None:
        for msg in messages:
            for f in (msg.files if msg is not None else ()):
                try:
                    os.unlink(f.path)
                except OSError:
                    pass
        remove_staging(self.staging_prefix)
