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
    INT32_MAX, RecordHead, _as_int32, _as_int64, _invalid_record, _murmur2_obj, _next_sequence,
    _rd_record, _rd_varint, _rd_varlong, _record_body_size, _size_varint, _varint_error,
    _wr_record_head, _wr_varint, _wr_varlong)

from kafkalog.errors import InvalidRecordError

cdef extern from "Python.h":
    PyObject* PyTuple_GET_ITEM(object t, Py_ssize_t i)

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


# ``key`` and ``value`` as member descriptors (see _slots.pxd)
from kafkalog.record._slots cimport (
    T_OBJECT_EX, PyDescr_NewMember, PyMemberDef, PyType_Modified, PyTypeObject, _field_offset)

cdef PyMemberDef _record_members[2]


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
    # (the fields are declared in _kernel.pxd, for the client kernel)

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
