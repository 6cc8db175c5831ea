"""Port of Kafka's LeaderEpochFileCacheTest."""


import pytest

from kafkalog.errors import CorruptCheckpointError, KafkalogError
from kafkalog.log.checkpoint import LeaderEpochCheckpointFile
from kafkalog.log.leader_epoch import LeaderEpochFileCache
from tests.racing import race


@pytest.fixture
def cache(tmp_path):
    return LeaderEpochFileCache(tmp_path / "leader-epoch-checkpoint")


def test_assign_persist_reload(tmp_path, cache):
    cache.assign(2, 6)
    cache.assign(3, 8)
    assert cache.epoch_entries() == [(2, 6), (3, 8)]
    assert LeaderEpochCheckpointFile(tmp_path / "leader-epoch-checkpoint").read() == [(2, 6), (3, 8)]
    assert LeaderEpochFileCache(tmp_path / "leader-epoch-checkpoint").epoch_entries() == [(2, 6), (3, 8)]


def test_same_epoch_not_added_twice(cache):
    cache.assign(2, 6)
    assert cache.assign(2, 7) is False
    assert cache.epoch_entries() == [(2, 6)]
    assert cache.assign(2, 5) is True  # smaller start offset replaces
    assert cache.epoch_entries() == [(2, 5)]


def test_non_monotonic_entries_dropped(cache):
    cache.assign(2, 6)
    cache.assign(3, 8)
    cache.assign(4, 11)
    cache.assign(3, 9)  # epoch 3 and 4 removed (epoch >= 3)
    assert cache.epoch_entries() == [(2, 6), (3, 9)]
    cache.assign(5, 7)  # start offsets >= 7 removed
    assert cache.epoch_entries() == [(2, 6), (5, 7)]


def test_negative_rejected(cache):
    with pytest.raises(KafkalogError):
        cache.assign(-1, 0)
    with pytest.raises(KafkalogError):
        cache.assign(0, -1)


def test_end_offset_for(cache):
    assert cache.end_offset_for(-1, 0) == (-1, -1)
    assert cache.end_offset_for(0, 0) == (-1, -1)
    cache.assign(2, 6)
    cache.assign(3, 8)
    cache.assign(4, 11)
    assert cache.end_offset_for(4, 20) == (4, 20)
    assert cache.end_offset_for(2, 20) == (2, 8)
    assert cache.end_offset_for(1, 20) == (1, 6)
    assert cache.end_offset_for(5, 20) == (-1, -1)
    cache2 = cache
    cache2.assign(7, 13)
    assert cache2.end_offset_for(5, 20) == (4, 13)


def test_truncate_from_end(cache):
    for e, o in [(2, 6), (3, 8), (4, 11)]:
        cache.assign(e, o)
    cache.truncate_from_end(12)
    assert cache.epoch_entries() == [(2, 6), (3, 8), (4, 11)]
    cache.truncate_from_end(11)
    assert cache.epoch_entries() == [(2, 6), (3, 8)]
    cache.truncate_from_end(0)
    assert cache.epoch_entries() == []


def test_truncate_from_start(tmp_path, cache):
    for e, o in [(2, 6), (3, 8), (4, 11)]:
        cache.assign(e, o)
    cache.truncate_from_start(5)
    assert cache.epoch_entries() == [(2, 6), (3, 8), (4, 11)]
    cache.truncate_from_start(8)
    assert cache.epoch_entries() == [(3, 8), (4, 11)]
    cache.truncate_from_start(9)
    assert cache.epoch_entries() == [(3, 9), (4, 11)]
    cache.truncate_from_start(100)
    assert cache.epoch_entries() == [(4, 100)]
    assert LeaderEpochCheckpointFile(tmp_path / "leader-epoch-checkpoint").read() == [(4, 100)]


def test_epoch_for_offset(cache):
    assert cache.epoch_for_offset(5) is None
    for e, o in [(0, 0), (1, 5), (3, 10)]:
        cache.assign(e, o)
    assert cache.epoch_for_offset(0) == 0
    assert cache.epoch_for_offset(4) == 0
    assert cache.epoch_for_offset(5) == 1
    assert cache.epoch_for_offset(9) == 1
    assert cache.epoch_for_offset(100) == 3
    assert cache.latest_epoch() == 3 and cache.previous_epoch() == 1


def test_clear_and_flush(tmp_path, cache):
    cache.assign(1, 1)
    cache.clear_and_flush()
    assert LeaderEpochCheckpointFile(tmp_path / "leader-epoch-checkpoint").read() == []


def test_corrupt_checkpoint(tmp_path):
    (tmp_path / "leader-epoch-checkpoint").write_text("0\n1\n-1 5\n")
    with pytest.raises(CorruptCheckpointError):
        LeaderEpochFileCache(tmp_path / "leader-epoch-checkpoint")


def test_readers_without_the_lock_see_whole_entries():
    """Readers take no lock (a fetch, Metadata) while another thread assigns epochs and moves the
    start forward (retention's ``truncate_from_start``): with the interpreter switching threads
    every microsecond (:func:`tests.racing.race`), every entry they read is one the cache held,
    never an epoch of one state with a start offset of another (the columns were lists changed in
    place, one after the other: IndexError and torn entries on CPython 3.11 and 3.13). Epoch ``k``
    starts at ``10 * k`` here, the first entry possibly later in its range."""
    cache = LeaderEpochFileCache(None)
    cache.assign(0, 0)
    k = 0

    def whole(e) -> None:
        assert e is not None and 10 * e.epoch <= e.start_offset < 10 * (e.epoch + 1), e

    def assign_next() -> None:
        nonlocal k
        k += 1
        cache.assign(k, 10 * k)
        if k % 4 == 0:
            cache.truncate_from_start(10 * (k - 2) + 5)

    def read() -> None:
        whole(cache.latest_entry())
        whole(cache.earliest_entry())
        latest = cache.latest_epoch()
        assert latest is not None
        found = cache.epoch_for_offset(1 << 40)         # (epochs only grow here)
        assert found is not None and found >= latest, (found, latest)
        entries = cache.epoch_entries()
        for e in entries[1:]:
            assert e.start_offset == 10 * e.epoch, entries
        whole(entries[0])
        assert [e.epoch for e in entries] == sorted({e.epoch for e in entries}), entries

    assigns, *reads = race(assign_next, read, read, seconds=3.0,
                              at_least=(1001, 1001, 1001))
    assert assigns > 1000 and min(reads) > 1000
