"""Pure-Python twin of the compiled bounds kernel ``_bounds.pyx`` (same API, same results);
:mod:`kafkalog.server.request_bounds` picks one of the two.

:func:`walk` runs a bounds program (:mod:`kafkalog.server.bounds_program`) over a request frame
(without its size field): the request header, then the body. It reads lengths and counts and steps
over the bytes they cover, allocating nothing in proportion to them, and stops at the first length
or count the frame cannot hold or Kafka refuses. It returns the position where the body ends, or a
violation: ``(status, name, value, available, position)`` with ``status`` one of the ``V_*``
codes, ``name`` an index into the program's names (-1: none), ``value`` the length or count read,
``available`` the bytes left after it, ``position`` the byte where the length or count starts.
"""

from __future__ import annotations

import functools
import struct

IMPLEMENTATION = "python"

__all__ = ["IMPLEMENTATION", "MAX_ARRAY_LENGTH", "MAX_TAGGED_FIELD_COUNT", "V_ARRAY_MAX",
           "V_ARRAY_REMAINING", "V_BYTES_REMAINING", "V_NEGATIVE_LENGTH", "V_NULL",
           "V_STRING_LENGTH", "V_TAGS_MAX", "V_TAGS_NEGATIVE", "V_TAGS_REMAINING", "V_UNDERFLOW",
           "V_VARINT_TOO_LONG", "walk"]

#: Kafka's ``MessageUtil.MAX_ARRAY_LENGTH`` and ``MAX_TAGGED_FIELD_COUNT`` (Kafka 4.4)
MAX_ARRAY_LENGTH = 1_000_000
MAX_TAGGED_FIELD_COUNT = 10_000
#: the longest string Kafka reads (``0x7fff``: a string length is an int16 in the classic versions)
MAX_STRING_LENGTH = 0x7FFF

V_UNDERFLOW, V_VARINT_TOO_LONG, V_NULL, V_STRING_LENGTH, V_NEGATIVE_LENGTH, V_BYTES_REMAINING, \
    V_ARRAY_REMAINING, V_ARRAY_MAX, V_TAGS_NEGATIVE, V_TAGS_REMAINING, V_TAGS_MAX = range(1, 12)

_FIXED, _STRING, _BYTES, _STRUCT, _NULLABLE_STRUCT, _ARRAY, _TAGS = range(1, 8)
_COMPACT, _NULLABLE = 1, 2
_INT31 = 2**31


class _Violation(Exception):
    def __init__(self, status: int, name: int, value: int, available: int, position: int) -> None:
        self.result = (status, name, value, available, position)


_INT = {1: struct.Struct(">b").unpack_from, 2: struct.Struct(">h").unpack_from,
        4: struct.Struct(">i").unpack_from}
Prog = tuple[int, ...]


@functools.lru_cache(maxsize=1024)
def _words(code: bytes) -> Prog:
    return tuple(memoryview(code).cast("i"))


def walk(code: bytes, data: bytes) -> int | tuple[int, int, int, int, int]:
    """The end of the body, or the first violation (see the module docstring)."""
    prog = _words(code)
    buf = data if isinstance(data, bytes) else bytes(data)
    end = len(buf)
    try:
        pos = _segment(prog, prog[0], buf, 0, end)
        return _segment(prog, prog[1], buf, pos, end)
    except _Violation as v:
        return v.result


def _underflow(need: int, pos: int, end: int) -> _Violation:
    return _Violation(V_UNDERFLOW, -1, need, end - pos, pos)


def _int(buf: bytes, pos: int, size: int, end: int) -> int:
    if end - pos < size:
        raise _underflow(size, pos, end)
    return int(_INT[size](buf, pos)[0])


def _uvarint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """(value, position after it): at most 5 bytes, kio's unsigned reading (Kafka keeps the low
    32 bits of the same bytes)."""
    if pos < end and buf[pos] < 0x80:                   # the usual one-byte varint
        return buf[pos], pos + 1
    value = 0
    for i in range(5):
        if pos + i >= end:
            raise _underflow(i + 1, pos, end)
        b = buf[pos + i]
        value |= (b & 0x7F) << (7 * i)
        if not b & 0x80:
            return value, pos + i + 1
    raise _Violation(V_VARINT_TOO_LONG, -1, value, end - pos, pos)


