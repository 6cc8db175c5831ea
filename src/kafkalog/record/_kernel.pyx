# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled record kernel: the per-record hot loops of v2 records (spec §1.1, §1.6).

Same API and behaviour as the pure-Python reference ``kafkalog.record._kernel_py`` (see
docs/design.md "Record kernel API"); ``kafkalog.record.kernel`` picks one of the two.

* ``decode_records_v2`` walks the record bodies of one batch with C pointers, creating only the
  ``Record`` objects and their key/value/header ``bytes``.
* ``encode_records_v2`` sizes every record first, allocates the output ``bytes`` once and writes
  into it.

Varints follow Kafka's ``ByteUtils``: zig-zag, at most 5 (varint) / 10 (varlong) bytes, bits beyond
32 / 64 dropped as Java does, non-minimal forms accepted.
"""

from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING, PyBytes_GET_SIZE, PyBytes_CheckExact
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.list cimport PyList_New, PyList_SET_ITEM, PyList_Append
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM, PyTuple_CheckExact, PyTuple_GET_SIZE
from cpython.unicode cimport PyUnicode_Check, PyUnicode_DecodeUTF8
from cpython.ref cimport PyObject, Py_INCREF
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_Resize
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from libc.stdlib cimport malloc, free, realloc
from libc.string cimport memcpy

cimport cython

from kafkalog.errors import InvalidRecordError

cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object s, Py_ssize_t* size) except NULL
    PyObject* PyTuple_GET_ITEM(object t, Py_ssize_t i)

IMPLEMENTATION = "cython"

cdef enum:
    NO_SEQUENCE = -1
    INT32_MAX = 2147483647


# --------------------------------------------------------------------------------------------------
# Record

@cython.freelist(1024)
@cython.no_gc
@cython.final
cdef class Record:
    """One record of a batch (v2; the legacy layer fills the same attributes for v0/v1).

    Attributes: ``offset``, ``timestamp``, ``key`` (bytes or None), ``value`` (bytes or None),
    ``headers`` (list of ``(str, bytes | None)``), ``sequence`` (-1 without producer sequence),
    ``size_in_bytes`` (encoded size incl. the length varint for v2; message size for v0/v1).

    Integers are held as C int64 and the headers list is created on first access, so decoding
    allocates only the record, its key and its value. Records are not tracked by the cyclic
    garbage collector: do not store a reference to a record inside its own headers.
    """
    cdef public int64_t offset
    cdef public int64_t timestamp
    cdef public object key
    cdef public object value
    cdef object _headers
    cdef public int64_t sequence
    cdef public int64_t size_in_bytes

    def __init__(self, offset, timestamp, key, value, headers=None, sequence=-1, size_in_bytes=0):
        self.offset = offset
        self.timestamp = timestamp
        self.key = key
        self.value = value
        self._headers = headers
        self.sequence = sequence
        self.size_in_bytes = size_in_bytes

    @property
    def headers(self):
        if self._headers is None:
            self._headers = []
        return self._headers

    @headers.setter
    def headers(self, value):
        self._headers = value

    def __repr__(self):
        return (f"Record(offset={self.offset!r}, timestamp={self.timestamp!r}, key={self.key!r}, "
                f"value={self.value!r}, headers={self.headers!r}, sequence={self.sequence!r}, "
                f"size_in_bytes={self.size_in_bytes!r})")

    def __eq__(self, other):
        try:
            return (self.offset == other.offset and self.timestamp == other.timestamp
                    and self.key == other.key and self.value == other.value
                    and list(self.headers) == list(other.headers)
                    and self.sequence == other.sequence
                    and self.size_in_bytes == other.size_in_bytes)
        except AttributeError:
            return NotImplemented

    __hash__ = None

    def __reduce__(self):
        return (Record, (self.offset, self.timestamp, self.key, self.value, self.headers,
                         self.sequence, self.size_in_bytes))

    @property
    def has_key(self):
        return self.key is not None

    @property
    def has_value(self):
        return self.value is not None


# Cython exposes ``cdef public object`` fields as getset descriptors; CPython 3.11+ specialises
# attribute loads only for member descriptors (T_OBJECT_EX slots), so ``key`` and ``value`` -- read
# for every record by every consumer -- are re-exposed as member descriptors on the same fields.
cdef extern from "structmember.h":
    ctypedef struct PyMemberDef:
        const char* name
        int type
        Py_ssize_t offset
        int flags
        const char* doc
    int T_OBJECT_EX

cdef extern from "Python.h":
    ctypedef struct PyTypeObject:
        PyObject* tp_dict
    object PyDescr_NewMember(PyTypeObject* type, PyMemberDef* meth)
    void PyType_Modified(PyTypeObject* type)

cdef PyMemberDef _record_members[2]


cdef Py_ssize_t _field_offset(Record probe, object sentinel) except -1:
    """Byte offset of the object field of ``probe`` that currently holds ``sentinel``."""
    cdef char* base = <char*><PyObject*>probe
    cdef Py_ssize_t off
    cdef Py_ssize_t size = (<object>Record).__basicsize__
    for off in range(sizeof(PyObject), size - <Py_ssize_t>sizeof(PyObject*) + 1, sizeof(PyObject*)):
        if (<PyObject**>(base + off))[0] == <PyObject*>sentinel:
            return off
    raise RuntimeError("Record field not found")


cdef void _install_member_descriptors() except *:
    cdef Record probe = Record.__new__(Record)
    cdef object s1 = object(), s2 = object()
    probe.key = s1
    probe.value = s2
    _record_members[0].name = "key"
    _record_members[0].type = T_OBJECT_EX
    _record_members[0].offset = _field_offset(probe, s1)
    _record_members[0].flags = 0
    _record_members[0].doc = "the record key (bytes, or None for a null key)"
    _record_members[1].name = "value"
    _record_members[1].type = T_OBJECT_EX
    _record_members[1].offset = _field_offset(probe, s2)
    _record_members[1].flags = 0
    _record_members[1].doc = "the record value (bytes, or None for a tombstone)"
    cdef dict tp_dict = <dict>(<PyTypeObject*>Record).tp_dict
    tp_dict["key"] = PyDescr_NewMember(<PyTypeObject*>Record, &_record_members[0])
    tp_dict["value"] = PyDescr_NewMember(<PyTypeObject*>Record, &_record_members[1])
    PyType_Modified(<PyTypeObject*>Record)


_install_member_descriptors()


# --------------------------------------------------------------------------------------------------
# varints (C level)

cdef inline int _rd_varint(const unsigned char* p, Py_ssize_t end, Py_ssize_t* pos,
                           int32_t* out) noexcept nogil:
    """0 ok, -1 truncated, -2 too long."""
    cdef Py_ssize_t i = pos[0]
    cdef uint32_t value = 0
    cdef int shift = 0
    cdef unsigned char b
    while True:
        if i >= end:
            return -1
        b = p[i]
        i += 1
        if b & 0x80:
            value |= <uint32_t>(b & 0x7F) << shift
            shift += 7
            if shift > 28:
                return -2
        else:
            value |= <uint32_t>b << shift
            break
    pos[0] = i
    out[0] = <int32_t>((value >> 1) ^ (<uint32_t>0 - (value & 1)))
    return 0


cdef inline int _rd_varlong(const unsigned char* p, Py_ssize_t end, Py_ssize_t* pos,
                            int64_t* out) noexcept nogil:
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
            if shift > 63:
                return -2
        else:
            value |= <uint64_t>b << shift
            break
    pos[0] = i
    out[0] = <int64_t>((value >> 1) ^ (<uint64_t>0 - (value & 1)))
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


cdef object _varint_error(int rc, Py_ssize_t pos, str what):
    if rc == -1:
        return InvalidRecordError(f"Found invalid record structure: buffer underflow reading {what}",
                                  position=pos)
    return InvalidRecordError(f"Found invalid record structure: {what} is too long", position=pos)


# --------------------------------------------------------------------------------------------------
# varints (Python API)

def read_varint(buf, Py_ssize_t pos, end=None, str what="varint"):
    """Read a zig-zag varint at ``pos`` (not past ``end``); returns ``(value, new_pos)``."""
    cdef Py_buffer view
    cdef int32_t v
    cdef int rc
    cdef Py_ssize_t p = pos, e
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        e = view.len if end is None else min(<Py_ssize_t>end, view.len)
        if pos < 0 or pos > e:
            raise InvalidRecordError(f"Found invalid record structure: position {pos} outside the buffer",
                                     position=pos)
        rc = _rd_varint(<const unsigned char*>view.buf, e, &p, &v)
    finally:
        PyBuffer_Release(&view)
    if rc:
        raise _varint_error(rc, pos, what)
    return v, p


def read_varlong(buf, Py_ssize_t pos, end=None, str what="varlong"):
    """Read a zig-zag varlong at ``pos`` (not past ``end``); returns ``(value, new_pos)``."""
    cdef Py_buffer view
    cdef int64_t v
    cdef int rc
    cdef Py_ssize_t p = pos, e
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        e = view.len if end is None else min(<Py_ssize_t>end, view.len)
        if pos < 0 or pos > e:
            raise InvalidRecordError(f"Found invalid record structure: position {pos} outside the buffer",
                                     position=pos)
        rc = _rd_varlong(<const unsigned char*>view.buf, e, &p, &v)
    finally:
        PyBuffer_Release(&view)
    if rc:
        raise _varint_error(rc, pos, what)
    return v, p


cdef extern from "Python.h":
    long long PyLong_AsLongLongAndOverflow(object obj, int* overflow) except? -1


cdef int64_t _as_int64(object value, str what) except? -1:
    cdef int overflow = 0
    cdef long long r = PyLong_AsLongLongAndOverflow(value, &overflow)
    if overflow:
        raise InvalidRecordError(f"{what} {value} does not fit in a 64-bit varlong")
    return <int64_t>r


cdef int32_t _as_int32(object value, str what) except? -1:
    cdef int overflow = 0
    cdef long long r = PyLong_AsLongLongAndOverflow(value, &overflow)
    if overflow or r < -2147483648 or r > 2147483647:
        raise InvalidRecordError(f"{what} {value} does not fit in a 32-bit varint")
    return <int32_t>r


def write_varint(value):
    """Zig-zag varint encoding of a 32-bit signed value."""
    cdef unsigned char tmp[10]
    cdef unsigned char* e = _wr_varint(tmp, _as_int32(value, "value"))
    return PyBytes_FromStringAndSize(<char*>tmp, e - tmp)


def write_varlong(value):
    """Zig-zag varlong encoding of a 64-bit signed value."""
    cdef unsigned char tmp[10]
    cdef unsigned char* e = _wr_varlong(tmp, _as_int64(value, "value"))
    return PyBytes_FromStringAndSize(<char*>tmp, e - tmp)


# --------------------------------------------------------------------------------------------------
# decode

cdef inline int32_t _next_sequence(int32_t base, int32_t delta) noexcept nogil:
    # DefaultRecordBatch.incrementSequence: wraps past Integer.MAX_VALUE to 0.
    if base == NO_SEQUENCE:
        return NO_SEQUENCE
    if base > INT32_MAX - delta:
        return delta - (INT32_MAX - base) - 1
    return base + delta


def decode_records_v2(body, Py_ssize_t count, base_offset, base_timestamp, base_sequence,
                      log_append_time):
    """Decode ``count`` v2 records from ``body`` (the uncompressed records of one batch).

    Returns a list of :class:`Record`. ``log_append_time >= 0`` replaces every record's timestamp.
    Raises :class:`InvalidRecordError` (``position`` relative to the start of ``body``) on any
    structural problem and when ``count`` disagrees with the data.
    """
    cdef Py_buffer view
    cdef const unsigned char* p
    cdef Py_ssize_t n, pos = 0, rstart, rend, i
    cdef int32_t length, offset_delta, klen, vlen, nheaders, hklen, hvlen, h
    cdef int64_t ts_delta
    cdef int64_t c_base_offset = _as_int64(base_offset, "base_offset")
    cdef int64_t c_base_ts = _as_int64(base_timestamp, "base_timestamp")
    cdef int64_t c_lat = _as_int64(log_append_time, "log_append_time")
    cdef int32_t c_base_seq = _as_int32(base_sequence, "base_sequence")
    cdef int rc
    cdef Record rec
    cdef list out
    cdef object headers
    cdef object key, value, hkey, hvalue
    if count < 0:
        raise InvalidRecordError(f"Invalid negative record count {count}", position=0)
    PyObject_GetBuffer(body, &view, PyBUF_SIMPLE)
    try:
        p = <const unsigned char*>view.buf
        n = view.len
        if count > n // 7:  # a v2 record takes at least 7 bytes
            raise InvalidRecordError(
                f"Found invalid record structure: expected {count} records in {n} bytes",
                position=n)
        out = PyList_New(count)
        for i in range(count):
            rstart = pos
            if pos >= n:
                raise InvalidRecordError(
                    f"Found invalid record structure: expected {count} records but found only {i}",
                    position=pos)
            rc = _rd_varint(p, n, &pos, &length)
            if rc:
                raise _varint_error(rc, rstart, "record length")
            if length < 0 or length > n - pos:
                raise InvalidRecordError(
                    f"Invalid record size: expected {length} bytes in record payload, but instead "
                    f"the buffer has only {n - pos} remaining bytes.", position=rstart)
            rend = pos + length
            # attributes (unused)
            if pos >= rend:
                raise InvalidRecordError("Found invalid record structure: buffer underflow reading "
                                         "attributes", position=pos)
            pos += 1
            rc = _rd_varlong(p, rend, &pos, &ts_delta)
            if rc:
                raise _varint_error(rc, pos, "timestamp delta")
            rc = _rd_varint(p, rend, &pos, &offset_delta)
            if rc:
                raise _varint_error(rc, pos, "offset delta")
            rc = _rd_varint(p, rend, &pos, &klen)
            if rc:
                raise _varint_error(rc, pos, "key length")
            if klen >= 0:
                if klen > rend - pos:
                    raise InvalidRecordError(
                        f"Found invalid record structure: key length {klen} exceeds the "
                        f"{rend - pos} bytes left in the record", position=pos)
                key = PyBytes_FromStringAndSize(<const char*>(p + pos), klen)
                pos += klen
            else:
                key = None
            rc = _rd_varint(p, rend, &pos, &vlen)
            if rc:
                raise _varint_error(rc, pos, "value length")
            if vlen >= 0:
                if vlen > rend - pos:
                    raise InvalidRecordError(
                        f"Found invalid record structure: value length {vlen} exceeds the "
                        f"{rend - pos} bytes left in the record", position=pos)
                value = PyBytes_FromStringAndSize(<const char*>(p + pos), vlen)
                pos += vlen
            else:
                value = None
            rc = _rd_varint(p, rend, &pos, &nheaders)
            if rc:
                raise _varint_error(rc, pos, "header count")
            if nheaders < 0:
                raise InvalidRecordError(f"Found invalid number of record headers {nheaders}",
                                         position=pos)
            if nheaders > rend - pos:
                raise InvalidRecordError(
                    f"Found invalid number of record headers. {nheaders} is larger than the "
                    f"remaining size of the buffer", position=pos)
            headers = [] if nheaders else None
            for h in range(nheaders):
                rc = _rd_varint(p, rend, &pos, &hklen)
                if rc:
                    raise _varint_error(rc, pos, "header key length")
                if hklen < 0:
                    raise InvalidRecordError(f"Invalid negative header key size {hklen}",
                                             position=pos)
                if hklen > rend - pos:
                    raise InvalidRecordError(
                        f"Found invalid record structure: header key length {hklen} exceeds the "
                        f"{rend - pos} bytes left in the record", position=pos)
                hkey = PyUnicode_DecodeUTF8(<const char*>(p + pos), hklen, "replace")
                pos += hklen
                rc = _rd_varint(p, rend, &pos, &hvlen)
                if rc:
                    raise _varint_error(rc, pos, "header value length")
                if hvlen >= 0:
                    if hvlen > rend - pos:
                        raise InvalidRecordError(
                            f"Found invalid record structure: header value length {hvlen} exceeds "
                            f"the {rend - pos} bytes left in the record", position=pos)
                    hvalue = PyBytes_FromStringAndSize(<const char*>(p + pos), hvlen)
                    pos += hvlen
                else:
                    hvalue = None
                headers.append((hkey, hvalue))
            if pos != rend:
                raise InvalidRecordError(
                    f"Invalid record size: expected to read {length} bytes in record payload, but "
                    f"instead read {pos - (rend - length)}", position=pos)
            rec = Record.__new__(Record)
            rec.offset = c_base_offset + offset_delta
            rec.timestamp = c_lat if c_lat >= 0 else <int64_t>(<uint64_t>c_base_ts + <uint64_t>ts_delta)
            rec.key = key
            rec.value = value
            rec._headers = headers
            rec.sequence = _next_sequence(c_base_seq, offset_delta)
            rec.size_in_bytes = rend - rstart
            Py_INCREF(rec)
            PyList_SET_ITEM(out, i, rec)
        if pos != n:
            raise InvalidRecordError(
                f"Incorrect declared batch size, records still remaining in file "
                f"({n - pos} bytes after {count} records)", position=pos)
        return out
    finally:
        PyBuffer_Release(&view)


# --------------------------------------------------------------------------------------------------
# encode

cdef inline object _as_bytes_like(object x):
    """bytes stay as they are; other bytes-like objects become bytes (None stays None)."""
    if x is None or PyBytes_CheckExact(x):
        return x
    if PyUnicode_Check(x):
        raise TypeError("record keys and values must be bytes-like or None, not str")
    return bytes(memoryview(x))


def encode_records_v2(records, base_timestamp, offset_deltas=None):
    """Encode ``records`` (sequence of ``(key, value, timestamp, headers)``) as v2 record bodies.

    Offset delta ``i`` (or ``offset_deltas[i]``); timestamp deltas relative to ``base_timestamp``.
    Returns the concatenated, uncompressed record bytes.
    """
    cdef Py_ssize_t n, i, total = 0, hn, j, klen, vlen, hklen, hvlen
    cdef int64_t c_base_ts = _as_int64(base_timestamp, "base_timestamp")
    cdef int64_t ts_delta
    cdef int32_t offset_delta
    cdef Py_ssize_t body
    cdef int32_t* sizes = NULL
    cdef int64_t* tsd = NULL
    cdef int32_t* ods = NULL
    cdef object rec, key, value, ts, headers, hk, hv, result
    cdef list keep
    cdef unsigned char* w
    cdef const char* s
    cdef bint simple
    if not isinstance(records, (list, tuple)):
        records = list(records)
    n = len(records)
    if offset_deltas is not None and len(offset_deltas) != n:
        raise InvalidRecordError(f"{len(offset_deltas)} offset deltas for {n} records")
    if n == 0:
        return b""
    sizes = <int32_t*>malloc(n * sizeof(int32_t))
    tsd = <int64_t*>malloc(n * sizeof(int64_t))
    ods = <int32_t*>malloc(n * sizeof(int32_t))
    if sizes == NULL or tsd == NULL or ods == NULL:
        free(sizes); free(tsd); free(ods)
        raise MemoryError()
    keep = None
    try:
        # pass 1: sizes (and normalise unusual inputs into a side list kept alive)
        for i in range(n):
            rec = records[i]
            if PyTuple_CheckExact(rec) and PyTuple_GET_SIZE(rec) == 4:
                key = <object>PyTuple_GET_ITEM(rec, 0)
                value = <object>PyTuple_GET_ITEM(rec, 1)
                ts = <object>PyTuple_GET_ITEM(rec, 2)
                headers = <object>PyTuple_GET_ITEM(rec, 3)
            else:
                key, value, ts, headers = rec
            simple = True
            if key is not None and not PyBytes_CheckExact(key):
                key = _as_bytes_like(key)
                simple = False
            if value is not None and not PyBytes_CheckExact(value):
                value = _as_bytes_like(value)
                simple = False
            if headers is not None and len(headers) > 0:
                hlist = []
                for hk, hv in headers:
                    if hk is None:
                        raise InvalidRecordError("Invalid null header key found in headers")
                    if PyUnicode_Check(hk):
                        hk = (<str>hk).encode("utf-8")
                    else:
                        hk = _as_bytes_like(hk)
                    hlist.append((hk, _as_bytes_like(hv)))
                headers = hlist
                simple = False
            else:
                headers = None
            if not simple:
                if keep is None:
                    keep = [None] * n
                keep[i] = (key, value, headers)
            ts_delta = <int64_t>(<uint64_t>_as_int64(ts, "timestamp") - <uint64_t>c_base_ts)
            tsd[i] = ts_delta
            offset_delta = <int32_t>i if offset_deltas is None else _as_int32(offset_deltas[i], "offset delta")
            ods[i] = offset_delta
            body = 1 + _size_varlong(ts_delta) + _size_varint(offset_delta)
            if key is None:
                body += 1
            else:
                klen = PyBytes_GET_SIZE(key)
                body += _size_varint(<int32_t>klen) + <int32_t>klen
            if value is None:
                body += 1
            else:
                vlen = PyBytes_GET_SIZE(value)
                body += _size_varint(<int32_t>vlen) + <int32_t>vlen
            if headers is None:
                body += 1
            else:
                hn = len(headers)
                body += _size_varint(<int32_t>hn)
                for hk, hv in headers:
                    hklen = PyBytes_GET_SIZE(hk)
                    body += _size_varint(<int32_t>hklen) + <int32_t>hklen
                    if hv is None:
                        body += 1
                    else:
                        hvlen = PyBytes_GET_SIZE(hv)
                        body += _size_varint(<int32_t>hvlen) + <int32_t>hvlen
            if body > INT32_MAX:
                raise InvalidRecordError(f"record {i} is too large to encode ({body} bytes)")
            sizes[i] = <int32_t>body
            total += _size_varint(body) + body
        # pass 2: write
        result = PyBytes_FromStringAndSize(NULL, total)
        w = <unsigned char*>PyBytes_AS_STRING(result)
        for i in range(n):
            if keep is not None and keep[i] is not None:
                key, value, headers = keep[i]
            else:
                rec = records[i]
                if PyTuple_CheckExact(rec) and PyTuple_GET_SIZE(rec) == 4:
                    key = <object>PyTuple_GET_ITEM(rec, 0)
                    value = <object>PyTuple_GET_ITEM(rec, 1)
                else:
                    key, value, _ts, _h = rec
                headers = None
            w = _wr_varint(w, sizes[i])
            w[0] = 0
            w += 1
            w = _wr_varlong(w, tsd[i])
            w = _wr_varint(w, ods[i])
            if key is None:
                w[0] = 1   # varint(-1)
                w += 1
            else:
                klen = PyBytes_GET_SIZE(key)
                w = _wr_varint(w, <int32_t>klen)
                memcpy(w, PyBytes_AS_STRING(key), klen)
                w += klen
            if value is None:
                w[0] = 1
                w += 1
            else:
                vlen = PyBytes_GET_SIZE(value)
                w = _wr_varint(w, <int32_t>vlen)
                memcpy(w, PyBytes_AS_STRING(value), vlen)
                w += vlen
            if headers is None:
                w[0] = 0
                w += 1
            else:
                w = _wr_varint(w, <int32_t>len(headers))
                for hk, hv in headers:
                    hklen = PyBytes_GET_SIZE(hk)
                    w = _wr_varint(w, <int32_t>hklen)
                    memcpy(w, PyBytes_AS_STRING(hk), hklen)
                    w += hklen
                    if hv is None:
                        w[0] = 1
                        w += 1
                    else:
                        hvlen = PyBytes_GET_SIZE(hv)
                        w = _wr_varint(w, <int32_t>hvlen)
                        memcpy(w, PyBytes_AS_STRING(hv), hvlen)
                        w += hvlen
        return result
    finally:
        free(sizes)
        free(tsd)
        free(ods)


# --------------------------------------------------------------------------------------------------
# incremental encoder (the builder's per-record append)

cdef object _invalid_argument(str message):
    from kafkalog.record.batch import InvalidArgumentError  # not at import time: batch imports us
    return InvalidArgumentError(message)


cdef list _normalise_headers(object headers):
    cdef list hlist = []
    for hk, hv in headers:
        if hk is None:
            raise InvalidRecordError("Invalid null header key found in headers")
        if PyUnicode_Check(hk):
            hk = (<str>hk).encode("utf-8")
        else:
            hk = _as_bytes_like(hk)
        hlist.append((hk, _as_bytes_like(hv)))
    return hlist


@cython.final
cdef class RecordsEncoder:
    """Appends v2 records one at a time into a growing buffer (the batch builder's hot path).

    ``RecordsEncoder(base_timestamp=None)``: timestamp deltas are relative to ``base_timestamp``,
    or to the first appended record's timestamp when None (Kafka's MemoryRecordsBuilder).
    ``append(key, value, timestamp, headers=None, offset_delta=None) -> int`` encodes one record
    (offset delta = number of records so far unless given) and returns its encoded size.
    ``append_record(key, value, timestamp=-1, headers=None, offset=None)`` is
    ``BatchBuilder.append`` for v2 data batches (absolute offsets from ``base_offset``, Kafka's
    checks), so a builder can hand its per-record call straight to compiled code.
    ``finish() -> bytes`` returns the concatenated record bodies (the encoder stays usable).
    Read-only: ``count``, ``size_in_bytes``, ``base_timestamp`` (None before the first record
    when not given), ``max_timestamp`` (-1 when empty), ``last_offset_delta`` (-1 when empty),
    ``base_offset``, ``last_offset`` (None before the first ``append_record``),
    ``offset_of_max_timestamp``.
    """
    cdef unsigned char* _buf
    cdef Py_ssize_t _size
    cdef Py_ssize_t _cap
    cdef int64_t _base_ts
    cdef bint _has_base
    cdef int64_t _max_ts
    cdef Py_ssize_t _count
    cdef int64_t _last_delta
    cdef int64_t _base_offset
    cdef int64_t _last_offset
    cdef bint _has_last
    cdef int64_t _offset_of_max

    def __cinit__(self, base_timestamp=None, base_offset=0):
        self._buf = NULL
        self._size = 0
        self._cap = 0
        self._count = 0
        self._max_ts = -1
        self._last_delta = -1
        self._has_base = base_timestamp is not None
        self._base_ts = _as_int64(base_timestamp, "base_timestamp") if self._has_base else 0
        self._base_offset = _as_int64(base_offset, "base_offset")
        self._has_last = False
        self._last_offset = -1
        self._offset_of_max = -1

    def __dealloc__(self):
        free(self._buf)

    cdef int _reserve(self, Py_ssize_t extra) except -1:
        cdef Py_ssize_t need = self._size + extra
        cdef Py_ssize_t cap
        cdef unsigned char* nb
        if need <= self._cap:
            return 0
        cap = self._cap * 2 if self._cap else 4096
        while cap < need:
            cap *= 2
        nb = <unsigned char*>realloc(self._buf, cap)
        if nb == NULL:
            raise MemoryError()
        self._buf = nb
        self._cap = cap
        return 0

    def append(self, key, value, timestamp, headers=None, offset_delta=None):
        cdef int64_t ts = _as_int64(timestamp, "timestamp")
        cdef int32_t od
        if offset_delta is None:
            if self._count > INT32_MAX:
                raise InvalidRecordError("too many records for one batch")
            od = <int32_t>self._count
        else:
            od = _as_int32(offset_delta, "offset delta")
        return self._append(key, value, ts, headers, od)

    def append_record(self, key, value, timestamp=-1, headers=None, offset=None):
        """``BatchBuilder.append`` for v2 data batches, with Kafka's MemoryRecordsBuilder checks.

        ``offset`` (absolute) defaults to the next offset and must increase and not fall below
        ``base_offset``; ``timestamp`` None or -1 means no timestamp, other negatives are refused
        (``InvalidArgumentError``). Tracks ``last_offset`` and ``offset_of_max_timestamp``.
        Returns None.
        """
        cdef int64_t off, ts, delta
        if offset is None:
            off = self._last_offset + 1 if self._has_last else self._base_offset
        else:
            off = _as_int64(offset, "offset")
            if self._has_last and off <= self._last_offset:
                raise _invalid_argument(
                    f"Illegal offset {off} following previous offset {self._last_offset} "
                    f"(Offsets must increase monotonically).")
            if off < self._base_offset:
                raise _invalid_argument(
                    f"Illegal offset {off}: below the base offset {self._base_offset}")
        ts = -1 if timestamp is None else _as_int64(timestamp, "timestamp")
        if ts < -1:
            raise _invalid_argument(f"Invalid negative timestamp {ts}")
        delta = off - self._base_offset
        if delta > INT32_MAX:
            raise _invalid_argument(
                f"Offset {off} is too far from the base offset {self._base_offset}")
        if ts > self._max_ts:
            self._offset_of_max = off
        self._append(key, value, ts, headers, <int32_t>delta)
        self._last_offset = off
        self._has_last = True

    cdef Py_ssize_t _append(self, key, value, int64_t ts, headers, int32_t od) except -1:
        cdef int64_t ts_delta
        cdef Py_ssize_t klen = 0, vlen = 0, body, hklen, hvlen, total
        cdef list hlist = None
        cdef unsigned char* w
        if key is not None and not PyBytes_CheckExact(key):
            key = _as_bytes_like(key)
        if value is not None and not PyBytes_CheckExact(value):
            value = _as_bytes_like(value)
        if headers is not None and len(headers) > 0:
            hlist = _normalise_headers(headers)
        if not self._has_base:
            self._base_ts = ts
            self._has_base = True
        ts_delta = <int64_t>(<uint64_t>ts - <uint64_t>self._base_ts)
        body = 1 + _size_varlong(ts_delta) + _size_varint(od)
        if key is None:
            body += 1
        else:
            klen = PyBytes_GET_SIZE(key)
            body += _size_varint(<int32_t>klen) + klen
        if value is None:
            body += 1
        else:
            vlen = PyBytes_GET_SIZE(value)
            body += _size_varint(<int32_t>vlen) + vlen
        if hlist is None:
            body += 1
        else:
            body += _size_varint(<int32_t>len(hlist))
            for hk, hv in hlist:
                hklen = PyBytes_GET_SIZE(hk)
                body += _size_varint(<int32_t>hklen) + hklen
                body += 1 if hv is None else _size_varint(<int32_t>PyBytes_GET_SIZE(hv)) + PyBytes_GET_SIZE(hv)
        if body > INT32_MAX:
            raise InvalidRecordError(f"record is too large to encode ({body} bytes)")
        total = _size_varint(<int32_t>body) + body
        self._reserve(total)
        w = self._buf + self._size
        w = _wr_varint(w, <int32_t>body)
        w[0] = 0
        w += 1
        w = _wr_varlong(w, ts_delta)
        w = _wr_varint(w, od)
        if key is None:
            w[0] = 1
            w += 1
        else:
            w = _wr_varint(w, <int32_t>klen)
            memcpy(w, PyBytes_AS_STRING(key), klen)
            w += klen
        if value is None:
            w[0] = 1
            w += 1
        else:
            w = _wr_varint(w, <int32_t>vlen)
            memcpy(w, PyBytes_AS_STRING(value), vlen)
            w += vlen
        if hlist is None:
            w[0] = 0
            w += 1
        else:
            w = _wr_varint(w, <int32_t>len(hlist))
            for hk, hv in hlist:
                hklen = PyBytes_GET_SIZE(hk)
                w = _wr_varint(w, <int32_t>hklen)
                memcpy(w, PyBytes_AS_STRING(hk), hklen)
                w += hklen
                if hv is None:
                    w[0] = 1
                    w += 1
                else:
                    hvlen = PyBytes_GET_SIZE(hv)
                    w = _wr_varint(w, <int32_t>hvlen)
                    memcpy(w, PyBytes_AS_STRING(hv), hvlen)
                    w += hvlen
        self._size += total
        self._count += 1
        if ts > self._max_ts:
            self._max_ts = ts
        if od > self._last_delta:
            self._last_delta = od
        return total

    def finish(self):
        return PyBytes_FromStringAndSize(<const char*>self._buf, self._size)

    @property
    def count(self):
        return self._count

    @property
    def size_in_bytes(self):
        return self._size

    @property
    def base_timestamp(self):
        return self._base_ts if self._has_base else None

    @property
    def max_timestamp(self):
        return self._max_ts

    @property
    def last_offset_delta(self):
        return self._last_delta

    @property
    def base_offset(self):
        return self._base_offset

    @property
    def last_offset(self):
        """The last offset appended with ``append_record`` (None before the first)."""
        return self._last_offset if self._has_last else None

    @property
    def offset_of_max_timestamp(self):
        """The offset of the first record with the max timestamp (``append_record``; -1 if none)."""
        return self._offset_of_max


# --------------------------------------------------------------------------------------------------
# columnar decode for Arrow (used by kafkalog.spark.arrow_batches; pure-Python reference:
# kafkalog.record._kernel_py.decode_columns_v2)

cdef extern from "Python.h":
    char* PyByteArray_AS_STRING(object ba)
    Py_ssize_t PyByteArray_GET_SIZE(object ba)
    int PyByteArray_Resize(object ba, Py_ssize_t size) except -1


cdef inline char* _ba_grow(bytearray ba, Py_ssize_t extra) except NULL:
    """Grow ``ba`` by ``extra`` bytes; returns a pointer to the first new byte."""
    cdef Py_ssize_t old = PyByteArray_GET_SIZE(ba)
    PyByteArray_Resize(ba, old + extra)
    return PyByteArray_AS_STRING(ba) + old


def decode_columns_v2(body, Py_ssize_t count, base_offset, base_timestamp, log_append_time,
                      min_offset, max_offset, cols, headers):
    """Append the records of one v2 batch body whose offsets are in ``[min_offset, max_offset)``
    to Arrow-style column buffers; returns the number of rows appended.

    ``cols = [offsets, timestamps, key_data, key_ends, key_valid, value_data, value_ends,
    value_valid]`` (bytearrays: native int64, native int64, bytes, native int32 cumulative ends,
    one byte 1/0 per row, ...). When ``headers`` is a list, one entry per appended row is added:
    None or a list of ``(str, bytes | None)``. Raises :class:`InvalidRecordError` with
    ``position`` relative to ``body``.
    """
    cdef bytearray offsets, timestamps, kdata, kends, kvalid, vdata, vends, vvalid
    offsets, timestamps, kdata, kends, kvalid, vdata, vends, vvalid = cols
    cdef Py_buffer view
    cdef const unsigned char* p
    cdef Py_ssize_t n, pos = 0, rstart, rend, i, kpos = 0, vpos = 0, appended = 0
    cdef Py_ssize_t s_off, s_ts, s_kd, s_ke, s_kv, s_vd, s_ve, s_vv
    cdef Py_ssize_t kd_used = 0, vd_used = 0
    cdef char *w_off, *w_ts, *w_kd, *w_ke, *w_kv, *w_vd, *w_ve, *w_vv
    cdef bint reserved = False
    cdef int32_t length, offset_delta, klen, vlen, nheaders, hklen, hvlen, h
    cdef int64_t ts_delta, off, ts
    cdef int64_t c_base_offset = _as_int64(base_offset, "base_offset")
    cdef int64_t c_base_ts = _as_int64(base_timestamp, "base_timestamp")
    cdef int64_t c_lat = _as_int64(log_append_time, "log_append_time")
    cdef int64_t c_min = _as_int64(min_offset, "min_offset")
    cdef int64_t c_max = _as_int64(max_offset, "max_offset")
    cdef bint want_headers = headers is not None
    cdef int rc
    cdef object hdrs, hkey, hvalue
    cdef char* w
    if count < 0:
        raise InvalidRecordError(f"Invalid negative record count {count}", position=0)
    PyObject_GetBuffer(body, &view, PyBUF_SIMPLE)
    s_off = PyByteArray_GET_SIZE(offsets)
    s_ts = PyByteArray_GET_SIZE(timestamps)
    s_kd = PyByteArray_GET_SIZE(kdata)
    s_ke = PyByteArray_GET_SIZE(kends)
    s_kv = PyByteArray_GET_SIZE(kvalid)
    s_vd = PyByteArray_GET_SIZE(vdata)
    s_ve = PyByteArray_GET_SIZE(vends)
    s_vv = PyByteArray_GET_SIZE(vvalid)
    try:
        p = <const unsigned char*>view.buf
        n = view.len
        if count > n // 7:  # a v2 record takes at least 7 bytes
            raise InvalidRecordError(
                f"Found invalid record structure: expected {count} records in {n} bytes",
                position=n)
        # reserve the most this body can add, write through pointers, trim in `finally`
        PyByteArray_Resize(offsets, s_off + 8 * count)
        PyByteArray_Resize(timestamps, s_ts + 8 * count)
        PyByteArray_Resize(kdata, s_kd + n)
        PyByteArray_Resize(kends, s_ke + 4 * count)
        PyByteArray_Resize(kvalid, s_kv + count)
        PyByteArray_Resize(vdata, s_vd + n)
        PyByteArray_Resize(vends, s_ve + 4 * count)
        PyByteArray_Resize(vvalid, s_vv + count)
        reserved = True
        w_off = PyByteArray_AS_STRING(offsets) + s_off
        w_ts = PyByteArray_AS_STRING(timestamps) + s_ts
        w_kd = PyByteArray_AS_STRING(kdata) + s_kd
        w_ke = PyByteArray_AS_STRING(kends) + s_ke
        w_kv = PyByteArray_AS_STRING(kvalid) + s_kv
        w_vd = PyByteArray_AS_STRING(vdata) + s_vd
        w_ve = PyByteArray_AS_STRING(vends) + s_ve
        w_vv = PyByteArray_AS_STRING(vvalid) + s_vv
        for i in range(count):
            rstart = pos
            rc = _rd_varint(p, n, &pos, &length)
            if rc:
                raise _varint_error(rc, rstart, "record length")
            if length < 0 or length > n - pos:
                raise InvalidRecordError(
                    f"Invalid record size: expected {length} bytes in record payload, but instead "
                    f"the buffer has only {n - pos} remaining bytes.", position=rstart)
            rend = pos + length
            if pos >= rend:
                raise InvalidRecordError("Found invalid record structure: buffer underflow reading "
                                         "attributes", position=pos)
            pos += 1
            rc = _rd_varlong(p, rend, &pos, &ts_delta)
            if rc:
                raise _varint_error(rc, pos, "timestamp delta")
            rc = _rd_varint(p, rend, &pos, &offset_delta)
            if rc:
                raise _varint_error(rc, pos, "offset delta")
            rc = _rd_varint(p, rend, &pos, &klen)
            if rc:
                raise _varint_error(rc, pos, "key length")
            if klen >= 0:
                if klen > rend - pos:
                    raise InvalidRecordError(
                        f"Found invalid record structure: key length {klen} exceeds the "
                        f"{rend - pos} bytes left in the record", position=pos)
                kpos = pos
                pos += klen
            rc = _rd_varint(p, rend, &pos, &vlen)
            if rc:
                raise _varint_error(rc, pos, "value length")
            if vlen >= 0:
                if vlen > rend - pos:
                    raise InvalidRecordError(
                        f"Found invalid record structure: value length {vlen} exceeds the "
                        f"{rend - pos} bytes left in the record", position=pos)
                vpos = pos
                pos += vlen
            rc = _rd_varint(p, rend, &pos, &nheaders)
            if rc:
                raise _varint_error(rc, pos, "header count")
            if nheaders < 0 or nheaders > rend - pos:
                raise InvalidRecordError(f"Invalid number of headers {nheaders}", position=pos)
            hdrs = None
            if nheaders:
                hdrs = []
                for h in range(nheaders):
                    rc = _rd_varint(p, rend, &pos, &hklen)
                    if rc:
                        raise _varint_error(rc, pos, "header key length")
                    if hklen < 0 or hklen > rend - pos:
                        raise InvalidRecordError(f"Invalid header key length {hklen}", position=pos)
                    hkey = PyUnicode_DecodeUTF8(<const char*>(p + pos), hklen, "replace")
                    pos += hklen
                    rc = _rd_varint(p, rend, &pos, &hvlen)
                    if rc:
                        raise _varint_error(rc, pos, "header value length")
                    if hvlen >= 0:
                        if hvlen > rend - pos:
                            raise InvalidRecordError(f"Invalid header value length {hvlen}",
                                                     position=pos)
                        hvalue = PyBytes_FromStringAndSize(<const char*>(p + pos), hvlen)
                        pos += hvlen
                    else:
                        hvalue = None
                    hdrs.append((hkey, hvalue))
            if pos != rend:
                raise InvalidRecordError(
                    f"Invalid record size: expected to read {length} bytes in record payload, but "
                    f"instead read {pos - (rend - length)}", position=rstart)
            off = c_base_offset + offset_delta
            if off < c_min or off >= c_max:
                continue
            ts = c_lat if c_lat >= 0 else <int64_t>(<uint64_t>c_base_ts + <uint64_t>ts_delta)
            memcpy(w_off + 8 * appended, &off, 8)
            memcpy(w_ts + 8 * appended, &ts, 8)
            if klen >= 0:
                memcpy(w_kd + kd_used, p + kpos, klen)
                kd_used += klen
                w_kv[appended] = 1
            else:
                w_kv[appended] = 0
            (<int32_t*>(w_ke + 4 * appended))[0] = <int32_t>(s_kd + kd_used)
            if vlen >= 0:
                memcpy(w_vd + vd_used, p + vpos, vlen)
                vd_used += vlen
                w_vv[appended] = 1
            else:
                w_vv[appended] = 0
            (<int32_t*>(w_ve + 4 * appended))[0] = <int32_t>(s_vd + vd_used)
            if want_headers:
                headers.append(hdrs)
            appended += 1
        if pos != n:
            raise InvalidRecordError(
                "Incorrect declared batch size, records still remaining in file", position=pos)
        return appended
    finally:
        PyBuffer_Release(&view)
        if reserved:
            # keep exactly the rows appended so far (also on error, like the reference)
            PyByteArray_Resize(offsets, s_off + 8 * appended)
            PyByteArray_Resize(timestamps, s_ts + 8 * appended)
            PyByteArray_Resize(kdata, s_kd + kd_used)
            PyByteArray_Resize(kends, s_ke + 4 * appended)
            PyByteArray_Resize(kvalid, s_kv + appended)
            PyByteArray_Resize(vdata, s_vd + vd_used)
            PyByteArray_Resize(vends, s_ve + 4 * appended)
            PyByteArray_Resize(vvalid, s_vv + appended)


# --------------------------------------------------------------------------------------------------
# Cleaner kernel (kafkalog.cleaner; spec §4.11): the per-record loops of log compaction over an
# offset map laid out like Kafka's SkimpyOffsetMap (flat table of 24-byte entries: 16-byte MD5 of
# the key + big-endian int64 offset; all-zero = empty). Pure-Python reference and API docs:
# ``_kernel_py.offset_map_*``. MD5 is OpenSSL's one-shot ``MD5()`` from the libcrypto that Python's
# ``_hashlib`` already loaded (found with ctypes at import; no link-time dependency); without it
# each key is hashed with ``hashlib.md5``.

from libc.string cimport memcmp, memset

ctypedef unsigned char* (*_md5_fn_t)(const unsigned char* d, size_t n, unsigned char* md) noexcept nogil
cdef _md5_fn_t _cl_md5 = NULL


def _cl_init_md5():
    """Locate OpenSSL's ``MD5`` (returns True when found)."""
    global _cl_md5
    try:
        import ctypes
        import ctypes.util
        import _hashlib  # noqa: F401  (makes sure libcrypto is loaded)
        names = [ctypes.util.find_library("crypto"), "libcrypto.so.3", "libcrypto.so.1.1",
                 "libcrypto.dylib"]
        for name in names:
            if not name:
                continue
            try:
                lib = ctypes.CDLL(name)
                addr = ctypes.cast(lib.MD5, ctypes.c_void_p).value
            except (OSError, AttributeError):
                continue
            if addr:
                _cl_md5 = <_md5_fn_t><size_t>addr
                probe = bytearray(16)
                _cl_hash(<const unsigned char*>b"abc", 3, <unsigned char*>PyByteArray_AS_STRING(probe))
                import hashlib
                if bytes(probe) == hashlib.md5(b"abc").digest():
                    return True
                _cl_md5 = NULL
    except Exception:
        _cl_md5 = NULL
    return False


