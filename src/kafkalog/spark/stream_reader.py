"""Streaming source: ``spark.readStream.format("kafkalog")`` tails the logs of a data directory.

Offsets have the shape of Spark's Kafka source checkpoints, ``{"topic": {"0": next_offset}}``
(string partition keys survive the checkpoint JSON round trip). ``maxOffsetsPerTrigger``,
``minOffsetsPerTrigger`` / ``maxTriggerDelay`` and ``maxBytesPerTrigger`` are admission control
through ``latestOffset(start, limit)`` (:mod:`.admission`); ``Trigger.AvailableNow`` freezes the
target offsets in ``prepareForTriggerAvailableNow`` and still honours the maximums (not the
minimum, which could wait for data that never comes). ``read()`` is stateless. Partitions that
appear later start at their earliest offset.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from kafkalog.errors import OffsetOutOfRangeError
from kafkalog.spark.admission import Lags, TriggerDelay, limit_bytes, limit_offsets
from kafkalog.spark.commit import pending_bounds
from kafkalog.spark.log_view import (
    partition_bounds,
    read_cleaner_checkpoint,
    read_log_start_checkpoint,
)
from kafkalog.spark.options import parse_read_options
from kafkalog.spark.planning import (
    OffsetRange,
    plan_tasks,
    resolve_start,
    selected_partitions,
)
from kafkalog.spark.reader import read_task
from kafkalog.spark.segment_reader import last_stable_offset

Offsets = dict[str, dict[str, int]]


class KafkalogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader over the selected topic-partitions."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.opts = parse_read_options(options, streaming=True)
        self.target: Offsets | None = None
        self._last_start: Offsets | None = None
        self.delay = (TriggerDelay(self.opts.min_offsets_per_trigger,
                                   self.opts.max_trigger_delay_ms, lambda: time.time() * 1000)
                      if self.opts.min_offsets_per_trigger else None)

    # -- driver side (one long-lived process) ---------------------------------------------------
    def _bounds(self):
        checkpoint = read_log_start_checkpoint(self.opts.path)
        return [(p, partition_bounds(p, checkpoint)) for p in selected_partitions(self.opts)]

    def _latest(self, start: Offsets | None = None) -> Offsets:
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
        """The limit Spark hands back to :meth:`latestOffset`; PySpark has no composite limit,
        so this names one of the configured limits and :meth:`latestOffset` applies them all
        (anything but ``ReadAllAvailable``, which Spark passes for ``Trigger.Once``)."""
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        if self.opts.max_bytes_per_trigger:
            return ReadMaxBytes(self.opts.max_bytes_per_trigger)
        if self.opts.min_offsets_per_trigger:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self._latest(self._last_start)

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        self._last_start = start
        latest = self.target if self.target is not None else self._latest(start)
        lags: Lags = {}
        for topic, parts in latest.items():
            for p, leo in parts.items():
                lags[(topic, p)] = (start.get(topic, {}).get(p, 0), leo)
        ends = {key: e for key, (_s, e) in lags.items()}
        if not isinstance(limit, ReadAllAvailable):
            if self.delay is not None and self.target is None and \
                    self.delay.skip(sum(max(0, e - s) for s, e in lags.values())):
                ends = {key: s for key, (s, _e) in lags.items()}
            elif self.opts.max_offsets_per_trigger:
                ends = limit_offsets(lags, self.opts.max_offsets_per_trigger)
            if self.opts.max_bytes_per_trigger and ends != {k: s for k, (s, _e) in lags.items()}:
                pdirs = {(p.topic, str(p.partition)): p for p, _b in self._bounds()}
                capped = limit_bytes(pdirs, {k: (s, ends[k]) for k, (s, _e) in lags.items()},
                                     self.opts.max_bytes_per_trigger)
                ends = {k: min(e, capped[k]) for k, e in ends.items()}
        out: Offsets = {}
        for (topic, p), e in sorted(ends.items()):
            out.setdefault(topic, {})[p] = e
        # keep offsets of partitions present in start but missing now (deleted topics)
        for topic, parts in start.items():
            for p, s in parts.items():
                out.setdefault(topic, {}).setdefault(p, s)
        return out

    def reportLatestOffset(self) -> Offsets:
        return self._latest(self._last_start)

    def partitions(self, start: Offsets, end: Offsets) -> list[InputPartition]:
        bounds = {(p.topic, p.partition): (p, b) for p, b in self._bounds()}
        cleaned = read_cleaner_checkpoint(self.opts.path)
        ranges: list[OffsetRange] = []
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
        return list(plan_tasks(ranges, self.opts.min_partitions,
                               max_records=self.opts.max_records_per_partition))

    def _data_loss(self, message: str) -> None:
        if self.opts.fail_on_data_loss:
            raise OffsetOutOfRangeError(message + "; some data may have been lost. Set the option "
                                        "'failOnDataLoss' to 'false' to continue.")

    def commit(self, end: Offsets) -> None:
        """Nothing to release: the logs are read in place."""

    # -- executor side ----------------------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_task(partition, self.opts)
