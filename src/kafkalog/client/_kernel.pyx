# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled client kernel: the embedded client's per-record classes. Same API and behaviour as
the pure-Python twin ``kafkalog.client._kernel_py`` (API docs there); ``kafkalog.client.kernel``
selects one of the two (all or nothing with the other layers' kernels).

* the producer's per-record path: ``ProducerSendPath.send`` is ``Producer.send``'s common case
  (an open batch of the topic's sticky or murmur2 partition takes the record: size check against
  the batch limit, encode into the record kernel's ``RecordsEncoder``, timestamp "now", the
  record's future); anything else goes to the producer's Python ``slow`` path with the same
  arguments. ``RecordFuture`` is the per-record future with its methods (kafka-python's
  ``FutureRecordMetadata``).
* the consumer's records: ``decode_consumer_records`` decodes a batch straight into
  ``ConsumerRecord`` s.
"""

from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_GET_SIZE, PyBytes_CheckExact
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.ref cimport PyObject, Py_INCREF
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t

cimport cython

from kafkalog.record._kernel cimport RecordsEncoder
from kafkalog.record._slots cimport (
    READONLY, T_OBJECT_EX, PyDescr_NewMember, PyMemberDef, PyType_Modified, PyTypeObject,
    _field_offset)
from kafkalog.record._wire cimport (
    RecordHead, _as_int64, _check_consumed, _check_count, _murmur2_obj, _rd_record)

from kafkalog.client.record_metadata import RecordMetadata
from kafkalog.errors import InvalidRecordError, ProducerTimeoutError

IMPLEMENTATION = "cython"

__all__ = ["IMPLEMENTATION", "ConsumerRecord", "ProducerBatch", "ProducerSendPath", "ProducerTopic",
           "RecordFuture", "decode_consumer_records"]


cdef extern from "<time.h>" nogil:
    ctypedef long time_t
    cdef struct timespec:
        time_t tv_sec
        long tv_nsec
    int clock_gettime(int clk_id, timespec* tp)
    int CLOCK_REALTIME


# the kinds of callback a future holds until its batch is done
cdef enum:
    _OK = 0          # fn(metadata) on success (kafka-python's add_callback)
    _ERR = 1         # fn(exception) on failure (add_errback)
    _DONE = 2        # fn(future) once done (concurrent.futures' add_done_callback)
    _DELIVERY = 3    # fn(err, metadata) once done (confluent-kafka's on_delivery)


@cython.final
@cython.no_gc
@cython.freelist(512)
cdef class RecordFuture:
    """The producer's per-record future (kafka-python's ``FutureRecordMetadata``): the batch
    result it points at (``produce_result``: a ``ProduceRequestResult``), the record's index in
    the batch, its timestamp and serialized key/value sizes (-1 for null). Small, pooled and not
    tracked by the cyclic GC (it holds no container), so a million pending futures cost no GC
    scans. See ``_kernel_py.RecordFuture`` for the methods."""
    cdef public object produce_result
    cdef public Py_ssize_t index
    cdef public int64_t timestamp
    cdef public Py_ssize_t key_size
    cdef public Py_ssize_t value_size

    # --- state -------------------------------------------------------------------------------

    def is_done(self):
        return bool(self.produce_result.done)

    def done(self):
        return bool(self.produce_result.done)

    def succeeded(self):
        r = self.produce_result
        return bool(r.done and r.error is None)

    def failed(self):
        r = self.produce_result
        return bool(r.done and r.error is not None)

    @property
    def exception(self):
        return self.produce_result.error

    @property
    def value(self):
        r = self.produce_result
        return self._metadata() if r.done and r.error is None else None

    @property
    def partition(self):
        return self.produce_result.partition

    cdef object _metadata(self):
        r = self.produce_result
        ts = r.log_append_time if r.log_append_time >= 0 else self.timestamp
        return RecordMetadata(r.topic, r.partition, r.base_offset + self.index, ts, self.key_size,
                              self.value_size, -1, r.log_start_offset)

    def get(self, timeout=None):
        r = self.produce_result
        if not r.done and not r.wait(timeout):
            raise ProducerTimeoutError(f"Timeout after waiting for {timeout} s for the record "
                                       f"to {r.topic}-{r.partition} to be appended")
        if r.error is not None:
            raise r.error
        return self._metadata()

    def result(self, timeout=None):
        return self.get(timeout)

    # --- callbacks ---------------------------------------------------------------------------

    cdef object _add(self, int kind, fn):
        r = self.produce_result
        with r.lock:
            if not r.done:
                if r.callbacks is None:
                    r.callbacks = []
                r.callbacks.append((self, kind, fn))
                return self
        self._call(kind, fn)
        return self

    def _call(self, int kind, fn):
        """Run one callback of ``kind`` (the batch is done)."""
        err = self.produce_result.error
        if kind == _OK:
            if err is None:
                fn(self._metadata())
        elif kind == _ERR:
            if err is not None:
                fn(err)
        elif kind == _DONE:
            fn(self)
        else:
            fn(err, None if err is not None else self._metadata())

    def add_callback(self, fn):
        return self._add(_OK, fn)

    def add_errback(self, fn):
        return self._add(_ERR, fn)

    def add_both(self, fn):
        self._add(_OK, fn)
        return self._add(_ERR, fn)

    def add_done_callback(self, fn):
        return self._add(_DONE, fn)

    def add_delivery_callback(self, fn):
        return self._add(_DELIVERY, fn)

    def __repr__(self):
        r = self.produce_result
        state = "pending" if not r.done else ("error" if r.error is not None else "done")
        return f"<FutureRecordMetadata {r.topic}-{r.partition} #{self.index} {state}>"


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
