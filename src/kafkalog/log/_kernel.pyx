# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled log kernel: the offset index's search, the fetch path's step from an index entry to
the batch holding an offset, recovery's producer rows, and a load's read-ahead of partition
directories. Same API and results as the pure-Python twin
``kafkalog.log._kernel_py`` (API docs there); ``kafkalog.log.kernel`` selects one of the two (all or
nothing with the other layers' kernels)."""

from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytes cimport PyBytes_AS_STRING
from libc.stdlib cimport malloc, free
from libc.stdint cimport int16_t, int32_t, int64_t, uint32_t, uint64_t

import os

IMPLEMENTATION = "cython"

__all__ = ["IMPLEMENTATION", "find_v2_batch", "index_slot", "producer_rows", "read_ahead"]


cdef inline int32_t _rel(const unsigned char* p) noexcept nogil:
    return <int32_t>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3])


cdef inline int64_t _q(const unsigned char* p) noexcept nogil:
    return <int64_t>((<uint64_t>_rel(p) << 32) | <uint32_t>_rel(p + 4))


def index_slot(buf, Py_ssize_t entries, long long rel):
    cdef Py_buffer view
    cdef const unsigned char* p
    cdef Py_ssize_t lo, hi, mid
    if entries <= 0:
        return -1
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        if view.len < entries * 8:
            raise ValueError(f"index_slot: {entries} entries need {entries * 8} bytes, the buffer "
                             f"has {view.len}")
        p = <const unsigned char*>view.buf
        if rel < _rel(p):
            return -1
        lo = 0
        hi = entries - 1
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            if _rel(p + (mid << 3)) <= rel:
                lo = mid
            else:
                hi = mid - 1
        return lo
    finally:
        PyBuffer_Release(&view)


def find_v2_batch(buf, Py_ssize_t base, Py_ssize_t end, int64_t target):
    cdef Py_buffer view
    cdef const unsigned char* b
    cdef const unsigned char* e
    cdef Py_ssize_t pos, left, blen, size
    cdef int64_t offset, last
    cdef int32_t length, ple, lod
    cdef int16_t attrs
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        b = <const unsigned char*>view.buf - base       # b + pos: file position pos
        blen = base + view.len
        pos = base
        while True:
            left = end - pos
            if left <= 17:
                return pos, 1
            if pos + 17 > blen:
                return pos, 0
            e = b + pos
            length = _rel(e + 8)
            size = <Py_ssize_t>length + 12
            if e[16] != 2 or size < 61 or size > left:
                return pos, 1
            if pos + 61 > blen:
                return pos, 0
            offset = _q(e)
            lod = _rel(e + 23)
            last = <int64_t>(<uint64_t>offset + <uint64_t><int64_t>lod)     # Java long arithmetic
            if last >= target:
                ple = _rel(e + 12)
                attrs = <int16_t>((e[21] << 8) | e[22])
                return pos, size, 2, offset, last, _q(e + 35), ple, attrs & 0xFF
            pos += size
    finally:
        PyBuffer_Release(&view)


# --- recovery: the producer batches a producer-state rebuild must apply -------------------------
# the header walker's facts: int64 rows of 16 fields (kafkalog.record.header_walk.F_*)
cdef enum:
    _NF = 16
    _F_MAGIC = 4
    _F_ATTRIBUTES = 5
    _F_PRODUCER_ID = 9
    _TXN_OR_CONTROL = 0x30


