"""Kafka's ``__transaction_state`` record formats (``TransactionLogKey`` v0 and ``TransactionLogValue``
v0/v1 of ``transaction-coordinator/src/main/resources/common/message``) and the transaction states
(``TransactionState``), so Kafka's tools and a Kafka broker opening the directory read them.

Key: ``int16 version (0), string TransactionalId``. Value v0: ``int16 version, int64 ProducerId,
int16 ProducerEpoch, int32 TransactionTimeoutMs, int8 TransactionStatus, nullable array of
(string Topic, array of int32 PartitionIds) TransactionPartitions, int64
TransactionLastUpdateTimestampMs, int64 TransactionStartTimestampMs``. v1 is the flexible form
(compact strings/arrays, tagged PreviousProducerId(0), NextProducerId(1),
ClientTransactionVersion(2), NextProducerEpoch(3), each written only when not its default). Kafka
writes v1 once ``transaction.version`` >= 1 is finalized (``TransactionVersion.transactionLogValueVersion``),
for every client, and v0 before; both are read. The partitions are null in state Empty, as Kafka
writes them. A tombstone (null value) removes a transactional id.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field

from kafkalog.errors import CorruptTransactionLogError
from kafkalog.record.varint import write_unsigned_varint

__all__ = [
    "TRANSACTION_STATE_TOPIC",
    "CorruptTransactionLogError",
    "TransactionMetadata",
    "TransactionLogValue",
    "TransactionState",
    "java_string_hash",
    "key_from_bytes",
    "key_to_bytes",
    "partition_for",
    "read_value",
    "value_from_bytes",
    "value_to_bytes",
]

TRANSACTION_STATE_TOPIC = "__transaction_state"

_H = struct.Struct(">h")
_VALUE_HEAD = struct.Struct(">hqhib")
_I32 = struct.Struct(">i")
_TAIL = struct.Struct(">qq")


class TransactionState(enum.IntEnum):
    """Kafka's ``TransactionState`` ids (the ``TransactionStatus`` byte)."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7


@dataclass
class TransactionMetadata:
    """One transactional id's state (Kafka's ``TransactionMetadata``): the persisted fields, then
    ``last_producer_epoch``, which Kafka keeps in memory only (KIP-360's retried InitProducerId,
    KIP-890's retried EndTxn)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState = TransactionState.EMPTY
    partitions: set[tuple[str, int]] = field(default_factory=set)
    txn_last_update_timestamp: int = -1
    txn_start_timestamp: int = -1
    #: the epoch before the last bump by the same producer (-1 when a new producer took over)
    last_producer_epoch: int = -1
    #: Kafka's ``prevProducerId``: the producer id before the last transition (-1 before the first)
    previous_producer_id: int = -1
    #: KIP-890: the producer id the transaction being ended hands over to (its epoch was exhausted)
    next_producer_id: int = -1
    #: the transaction version of the client's last AddPartitionsToTxn / EndTxn / Produce (0, or 2
    #: for transactions v2)
    client_transaction_version: int = 0


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode`` (UTF-16 code units, signed 32-bit)."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


def partition_for(transactional_id: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(transactionalId.hashCode) % transactionTopicPartitionCount``."""
    h = java_string_hash(transactional_id)
    return (0 if h == -2**31 else abs(h)) % partitions


def _string(s: str) -> bytes:
    b = s.encode("utf-8")
    return _H.pack(len(b)) + b


def key_to_bytes(transactional_id: str) -> bytes:
    return _H.pack(0) + _string(transactional_id)


