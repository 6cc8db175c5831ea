"""Batch reader of the ``kafkalog`` source: pushdown, planning, and Arrow reads on executors."""

from __future__ import annotations

import time
from typing import Iterable, Iterator, List, Mapping

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, Filter, InputPartition
from pyspark.sql.types import StructType

from kafkalog.spark.commit import profile
from kafkalog.spark.options import ReadOptions, parse_read_options
from kafkalog.spark.planning import PushedFilters, ReadTask, plan_ranges, plan_tasks
from kafkalog.spark.pushdown import apply_filters
from kafkalog.spark.segment_reader import read_range


def read_task(task: InputPartition, opts: ReadOptions) -> Iterator[pa.RecordBatch]:
    """Executor side: yield the Arrow batches of every range of ``task``."""
    if not isinstance(task, ReadTask):  # Spark's InputPartition(None) for an empty plan
        return
    opts.configure_files()
    t0 = time.perf_counter()
    for r in task.ranges:
        yield from read_range(r.partition_dir, r.start, r.end,
                              include_headers=opts.include_headers,
                              read_committed=opts.read_committed,
                              max_rows=opts.max_records_per_batch)
    profile("read.task", time.perf_counter() - t0)


class KafkalogBatchReader(DataSourceReader):
    """Reads offset ranges of the selected topic-partitions, without filter pushdown."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.opts = parse_read_options(options, streaming=False)
        self.pushed = PushedFilters()

    def partitions(self) -> List[InputPartition]:
        t0 = time.perf_counter()
        tasks = plan_tasks(plan_ranges(self.opts, self.pushed), self.opts.min_partitions,
                           max_records=self.opts.max_records_per_partition)
        profile("read.plan", time.perf_counter() - t0)
        partitions: List[InputPartition] = list(tasks)
        return partitions

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_task(partition, self.opts)


class KafkalogPushdownReader(KafkalogBatchReader):
    """:class:`KafkalogBatchReader` that serves partition/offset/timestamp filters from the
    ``.index``/``.timeindex`` files (needs ``spark.sql.python.filterPushdown.enabled=true``)."""

    def pushFilters(self, filters: List[Filter]) -> Iterable[Filter]:
        return list(apply_filters(filters, self.pushed))
