"""Streaming source: ``spark.readStream.format("kafkalog")`` tails the logs of a data directory.

Offsets have the shape of Spark's Kafka source checkpoints, ``{"topic": {"0": next_offset}}``
(string partition keys survive the checkpoint JSON round trip). ``maxOffsetsPerTrigger`` is
admission control through ``latestOffset(start, limit)``; ``Trigger.AvailableNow`` freezes the
target offsets in ``prepareForTriggerAvailableNow`` and still honours the limit. ``read()`` is
stateless. Partitions that appear later start at their earliest offset.
"""

from __future__ import annotations

import os
from typing import Dict, Iterator, List, Mapping, Optional, Tuple

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from kafkalog.errors import OffsetOutOfRangeError
from kafkalog.spark.log_files import partition_bounds, read_log_start_checkpoint
from kafkalog.spark.options import parse_read_options
from kafkalog.spark.planning import (
    OffsetRange, plan_tasks, resolve_start, selected_partitions,
)
from kafkalog.spark.reader import read_task

Offsets = Dict[str, Dict[str, int]]


def read_cleaner_checkpoint(data_dir: str) -> Dict[Tuple[str, int], int]:
    """``cleaner-offset-checkpoint``: the first dirty offset of each compacted partition."""
    path = os.path.join(data_dir, "cleaner-offset-checkpoint")
    out: Dict[Tuple[str, int], int] = {}
    try:
        with open(path, "r", encoding="utf-8") as f:
            for line in f.read().splitlines()[2:]:
                parts = line.split(" ")
                if len(parts) == 3:
                    out[(parts[0], int(parts[1]))] = int(parts[2])
    except (FileNotFoundError, ValueError):
        pass
    return out


class KafkalogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader over the selected topic-partitions."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.opts = parse_read_options(options, streaming=True)
        self.target: Optional[Offsets] = None

    # -- driver side (one long-lived process) ---------------------------------------------------
    def _bounds(self):
        checkpoint = read_log_start_checkpoint(self.opts.path)
        return [(p, partition_bounds(p, checkpoint)) for p in selected_partitions(self.opts)]

    def _latest(self) -> Offsets:
        out: Offsets = {}
        for pdir, bounds in self._bounds():
            out.setdefault(pdir.topic, {})[str(pdir.partition)] = bounds.log_end_offset
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
        self.target = self._latest()

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        latest = self.target if self.target is not None else self._latest()
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
        return self._latest()

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
