# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled cleaner kernel (kafkalog.cleaner; spec §4.11): the per-record loops of log compaction
over an offset map laid out like Kafka's SkimpyOffsetMap (flat table of 24-byte entries: 16-byte MD5
of the key + big-endian int64 offset; all-zero = empty).

Same API and results as the pure-Python twin ``kafkalog.cleaner._kernel_py`` (API docs there);
``kafkalog.cleaner.kernel`` selects one of the two (all or nothing with the other layers' kernels).
Records are parsed with the shared inline readers of ``kafkalog/record/_wire.pxd``. MD5 is
OpenSSL's one-shot ``MD5()`` from the libcrypto that Python's ``_hashlib`` already loaded (found
with ctypes at import; no link-time dependency); without it each key is hashed with
``hashlib.md5``.
"""

from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from libc.stdlib cimport malloc, free
from libc.string cimport memcpy, memcmp

from kafkalog.record._wire cimport (
    _check_consumed, _check_count,
    RecordHead, _rd_i32, _rd_i64, _rd_record_head, _size_varint, _size_varlong, _wr_i32, _wr_i64,
    _wr_varint, _wr_varlong)

from kafkalog.errors import InvalidRecordError

cdef extern from "Python.h":
    char* PyByteArray_AS_STRING(object ba)
    Py_ssize_t PyByteArray_GET_SIZE(object ba)

IMPLEMENTATION = "cython"

__all__ = ["IMPLEMENTATION", "CLEANER_MD5", "CLEANER_MD5_X4", "offset_map_put_hash",
           "offset_map_get_hash", "offset_map_put_v2", "offset_map_filter_v2",
           "offset_map_build_v2", "offset_map_clean_v2"]

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


cdef inline int64_t _cl_get(const unsigned char* t, int64_t slots, const unsigned char* h) noexcept nogil:
    cdef int64_t max_attempts = slots + 12
    cdef int64_t attempt = 0
    cdef Py_ssize_t pos
    while attempt < max_attempts:
        pos = _cl_pos(h, attempt, slots)
        if _cl_empty(t + pos):
            return -1
        if memcmp(t + pos, h, 16) == 0:
            return _rd_i64(t + pos + 16)
        attempt += 1
    return -1


ctypedef RecordHead _ClRec


cdef inline int _cl_parse(const unsigned char* p, Py_ssize_t n, Py_ssize_t* pos, Py_ssize_t i,
                          Py_ssize_t count, _ClRec* r) except -1:
    """Parse record ``i`` of ``count`` at ``pos`` (headers are skipped: the record end comes from
    its length) and move ``pos`` past it."""
    if pos[0] >= n:
        raise InvalidRecordError(f"Found invalid record structure: expected {count} records but "
                                 f"found only {i}", position=pos[0])
    _rd_record_head(p, n, pos[0], r)
    pos[0] = r.rend
    return 0


cdef struct _Kept:
    _ClRec* recs            # the retained records, in order
    int64_t* tss            # their timestamps
    Py_ssize_t n
    int64_t max_ts
    int64_t max_off
    int64_t keyless
    int64_t tomb_dropped
    bint tomb_kept


cdef inline int _kept_open(_Kept* k, Py_ssize_t count) except -1:
    k.recs = <_ClRec*>malloc(sizeof(_ClRec) * (count + 1))
    k.tss = <int64_t*>malloc(sizeof(int64_t) * (count + 1))
    k.n = 0
    k.max_ts = -1
    k.max_off = -1
    k.keyless = 0
    k.tomb_dropped = 0
    k.tomb_kept = False
    if k.recs == NULL or k.tss == NULL:
        raise MemoryError()
    return 0


cdef inline void _kept_close(_Kept* k) noexcept:
    free(k.recs)
    free(k.tss)
    k.recs = NULL
    k.tss = NULL


cdef inline void _kept_note(_Kept* k, _ClRec* r, bint keep, int64_t ts, int64_t off) noexcept nogil:
    """Count the record ``r`` (offset ``off``, timestamp ``ts``), retained or not."""
    if keep:
        k.recs[k.n] = r[0]
        k.tss[k.n] = ts
        k.n += 1
        if ts > k.max_ts:
            k.max_ts = ts
            k.max_off = off
        if r.vlen < 0:
            k.tomb_kept = True
    elif r.vlen < 0:
        k.tomb_dropped += 1


cdef inline Py_ssize_t _kept_size(_Kept* k, int64_t nbase) noexcept nogil:
    """Bytes of the retained records rewritten with timestamp deltas from ``nbase``."""
    cdef Py_ssize_t j, rl, size = 0
    for j in range(k.n):
        rl = 1 + _size_varlong(<int64_t>(<uint64_t>k.tss[j] - <uint64_t>nbase)) \
            + (k.recs[j].rend - k.recs[j].after_ts)
        size += _size_varint(<int32_t>rl) + rl
    return size


cdef inline unsigned char* _kept_write(unsigned char* w, const unsigned char* p, _Kept* k,
                                       int64_t nbase) noexcept nogil:
    """Write the retained records of ``p`` with timestamp deltas from ``nbase`` (attributes and
    everything after the timestamp delta copied as they are)."""
    cdef Py_ssize_t j, tail
    cdef int64_t d
    for j in range(k.n):
        d = <int64_t>(<uint64_t>k.tss[j] - <uint64_t>nbase)
        tail = k.recs[j].rend - k.recs[j].after_ts
        w = _wr_varint(w, <int32_t>(1 + _size_varlong(d) + tail))
        w[0] = p[k.recs[j].ts_pos - 1]
        w += 1
        w = _wr_varlong(w, d)
        memcpy(w, p + k.recs[j].after_ts, tail)
        w += tail
    return w


cdef inline int _cl_keep(const unsigned char* p, _ClRec* r, int64_t off, int64_t latest,
                         const unsigned char* t, int64_t slots, const unsigned char* bm,
                         int64_t nbits, int64_t superseded_base, bint retain_deletes,
                         _Kept* k) except -1:
    """1 when the record ``r`` at offset ``off`` is retained, else 0 (Kafka's
    ``shouldRetainRecord``): past ``latest`` always; keyless never (counted); superseded in the
    bitmap ``bm`` (may be NULL) never; else the latest of its key, a tombstone only while
    ``retain_deletes``."""
    cdef unsigned char h[16]
    cdef int64_t rel
    if off > latest:
        return 1
    if r.klen < 0:
        k.keyless += 1
        return 0
    rel = off - superseded_base
    if bm != NULL and 0 <= rel < nbits and (bm[rel >> 3] >> (rel & 7)) & 1:
        return 0                # a later record of the cleaned range has its key
    if r.vlen < 0 and not retain_deletes:
        return 0
    _cl_hash(p + r.kstart, r.klen, h)
    return off >= _cl_get(t, slots, h)


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
        _check_consumed(pos, n, count)
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
    cdef Py_ssize_t n, pos = 0, i
    cdef _Kept k
    cdef _ClRec r
    cdef unsigned char h[16]
    cdef int64_t off, ts, nbase
    cdef bint keep
    cdef bytes out
    if slots <= 0 or PyByteArray_GET_SIZE(table) < slots * 24:
        raise ValueError("bad offset map arguments")
    if count < 0:
        raise InvalidRecordError(f"Invalid negative record count {count}", position=0)
    t = <const unsigned char*>PyByteArray_AS_STRING(table)
    k.recs = NULL
    k.tss = NULL
    PyObject_GetBuffer(body, &view, PyBUF_SIMPLE)
    try:
        p = <const unsigned char*>view.buf
        n = view.len
        _check_count(count, n, 1)
        _kept_open(&k, count)
        for i in range(count):
            _cl_parse(p, n, &pos, i, count, &r)
            off = base_offset + r.offset_delta
            keep = _cl_keep(p, &r, off, latest_offset, t, slots, NULL, 0, 0, retain_deletes, &k)
            if log_append_time >= 0:
                ts = log_append_time
            else:
                ts = <int64_t>(<uint64_t>base_timestamp + <uint64_t>r.ts_delta)
            _kept_note(&k, &r, keep, ts, off)
        _check_consumed(pos, n, count)
        if k.n == 0:
            return None, 0, k.keyless, k.tomb_dropped, -1, -1, -1, False
        nbase = k.tss[0] if new_base_timestamp is None else <int64_t>new_base_timestamp
        if k.n == count and not always_encode:
            return None, count, k.keyless, k.tomb_dropped, nbase, k.max_ts, k.max_off, k.tomb_kept
        out = PyBytes_FromStringAndSize(NULL, _kept_size(&k, nbase))
        _kept_write(<unsigned char*>PyBytes_AS_STRING(out), p, &k, nbase)
        return out, k.n, k.keyless, k.tomb_dropped, nbase, k.max_ts, k.max_off, k.tomb_kept
    finally:
        _kept_close(&k)
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
            old[0] = _rd_i64(t + pos + 16)
            _wr_i64(t + pos + 16, offset)
            return 0
        attempt += 1
        pos = _cl_pos(h, attempt, slots)
    memcpy(t + pos, h, 16)
    _wr_i64(t + pos + 16, offset)
    old[0] = -1
    return 1


cdef inline int _cl_put(unsigned char* t, int64_t slots, const unsigned char* h, int64_t offset) noexcept nogil:
    """Put ``h -> offset``; 1 when a new entry was added, else 0."""
    cdef int64_t old
    return _cl_put_old(t, slots, h, offset, &old)


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
        _check_consumed(pos, n, count)
    finally:
        PyBuffer_Release(&view)
    return entries, last, read, False


cdef object _cl_empty_batch(const unsigned char* b, int attrs, crc32c):
    cdef bytes out = PyBytes_FromStringAndSize(NULL, 61)
    cdef unsigned char* w = <unsigned char*>PyBytes_AS_STRING(out)
    memcpy(w, b, 61)
    _wr_i32(w + 8, 49)
    w[21] = 0
    w[22] = <unsigned char>(attrs & 0x38)
    _wr_i64(w + 27, -1)
    _wr_i32(w + 57, 0)
    _wr_i32(w + 17, <uint32_t>crc32c(memoryview(out)[21:]))
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
    cdef Py_ssize_t n, pos = 0, i, out_size
    cdef int64_t nbits = 0, rel
    cdef _Kept k
    cdef _ClRec r
    cdef unsigned char h[16]
    cdef int64_t base_offset, base_ts, hdr_max_ts, off, ts, nbase, max_ts
    cdef int64_t lat, latest
    cdef int32_t count
    cdef int attrs, new_attrs
    cdef bint keep, is_control, has_horizon, retain_deletes, need_horizon
    cdef bytes out
    cdef unsigned char* w0
    cdef int hdr
    if slots <= 0 or PyByteArray_GET_SIZE(table) < slots * 24:
        raise ValueError("bad offset map arguments")
    t = <const unsigned char*>PyByteArray_AS_STRING(table)
    k.recs = NULL
    k.tss = NULL
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
        base_offset = _rd_i64(b)
        attrs = b[22]
        hdr_max_ts = _rd_i64(b + 35)
        base_ts = _rd_i64(b + 27)
        count = _rd_i32(b + 57)
        is_control = (attrs & 0x20) != 0
        has_horizon = (attrs & 0x40) != 0
        if (attrs & 0x07) != 0 and body is None:
            raise ValueError("a compressed batch needs its decompressed records")
        if count == 0 or discard_records:
            if retain_empty:
                return (3, _cl_empty_batch(b, attrs, crc32c), 0, 0, 0, hdr_max_ts,
                        base_offset + _rd_i32(b + 23), -1, attrs & 0x38)
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
            _check_count(count, n, 1)
            _kept_open(&k, count)
            for i in range(count):
                _cl_parse(p, n, &pos, i, count, &r)
                off = base_offset + r.offset_delta
                keep = _cl_keep(p, &r, off, latest, t, slots, bm, nbits, superseded_base,
                                retain_deletes, &k)
                ts = lat if lat >= 0 else <int64_t>(<uint64_t>base_ts + <uint64_t>r.ts_delta)
                _kept_note(&k, &r, keep, ts, off)
            _check_consumed(pos, n, count)
        except InvalidRecordError as e:
            if e.position is not None:          # positions in ``buf`` (as if uncompressed)
                e.position += position + 61
            raise
        if k.n == 0:
            if retain_empty:
                return (3, _cl_empty_batch(b, attrs, crc32c), 0, k.keyless, k.tomb_dropped,
                        hdr_max_ts, base_offset + _rd_i32(b + 23), -1, attrs & 0x38)
            return 0, None, 0, k.keyless, k.tomb_dropped, -1, -1, -1, 0
        need_horizon = (k.tomb_kept or marker_for_empty_txn) and not has_horizon
        if k.n == count and not need_horizon:
            return (1, None, k.n, k.keyless, k.tomb_dropped, hdr_max_ts,
                    k.max_off if lat < 0 else base_offset, base_ts, attrs)
        if need_horizon:
            nbase = current_time + delete_retention_ms
        elif has_horizon:
            nbase = base_ts
        else:
            nbase = k.tss[0]
        new_attrs = (attrs & 0x3F) | (0x40 if (need_horizon or has_horizon) else 0)
        max_ts = lat if lat >= 0 else k.max_ts
        out_size = _kept_size(&k, nbase)
        out = PyBytes_FromStringAndSize(NULL, hdr + out_size)
        w0 = <unsigned char*>PyBytes_AS_STRING(out)
        _kept_write(w0 + hdr, p, &k, nbase)
        if have_body:
            return 4, out, k.n, k.keyless, k.tomb_dropped, max_ts, k.max_off, nbase, new_attrs
        memcpy(w0, b, 61)
        _wr_i32(w0 + 8, <uint32_t>(49 + out_size))
        w0[21] = 0
        w0[22] = <unsigned char>new_attrs
        _wr_i64(w0 + 27, nbase)
        _wr_i64(w0 + 35, max_ts)
        _wr_i32(w0 + 57, <uint32_t>k.n)
        _wr_i32(w0 + 17, <uint32_t>crc32c(memoryview(out)[21:]))
        return 2, out, k.n, k.keyless, k.tomb_dropped, max_ts, k.max_off, nbase, new_attrs
    finally:
        _kept_close(&k)
        if have_body:
            PyBuffer_Release(&bview)
        PyBuffer_Release(&view)

