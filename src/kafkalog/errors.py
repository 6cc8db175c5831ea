"""The kafkalog error hierarchy.

Every error kafkalog raises on bad input is a subclass of :class:`KafkalogError`. Errors that concern
bytes carry the ``file`` they came from (when known) and the byte ``position`` of the problem, and
both appear in the message, so an operator can go straight to the damage::

    CorruptRecordError: /data/orders-0/00000000000000000000.log at byte 4711: Record is corrupt
    (stored crc = 1, computed crc = 2)

Codec functions work on buffers and know only positions relative to the buffer they were given; the
file layer re-raises them with :meth:`KafkalogError.at` to add the file name and the absolute position.
Names follow Kafka's exception names (CorruptRecordException -> CorruptRecordError, ...).

Every typed error of every layer is here, in sections by layer, each defined once (the layers
raise them from here; their old homes import them), and all are exported by :mod:`kafkalog`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, Dict, Optional

#: (topic, partition): :class:`kafkalog.log.naming.TopicPartition` is a NamedTuple of them (the log
#: layer's, above this module)
_TopicPartition = tuple[str, int]


class KafkalogError(Exception):
    """Base class of every error kafkalog raises on purpose."""

    def __init__(self, message: str, *, file: Optional[os.PathLike[str] | str] = None,
                 position: Optional[int] = None, line: Optional[int] = None) -> None:
        self.message = message
        self.file = os.fspath(file) if file is not None else None
        self.position = position
        self.line = line            # 1-based input line (text input); the message names it too
        super().__init__(self._render())

    def _render(self) -> str:
        where = []
        if self.file is not None:
            where.append(str(self.file))
        if self.position is not None:
            where.append(f"at byte {self.position}")
        if where:
            return f"{' '.join(where)}: {self.message}"
        return self.message

    def at(self, file: Optional[os.PathLike[str] | str] = None, base_position: int = 0) -> KafkalogError:
        """Return a copy of this error located in ``file``, its position shifted by ``base_position``.

        Used by layers that hand a slice of a file to the codec: ``raise err.at(path, slice_start)``.
        """
        pos = None if self.position is None else self.position + base_position
        if pos is None and base_position:
            pos = base_position
        new = self.__class__.__new__(self.__class__)
        new.__dict__.update(self.__dict__)
        new.message = self.message
        new.file = os.fspath(file) if file is not None else self.file
        new.position = pos
        Exception.__init__(new, new._render())
        return new

    def to_json(self) -> Dict[str, Any]:
        """A JSON-able description, for command-line tools that print JSON lines."""
        out: Dict[str, Any] = {"error": type(self).__name__, "message": self.message,
                               "file": self.file, "position": self.position}
        if self.line is not None:
            out["line"] = self.line
        return out


# --- record format ---------------------------------------------------------------------------------

class CorruptRecordError(KafkalogError):
    """A batch fails its integrity check: CRC mismatch, or a size below the format's minimum
    (Kafka: CorruptRecordException)."""


class InvalidRecordError(KafkalogError):
    """A batch or record is structurally invalid: bad lengths, premature end, a record count that
    disagrees with the data, overlong varints, bad headers (Kafka: InvalidRecordException)."""


class CompressionError(InvalidRecordError):
    """A compressed payload cannot be decompressed, is malformed for its codec's framing, or
    expands beyond the allowed limit (decompression bomb)."""


class UnsupportedCompressionTypeError(InvalidRecordError):
    """An unknown codec id (5-7), or zstd inside a v0/v1 message."""


class UnsupportedMagicError(InvalidRecordError):
    """A magic byte outside 0..2 where the reader is strict about it."""


class RecordTooLargeError(KafkalogError):
    """A batch larger than ``max.message.bytes`` (Kafka: RecordTooLargeException)."""


class RecordBatchTooLargeError(KafkalogError):
    """An append larger than ``segment.bytes`` (Kafka: RecordBatchTooLargeException)."""


# --- indexes, segments, logs ---------------------------------------------------------------------

class CorruptIndexError(KafkalogError):
    """An index file fails a sanity check (Kafka: CorruptIndexException)."""


class InvalidOffsetError(KafkalogError):
    """An index append out of order (Kafka: InvalidOffsetException)."""


class IndexFullError(KafkalogError):
    """An append to a full index."""


class LogSegmentOffsetOverflowError(KafkalogError):
    """An offset that cannot be stored relative to its segment's base offset (int32 overflow)."""


class OffsetOutOfRangeError(KafkalogError):
    """A read below the log start offset or beyond the log end offset."""


class DataLossError(OffsetOutOfRangeError):
    """Offsets a partition's log no longer holds, neither locally nor in remote storage (a remote
    segment deleted), inside the range a reader asked for."""