class _Reader:
    __slots__ = ("buf", "pos", "what")

    def __init__(self, buf: bytes, what: str) -> None:
        self.buf = buf
        self.pos = 0
        self.what = what

    def take(self, st: struct.Struct) -> tuple:
        if self.pos + st.size > len(self.buf):
            raise CorruptTransactionLogError(f"{self.what} is truncated", position=self.pos)
        v = st.unpack_from(self.buf, self.pos)
        self.pos += st.size
        return v

    def raw(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise CorruptTransactionLogError(f"{self.what} is truncated", position=self.pos)
        b = self.buf[self.pos:self.pos + n]
        self.pos += n
        return bytes(b)

    def uvarint(self) -> int:
        shift = out = 0
        while True:
            if self.pos >= len(self.buf) or shift > 28:
                raise CorruptTransactionLogError(f"{self.what}: bad varint", position=self.pos)
            b = self.buf[self.pos]
            self.pos += 1
            out |= (b & 0x7F) << shift
            if not b & 0x80:
                return out
            shift += 7

    def string(self, compact: bool) -> str:
        n = self.uvarint() - 1 if compact else self.take(_H)[0]
        try:
            return self.raw(n).decode("utf-8")
        except UnicodeDecodeError:
            raise CorruptTransactionLogError(f"{self.what}: string is not UTF-8", position=self.pos) from None

    def array_len(self, compact: bool) -> int:
        return self.uvarint() - 1 if compact else self.take(_I32)[0]

    def skip_tags(self) -> dict[int, bytes]:
        tags = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            tags[tag] = self.raw(self.uvarint())
        return tags


def key_from_bytes(data: bytes) -> str:
    """The transactional id of a key (version 0)."""
    r = _Reader(data, "TransactionLogKey")
    version = r.take(_H)[0]
    if version != 0:
        raise CorruptTransactionLogError(f"unknown TransactionLogKey version {version}", position=0)
    return r.string(False)


def _compact_string(s: str) -> bytes:
    b = s.encode("utf-8")
    return write_unsigned_varint(len(b) + 1) + b


_I64 = struct.Struct(">q")


def value_to_bytes(m: TransactionMetadata, version: int = 1) -> bytes:
    """``TransactionLogValue`` of ``m`` in ``version`` (1, the flexible form Kafka writes with
    ``transaction.version`` >= 1 finalized; 0 before: no producer-id or client-version fields)."""
    by_topic: dict[str, list[int]] | None = None
    if m.state != TransactionState.EMPTY:
        by_topic = {}
        for t, p in sorted(m.partitions):
            by_topic.setdefault(t, []).append(p)
    out = bytearray(_VALUE_HEAD.pack(version, m.producer_id, m.producer_epoch, m.txn_timeout_ms,
                                     int(m.state)))
    if version == 0:
        if m.client_transaction_version or m.next_producer_id != -1:
            raise ValueError("TransactionLogValue v0 cannot hold transactions v2 fields")
        out += _I32.pack(-1 if by_topic is None else len(by_topic))
        for t, parts in (by_topic or {}).items():
            out += _string(t)
            out += _I32.pack(len(parts))
            for p in parts:
                out += _I32.pack(p)
        out += _TAIL.pack(m.txn_last_update_timestamp, m.txn_start_timestamp)
        return bytes(out)
    out += write_unsigned_varint(0 if by_topic is None else len(by_topic) + 1)
    for t, parts in (by_topic or {}).items():
        out += _compact_string(t)
        out += write_unsigned_varint(len(parts) + 1)
        for p in parts:
            out += _I32.pack(p)
        out += b"\x00"                             # the partition struct's tagged fields
    out += _TAIL.pack(m.txn_last_update_timestamp, m.txn_start_timestamp)
    tags: list[bytes] = []
    if m.previous_producer_id != -1:
        tags.append(b"\x00\x08" + _I64.pack(m.previous_producer_id))
    if m.next_producer_id != -1:
        tags.append(b"\x01\x08" + _I64.pack(m.next_producer_id))
    if m.client_transaction_version != 0:
        tags.append(b"\x02\x02" + _H.pack(m.client_transaction_version))
    out += write_unsigned_varint(len(tags))
    for tag in tags:
        out += tag
    return bytes(out)


@dataclass
class TransactionLogValue:
    """A ``TransactionLogValue`` record as stored: its version, fields in the schema's order
    (partitions grouped by topic as written; None for the null array), and the tagged fields of
    version 1 (``PreviousProducerId`` tag 0, ``NextProducerId`` tag 1, ``ClientTransactionVersion``
    tag 2, ``NextProducerEpoch`` tag 3; their defaults when absent)."""

    version: int
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_status: int
    transaction_partitions: list[tuple[str, list[int]]] | None
    transaction_last_update_timestamp_ms: int
    transaction_start_timestamp_ms: int
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_transaction_version: int = 0
    next_producer_epoch: int = -1


_TAG_FIELDS = {0: ("previous_producer_id", struct.Struct(">q")), 1: ("next_producer_id", struct.Struct(">q")),
               2: ("client_transaction_version", struct.Struct(">h")),
               3: ("next_producer_epoch", struct.Struct(">h"))}


def read_value(data: bytes) -> TransactionLogValue:
    """Decode a ``TransactionLogValue`` (version 0 or 1) field by field."""
    r = _Reader(data, "TransactionLogValue")
    version, pid, epoch, timeout, status = r.take(_VALUE_HEAD)
    if version not in (0, 1):
        raise CorruptTransactionLogError(f"unknown TransactionLogValue version {version}", position=0)
    compact = version >= 1
    n = r.array_len(compact)
    parts: list[tuple[str, list[int]]] | None = None if n < 0 else []
    for _ in range(max(n, 0)):
        topic = r.string(compact)
        ids = [r.take(_I32)[0] for _ in range(max(r.array_len(compact), 0))]
        if compact:
            r.skip_tags()
        assert parts is not None
        parts.append((topic, ids))
    last_update, start = r.take(_TAIL)
    out = TransactionLogValue(version, pid, epoch, timeout, status, parts, last_update, start)
    if compact:
        for tag, raw in r.skip_tags().items():
            known = _TAG_FIELDS.get(tag)
            if known is not None and len(raw) == known[1].size:
                setattr(out, known[0], known[1].unpack(raw)[0])
    return out


def value_from_bytes(transactional_id: str, data: bytes) -> TransactionMetadata:
    """Decode a ``TransactionLogValue`` (version 0 or 1)."""
    v = read_value(data)
    try:
        state = TransactionState(v.transaction_status)
    except ValueError:
        raise CorruptTransactionLogError(f"unknown TransactionStatus {v.transaction_status}",
                                         position=15) from None
    parts = set() if state == TransactionState.EMPTY else \
        {(t, p) for t, ids in v.transaction_partitions or () for p in ids}
    return TransactionMetadata(transactional_id, v.producer_id, v.producer_epoch, v.transaction_timeout_ms,
                               state, parts, v.transaction_last_update_timestamp_ms,
                               v.transaction_start_timestamp_ms,
                               previous_producer_id=v.previous_producer_id,
                               next_producer_id=v.next_producer_id,
                               client_transaction_version=v.client_transaction_version)
