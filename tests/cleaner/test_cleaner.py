"""Port of the intent of Kafka's LogCleanerTest (spec §5.15) on real files."""
import types

import pytest

from kafkalog.cleaner.cleaner import last_records_of_active_producers
from kafkalog.cleaner.grouping import group_segments_by_size
from kafkalog.record.constants import CompressionType
from tests.racing import race

from .helpers import NOW, append, append_marker, batches, clean, data_records, latest_per_key, open_log, records


def _fill(log, n, keys, **kw):
    for i in range(n):
        append(log, [(b"k%d" % (i % keys), b"v%d" % i)], **kw)


def test_keeps_latest_value_per_key_and_offsets(tmp_path):
    log = open_log(str(tmp_path / "t-0"), **{"segment.bytes": 1500})
    _fill(log, 300, 13)
    expected = latest_per_key(data_records(log))
    all_offsets = {r.offset: (r.key, r.value) for r in data_records(log)}
    end, stats = clean(log)
    recs = data_records(log)
    assert latest_per_key(recs) == expected
    offs = [r.offset for r in recs]
    assert offs == sorted(offs)
    for r in recs:                       # offsets never change
        assert all_offsets[r.offset] == (r.key, r.value)
    cleaned = [r for r in recs if r.offset < end]
    assert len({r.key for r in cleaned}) == len(cleaned)
    assert end == log.active_segment.base_offset
    # reading from a compacted-away offset returns the next surviving record
    gone = next(o for o in range(end) if o not in set(offs))
    first = next(log.records(gone))
    assert first.offset == min(o for o in offs if o > gone)


@pytest.mark.parametrize("codec", list(CompressionType))
def test_codec_and_batch_offsets_preserved(tmp_path, codec):
    log = open_log(str(tmp_path / "t-0"), **{"segment.bytes": 4000})
    for i in range(40):
        append(log, [(b"a", b"x%d" % i), (b"b%d" % i, b"y"), (b"a", b"z%d" % i)],
               compression=codec)
    before = {(b.base_offset, b.last_offset) for b in batches(log)}
    clean(log)
    for b in batches(log):
        assert (b.base_offset, b.last_offset) in before
        assert b.compression == codec
        b.ensure_valid()
    assert latest_per_key(data_records(log))[b"a"] == b"z39"


def test_tombstones_stamped_then_removed_after_delete_retention(tmp_path):
    log = open_log(str(tmp_path / "t-0"), **{"segment.bytes": 600, "delete.retention.ms": 1000})
    _fill(log, 30, 3)
    append(log, [(b"k1", None)])
    _fill(log, 30, 3)
    append(log, [(b"gone", b"1")])
    append(log, [(b"gone", None)])
    for i in range(20):
        append(log, [(b"pad%d" % i, b"p")])
    clean(log, now=NOW)
    tomb = [(b, r) for b, r in records(log) if r.key == b"gone"]
    assert len(tomb) == 1 and tomb[0][1].value is None
    b = tomb[0][0]
    assert b.has_delete_horizon and b.delete_horizon_ms == NOW + 1000
    assert tomb[0][1].timestamp == NOW           # record timestamp preserved
    clean(log, now=NOW + 500, first_dirty=0)       # before the horizon: still there
    assert any(r.key == b"gone" for r in data_records(log))
    clean(log, now=NOW + 1001, first_dirty=0)      # after: removed
    assert not any(r.key == b"gone" for r in data_records(log))


def test_keyless_records_dropped_and_counted(tmp_path):
    log = open_log(str(tmp_path / "t-0"), **{"segment.bytes": 800})
    for i in range(30):
        append(log, [(None, b"nokey"), (b"k", b"v%d" % i)])
    _end, stats = clean(log)
    assert stats.invalid_messages > 0
    assert all(r.key is not None for r in data_records(log) if r.offset < _end)


def test_aborted_transaction_removed_commit_kept(tmp_path):
    log = open_log(str(tmp_path / "t-0"), **{"segment.bytes": 700, "delete.retention.ms": 10})
    append(log, [(b"a", b"committed")], producer_id=1, producer_epoch=0, base_sequence=0,
           is_transactional=True)
    append_marker(log, 1, 0, commit=True)
    append(log, [(b"a", b"aborted")], producer_id=2, producer_epoch=0, base_sequence=0,
           is_transactional=True)
    append_marker(log, 2, 0, commit=False)
    _fill(log, 40, 5)
    # the loader-less test log has no txn index: write the aborted txn entry like Kafka would
    from kafkalog.log.index.txn_index import AbortedTxn
    seg = log.segments[0]
    with open(seg.txn_index_path, "wb") as f:
        f.write(AbortedTxn(producer_id=2, first_offset=2, last_offset=3, last_stable_offset=2).to_bytes())
    clean(log)
    vals = [r.value for r in data_records(log) if r.key == b"a"]
    assert b"aborted" not in vals and b"committed" in vals


