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
from typing import Any, NamedTuple

from kafkalog.errors import KafkalogError
from kafkalog.record.kernel import RecordFuture

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
                fut._call(kind, fn)
            except Exception:
                # as Kafka's producer: a failing user callback is logged, the others still run
                logger.exception("Error executing a callback of a record sent to %s-%d", self.topic,
                                 self.partition)


class FutureRecordMetadata(RecordFuture):
    """The future of one record (``send``'s result). Its fields (``produce_result``, ``index``,
    ``timestamp``, ``key_size``, ``value_size``) are set by the record kernel's ``ProducerBatch``,
    which creates it, or by :meth:`create`."""

    __slots__ = ()

    @classmethod
    def create(cls, result: ProduceRequestResult, index: int, timestamp: int, key_size: int,
               value_size: int) -> FutureRecordMetadata:
        f = cls.__new__(cls)
        f.produce_result = result
        f.index = index
        f.timestamp = timestamp
        f.key_size = key_size
        f.value_size = value_size
        return f

    # --- state --------------------------------------------------------------------------------------

    def is_done(self) -> bool:
        return self.produce_result.done

    done = is_done

    def succeeded(self) -> bool:
        return self.produce_result.done and self.produce_result.error is None

    def failed(self) -> bool:
        return self.produce_result.done and self.produce_result.error is not None

    @property
    def exception(self) -> BaseException | None:
        """kafka-python: the error once failed (None while pending or succeeded)."""
        return self.produce_result.error

    @property
    def value(self) -> RecordMetadata | None:
        """kafka-python: the metadata once succeeded (None otherwise)."""
        r = self.produce_result
        return self._metadata() if r.done and r.error is None else None

    @property
    def partition(self) -> int:
        """The partition the record was given to (known at ``send``)."""
        return self.produce_result.partition

    def _metadata(self) -> RecordMetadata:
        r = self.produce_result
        ts = r.log_append_time if r.log_append_time >= 0 else self.timestamp
        return RecordMetadata(r.topic, r.partition, r.base_offset + self.index, ts, self.key_size,
                              self.value_size, -1, r.log_start_offset)

    def get(self, timeout: float | None = None) -> RecordMetadata:
        """Wait (at most ``timeout`` seconds; None: no limit) and return the metadata, or raise the
        record's error; :class:`ProducerTimeoutError` when still pending after ``timeout``."""
        r = self.produce_result
        if not r.done and not r.wait(timeout):
            raise ProducerTimeoutError(f"Timeout after waiting for {timeout} s for the record "
                                       f"to {r.topic}-{r.partition} to be appended")
        if r.error is not None:
            raise r.error
        return self._metadata()

    def result(self, timeout: float | None = None) -> RecordMetadata:
        """``concurrent.futures`` spelling of :meth:`get`."""
        return self.get(timeout)

    # --- callbacks ----------------------------------------------------------------------------------

    def _add(self, kind: int, fn: Callable[..., Any]) -> FutureRecordMetadata:
        r = self.produce_result
        with r.lock:
            if not r.done:
                if r.callbacks is None:
                    r.callbacks = []
                r.callbacks.append((self, kind, fn))
                return self
        self._call(kind, fn)
        return self

    def _call(self, kind: int, fn: Callable[..., Any]) -> None:
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

    def add_callback(self, fn: Callable[[RecordMetadata], Any]) -> FutureRecordMetadata:
        """kafka-python: ``fn(metadata)`` on success."""
        return self._add(_OK, fn)

    def add_errback(self, fn: Callable[[BaseException], Any]) -> FutureRecordMetadata:
        """kafka-python: ``fn(exception)`` on failure."""
        return self._add(_ERR, fn)

    def add_both(self, fn: Callable[[Any], Any]) -> FutureRecordMetadata:
        """kafka-python: ``fn`` with the metadata or the exception."""
        self._add(_OK, fn)
        return self._add(_ERR, fn)

    def add_done_callback(self, fn: Callable[[FutureRecordMetadata], Any]) -> FutureRecordMetadata:
        """``concurrent.futures`` style: ``fn(future)`` once done."""
        return self._add(_DONE, fn)

    def add_delivery_callback(self, fn: Callable[[BaseException | None, RecordMetadata | None], Any]
                              ) -> FutureRecordMetadata:
        """confluent-kafka's ``on_delivery(err, metadata)``."""
        return self._add(_DELIVERY, fn)

    def __repr__(self) -> str:
        r = self.produce_result
        state = "pending" if not r.done else ("error" if r.error is not None else "done")
        return f"<FutureRecordMetadata {r.topic}-{r.partition} #{self.index} {state}>"