cdef object _cl_py_md5 = None


cdef inline int _cl_hash(const unsigned char* k, Py_ssize_t n, unsigned char* out) except -1:
    global _cl_py_md5
    if _cl_md5 != NULL:
        _cl_md5(k, <size_t>n, out)
        return 0
    if _cl_py_md5 is None:
        import hashlib
        _cl_py_md5 = hashlib.md5
    d = _cl_py_md5(PyBytes_FromStringAndSize(<const char*>k, n)).digest()
    memcpy(out, PyBytes_AS_STRING(d), 16)
    return 0


CLEANER_MD5 = "openssl" if _cl_init_md5() else "hashlib"


cdef inline Py_ssize_t _cl_pos(const unsigned char* h, int64_t attempt, int64_t slots) noexcept nogil:
    cdef int64_t off = attempt if attempt < 12 else 12
    cdef uint32_t u = ((<uint32_t>h[off] << 24) | (<uint32_t>h[off + 1] << 16)
                       | (<uint32_t>h[off + 2] << 8) | <uint32_t>h[off + 3])
    if attempt > 12:
        u = u + <uint32_t>(attempt - 12)
    cdef int32_t probe = <int32_t>u
    cdef int64_t a
    if probe == -2147483648:
        a = 0
    elif probe < 0:
        a = -<int64_t>probe
    else:
        a = probe
    return <Py_ssize_t>((a % slots) * 24)


