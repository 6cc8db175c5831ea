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
from typing import TYPE_CHECKING, Any

from kafkalog.client.record_metadata import RecordMetadata
from kafkalog.errors import ProducerTimeoutError

if TYPE_CHECKING:      # the compiled kernel's future, typed by its pure-Python twin
    from kafkalog.client._kernel_py import RecordFuture
else:
    from kafkalog.client.kernel import RecordFuture

logger = logging.getLogger("kafkalog.producer")

__all__ = ["FutureRecordMetadata", "ProduceRequestResult", "ProducerTimeoutError", "RecordMetadata"]

#: The future of one record (``send``'s result, kafka-python's ``FutureRecordMetadata``): the
#: client kernel's ``RecordFuture`` (small, pooled, not tracked by the cyclic GC), whose methods
#: are its own (``get``, ``add_callback``, ... :class:`kafkalog.client._kernel_py.RecordFuture`).
FutureRecordMetadata = RecordFuture


_Callback = tuple[Any, int, Callable[..., Any]]     # (future, kind, fn)


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
