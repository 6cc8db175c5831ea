"""The retention task keyed by due time (issue 35): a partition is visited when its offsets,
segments or configuration changed since its last visit, or when its first segment breaches
``retention.ms``, and not in between (at 100,000 partitions a pass over the 55,000 holding data
took 1 s of the interpreter lock every ``log.retention.check.interval.ms``). Each test counts the
visits (``LogManager.task_visits``) on a manager whose clock the test moves."""

from __future__ import annotations

from pathlib import Path

from kafkalog.log.manager import LogManager
from kafkalog.record.builder import build_batch

T = 1_700_000_000_000
RETENTION_MS = 10_000


def _manager(tmp_path: Path, clock: list[int]) -> LogManager:
    return LogManager(tmp_path / "data", {"log.segment.delete.delay.ms": 0}, background=False,
                      clock=lambda: clock[0])


def _filled(m: LogManager, topic: str = "t") -> None:
    """Batches stamped T, T+1, ... in segments of about three batches."""
    m.create_topic(topic, 1, {"segment.bytes": 500, "retention.ms": RETENTION_MS})
    for i in range(10):
        m.get_log(topic, 0).append(build_batch([(None, b"z" * 100, T + i)]))


def _visits(m: LogManager) -> tuple[int, int]:
    """(visits, segments deleted) of one pass."""
    before = m.task_visits
    deleted = sum(r.num_deleted for r in m.cleanup_logs().values())
    return m.task_visits - before, deleted


