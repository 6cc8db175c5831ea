# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled record codec kernel: the per-record hot loops of v2 records (spec §1.1, §1.6).

Same API and behaviour as the pure-Python twin ``kafkalog.record._kernel_py`` (see docs/design.md
"Kernels"); ``kafkalog.record.kernel`` selects one of the two for the whole process. The wire
primitives (varints, big-endian integers, the fixed part of a record, murmur2) are the inline
readers and writers of ``_wire.pxd``, shared with the cleaner's and Spark's kernels.

* ``decode_records_v2`` walks the record bodies of one batch with C pointers, creating only the
  ``Record`` objects and their key/value/header ``bytes``.
* ``RecordsEncoder`` appends records into one growing buffer; ``encode_records_v2`` is a loop of
  its appends.
* ``murmur2`` / ``partition_for_key``: Kafka's default partitioner for one key.
"""

from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING, PyBytes_GET_SIZE, PyBytes_CheckExact
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.tuple cimport PyTuple_CheckExact, PyTuple_GET_SIZE
from cpython.unicode cimport PyUnicode_Check, PyUnicode_DecodeUTF8
from cpython.ref cimport PyObject, Py_INCREF
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from libc.stdlib cimport free, realloc
from libc.string cimport memcpy

cimport cython

from kafkalog.record._wire cimport (
    _check_consumed, _check_count,
    INT32_MAX, RecordHead, _as_int32, _as_int64, _invalid_record, _murmur2, _next_sequence,
    _rd_headers, _rd_record_head, _rd_varint, _rd_varlong, _record_body_size, _size_varint, _varint_error,
    _wr_record_head, _wr_varint, _wr_varlong)

from kafkalog.errors import InvalidRecordError

cdef extern from "Python.h":
    PyObject* PyTuple_GET_ITEM(object t, Py_ssize_t i)

cdef extern from *:
    void __builtin_prefetch(const void* p) noexcept nogil

IMPLEMENTATION = "cython"

__all__ = ["IMPLEMENTATION", "ConsumerRecord", "Record", "RecordsEncoder", "decode_consumer_records", "encode_records_v2", "decode_records_v2",
           "read_varint", "read_varlong", "write_varint", "write_varlong", "murmur2",
           "partition_for_key"]


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
    int READONLY

cdef extern from "Python.h":
    ctypedef struct PyTypeObject:
        PyObject* tp_dict
    object PyDescr_NewMember(PyTypeObject* type, PyMemberDef* meth)
    void PyType_Modified(PyTypeObject* type)

cdef PyMemberDef _record_members[2]


cdef Py_ssize_t _field_offset(object probe, object sentinel) except -1:
    """Byte offset of the object field of ``probe`` that currently holds ``sentinel``."""
    cdef char* base = <char*><PyObject*>probe
    cdef Py_ssize_t off
    cdef Py_ssize_t size = type(probe).__basicsize__
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

cdef inline object _rd_record(const unsigned char* p, Py_ssize_t n, Py_ssize_t* pos, RecordHead* r,
                              Py_ssize_t i, Py_ssize_t count):
    """Record ``i`` of ``count`` at ``pos[0]``: its fixed part into ``r``, its headers returned (None
    without headers); ``pos[0]`` moves past it. Raises ``InvalidRecordError`` positioned in ``p``."""
    cdef object headers
    if pos[0] >= n:
        raise InvalidRecordError(
            f"Found invalid record structure: expected {count} records but found only {i}",
            position=pos[0])
    _rd_record_head(p, n, pos[0], r)
    if r.rend + 1024 < n:
        __builtin_prefetch(p + r.rend + 1024)    # the records ahead (a stream from RAM)
    if r.hpos + 1 == r.rend and p[r.hpos] == 0:   # no headers: the common case
        pos[0] = r.rend
        return None
    headers = _rd_headers(p, r.hpos, r.rend, pos)
    if pos[0] != r.rend:
        raise InvalidRecordError(
            f"Invalid record size: expected to read {r.length} bytes in record "
            f"payload, but instead read {pos[0] - (r.rend - r.length)}", position=pos[0])
    return headers

def decode_records_v2(body, Py_ssize_t count, base_offset, base_timestamp, base_sequence,
                      log_append_time):
    """Decode ``count`` v2 records from ``body`` (the uncompressed records of one batch).

    Returns a list of :class:`Record`. ``log_append_time >= 0`` replaces every record's timestamp.
    Raises :class:`InvalidRecordError` (``position`` relative to the start of ``body``) on any
    structural problem and when ``count`` disagrees with the data.
    """
    cdef Py_buffer view
    cdef const unsigned char* p
    cdef Py_ssize_t n, pos = 0, i
    cdef int64_t c_base_offset = _as_int64(base_offset, "base_offset")
    cdef int64_t c_base_ts = _as_int64(base_timestamp, "base_timestamp")
    cdef int64_t c_lat = _as_int64(log_append_time, "log_append_time")
    cdef int32_t c_base_seq = _as_int32(base_sequence, "base_sequence")
    cdef RecordHead r
    cdef Record rec
    cdef list out
    cdef object headers
    if count < 0:
        raise InvalidRecordError(f"Invalid negative record count {count}", position=0)
    PyObject_GetBuffer(body, &view, PyBUF_SIMPLE)
    try:
        p = <const unsigned char*>view.buf
        n = view.len
        _check_count(count, n, 0)
        out = PyList_New(count)
        for i in range(count):
            headers = _rd_record(p, n, &pos, &r, i, count)
            rec = Record.__new__(Record)
            rec.offset = c_base_offset + r.offset_delta
            rec.timestamp = c_lat if c_lat >= 0 else <int64_t>(<uint64_t>c_base_ts + <uint64_t>r.ts_delta)
            rec.key = (PyBytes_FromStringAndSize(<const char*>(p + r.kstart), r.klen)
                       if r.klen >= 0 else None)
            rec.value = (PyBytes_FromStringAndSize(<const char*>(p + r.vstart), r.vlen)
                         if r.vlen >= 0 else None)
            rec._headers = headers
            rec.sequence = _next_sequence(c_base_seq, r.offset_delta)
            rec.size_in_bytes = r.rend - r.rstart
            Py_INCREF(rec)
            PyList_SET_ITEM(out, i, rec)
        _check_consumed(pos, n, count)
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


cdef Py_ssize_t _headers_size(list hlist):
    """Bytes of the header section of normalised headers (1 for None: a zero count)."""
    cdef Py_ssize_t size, hklen
    if hlist is None:
        return 1
    size = _size_varint(<int32_t>len(hlist))
    for hk, hv in hlist:
        hklen = PyBytes_GET_SIZE(hk)
        size += _size_varint(<int32_t>hklen) + hklen
        size += 1 if hv is None else _size_varint(<int32_t>PyBytes_GET_SIZE(hv)) + PyBytes_GET_SIZE(hv)
    return size


cdef unsigned char* _wr_headers(unsigned char* w, list hlist):
    cdef Py_ssize_t hklen, hvlen
    if hlist is None:
        w[0] = 0
        return w + 1
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
    return w


def encode_records_v2(records, base_timestamp, offset_deltas=None):
    """Encode ``records`` (sequence of ``(key, value, timestamp, headers)``) as v2 record bodies.

    Offset delta ``i`` (or ``offset_deltas[i]``); timestamp deltas relative to ``base_timestamp``.
    Returns the concatenated, uncompressed record bytes (one :class:`RecordsEncoder` append per
    record).
    """
    cdef Py_ssize_t n, i
    cdef RecordsEncoder enc
    cdef object rec, key, value, ts, headers
    cdef int32_t od
    if not isinstance(records, (list, tuple)):
        records = list(records)
    n = len(records)
    if offset_deltas is not None and len(offset_deltas) != n:
        raise InvalidRecordError(f"{len(offset_deltas)} offset deltas for {n} records")
    if n == 0:
        return b""
    enc = RecordsEncoder(base_timestamp)
    for i in range(n):
        rec = records[i]
        if PyTuple_CheckExact(rec) and PyTuple_GET_SIZE(rec) == 4:
            key = <object>PyTuple_GET_ITEM(rec, 0)
            value = <object>PyTuple_GET_ITEM(rec, 1)
            ts = <object>PyTuple_GET_ITEM(rec, 2)
            headers = <object>PyTuple_GET_ITEM(rec, 3)
        else:
            key, value, ts, headers = rec
        od = <int32_t>i if offset_deltas is None else _as_int32(offset_deltas[i], "offset delta")
        enc._append(key, value, _as_int64(ts, "timestamp"), headers, od)
    return enc.finish()


# --------------------------------------------------------------------------------------------------
# incremental encoder (the builder's per-record append)

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
        cdef Py_ssize_t klen = -1, vlen = -1, body, total
        cdef const char* kp = NULL
        cdef const char* vp = NULL
        cdef list hlist = None
        cdef unsigned char* w
        if key is not None:
            if not PyBytes_CheckExact(key):
                key = _as_bytes_like(key)
            kp = PyBytes_AS_STRING(key)
            klen = PyBytes_GET_SIZE(key)
        if value is not None:
            if not PyBytes_CheckExact(value):
                value = _as_bytes_like(value)
            vp = PyBytes_AS_STRING(value)
            vlen = PyBytes_GET_SIZE(value)
        if headers is not None and len(headers) > 0:
            hlist = _normalise_headers(headers)
        if not self._has_base:
            self._base_ts = ts
            self._has_base = True
        ts_delta = <int64_t>(<uint64_t>ts - <uint64_t>self._base_ts)
        body = _record_body_size(ts_delta, od, klen, vlen, _headers_size(hlist))
        if body > INT32_MAX:
            raise InvalidRecordError(f"record is too large to encode ({body} bytes)")
        total = _size_varint(<int32_t>body) + body
        self._reserve(total)
        w = _wr_record_head(self._buf + self._size, body, ts_delta, od, kp, klen, vp, vlen)
        _wr_headers(w, hlist)
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
# Kafka's default partitioner for one key (kafkalog.client.partitioner)

cdef inline uint32_t _murmur2_obj(object data) except? 0xFFFFFFFF:
    cdef Py_buffer b
    cdef uint32_t h
    if PyBytes_CheckExact(data):
        return _murmur2(<const unsigned char*>PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data))
    PyObject_GetBuffer(data, &b, PyBUF_SIMPLE)
    h = _murmur2(<const unsigned char*>b.buf, b.len)
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


# --------------------------------------------------------------------------------------------------
# consumer records: a batch decoded straight into the consumer's records

cdef extern from "Python.h":
    void PyObject_GC_UnTrack(PyObject* o)
    void PyObject_GC_Track(PyObject* o)
    int PyObject_GC_IsTracked(PyObject* o)
    void Py_SET_SIZE(object o, Py_ssize_t n)

_CONSUMER_RECORD_FIELDS = ("topic", "partition", "leader_epoch", "offset", "timestamp", "timestamp_type",
                           "key", "value", "headers")


# The free list holds a whole fetch buffer (max.partition.fetch.bytes, 1 MiB, is ~8,000 records of
# 100 bytes; ~1.7 MB at most is kept): records taken from it and returned to it do not count as
# allocations for the cyclic GC's generation-0 threshold, so decoding a fetch does not trigger a
# collection every 700 records (each traversing the young fetch lists).
@cython.final
cdef class _RecordSource:
    """The fields the records of one batch share: topic, partition, leader epoch, timestamp type."""
    cdef object topic, partition, leader_epoch, timestamp_type


cdef _RecordSource _record_source(topic, partition, leader_epoch, timestamp_type):
    cdef _RecordSource s = _RecordSource.__new__(_RecordSource)
    s.topic = topic
    s.partition = partition
    s.leader_epoch = leader_epoch
    s.timestamp_type = timestamp_type
    return s


@cython.freelist(16384)
@cython.final
cdef class ConsumerRecord:
    """One record as the consumer returns it: kafka-python's ``ConsumerRecord`` fields and the
    behaviour of its 9-field named tuple (``topic, partition, leader_epoch, offset, timestamp,
    timestamp_type, key, value, headers``): attributes, read-only; indexing, slicing, ``len``,
    iteration and unpacking; comparison with another record or a tuple as the tuple of the 9
    fields; ``_fields``, ``_asdict()``, ``_replace(**fields)``, ``_make(iterable)``. ``checksum``
    (None: v2 batches checksum whole batches) and ``serialized_key_size`` /
    ``serialized_value_size`` / ``serialized_header_size`` (-1 for a null key/value/no headers) are
    computed when read.

    ``offset`` and ``timestamp`` are held as C int64; topic, partition, leader epoch and timestamp type
    in one object shared by the records of a batch; ``headers`` is created on first access when the
    record has none. A decoded record without headers holds only ``str``/``int``/``bytes``/``None``
    and is not tracked by the cyclic garbage collector until its headers list exists.
    """
    cdef _RecordSource _src
    cdef int64_t _offset
    cdef int64_t _timestamp
    cdef readonly object key
    cdef readonly object value
    cdef object _headers

    _fields = _CONSUMER_RECORD_FIELDS

    def __init__(self, topic, partition, leader_epoch, offset, timestamp, timestamp_type, key, value,
                 headers=None):
        self._src = _record_source(topic, partition, leader_epoch, timestamp_type)
        self._offset = _as_int64(offset, "offset")
        self._timestamp = _as_int64(timestamp, "timestamp")
        self.key = key
        self.value = value
        self._headers = headers

    @classmethod
    def _make(cls, iterable):
        return cls(*iterable)

    @property
    def topic(self):
        return self._src.topic

    @property
    def partition(self):
        return self._src.partition

    @property
    def leader_epoch(self):
        return self._src.leader_epoch

    @property
    def timestamp_type(self):
        return self._src.timestamp_type

    @property
    def offset(self):
        return self._offset

    @property
    def timestamp(self):
        return self._timestamp

    @property
    def headers(self):
        if self._headers is None:
            self._headers = []
            if not PyObject_GC_IsTracked(<PyObject*>self):    # a list can reach back: tracked now
                PyObject_GC_Track(<PyObject*>self)
        return self._headers

    @property
    def checksum(self):
        return None

    @property
    def serialized_key_size(self):
        return -1 if self.key is None else len(self.key)

    @property
    def serialized_value_size(self):
        return -1 if self.value is None else len(self.value)

    @property
    def serialized_header_size(self):
        if not self._headers:
            return -1
        return sum(len(k.encode("utf-8")) + (0 if v is None else len(v)) for k, v in self._headers)

    cdef tuple _tuple(self):
        cdef _RecordSource s = self._src
        return (s.topic, s.partition, s.leader_epoch, self._offset, self._timestamp,
                s.timestamp_type, self.key, self.value, self.headers)

    def __len__(self):
        return 9

    def __getitem__(self, i):
        return self._tuple()[i]          # the tuple's indexing: ints, negative ints, slices

    def __iter__(self):
        return iter(self._tuple())

    def __contains__(self, item):
        return item in self._tuple()

    def __richcmp__(self, other, int op):
        if isinstance(other, ConsumerRecord):
            return PyObject_RichCompare(self._tuple(), (<ConsumerRecord>other)._tuple(), op)
        if isinstance(other, tuple):
            return PyObject_RichCompare(self._tuple(), other, op)
        return NotImplemented

    __hash__ = None

    def __reduce__(self):
        return (ConsumerRecord, self._tuple())

    def __repr__(self):
        return (f"ConsumerRecord(topic={self.topic!r}, partition={self.partition!r}, "
                f"leader_epoch={self.leader_epoch!r}, offset={self._offset!r}, "
                f"timestamp={self._timestamp!r}, timestamp_type={self.timestamp_type!r}, "
                f"key={self.key!r}, value={self.value!r}, headers={self.headers!r})")

    def _asdict(self):
        return dict(zip(_CONSUMER_RECORD_FIELDS, self._tuple()))

    def _replace(self, **fields):
        """A new record with ``fields`` replaced (``key=``/``value=`` after deserialisation)."""
        cdef ConsumerRecord r = ConsumerRecord.__new__(ConsumerRecord)
        cdef _RecordSource s = self._src
        if "topic" in fields or "partition" in fields or "leader_epoch" in fields or "timestamp_type" in fields:
            s = _record_source(fields.pop("topic", s.topic), fields.pop("partition", s.partition),
                               fields.pop("leader_epoch", s.leader_epoch),
                               fields.pop("timestamp_type", s.timestamp_type))
        r._src = s
        r._offset = _as_int64(fields.pop("offset"), "offset") if "offset" in fields else self._offset
        r._timestamp = (_as_int64(fields.pop("timestamp"), "timestamp") if "timestamp" in fields
                        else self._timestamp)
        r.key = fields.pop("key", self.key)
        r.value = fields.pop("value", self.value)
        r._headers = fields.pop("headers", self._headers)
        if fields:
            raise ValueError(f"Got unexpected field names: {list(fields)!r}")
        return r


cdef extern from "Python.h":
    object PyObject_RichCompare(object a, object b, int op)

cdef PyMemberDef _consumer_record_members[2]


cdef void _install_consumer_record_members() except *:
    """``key`` and ``value`` as read-only member descriptors (specialised attribute loads, as for
    :class:`Record`)."""
    cdef ConsumerRecord probe = ConsumerRecord.__new__(ConsumerRecord)
    cdef list sentinels = [object(), object()]
    probe.key, probe.value = sentinels[0], sentinels[1]
    cdef dict tp_dict = <dict>(<PyTypeObject*>ConsumerRecord).tp_dict
    cdef int i
    for i, name in enumerate((b"key", b"value")):
        _consumer_record_members[i].name = <const char*>name     # bytes constants of the module: live
        _consumer_record_members[i].type = T_OBJECT_EX
        _consumer_record_members[i].offset = _field_offset(probe, sentinels[i])
        _consumer_record_members[i].flags = READONLY
        _consumer_record_members[i].doc = NULL
        tp_dict[name.decode()] = PyDescr_NewMember(<PyTypeObject*>ConsumerRecord, &_consumer_record_members[i])
    PyType_Modified(<PyTypeObject*>ConsumerRecord)


_install_consumer_record_members()


def decode_consumer_records(body, Py_ssize_t count, base_offset, base_timestamp, log_append_time,
                            topic, partition, leader_epoch, timestamp_type, start, end):
    """Decode ``count`` v2 records from ``body`` (the uncompressed records of one batch) straight
    into :class:`ConsumerRecord`s, keeping the records whose offset is in ``[start, end)``.

    Checks the records as :func:`decode_records_v2` does (same errors, positions relative to
    ``body``). A record without headers is not tracked by the cyclic garbage collector (see
    :class:`ConsumerRecord`).
    """
    cdef Py_buffer view
    cdef const unsigned char* p
    cdef Py_ssize_t n, pos = 0, i
    cdef int64_t c_base_offset = _as_int64(base_offset, "base_offset")
    cdef int64_t c_base_ts = _as_int64(base_timestamp, "base_timestamp")
    cdef int64_t c_lat = _as_int64(log_append_time, "log_append_time")
    cdef int64_t c_start = _as_int64(start, "start")
    cdef int64_t c_end = _as_int64(end, "end")
    cdef int64_t off
    cdef Py_ssize_t kept = 0
    cdef RecordHead r
    cdef list out
    cdef object headers
    cdef ConsumerRecord rec
    cdef _RecordSource src = _record_source(topic, partition, leader_epoch, timestamp_type)
    if count < 0:
        raise InvalidRecordError(f"Invalid negative record count {count}", position=0)
    PyObject_GetBuffer(body, &view, PyBUF_SIMPLE)
    try:
        p = <const unsigned char*>view.buf
        n = view.len
        _check_count(count, n, 0)
        out = PyList_New(count)
        for i in range(count):
            headers = _rd_record(p, n, &pos, &r, i, count)
            off = c_base_offset + r.offset_delta
            if off < c_start or off >= c_end:
                continue
            rec = ConsumerRecord.__new__(ConsumerRecord)
            rec._src = src
            rec._offset = off
            rec._timestamp = c_lat if c_lat >= 0 else <int64_t>(<uint64_t>c_base_ts + <uint64_t>r.ts_delta)
            if r.klen >= 0:
                rec.key = PyBytes_FromStringAndSize(<const char*>(p + r.kstart), r.klen)
            if r.vlen >= 0:
                rec.value = PyBytes_FromStringAndSize(<const char*>(p + r.vstart), r.vlen)
            if headers is None:
                PyObject_GC_UnTrack(<PyObject*>rec)
            else:
                rec._headers = headers
            Py_INCREF(rec)
            PyList_SET_ITEM(out, kept, rec)
            kept += 1
        _check_consumed(pos, n, count)
        Py_SET_SIZE(out, kept)      # the slots after ``kept`` are still NULL: the offsets filtered out
        return out
    finally:
        PyBuffer_Release(&view)