cdef inline bint _cl_empty(const unsigned char* e) noexcept nogil:
    cdef int i
    for i in range(24):
        if e[i]:
            return False
    return True


cdef inline void _cl_wr_q(unsigned char* p, int64_t v) noexcept nogil:
    cdef uint64_t u = <uint64_t>v
    cdef int i
    for i in range(8):
        p[7 - i] = <unsigned char>(u & 0xFF)
        u >>= 8


cdef inline int64_t _cl_rd_q(const unsigned char* p) noexcept nogil:
    cdef uint64_t u = 0
    cdef int i
    for i in range(8):
        u = (u << 8) | p[i]
    return <int64_t>u


cdef inline int _cl_put(unsigned char* t, int64_t slots, const unsigned char* h, int64_t offset) noexcept nogil:
    cdef int64_t attempt = 0
    cdef Py_ssize_t pos = _cl_pos(h, 0, slots)
    while not _cl_empty(t + pos):
        if memcmp(t + pos, h, 16) == 0:
            _cl_wr_q(t + pos + 16, offset)
            return 0
        attempt += 1
        pos = _cl_pos(h, attempt, slots)
    memcpy(t + pos, h, 16)
    _cl_wr_q(t + pos + 16, offset)
    return 1


cdef inline int64_t _cl_get(const unsigned char* t, int64_t slots, const unsigned char* h) noexcept nogil:
    cdef int64_t max_attempts = slots + 12
    cdef int64_t attempt = 0
    cdef Py_ssize_t pos
    while attempt < max_attempts:
        pos = _cl_pos(h, attempt, slots)
        if _cl_empty(t + pos):
            return -1
        if memcmp(t + pos, h, 16) == 0:
            return _cl_rd_q(t + pos + 16)
        attempt += 1
    return -1