def producer_rows(facts, Py_ssize_t first, Py_ssize_t end, Py_ssize_t retain, open_producers):
    """See ``_kernel_py.producer_rows``."""
    cdef Py_buffer view
    cdef const int64_t* rows
    cdef Py_ssize_t i, n_rows
    cdef int64_t pid
    cdef dict kept = {}
    cdef set whole = set(open_producers)
    cdef list out = []
    cdef object key, seen
    PyObject_GetBuffer(facts, &view, PyBUF_SIMPLE)
    try:
        n_rows = view.len // (8 * _NF)
        if first < 0 or end > n_rows or first > end:
            raise ValueError(f"producer_rows: rows {first}..{end} of {n_rows}")
        rows = <const int64_t*>view.buf
        for i in range(first, end):
            pid = rows[i * _NF + _F_PRODUCER_ID]
            if pid >= 0 and rows[i * _NF + _F_MAGIC] == 2 and rows[i * _NF + _F_ATTRIBUTES] & _TXN_OR_CONTROL:
                whole.add(pid)
        i = end - 1
        while i >= first:
            pid = rows[i * _NF + _F_PRODUCER_ID]
            if pid >= 0 and rows[i * _NF + _F_MAGIC] == 2:
                key = pid
                if key in whole:
                    out.append(i)
                else:
                    seen = kept.get(key)
                    if seen is None:
                        kept[key] = 1
                        out.append(i)
                    elif <Py_ssize_t>seen < retain:
                        kept[key] = <Py_ssize_t>seen + 1
                        out.append(i)
            i -= 1
        out.reverse()
        return out
    finally:
        PyBuffer_Release(&view)


# --- a load's read-ahead: the files of partition directories brought into the page cache -------
cdef extern from *:
    """
    #include <dirent.h>
    #include <fcntl.h>
    #include <string.h>
    #include <sys/stat.h>
    #include <unistd.h>
    /* see _kernel_py.read_ahead: every regular file of each directory, read whole up to
       RA_WHOLE bytes, else its first RA_HEAD and last RA_TAIL bytes (a producer snapshot: its
       whole advised); the count of files read. Errors skip the file or directory. */
    #define RA_WHOLE 65536
    #define RA_HEAD 4096
    #define RA_TAIL 65536
    static long ra_read_dirs(const char* const* dirs, Py_ssize_t n, char* buf) {
        long files = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            DIR* d = opendir(dirs[i]);
            if (d == NULL) continue;
            int dfd = dirfd(d);
            struct dirent* ent;
            while ((ent = readdir(d)) != NULL) {
                if (ent->d_type != DT_REG && ent->d_type != DT_UNKNOWN) continue;
                int fd = openat(dfd, ent->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
                if (fd < 0) continue;
                struct stat st;
                if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
                    off_t size = st.st_size;
                    if (size <= RA_WHOLE) {
                        if (pread(fd, buf, (size_t)size, 0) >= 0) files++;
                    } else {
                        size_t len = strlen(ent->d_name);
                        if (len > 9 && strcmp(ent->d_name + len - 9, ".snapshot") == 0)
                            posix_fadvise(fd, 0, size, POSIX_FADV_WILLNEED);
                        if (pread(fd, buf, RA_HEAD, 0) >= 0
                                && pread(fd, buf, RA_TAIL, size - RA_TAIL) >= 0) files++;
                    }
                }
                close(fd);
            }
            closedir(d);
        }
        return files;
    }
    """
    long ra_read_dirs(const char* const* dirs, Py_ssize_t n, char* buf) nogil
    enum: RA_WHOLE


def read_ahead(dirs):
    """See ``_kernel_py.read_ahead``: the batch's walk holds no interpreter lock."""
    cdef list paths = [os.fsencode(d) for d in dirs]
    cdef Py_ssize_t n = len(paths), i
    cdef long files
    cdef const char** c_paths = <const char**>malloc((n if n > 0 else 1) * sizeof(char*))
    cdef char* buf = <char*>malloc(RA_WHOLE)
    if c_paths == NULL or buf == NULL:
        free(c_paths)
        free(buf)
        raise MemoryError()
    try:
        for i in range(n):
            c_paths[i] = PyBytes_AS_STRING(paths[i])
        with nogil:
            files = ra_read_dirs(c_paths, n, buf)
        return files
    finally:
        free(c_paths)
        free(buf)
