"""The background scheduler: periodic and one-shot tasks, errors logged not fatal, clean shutdown."""

from __future__ import annotations

import logging
import threading

from kafkalog.log.scheduler import Scheduler


def test_periodic_task_runs_repeatedly_and_errors_are_not_fatal(caplog):
    s = Scheduler()
    s.startup()
    hits = []
    done = threading.Event()

    def good():
        hits.append(1)
        if len(hits) >= 3:
            done.set()

    def bad():
        raise RuntimeError("boom")

    with caplog.at_level(logging.ERROR, logger="kafkalog.scheduler"):
        t_bad = s.schedule("bad", bad, 0, 5)
        s.schedule("good", good, 0, 5)
        assert done.wait(30)
    s.shutdown()
    assert len(hits) >= 3
    assert t_bad.failures >= 1
    assert "bad" in caplog.text


def test_one_shot_order_and_run_pending_on_shutdown():
    s = Scheduler()
    s.startup()
    order = []
    ev = threading.Event()
    s.schedule_once("b", lambda: order.append("b"), 20)
    s.schedule_once("a", lambda: (order.append("a"), ev.set()), 0)
    assert ev.wait(30)
    later = []
    s.schedule_once("later", lambda: later.append(1), 3_600_000)
    s(3600.0, lambda: later.append(2))       # the Log hook form
    s.shutdown(run_pending=True)
    assert order[0] == "a"
    assert sorted(later) == [1, 2]
    assert not s.is_started


def test_cancelled_task_does_not_run_and_shutdown_without_pending():
    s = Scheduler()
    ran = []
    t = s.schedule_once("x", lambda: ran.append(1), 0)
    t.cancel()
    s.schedule_once("y", lambda: ran.append(2), 3_600_000)
    s.startup()
    s.shutdown()
    assert ran == []