cdef struct _ClRec:
    Py_ssize_t rstart
    Py_ssize_t rend
    Py_ssize_t ts_pos
    Py_ssize_t after_ts
    Py_ssize_t kstart
    int64_t ts_delta
    int32_t offset_delta
    int32_t klen
    int32_t vlen


cdef int _cl_parse(const unsigned char* p, Py_ssize_t n, Py_ssize_t* pos, Py_ssize_t i,
                   Py_ssize_t count, _ClRec* r) except -1:
    cdef int32_t length
    cdef Py_ssize_t q
    cdef int rc
    r.rstart = pos[0]
    if pos[0] >= n:
        raise InvalidRecordError(f"Found invalid record structure: expected {count} records but "
                                 f"found only {i}", position=pos[0])
    rc = _rd_varint(p, n, pos, &length)
    if rc:
        raise _varint_error(rc, pos[0], "record length")
    if length < 1 or length > n - pos[0]:
        raise InvalidRecordError(f"Invalid record size: expected {length} bytes in record payload, "
                                 f"but the buffer has only {n - pos[0]} remaining bytes.",
                                 position=r.rstart)
    r.rend = pos[0] + length
    r.ts_pos = pos[0] + 1
    q = r.ts_pos
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
            raise InvalidRecordError(f"Found invalid record structure: key length {r.klen} exceeds "
                                     f"the {r.rend - q} bytes left in the record", position=q)
        q += r.klen
    rc = _rd_varint(p, r.rend, &q, &r.vlen)
    if rc:
        raise _varint_error(rc, q, "value length")
    if r.vlen >= 0 and r.vlen > r.rend - q:
        raise InvalidRecordError(f"Found invalid record structure: value length {r.vlen} exceeds "
                                 f"the {r.rend - q} bytes left in the record", position=q)
    pos[0] = r.rend
    return 0


def offset_map_put_hash(bytearray table, int64_t slots, h, int64_t offset):
    """See ``_kernel_py.offset_map_put_hash``."""
    cdef bytes hb = bytes(h)
    if len(hb) != 16 or slots <= 0 or PyByteArray_GET_SIZE(table) < slots * 24:
        raise ValueError("bad offset map arguments")
    return _cl_put(<unsigned char*>PyByteArray_AS_STRING(table), slots,
                   <const unsigned char*>PyBytes_AS_STRING(hb), offset)


def offset_map_get_hash(bytearray table, int64_t slots, h):
    """See ``_kernel_py.offset_map_get_hash``."""
    cdef bytes hb = bytes(h)
    if len(hb) != 16 or slots <= 0 or PyByteArray_GET_SIZE(table) < slots * 24:
        raise ValueError("bad offset map arguments")
    return _cl_get(<const unsigned char*>PyByteArray_AS_STRING(table), slots,
                   <const unsigned char*>PyBytes_AS_STRING(hb))