class RemoteStorageError(KafkalogError):
    """Remote (tiered) storage that cannot be read as a partition's older segments: a
    half-uploaded segment, a bad manifest, a missing key."""


class InvalidTimestampError(KafkalogError):
    """A record timestamp outside ``message.timestamp.before.max.ms`` / ``after.max.ms``."""


class CorruptSnapshotError(KafkalogError):
    """A producer-state snapshot that cannot be read."""


class CorruptCheckpointError(KafkalogError):
    """A checkpoint file (offset, leader-epoch, partition.metadata, meta.properties) that cannot be
    parsed."""


class InvalidTopicError(KafkalogError):
    """A topic name Kafka would refuse (illegal characters, too long, '.' or '..')."""


class TopicExistsError(InvalidTopicError):
    """Creating a topic that exists (Kafka: TopicExistsException); ``create_topic(...,
    exist_ok=True)`` accepts it."""


class InvalidConfigError(KafkalogError):
    """A configuration key or value Kafka would refuse."""


class InvalidIsolationLevelError(InvalidConfigError, ValueError):
    """An isolation level that is neither ``read_uncommitted`` nor ``read_committed`` (also a
    ValueError)."""


class LogDirError(KafkalogError):
    """A data directory problem: cannot lock it, cannot create it, a malformed partition directory."""


class KafkalogIOError(KafkalogError):
    """An operating-system I/O failure (disk full, permission denied) wrapped with its file."""


class ProducerStateError(KafkalogError):
    """Producer id / epoch / sequence rules violated (out-of-order sequence, fenced epoch)."""


class CleanerError(KafkalogError):
    """A compaction failure of one partition (the partition is marked uncleanable)."""


class GroupIdNotFoundError(KafkalogError):
    """A consumer group with no committed offsets and no stored metadata (Kafka:
    GroupIdNotFoundException)."""


class NonEmptyGroupError(KafkalogError):
    """A change refused because the consumer group has members (Kafka: GroupNotEmptyException)."""


class ProducerTimeoutError(KafkalogError):
    """Kafka: TimeoutException (a producer's future not resolved within the time asked)."""


# --- the record layer --------------------------------------------------------------------------

class InvalidArgumentError(InvalidRecordError, ValueError):
    """An argument Kafka would refuse with IllegalArgumentException (builders, mutations); also a
    ValueError."""


class KernelBuildError(KafkalogError):
    """The compiled kernels are a partial or stale build: rebuild them
    (``python setup.py build_ext --inplace``) or set ``KAFKALOG_PURE_PYTHON=1``."""


# --- the log layer -----------------------------------------------------------------------------

class OutOfOrderSequenceError(ProducerStateError):
    """Kafka: OutOfOrderSequenceException."""


class InvalidProducerEpochError(ProducerStateError):
    """Kafka: InvalidProducerEpochException (epoch older than the last seen one)."""


class InvalidTxnStateError(ProducerStateError):
    """Kafka: InvalidTxnStateException (non-transactional write during an open transaction)."""


class TransactionCoordinatorFencedError(ProducerStateError):
    """Kafka: TransactionCoordinatorFencedException (coordinator epoch went backwards)."""


class IndexEntryOutOfRangeError(KafkalogError, IndexError):
    """``entry(n)`` with ``n`` outside ``0 .. entries-1`` (Kafka: IllegalArgumentException)."""


class IndexOffsetOverflowError(LogSegmentOffsetOverflowError):
    """An offset that does not fit ``offset - base_offset`` in ``0 .. Int.MAX``
    (Kafka: IndexOffsetOverflowException)."""


class ReadOnlyIndexError(KafkalogIOError):
    """A write to an index opened read-only."""


class TimestampOrderError(InvalidOffsetError):
    """A time-index append with a timestamp below the last one (Kafka: IllegalStateException)."""


class InvalidEpochError(KafkalogError, ValueError):
    """A negative epoch or start offset given to :meth:`LeaderEpochFileCache.assign`
    (Kafka: IllegalArgumentException)."""


# --- the cleaner -------------------------------------------------------------------------------

class CleaningAbortedError(KafkalogError):
    """Cleaning of a partition was aborted (partition truncated, deleted, or segments removed by
    retention while cleaning); nothing is lost, the next round starts over."""


# --- the coordinator ---------------------------------------------------------------------------

class CorruptTransactionLogError(KafkalogError):
    """A ``__transaction_state`` record that does not decode."""


class ProducerFencedError(ProducerStateError):
    """Kafka: ProducerFencedException (a newer producer with the same transactional.id took over)."""


class InvalidProducerIdMappingError(ProducerStateError):
    """Kafka: InvalidPidMappingException (an unknown transactional id, or another producer id)."""


class ConcurrentTransactionsError(KafkalogError):
    """Kafka: ConcurrentTransactionsException (the transaction is being ended; retriable)."""


