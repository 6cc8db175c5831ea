"""kafkalog: Apache Kafka's log storage engine in Python, byte-compatible with Kafka's on-disk files.

The Python API (:mod:`kafkalog.client`: ``kafkalog.open``, ``DataLog``, ``Producer`` ...) is imported
on first use; the typed errors (:mod:`kafkalog.errors`) are re-exported here.
"""

from typing import Any

from kafkalog.errors import (
    CleanerError,
    CompressionError,
    CorruptCheckpointError,
    CorruptIndexError,
    CorruptRecordError,
    CorruptSnapshotError,
    IndexFullError,
    InvalidConfigError,
    InvalidOffsetError,
    InvalidRecordError,
    InvalidTimestampError,
    InvalidTopicError,
    KafkalogError,
    KafkalogIOError,
    LogDirError,
    LogSegmentOffsetOverflowError,
    OffsetOutOfRangeError,
    ProducerStateError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    UnsupportedCompressionTypeError,
    UnsupportedMagicError,
)

__version__ = "0.1.0"

_CLIENT_NAMES = ("open", "DataLog", "Producer", "ConsumerRecord", "RecordMetadata", "ProduceResult")

#: ``open`` is left out of ``__all__`` so that ``from kafkalog import *`` keeps the builtin ``open``
__all__ = [
    "__version__", "DataLog", "Producer", "ConsumerRecord", "RecordMetadata", "ProduceResult",
    "KafkalogError", "CorruptRecordError", "InvalidRecordError", "CompressionError",
    "UnsupportedCompressionTypeError", "UnsupportedMagicError", "RecordTooLargeError",
    "RecordBatchTooLargeError", "CorruptIndexError", "InvalidOffsetError", "IndexFullError",
    "LogSegmentOffsetOverflowError", "OffsetOutOfRangeError", "InvalidTimestampError",
    "CorruptSnapshotError", "CorruptCheckpointError", "InvalidTopicError", "InvalidConfigError",
    "LogDirError", "KafkalogIOError", "ProducerStateError", "CleanerError",
]


def __getattr__(name: str) -> Any:
    """Lazy re-exports of the Python API (:mod:`kafkalog.client`): ``kafkalog.open`` etc."""
    if name in _CLIENT_NAMES:
        from kafkalog import client
        return getattr(client, name)
    raise AttributeError(f"module 'kafkalog' has no attribute {name!r}")
