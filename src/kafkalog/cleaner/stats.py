"""Cleaning statistics (Kafka's ``CleanerStats``) and the I/O throttler (Kafka's ``Throttler``)."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

__all__ = ["CleanerStats", "Throttler"]


@dataclass
class CleanerStats:
    """Counters of one cleaning of one partition. ``to_json()`` uses camelCase names."""

    bytes_read: int = 0
    bytes_written: int = 0
    map_bytes_read: int = 0
    map_messages_read: int = 0
    messages_read: int = 0
    messages_written: int = 0
    invalid_messages: int = 0            # records without a key (dropped, as Kafka does)
    tombstones_removed: int = 0
    aborted_batches_removed: int = 0
    buffer_utilization: float = 0.0
    distinct_keys: int = 0
    segments_cleaned: int = 0
    segments_written: int = 0
    segments_split: int = 0              # overflowed legacy segments split before cleaning (§4.12)
    start_time: float = field(default_factory=time.monotonic)
    map_complete_time: float = -1.0
    end_time: float = -1.0

    # Kafka-style helpers used by the filter
    def read_messages_bytes(self, n: int) -> None:
        self.bytes_read += n

    def read_messages(self, n: Optional[int]) -> None:
        self.messages_read += n or 0

    def recopied_messages(self, n: int, size: int) -> None:
        self.messages_written += n
        self.bytes_written += size

    def index_done(self) -> None:
        self.map_complete_time = time.monotonic()

    def all_done(self) -> None:
        self.end_time = time.monotonic()

    @property
    def elapsed_secs(self) -> float:
        end = self.end_time if self.end_time >= 0 else time.monotonic()
        return max(end - self.start_time, 0.0)

    @property
    def elapsed_index_secs(self) -> float:
        if self.map_complete_time < 0:
            return 0.0
        return self.map_complete_time - self.start_time

    def merge(self, other: CleanerStats) -> None:
        """Add another cleaning's counters (for summaries over many partitions)."""
        for name in ("bytes_read", "bytes_written", "map_bytes_read", "map_messages_read",
                     "messages_read", "messages_written", "invalid_messages", "tombstones_removed",
                     "aborted_batches_removed", "distinct_keys", "segments_cleaned",
                     "segments_written"):
            setattr(self, name, getattr(self, name) + getattr(other, name))    # each counter above

    def to_json(self) -> dict:
        return {"bytesRead": self.bytes_read, "bytesWritten": self.bytes_written,
                "mapBytesRead": self.map_bytes_read, "mapMessagesRead": self.map_messages_read,
                "messagesRead": self.messages_read, "messagesWritten": self.messages_written,
                "invalidMessages": self.invalid_messages,
                "tombstonesRemoved": self.tombstones_removed,
                "abortedBatchesRemoved": self.aborted_batches_removed,
                "distinctKeys": self.distinct_keys, "bufferUtilization": self.buffer_utilization,
                "segmentsCleaned": self.segments_cleaned, "segmentsWritten": self.segments_written,
                "elapsedSecs": round(self.elapsed_secs, 6)}


class Throttler:
    """Keeps the combined I/O rate of all cleaner threads under ``desired_rate_per_sec`` bytes/s
    (``log.cleaner.io.max.bytes.per.second``), checking every ``check_interval_ms`` (Kafka: 300)."""

    def __init__(self, desired_rate_per_sec: float, check_interval_ms: int = 300,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.desired_rate = float(desired_rate_per_sec)
        self.check_interval = check_interval_ms / 1000.0
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._period_start = clock()
        self._observed = 0.0
        self.total_sleep_secs = 0.0

    @property
    def enabled(self) -> bool:
        return 0 < self.desired_rate < 1e300

    def maybe_throttle(self, observed: float) -> None:
        """Account ``observed`` bytes; sleep when the rate over the current period is too high."""
        if not self.enabled:
            return
        with self._lock:
            self._observed += observed
            now = self._clock()
            elapsed = now - self._period_start
            if elapsed < self.check_interval:
                return
            rate = self._observed / elapsed if elapsed > 0 else float("inf")
            sleep = 0.0
            if rate > self.desired_rate:
                sleep = self._observed / self.desired_rate - elapsed
            self._period_start = now
            self._observed = 0.0
        if sleep > 0:
            self.total_sleep_secs += sleep
            self._sleep(sleep)
            with self._lock:
                self._period_start = self._clock()
