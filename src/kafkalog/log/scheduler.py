"""``Scheduler``: one daemon thread running delayed and periodic tasks (Kafka's ``KafkaScheduler``).

Tasks sit in a heap ordered by their next run time. A task that raises is logged (with its name)
and, when periodic, rescheduled: one failing task never stops the others (Kafka's scheduler logs
and carries on too). :meth:`Scheduler.shutdown` stops the thread after the task currently running;
tasks not yet due are dropped, except that ``run_pending=True`` runs the one-shot tasks first
(used for delayed file deletion, so a clean close leaves no ``.deleted`` files behind).

The scheduler is also a plain callable ``scheduler(delay_seconds, fn)`` because that is the hook
:class:`kafkalog.log.log.Log` uses for asynchronous flushes and ``.deleted`` removal.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, List, Optional

logger = logging.getLogger("kafkalog.scheduler")


@dataclass(order=True)
class ScheduledTask:
    """One entry of the heap: run ``fn`` at ``due`` (``time.monotonic()`` seconds), then every
    ``period`` seconds when ``period`` is not None."""

    due: float
    seq: int
    name: str = field(compare=False)
    fn: Callable[[], object] = field(compare=False, repr=False)
    period: Optional[float] = field(compare=False, default=None)
    cancelled: bool = field(compare=False, default=False)
    runs: int = field(compare=False, default=0)
    failures: int = field(compare=False, default=0)

    def cancel(self) -> None:
        """Do not run this task again."""
        self.cancelled = True


class Scheduler:
    """A single daemon thread with a heap of delayed/periodic tasks.

    ``name`` prefixes the thread name (``kafkalog-scheduler``). Start it with :meth:`startup`
    (tasks may be scheduled before; they run once the thread is up).
    """

    def __init__(self, name: str = "kafkalog-scheduler") -> None:
        self.name = name
        self._heap: List[ScheduledTask] = []
        self._cond = threading.Condition()
        self._seq = itertools.count()
        self._thread: Optional[threading.Thread] = None
        self._running = False
        self._stopped = False

    # --- lifecycle -------------------------------------------------------------------------------

    def startup(self) -> None:
        """Start the worker thread (idempotent)."""
        with self._cond:
            if self._running:
                return
            self._running = True
            self._stopped = False
            self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
            self._thread.start()

    @property
    def is_started(self) -> bool:
        return self._running

    def shutdown(self, run_pending: bool = False, timeout: Optional[float] = 30.0) -> None:
        """Stop the worker thread and wait for it (the task running now completes). With
        ``run_pending`` the pending one-shot tasks are run in the caller's thread afterwards."""
        with self._cond:
            self._stopped = True
            self._running = False
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        with self._cond:
            pending = [t for t in self._heap if not t.cancelled and t.period is None]
            self._heap.clear()
        if run_pending:
            for t in sorted(pending):
                self._run(t)

    # --- scheduling ------------------------------------------------------------------------------

    def schedule(self, name: str, fn: Callable[[], object], delay_ms: float = 0,
                 period_ms: Optional[float] = None) -> ScheduledTask:
        """Run ``fn`` after ``delay_ms`` and then every ``period_ms`` (when given, > 0)."""
        period = None if period_ms is None or period_ms <= 0 else period_ms / 1000.0
        task = ScheduledTask(time.monotonic() + max(delay_ms, 0) / 1000.0, next(self._seq), name, fn,
                             period)
        with self._cond:
            heapq.heappush(self._heap, task)
            self._cond.notify_all()
        return task

    def schedule_once(self, name: str, fn: Callable[[], object], delay_ms: float = 0) -> ScheduledTask:
        """Run ``fn`` once after ``delay_ms``."""
        return self.schedule(name, fn, delay_ms, None)

    def __call__(self, delay_seconds: float, fn: Callable[[], object]) -> ScheduledTask:
        """The :class:`~kafkalog.log.log.Log` hook: run ``fn`` once after ``delay_seconds``."""
        return self.schedule(getattr(fn, "__name__", "task"), fn, delay_seconds * 1000.0)  # a partial has none

    def pending(self) -> List[ScheduledTask]:
        """A snapshot of the tasks waiting to run, soonest first."""
        with self._cond:
            return sorted(t for t in self._heap if not t.cancelled)

    # --- worker ----------------------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._stopped:
                        return
                    while self._heap and self._heap[0].cancelled:
                        heapq.heappop(self._heap)
                    if not self._heap:
                        self._cond.wait()
                        continue
                    wait = self._heap[0].due - time.monotonic()
                    if wait <= 0:
                        task = heapq.heappop(self._heap)
                        break
                    self._cond.wait(min(wait, 3600.0))
            self._run(task)
            if task.period is not None and not task.cancelled:
                task.due = max(task.due + task.period, time.monotonic())
                task.seq = next(self._seq)
                with self._cond:
                    if not self._stopped:
                        heapq.heappush(self._heap, task)

    def _run(self, task: ScheduledTask) -> None:
        try:
            task.fn()
            task.runs += 1
        except BaseException as e:
            task.failures += 1
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            logger.error("Uncaught exception in scheduled task '%s'", task.name, exc_info=True)
