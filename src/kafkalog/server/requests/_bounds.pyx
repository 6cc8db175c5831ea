# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled bounds kernel; the pure-Python twin is ``_bounds_py`` (its docstring says what
:func:`walk` does and returns). One C walk over the frame, no Python object made on the way: a
Produce or Fetch request costs well under a microsecond more than kio's own read."""

from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytes cimport PyBytes_AS_STRING
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint64_t

IMPLEMENTATION = "cython"

MAX_ARRAY_LENGTH = 1_000_000
MAX_TAGGED_FIELD_COUNT = 10_000
MAX_TOTAL_ELEMENTS = 1_000_000
V_UNDERFLOW, V_VARINT_TOO_LONG, V_NULL, V_STRING_LENGTH, V_NEGATIVE_LENGTH, V_BYTES_REMAINING, \
    V_ARRAY_REMAINING, V_ARRAY_MAX, V_TAGS_NEGATIVE, V_TAGS_REMAINING, V_TAGS_MAX, \
    V_ELEMENTS_MAX = range(1, 13)

cdef enum:
    C_UNDERFLOW = 1
    C_VARINT_TOO_LONG = 2
    C_NULL = 3
    C_STRING_LENGTH = 4
    C_NEGATIVE_LENGTH = 5
    C_BYTES_REMAINING = 6
    C_ARRAY_REMAINING = 7
    C_ARRAY_MAX = 8
    C_TAGS_NEGATIVE = 9
    C_TAGS_REMAINING = 10
    C_TAGS_MAX = 11
    C_ELEMENTS_MAX = 12
    OP_FIXED = 1
    OP_STRING = 2
    OP_BYTES = 3
    OP_STRUCT = 4
    OP_NULLABLE_STRUCT = 5
    OP_ARRAY = 6
    OP_TAGS = 7
    F_COMPACT = 1
    F_NULLABLE = 2
    C_MAX_ARRAY_LENGTH = 1000000
    C_MAX_TAGGED_FIELD_COUNT = 10000
    C_MAX_TOTAL_ELEMENTS = 1000000
    C_MAX_STRING_LENGTH = 0x7FFF


cdef struct Walk:
    const uint8_t* data
    Py_ssize_t end
    const int32_t* prog
    int64_t elements
    int status
    int name
    int64_t value
    int64_t available
    Py_ssize_t position


cdef inline Py_ssize_t _fail(Walk* w, int status, int name, int64_t value, int64_t available,
                             Py_ssize_t position) noexcept nogil:
    w.status = status
    w.name = name
    w.value = value
    w.available = available
    w.position = position
    return -1


cdef inline Py_ssize_t _uvarint(Walk* w, Py_ssize_t pos, uint64_t* out) noexcept nogil:
    cdef uint64_t value = 0
    cdef uint8_t b
    cdef int i
    for i in range(5):
        if pos + i >= w.end:
            return _fail(w, C_UNDERFLOW, -1, i + 1, w.end - pos, pos)
        b = w.data[pos + i]
        value |= (<uint64_t>(b & 0x7F)) << (7 * i)
        if not (b & 0x80):
            out[0] = value
            return pos + i + 1
    return _fail(w, C_VARINT_TOO_LONG, -1, <int64_t>value, w.end - pos, pos)


cdef inline Py_ssize_t _length(Walk* w, Py_ssize_t pos, int flags, int legacy_size,
                               int64_t* out) noexcept nogil:
    """The length at ``pos`` (-1: null); the position after it, or -1."""
    cdef uint64_t v
    cdef Py_ssize_t after
    if flags & F_COMPACT:
        after = _uvarint(w, pos, &v)
        if after < 0:
            return -1
        out[0] = <int64_t>v - 1
        return after
    if w.end - pos < legacy_size:
        return _fail(w, C_UNDERFLOW, -1, legacy_size, w.end - pos, pos)
    if legacy_size == 2:
        out[0] = <int16_t>((<uint64_t>w.data[pos] << 8) | w.data[pos + 1])
    else:
        out[0] = <int32_t>((<uint64_t>w.data[pos] << 24) | (<uint64_t>w.data[pos + 1] << 16)
                           | (<uint64_t>w.data[pos + 2] << 8) | w.data[pos + 3])
    return pos + legacy_size


cdef Py_ssize_t _segment(Walk* w, int seg, Py_ssize_t pos) noexcept nogil:
    cdef int n = w.prog[seg]
    cdef int op = seg + 1
    cdef int i
    for i in range(n):
        pos = _op(w, op, pos)
        if pos < 0:
            return -1
        op += 4
    return pos