def test_a_partition_is_visited_again_only_when_its_first_segment_breaches(tmp_path: Path) -> None:
    clock = [T]
    with _manager(tmp_path, clock) as m:
        _filled(m)
        m.create_topic("idle", 3)
        m.cleanup_logs()                            # the first pass looks at everything
        log = m.get_log("t", 0)
        segments = len(log.segments)
        first = log.segments[0].largest_timestamp()
        assert segments > 2 and first < T + 9
        for now in (T + 1, first + RETENTION_MS // 2, first + RETENTION_MS):   # not breached yet
            clock[0] = now
            assert _visits(m) == (0, 0), now
        clock[0] = first + RETENTION_MS + 1         # "now - largest > retention.ms": due
        visits, deleted = _visits(m)
        assert visits == 1 and deleted == 1 and len(log.segments) == segments - 1
        assert _visits(m) == (1, 0)                 # it deleted: looked at once more, then due later
        second = log.segments[0].largest_timestamp()
        clock[0] = second + RETENTION_MS
        assert _visits(m) == (0, 0)
        clock[0] = second + RETENTION_MS + 1
        assert _visits(m)[1] == 1


def test_an_append_a_config_change_and_a_log_start_move_are_each_visited(tmp_path: Path) -> None:
    clock = [T]
    with _manager(tmp_path, clock) as m:
        _filled(m)
        m.cleanup_logs()
        assert _visits(m) == (0, 0)
        log = m.get_log("t", 0)
        log.append(build_batch([(None, b"late", T + 20)]))
        assert _visits(m) == (1, 0)                 # moved: looked at, nothing to delete
        assert _visits(m) == (0, 0)
        clock[0] = T + 1_000
        assert _visits(m) == (0, 0)                 # retention.ms is 10 s
        m.alter_topic_config("t", {"retention.ms": 1})
        visits, deleted = _visits(m)
        assert visits == 1 and deleted > 2
        m.alter_topic_config("t", {"retention.ms": RETENTION_MS})
        for i in range(6):
            log.append(build_batch([(None, b"z" * 100, T + 30 + i)]))
        m.cleanup_logs()
        assert _visits(m) == (0, 0) and len(log.segments) > 2
        assert log.maybe_increment_log_start_offset(log.segments[1].base_offset, "test")
        visits, deleted = _visits(m)
        assert visits == 1 and deleted == 1         # the log-start-offset breach


def test_a_segment_stamped_in_the_future_is_looked_at_every_pass(tmp_path: Path) -> None:
    """Each pass warns of it (``retention.future.timestamp.policy``), so it is never put off."""
    clock = [T]
    with _manager(tmp_path, clock) as m:
        m.create_topic("f", 1, {"retention.ms": RETENTION_MS})
        m.get_log("f", 0).append(build_batch([(None, b"x", T + 10 * 3_600_000)]))
        for _ in range(3):
            assert _visits(m) == (1, 0)
            assert set(m.last_retention) == {"f-0"}


def test_a_topic_without_time_retention_is_not_visited_until_it_moves(tmp_path: Path) -> None:
    clock = [T]
    with _manager(tmp_path, clock) as m:
        m.create_topic("forever", 1, {"retention.ms": -1})
        m.get_log("forever", 0).append(build_batch([(None, b"x", T)]))
        assert _visits(m) == (1, 0)
        clock[0] = T + 10 * 365 * 86_400_000
        assert _visits(m) == (0, 0)
        m.delete_topic("forever")
        m.cleanup_logs()                            # (its deletion may be looked at once)
        assert _visits(m) == (0, 0)


def test_an_empty_compacted_partition_costs_no_visit(tmp_path: Path) -> None:
    """A compacted partition holding data is the cleaner's and stays on the list (its visit is a
    look at its policy); an empty one is put off until it moves, as any other."""
    clock = [T]
    with _manager(tmp_path, clock) as m:
        m.create_topic("c", 4, {"cleanup.policy": "compact"})
        m.get_log("c", 0).append(build_batch([(b"k", b"v", T)]))
        m.cleanup_logs()
        assert _visits(m) == (1, 0)


def test_partitions_changed_during_a_pass_are_visited_by_the_next(tmp_path: Path) -> None:
    """A pass takes the marks whole and begins new ones: the appends made while it runs (here
    by a publish listener of the one partition it visits, as its deletion publishes) are marks
    of the next pass, not lost with the ones the pass took."""
    clock = [T]
    with _manager(tmp_path, clock) as m:
        m.create_topic("r", 4, {"segment.bytes": 300, "retention.bytes": 600})
        logs = [m.get_log("r", p) for p in range(4)]
        for log in logs[1:]:
            log.append(build_batch([(None, b"x", T)]))
        m.cleanup_logs()
        assert _visits(m) == (0, 0)                 # every partition settled
        for _ in range(10):
            logs[0].append(build_batch([(None, b"z" * 100, T)]))
        appended: list[int] = []

        def append_to_the_others(_log: object) -> None:
            if not appended:
                for log in logs[1:]:
                    appended.append(log.append(build_batch([(None, b"meanwhile", T)])).first_offset)
        logs[0].add_publish_listener(append_to_the_others)
        visits, deleted = _visits(m)
        assert visits == 1 and deleted > 0 and appended == [1, 1, 1]
        visits, _ = _visits(m)
        assert visits == 4                          # the three appended to, and the one that deleted
        assert _visits(m) == (0, 0)


def test_appends_racing_the_passes_leave_no_partition_unvisited(tmp_path: Path) -> None:
    """A pass takes the marks whole; an append during it (before or after its visit of the
    partition) marks the partition again, so once the appends stop, the scheduled passes leave
    nothing that a visit of every partition would still delete (``retention.bytes``)."""
    from kafkalog.log.retention import delete_old_segments
    from tests.racing import race
    clock = [T]
    with _manager(tmp_path, clock) as m:
        m.create_topic("r", 4, {"segment.bytes": 300, "retention.bytes": 600})
        logs = [m.get_log("r", p) for p in range(4)]
        n = [0]

        def append() -> None:
            logs[n[0] % 4].append(build_batch([(None, b"z" * 100, T)]))
            n[0] += 1
        def a_pass() -> None:
            m.cleanup_logs()
        appends, passes = race(append, a_pass, seconds=2, at_least=(101, 11))
        assert appends > 100 and passes > 10
        for _ in range(3):                          # the passes that follow the last append
            m.cleanup_logs()
        assert [len(log.segments) > 1 for log in logs] == [True] * 4
        assert [delete_old_segments(log).num_deleted for log in logs] == [0] * 4
