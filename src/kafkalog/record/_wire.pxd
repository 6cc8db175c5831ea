# cython: language_level=3
"""Inline readers and writers of Kafka's wire primitives, shared by the compiled kernels of every
layer (``kafkalog.record._kernel``, ``kafkalog.cleaner._kernel``, ``kafkalog.spark._kernel``; the
batch-header walker may cimport them too). Everything here is ``cdef inline``: each kernel gets its
own copy at C level, so no loop is written twice in the sources and no call crosses modules.

Varints follow Kafka's ``ByteUtils``: zig-zag, at most 5 (varint) / 10 (varlong) bytes, bits beyond
32 / 64 dropped as Java does, non-minimal forms accepted. Big-endian integers are the batch header's
(``DefaultRecordBatch``). ``_rd_record_head`` parses the fixed part of one v2 record (length,
attributes, timestamp delta, offset delta, key, value) for every record loop; the header section
that follows is each caller's own.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t

cdef enum:
    NO_SEQUENCE = -1
    INT32_MAX = 2147483647

cdef extern from "Python.h":
    long long PyLong_AsLongLongAndOverflow(object obj, int* overflow) except? -1

cdef extern from *:
    void __builtin_prefetch(const void* p) noexcept nogil


# --------------------------------------------------------------------------------------------------
# errors (raised from the kernels; imported on first use so that the .pxd holds no module state)

cdef inline object _invalid_record(str message, object position=None):
    from kafkalog.errors import InvalidRecordError
    return InvalidRecordError(message, position=position)


cdef inline object _varint_error(int rc, Py_ssize_t pos, str what):
    if rc == -1:
        return _invalid_record(f"Found invalid record structure: buffer underflow reading {what}",
                               pos)
    return _invalid_record(f"Found invalid record structure: {what} is too long", pos)


cdef inline int64_t _as_int64(object value, str what) except? -1:
    cdef int overflow = 0
    cdef long long r = PyLong_AsLongLongAndOverflow(value, &overflow)
    if overflow:
        raise _invalid_record(f"{what} {value} does not fit in a 64-bit varlong")
    return <int64_t>r


cdef inline int32_t _as_int32(object value, str what) except? -1:
    cdef int overflow = 0
    cdef long long r = PyLong_AsLongLongAndOverflow(value, &overflow)
    if overflow or r < -2147483648 or r > 2147483647:
        raise _invalid_record(f"{what} {value} does not fit in a 32-bit varint")
    return <int32_t>r


cdef inline int _check_count(Py_ssize_t count, Py_ssize_t n, Py_ssize_t slack) except -1:
    """Refuse a negative record ``count`` and one that ``n`` bytes cannot hold (a v2 record takes
    at least 7 bytes; ``slack`` more records are tolerated)."""
    if count < 0:
        raise _invalid_record(f"Invalid negative record count {count}", 0)
    if count > n // 7 + slack:
        raise _invalid_record(
            f"Found invalid record structure: expected {count} records in {n} bytes", n)
    return 0


cdef inline int _check_consumed(Py_ssize_t pos, Py_ssize_t n, Py_ssize_t count) except -1:
    """Refuse bytes left after the ``count`` declared records (Kafka's "records still remaining")."""
    if pos != n:
        raise _invalid_record(f"Incorrect declared batch size, records still remaining in file "
                              f"({n - pos} bytes after {count} records)", pos)
    return 0


# --------------------------------------------------------------------------------------------------
# varints

cdef inline int _rd_uvarint(const unsigned char* p, Py_ssize_t end, Py_ssize_t* pos, int max_shift,
                            uint64_t* out) noexcept nogil:
    """The unsigned base-128 value at ``pos`` of at most ``max_shift / 7 + 1`` bytes: 0 ok,
    -1 truncated, -2 too long."""
    cdef Py_ssize_t i = pos[0]
    cdef uint64_t value = 0
    cdef int shift = 0
    cdef unsigned char b
    while True:
        if i >= end:
            return -1
        b = p[i]
        i += 1
        if b & 0x80:
            value |= <uint64_t>(b & 0x7F) << shift
            shift += 7
            if shift > max_shift:
                return -2
        else:
            value |= <uint64_t>b << shift
            break
    pos[0] = i
    out[0] = value
    return 0


cdef inline int _rd_varint(const unsigned char* p, Py_ssize_t end, Py_ssize_t* pos,
                           int32_t* out) noexcept nogil:
    """Zig-zag varint (bits beyond 32 dropped): 0 ok, -1 truncated, -2 too long."""
    cdef uint64_t v
    cdef uint32_t u
    cdef int rc
    if pos[0] < end and p[pos[0]] < 0x80:       # the common one-byte form
        u = p[pos[0]]
        pos[0] += 1
    else:
        rc = _rd_uvarint(p, end, pos, 28, &v)
        if rc:
            return rc
        u = <uint32_t>v
    out[0] = <int32_t>((u >> 1) ^ (<uint32_t>0 - (u & 1)))
    return 0


cdef inline int _rd_varlong(const unsigned char* p, Py_ssize_t end, Py_ssize_t* pos,
                            int64_t* out) noexcept nogil:
    """Zig-zag varlong: 0 ok, -1 truncated, -2 too long."""
    cdef uint64_t v
    cdef int rc = _rd_uvarint(p, end, pos, 63, &v)
    if rc:
        return rc
    out[0] = <int64_t>((v >> 1) ^ (<uint64_t>0 - (v & 1)))
    return 0


cdef inline int _size_uvarint(uint64_t v) noexcept nogil:
    cdef int n = 1
    while v >= 0x80:
        v >>= 7
        n += 1
    return n


cdef inline int _size_varint(int32_t v) noexcept nogil:
    return _size_uvarint(<uint32_t>((<uint32_t>v << 1) ^ <uint32_t>(v >> 31)))


cdef inline int _size_varlong(int64_t v) noexcept nogil:
    return _size_uvarint((<uint64_t>v << 1) ^ <uint64_t>(v >> 63))


cdef inline unsigned char* _wr_uvarint(unsigned char* p, uint64_t v) noexcept nogil:
    while v >= 0x80:
        p[0] = <unsigned char>((v & 0x7F) | 0x80)
        p += 1
        v >>= 7
    p[0] = <unsigned char>v
    return p + 1


cdef inline unsigned char* _wr_varint(unsigned char* p, int32_t v) noexcept nogil:
    return _wr_uvarint(p, <uint32_t>((<uint32_t>v << 1) ^ <uint32_t>(v >> 31)))


cdef inline unsigned char* _wr_varlong(unsigned char* p, int64_t v) noexcept nogil:
    return _wr_uvarint(p, (<uint64_t>v << 1) ^ <uint64_t>(v >> 63))


# --------------------------------------------------------------------------------------------------
# big-endian integers (batch headers)

cdef inline int32_t _rd_i32(const unsigned char* p) noexcept nogil:
    return <int32_t>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8)
                     | <uint32_t>p[3])


