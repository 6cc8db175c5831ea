"""Zig-zag varint (32-bit) and varlong (64-bit) encoding, as Kafka's ``ByteUtils`` (spec §1.1).

Decoding accepts non-minimal forms (any 1-5 / 1-10 byte encoding), drops bits beyond 32 / 64 as
Java does, and raises :class:`InvalidRecordError` naming the position when the encoding is longer
than 5 / 10 bytes or the buffer ends inside it.
"""
from __future__ import annotations

from kafkalog.errors import InvalidRecordError
from kafkalog.record.crc import Buffer

__all__ = ["read_varint", "read_varlong", "write_varint", "write_varlong", "size_of_varint",
           "size_of_varlong", "read_unsigned_varint", "write_unsigned_varint"]

_M32 = 0xFFFFFFFF
_M64 = 0xFFFFFFFFFFFFFFFF


def _underflow(what: str, pos: int) -> InvalidRecordError:
    return InvalidRecordError(f"Found invalid record structure: buffer underflow reading {what}",
                              position=pos)


def _too_long(what: str, pos: int) -> InvalidRecordError:
    return InvalidRecordError(f"Found invalid record structure: {what} is too long", position=pos)


def _read_unsigned(buf: Buffer, pos: int, end: int, what: str, max_shift: int, mask: int) -> tuple[int, int]:
    """The varint loop: at most ``max_shift // 7 + 1`` bytes (5 for a varint, 10 for a varlong),
    the value masked to 32 or 64 bits; returns ``(value, new_pos)``."""
    start = pos
    value = 0
    shift = 0
    while True:
        if pos >= end:
            raise _underflow(what, start)
        b = buf[pos]
        pos += 1
        if b & 0x80:
            value |= (b & 0x7F) << shift
            shift += 7
            if shift > max_shift:
                raise _too_long(what, start)
        else:
            value |= b << shift
            return value & mask, pos


def _check_position(pos: int, end: int) -> None:
    if pos < 0 or pos > end:
        raise InvalidRecordError(f"Found invalid record structure: position {pos} outside the buffer",
                                 position=pos)


def read_unsigned_varint(buf: Buffer, pos: int, end: int | None = None, what: str = "varint") -> tuple[int, int]:
    """Read an unsigned 32-bit varint at ``pos``; returns ``(value, new_pos)``."""
    return _read_unsigned(buf, pos, len(buf) if end is None else end, what, 28, _M32)


def read_varint(buf: Buffer, pos: int, end: int | None = None, what: str = "varint") -> tuple[int, int]:
    """Read a zig-zag varint at ``pos``; returns ``(value, new_pos)``."""
    if end is None:
        end = len(buf)
    _check_position(pos, end)
    if pos < end:
        b = buf[pos]
        if not b & 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
    v, pos = _read_unsigned(buf, pos, end, what, 28, _M32)
    return (v >> 1) ^ -(v & 1), pos


def read_varlong(buf: Buffer, pos: int, end: int | None = None, what: str = "varlong") -> tuple[int, int]:
    """Read a zig-zag varlong at ``pos``; returns ``(value, new_pos)``."""
    if end is None:
        end = len(buf)
    _check_position(pos, end)
    v, pos = _read_unsigned(buf, pos, end, what, 63, _M64)
    return (v >> 1) ^ -(v & 1), pos


def write_unsigned_varint(value: int) -> bytes:
    """Unsigned varint encoding of ``value`` (0 <= value < 2**64)."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _check(value: int, bits: int, what: str = "value") -> None:
    if not -(1 << (bits - 1)) <= value < (1 << (bits - 1)):
        raise InvalidRecordError(f"{what} {value} does not fit in a {bits}-bit "
                                 f"{'varint' if bits == 32 else 'varlong'}")


_SMALL = [bytes([(i << 1) if i >= 0 else ((-i << 1) - 1)]) for i in range(-64, 64)]


def write_varint(value: int) -> bytes:
    """Zig-zag varint encoding of a 32-bit signed value."""
    if -64 <= value < 64:
        return _SMALL[value + 64]
    _check(value, 32)
    return write_unsigned_varint(((value << 1) ^ (value >> 31)) & _M32)


def write_varlong(value: int) -> bytes:
    """Zig-zag varlong encoding of a 64-bit signed value."""
    if -64 <= value < 64:
        return _SMALL[value + 64]
    _check(value, 64)
    return write_unsigned_varint(((value << 1) ^ (value >> 63)) & _M64)


def _size_of_unsigned(v: int) -> int:
    """Encoded size of an unsigned varint (``v`` >= 0): one byte per 7 bits, at least one."""
    n = 1
    while v >= 0x80:
        v >>= 7
        n += 1
    return n


def size_of_varint(value: int) -> int:
    """Encoded size of a zig-zag varint."""
    return _size_of_unsigned(((value << 1) ^ (value >> 31)) & _M32)


def size_of_varlong(value: int) -> int:
    """Encoded size of a zig-zag varlong."""
    return _size_of_unsigned(((value << 1) ^ (value >> 63)) & _M64)
