"""``RecordMetadata``: where a produced record landed (kafka-python's field names)."""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["RecordMetadata"]


class RecordMetadata(NamedTuple):
    """Where a produced record landed (kafka-python's ``RecordMetadata`` field names)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    serialized_key_size: int = -1
    serialized_value_size: int = -1
    serialized_header_size: int = -1
    log_start_offset: int = -1