cdef inline int64_t _rd_i64(const unsigned char* p) noexcept nogil:
    cdef uint64_t u = 0
    cdef int i
    for i in range(8):
        u = (u << 8) | p[i]
    return <int64_t>u


cdef inline void _wr_i32(unsigned char* p, uint32_t v) noexcept nogil:
    p[0] = <unsigned char>(v >> 24)
    p[1] = <unsigned char>(v >> 16)
    p[2] = <unsigned char>(v >> 8)
    p[3] = <unsigned char>v


cdef inline void _wr_i64(unsigned char* p, int64_t v) noexcept nogil:
    cdef uint64_t u = <uint64_t>v
    cdef int i
    for i in range(8):
        p[7 - i] = <unsigned char>(u & 0xFF)
        u >>= 8


# --------------------------------------------------------------------------------------------------
# v2 records

cdef inline int32_t _next_sequence(int32_t base, int32_t delta) noexcept nogil:
    # DefaultRecordBatch.incrementSequence: wraps past Integer.MAX_VALUE to 0.
    if base == NO_SEQUENCE:
        return NO_SEQUENCE
    if base > INT32_MAX - delta:
        return delta - (INT32_MAX - base) - 1
    return base + delta


cdef struct RecordHead:
    Py_ssize_t rstart       # first byte of the length varint
    Py_ssize_t rend         # one past the record's last byte
    Py_ssize_t ts_pos       # first byte of the timestamp delta (attributes at ts_pos - 1)
    Py_ssize_t after_ts     # first byte after the timestamp delta
    Py_ssize_t kstart       # first key byte
    Py_ssize_t vstart       # first value byte
    Py_ssize_t hpos         # first byte of the header count
    int64_t ts_delta
    int32_t length
    int32_t offset_delta
    int32_t klen            # -1 for a null key
    int32_t vlen            # -1 for a null value