def offset_map_put_v2(bytearray table, int64_t slots, int64_t entries, int64_t max_entries, body,
                      Py_ssize_t count, int64_t base_offset, int64_t start_offset):
    """See ``_kernel_py.offset_map_put_v2``."""
    cdef Py_buffer view
    cdef const unsigned char* p
    cdef unsigned char* t
    cdef Py_ssize_t n, pos = 0, i
    cdef _ClRec r
    cdef unsigned char h[16]
    cdef int64_t off, last = -1, read = 0
    if slots <= 0 or PyByteArray_GET_SIZE(table) < slots * 24 or max_entries > slots:
        raise ValueError("bad offset map arguments")
    if count < 0:
        raise InvalidRecordError(f"Invalid negative record count {count}", position=0)
    t = <unsigned char*>PyByteArray_AS_STRING(table)
    PyObject_GetBuffer(body, &view, PyBUF_SIMPLE)
    try:
        p = <const unsigned char*>view.buf
        n = view.len
        for i in range(count):
            _cl_parse(p, n, &pos, i, count, &r)
            off = base_offset + r.offset_delta
            if r.klen >= 0 and off >= start_offset:
                if entries >= max_entries:
                    return entries, last, read, True
                _cl_hash(p + r.kstart, r.klen, h)
                entries += _cl_put(t, slots, h, off)
                last = off
            read += 1
        if pos != n:
            raise InvalidRecordError(f"Incorrect declared batch size, records still remaining in "
                                     f"file ({n - pos} bytes after {count} records)", position=pos)
    finally:
        PyBuffer_Release(&view)
    return entries, last, read, False


def offset_map_filter_v2(bytearray table, int64_t slots, body, Py_ssize_t count, int64_t base_offset,
                         int64_t base_timestamp, int64_t log_append_time, int64_t latest_offset,
                         bint retain_deletes, new_base_timestamp, bint always_encode):
    """See ``_kernel_py.offset_map_filter_v2``."""
    cdef Py_buffer view
    cdef const unsigned char* p
    cdef const unsigned char* t
    cdef Py_ssize_t n, pos = 0, i, nkept = 0, out_size = 0, j
    cdef _ClRec* recs = NULL
    cdef int64_t* tss = NULL
    cdef _ClRec r
    cdef unsigned char h[16]
    cdef int64_t off, found, ts, nbase = 0, max_ts = -1, max_off = -1, d
    cdef int64_t keyless = 0, tomb_dropped = 0
    cdef bint keep, tomb_kept = False
    cdef bytes out
    cdef unsigned char* w
    cdef int dsz
    if slots <= 0 or PyByteArray_GET_SIZE(table) < slots * 24:
        raise ValueError("bad offset map arguments")
    if count < 0:
        raise InvalidRecordError(f"Invalid negative record count {count}", position=0)
    t = <const unsigned char*>PyByteArray_AS_STRING(table)
    PyObject_GetBuffer(body, &view, PyBUF_SIMPLE)
    try:
        p = <const unsigned char*>view.buf
        n = view.len
        if count > n // 7 + 1:
            raise InvalidRecordError(f"Found invalid record structure: expected {count} records "
                                     f"in {n} bytes", position=n)
        recs = <_ClRec*>malloc(sizeof(_ClRec) * (count + 1))
        tss = <int64_t*>malloc(sizeof(int64_t) * (count + 1))
        if recs == NULL or tss == NULL:
            raise MemoryError()
        for i in range(count):
            _cl_parse(p, n, &pos, i, count, &r)
            off = base_offset + r.offset_delta
            if off > latest_offset:
                keep = True
            elif r.klen < 0:
                keyless += 1
                keep = False
            else:
                _cl_hash(p + r.kstart, r.klen, h)
                found = _cl_get(t, slots, h)
                keep = off >= found and (r.vlen >= 0 or retain_deletes)
            if keep:
                if log_append_time >= 0:
                    ts = log_append_time
                else:
                    ts = <int64_t>(<uint64_t>base_timestamp + <uint64_t>r.ts_delta)
                recs[nkept] = r
                tss[nkept] = ts
                nkept += 1
                if ts > max_ts:
                    max_ts = ts
                    max_off = off
                if r.vlen < 0:
                    tomb_kept = True
            elif r.vlen < 0:
                tomb_dropped += 1
        if pos != n:
            raise InvalidRecordError(f"Incorrect declared batch size, records still remaining in "
                                     f"file ({n - pos} bytes after {count} records)", position=pos)
        if nkept == 0:
            return None, 0, keyless, tomb_dropped, -1, -1, -1, False
        nbase = tss[0] if new_base_timestamp is None else <int64_t>new_base_timestamp
        if nkept == count and not always_encode:
            return None, count, keyless, tomb_dropped, nbase, max_ts, max_off, tomb_kept
        for j in range(nkept):
            d = <int64_t>(<uint64_t>tss[j] - <uint64_t>nbase)
            dsz = _size_varlong(d)
            out_size += _size_varint(<int32_t>(1 + dsz + (recs[j].rend - recs[j].after_ts)))
            out_size += 1 + dsz + (recs[j].rend - recs[j].after_ts)
        out = PyBytes_FromStringAndSize(NULL, out_size)
        w = <unsigned char*>PyBytes_AS_STRING(out)
        for j in range(nkept):
            d = <int64_t>(<uint64_t>tss[j] - <uint64_t>nbase)
            dsz = _size_varlong(d)
            w = _wr_varint(w, <int32_t>(1 + dsz + (recs[j].rend - recs[j].after_ts)))
            w[0] = p[recs[j].ts_pos - 1]
            w += 1
            w = _wr_varlong(w, d)
            memcpy(w, p + recs[j].after_ts, recs[j].rend - recs[j].after_ts)
            w += recs[j].rend - recs[j].after_ts
        return out, nkept, keyless, tomb_dropped, nbase, max_ts, max_off, tomb_kept
    finally:
        free(recs)
        free(tss)
        PyBuffer_Release(&view)


# Cleaner kernel, second generation: map building that records superseded offsets, and the whole
# per-batch decision + rewrite of the recopy pass in one call (hash / bitmap + map lookup, copy of
# the retained records, header rebuild, CRC-32C). API docs: ``_kernel_py.offset_map_build_v2`` and
# ``_kernel_py.offset_map_clean_v2``.

cdef inline int _cl_put_old(unsigned char* t, int64_t slots, const unsigned char* h, int64_t offset,
                            int64_t* old) noexcept nogil:
    cdef int64_t attempt = 0
    cdef Py_ssize_t pos = _cl_pos(h, 0, slots)
    while not _cl_empty(t + pos):
        if memcmp(t + pos, h, 16) == 0:
            old[0] = _cl_rd_q(t + pos + 16)
            _cl_wr_q(t + pos + 16, offset)
            return 0
        attempt += 1
        pos = _cl_pos(h, attempt, slots)
    memcpy(t + pos, h, 16)
    _cl_wr_q(t + pos + 16, offset)
    old[0] = -1
    return 1


cdef inline int32_t _cl_rd_i(const unsigned char* p) noexcept nogil:
    return <int32_t>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8)
                     | <uint32_t>p[3])


cdef inline void _cl_wr_i(unsigned char* p, uint32_t v) noexcept nogil:
    p[0] = <unsigned char>(v >> 24)
    p[1] = <unsigned char>(v >> 16)
    p[2] = <unsigned char>(v >> 8)
    p[3] = <unsigned char>v


# 4-lane MD5 (SSE2) for keys of up to 55 bytes (one MD5 block): the map-building loop hashes four
# keys at a time, about twice the throughput of one-at-a-time OpenSSL MD5 on short keys. Checked
# against hashlib at import (CLEANER_MD5_X4); without SSE2 every key goes through _cl_hash.
cdef extern from *:
    """
    #if defined(__SSE2__)
    #include <emmintrin.h>
    #define KL_HAVE_MD5X4 1
    #define KL_V_ROL(x, n) _mm_or_si128(_mm_slli_epi32((x), (n)), _mm_srli_epi32((x), 32 - (n)))
    #define KL_V_F(x, y, z) _mm_xor_si128((z), _mm_and_si128((x), _mm_xor_si128((y), (z))))
    #define KL_V_G(x, y, z) _mm_xor_si128((y), _mm_and_si128((z), _mm_xor_si128((x), (y))))
    #define KL_V_H(x, y, z) _mm_xor_si128(_mm_xor_si128((x), (y)), (z))
    #define KL_V_I(x, y, z) _mm_xor_si128((y), _mm_or_si128((x), _mm_xor_si128((z), ones)))
    #define KL_V_STEP(f, a, b, c, d, x, t, s) \\
        (a) = _mm_add_epi32((a), _mm_add_epi32(f((b), (c), (d)), _mm_add_epi32((x), _mm_set1_epi32((int)(t))))); \\
        (a) = _mm_add_epi32(KL_V_ROL((a), (s)), (b));
    static inline uint32_t kl_le32(const unsigned char* p) {
        return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
    }
    /* keys k[0..3] of n[j] <= 55 bytes -> 16-byte digests out[0..3] */
    static void kl_md5x4(const unsigned char* const k[4], const size_t n[4], unsigned char* const out[4]) {
        const __m128i ones = _mm_set1_epi32(-1);
        unsigned char blk[4][64];
        __m128i a = _mm_set1_epi32(0x67452301), b = _mm_set1_epi32((int)0xefcdab89u),
                c = _mm_set1_epi32((int)0x98badcfeu), d = _mm_set1_epi32(0x10325476);
        __m128i a0 = a, b0 = b, c0 = c, d0 = d;
        __m128i X[16];
        uint32_t r[4][4];
        int i, j;
        for (j = 0; j < 4; j++) {
            uint64_t bits = (uint64_t)n[j] << 3;
            memcpy(blk[j], k[j], n[j]);
            blk[j][n[j]] = 0x80;
            memset(blk[j] + n[j] + 1, 0, 55 - n[j]);
            for (i = 0; i < 8; i++) blk[j][56 + i] = (unsigned char)(bits >> (8 * i));
        }
        for (i = 0; i < 16; i++)
            X[i] = _mm_set_epi32((int)kl_le32(blk[3] + 4 * i), (int)kl_le32(blk[2] + 4 * i),
                                 (int)kl_le32(blk[1] + 4 * i), (int)kl_le32(blk[0] + 4 * i));
            KL_V_STEP(KL_V_F, a, b, c, d, X[0], 0xd76aa478u, 7)
            KL_V_STEP(KL_V_F, d, a, b, c, X[1], 0xe8c7b756u, 12)
            KL_V_STEP(KL_V_F, c, d, a, b, X[2], 0x242070dbu, 17)
            KL_V_STEP(KL_V_F, b, c, d, a, X[3], 0xc1bdceeeu, 22)
            KL_V_STEP(KL_V_F, a, b, c, d, X[4], 0xf57c0fafu, 7)
            KL_V_STEP(KL_V_F, d, a, b, c, X[5], 0x4787c62au, 12)
            KL_V_STEP(KL_V_F, c, d, a, b, X[6], 0xa8304613u, 17)
            KL_V_STEP(KL_V_F, b, c, d, a, X[7], 0xfd469501u, 22)
            KL_V_STEP(KL_V_F, a, b, c, d, X[8], 0x698098d8u, 7)
            KL_V_STEP(KL_V_F, d, a, b, c, X[9], 0x8b44f7afu, 12)
            KL_V_STEP(KL_V_F, c, d, a, b, X[10], 0xffff5bb1u, 17)
            KL_V_STEP(KL_V_F, b, c, d, a, X[11], 0x895cd7beu, 22)
            KL_V_STEP(KL_V_F, a, b, c, d, X[12], 0x6b901122u, 7)
            KL_V_STEP(KL_V_F, d, a, b, c, X[13], 0xfd987193u, 12)
            KL_V_STEP(KL_V_F, c, d, a, b, X[14], 0xa679438eu, 17)
            KL_V_STEP(KL_V_F, b, c, d, a, X[15], 0x49b40821u, 22)
            KL_V_STEP(KL_V_G, a, b, c, d, X[1], 0xf61e2562u, 5)
            KL_V_STEP(KL_V_G, d, a, b, c, X[6], 0xc040b340u, 9)
            KL_V_STEP(KL_V_G, c, d, a, b, X[11], 0x265e5a51u, 14)
            KL_V_STEP(KL_V_G, b, c, d, a, X[0], 0xe9b6c7aau, 20)
            KL_V_STEP(KL_V_G, a, b, c, d, X[5], 0xd62f105du, 5)
            KL_V_STEP(KL_V_G, d, a, b, c, X[10], 0x02441453u, 9)
            KL_V_STEP(KL_V_G, c, d, a, b, X[15], 0xd8a1e681u, 14)
            KL_V_STEP(KL_V_G, b, c, d, a, X[4], 0xe7d3fbc8u, 20)
            KL_V_STEP(KL_V_G, a, b, c, d, X[9], 0x21e1cde6u, 5)
            KL_V_STEP(KL_V_G, d, a, b, c, X[14], 0xc33707d6u, 9)
            KL_V_STEP(KL_V_G, c, d, a, b, X[3], 0xf4d50d87u, 14)
            KL_V_STEP(KL_V_G, b, c, d, a, X[8], 0x455a14edu, 20)
            KL_V_STEP(KL_V_G, a, b, c, d, X[13], 0xa9e3e905u, 5)
            KL_V_STEP(KL_V_G, d, a, b, c, X[2], 0xfcefa3f8u, 9)
            KL_V_STEP(KL_V_G, c, d, a, b, X[7], 0x676f02d9u, 14)
            KL_V_STEP(KL_V_G, b, c, d, a, X[12], 0x8d2a4c8au, 20)
            KL_V_STEP(KL_V_H, a, b, c, d, X[5], 0xfffa3942u, 4)
            KL_V_STEP(KL_V_H, d, a, b, c, X[8], 0x8771f681u, 11)
            KL_V_STEP(KL_V_H, c, d, a, b, X[11], 0x6d9d6122u, 16)
            KL_V_STEP(KL_V_H, b, c, d, a, X[14], 0xfde5380cu, 23)
            KL_V_STEP(KL_V_H, a, b, c, d, X[1], 0xa4beea44u, 4)
            KL_V_STEP(KL_V_H, d, a, b, c, X[4], 0x4bdecfa9u, 11)
            KL_V_STEP(KL_V_H, c, d, a, b, X[7], 0xf6bb4b60u, 16)
            KL_V_STEP(KL_V_H, b, c, d, a, X[10], 0xbebfbc70u, 23)
            KL_V_STEP(KL_V_H, a, b, c, d, X[13], 0x289b7ec6u, 4)
            KL_V_STEP(KL_V_H, d, a, b, c, X[0], 0xeaa127fau, 11)
            KL_V_STEP(KL_V_H, c, d, a, b, X[3], 0xd4ef3085u, 16)
            KL_V_STEP(KL_V_H, b, c, d, a, X[6], 0x04881d05u, 23)
            KL_V_STEP(KL_V_H, a, b, c, d, X[9], 0xd9d4d039u, 4)
            KL_V_STEP(KL_V_H, d, a, b, c, X[12], 0xe6db99e5u, 11)
            KL_V_STEP(KL_V_H, c, d, a, b, X[15], 0x1fa27cf8u, 16)
            KL_V_STEP(KL_V_H, b, c, d, a, X[2], 0xc4ac5665u, 23)
            KL_V_STEP(KL_V_I, a, b, c, d, X[0], 0xf4292244u, 6)
            KL_V_STEP(KL_V_I, d, a, b, c, X[7], 0x432aff97u, 10)
            KL_V_STEP(KL_V_I, c, d, a, b, X[14], 0xab9423a7u, 15)
            KL_V_STEP(KL_V_I, b, c, d, a, X[5], 0xfc93a039u, 21)
            KL_V_STEP(KL_V_I, a, b, c, d, X[12], 0x655b59c3u, 6)
            KL_V_STEP(KL_V_I, d, a, b, c, X[3], 0x8f0ccc92u, 10)
            KL_V_STEP(KL_V_I, c, d, a, b, X[10], 0xffeff47du, 15)
            KL_V_STEP(KL_V_I, b, c, d, a, X[1], 0x85845dd1u, 21)
            KL_V_STEP(KL_V_I, a, b, c, d, X[8], 0x6fa87e4fu, 6)
            KL_V_STEP(KL_V_I, d, a, b, c, X[15], 0xfe2ce6e0u, 10)
            KL_V_STEP(KL_V_I, c, d, a, b, X[6], 0xa3014314u, 15)
            KL_V_STEP(KL_V_I, b, c, d, a, X[13], 0x4e0811a1u, 21)
            KL_V_STEP(KL_V_I, a, b, c, d, X[4], 0xf7537e82u, 6)
            KL_V_STEP(KL_V_I, d, a, b, c, X[11], 0xbd3af235u, 10)
            KL_V_STEP(KL_V_I, c, d, a, b, X[2], 0x2ad7d2bbu, 15)
            KL_V_STEP(KL_V_I, b, c, d, a, X[9], 0xeb86d391u, 21)
        a = _mm_add_epi32(a, a0); b = _mm_add_epi32(b, b0);
        c = _mm_add_epi32(c, c0); d = _mm_add_epi32(d, d0);
        _mm_storeu_si128((__m128i*)r[0], a); _mm_storeu_si128((__m128i*)r[1], b);
        _mm_storeu_si128((__m128i*)r[2], c); _mm_storeu_si128((__m128i*)r[3], d);
        for (j = 0; j < 4; j++)
            for (i = 0; i < 4; i++) {
                out[j][4 * i] = (unsigned char)r[i][j];
                out[j][4 * i + 1] = (unsigned char)(r[i][j] >> 8);
                out[j][4 * i + 2] = (unsigned char)(r[i][j] >> 16);
                out[j][4 * i + 3] = (unsigned char)(r[i][j] >> 24);
            }
    }
    #else
    #define KL_HAVE_MD5X4 0
    static void kl_md5x4(const unsigned char* const k[4], const size_t n[4], unsigned char* const out[4]) {}
    #endif
    """
    int KL_HAVE_MD5X4
    void __builtin_prefetch(const void* p) noexcept nogil
    void kl_md5x4(const unsigned char* const k[4], const size_t n[4], unsigned char* const out[4]) noexcept nogil


