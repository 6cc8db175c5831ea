"""Cleaner settings: topic keys read per log and the broker's ``log.cleaner.*`` keys (Kafka's
``CleanerConfig``; spec §4.11 "Threads and buffers", §4.13)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kafkalog.log.config import LogConfig, as_log_config

__all__ = ["topic_value", "is_compacted", "is_compact_and_delete", "CleanerConfig",
           "TOPIC_DEFAULTS"]

LONG_MAX = 2**63 - 1
DOUBLE_MAX = 1.7976931348623157e308

#: Kafka's defaults of the topic keys (the cleaner reads some of them)
TOPIC_DEFAULTS = LogConfig().values()


def topic_value(config, key: str) -> Any:
    """A topic config value of a ``LogConfig`` (or topic overrides by key, or None: defaults)."""
    return as_log_config(config).get(key)


def _policies(config) -> list:
    p = topic_value(config, "cleanup.policy")
    if isinstance(p, str):
        return [x.strip().lower() for x in p.split(",") if x.strip()]
    return [str(x).strip().lower() for x in p]


def is_compacted(config) -> bool:
    """``compact`` is in ``cleanup.policy``."""
    return "compact" in _policies(config)


def is_compact_and_delete(config) -> bool:
    p = _policies(config)
    return "compact" in p and "delete" in p


@dataclass(frozen=True)
class CleanerConfig:
    """The broker's cleaner settings (Kafka's ``CleanerConfig``), Kafka's keys and defaults."""

    num_threads: int = 1                                # log.cleaner.threads
    dedupe_buffer_size: int = 128 * 1024 * 1024         # log.cleaner.dedupe.buffer.size
    dedupe_buffer_load_factor: float = 0.9              # log.cleaner.io.buffer.load.factor
    io_buffer_size: int = 512 * 1024                    # log.cleaner.io.buffer.size
    max_message_size: int = 1048588                     # message.max.bytes
    max_io_bytes_per_second: float = DOUBLE_MAX         # log.cleaner.io.max.bytes.per.second
    backoff_ms: int = 15_000                            # log.cleaner.backoff.ms
    enable_cleaner: bool = True                         # log.cleaner.enable

    @classmethod
    def from_broker(cls, broker) -> "CleanerConfig":
        """From a :class:`~kafkalog.log.config.BrokerConfig`, a mapping of broker keys, or None."""
        def g(key: str, default):
            if broker is None:
                return default
            try:
                v = broker.get(key)
            except Exception:  # noqa: BLE001 - unknown key in a BrokerConfig
                v = None
            return default if v is None else v
        return cls(num_threads=int(g("log.cleaner.threads", 1)),
                   dedupe_buffer_size=int(g("log.cleaner.dedupe.buffer.size", 128 * 1024 * 1024)),
                   dedupe_buffer_load_factor=float(g("log.cleaner.io.buffer.load.factor", 0.9)),
                   io_buffer_size=int(g("log.cleaner.io.buffer.size", 512 * 1024)),
                   max_message_size=int(g("message.max.bytes", 1048588)),
                   max_io_bytes_per_second=float(g("log.cleaner.io.max.bytes.per.second",
                                                   DOUBLE_MAX)),
                   backoff_ms=int(g("log.cleaner.backoff.ms", 15_000)),
                   enable_cleaner=str(g("log.cleaner.enable", True)).lower() not in ("false", "0"))

    @property
    def map_memory_per_thread(self) -> int:
        """``min(dedupe.buffer.size / threads, Int.MAX)``."""
        return min(self.dedupe_buffer_size // max(self.num_threads, 1), 2**31 - 1)

    @property
    def io_buffer_per_thread(self) -> int:
        """``io.buffer.size / threads / 2`` (one read and one write buffer)."""
        return max(self.io_buffer_size // max(self.num_threads, 1) // 2, 1024)