cdef inline int _record_head_error(const unsigned char* p, Py_ssize_t n, Py_ssize_t pos,
                                   RecordHead* r) except -1:
    """:func:`_rd_record_head`'s slow path: parse again, raising the ``InvalidRecordError`` that
    names the problem (Kafka's DefaultRecord.readFrom checks)."""
    cdef Py_ssize_t q = pos
    cdef int rc
    r.rstart = pos
    rc = _rd_varint(p, n, &q, &r.length)
    if rc:
        raise _varint_error(rc, pos, "record length")
    if r.length < 0 or r.length > n - q:
        raise _invalid_record(
            f"Invalid record size: expected {r.length} bytes in record payload, but instead "
            f"the buffer has only {n - q} remaining bytes.", pos)
    r.rend = q + r.length
    if q >= r.rend:
        raise _invalid_record("Found invalid record structure: buffer underflow reading "
                              "attributes", q)
    q += 1
    r.ts_pos = q
    rc = _rd_varlong(p, r.rend, &q, &r.ts_delta)
    if rc:
        raise _varint_error(rc, q, "timestamp delta")
    r.after_ts = q
    rc = _rd_varint(p, r.rend, &q, &r.offset_delta)
    if rc:
        raise _varint_error(rc, q, "offset delta")
    rc = _rd_varint(p, r.rend, &q, &r.klen)
    if rc:
        raise _varint_error(rc, q, "key length")
    r.kstart = q
    if r.klen >= 0:
        if r.klen > r.rend - q:
            raise _invalid_record(
                f"Found invalid record structure: key length {r.klen} exceeds the "
                f"{r.rend - q} bytes left in the record", q)
        q += r.klen
    rc = _rd_varint(p, r.rend, &q, &r.vlen)
    if rc:
        raise _varint_error(rc, q, "value length")
    r.vstart = q
    if r.vlen >= 0:
        if r.vlen > r.rend - q:
            raise _invalid_record(
                f"Found invalid record structure: value length {r.vlen} exceeds the "
                f"{r.rend - q} bytes left in the record", q)
        q += r.vlen
    r.hpos = q
    return 0


cdef inline bint _scan_record_head(const unsigned char* p, Py_ssize_t n, Py_ssize_t pos,
                                   RecordHead* r) noexcept nogil:
    """Parse the record at ``pos`` up to its header count; False when it is malformed (the
    checks of :func:`_record_head_error`, which says how)."""
    cdef Py_ssize_t q = pos
    r.rstart = pos
    if _rd_varint(p, n, &q, &r.length) or r.length < 0 or r.length > n - q:
        return False
    r.rend = q + r.length
    if q >= r.rend:
        return False
    q += 1
    r.ts_pos = q
    if _rd_varlong(p, r.rend, &q, &r.ts_delta):
        return False
    r.after_ts = q
    if _rd_varint(p, r.rend, &q, &r.offset_delta) or _rd_varint(p, r.rend, &q, &r.klen):
        return False
    r.kstart = q
    if r.klen >= 0:
        if r.klen > r.rend - q:
            return False
        q += r.klen
    if _rd_varint(p, r.rend, &q, &r.vlen):
        return False
    r.vstart = q
    if r.vlen >= 0:
        if r.vlen > r.rend - q:
            return False
        q += r.vlen
    r.hpos = q
    return True


