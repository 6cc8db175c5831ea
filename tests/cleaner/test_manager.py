"""Port of the intent of Kafka's LogCleanerManagerTest (spec §5.16)."""

from kafkalog.cleaner import LogCleaner, LogCleanerManager
from kafkalog.cleaner.config import CleanerConfig
from kafkalog.cleaner.manager import cleanable_offsets
from kafkalog.log.naming import TopicPartition

from .helpers import NOW, append, open_log


def _log(path, n, keys, **cfg):
    log = open_log(path, **{"segment.bytes": 400, **cfg})
    for i in range(n):
        append(log, [(b"k%d" % (i % keys), b"v%d" % i)])
    return log


def test_filthiest_log_first_and_uncleanable_skipped(tmp_path):
    a = _log(str(tmp_path / "a-0"), 60, 60)       # no duplicates but all dirty
    b = _log(str(tmp_path / "b-0"), 60, 2)
    logs = {TopicPartition("a", 0): a, TopicPartition("b", 0): b}
    m = LogCleanerManager(lambda: list(logs.items()), clock=lambda: NOW)
    # write a checkpoint that makes "a" mostly clean
    m.update_checkpoints(str(tmp_path), update=(TopicPartition("a", 0), a.segments[-2].base_offset))
    first = m.grab_filthiest_compacted_log()
    assert first.topic_partition == TopicPartition("b", 0)
    assert first.cleanable_ratio == 1.0
    # b is in progress; a's dirty ratio is below min.cleanable.dirty.ratio (0.5)
    assert m.grab_filthiest_compacted_log() is None
    assert 0 < m.dirtiest_log_cleanable_ratio < 0.5
    m.done_cleaning(first, None)
    assert m.grab_filthiest_compacted_log().topic_partition == TopicPartition("b", 0)


def test_checkpoint_reset_when_out_of_range(tmp_path):
    log = _log(str(tmp_path / "t-0"), 30, 3)
    fd, unc, force = cleanable_offsets(log, 10_000, NOW)
    assert (fd, force) == (log.log_start_offset, True)
    fd, unc, force = cleanable_offsets(log, -5, NOW)
    assert (fd, force) == (log.log_start_offset, True)
    fd, unc, force = cleanable_offsets(log, 3, NOW)
    assert (fd, force) == (3, False) and unc == log.active_segment.base_offset


def test_min_compaction_lag_limits_cleanable_range(tmp_path):
    log = open_log(str(tmp_path / "t-0"), **{"segment.bytes": 400, "min.compaction.lag.ms": 1000})
    for i in range(30):
        append(log, [(b"k", b"v", NOW - 10_000 if i < 15 else NOW)])
    fd, unc, _ = cleanable_offsets(log, None, NOW)
    assert 0 < unc < log.active_segment.base_offset
    seg = next(s for s in log.segments if s.base_offset == unc)
    assert seg.largest_timestamp() > NOW - 1000


def test_active_segment_only_is_not_cleanable(tmp_path):
    log = _log(str(tmp_path / "t-0"), 1, 1, **{"segment.bytes": 1 << 20})
    m = LogCleanerManager(lambda: [(TopicPartition("t", 0), log)], clock=lambda: NOW)
    assert m.grab_filthiest_compacted_log() is None


def test_delete_policy_logs_ignored_and_max_lag_forces(tmp_path):
    d = _log(str(tmp_path / "d-0"), 60, 2, **{"cleanup.policy": "delete"})
    c = _log(str(tmp_path / "c-0"), 60, 60, **{"min.cleanable.dirty.ratio": 1.0,
                                                "max.compaction.lag.ms": 1})
    m = LogCleanerManager(lambda: [(TopicPartition("d", 0), d), (TopicPartition("c", 0), c)],
                          clock=lambda: NOW + 10_000)
    ltc = m.grab_filthiest_compacted_log()
    assert ltc.topic_partition == TopicPartition("c", 0) and ltc.need_compaction_now


def test_checkpoint_written_after_cleaning_and_failure_backoff(tmp_path):
    ok = _log(str(tmp_path / "ok-0"), 80, 4)
    bad = _log(str(tmp_path / "bad-0"), 80, 4)
    # corrupt a byte in the middle of bad's first segment (a CRC-covered byte)
    p = bad.segments[0].log_path
    with open(p, "r+b") as f:
        f.seek(70)
        f.write(b"\xff")
    logs = [(TopicPartition("bad", 0), bad), (TopicPartition("ok", 0), ok)]
    cl = LogCleaner(logs=lambda: logs, config=CleanerConfig(dedupe_buffer_size=1 << 20),
                    clock=lambda: NOW)
    c = cl.new_cleaner()
    results = [cl.clean_filthiest(c) for _ in range(3)]
    results = [r for r in results if r is not None]
    errs = [r for r in results if r.error]
    oks = [r for r in results if not r.error]
    assert len(errs) == 1 and errs[0].topic_partition.topic == "bad"
    assert "corrupt" in errs[0].error.lower() and "00000000000000000000.log" in errs[0].error
    assert len(oks) == 1 and oks[0].topic_partition.topic == "ok"
    cp = cl.manager.read_checkpoint(str(tmp_path))
    assert cp[TopicPartition("ok", 0)] == oks[0].end_offset
    u = cl.manager.uncleanable[TopicPartition("bad", 0)]
    assert u.failures == 1 and u.retry_at_ms > NOW
