# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled batch-header walker (spec §1.2, §1.10); the pure-Python twin is ``_header_walk_py``.

One C loop over the entries of a buffer (bytes, bytearray, mmap, memoryview): entry prefix, the v2
header fields, CRC-32C of v2 batches (hardware CRC for small batches, the ``crc32c`` package's
function for large ones), CRC-32 of v0/v1 entries (``zlib.crc32``), optional offset checks. The
facts of every batch go into one ``bytearray`` of int64 rows (``NF`` fields per batch, see
``header_walk.F_*``); the walk stops at the first finding. ``kafkalog.record.header_walk`` wraps
the result. Derived fields follow Java's long arithmetic (``baseOffset + lastOffsetDelta`` wraps).
"""

from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_FromStringAndSize, PyByteArray_Resize
from libc.stdint cimport int16_t, int32_t, int64_t, uint32_t, uint64_t, uint8_t
from libc.string cimport memset

from kafkalog.record._wire cimport INT32_MAX

IMPLEMENTATION = "cython"

cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    static uint32_t hw_crc_table[8][256];
    static int hw_crc_ready = 0;
    static int hw_crc_sse42 = 0;
    static void hw_crc_init(void) {
        for (uint32_t n = 0; n < 256; n++) {
            uint32_t c = n;
            for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
            hw_crc_table[0][n] = c;
        }
        for (uint32_t n = 0; n < 256; n++) {
            uint32_t c = hw_crc_table[0][n];
            for (int k = 1; k < 8; k++) { c = hw_crc_table[0][c & 0xff] ^ (c >> 8); hw_crc_table[k][n] = c; }
        }
    #if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
        __builtin_cpu_init();
        hw_crc_sse42 = __builtin_cpu_supports("sse4.2");
    #endif
        hw_crc_ready = 1;
    }
    #if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __attribute__((target("sse4.2")))
    static uint32_t hw_crc_sse(const unsigned char* p, size_t n) {
        uint64_t c = 0xFFFFFFFFu;
        while (n >= 8) { uint64_t v; memcpy(&v, p, 8); c = __builtin_ia32_crc32di(c, v); p += 8; n -= 8; }
        uint32_t c32 = (uint32_t)c;
        while (n--) c32 = __builtin_ia32_crc32qi(c32, *p++);
        return c32 ^ 0xFFFFFFFFu;
    }
    #endif
    static uint32_t hw_crc_soft(const unsigned char* p, size_t n) {
        uint32_t c = 0xFFFFFFFFu;
        while (n >= 8) {
            uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
            c = hw_crc_table[7][lo & 0xff] ^ hw_crc_table[6][(lo >> 8) & 0xff] ^ hw_crc_table[5][(lo >> 16) & 0xff]
              ^ hw_crc_table[4][lo >> 24] ^ hw_crc_table[3][p[4]] ^ hw_crc_table[2][p[5]]
              ^ hw_crc_table[1][p[6]] ^ hw_crc_table[0][p[7]];
            p += 8; n -= 8;
        }
        while (n--) c = hw_crc_table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
        return c ^ 0xFFFFFFFFu;
    }
    static uint32_t hw_crc32c(const unsigned char* p, size_t n) {
        if (!hw_crc_ready) hw_crc_init();
    #if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
        if (hw_crc_sse42) return hw_crc_sse(p, n);
    #endif
        return hw_crc_soft(p, n);
    }
    static int hw_all_zero(const unsigned char* p, size_t n) {
        while (n >= 8) { uint64_t v; memcpy(&v, p, 8); if (v) return 0; p += 8; n -= 8; }
        while (n--) if (*p++) return 0;
        return 1;
    }
    static inline int64_t hw_wrap_add(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }
    """
    uint32_t hw_crc32c(const unsigned char* p, size_t n) nogil
    int hw_all_zero(const unsigned char* p, size_t n) nogil
    int64_t hw_wrap_add(int64_t a, int64_t b) nogil

cdef enum:
    NF = 16
    STOP_NONE = 0
    STOP_SHORT_TAIL = 1
    STOP_PARTIAL = 2
    STOP_BAD_SIZE = 3
    STOP_BAD_MAGIC = 4
    STOP_SMALL_BATCH = 5
    STOP_CRC = 6
    STOP_OVERLAP = 7
    STOP_RANGE = 8
    STOP_TOO_LARGE = 9
    STOP_NEED_MORE = 10      # the buffer ends before the header (or, with CRCs, the entry) does
    BIG_CRC = 16384          # above this, the crc32c package's interleaved CRC is faster



