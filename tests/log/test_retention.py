"""Retention (UnifiedLogTest retention cases, spec §4.10) on real files."""

from __future__ import annotations

import logging
import os

from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalog.log.config import LogConfig
from kafkalog.log.log import Log
from kafkalog.log.retention import deletable_segments, delete_old_segments
from kafkalog.log.scheduler import Scheduler
from kafkalog.record.builder import build_batch

NOW = 1_700_000_000_000


def _log(tmp_path, name="t-0", **cfg):
    base = {"segment.bytes": 1024, "file.delete.delay.ms": 0}
    base.update(cfg)
    return Log.open(str(tmp_path / name), LogConfig(base), clock=lambda: NOW)


def _fill(log, n, ts=lambda i: NOW - 10_000 + i, size=200):
    for i in range(n):
        log.append(build_batch([(None, b"x" * size, ts(i))]))


def test_size_retention_never_goes_below_limit(tmp_path):
    log = _log(tmp_path, **{"retention.bytes": 2000})
    _fill(log, 20)
    sizes_before = [s.size for s in log.segments]
    assert len(sizes_before) > 3
    r = delete_old_segments(log)
    assert r.num_deleted > 0
    assert all(d.reason == "retention-size" for d in r.deleted)
    assert log.size >= 2000
    # deleting one more segment would have gone below the limit
    assert log.size - log.segments[0].size < 2000
    assert log.log_start_offset == log.segments[0].base_offset
    log.close()


def test_time_retention_uses_largest_timestamp(tmp_path):
    log = _log(tmp_path, **{"retention.ms": 5000})
    # first segments old, last ones recent
    _fill(log, 12, ts=lambda i: NOW - 60_000 if i < 6 else NOW - 10)
    r = delete_old_segments(log)
    assert r.num_deleted >= 1
    for d in r.deleted:
        assert d.reason == "retention-time" and NOW - d.largest_timestamp > 5000
    assert all(s.largest_timestamp() > NOW - 5000 for s in log.segments if s.size)
    log.close()


def test_everything_expired_rolls_empty_active_segment(tmp_path):
    log = _log(tmp_path, **{"retention.ms": 1000})
    _fill(log, 8, ts=lambda i: NOW - 100_000)
    leo = log.log_end_offset
    r = delete_old_segments(log)
    assert len(log.segments) == 1 and log.active_segment.size == 0
    assert log.active_segment.base_offset == leo == log.log_start_offset
    assert r.log_start_offset == leo
    log.close()


def test_nothing_at_or_above_high_watermark_is_deleted(tmp_path):
    log = _log(tmp_path, **{"retention.ms": 1000})
    _fill(log, 8, ts=lambda i: NOW - 100_000)
    hw = log.segments[2].base_offset
    r = delete_old_segments(log, high_watermark=hw)
    assert r.num_deleted == 2
    assert all(d.next_offset <= hw for d in r.deleted)
    assert log.segments[0].base_offset == hw
    log.close()


def test_log_start_offset_breach(tmp_path):
    log = _log(tmp_path, **{"retention.ms": -1})
    _fill(log, 10)
    third = log.segments[2].base_offset
    log.maybe_increment_log_start_offset(third + 1)
    r = delete_old_segments(log)
    assert {d.reason for d in r.deleted} == {"log-start-offset"}
    assert log.segments[0].base_offset == third
    log.close()


def test_compact_only_policy_keeps_data_but_honours_log_start_offset(tmp_path):
    log = _log(tmp_path, **{"cleanup.policy": "compact", "retention.ms": 1, "retention.bytes": 1})
    _fill(log, 10, ts=lambda i: NOW - 100_000)
    n = len(log.segments)
    assert delete_old_segments(log).num_deleted == 0
    assert len(log.segments) == n
    log.maybe_increment_log_start_offset(log.segments[1].base_offset)
    assert delete_old_segments(log).num_deleted == 1
    log.close()


