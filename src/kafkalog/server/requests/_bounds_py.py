"""Pure-Python twin of the compiled bounds kernel ``_bounds.pyx`` (same API, same results);
:mod:`kafkalog.server.requests.request_bounds` picks one of the two.

:func:`walk` runs a bounds program (:mod:`kafkalog.server.requests.bounds_program`) over a request frame
(without its size field): the request header, then the body. It reads lengths and counts and steps
over the bytes they cover, allocating nothing in proportion to them, and stops at the first length
or count the frame cannot hold or Kafka refuses, or when the request's arrays hold more than
``MAX_TOTAL_ELEMENTS`` elements in all (kafkalog's own bound: what kio builds of a request is about
28 bytes per byte of a frame of small structs). It returns the position where the body ends, or a
violation: ``(status, name, value, available, position)`` with ``status`` one of the ``V_*``
codes, ``name`` an index into the program's names (-1: none), ``value`` the length or count read,
``available`` the bytes left after it, ``position`` the byte where the length or count starts.
"""

from __future__ import annotations

import functools
import struct

IMPLEMENTATION = "python"

__all__ = ["IMPLEMENTATION", "MAX_ARRAY_LENGTH", "MAX_TAGGED_FIELD_COUNT", "MAX_TOTAL_ELEMENTS",
           "V_ARRAY_MAX", "V_ARRAY_REMAINING", "V_BYTES_REMAINING", "V_ELEMENTS_MAX",
           "V_NEGATIVE_LENGTH", "V_NULL", "V_STRING_LENGTH", "V_TAGS_MAX", "V_TAGS_NEGATIVE",
           "V_TAGS_REMAINING", "V_UNDERFLOW", "V_VARINT_TOO_LONG", "walk"]

#: Kafka's ``MessageUtil.MAX_ARRAY_LENGTH`` and ``MAX_TAGGED_FIELD_COUNT`` (Kafka 4.4)
MAX_ARRAY_LENGTH = 1_000_000
MAX_TAGGED_FIELD_COUNT = 10_000
#: kafkalog's bound on the elements of all the arrays of one request (Kafka: 1,000,000 per array)
MAX_TOTAL_ELEMENTS = 1_000_000
#: the longest string Kafka reads (``0x7fff``: a string length is an int16 in the classic versions)
MAX_STRING_LENGTH = 0x7FFF

V_UNDERFLOW, V_VARINT_TOO_LONG, V_NULL, V_STRING_LENGTH, V_NEGATIVE_LENGTH, V_BYTES_REMAINING, \
    V_ARRAY_REMAINING, V_ARRAY_MAX, V_TAGS_NEGATIVE, V_TAGS_REMAINING, V_TAGS_MAX, \
    V_ELEMENTS_MAX = range(1, 13)

_FIXED, _STRING, _BYTES, _STRUCT, _NULLABLE_STRUCT, _ARRAY, _TAGS = range(1, 8)
_COMPACT, _NULLABLE = 1, 2
_INT31 = 2**31
_INT = {1: struct.Struct(">b").unpack_from, 2: struct.Struct(">h").unpack_from,
        4: struct.Struct(">i").unpack_from}
Prog = tuple[int, ...]


class _Violation(Exception):
    def __init__(self, status: int, name: int, value: int, available: int, position: int) -> None:
        self.result = (status, name, value, available, position)


@functools.lru_cache(maxsize=1024)
def _words(code: bytes) -> Prog:
    return tuple(memoryview(code).cast("i"))


def walk(code: bytes, data: bytes) -> int | tuple[int, int, int, int, int]:
    """The end of the body, or the first violation (see the module docstring)."""
    w = _Walk(_words(code), data if isinstance(data, bytes) else bytes(data))
    try:
        pos = w.segment(w.prog[0], 0)
        return w.segment(w.prog[1], pos)
    except _Violation as v:
        return v.result