cdef bint _cl_x4 = False


def _cl_init_x4():
    """Enable the 4-lane MD5 when it is compiled in and agrees with hashlib."""
    global _cl_x4
    import hashlib
    cdef const unsigned char* k[4]
    cdef size_t n[4]
    cdef unsigned char* o[4]
    cdef int j
    if not KL_HAVE_MD5X4:
        return False
    keys = [b"", b"abc", b"k" * 55, bytes(range(40))]
    outs = [bytearray(16) for _ in range(4)]
    for j in range(4):
        k[j] = <const unsigned char*>PyBytes_AS_STRING(keys[j])
        n[j] = len(keys[j])
        o[j] = <unsigned char*>PyByteArray_AS_STRING(outs[j])
    kl_md5x4(k, n, o)
    _cl_x4 = all(bytes(outs[j]) == hashlib.md5(keys[j]).digest() for j in range(4))
    return _cl_x4


CLEANER_MD5_X4 = _cl_init_x4()


def offset_map_build_v2(bytearray table, int64_t slots, int64_t entries, int64_t max_entries, body,
                        Py_ssize_t count, int64_t base_offset, int64_t start_offset,
                        bytearray superseded, int64_t superseded_base):
    """See ``_kernel_py.offset_map_build_v2``."""
    cdef Py_buffer view
    cdef const unsigned char* p
    cdef unsigned char* t
    cdef unsigned char* bm = NULL
    cdef Py_ssize_t n, pos = 0, i = 0, g, j, nx
    cdef int64_t nbits = 0, rel
    cdef _ClRec r
    cdef _ClRec rr[4]
    cdef int64_t offs[4]
    cdef bint need[4]
    cdef unsigned char hs[4][16]
    cdef const unsigned char* kp[4]
    cdef size_t kn[4]
    cdef unsigned char* ho[4]
    cdef int lane[4]
    cdef unsigned char h[16]
    cdef int64_t off, old = -1, last = -1, read = 0
    if slots <= 0 or PyByteArray_GET_SIZE(table) < slots * 24 or max_entries > slots:
        raise ValueError("bad offset map arguments")
    if count < 0:
        raise InvalidRecordError(f"Invalid negative record count {count}", position=0)
    t = <unsigned char*>PyByteArray_AS_STRING(table)
    if superseded is not None:
        bm = <unsigned char*>PyByteArray_AS_STRING(superseded)
        nbits = <int64_t>PyByteArray_GET_SIZE(superseded) * 8
    PyObject_GetBuffer(body, &view, PyBUF_SIMPLE)
    try:
        p = <const unsigned char*>view.buf
        n = view.len
        while i < count:
            if _cl_x4 and count - i >= 4 and entries + 4 <= max_entries:
                # four records at a time: the map cannot fill up within the group
                g = 4
                nx = 0
                for j in range(4):
                    _cl_parse(p, n, &pos, i + j, count, &rr[j])
                    offs[j] = base_offset + rr[j].offset_delta
                    need[j] = rr[j].klen >= 0 and offs[j] >= start_offset
                    if need[j] and rr[j].klen <= 55:
                        lane[j] = nx
                        kp[nx] = p + rr[j].kstart
                        kn[nx] = <size_t>rr[j].klen
                        ho[nx] = hs[j]
                        nx += 1
                    else:
                        lane[j] = -1
                if nx >= 2:
                    for j in range(nx, 4):          # idle lanes hash the first key again
                        kp[j] = kp[0]
                        kn[j] = kn[0]
                        ho[j] = h
                    kl_md5x4(kp, kn, ho)
                else:
                    for j in range(4):
                        lane[j] = -1
                for j in range(4):
                    if need[j]:
                        if lane[j] < 0:
                            _cl_hash(p + rr[j].kstart, rr[j].klen, hs[j])
                        __builtin_prefetch(t + _cl_pos(hs[j], 0, slots))
                for j in range(4):
                    if need[j]:
                        if _cl_put_old(t, slots, hs[j], offs[j], &old):
                            entries += 1
                        elif bm != NULL:
                            rel = old - superseded_base
                            if 0 <= rel < nbits:
                                bm[rel >> 3] |= <unsigned char>(1 << (rel & 7))
                        last = offs[j]
                read += 4
                i += 4
                continue
            _cl_parse(p, n, &pos, i, count, &r)
            off = base_offset + r.offset_delta
            if r.klen >= 0 and off >= start_offset:
                if entries >= max_entries:
                    return entries, last, read, True
                _cl_hash(p + r.kstart, r.klen, h)
                if _cl_put_old(t, slots, h, off, &old):
                    entries += 1
                elif bm != NULL:
                    rel = old - superseded_base
                    if 0 <= rel < nbits:
                        bm[rel >> 3] |= <unsigned char>(1 << (rel & 7))
                last = off
            read += 1
            i += 1
        if pos != n:
            raise InvalidRecordError(f"Incorrect declared batch size, records still remaining in "
                                     f"file ({n - pos} bytes after {count} records)", position=pos)
    finally:
        PyBuffer_Release(&view)
    return entries, last, read, False


cdef object _cl_empty_batch(const unsigned char* b, int attrs, crc32c):
    cdef bytes out = PyBytes_FromStringAndSize(NULL, 61)
    cdef unsigned char* w = <unsigned char*>PyBytes_AS_STRING(out)
    memcpy(w, b, 61)
    _cl_wr_i(w + 8, 49)
    w[21] = 0
    w[22] = <unsigned char>(attrs & 0x38)
    _cl_wr_q(w + 27, -1)
    _cl_wr_i(w + 57, 0)
    _cl_wr_i(w + 17, <uint32_t>crc32c(memoryview(out)[21:]))
    return out


