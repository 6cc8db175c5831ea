"""Issue 35: no per-request or periodic work grows with the number of idle partitions. The same
look-ups and periodic tasks on a data directory of 100 and of 2,000 partitions (the topic asked
for has 10 in both) make the same number of Python calls (counted with ``sys.setprofile``, not
timed). Before: ``has_topic``/``partitions_of`` walked every partition, the flusher sorted every
partition every second, each checkpoint task visited and rewrote every partition, then formatted
every partition's line again to write the file."""

from __future__ import annotations

import gc
import sys
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kafkalog.log.manager import LogManager


def _calls(fn: Callable[[], Any]) -> int:
    """Python and C calls made by ``fn()``. The collector is off meanwhile: a collection that
    falls inside ``fn`` runs the weakref callbacks of an earlier test's garbage (a ``WeakSet``'s
    removals), calls that are not ``fn``'s and came more often in the 2,000-partition run."""
    n = 0
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()

    def prof(frame: Any, event: str, arg: Any) -> None:
        nonlocal n
        if event in ("call", "c_call"):
            n += 1
    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(None)
        if was_enabled:
            gc.enable()
    return n


@pytest.fixture(scope="module", params=[100, 2000], ids=["100", "2000"])
def manager(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LogManager]:
    data = tmp_path_factory.mktemp(f"scale{request.param}") / "data"
    m = LogManager(data, {"log.flush.interval.ms": 1 << 40}, background=False)
    m.create_topic("t", 10)
    for i in range(request.param // 10 - 1):
        m.create_topic(f"other-{i}", 10)
    try:
        yield m
    finally:
        m.close()


def _costs(m: LogManager) -> dict[str, int]:
    tid = m.topic_id("t")
    m.topic_by_id(uuid.uuid4())         # reads every topic's ID once (a start-up cost)
    m.write_checkpoints()               # the first write of each file covers every partition
    m.cleanup_logs()
    m.get_log("t", 3).append_records([b"one record"])
    out = {
        "has_topic": _calls(lambda: m.has_topic("t")),
        "has_topic(missing)": _calls(lambda: m.has_topic("missing")),
        "partitions_of": _calls(lambda: m.partitions_of("t")),
        "get_log": _calls(lambda: m.get_log("t", 3)),
        "topic_id": _calls(lambda: m.topic_id("t")),
        "topic_by_id": _calls(lambda: m.topic_by_id(tid)),
        "topic_by_id(unknown)": _calls(lambda: m.topic_by_id(uuid.uuid4())),
        "flusher tick": _calls(m.flush_dirty_logs),
        # one partition moved: the task visits it, and only it (then rewrites the file, whose
        # format holds every partition, as Kafka's does)
        "hw checkpoint visits": _visits(m, m.checkpoint_high_watermarks),
        "hw checkpoint, nothing moved": _calls(m.checkpoint_high_watermarks),
        # the file rewritten, but only the moved partition's topic formatted again in Python (the
        # topics' texts joined in C): before, a line per partition every few seconds
        "hw checkpoint, one moved": _calls(lambda: (m.get_log("t", 5).append_records([b"two"]),
                                                    m.checkpoint_high_watermarks())),
        "log start checkpoint": _calls(m.checkpoint_log_start_offsets),
        "retention": _calls(m.cleanup_logs),
        "retention, again": _calls(m.cleanup_logs),
    }
    m.write_checkpoints()
    visits = m.task_visits
    m.flush_dirty_logs()
    m.write_checkpoints()
    m.cleanup_logs()
    out["task visits, nothing moved"] = m.task_visits - visits    # retention: none (the one with data not due)
    return out


def _visits(m: LogManager, fn: Callable[[], Any]) -> int:
    before = m.task_visits
    fn()
    return m.task_visits - before


_seen: dict[int, dict[str, int]] = {}


def test_costs_do_not_grow_with_idle_partitions(manager: LogManager) -> None:
    costs = _costs(manager)
    _seen[len(manager.partitions())] = costs
    assert costs["task visits, nothing moved"] == 0, costs
    if len(_seen) == 2:
        small, big = _seen[100], _seen[2000]
        grew = {k: (small[k], big[k]) for k in small if big[k] > small[k]}
        assert not grew, f"calls at 100 vs 2,000 partitions: {grew}"