cdef inline int _rd_record_head(const unsigned char* p, Py_ssize_t n, Py_ssize_t pos,
                                RecordHead* r) except -1:
    """Parse the record at ``pos`` up to its header count (Kafka's DefaultRecord.readFrom checks);
    raises ``InvalidRecordError`` positioned in ``p``."""
    if _scan_record_head(p, n, pos, r):
        return 0
    return _record_head_error(p, n, pos, r)


cdef inline object _rd_headers(const unsigned char* p, Py_ssize_t pos, Py_ssize_t rend,
                            Py_ssize_t* out_pos):
    """The header section at ``pos`` (count, then key/value pairs): None or a list of
    ``(str, bytes | None)``; ``out_pos`` gets the first byte after it."""
    cdef int32_t nheaders, hklen, hvlen, h
    cdef int rc
    cdef list headers
    cdef object hkey, hvalue
    rc = _rd_varint(p, rend, &pos, &nheaders)
    if rc:
        raise _varint_error(rc, pos, "header count")
    if nheaders < 0:
        raise _invalid_record(f"Found invalid number of record headers {nheaders}",
                                 position=pos)
    if nheaders > rend - pos:
        raise _invalid_record(
            f"Found invalid number of record headers. {nheaders} is larger than the "
            f"remaining size of the buffer", pos)
    out_pos[0] = pos
    if nheaders == 0:
        return None
    headers = []
    for h in range(nheaders):
        rc = _rd_varint(p, rend, &pos, &hklen)
        if rc:
            raise _varint_error(rc, pos, "header key length")
        if hklen < 0:
            raise _invalid_record(f"Invalid negative header key size {hklen}", pos)
        if hklen > rend - pos:
            raise _invalid_record(
                f"Found invalid record structure: header key length {hklen} exceeds the "
                f"{rend - pos} bytes left in the record", pos)
        hkey = PyUnicode_DecodeUTF8(<const char*>(p + pos), hklen, "replace")
        pos += hklen
        rc = _rd_varint(p, rend, &pos, &hvlen)
        if rc:
            raise _varint_error(rc, pos, "header value length")
        if hvlen >= 0:
            if hvlen > rend - pos:
                raise _invalid_record(
                    f"Found invalid record structure: header value length {hvlen} exceeds "
                    f"the {rend - pos} bytes left in the record", pos)
            hvalue = PyBytes_FromStringAndSize(<const char*>(p + pos), hvlen)
            pos += hvlen
        else:
            hvalue = None
        headers.append((hkey, hvalue))
    out_pos[0] = pos
    return headers


cdef inline Py_ssize_t _record_body_size(int64_t ts_delta, int32_t offset_delta, Py_ssize_t klen,
                                         Py_ssize_t vlen, Py_ssize_t headers_size) noexcept nogil:
    """Bytes of a record after its length varint; ``klen`` / ``vlen`` -1 for null,
    ``headers_size`` the header section's bytes (1 without headers)."""
    cdef Py_ssize_t body = 1 + _size_varlong(ts_delta) + _size_varint(offset_delta) + headers_size
    body += 1 if klen < 0 else _size_varint(<int32_t>klen) + klen
    body += 1 if vlen < 0 else _size_varint(<int32_t>vlen) + vlen
    return body