def offset_map_clean_v2(bytearray table, int64_t slots, bytearray superseded,
                        int64_t superseded_base, buf, Py_ssize_t position, Py_ssize_t size, body,
                        int64_t latest_offset, int64_t current_time, int64_t delete_retention_ms,
                        bint retain_empty, bint discard_records, bint marker_for_empty_txn, crc32c):
    """See ``_kernel_py.offset_map_clean_v2``."""
    cdef Py_buffer view
    cdef Py_buffer bview
    cdef bint have_body = False
    cdef const unsigned char* b
    cdef const unsigned char* p
    cdef const unsigned char* t
    cdef const unsigned char* bm = NULL
    cdef Py_ssize_t n, pos = 0, i, nkept = 0, out_size = 0, j, rl
    cdef int64_t nbits = 0, rel
    cdef _ClRec* recs = NULL
    cdef int64_t* tss = NULL
    cdef _ClRec r
    cdef unsigned char h[16]
    cdef int64_t base_offset, base_ts, hdr_max_ts, off, found, ts, nbase, max_ts = -1, max_off = -1
    cdef int64_t d, lat, latest, keyless = 0, tomb_dropped = 0
    cdef int32_t count
    cdef int attrs, new_attrs
    cdef bint keep, tomb_kept = False, is_control, has_horizon, retain_deletes, need_horizon
    cdef bytes out
    cdef unsigned char* w
    cdef unsigned char* w0
    cdef int dsz, hdr
    if slots <= 0 or PyByteArray_GET_SIZE(table) < slots * 24:
        raise ValueError("bad offset map arguments")
    t = <const unsigned char*>PyByteArray_AS_STRING(table)
    if superseded is not None:
        bm = <const unsigned char*>PyByteArray_AS_STRING(superseded)
        nbits = <int64_t>PyByteArray_GET_SIZE(superseded) * 8
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        if position < 0 or size < 61 or size > view.len - position:
            raise InvalidRecordError(f"Record batch is corrupt (size {size} at position "
                                     f"{position} in a buffer of {view.len} bytes)",
                                     position=position)
        b = <const unsigned char*>view.buf + position
        base_offset = _cl_rd_q(b)
        attrs = b[22]
        hdr_max_ts = _cl_rd_q(b + 35)
        base_ts = _cl_rd_q(b + 27)
        count = _cl_rd_i(b + 57)
        is_control = (attrs & 0x20) != 0
        has_horizon = (attrs & 0x40) != 0
        if (attrs & 0x07) != 0 and body is None:
            raise ValueError("a compressed batch needs its decompressed records")
        if count == 0 or discard_records:
            if retain_empty:
                return (3, _cl_empty_batch(b, attrs, crc32c), 0, 0, 0, hdr_max_ts,
                        base_offset + _cl_rd_i(b + 23), -1, attrs & 0x38)
            return 0, None, 0, 0, 0, -1, -1, -1, 0
        if count < 0:
            raise InvalidRecordError(f"Invalid negative record count {count}",
                                     position=position + 57)
        lat = hdr_max_ts if attrs & 0x08 else -1
        if is_control:
            latest = -1                         # control records are always retained
            retain_deletes = True
        else:
            latest = latest_offset
            retain_deletes = not has_horizon or current_time < base_ts
        if body is not None:
            PyObject_GetBuffer(body, &bview, PyBUF_SIMPLE)
            have_body = True
            p = <const unsigned char*>bview.buf
            n = bview.len
            hdr = 0
        else:
            p = b + 61
            n = size - 61
            hdr = 61
        try:
            if count > n // 7 + 1:
                raise InvalidRecordError(f"Found invalid record structure: expected {count} "
                                         f"records in {n} bytes", position=n)
            recs = <_ClRec*>malloc(sizeof(_ClRec) * (count + 1))
            tss = <int64_t*>malloc(sizeof(int64_t) * (count + 1))
            if recs == NULL or tss == NULL:
                raise MemoryError()
            for i in range(count):
                _cl_parse(p, n, &pos, i, count, &r)
                off = base_offset + r.offset_delta
                if off > latest:
                    keep = True
                elif r.klen < 0:
                    keyless += 1
                    keep = False
                else:
                    rel = off - superseded_base
                    if bm != NULL and 0 <= rel < nbits and (bm[rel >> 3] >> (rel & 7)) & 1:
                        keep = False            # a later record of the cleaned range has its key
                    else:
                        _cl_hash(p + r.kstart, r.klen, h)
                        found = _cl_get(t, slots, h)
                        keep = off >= found
                    keep = keep and (r.vlen >= 0 or retain_deletes)
                if keep:
                    if lat >= 0:
                        ts = lat
                    else:
                        ts = <int64_t>(<uint64_t>base_ts + <uint64_t>r.ts_delta)
                    recs[nkept] = r
                    tss[nkept] = ts
                    nkept += 1
                    if ts > max_ts:
                        max_ts = ts
                        max_off = off
                    if r.vlen < 0:
                        tomb_kept = True
                elif r.vlen < 0:
                    tomb_dropped += 1
            if pos != n:
                raise InvalidRecordError(f"Incorrect declared batch size, records still remaining "
                                         f"in file ({n - pos} bytes after {count} records)",
                                         position=pos)
        except InvalidRecordError as e:
            if e.position is not None:          # positions in ``buf`` (as if uncompressed)
                e.position += position + 61
            raise
        if nkept == 0:
            if retain_empty:
                return (3, _cl_empty_batch(b, attrs, crc32c), 0, keyless, tomb_dropped, hdr_max_ts,
                        base_offset + _cl_rd_i(b + 23), -1, attrs & 0x38)
            return 0, None, 0, keyless, tomb_dropped, -1, -1, -1, 0
        need_horizon = (tomb_kept or marker_for_empty_txn) and not has_horizon
        if nkept == count and not need_horizon:
            return (1, None, nkept, keyless, tomb_dropped, hdr_max_ts,
                    max_off if lat < 0 else base_offset, base_ts, attrs)
        if need_horizon:
            nbase = current_time + delete_retention_ms
        elif has_horizon:
            nbase = base_ts
        else:
            nbase = tss[0]
        new_attrs = (attrs & 0x3F) | (0x40 if (need_horizon or has_horizon) else 0)
        if lat >= 0:
            max_ts = lat
        for j in range(nkept):
            d = <int64_t>(<uint64_t>tss[j] - <uint64_t>nbase)
            dsz = _size_varlong(d)
            rl = 1 + dsz + (recs[j].rend - recs[j].after_ts)
            out_size += _size_varint(<int32_t>rl) + rl
        out = PyBytes_FromStringAndSize(NULL, hdr + out_size)
        w0 = <unsigned char*>PyBytes_AS_STRING(out)
        w = w0 + hdr
        for j in range(nkept):
            d = <int64_t>(<uint64_t>tss[j] - <uint64_t>nbase)
            dsz = _size_varlong(d)
            w = _wr_varint(w, <int32_t>(1 + dsz + (recs[j].rend - recs[j].after_ts)))
            w[0] = p[recs[j].ts_pos - 1]
            w += 1
            w = _wr_varlong(w, d)
            memcpy(w, p + recs[j].after_ts, recs[j].rend - recs[j].after_ts)
            w += recs[j].rend - recs[j].after_ts
        if have_body:
            return 4, out, nkept, keyless, tomb_dropped, max_ts, max_off, nbase, new_attrs
        memcpy(w0, b, 61)
        _cl_wr_i(w0 + 8, <uint32_t>(49 + out_size))
        w0[21] = 0
        w0[22] = <unsigned char>new_attrs
        _cl_wr_q(w0 + 27, nbase)
        _cl_wr_q(w0 + 35, max_ts)
        _cl_wr_i(w0 + 57, <uint32_t>nkept)
        _cl_wr_i(w0 + 17, <uint32_t>crc32c(memoryview(out)[21:]))
        return 2, out, nkept, keyless, tomb_dropped, max_ts, max_off, nbase, new_attrs
    finally:
        free(recs)
        free(tss)
        if have_body:
            PyBuffer_Release(&bview)
        PyBuffer_Release(&view)


# --------------------------------------------------------------------------------------------------
# Columnar encode and partitioning for the Spark writer (kafkalog.spark.writer). Pure-Python
# reference and API docs: ``_kernel_py.encode_columns_v2`` / ``_kernel_py.murmur2_partitions``.

cdef struct _BinCol:
    const unsigned char* validity
    const int32_t* offs
    const unsigned char* data
    Py_ssize_t base
    bint present


cdef int _bincol_open(object col, _BinCol* c, Py_buffer* bv, Py_buffer* bo, Py_buffer* bd,
                      int* held) except -1:
    """Fill ``c`` from ``(validity | None, offsets, data, array offset)``; ``held`` bit flags tell
    which buffers to release."""
    c.present = col is not None
    c.validity = NULL
    c.offs = NULL
    c.data = NULL
    c.base = 0
    if col is None:
        return 0
    validity, offs, data, base = col
    c.base = base
    if validity is not None:
        PyObject_GetBuffer(validity, bv, PyBUF_SIMPLE)
        held[0] |= 1
        c.validity = <const unsigned char*>bv.buf
    PyObject_GetBuffer(offs, bo, PyBUF_SIMPLE)
    held[0] |= 2
    c.offs = <const int32_t*>bo.buf
    if data is not None:
        PyObject_GetBuffer(data, bd, PyBUF_SIMPLE)
        held[0] |= 4
        c.data = <const unsigned char*>bd.buf
    return 0


cdef inline void _bincol_close(Py_buffer* bv, Py_buffer* bo, Py_buffer* bd, int held):
    if held & 1:
        PyBuffer_Release(bv)
    if held & 2:
        PyBuffer_Release(bo)
    if held & 4:
        PyBuffer_Release(bd)


cdef inline bint _bincol_get(_BinCol* c, Py_ssize_t i, const unsigned char** p, Py_ssize_t* n) noexcept nogil:
    """Row ``i``: False for null, else pointer and length."""
    cdef Py_ssize_t j
    if not c.present:
        return False
    j = c.base + i
    if c.validity != NULL and not ((c.validity[j >> 3] >> (j & 7)) & 1):
        return False
    p[0] = c.data + c.offs[j]
    n[0] = c.offs[j + 1] - c.offs[j]
    return True


def encode_columns_v2(rows, Py_ssize_t n, key, value, timestamps, default_timestamp, headers,
                      max_batch_bytes, out=None):
    """Encode ``n`` rows of Arrow columns as v2 record bodies split into producer-sized chunks;
    returns ``[(body, count, base_timestamp, max_timestamp)]`` (see ``_kernel_py``). With a
    ``bytearray`` ``out`` the bodies are written into it (grown as needed, never shrunk) and
    returned as memoryviews of it: no allocation per call once it has grown."""
    cdef _BinCol kc, vc
    cdef Py_buffer kbv, kbo, kbd, vbv, vbo, vbd, rv, tv, tvv
    cdef int kheld = 0, vheld = 0
    cdef bint have_rows = rows is not None, have_ts = timestamps is not None
    cdef bint rows_held = False, ts_held = False, tsv_held = False
    cdef const int64_t* rp = NULL
    cdef const int64_t* tp = NULL
    cdef const unsigned char* tvalid = NULL
    cdef Py_ssize_t ts_base = 0, i, r, j, klen = 0, vlen = 0, rec, body_len = 0, cap = 0, need
    cdef int64_t c_default = _as_int64(default_timestamp, "default_timestamp")
    cdef int64_t c_max = _as_int64(max_batch_bytes, "max_batch_bytes")
    cdef int64_t ts, us, base_ts = 0, max_ts = 0, tsd
    cdef int32_t count = 0, inner
    cdef const unsigned char* kp = NULL
    cdef const unsigned char* vp = NULL
    cdef bint has_k, has_v
    cdef unsigned char* buf = NULL
    cdef unsigned char* w
    cdef unsigned char* nb
    cdef bint want_headers = headers is not None
    cdef object hdrs, encoded
    cdef list chunks = []
    cdef Py_ssize_t start = 0, a
    cdef bint into = out is not None
    if into and not isinstance(out, bytearray):
        raise TypeError("out must be a bytearray")
    try:
        _bincol_open(key, &kc, &kbv, &kbo, &kbd, &kheld)
        _bincol_open(value, &vc, &vbv, &vbo, &vbd, &vheld)
        if have_rows:
            PyObject_GetBuffer(rows, &rv, PyBUF_SIMPLE)
            rows_held = True
            if rv.len < 8 * n:
                raise ValueError(f"rows buffer holds {rv.len // 8} indices, need {n}")
            rp = <const int64_t*>rv.buf
        if have_ts:
            tsvalid, tsdata, ts_base = timestamps
            if tsvalid is not None:
                PyObject_GetBuffer(tsvalid, &tvv, PyBUF_SIMPLE)
                tsv_held = True
                tvalid = <const unsigned char*>tvv.buf
            PyObject_GetBuffer(tsdata, &tv, PyBUF_SIMPLE)
            ts_held = True
            tp = <const int64_t*>tv.buf
        if into:
            cap = len(out)
            if cap < (1 << 16):
                cap = 1 << 16
                out[:] = b"\0" * cap
            buf = <unsigned char*>PyByteArray_AS_STRING(out)
        else:
            cap = 1 << 16
            buf = <unsigned char*>malloc(cap)
            if buf == NULL:
                raise MemoryError()
        for i in range(n):
            r = rp[i] if have_rows else i
            has_k = _bincol_get(&kc, r, &kp, &klen)
            has_v = _bincol_get(&vc, r, &vp, &vlen)
            ts = c_default
            if have_ts:
                j = ts_base + r
                if tvalid == NULL or ((tvalid[j >> 3] >> (j & 7)) & 1):
                    us = tp[j]
                    ts = us // 1000
                    if us % 1000 < 0:
                        ts -= 1
            hdrs = headers[r] if want_headers else None
            if count == 0:
                base_ts = ts
                max_ts = ts
            # size of the record at the current delta (recomputed below if a chunk ends)
            for _attempt in range(2):
                tsd = <int64_t>(<uint64_t>ts - <uint64_t>base_ts)
                if hdrs:
                    encoded = encode_records_v2(
                        [(None if not has_k else PyBytes_FromStringAndSize(<const char*>kp, klen),
                          None if not has_v else PyBytes_FromStringAndSize(<const char*>vp, vlen),
                          ts, hdrs)], base_ts, [count])
                    rec = PyBytes_GET_SIZE(encoded)
                else:
                    encoded = None
                    inner = 1 + _size_varlong(tsd) + _size_varint(count)
                    inner += (_size_varint(<int32_t>klen) + <int32_t>klen) if has_k else 1
                    inner += (_size_varint(<int32_t>vlen) + <int32_t>vlen) if has_v else 1
                    inner += 1
                    rec = _size_varint(inner) + inner
                if count and body_len + rec > c_max:
                    chunks.append((start, body_len, count, base_ts, max_ts))
                    start += body_len
                    body_len = 0
                    count = 0
                    base_ts = ts
                    max_ts = ts
                    continue
                break
            need = start + body_len + rec
            if need > cap:
                while cap < need:
                    cap *= 2
                if into:
                    if PyByteArray_Resize(out, cap) < 0:
                        raise MemoryError()
                    buf = <unsigned char*>PyByteArray_AS_STRING(out)
                else:
                    nb = <unsigned char*>realloc(buf, cap)
                    if nb == NULL:
                        raise MemoryError()
                    buf = nb
            w = buf + start + body_len
            if encoded is not None:
                memcpy(w, PyBytes_AS_STRING(encoded), rec)
            else:
                w = _wr_varint(w, inner)
                w[0] = 0
                w += 1
                w = _wr_varlong(w, tsd)
                w = _wr_varint(w, count)
                if has_k:
                    w = _wr_varint(w, <int32_t>klen)
                    memcpy(w, kp, klen)
                    w += klen
                else:
                    w = _wr_varint(w, -1)
                if has_v:
                    w = _wr_varint(w, <int32_t>vlen)
                    memcpy(w, vp, vlen)
                    w += vlen
                else:
                    w = _wr_varint(w, -1)
                w[0] = 0
            body_len = need - start
            count += 1
            if ts > max_ts:
                max_ts = ts
        if count:
            chunks.append((start, body_len, count, base_ts, max_ts))
        if into:
            view = memoryview(out)
            return [(view[a:a + m], c, b, x) for a, m, c, b, x in chunks]
        result = []
        for chunk in chunks:
            a = chunk[0]
            j = chunk[1]
            result.append((PyBytes_FromStringAndSize(<const char*>(buf + a), j),) + chunk[2:])
        return result
    finally:
        if not into:
            free(buf)
        _bincol_close(&kbv, &kbo, &kbd, kheld)
        _bincol_close(&vbv, &vbo, &vbd, vheld)
        if rows_held:
            PyBuffer_Release(&rv)
        if ts_held:
            PyBuffer_Release(&tv)
        if tsv_held:
            PyBuffer_Release(&tvv)


