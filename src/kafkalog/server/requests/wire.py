"""Primitive encoders of Kafka's protocol for the hand-written Produce and Fetch responses
(classic and flexible forms: int16-length strings and int32-length arrays before the first flexible
version, unsigned-varint "compact" lengths plus tagged fields after)."""

from __future__ import annotations

import struct
import uuid
from typing import Any

from kafkalog.record.varint import write_unsigned_varint

INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
EMPTY_TAGS = b"\x00"


uvarint = write_unsigned_varint


def array_len(n: int, flexible: bool) -> bytes:
    return uvarint(n + 1) if flexible else INT32.pack(n)


def nullable_array_len(n: int | None, flexible: bool) -> bytes:
    if n is None:
        return b"\x00" if flexible else INT32.pack(-1)
    return array_len(n, flexible)


def string(s: str, flexible: bool) -> bytes:
    b = s.encode("utf-8")
    return (uvarint(len(b) + 1) if flexible else INT16.pack(len(b))) + b


def nullable_string(s: str | None, flexible: bool) -> bytes:
    if s is None:
        return b"\x00" if flexible else INT16.pack(-1)
    return string(s, flexible)


def bytes_len(n: int, flexible: bool) -> bytes:
    """The length prefix of a (non-null) bytes/records field of ``n`` bytes."""
    return uvarint(n + 1) if flexible else INT32.pack(n)


def uuid_bytes(u: uuid.UUID | None) -> bytes:
    return u.bytes if u is not None else bytes(16)


def topic_key(key: Any, by_id: bool, flexible: bool) -> bytes:
    """A response's topic: its ID (Produce v13+, Fetch v13+) or its name."""
    if by_id:
        return uuid_bytes(key if isinstance(key, uuid.UUID) else None)
    return string(key, flexible)
