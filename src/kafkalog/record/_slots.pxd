# CPython's member descriptors, for the compiled record classes (kafkalog/record/_kernel.pyx and
# kafkalog/client/_kernel.pyx): Cython exposes ``cdef public object`` fields as getset
# descriptors, and CPython 3.11+ specialises attribute loads only for member descriptors
# (T_OBJECT_EX slots), so the fields read for every record (``key``, ``value``) are re-exposed as
# member descriptors on the same fields.
from cpython.ref cimport PyObject

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


cdef inline Py_ssize_t _field_offset(object probe, object sentinel) except -1:
    """Byte offset of the object field of ``probe`` that currently holds ``sentinel``."""
    cdef char* base = <char*><PyObject*>probe
    cdef Py_ssize_t off
    cdef Py_ssize_t size = type(probe).__basicsize__
    for off in range(sizeof(PyObject), size - <Py_ssize_t>sizeof(PyObject*) + 1, sizeof(PyObject*)):
        if (<PyObject**>(base + off))[0] == <PyObject*>sentinel:
            return off
    raise RuntimeError("Record field not found")