cdef inline unsigned char* _wr_record_head(unsigned char* w, Py_ssize_t body, int64_t ts_delta,
                                           int32_t offset_delta, const char* k, Py_ssize_t klen,
                                           const char* v, Py_ssize_t vlen) noexcept nogil:
    """Write a record up to its header section (attributes 0); returns the end."""
    w = _wr_varint(w, <int32_t>body)
    w[0] = 0
    w += 1
    w = _wr_varlong(w, ts_delta)
    w = _wr_varint(w, offset_delta)
    if klen < 0:
        w[0] = 1   # varint(-1)
        w += 1
    else:
        w = _wr_varint(w, <int32_t>klen)
        _copy(w, k, klen)
        w += klen
    if vlen < 0:
        w[0] = 1
        w += 1
    else:
        w = _wr_varint(w, <int32_t>vlen)
        _copy(w, v, vlen)
        w += vlen
    return w


cdef extern from "string.h":
    void* _copy "memcpy" (void* dst, const void* src, size_t n) nogil


# --------------------------------------------------------------------------------------------------
# Kafka's murmur2 (Utils.murmur2, seed 0x9747b28c), the default partitioner's hash

cdef inline uint32_t _murmur2(const unsigned char* d, Py_ssize_t length) noexcept nogil:
    cdef uint32_t m = 1540483477U
    cdef uint32_t h = 2538058380U ^ <uint32_t>length
    cdef uint32_t k
    cdef Py_ssize_t i, nwords = length // 4, tail = length & ~3
    for i in range(nwords):
        k = (<uint32_t>d[4 * i]) | (<uint32_t>d[4 * i + 1] << 8) | (<uint32_t>d[4 * i + 2] << 16) \
            | (<uint32_t>d[4 * i + 3] << 24)
        k *= m
        k ^= k >> 24
        k *= m
        h *= m
        h ^= k
    i = length % 4
    if i == 3:
        h ^= (<uint32_t>d[tail + 2]) << 16
    if i >= 2:
        h ^= (<uint32_t>d[tail + 1]) << 8
    if i >= 1:
        h ^= d[tail]
        h *= m
    h ^= h >> 13
    h *= m
    h ^= h >> 15
    return h


cdef inline uint32_t _murmur2_obj(object data) except? 0xFFFFFFFF:
    cdef Py_buffer b
    cdef uint32_t h
    if PyBytes_CheckExact(data):
        return _murmur2(<const unsigned char*>PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data))
    PyObject_GetBuffer(data, &b, PyBUF_SIMPLE)
    h = _murmur2(<const unsigned char*>b.buf, b.len)
    PyBuffer_Release(&b)
    return h


# --------------------------------------------------------------------------------------------------
# one record of a batch, its headers decoded (the record loops of the record and client kernels)

cdef inline object _rd_record(const unsigned char* p, Py_ssize_t n, Py_ssize_t* pos, RecordHead* r,
                              Py_ssize_t i, Py_ssize_t count):
    """Record ``i`` of ``count`` at ``pos[0]``: its fixed part into ``r``, its headers returned (None
    without headers); ``pos[0]`` moves past it. Raises ``InvalidRecordError`` positioned in ``p``."""
    cdef object headers
    if pos[0] >= n:
        raise _invalid_record(
            f"Found invalid record structure: expected {count} records but found only {i}",
            pos[0])
    _rd_record_head(p, n, pos[0], r)
    if r.rend + 1024 < n:
        __builtin_prefetch(p + r.rend + 1024)    # the records ahead (a stream from RAM)
    if r.hpos + 1 == r.rend and p[r.hpos] == 0:   # no headers: the common case
        pos[0] = r.rend
        return None
    headers = _rd_headers(p, r.hpos, r.rend, pos)
    if pos[0] != r.rend:
        raise _invalid_record(
            f"Invalid record size: expected to read {r.length} bytes in record "
            f"payload, but instead read {pos[0] - (r.rend - r.length)}", pos[0])
    return headers
