"""Primitive encoders of Kafka's protocol for the hand-written Produce and Fetch responses
(classic and flexible forms: int16-length strings and int32-length arrays before the first flexible
version, unsigned-varint "compact" lengths plus tagged fields after)."""

from __future__ import annotations

import struct
import uuid

INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
EMPTY_TAGS = b"\x00"


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


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
