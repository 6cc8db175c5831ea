"""The broker's cleaner settings, Kafka's ``CleanerConfig`` (``log.cleaner.*``; spec §4.11 "Threads
and buffers", §4.13). Topic settings the cleaner reads per log (``min.cleanable.dirty.ratio``,
``delete.retention.ms`` ...) come from the log's :class:`~kafkalog.log.config.LogConfig`."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from kafkalog.log.config import BROKER_ONLY_CONFIGS, TOPIC_CONFIGS, BrokerConfig, LogConfig
from kafkalog.record.constants import INT32_MAX

__all__ = ["CleanerConfig"]


def _default(key: str) -> Any:
    return BROKER_ONLY_CONFIGS[key].default


@dataclass(frozen=True)
class CleanerConfig:
    """The broker's cleaner settings (Kafka's ``CleanerConfig``), Kafka's keys and defaults."""

    num_threads: int = _default("log.cleaner.threads")
    dedupe_buffer_size: int = _default("log.cleaner.dedupe.buffer.size")
    dedupe_buffer_load_factor: float = _default("log.cleaner.io.buffer.load.factor")
    io_buffer_size: int = _default("log.cleaner.io.buffer.size")
    #: ``message.max.bytes`` (the broker synonym of the topic's ``max.message.bytes``)
    max_message_size: int = TOPIC_CONFIGS["max.message.bytes"].default
    max_io_bytes_per_second: float = _default("log.cleaner.io.max.bytes.per.second")
    backoff_ms: int = _default("log.cleaner.backoff.ms")
    enable_cleaner: bool = _default("log.cleaner.enable")

    @classmethod
    def from_broker(cls, broker: Optional[BrokerConfig] = None) -> CleanerConfig:
        """From a :class:`~kafkalog.log.config.BrokerConfig` (None: Kafka's defaults)."""
        b = broker if broker is not None else BrokerConfig()
        return cls(num_threads=b.log_cleaner_threads,
                   dedupe_buffer_size=b.log_cleaner_dedupe_buffer_size,
                   dedupe_buffer_load_factor=b.log_cleaner_io_buffer_load_factor,
                   io_buffer_size=b.log_cleaner_io_buffer_size,
                   max_message_size=LogConfig(None, b).max_message_bytes,
                   max_io_bytes_per_second=b.log_cleaner_io_max_bytes_per_second,
                   backoff_ms=b.log_cleaner_backoff_ms,
                   enable_cleaner=b.log_cleaner_enable)

    @property
    def map_memory_per_thread(self) -> int:
        """``min(dedupe.buffer.size / threads, Int.MAX)``."""
        return min(self.dedupe_buffer_size // max(self.num_threads, 1), INT32_MAX)

    @property
    def io_buffer_per_thread(self) -> int:
        """``io.buffer.size / threads / 2`` (one read and one write buffer)."""
        return max(self.io_buffer_size // max(self.num_threads, 1) // 2, 1024)
