"""``AppendInfo``: what an append did (Kafka's ``LogAppendInfo``)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["AppendInfo"]


@dataclass
class AppendInfo:
    """What an append did (Kafka's ``LogAppendInfo``, trimmed to what an embedded log needs)."""

    first_offset: int = -1
    last_offset: int = -1
    max_timestamp: int = -1
    offset_of_max_timestamp: int = -1
    log_append_time: int = -1
    log_start_offset: int = 0
    valid_bytes: int = 0
    num_records: int = 0
    num_batches: int = 0
    duplicate: bool = False      # an idempotent retry: nothing appended, the original offsets
