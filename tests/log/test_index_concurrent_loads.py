"""Two threads loading the same index file at once (issue 35). At 100,000 partitions a first
Produce to every partition after a restart took the data directory offline with ``read index
failed: Bad file descriptor``: the append loaded a time index while the first retention pass loaded
it on its own thread, and the two loads shared the index's one descriptor slot (each closed the
other's). The loads, resizes and closes of an index now take its lock; a load finding the index
loaded by the other thread meanwhile does nothing."""

from __future__ import annotations

import threading
from pathlib import Path

from kafkalog.log.index.offset_index import OffsetIndex
from kafkalog.log.index.time_index import TimeIndex

FILES = 300
ROUNDS = 10


def _made(tmp_path: Path) -> list[tuple[Path, Path]]:
    out = []
    for i in range(FILES):
        oi = OffsetIndex(tmp_path / f"{i:020d}.index", i * 1000, 4096)
        ti = TimeIndex(tmp_path / f"{i:020d}.timeindex", i * 1000, 4096)
        for k in range(1, 4):
            oi.append(i * 1000 + k, k * 100)
            ti.maybe_append(1_000 + k, i * 1000 + k)
        oi.close()
        ti.close()
        out.append((tmp_path / f"{i:020d}.index", tmp_path / f"{i:020d}.timeindex"))
    return out


Seen = list[list[tuple[int, int]]]


def _load_on_two_threads(indexes: list[tuple[OffsetIndex, TimeIndex]]) -> tuple[list[BaseException], Seen]:
    """Each thread asks of every index, in the same order, what an append asks (the time index's
    last entry) and what a reader asks (a lookup): each the first use of the index on its thread."""
    errors: list[BaseException] = []
    seen: Seen = [[], []]
    start = threading.Barrier(2)

    def load(k: int) -> None:
        start.wait()
        try:
            for i, (oi, ti) in enumerate(indexes):
                seen[k].append((ti.last_entry.offset, oi.lookup(i * 1000 + 2).position))
        except BaseException as e:     # (reported by the test: an error on a thread is lost)
            errors.append(e)
    threads = [threading.Thread(target=load, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return errors, seen


def test_two_threads_loading_the_same_indexes_each_see_them_whole(tmp_path: Path) -> None:
    files = _made(tmp_path)
    for _ in range(ROUNDS):
        indexes = [(OffsetIndex(o, i * 1000, 4096), TimeIndex(t, i * 1000, 4096))
                   for i, (o, t) in enumerate(files)]
        errors, seen = _load_on_two_threads(indexes)
        assert errors == []
        assert seen[0] == seen[1] == [(i * 1000 + 3, 200) for i in range(FILES)]
        for oi, ti in indexes:
            assert oi.entries == 3 and ti.entries == 3
            oi.close()
            ti.close()


def test_threads_first_to_ask_for_a_transaction_index_share_one(tmp_path: Path, monkeypatch) -> None:
    """A segment's transaction index is made on its first use, and making one opens the file (when
    it exists) and reads its entries. Threads asking at once (a read_committed Fetch on the event
    loop, the retention thread) get the same index, and one descriptor stays open: before, each
    made its own and the descriptors of those not kept were never closed. The window is widened
    by a pause in the making (the files and reads are real)."""
    import os
    import time

    from kafkalog.log import segment as segment_module
    from kafkalog.log.index.txn_index import AbortedTxn, TransactionIndex

    first = segment_module.LogSegment(str(tmp_path), 0)
    first.update_txn_index([AbortedTxn(7, 0, 5, 6), AbortedTxn(8, 6, 9, 10)])
    first.close()
    path = os.path.realpath(segment_module.LogSegment(str(tmp_path), 0).txn_index_path)

    class SlowToMake(TransactionIndex):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            time.sleep(0.05)

    monkeypatch.setattr(segment_module, "TransactionIndex", SlowToMake)
    seg = segment_module.LogSegment(str(tmp_path), 0)
    start = threading.Barrier(4)
    got: list[object] = []

    def ask() -> None:
        start.wait()
        got.append(seg.txn_index)
    threads = [threading.Thread(target=ask) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)

    def open_on_path() -> int:
        n = 0
        for fd in os.listdir("/proc/self/fd"):
            try:
                n += os.readlink(f"/proc/self/fd/{fd}") == path
            except OSError:
                pass
        return n
    assert len(got) == 4 and all(index is got[0] for index in got), got
    assert open_on_path() == 1
    assert [t.producer_id for t in seg.txn_index.all_entries()] == [7, 8]
    seg.close()
    assert open_on_path() == 0


def test_making_one_transaction_index_does_not_hold_up_another_segments(tmp_path: Path, monkeypatch) -> None:
    """Making a transaction index reads its file whole: while one segment's making is held (a
    long file on a slow disk), another segment's index is made at once. Before, one lock served
    every segment of the process."""
    from kafkalog.log import segment as segment_module
    from kafkalog.log.index.txn_index import TransactionIndex

    held, release = threading.Event(), threading.Event()

    class HeldForSegmentZero(TransactionIndex):
        def __init__(self, start_offset: int, *args, **kwargs) -> None:
            super().__init__(start_offset, *args, **kwargs)
            if start_offset == 0:
                held.set()
                release.wait(30)

    monkeypatch.setattr(segment_module, "TransactionIndex", HeldForSegmentZero)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    slow = segment_module.LogSegment(str(tmp_path / "a"), 0)
    others = [segment_module.LogSegment(str(tmp_path / "b"), base) for base in range(100, 108)]
    stripes = len(segment_module._TXN_INDEX_LOCKS)
    # one whose lock is not segment zero's (eight segments all sharing its stripe: 1 in 64**8)
    other = next(s for s in others if (id(s) >> 4) % stripes != (id(slow) >> 4) % stripes)
    maker = threading.Thread(target=lambda: slow.txn_index)
    maker.start()
    try:
        assert held.wait(30)
        made: list[object] = []
        asker = threading.Thread(target=lambda: made.append(other.txn_index))
        asker.start()
        asker.join(10)
        assert made and made[0] is other.txn_index, "held up by another segment's making"
    finally:
        release.set()
        maker.join(30)
    for s in [slow, *others]:
        s.close()