cdef inline uint32_t _murmur2_c(const unsigned char* d, Py_ssize_t length) noexcept nogil:
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
        return _murmur2_c(<const unsigned char*>PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data))
    PyObject_GetBuffer(data, &b, PyBUF_SIMPLE)
    h = _murmur2_c(<const unsigned char*>b.buf, b.len)
    PyBuffer_Release(&b)
    return h


def murmur2(data):
    """Kafka's ``Utils.murmur2`` of a bytes-like ``data`` as a signed Java int; see
    ``_kernel_py.murmur2``."""
    return <int32_t>_murmur2_obj(data)


def partition_for_key(key, Py_ssize_t num_partitions):
    """Kafka's default partitioner for a non-null key: ``toPositive(murmur2(key)) %
    num_partitions``; see ``_kernel_py.partition_for_key``."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    return <Py_ssize_t>(_murmur2_obj(key) & 0x7FFFFFFFU) % num_partitions


def partition_groups(parts, Py_ssize_t n, int num_partitions):
    """Rows grouped by partition (a stable counting sort); see ``_kernel_py.partition_groups``."""
    cdef Py_buffer pv
    cdef const int32_t* pp
    cdef int64_t* order
    cdef Py_ssize_t* pos
    cdef Py_ssize_t i
    cdef int32_t q
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be >= 1, got {num_partitions}")
    PyObject_GetBuffer(parts, &pv, PyBUF_SIMPLE)
    pos = <Py_ssize_t*>malloc((num_partitions + 1) * sizeof(Py_ssize_t))
    try:
        if pos == NULL:
            raise MemoryError()
        if pv.len < 4 * n:
            raise ValueError(f"parts buffer holds {pv.len // 4} partitions, need {n}")
        pp = <const int32_t*>pv.buf
        for i in range(num_partitions + 1):
            pos[i] = 0
        for i in range(n):
            q = pp[i]
            if q < 0 or q >= num_partitions:
                raise ValueError(f"row {i}: partition {q} is not in [0, {num_partitions})")
            pos[q + 1] += 1
        bounds = [0] * (num_partitions + 1)
        for i in range(num_partitions):
            pos[i + 1] += pos[i]
            bounds[i + 1] = pos[i + 1]
        result = PyBytes_FromStringAndSize(NULL, 8 * n)
        order = <int64_t*>PyBytes_AS_STRING(result)
        with nogil:
            for i in range(n):
                q = pp[i]
                order[pos[q]] = i
                pos[q] += 1
        return result, bounds
    finally:
        free(pos)
        PyBuffer_Release(&pv)


def murmur2_partitions(key, Py_ssize_t n, int num_partitions):
    """Kafka's keyed partitioner over a binary column (native int32 per row, -1 for null keys);
    see ``_kernel_py.murmur2_partitions``."""
    cdef _BinCol kc
    cdef Py_buffer bv, bo, bd
    cdef int held = 0
    cdef Py_ssize_t i, klen = 0
    cdef const unsigned char* kp = NULL
    cdef int32_t* w
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be >= 1, got {num_partitions}")
    result = PyBytes_FromStringAndSize(NULL, 4 * n)
    w = <int32_t*>PyBytes_AS_STRING(result)
    try:
        _bincol_open(key, &kc, &bv, &bo, &bd, &held)
        with nogil:
            for i in range(n):
                if _bincol_get(&kc, i, &kp, &klen):
                    w[i] = <int32_t>((_murmur2_c(kp, klen) & 0x7FFFFFFF) % <uint32_t>num_partitions)
                else:
                    w[i] = -1
        return result
    finally:
        _bincol_close(&bv, &bo, &bd, held)


# --- the producer's per-record path (kafkalog.client.producer) ------------------------------------
# A separate block. ``ProducerSendPath.send`` is ``Producer.send``'s common case in compiled code
# (an open batch of the topic's sticky or murmur2 partition takes the record: size check against
# the batch limit, encode, timestamp "now", the record's future); anything else goes to the
# producer's Python ``slow`` path with the same arguments.

cdef extern from "<time.h>" nogil:
    ctypedef long time_t
    cdef struct timespec:
        time_t tv_sec
        long tv_nsec
    int clock_gettime(int clk_id, timespec* tp)
    int CLOCK_REALTIME


cdef object _future_methods = None


def bind_record_future(methods):
    """Give :class:`RecordFuture` its Python-level attributes: ``methods.lookup(future, name)``
    returns the attribute ``name`` of ``future`` (kafkalog.client.producer_future does it)."""
    global _future_methods
    _future_methods = methods


@cython.final
@cython.no_gc
@cython.freelist(512)
cdef class RecordFuture:
    """The producer's per-record future: the batch result it points at (``produce_result``), the
    record's index in the batch, its timestamp and serialized key/value sizes (-1 for null). Its
    methods (``get``, ``add_callback`` ...) live in Python (:func:`bind_record_future`); the
    object itself is small, pooled and not tracked by the cyclic GC (it holds no container), so a
    million pending futures cost no GC scans."""
    cdef public object produce_result
    cdef public Py_ssize_t index
    cdef public int64_t timestamp
    cdef public Py_ssize_t key_size
    cdef public Py_ssize_t value_size

    def __getattr__(self, name):
        return _future_methods.lookup(self, name)

    def __repr__(self):
        return _future_methods.lookup(self, "_repr")()


@cython.final
cdef class ProducerBatch:
    """One open producer batch: ``ProducerBatch(result, cap, full)``.

    ``append(key, value, timestamp, headers)`` encodes one record (``timestamp`` None: now, in ms)
    and returns a new :class:`RecordFuture` pointing at ``result``;
    it returns False, appending nothing, when the record would take the record bytes past ``cap``,
    and None once :meth:`seal` was called. ``full`` is true once the record bytes reach ``full``
    (``batch.size``). ``seal()`` returns the record bodies and refuses further appends (a thread
    that lost the race for the batch sees None and starts a new one)."""
    cdef readonly RecordsEncoder encoder
    cdef readonly object result
    cdef readonly Py_ssize_t cap
    cdef readonly Py_ssize_t full_at
    cdef readonly bint sealed
    cdef readonly bint full

    def __cinit__(self, result, Py_ssize_t cap, Py_ssize_t full):
        self.encoder = RecordsEncoder()
        self.result = result
        self.cap = cap
        self.full_at = full
        self.sealed = False
        self.full = False

    def append(self, key, value, timestamp, headers):
        return self._append(key, value, timestamp, headers)

    cdef object _append(self, key, value, timestamp, headers):
        cdef RecordsEncoder e = self.encoder
        cdef int64_t ts
        cdef timespec now
        cdef Py_ssize_t size0, count0
        cdef int64_t max0, delta0, base0
        cdef bint has0
        cdef RecordFuture f
        if self.sealed:
            return None
        if timestamp is None:
            clock_gettime(CLOCK_REALTIME, &now)
            ts = <int64_t>now.tv_sec * 1000 + now.tv_nsec // 1000000
        else:
            ts = _as_int64(timestamp, "timestamp")
            if ts < -1:
                raise InvalidRecordError(f"Invalid negative timestamp {ts}")
        size0 = e._size
        count0 = e._count
        max0 = e._max_ts
        delta0 = e._last_delta
        base0 = e._base_ts
        has0 = e._has_base
        e._append(key, value, ts, headers, <int32_t>count0)
        if e._size > self.cap:                 # undo: the record goes to another batch
            e._size = size0
            e._count = count0
            e._max_ts = max0
            e._last_delta = delta0
            e._base_ts = base0
            e._has_base = has0
            return False
        if e._size >= self.full_at:
            self.full = True
        f = RecordFuture.__new__(RecordFuture)
        f.produce_result = self.result
        f.index = count0
        f.timestamp = ts
        f.key_size = -1 if key is None else PyBytes_GET_SIZE(key) if PyBytes_CheckExact(key) else len(key)
        f.value_size = (-1 if value is None else PyBytes_GET_SIZE(value) if PyBytes_CheckExact(value)
                        else len(value))
        return f

    def seal(self):
        """The record bodies; no append is accepted afterwards."""
        self.sealed = True
        return self.encoder.finish()

    @property
    def count(self):
        return self.encoder._count

    @property
    def size_in_bytes(self):
        return self.encoder._size


cdef class ProducerTopic:
    """A producer's open batches of one topic (``batches[partition]``: a ProducerBatch or None),
    its partition count, sticky partition, and whether keyed records use Kafka's murmur2
    partitioner (``keyed``). Subclassed by the producer's topic state."""
    cdef public list batches
    cdef public Py_ssize_t sticky
    cdef public Py_ssize_t num_partitions
    cdef public bint keyed

    def __init__(self, Py_ssize_t num_partitions, bint keyed):
        self.batches = [None] * num_partitions
        self.sticky = 0
        self.num_partitions = num_partitions
        self.keyed = keyed


@cython.final
cdef class ProducerSendPath:
    """``ProducerSendPath(topics, slow, full)``: ``send`` as ``Producer.send``. ``topics`` maps a
    topic to its :class:`ProducerTopic`; a record the open batch does not take at once goes to
    ``slow(topic, value, key, partition, timestamp_ms, headers, on_delivery)``; ``full(batch)`` is
    called after a record filled a batch."""
    cdef dict topics
    cdef object slow
    cdef object full

    def __cinit__(self, dict topics, slow, full):
        self.topics = topics
        self.slow = slow
        self.full = full

    def send(self, topic, value=None, key=None, *, partition=None, timestamp_ms=None, headers=None,
             on_delivery=None):
        cdef ProducerTopic st
        cdef ProducerBatch b
        cdef Py_ssize_t p
        o = self.topics.get(topic)
        if (o is not None and partition is None and headers is None and on_delivery is None
                and (value is None or PyBytes_CheckExact(value))):
            st = <ProducerTopic>o
            if key is None:
                p = st.sticky
            elif st.keyed and PyBytes_CheckExact(key):
                p = <Py_ssize_t>((_murmur2_obj(key) & 0x7FFFFFFFU) % st.num_partitions)
            else:
                p = -1
            if 0 <= p < len(st.batches):
                ob = st.batches[p]
                if ob is not None:
                    b = <ProducerBatch>ob
                    fut = b._append(key, value, timestamp_ms, None)
                    if fut:
                        if b.full:
                            self.full(b)
                        return fut
        return self.slow(topic, value, key, partition, timestamp_ms, headers, on_delivery)