class InvalidTransactionTimeoutError(KafkalogError):
    """Kafka: InvalidTxnTimeoutException (``transaction.timeout.ms`` above ``transaction.max.timeout.ms``)."""


class CorruptProducerIdsError(KafkalogError):
    """The producer-id reservation file cannot be read."""


# --- the embedded client -----------------------------------------------------------------------

class NoOffsetForPartitionError(InvalidOffsetError):
    """No position, no committed offset and ``auto.offset.reset=none`` (Kafka's
    NoOffsetForPartitionException). ``partitions`` lists them."""

    def __init__(self, message: str, partitions: Sequence[_TopicPartition] = (), **kw: Any) -> None:
        super().__init__(message, **kw)
        self.partitions = list(partitions)


class ConsumerOffsetOutOfRangeError(OffsetOutOfRangeError):
    """A position outside the log with ``auto.offset.reset=none`` (Kafka's
    OffsetOutOfRangeException): ``offsets`` maps each partition to its position."""

    def __init__(self, message: str, offsets: Mapping[_TopicPartition, int] | None = None,
                 **kw: Any) -> None:
        super().__init__(message, **kw)
        self.offsets = dict(offsets or {})


class IllegalStateError(KafkalogError):
    """A call the consumer's state does not allow (Kafka's IllegalStateException)."""


# --- the Spark source and sink -----------------------------------------------------------------

class InvalidOptionError(InvalidConfigError):
    """An option of the kafkalog Spark source or sink has an invalid value or combination."""


# --- the broker --------------------------------------------------------------------------------

class FrameError(KafkalogError):
    """A frame the broker refuses (negative or oversized length): the connection is closed."""


class InvalidRequestError(KafkalogError):
    """A request that cannot be parsed: the connection is closed (Kafka's InvalidRequestException)."""


class RequestBoundsError(InvalidRequestError):
    """A request with a length or count its frame cannot hold or Kafka refuses (an array of more
    elements than bytes left ...): refused before kio reads it; the connection is closed, as Kafka
    closes it on the InvalidRequestException its reader's RuntimeException becomes."""

    def __init__(self, message: str, api_key: int, api_version: int, correlation_id: int,
                 position: int) -> None:
        super().__init__(message, position=position)
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


class SchemaCompileError(KafkalogError):
    """A kio request class with a field the bounds program cannot describe (a kio upgrade added a
    Kafka type): the broker refuses to start serving that version rather than serve it unguarded."""


class UnsupportedVersionError(InvalidRequestError):
    """An API key or version outside what the broker advertises."""

    def __init__(self, message: str, api_key: int, api_version: int, correlation_id: int) -> None:
        super().__init__(message)
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


class SaslStateError(KafkalogError):
    """A request the SASL state does not allow: the connection is closed without an answer."""


class SaslAuthenticationFailed(KafkalogError):
    """The client's credentials are refused (Kafka's SASL_AUTHENTICATION_FAILED)."""


class AcksZeroFailure(KafkalogError):
    """A Produce with acks=0 had an error: the connection is closed instead of answering."""


__all__ = [
    "KafkalogError", "CorruptRecordError", "InvalidRecordError", "CompressionError",
    "UnsupportedCompressionTypeError", "UnsupportedMagicError", "RecordTooLargeError",
    "RecordBatchTooLargeError", "CorruptIndexError", "InvalidOffsetError", "IndexFullError",
    "LogSegmentOffsetOverflowError", "OffsetOutOfRangeError", "InvalidTimestampError",
    "CorruptSnapshotError", "CorruptCheckpointError", "InvalidTopicError", "TopicExistsError",
    "InvalidConfigError",
    "LogDirError", "KafkalogIOError", "ProducerStateError", "CleanerError",
    "GroupIdNotFoundError", "NonEmptyGroupError", "InvalidIsolationLevelError",
    "ProducerTimeoutError",
    "InvalidArgumentError",
    "KernelBuildError",
    "OutOfOrderSequenceError",
    "InvalidProducerEpochError",
    "InvalidTxnStateError",
    "TransactionCoordinatorFencedError",
    "IndexEntryOutOfRangeError",
    "IndexOffsetOverflowError",
    "ReadOnlyIndexError",
    "TimestampOrderError",
    "InvalidEpochError",
    "CleaningAbortedError",
    "CorruptTransactionLogError",
    "ProducerFencedError",
    "InvalidTransactionTimeoutError",
    "CorruptProducerIdsError",
    "NoOffsetForPartitionError",
    "ConsumerOffsetOutOfRangeError",
    "IllegalStateError",
    "InvalidOptionError",
    "FrameError",
    "InvalidRequestError",
    "RequestBoundsError",
    "SchemaCompileError",
    "UnsupportedVersionError",
    "SaslStateError",
    "SaslAuthenticationFailed",
    "AcksZeroFailure",
]
