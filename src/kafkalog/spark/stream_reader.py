"""Streaming source: ``spark.readStream.format("kafkalog")`` tails the logs of a data directory.

Offsets have the shape of Spark's Kafka source checkpoints, ``{"topic": {"0": next_offset}}``
(string partition keys survive the checkpoint JSON round trip). ``maxOffsetsPerTrigger`` is
admission control through ``latestOffset(start, limit)``; ``Trigger.AvailableNow`` freezes the
target offsets in ``prepareForTriggerAvailableNow`` and still honours the limit. ``read()`` is
stateless. Partitions that appear later start at their earliest offset.
"""

from __future__ import annotations

from typing import Dict, Iterator, List, Mapping, Optional, Tuple

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from kafkalog.errors import OffsetOutOfRangeError
from kafkalog.spark.commit import pending_bounds
from kafkalog.spark.log_view import (
    partition_bounds, read_cleaner_checkpoint, read_log_start_checkpoint,
)
from kafkalog.spark.options import parse_read_options
from kafkalog.spark.planning import (
    OffsetRange, plan_tasks, resolve_start, selected_partitions,
)
from kafkalog.spark.reader import read_task
from kafkalog.spark.segment_reader import last_stable_offset

Offsets = Dict[str, Dict[str, int]]


class KafkalogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader over the selected topic-partitions."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.opts = parse_read_options(options, streaming=True)
        self.target: Optional[Offsets] = None

    # -- driver side (one long-lived process) ---------------------------------------------------
    def _bounds(self):
        checkpoint = read_log_start_checkpoint(self.opts.path)
        return [(p, partition_bounds(p, checkpoint)) for p in selected_partitions(self.opts)]

    def _latest(self, start: Optional[Offsets] = None) -> Offsets:
        """The offset each partition may be read up to: the log end offset, lowered to the start
        offset of a commit still being appended, and with ``read_committed`` to the last stable
        offset (found by scanning from ``start``, the previous bound: a transaction open now began
        at or after it)."""
        pending = pending_bounds(self.opts.path)
        out: Offsets = {}
        for pdir, bounds in self._bounds():
            end = min(bounds.log_end_offset,
                      pending.get((pdir.topic, pdir.partition), bounds.log_end_offset))
            if self.opts.read_committed:
                s = (start or {}).get(pdir.topic, {}).get(str(pdir.partition))
                s = bounds.log_start_offset if s is None else max(s, bounds.log_start_offset)
                end = last_stable_offset(pdir, min(s, end), end)
            out.setdefault(pdir.topic, {})[str(pdir.partition)] = end
        return out

    def initialOffset(self) -> Offsets:
        out: Offsets = {}
        for pdir, bounds in self._bounds():
            out.setdefault(pdir.topic, {})[str(pdir.partition)] = resolve_start(
                self.opts, pdir, bounds, default_kind="latest")
        return out

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self._latest(getattr(self, "_last_start", None))

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        self._last_start = start
        latest = self.target if self.target is not None else self._latest(start)
        budget = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        lags = {}
        for topic, parts in latest.items():
            for p, leo in parts.items():
                s = start.get(topic, {}).get(p, 0)
                lags[(topic, p)] = (s, leo)
        if budget is None:
            return {t: dict(ps) for t, ps in latest.items()}
        total = sum(max(0, e - s) for s, e in lags.values())
        out: Offsets = {}
        for (topic, p), (s, e) in sorted(lags.items()):
            lag = max(0, e - s)
            share = lag if total <= budget else (lag * budget) // total
            if lag and share == 0 and total > 0:
                share = 1 if budget >= len(lags) else 0
            out.setdefault(topic, {})[p] = min(e, s + share) if lag else s
        # keep offsets of partitions present in start but missing now (deleted topics)
        for topic, parts in start.items():
            for p, s in parts.items():
                out.setdefault(topic, {}).setdefault(p, s)
        return out

    def reportLatestOffset(self) -> Offsets:
        return self._latest(getattr(self, "_last_start", None))

    def partitions(self, start: Offsets, end: Offsets) -> List[InputPartition]:
        bounds = {(p.topic, p.partition): (p, b) for p, b in self._bounds()}
        cleaned = read_cleaner_checkpoint(self.opts.path)
        ranges: List[OffsetRange] = []
        for topic, parts in end.items():
            for p, e in parts.items():
                tp = (topic, int(p))
                if tp not in bounds:
                    continue
                pdir, b = bounds[tp]
                s = start.get(topic, {}).get(p, b.log_start_offset)
                if s >= e:
                    continue
                if s < b.log_start_offset:
                    self._data_loss(f"offsets [{s}, {b.log_start_offset}) of {topic}-{p} were "
                                    "deleted (retention) before the query read them")
                    s = b.log_start_offset
                elif s > b.log_start_offset and cleaned.get(tp, -1) > s:
                    self._data_loss(f"offsets of {topic}-{p} from {s} were compacted (cleaned up "
                                    f"to {cleaned[tp]}) before the query read them")
                if s < e:
                    ranges.append(OffsetRange(topic, int(p), pdir.path, s, e))
        return plan_tasks(ranges, self.opts.min_partitions)

    def _data_loss(self, message: str) -> None:
        if self.opts.fail_on_data_loss:
            raise OffsetOutOfRangeError(message + "; some data may have been lost. Set the option "
                                        "'failOnDataLoss' to 'false' to continue.")

    def commit(self, end: Offsets) -> None:
        """Nothing to release: the logs are read in place."""

    # -- executor side ----------------------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_task(partition, self.opts)
