# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled Spark kernel (kafkalog.spark): v2 record bodies to Arrow column buffers and back, and
Kafka's keyed partitioner over a whole binary column.

Same API and behaviour as the pure-Python twin ``kafkalog.spark._kernel_py`` (API docs there);
``kafkalog.spark.kernel`` selects one of the two (all or nothing with the other layers' kernels).
Records are read and written with the shared inline readers/writers of
``kafkalog/record/_wire.pxd``; records with headers are encoded by the record codec's
``encode_records_v2``.
"""

from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from libc.stdlib cimport malloc, free, realloc
from libc.string cimport memcpy

from kafkalog.record._wire cimport (
    _check_consumed, _check_count,
    RecordHead, _as_int64, _murmur2, _rd_headers, _rd_record_head, _record_body_size, _size_varint,
    _wr_record_head)

from kafkalog.errors import InvalidRecordError
from kafkalog.record._kernel import encode_records_v2

IMPLEMENTATION = "cython"

__all__ = ["IMPLEMENTATION", "decode_columns_v2", "encode_columns_v2", "murmur2_partitions",
           "partition_groups"]


# --------------------------------------------------------------------------------------------------
# columnar decode for Arrow (kafkalog.spark.arrow_batches)

cdef extern from "Python.h":
    char* PyByteArray_AS_STRING(object ba)
    Py_ssize_t PyByteArray_GET_SIZE(object ba)
    int PyByteArray_Resize(object ba, Py_ssize_t size) except -1


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
    cdef int32_t length, offset_delta, klen, vlen
    cdef int64_t ts_delta, off, ts
    cdef int64_t c_base_offset = _as_int64(base_offset, "base_offset")
    cdef int64_t c_base_ts = _as_int64(base_timestamp, "base_timestamp")
    cdef int64_t c_lat = _as_int64(log_append_time, "log_append_time")
    cdef int64_t c_min = _as_int64(min_offset, "min_offset")
    cdef int64_t c_max = _as_int64(max_offset, "max_offset")
    cdef bint want_headers = headers is not None
    cdef object hdrs
    cdef RecordHead r
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
        _check_count(count, n, 0)
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
            _rd_record_head(p, n, pos, &r)
            rstart = r.rstart
            rend = r.rend
            length = r.length
            ts_delta = r.ts_delta
            offset_delta = r.offset_delta
            klen = r.klen
            kpos = r.kstart
            vlen = r.vlen
            vpos = r.vstart
            pos = r.hpos
            hdrs = _rd_headers(p, r.hpos, rend, &pos)
            if pos != rend:
                raise InvalidRecordError(
                    f"Invalid record size: expected to read {length} bytes in record payload, but "
                    f"instead read {pos - (rend - length)}", position=pos)
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
        _check_consumed(pos, n, count)
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
                    inner = <int32_t>_record_body_size(tsd, count, klen if has_k else -1,
                                                       vlen if has_v else -1, 1)
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
                w = _wr_record_head(w, inner, tsd, count, <const char*>kp, klen if has_k else -1,
                                    <const char*>vp, vlen if has_v else -1)
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
                    w[i] = <int32_t>((_murmur2(kp, klen) & 0x7FFFFFFF) % <uint32_t>num_partitions)
                else:
                    w[i] = -1
        return result
    finally:
        _bincol_close(&bv, &bo, &bd, held)