def test_compact_delete_policy_applies_time_retention(tmp_path):
    log = _log(tmp_path, **{"cleanup.policy": "compact,delete", "retention.ms": 1000})
    _fill(log, 10, ts=lambda i: NOW - 100_000)
    assert delete_old_segments(log).num_deleted > 0
    log.close()


def test_deleted_files_remain_until_file_delete_delay(tmp_path):
    sched = Scheduler()
    sched.startup()
    d = tmp_path / "t-0"
    log = Log.open(str(d), LogConfig({"segment.bytes": 1024, "retention.ms": 1000,
                                      "file.delete.delay.ms": 3_600_000}),
                   clock=lambda: NOW, scheduler=sched)
    _fill(log, 8, ts=lambda i: NOW - 100_000)
    r = delete_old_segments(log)
    assert r.num_deleted > 0
    names = os.listdir(d)
    deleted = [n for n in names if n.endswith(".deleted")]
    assert any(n.endswith(".log.deleted") for n in deleted)
    assert not any(n == "00000000000000000000.log" for n in names)
    assert sched.pending(), "physical deletion must be scheduled, not done"
    sched.shutdown(run_pending=True)
    assert not [n for n in os.listdir(d) if n.endswith(".deleted")]
    log.close()


def test_future_timestamp_reported_and_pins_by_default(tmp_path, caplog):
    log = _log(tmp_path, **{"retention.ms": 1000})
    future = NOW + 10 * 86_400_000
    _fill(log, 10, ts=lambda i: future if i == 0 else NOW - 100_000)
    with caplog.at_level(logging.WARNING, logger="kafkalog.retention"):
        r = delete_old_segments(log)
    assert r.future_timestamp_segments and r.future_timestamp_segments[0].base_offset == 0
    assert r.future_timestamp_segments[0].ahead_ms == future - NOW
    assert r.num_deleted == 0, "Kafka's behaviour: the future segment pins everything after it"
    assert "in the future" in caplog.text
    log.close()


def test_future_timestamp_mtime_policy_deletes(tmp_path):
    log = _log(tmp_path, **{"retention.ms": 1000, "retention.future.timestamp.policy": "mtime"})
    future = NOW + 10 * 86_400_000
    _fill(log, 10, ts=lambda i: future if i == 0 else NOW - 100_000)
    for s in log.segments:
        s.set_last_modified_ms(NOW - 50_000)
    r = delete_old_segments(log)
    assert r.future_timestamp_segments[0].policy == "mtime"
    assert 0 in [d.base_offset for d in r.deleted]
    log.close()


def test_empty_segment_time_falls_back_to_mtime(tmp_path):
    log = _log(tmp_path, **{"retention.ms": 1000})
    _fill(log, 3, ts=lambda i: -1)   # no timestamps -> mtime
    for s in log.segments:
        s.set_last_modified_ms(NOW)
    assert delete_old_segments(log).num_deleted == 0
    for s in log.segments:
        s.set_last_modified_ms(NOW - 100_000)
    assert delete_old_segments(log).num_deleted > 0
    log.close()


@settings(max_examples=15, deadline=None)
@given(st.lists(st.integers(min_value=50, max_value=600), min_size=1, max_size=25),
       st.integers(min_value=0, max_value=6000))
def test_size_retention_property(tmp_path_factory, sizes, limit):
    tmp = tmp_path_factory.mktemp("ret")
    log = Log.open(str(tmp / "t-0"), LogConfig({"segment.bytes": 1024, "retention.bytes": limit,
                                                "file.delete.delay.ms": 0}), clock=lambda: NOW)
    for s in sizes:
        log.append(build_batch([(None, b"y" * s, NOW)]))
    leo = log.log_end_offset
    before = log.size
    delete_old_segments(log)
    assert log.log_end_offset == leo
    if before >= limit:
        assert log.size >= limit or log.size == 0 and limit == 0
    else:
        assert log.size == before
    assert log.log_start_offset == log.segments[0].base_offset
    log.close()


def test_deletable_segments_excludes_empty_last(tmp_path):
    log = _log(tmp_path)
    assert deletable_segments(log, lambda s, n: True) == []
    log.close()
