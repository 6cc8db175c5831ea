"""Sizes, field offsets and enums of Kafka's record formats (spec §1.2-§1.7)."""
from __future__ import annotations

import enum
import struct
from typing import Optional

from kafkalog.errors import InvalidConfigError, InvalidIsolationLevelError

# --- log entry framing (every magic) ---------------------------------------------------------------
OFFSET_OFFSET = 0
OFFSET_LENGTH = 8
SIZE_OFFSET = 8
SIZE_LENGTH = 4
LOG_OVERHEAD = 12
MAGIC_OFFSET = 16
HEADER_SIZE_UP_TO_MAGIC = 17
#: FileLogInputStream stops when fewer than this many bytes remain.
MIN_ENTRY_HEADER = 17

MAGIC_VALUE_V0 = 0
MAGIC_VALUE_V1 = 1
MAGIC_VALUE_V2 = 2
CURRENT_MAGIC_VALUE = MAGIC_VALUE_V2

# --- legacy (v0/v1) messages -----------------------------------------------------------------------
LEGACY_CRC_OFFSET = 12          # entry-relative
LEGACY_MAGIC_OFFSET = 16
LEGACY_ATTRIBUTES_OFFSET = 17
LEGACY_TIMESTAMP_OFFSET = 18
RECORD_OVERHEAD_V0 = 14
RECORD_OVERHEAD_V1 = 22
LEGACY_HEADER_SIZE_V0 = 6       # crc + magic + attributes
LEGACY_HEADER_SIZE_V1 = 14
LEGACY_COMPRESSION_CODEC_MASK = 0x07
LEGACY_TIMESTAMP_TYPE_MASK = 0x08

# --- v2 record batch header ------------------------------------------------------------------------
BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
V2_MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_OFFSET = 53
RECORDS_COUNT_OFFSET = 57
RECORDS_OFFSET = 61
RECORD_BATCH_OVERHEAD = 61
#: bytes of the batch covered by the CRC start here
CRC_START = ATTRIBUTES_OFFSET

COMPRESSION_CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG_MASK = 0x10
CONTROL_FLAG_MASK = 0x20
DELETE_HORIZON_FLAG_MASK = 0x40

MAX_RECORD_OVERHEAD = 21

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1
INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
#: Java's ``Double.MAX_VALUE``
DOUBLE_MAX = 1.7976931348623157e308

#: Kafka's ``max.message.bytes`` default (1 MiB + LOG_OVERHEAD).
DEFAULT_MAX_MESSAGE_BYTES = 1048588

#: ``>q i i b I h i q q q h i i``: the 61-byte v2 header in one struct.
V2_HEADER = struct.Struct(">qiibIhiqqqhii")
#: ``>q i I b b``: offset, length, legacy crc, magic, attributes (18 bytes).
LEGACY_HEADER = struct.Struct(">qiIbb")
ENTRY_HEADER = struct.Struct(">qi")


class CompressionType(enum.IntEnum):
    """Compression codec ids (attributes bits 0-2)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @property
    def display_name(self) -> str:
        """Kafka's ``CompressionType.name`` (``none``, ``gzip``, ...)."""
        return self.name.lower()

    @classmethod
    def for_id(cls, codec_id: int) -> CompressionType:
        """The codec for ``codec_id``; ValueError for 5-7 (callers wrap it)."""
        return cls(codec_id)

    @classmethod
    def for_name(cls, name: str, producer: Optional[CompressionType] = None) -> CompressionType:
        """The codec a ``compression.type`` value names, case-insensitively: the producer's
        ``none``/``gzip``/``snappy``/``lz4``/``zstd``, and the topic's ``uncompressed`` (= none)
        and ``producer`` (keep the producer's codec: ``producer``, which must then be given).

        Raises :class:`~kafkalog.errors.InvalidConfigError` naming the accepted values."""
        key = name.strip().lower() if isinstance(name, str) else None
        if key == "uncompressed":
            return cls.NONE
        if key == "producer" and producer is not None:
            return producer
        if key is not None and key.upper() in cls.__members__:
            return cls[key.upper()]
        accepted = PRODUCER_COMPRESSION_TYPES + (("producer",) if producer is not None else ()) \
            + ("uncompressed",)
        raise InvalidConfigError(f"Unknown compression type {name!r}: expected one of "
                                 f"{', '.join(accepted)}")


