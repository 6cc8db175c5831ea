# The record kernel's incremental encoder, declared for the client kernel
# (kafkalog/client/_kernel.pyx: a producer batch appends records into it at C level).
from libc.stdint cimport int32_t, int64_t


cdef class RecordsEncoder:
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

    cdef int _reserve(self, Py_ssize_t extra) except -1
    cdef Py_ssize_t _append(self, key, value, int64_t ts, headers, int32_t od) except -1