def test_last_batch_of_active_producer_retained_empty(tmp_path):
    log = open_log(str(tmp_path / "t-0"), **{"segment.bytes": 700})
    append(log, [(b"x", b"1")], producer_id=7, producer_epoch=3, base_sequence=0)
    append(log, [(b"x", b"2")])
    _fill(log, 40, 4)
    clean(log)
    bs = [b for b in batches(log) if b.magic == 2 and b.producer_id == 7]
    assert len(bs) == 1
    b = bs[0]
    assert b.count == 0 and b.size_in_bytes == 61 and b.base_timestamp == -1
    assert (b.producer_epoch, b.base_sequence, b.base_offset, b.last_offset) == (3, 0, 0, 0)


def test_partial_cleaning_with_tiny_map_progresses_in_rounds(tmp_path):
    log = open_log(str(tmp_path / "t-0"), **{"segment.bytes": 500})
    _fill(log, 120, 12)
    expected = latest_per_key(data_records(log))
    dirty = 0
    rounds = 0
    while dirty < log.active_segment.base_offset and rounds < 100:
        end, _ = clean(log, map_memory=24 * 4, first_dirty=dirty, load_factor=0.75)
        assert end > dirty
        dirty = end
        rounds += 1
    assert rounds > 1
    assert latest_per_key(data_records(log)) == expected


def test_group_segments_by_size(tmp_path):
    log = open_log(str(tmp_path / "t-0"), **{"segment.bytes": 300})
    _fill(log, 60, 60)
    segs = list(log.segments[:-1])
    size = segs[0].size
    groups = group_segments_by_size(segs, size * 3, 10 << 20, log.active_segment.base_offset)
    assert all(sum(s.size for s in g) <= size * 3 for g in groups)
    assert [s for g in groups for s in g] == segs
    assert all(len(g) <= 3 for g in groups)
    # offset span limit: a huge gap splits groups
    class S:
        def __init__(self, base, size=10):
            self.base_offset, self.size = base, size
            self.offset_index_path = self.time_index_path = "/nonexistent"
            self.offset_index = self.time_index = types.SimpleNamespace(is_loaded=False, entry_size=8)
    fake = [S(0), S(10), S(2**31 + 20), S(2**31 + 30)]
    gs = group_segments_by_size(fake, 1 << 30, 1 << 20, 2**31 + 40)
    assert [len(g) for g in gs] == [1, 1, 2]      # span = next base - 1 - group base


def test_uncleanable_section_untouched(tmp_path):
    log = open_log(str(tmp_path / "t-0"), **{"segment.bytes": 500})
    _fill(log, 100, 5)
    upper = log.segments[3].base_offset
    tail_before = [seg.log.pread(0, seg.size) for seg in log.segments[3:]]
    clean(log, upper=upper)
    assert [seg.log.pread(0, seg.size) for seg in log.segments[-len(tail_before):]] == tail_before


def test_legacy_v1_batches_cleaned(tmp_path):
    log = open_log(str(tmp_path / "t-0"), **{"segment.bytes": 600})
    for i in range(60):
        log.append_as_follower(__import__("kafkalog.record.builder", fromlist=["x"]).build_batch(
            [(b"k%d" % (i % 4), b"v%d" % i, NOW)], magic=1, base_offset=log.log_end_offset))
    expected = latest_per_key(data_records(log))
    clean(log)
    assert latest_per_key(data_records(log)) == expected
    assert all(b.magic == 1 for b in batches(log))


def test_active_producers_read_while_another_thread_appends(tmp_path):
    """The cleaner thread reads a log's producers while appends in another thread add new ones and
    expiry takes them out: with the interpreter switching threads every microsecond
    (:func:`tests.racing.race`), the read never fails on the map changing under it (it did:
    "dictionary changed size during iteration", in 3 of 3 runs of this loop on CPython 3.13 and on
    3.11), and it sees what was appended."""
    log = open_log(str(tmp_path / "t-0"))
    appends = seen = 0

    def append_one() -> None:
        nonlocal appends
        append(log, [(b"k", b"v")], producer_id=appends + 1, producer_epoch=0, base_sequence=0)
        appends += 1
        if appends % 64 == 0:               # the expiry task, ten days on: every one goes
            log.remove_expired_producers(NOW + 10 * 86_400_000)

    def read() -> None:
        nonlocal seen
        got = last_records_of_active_producers(log, NOW)
        assert all(r.last_data_offset is not None and r.producer_epoch == 0 for r in got.values())
        seen = max(seen, len(got))

    _, *reads = race(append_one, read, read, seconds=3.0,
                     at_least=(1001, 101, 101))
    assert appends > 1000 and min(reads) > 100 and seen > 1
    log.close()
