"""Produce results: :class:`RecordMetadata` (kafka-python's field names), the per-batch
:class:`ProduceRequestResult` and the per-record :class:`FutureRecordMetadata` (a slotted object
pointing at its batch's result, as kafka-python's ``FutureRecordMetadata`` does, so a ``send``
costs one small object).

A future resolves when its batch is appended to the log (or fails). Callbacks: kafka-python's
``add_callback(fn)`` (``fn(metadata)``) / ``add_errback(fn)`` (``fn(exception)``), the
``concurrent.futures`` style ``add_done_callback(fn)`` (``fn(future)``) and confluent-kafka's
``on_delivery(err, metadata)`` given to ``send``. Callbacks run in the thread that appended the
batch (the caller of ``send``/``flush`` or the producer's linger thread), after the producer's lock
is released.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from types import MethodType
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from kafkalog.errors import KafkalogError
from kafkalog.record.kernel import RecordFuture, bind_record_future

logger = logging.getLogger("kafkalog.producer")

__all__ = ["FutureRecordMetadata", "ProduceRequestResult", "ProducerTimeoutError", "RecordMetadata"]


class ProducerTimeoutError(KafkalogError):
    """Kafka: TimeoutException (a future not resolved within the time asked)."""


class RecordMetadata(NamedTuple):
    """Where a produced record landed (kafka-python's ``RecordMetadata`` field names)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    serialized_key_size: int = -1
    serialized_value_size: int = -1
    serialized_header_size: int = -1
    log_start_offset: int = -1


_Callback = tuple[Any, int, Callable[..., Any]]     # (future, kind, fn)
_OK, _ERR, _DONE, _DELIVERY = 0, 1, 2, 3


class ProduceRequestResult:
    """The outcome of one batch: its base offset (or error), set once, under the producer's lock."""

    __slots__ = (
        "_event",
        "base_offset",
        "callbacks",
        "done",
        "error",
        "lock",
        "log_append_time",
        "log_start_offset",
        "partition",
        "topic",
    )

    def __init__(self, topic: str, partition: int, lock: Any) -> None:
        self.lock = lock
        self.topic = topic
        self.partition = partition
        self.base_offset = -1
        self.log_append_time = -1
        self.log_start_offset = -1
        self.error: BaseException | None = None
        self.done = False
        self._event: threading.Event | None = None
        self.callbacks: list[_Callback] | None = None

    def complete(self, base_offset: int, log_append_time: int, log_start_offset: int,
                 error: BaseException | None) -> None:
        """Resolve (call with the producer's lock held; run :meth:`fire` after releasing it)."""
        self.base_offset = base_offset
        self.log_append_time = log_append_time
        self.log_start_offset = log_start_offset
        self.error = error
        self.done = True
        if self._event is not None:
            self._event.set()

    def wait(self, timeout: float | None) -> bool:
        with self.lock:
            if self.done:
                return True
            if self._event is None:
                self._event = threading.Event()
            ev = self._event
        return ev.wait(timeout)

    def fire(self) -> None:
        """Run the callbacks registered before completion (outside the producer's lock)."""
        cbs = self.callbacks
        self.callbacks = None
        for fut, kind, fn in cbs or ():
            try:
                _f__call(fut, kind, fn)
            except Exception:
                # as Kafka's producer: a failing user callback is logged, the others still run
                logger.exception("Error executing a callback of a record sent to %s-%d", self.topic,
                                 self.partition)


def refused(fut: Any) -> BaseException | None:
    """The error of a record refused at once by ``send`` (RecordTooLargeError), else None; cheap
    (field reads only), for bulk senders that keep no futures."""
    r = fut.produce_result
    return r.error if r.done else None


def new_future(result: ProduceRequestResult, index: int, timestamp: int, key_size: int,
               value_size: int) -> Any:
    """A future outside a batch (a record refused before it reached one)."""
    f = RecordFuture()
    f.produce_result = result
    f.index = index
    f.timestamp = timestamp
    f.key_size = key_size
    f.value_size = value_size
    return f


class _FutureFields(Protocol):
    """The fields of a record future (the kernel's ``RecordFuture``)."""

    produce_result: ProduceRequestResult
    index: int
    timestamp: int
    key_size: int
    value_size: int


#: The future of one record (``send``'s result): the record kernel's ``RecordFuture`` (small,
#: pooled, not tracked by the cyclic GC), whose attributes are the functions of
#: :class:`_FutureMethods` below. Fields: ``produce_result``, ``index``, ``timestamp``,
#: ``key_size``, ``value_size``. For the type checker, the Protocol below is its typed face (the
#: kernel's class gets its methods at run time).
if TYPE_CHECKING:
    class FutureRecordMetadata(_FutureFields, Protocol):
        """A record's future: kafka-python's ``FutureRecordMetadata`` (plus the
        ``concurrent.futures`` and confluent-kafka spellings)."""

        def is_done(self) -> bool: ...

        def done(self) -> bool: ...

        def succeeded(self) -> bool: ...

        def failed(self) -> bool: ...

        @property
        def exception(self) -> BaseException | None: ...

        @property
        def value(self) -> RecordMetadata | None: ...

        @property
        def partition(self) -> int: ...

        def get(self, timeout: float | None = None) -> RecordMetadata: ...

        def result(self, timeout: float | None = None) -> RecordMetadata: ...

        def add_callback(self, fn: Callable[[RecordMetadata], object]) -> FutureRecordMetadata: ...

        def add_errback(self, fn: Callable[[BaseException], object]) -> FutureRecordMetadata: ...

        def add_both(self, fn: Callable[[RecordMetadata | BaseException], object]) -> FutureRecordMetadata: ...

        def add_done_callback(self, fn: Callable[[FutureRecordMetadata], object]) -> FutureRecordMetadata: ...

        def add_delivery_callback(
            self, fn: Callable[[BaseException | None, RecordMetadata | None], object]
        ) -> FutureRecordMetadata: ...
else:
    FutureRecordMetadata = RecordFuture


# The methods and properties of FutureRecordMetadata, as functions of the future.

# --- state --------------------------------------------------------------------------------------


def _f_is_done(fut: _FutureFields) -> bool:
    return bool(fut.produce_result.done)


def _f_succeeded(fut: _FutureFields) -> bool:
    return bool(fut.produce_result.done and fut.produce_result.error is None)


def _f_failed(fut: _FutureFields) -> bool:
    return bool(fut.produce_result.done and fut.produce_result.error is not None)


def _f_exception(fut: _FutureFields) -> BaseException | None:
    """(a property) kafka-python: the error once failed (None while pending or succeeded)."""
    return fut.produce_result.error


def _f_value(fut: _FutureFields) -> RecordMetadata | None:
    """(a property) kafka-python: the metadata once succeeded (None otherwise)."""
    r = fut.produce_result
    return _f__metadata(fut) if r.done and r.error is None else None


def _f_partition(fut: _FutureFields) -> int:
    """(a property) The partition the record was given to (known at ``send``)."""
    return fut.produce_result.partition


def _f__metadata(fut: _FutureFields) -> RecordMetadata:
    r = fut.produce_result
    ts = r.log_append_time if r.log_append_time >= 0 else fut.timestamp
    return RecordMetadata(r.topic, r.partition, r.base_offset + fut.index, ts, fut.key_size,
                          fut.value_size, -1, r.log_start_offset)


def _f_get(fut: _FutureFields, timeout: float | None = None) -> RecordMetadata:
    """Wait (at most ``timeout`` seconds; None: no limit) and return the metadata, or raise the
    record's error; :class:`ProducerTimeoutError` when still pending after ``timeout``."""
    r = fut.produce_result
    if not r.done and not r.wait(timeout):
        raise ProducerTimeoutError(f"Timeout after waiting for {timeout} s for the record "
                                   f"to {r.topic}-{r.partition} to be appended")
    if r.error is not None:
        raise r.error
    return _f__metadata(fut)


def _f_result(fut: _FutureFields, timeout: float | None = None) -> RecordMetadata:
    """``concurrent.futures`` spelling of :meth:`get`."""
    return _f_get(fut, timeout)


# --- callbacks ----------------------------------------------------------------------------------


def _f__add(fut: _FutureFields, kind: int, fn: Callable[..., Any]) -> Any:
    r = fut.produce_result
    with r.lock:
        if not r.done:
            if r.callbacks is None:
                r.callbacks = []
            r.callbacks.append((fut, kind, fn))
            return fut
    _f__call(fut, kind, fn)
    return fut


def _f__call(fut: _FutureFields, kind: int, fn: Callable[..., Any]) -> None:
    err = fut.produce_result.error
    if kind == _OK:
        if err is None:
            fn(_f__metadata(fut))
    elif kind == _ERR:
        if err is not None:
            fn(err)
    elif kind == _DONE:
        fn(fut)
    else:
        fn(err, None if err is not None else _f__metadata(fut))


def _f_add_callback(fut: _FutureFields, fn: Callable[[RecordMetadata], Any]) -> Any:
    """kafka-python: ``fn(metadata)`` on success."""
    return _f__add(fut, _OK, fn)


def _f_add_errback(fut: _FutureFields, fn: Callable[[BaseException], Any]) -> Any:
    """kafka-python: ``fn(exception)`` on failure."""
    return _f__add(fut, _ERR, fn)


def _f_add_both(fut: _FutureFields, fn: Callable[[Any], Any]) -> Any:
    """kafka-python: ``fn`` with the metadata or the exception."""
    _f__add(fut, _OK, fn)
    return _f__add(fut, _ERR, fn)


def _f_add_done_callback(fut: _FutureFields, fn: Callable[[Any], Any]) -> Any:
    """``concurrent.futures`` style: ``fn(future)`` once done."""
    return _f__add(fut, _DONE, fn)


def _f_add_delivery_callback(
    fut: _FutureFields, fn: Callable[[BaseException | None, RecordMetadata | None], Any]
) -> Any:
    """confluent-kafka's ``on_delivery(err, metadata)``."""
    return _f__add(fut, _DELIVERY, fn)


def _f__repr(fut: _FutureFields) -> str:
    r = fut.produce_result
    state = "pending" if not r.done else ("error" if r.error is not None else "done")
    return f"<FutureRecordMetadata {r.topic}-{r.partition} #{fut.index} {state}>"


#: attributes of a future that are computed values (properties), not methods
_PROPERTIES = frozenset({"exception", "value", "partition"})
_ATTRIBUTES: dict[str, Callable[..., Any]] = {
    name[3:]: fn for name, fn in list(globals().items()) if name.startswith("_f_") and callable(fn)}
_ATTRIBUTES["done"] = _f_is_done


class _FutureMethods:
    """What the kernel's ``RecordFuture.__getattr__`` asks for a future's attribute."""

    @staticmethod
    def lookup(fut: Any, name: str) -> Any:
        fn = _ATTRIBUTES.get(name)
        if fn is None:
            raise AttributeError(f"'FutureRecordMetadata' object has no attribute {name!r}")
        if name in _PROPERTIES:
            return fn(fut)
        return MethodType(fn, fut)


bind_record_future(_FutureMethods)