cdef inline int64_t _q(const unsigned char* p) noexcept nogil:
    return <int64_t>((<uint64_t>p[0] << 56) | (<uint64_t>p[1] << 48) | (<uint64_t>p[2] << 40)
                     | (<uint64_t>p[3] << 32) | (<uint64_t>p[4] << 24) | (<uint64_t>p[5] << 16)
                     | (<uint64_t>p[6] << 8) | <uint64_t>p[7])


cdef inline uint32_t _u(const unsigned char* p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | <uint32_t>p[3]


cdef inline int16_t _h(const unsigned char* p) noexcept nogil:
    return <int16_t>((<uint32_t>p[0] << 8) | <uint32_t>p[1])


def all_zero(buf, Py_ssize_t start, Py_ssize_t end):
    """True when ``buf[start:end]`` holds only zero bytes."""
    cdef Py_buffer view
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        if end > view.len:
            end = view.len
        if start >= end:
            return True
        return hw_all_zero(<const unsigned char*>view.buf + start, end - start) != 0
    finally:
        PyBuffer_Release(&view)


def crc32c_of(buf, Py_ssize_t start, Py_ssize_t end):
    """CRC-32C of ``buf[start:end]`` (the walker's own CRC, exposed for the parity tests)."""
    cdef Py_buffer view
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        return hw_crc32c(<const unsigned char*>view.buf + start, end - start)
    finally:
        PyBuffer_Release(&view)


def walk(buf, Py_ssize_t start, Py_ssize_t end, bint verify_crc, int64_t expect_next, bint check_next,
         bint contiguous, int64_t segment_base, bint check_range, Py_ssize_t max_batches,
         Py_ssize_t max_size, int64_t max_ts, int64_t max_ts_offset, int32_t latest_epoch,
         crc32c_fn, crc32_fn, Py_ssize_t base=0):
    """See ``kafkalog.record.header_walk.walk``. Returns ``(facts, n, end_pos, stop, stop_pos, d1,
    d2, d3, max_ts, max_ts_offset, n_producer, n_legacy, epoch_starts)``."""
    cdef Py_buffer view
    cdef const unsigned char* b
    cdef const unsigned char* e
    cdef Py_ssize_t pos, sz, left, cap = 0, n = 0, blen, need
    cdef int64_t offset, last, first, ts, first_ts, pid, rem
    cdef int32_t length, lod, ple, count, seq
    cdef int16_t attrs, epoch
    cdef int magic
    cdef bint bad
    cdef uint32_t stored, computed
    cdef int stop = STOP_NONE
    cdef int64_t d1 = 0, d2 = 0, d3 = 0
    cdef Py_ssize_t stop_pos = 0
    cdef Py_ssize_t n_producer = 0, n_legacy = 0
    cdef int64_t* row
    cdef bytearray facts
    cdef list epoch_starts = []
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        b = <const unsigned char*>view.buf - base      # b + pos: file position pos
        blen = base + view.len
        if end < 0:
            end = blen
        pos = start if start > base else base
        # capacity: one row per smallest possible entry (26 bytes) that starts in the buffer (a
        # window of a large file must not allocate rows for the whole rest of the file), bounded
        # by max_batches
        rem = (end if end < blen else blen) - pos
        if rem < 0:
            rem = 0
        cap = rem // 26 + 1
        if max_batches >= 0 and cap > max_batches:
            cap = max_batches
        facts = PyByteArray_FromStringAndSize(NULL, cap * NF * 8)
        row = <int64_t*>PyByteArray_AS_STRING(facts)
        while True:
            if max_batches >= 0 and n >= max_batches:
                break
            left = end - pos
            if left <= 0:
                break
            if left <= 17:
                stop = STOP_SHORT_TAIL
                stop_pos = pos
                d1 = left
                break
            if pos + 17 > blen:
                stop = STOP_NEED_MORE
                stop_pos = pos
                break
            e = b + pos
            offset = _q(e)
            length = <int32_t>_u(e + 8)
            ple = <int32_t>_u(e + 12)
            magic = <signed char>e[16]
            if length < 14:
                stop = STOP_BAD_SIZE
                stop_pos = pos
                d1 = length
                break
            sz = <Py_ssize_t>length + 12
            if sz > left:
                stop = STOP_PARTIAL
                stop_pos = pos
                d1 = sz
                d2 = magic
                d3 = offset
                break
            need = sz if verify_crc else min(sz, 61 if magic == 2 else 34)
            if pos + need > blen:
                stop = STOP_NEED_MORE
                stop_pos = pos
                break
            if max_size >= 0 and sz > max_size:
                stop = STOP_TOO_LARGE
                stop_pos = pos
                d1 = sz
                break
            if magic == 2:
                if sz < 61:
                    stop = STOP_SMALL_BATCH
                    stop_pos = pos
                    d1 = sz
                    break
                stored = _u(e + 17)
                attrs = _h(e + 21)
                lod = <int32_t>_u(e + 23)
                first_ts = _q(e + 27)
                ts = _q(e + 35)
                pid = _q(e + 43)
                epoch = _h(e + 51)
                seq = <int32_t>_u(e + 53)
                count = <int32_t>_u(e + 57)
                computed = stored
                if verify_crc:
                    if sz - 21 > BIG_CRC:
                        computed = crc32c_fn(memoryview(buf)[pos - base + 21:pos - base + sz])
                    else:
                        computed = hw_crc32c(e + 21, sz - 21)
                last = hw_wrap_add(offset, lod)
                first = offset
            elif magic == 0 or magic == 1:
                stored = _u(e + 12)
                computed = stored
                if verify_crc:
                    computed = crc32_fn(memoryview(buf)[pos - base + 16:pos - base + sz])
                attrs = e[17]
                lod = 0
                ts = _q(e + 18) if magic == 1 and sz >= 34 else -1
                first_ts = ts
                pid = -1
                epoch = -1
                seq = -1
                count = -1 if attrs & 0x07 else 1
                ple = -1
                last = offset
                first = offset
            else:
                stop = STOP_BAD_MAGIC
                stop_pos = pos
                d1 = magic
                break
            if stored != computed:
                stop = STOP_CRC
                stop_pos = pos
                d1 = stored
                d2 = computed
                d3 = offset
                break
            if check_range and (lod < 0 or offset < segment_base
                                or offset - segment_base > INT32_MAX - lod):
                stop = STOP_RANGE
                stop_pos = pos
                d1 = offset
                d2 = last
                break
            if check_next:
                if magic == 2:
                    bad = first < expect_next or (contiguous and first != expect_next)
                else:
                    # a compressed v0/v1 wrapper carries its last offset; its first is inside
                    bad = last < expect_next or (contiguous and not (attrs & 0x07) and last != expect_next)
                if bad:
                    stop = STOP_OVERLAP
                    stop_pos = pos
                    d1 = offset
                    d2 = last
                    d3 = expect_next
                    break
                expect_next = hw_wrap_add(last, 1)
            if magic < 2:
                n_legacy += 1
            elif pid >= 0:
                n_producer += 1
            if ple >= 0 and ple > latest_epoch:       # (ple is -1 for v0/v1)
                epoch_starts.append((ple, offset))
                latest_epoch = ple
            if ts > max_ts:
                max_ts = ts
                max_ts_offset = last
            row = (<int64_t*>PyByteArray_AS_STRING(facts)) + n * NF
            row[0] = pos
            row[1] = sz
            row[2] = offset
            row[3] = last
            row[4] = magic
            row[5] = attrs & 0xFF if magic < 2 else attrs & 0xFFFF
            row[6] = ts
            row[7] = first_ts
            row[8] = ple
            row[9] = pid
            row[10] = epoch
            row[11] = seq
            row[12] = count
            row[13] = 1 if verify_crc else -1
            row[14] = max_ts
            row[15] = max_ts_offset
            n += 1
            pos += sz
    finally:
        PyBuffer_Release(&view)
    if n < cap:
        PyByteArray_Resize(facts, n * NF * 8)
    return (facts, n, pos, stop, stop_pos, d1, d2, d3, max_ts, max_ts_offset, n_producer, n_legacy,
            epoch_starts)


def one_v2_data_batch(buf, Py_ssize_t max_size):
    """``(lastOffsetDelta, maxTimestamp, producerId, partitionLeaderEpoch)`` when ``buf`` is exactly
    one valid v2 data batch as a producer sends it (size within ``max_size``, CRC-32C ok, not a
    control batch, no LogAppendTime bit, recordsCount == lastOffsetDelta + 1 > 0), else None (the
    general walk then finds out what is wrong)."""
    cdef Py_buffer view
    cdef const unsigned char* e
    cdef Py_ssize_t n
    cdef int32_t lod, count
    cdef int16_t attrs
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        n = view.len
        e = <const unsigned char*>view.buf
        if n < 61 or n > max_size or e[16] != 2 or <Py_ssize_t>(<int32_t>_u(e + 8)) + 12 != n:
            return None
        attrs = _h(e + 21)
        lod = <int32_t>_u(e + 23)
        count = <int32_t>_u(e + 57)
        if attrs & 0x28 or lod < 0 or count != lod + 1:
            return None
        if _u(e + 17) != hw_crc32c(e + 21, n - 21):
            return None
        return (lod, _q(e + 35), _q(e + 43), <int32_t>_u(e + 12))
    finally:
        PyBuffer_Release(&view)