def _length(buf: bytes, pos: int, end: int, flags: int, legacy_size: int) -> tuple[int, int]:
    """(length, position after it) of a string, bytes or array: -1 for null."""
    if flags & _COMPACT:
        value, after = _uvarint(buf, pos, end)
        return value - 1, after
    return _int(buf, pos, legacy_size, end), pos + legacy_size


def _segment(prog: Prog, seg: int, buf: bytes, pos: int, end: int) -> int:
    n = prog[seg]
    op = seg + 1
    for _ in range(n):
        pos = _op(prog, op, buf, pos, end)
        op += 4
    return pos


def _op(prog: Prog, op: int, buf: bytes, pos: int, end: int) -> int:
    code, a, b, c = prog[op:op + 4]
    if code == _FIXED:
        if end - pos < a:
            raise _underflow(a, pos, end)
        return pos + a
    if code in (_STRING, _BYTES):
        n, after = _length(buf, pos, end, a, 2 if code == _STRING else 4)
        if n < 0:
            if n == -1 and a & _NULLABLE:
                return after
            raise _Violation(V_NULL if n == -1 else V_NEGATIVE_LENGTH, b, n, end - after, pos)
        if code == _STRING and n > MAX_STRING_LENGTH:
            raise _Violation(V_STRING_LENGTH, b, n, end - after, pos)
        if n > end - after:
            raise _Violation(V_BYTES_REMAINING, b, n, end - after, pos)
        return after + n
    if code == _STRUCT:
        return _segment(prog, a, buf, pos, end)
    if code == _NULLABLE_STRUCT:
        if _int(buf, pos, 1, end) == -1:
            return pos + 1
        return _segment(prog, a, buf, pos + 1, end)
    if code == _ARRAY:
        n, after = _length(buf, pos, end, a, 4)
        if n < 0:
            if n == -1 and a & _NULLABLE:
                return after
            raise _Violation(V_NULL if n == -1 else V_NEGATIVE_LENGTH, b, n, end - after, pos)
        if n > end - after:
            raise _Violation(V_ARRAY_REMAINING, b, n, end - after, pos)
        if n > MAX_ARRAY_LENGTH:
            raise _Violation(V_ARRAY_MAX, b, n, end - after, pos)
        pos = after
        element = c + 1
        if prog[c] == 1 and prog[element] == _FIXED:     # fixed-size elements: one check
            size = n * prog[element + 1]
            if end - pos < size:
                raise _underflow(size, pos, end)
            return pos + size
        for _ in range(n):
            pos = _op(prog, element, buf, pos, end)
        return pos
    if code == _TAGS:
        count, after = _uvarint(buf, pos, end)
        if count >= _INT31:
            raise _Violation(V_TAGS_NEGATIVE, -1, count, end - after, pos)
        if count > end - after:
            raise _Violation(V_TAGS_REMAINING, -1, count, end - after, pos)
        if count > MAX_TAGGED_FIELD_COUNT:
            raise _Violation(V_TAGS_MAX, -1, count, end - after, pos)
        pos = after
        known = prog[a]
        for _ in range(count):
            tag, pos = _uvarint(buf, pos, end)
            size_at = pos
            size, pos = _uvarint(buf, pos, end)
            seg = -1
            for i in range(known):
                if prog[a + 1 + 2 * i] == tag:
                    seg = prog[a + 2 + 2 * i]
                    break
            if seg < 0:                                 # unknown: its bytes are skipped
                if size > end - pos:
                    raise _Violation(V_BYTES_REMAINING, -1, size, end - pos, size_at)
                pos += size
            else:                                       # known: its value is read, as kio does
                pos = _op(prog, seg + 1, buf, pos, end)
        return pos
    raise AssertionError(f"bounds program: unknown op {code} at word {op}")
