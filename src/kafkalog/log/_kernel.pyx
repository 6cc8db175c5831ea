# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled log kernel: the offset index's search, the fetch path's step from an index entry to
the batch holding an offset, recovery's producer rows, a load's read-ahead of partition
directories, and the making of new partition directories. Same API and results as the pure-Python twin
``kafkalog.log._kernel_py`` (API docs there); ``kafkalog.log.kernel`` selects one of the two (all or
nothing with the other layers' kernels)."""

from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.stdlib cimport calloc, free, malloc
from libc.string cimport memset
from libc.stdint cimport int16_t, int32_t, int64_t, uint32_t, uint64_t

import os

IMPLEMENTATION = "cython"

__all__ = ["IMPLEMENTATION", "find_v2_batch", "index_slot", "make_dirs", "producer_rows", "read_ahead"]


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


# --- a load's read-ahead: the files of partition directories read for the load -----------------
cdef extern from *:
    """
    #include <dirent.h>
    #include <errno.h>
    #include <fcntl.h>
    #include <stdint.h>
    #include <stdlib.h>
    #include <string.h>
    #include <sys/stat.h>
    #include <unistd.h>
    /* see _kernel_py.read_ahead. One batch's findings, gathered without the interpreter lock:
       per entry its directory, its name, and for a regular file its size and the bytes read (the
       whole file up to RA_WHOLE bytes, else its last RA_TAIL), all in one growing arena. */
    #define RA_WHOLE 65536
    #define RA_HEAD 4096
    #define RA_TAIL 65536
    typedef struct { Py_ssize_t dir; size_t name_off, name_len; int64_t size; size_t data_off; Py_ssize_t data_len; } ra_entry;
    typedef struct {
        char* arena; size_t used, cap;
        ra_entry* entries; Py_ssize_t n, cap_entries;
        char* dir_ok;      /* per directory: listed whole */
        int failed;        /* out of memory */
    } ra_batch;
    static char* ra_room(ra_batch* b, size_t n) {
        if (b->used + n > b->cap) {
            size_t cap = b->cap ? b->cap : 1 << 16;
            while (cap < b->used + n) cap *= 2;
            char* a = (char*)realloc(b->arena, cap);
            if (a == NULL) { b->failed = 1; return NULL; }
            b->arena = a; b->cap = cap;
        }
        return b->arena + b->used;
    }
    static ra_entry* ra_entry_new(ra_batch* b) {
        if (b->n == b->cap_entries) {
            Py_ssize_t cap = b->cap_entries ? 2 * b->cap_entries : 256;
            ra_entry* e = (ra_entry*)realloc(b->entries, (size_t)cap * sizeof(ra_entry));
            if (e == NULL) { b->failed = 1; return NULL; }
            b->entries = e; b->cap_entries = cap;
        }
        return &b->entries[b->n++];
    }
    static void ra_read_dirs(const char* const* dirs, Py_ssize_t n, ra_batch* b) {
        for (Py_ssize_t i = 0; i < n && !b->failed; i++) {
            DIR* d = opendir(dirs[i]);
            if (d == NULL) continue;
            int dfd = dirfd(d);
            struct dirent* ent;
            Py_ssize_t first = b->n;
            size_t arena_mark = b->used;
            int listed = 0;
            for (;;) {
                errno = 0;                     /* (readdir's own: an open below may set it) */
                ent = readdir(d);
                if (ent == NULL) { listed = errno == 0; break; }
                const char* name = ent->d_name;
                if (name[0] == '.' && (name[1] == 0 || (name[1] == '.' && name[2] == 0))) continue;
                size_t len = strlen(name);
                char* at = ra_room(b, len);
                if (at == NULL) break;
                memcpy(at, name, len);
                ra_entry* e = ra_entry_new(b);
                if (e == NULL) break;
                e->dir = i; e->name_off = b->used; e->name_len = len; e->size = -1; e->data_off = 0; e->data_len = -1;
                b->used += len;
                if (ent->d_type != DT_REG && ent->d_type != DT_UNKNOWN) continue;
                int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
                if (fd < 0) continue;
                struct stat st;
                if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
                    off_t size = st.st_size;
                    off_t from = size <= RA_WHOLE ? 0 : size - RA_TAIL;
                    size_t want = (size_t)(size - from);
                    if (size > RA_WHOLE) {
                        char head[RA_HEAD];
                        if (len > 9 && strcmp(name + len - 9, ".snapshot") == 0)
                            posix_fadvise(fd, 0, size, POSIX_FADV_WILLNEED);
                        if (pread(fd, head, RA_HEAD, 0) < 0) { close(fd); continue; }
                    }
                    char* buf = ra_room(b, want);
                    if (buf == NULL) { close(fd); break; }
                    ssize_t got = pread(fd, buf, want, from);
                    if (got == (ssize_t)want) {        /* (a file that changed meanwhile: no bytes kept) */
                        e->size = size; e->data_off = b->used; e->data_len = got;
                        b->used += (size_t)got;
                    }
                }
                close(fd);
            }
            if (!listed) {                             /* not listed whole: nothing kept of it */
                b->n = first; b->used = arena_mark;
            } else {
                b->dir_ok[i] = 1;
            }
            closedir(d);
        }
    }
    """
    ctypedef struct ra_entry:
        Py_ssize_t dir
        size_t name_off, name_len
        int64_t size
        size_t data_off
        Py_ssize_t data_len
    ctypedef struct ra_batch:
        char* arena
        size_t used, cap
        ra_entry* entries
        Py_ssize_t n, cap_entries
        char* dir_ok
        int failed
    void ra_read_dirs(const char* const* dirs, Py_ssize_t n, ra_batch* b) nogil
    object PyUnicode_DecodeFSDefaultAndSize(const char* s, Py_ssize_t size)


def read_ahead(dirs):
    """See ``_kernel_py.read_ahead``: the batch's reads hold no interpreter lock."""
    cdef const char** c_paths = NULL
    cdef Py_ssize_t n, i
    cdef ra_batch b
    cdef ra_entry* e
    cdef list paths, out
    cdef object found
    memset(&b, 0, sizeof(b))
    try:
        paths = [os.fsencode(d) for d in dirs]
        n = len(paths)
        out = [None] * n
        c_paths = <const char**>malloc((n if n > 0 else 1) * sizeof(char*))
        b.dir_ok = <char*>calloc(n if n > 0 else 1, 1)
        if c_paths == NULL or b.dir_ok == NULL:
            raise MemoryError()
        for i in range(n):
            c_paths[i] = PyBytes_AS_STRING(paths[i])
        with nogil:
            ra_read_dirs(c_paths, n, &b)
        if b.failed:
            raise MemoryError()
        for i in range(n):
            if b.dir_ok[i]:
                out[i] = ([], {})
        for i in range(b.n):
            e = &b.entries[i]
            found = out[e.dir]
            if found is None:
                continue
            name = PyUnicode_DecodeFSDefaultAndSize(b.arena + e.name_off, e.name_len)
            found[0].append(name)
            if e.data_len >= 0:
                found[1][name] = (e.size, PyBytes_FromStringAndSize(b.arena + e.data_off, e.data_len))
        return out
    finally:
        free(c_paths)
        free(b.dir_ok)
        free(b.arena)
        free(b.entries)


# --- new partition directories, made without the interpreter lock -------------------------------
cdef extern from *:
    """
    #include <errno.h>
    #include <fcntl.h>
    #include <limits.h>
    #include <stdio.h>
    #include <sys/stat.h>
    #include <unistd.h>
    /* see _kernel_py.make_dirs: directory i made, then its files, stopping at the first failure
       (its errno; *failed_file the file's index, -1 for the directory) */
    static int md_make_one(const char* dir, Py_ssize_t nfiles, const char* const* names,
                           const char* const* datas, const Py_ssize_t* lens, Py_ssize_t* failed_file) {
        char path[PATH_MAX];
        *failed_file = -1;
        if (mkdir(dir, 0777) != 0) return errno;
        for (Py_ssize_t j = 0; j < nfiles; j++) {
            *failed_file = j;
            int n = snprintf(path, sizeof(path), "%s/%s", dir, names[j]);
            if (n < 0 || (size_t)n >= sizeof(path)) return ENAMETOOLONG;
            int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
            if (fd < 0) return errno;
            Py_ssize_t off = 0;
            while (off < lens[j]) {
                ssize_t w = write(fd, datas[j] + off, (size_t)(lens[j] - off));
                if (w < 0) {
                    if (errno == EINTR) continue;
                    int e = errno;
                    close(fd);
                    return e;
                }
                off += w;
            }
            if (close(fd) != 0 && errno != EINTR) return errno;
        }
        return 0;
    }
    static Py_ssize_t md_make(const char* const* dirs, Py_ssize_t n, Py_ssize_t nfiles,
                              const char* const* names, const char* const* datas,
                              const Py_ssize_t* lens, int* err, Py_ssize_t* failed_file) {
        for (Py_ssize_t i = 0; i < n; i++) {
            *err = md_make_one(dirs[i], nfiles, names, datas, lens, failed_file);
            if (*err != 0) return i;
        }
        return n;
    }
    """
    Py_ssize_t md_make(const char* const* dirs, Py_ssize_t n, Py_ssize_t nfiles,
                       const char* const* names, const char* const* datas, const Py_ssize_t* lens,
                       int* err, Py_ssize_t* failed_file) nogil


def make_dirs(dirs, files):
    """See ``_kernel_py.make_dirs``: every directory's system calls hold no interpreter lock."""
    cdef const char** c_dirs = NULL
    cdef const char** c_names = NULL
    cdef const char** c_datas = NULL
    cdef Py_ssize_t* c_lens = NULL
    cdef Py_ssize_t n, nfiles, i, made, failed_file = -1
    cdef int err = 0
    cdef list b_dirs, b_names, b_datas
    b_dirs = [os.fsencode(d) for d in dirs]
    b_names = [os.fsencode(name) for name, _ in files]
    b_datas = [bytes(data) for _, data in files]
    n = len(b_dirs)
    nfiles = len(b_names)
    try:
        c_dirs = <const char**>malloc((n if n > 0 else 1) * sizeof(char*))
        c_names = <const char**>malloc((nfiles if nfiles > 0 else 1) * sizeof(char*))
        c_datas = <const char**>malloc((nfiles if nfiles > 0 else 1) * sizeof(char*))
        c_lens = <Py_ssize_t*>malloc((nfiles if nfiles > 0 else 1) * sizeof(Py_ssize_t))
        if c_dirs == NULL or c_names == NULL or c_datas == NULL or c_lens == NULL:
            raise MemoryError()
        for i in range(n):
            c_dirs[i] = PyBytes_AS_STRING(b_dirs[i])
        for i in range(nfiles):
            c_names[i] = PyBytes_AS_STRING(b_names[i])
            c_datas[i] = PyBytes_AS_STRING(b_datas[i])
            c_lens[i] = len(b_datas[i])
        with nogil:
            made = md_make(c_dirs, n, nfiles, c_names, c_datas, c_lens, &err, &failed_file)
        if made == n:
            return made, None
        return made, (err, files[failed_file][0] if failed_file >= 0 else "")
    finally:
        free(c_dirs)
        free(c_names)
        free(c_datas)
        free(c_lens)
