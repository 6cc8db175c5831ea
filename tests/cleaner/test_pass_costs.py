"""Issue 35: the cleaner's pass (every ``log.cleaner.backoff.ms``, 15 s) looks at the compacted
topics' logs only. It walked every log of the data directory, sorted, each pass: at 100,000
partitions of deleting topics a few hundred milliseconds of the GIL every 15 s for nothing to
clean. Counted in calls (``sys.setprofile``), not timed: the same pass over a directory of 100
and of 2,000 idle partitions of deleting topics, beside one compacted topic, makes the same calls."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkalog.cleaner.threads import LogCleaner
from kafkalog.log.manager import LogManager
from tests.log.test_scale_costs import _calls


def _pass_calls(path: Path, idle: int) -> int:
    path.mkdir()
    m = LogManager(path / "data", {}, background=False)
    try:
        m.create_topic("compacted", 2, {"cleanup.policy": "compact"})
        m.create_topic("deleting", idle)
        for p in range(2):
            m.get_log("compacted", p).append_records([(b"k", b"v1"), (b"k", b"v2")])
        cleaner = LogCleaner(m)                 # (not started: its pass is run here)
        cleaner.manager.grab_filthiest_compacted_log()      # a first pass: its hooks registered
        assert [tp.topic for tp, _log in m.compacted_logs()] == ["compacted"] * 2
        return _calls(cleaner.manager.grab_filthiest_compacted_log)
    finally:
        m.close()


def test_a_cleaner_pass_does_not_walk_the_deleting_topics(tmp_path: Path) -> None:
    assert _pass_calls(tmp_path / "few", 100) == _pass_calls(tmp_path / "many", 2000)


@pytest.mark.parametrize("policy", ["compact", "compact,delete"])
def test_the_broker_default_policy_compacting_makes_every_log_the_cleaners(tmp_path: Path,
                                                                           policy: str) -> None:
    m = LogManager(tmp_path / "data", {"log.cleanup.policy": policy}, background=False)
    try:
        m.create_topic("a", 2)
        m.create_topic("b", 1, {"cleanup.policy": "delete"})
        assert [(tp.topic, tp.partition) for tp, _log in m.compacted_logs()] == [("a", 0), ("a", 1)]
    finally:
        m.close()