class _Walk:
    __slots__ = ("buf", "elements", "end", "prog")

    def __init__(self, prog: Prog, buf: bytes) -> None:
        self.prog = prog
        self.buf = buf
        self.end = len(buf)
        self.elements = 0

    def underflow(self, need: int, pos: int) -> _Violation:
        return _Violation(V_UNDERFLOW, -1, need, self.end - pos, pos)

    def signed(self, pos: int, size: int) -> int:
        if self.end - pos < size:
            raise self.underflow(size, pos)
        return int(_INT[size](self.buf, pos)[0])

    def uvarint(self, pos: int) -> tuple[int, int]:
        """(value, position after it): at most 5 bytes, kio's unsigned reading (Kafka keeps the
        low 32 bits of the same bytes)."""
        buf, end = self.buf, self.end
        if pos < end and buf[pos] < 0x80:                   # the usual one-byte varint
            return buf[pos], pos + 1
        value = 0
        for i in range(5):
            if pos + i >= end:
                raise self.underflow(i + 1, pos)
            b = buf[pos + i]
            value |= (b & 0x7F) << (7 * i)
            if not b & 0x80:
                return value, pos + i + 1
        raise _Violation(V_VARINT_TOO_LONG, -1, value, end - pos, pos)

    def length(self, pos: int, flags: int, legacy_size: int) -> tuple[int, int]:
        """(length, position after it) of a string, bytes or array: -1 for null."""
        if flags & _COMPACT:
            value, after = self.uvarint(pos)
            return value - 1, after
        return self.signed(pos, legacy_size), pos + legacy_size

    def segment(self, seg: int, pos: int) -> int:
        op = seg + 1
        for _ in range(self.prog[seg]):
            pos = self.op(op, pos)
            op += 4
        return pos

    def op(self, op: int, pos: int) -> int:
        prog, end = self.prog, self.end
        code, a, b, c = prog[op:op + 4]
        if code == _FIXED:
            if end - pos < a:
                raise self.underflow(a, pos)
            return pos + a
        if code in (_STRING, _BYTES):
            n, after = self.length(pos, a, 2 if code == _STRING else 4)
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
            return self.segment(a, pos)
        if code == _NULLABLE_STRUCT:
            if self.signed(pos, 1) == -1:
                return pos + 1
            return self.segment(a, pos + 1)
        if code == _ARRAY:
            return self.array(a, b, c, pos)
        if code == _TAGS:
            return self.tags(a, pos)
        raise AssertionError(f"bounds program: unknown op {code} at word {op}")

    def array(self, flags: int, name: int, element_seg: int, pos: int) -> int:
        end = self.end
        n, after = self.length(pos, flags, 4)
        if n < 0:
            if n == -1 and flags & _NULLABLE:
                return after
            raise _Violation(V_NULL if n == -1 else V_NEGATIVE_LENGTH, name, n, end - after, pos)
        if n > end - after:
            raise _Violation(V_ARRAY_REMAINING, name, n, end - after, pos)
        if n > MAX_ARRAY_LENGTH:
            raise _Violation(V_ARRAY_MAX, name, n, end - after, pos)
        self.elements += n
        if self.elements > MAX_TOTAL_ELEMENTS:
            raise _Violation(V_ELEMENTS_MAX, name, self.elements, end - after, pos)
        pos = after
        element = element_seg + 1
        prog = self.prog
        if prog[element_seg] == 1 and prog[element] == _FIXED:     # fixed-size elements: one check
            size = n * prog[element + 1]
            if end - pos < size:
                raise self.underflow(size, pos)
            return pos + size
        for _ in range(n):
            pos = self.op(element, pos)
        return pos

    def tags(self, table: int, pos: int) -> int:
        end, prog = self.end, self.prog
        count, after = self.uvarint(pos)
        if count >= _INT31:
            raise _Violation(V_TAGS_NEGATIVE, -1, count, end - after, pos)
        if count > end - after:
            raise _Violation(V_TAGS_REMAINING, -1, count, end - after, pos)
        if count > MAX_TAGGED_FIELD_COUNT:
            raise _Violation(V_TAGS_MAX, -1, count, end - after, pos)
        pos = after
        known = prog[table]
        for _ in range(count):
            tag, pos = self.uvarint(pos)
            size_at = pos
            size, pos = self.uvarint(pos)
            seg = -1
            for i in range(known):
                if prog[table + 1 + 2 * i] == tag:
                    seg = prog[table + 2 + 2 * i]
                    break
            if seg < 0:                                 # unknown: its bytes are skipped
                if size > end - pos:
                    raise _Violation(V_BYTES_REMAINING, -1, size, end - pos, size_at)
                pos += size
            else:                                       # known: its value is read, as kio does
                pos = self.op(seg + 1, pos)
        return pos