cdef Py_ssize_t _op(Walk* w, int op, Py_ssize_t pos) noexcept nogil:
    cdef int code = w.prog[op]
    cdef int a = w.prog[op + 1]
    cdef int b = w.prog[op + 2]
    cdef int c = w.prog[op + 3]
    cdef int64_t n, size
    cdef uint64_t count, tag, tsize
    cdef Py_ssize_t after, size_at
    cdef int element, known, i, seg
    cdef int64_t k
    if code == OP_FIXED:
        if w.end - pos < a:
            return _fail(w, C_UNDERFLOW, -1, a, w.end - pos, pos)
        return pos + a
    if code == OP_STRING or code == OP_BYTES:
        after = _length(w, pos, a, 2 if code == OP_STRING else 4, &n)
        if after < 0:
            return -1
        if n < 0:
            if n == -1 and (a & F_NULLABLE):
                return after
            return _fail(w, C_NULL if n == -1 else C_NEGATIVE_LENGTH, b, n, w.end - after, pos)
        if code == OP_STRING and n > C_MAX_STRING_LENGTH:
            return _fail(w, C_STRING_LENGTH, b, n, w.end - after, pos)
        if n > w.end - after:
            return _fail(w, C_BYTES_REMAINING, b, n, w.end - after, pos)
        return after + n
    if code == OP_STRUCT:
        return _segment(w, a, pos)
    if code == OP_NULLABLE_STRUCT:
        if w.end - pos < 1:
            return _fail(w, C_UNDERFLOW, -1, 1, w.end - pos, pos)
        if <int8_t>w.data[pos] == -1:
            return pos + 1
        return _segment(w, a, pos + 1)
    if code == OP_ARRAY:
        after = _length(w, pos, a, 4, &n)
        if after < 0:
            return -1
        if n < 0:
            if n == -1 and (a & F_NULLABLE):
                return after
            return _fail(w, C_NULL if n == -1 else C_NEGATIVE_LENGTH, b, n, w.end - after, pos)
        if n > w.end - after:
            return _fail(w, C_ARRAY_REMAINING, b, n, w.end - after, pos)
        if n > C_MAX_ARRAY_LENGTH:
            return _fail(w, C_ARRAY_MAX, b, n, w.end - after, pos)
        w.elements += n
        if w.elements > C_MAX_TOTAL_ELEMENTS:
            return _fail(w, C_ELEMENTS_MAX, b, w.elements, w.end - after, pos)
        pos = after
        element = c + 1
        if w.prog[c] == 1 and w.prog[element] == OP_FIXED:
            size = n * w.prog[element + 1]
            if w.end - pos < size:
                return _fail(w, C_UNDERFLOW, -1, size, w.end - pos, pos)
            return pos + size
        k = 0
        while k < n:
            pos = _op(w, element, pos)
            if pos < 0:
                return -1
            k += 1
        return pos
    if code == OP_TAGS:
        after = _uvarint(w, pos, &count)
        if after < 0:
            return -1
        if count >= 2147483648ULL:
            return _fail(w, C_TAGS_NEGATIVE, -1, <int64_t>count, w.end - after, pos)
        if <int64_t>count > w.end - after:
            return _fail(w, C_TAGS_REMAINING, -1, <int64_t>count, w.end - after, pos)
        if count > C_MAX_TAGGED_FIELD_COUNT:
            return _fail(w, C_TAGS_MAX, -1, <int64_t>count, w.end - after, pos)
        pos = after
        known = w.prog[a]
        k = 0
        while k < <int64_t>count:
            pos = _uvarint(w, pos, &tag)
            if pos < 0:
                return -1
            size_at = pos
            pos = _uvarint(w, pos, &tsize)
            if pos < 0:
                return -1
            seg = -1
            for i in range(known):
                if <uint64_t>w.prog[a + 1 + 2 * i] == tag:
                    seg = w.prog[a + 2 + 2 * i]
                    break
            if seg < 0:
                if <int64_t>tsize > w.end - pos:
                    return _fail(w, C_BYTES_REMAINING, -1, <int64_t>tsize, w.end - pos, size_at)
                pos += <Py_ssize_t>tsize
            else:
                pos = _op(w, seg + 1, pos)
                if pos < 0:
                    return -1
            k += 1
        return pos
    return _fail(w, -1, -1, code, 0, op)


def walk(bytes code, object data):
    """The end of the body, or the first violation ``(status, name, value, available,
    position)``: see ``_bounds_py``."""
    cdef Py_buffer view
    cdef Walk w
    cdef Py_ssize_t pos
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        w.data = <const uint8_t*>view.buf
        w.end = view.len
        w.prog = <const int32_t*>PyBytes_AS_STRING(code)
        w.elements = 0
        w.status = 0
        with nogil:
            pos = _segment(&w, w.prog[0], 0)
            if pos >= 0:
                pos = _segment(&w, w.prog[1], pos)
    finally:
        PyBuffer_Release(&view)
    if pos >= 0:
        return pos
    if w.status < 0:
        raise AssertionError(f"bounds program: unknown op {w.value} at word {w.position}")
    return (w.status, w.name, w.value, w.available, w.position)