#: the producer's ``compression.type`` values (Kafka's ``CompressionType`` names)
PRODUCER_COMPRESSION_TYPES = ("none", "gzip", "snappy", "lz4", "zstd")
#: the topic's ``compression.type`` values (Kafka's ``BrokerCompressionType``)
TOPIC_COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")


class TimestampType(enum.IntEnum):
    """Kafka's ``TimestampType``: its id (kafka-python's ``timestamp_type``, an int) and its name
    (Java's ``TimestampType.name``, ``str()``). A member equals both: ``CREATE_TIME == 0`` and
    ``CREATE_TIME == "CreateTime"``, so a record's ``timestamp_type`` reads either way."""

    NO_TIMESTAMP_TYPE = -1
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1

    @property
    def display_name(self) -> str:
        return _TS_NAMES[self]

    @classmethod
    def name_of(cls, timestamp_type: int) -> str:
        """Kafka's name of a timestamp type id (``NoTimestampType`` for any other id)."""
        try:
            return _TS_NAMES[cls(timestamp_type)]
        except ValueError:
            return _TS_NAMES[cls.NO_TIMESTAMP_TYPE]

    def __str__(self) -> str:
        return _TS_NAMES[self]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            return other == _TS_NAMES[self]
        return int.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = int.__hash__


_TS_NAMES = {TimestampType.NO_TIMESTAMP_TYPE: "NoTimestampType",
             TimestampType.CREATE_TIME: "CreateTime",
             TimestampType.LOG_APPEND_TIME: "LogAppendTime"}


class IsolationLevel(enum.IntEnum):
    """Kafka's ``IsolationLevel``: its id on the wire (Fetch, ListOffsets ``isolation_level``)
    and its name in ``isolation.level`` (:attr:`config_name`, ``str()``)."""

    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1

    @property
    def config_name(self) -> str:
        """``read_uncommitted`` or ``read_committed``."""
        return self.name.lower()

    def __str__(self) -> str:
        return self.name.lower()

    @classmethod
    def of(cls, value: IsolationLevel | int | str) -> IsolationLevel:
        """The level ``value`` names: a level, its id, or its config name (any case). A
        :class:`ValueError` (an :class:`~kafkalog.errors.InvalidConfigError`) names the
        accepted values otherwise."""
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            member = cls.__members__.get(value.strip().upper())
            if member is not None:
                return member
        elif isinstance(value, int) and not isinstance(value, bool) and value in (0, 1):
            return cls(value)
        raise InvalidIsolationLevelError(f"Invalid isolation level {value!r}: expected "
                                         f"read_uncommitted or read_committed")


class ControlRecordType(enum.IntEnum):
    """Control record types (the int16 ``type`` of a control record key)."""

    UNKNOWN = -1
    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6

    @classmethod
    def from_type_id(cls, type_id: int) -> ControlRecordType:
        try:
            t = cls(type_id)
        except ValueError:
            return cls.UNKNOWN
        return t


def java_int(v: int) -> int:
    """``v`` as a Java ``int`` (two's complement, 32 bits: what Java's int arithmetic leaves)."""
    return ((v + 0x80000000) & 0xFFFFFFFF) - 0x80000000


def java_long(v: int) -> int:
    """``v`` as a Java ``long`` (two's complement, 64 bits)."""
    return ((v + 0x8000000000000000) & 0xFFFFFFFFFFFFFFFF) - 0x8000000000000000


def increment_sequence(sequence: int, increment: int) -> int:
    """DefaultRecordBatch.incrementSequence with Java's int arithmetic (every operation wraps at 32
    bits): past Int.MAX the sequence continues at 0."""
    if sequence > java_int(INT32_MAX - increment):
        return java_int(java_int(increment - java_int(INT32_MAX - sequence)) - 1)
    return java_int(sequence + increment)


def decrement_sequence(sequence: int, decrement: int) -> int:
    """DefaultRecordBatch.decrementSequence with Java's int arithmetic: below 0 it continues at
    Int.MAX."""
    if sequence < decrement:
        return java_int(java_int(INT32_MAX - java_int(decrement - sequence)) + 1)
    return java_int(sequence - decrement)
