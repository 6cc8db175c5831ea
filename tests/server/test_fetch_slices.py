"""A Fetch answer of thousands of partitions is encoded a slice at a time (issue 35): at 100,000
partitions, encoding the whole answer in one step held the event loop 118 ms on a quiet machine
(and 250-400 ms under a consumer's load). ``tests/server/test_many_partitions_fairness.py`` checks
from a socket that other clients are answered while such a Fetch is read; these count the slices
of its answer, check that what the slices make decodes (kio) as the whole answer, and that an answer
abandoned between two slices leaves no descriptor open; a slice also ends on its clock."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from kafkalog.log.fetch_data_info import FileSlice
from kafkalog.server.fetch_session import FetchContext
from kafkalog.server.handlers import slices
from kafkalog.server.handlers.fetch import PartitionData, _answer_steps, _encode_steps, _Wanted
from kafkalog.server.handlers.slices import ENTRIES_PER_SLICE, SliceCounter
from kafkalog.server.requests.protocol import Request
from tests.server.raw import fetch_response

TOPICS = 5
PER_TOPIC = 1000


def _partitions(committed: bool) -> list[list[PartitionData]]:
    aborted = [(7, 3)] if committed else None
    return [[PartitionData(p, 0, 100 + p, 90 + p, t, aborted, bytes([p % 251]) * (p % 3))
             for p in range(PER_TOPIC)] for t in range(TOPICS)]


@pytest.mark.parametrize("version,committed", [(4, False), (11, True), (12, False), (13, True)])
def test_an_answer_is_encoded_a_slice_at_a_time_and_decodes_whole(version: int, committed: bool,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(slices, "SLICE_SECONDS", 3600.0)     # slices by count only
    keys: list[Any] = [uuid.uuid4() if version >= 13 else f"topic-{t}" for t in range(TOPICS)]
    parts: list[bytes | FileSlice] = []
    steps = _encode_steps(7, version, 0, list(zip(keys, _partitions(committed), strict=True)), 42, parts)
    n_slices = sum(1 for _ in steps)
    assert n_slices == TOPICS * PER_TOPIC // ENTRIES_PER_SLICE
    frame = b"".join(p for p in parts if isinstance(p, bytes))
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    decoded: Any = fetch_response(frame[4:], version)
    if version >= 7:
        assert decoded.session_id == 42
    assert [t.topic_id if version >= 13 else t.topic for t in decoded.responses] == keys
    for t, topic in enumerate(decoded.responses):
        assert [p.partition_index for p in topic.partitions] == list(range(PER_TOPIC))
        for p in topic.partitions:
            i = p.partition_index
            assert (p.high_watermark, p.last_stable_offset) == (100 + i, 90 + i)
            if version >= 5:
                assert p.log_start_offset == t
            assert len(p.records or b"") == i % 3
            if committed:
                assert [(a.producer_id, a.first_offset) for a in p.aborted_transactions] == [(7, 3)]
            else:
                assert p.aborted_transactions is None


def test_an_answer_with_file_slices_across_its_slices_decodes_whole(tmp_path: Path) -> None:
    """Each slice's pieces are joined as the slice ends, and the chunks are parts of their own,
    never joined again (the 51 MB of a Fetch of every partition, joined into one, held the loop
    25-30 ms): a file slice follows a bytes chunk (its partition's header), no part holds more than
    one slice's pieces, and the frame they make (each file slice read in its place) decodes as the
    whole answer."""
    seg = tmp_path / "00000000000000000000.log"
    seg.write_bytes(bytes(range(100)))
    n = 4 * ENTRIES_PER_SLICE
    at = {0: (0, 10), 1500: (10, 20), 3 * ENTRIES_PER_SLICE + 7: (30, 70)}   # index: (position, size)
    fds = []
    pds = []
    for i in range(n):
        if i in at:
            fds.append(os.open(seg, os.O_RDONLY))
            pds.append(PartitionData(i, 0, 5, 5, 0, None, FileSlice(str(seg), fds[-1], *at[i])))
        else:
            pds.append(PartitionData(i, 0, 5, 5, 0, None, b"r" * (i % 2)))
    parts: list[bytes | FileSlice] = []
    try:
        assert sum(1 for _ in _encode_steps(3, 12, 0, [("t", pds)], 0, parts)) >= n // ENTRIES_PER_SLICE
        kinds = [type(p) for p in parts]
        assert kinds.count(FileSlice) == len(at) and kinds[0] is bytes and kinds[-1] is bytes
        assert all(kinds[i - 1] is bytes for i, k in enumerate(kinds) if k is FileSlice)
        # no chunk holds more than a slice's pieces (~38 bytes a partition; the whole is 4 slices)
        assert max(len(p) for p in parts if isinstance(p, bytes)) < ENTRIES_PER_SLICE * 40
        frame = b"".join(p if isinstance(p, bytes) else seg.read_bytes()[p.position:p.position + p.size]
                         for p in parts)
        assert int.from_bytes(frame[:4], "big") == len(frame) - 4
        decoded: Any = fetch_response(frame[4:], 12)
        got = {p.partition_index: p.records or b"" for p in decoded.responses[0].partitions}
        assert len(got) == n
        for i in range(n):
            want = seg.read_bytes()[at[i][0]:sum(at[i])] if i in at else b"r" * (i % 2)
            assert got[i] == want
    finally:
        for fd in fds:
            os.close(fd)


class _Unmetered:
    """The broker as :func:`_answer_steps` sees it when no metrics are kept."""
    metrics = None


def test_an_answer_abandoned_between_two_slices_closes_every_descriptor(tmp_path: Path) -> None:
    seg = tmp_path / "00000000000000000000.log"
    seg.write_bytes(b"x" * 100)
    n = 4 * ENTRIES_PER_SLICE
    wanted: list[Any] = [_Wanted("t", "t", i, 0, 1 << 20) for i in range(n)]
    fds = [os.open(seg, os.O_RDONLY) for _ in range(4)]
    results = [PartitionData(i, 0, 1, 1, 0, None, b"") for i in range(n)]
    for k, fd in enumerate(fds):            # four partitions answered from the file, spread out
        results[k * ENTRIES_PER_SLICE] = PartitionData(k * ENTRIES_PER_SLICE, 0, 1, 1, 0, None,
                                                       FileSlice(str(seg), fd, 0, 100))
    request = Request(1, 12, 9, "c", None, True, 0)
    out: list[bytes | FileSlice] = []
    broker: Any = _Unmetered()
    steps: Any = _answer_steps(broker, request, FetchContext(wanted), results, out)
    for _ in range(10_000):                 # respond, group, then encoded slices up to a file's
        next(steps)
        if any(isinstance(p, FileSlice) for p in out):
            break
    assert sum(isinstance(p, FileSlice) for p in out) == 1        # the answer half made
    steps.close()                           # the connection went away: the coroutine is closed
    assert out == []
    for fd in fds:
        with pytest.raises(OSError):
            os.fstat(fd)


def test_an_answer_run_to_its_end_keeps_its_descriptors_for_the_send(tmp_path: Path) -> None:
    seg = tmp_path / "00000000000000000000.log"
    seg.write_bytes(b"y" * 100)
    n = 2 * ENTRIES_PER_SLICE
    wanted: list[Any] = [_Wanted("t", "t", i, 0, 1 << 20) for i in range(n)]
    fd = os.open(seg, os.O_RDONLY)
    results = [PartitionData(i, 0, 1, 1, 0, None, b"") for i in range(n)]
    results[-1] = PartitionData(n - 1, 0, 1, 1, 0, None, FileSlice(str(seg), fd, 0, 100))
    out: list[bytes | FileSlice] = []
    broker: Any = _Unmetered()
    steps = _answer_steps(broker, Request(1, 12, 9, "c", None, True, 0), FetchContext(wanted),
                          results, out)
    assert sum(1 for _ in steps) >= n // ENTRIES_PER_SLICE
    assert [p for p in out if isinstance(p, FileSlice)][0].fd == fd
    os.fstat(fd)                            # still open: the send closes it
    os.close(fd)


def test_a_slice_of_slow_partitions_ends_on_its_clock() -> None:
    """A slice ends after :data:`slices.SLICE_SECONDS` even when its count is far from full (a
    partition read for the first time opens its files), and its clock starts at its first tick.
    The clock is a list of readings, not the machine's: a loaded machine's sleeps overrun."""
    step = slices.SLICE_SECONDS / 2
    readings = [100.0, 100.0 + step, 100.0 + 2 * step + 1e-6,  # first slice: ends at its budget
                200.0,                                      # the loop served others meanwhile
                200.0 + step, 200.0 + 2 * step - 1e-6]
    count = SliceCounter(per_slice=1000, clock=iter(readings).__next__)
    assert [count.tick() for _ in range(3)] == [False, False, True]
    assert [count.tick() for _ in range(3)] == [False, False, False]   # its clock restarted at 200
    assert count.done == 3


def test_a_slice_ends_on_its_count_whatever_its_clock() -> None:
    count = SliceCounter(per_slice=3, clock=lambda: 5.0)
    assert [count.tick() for _ in range(7)] == [False, False, True, False, False, True, False]


def _results(n: int, hw: int) -> list[PartitionData]:
    return [PartitionData(i, 0, hw, hw, 0, None, b"") for i in range(n)]


def test_a_session_is_made_and_answered_a_slice_at_a_time() -> None:
    """A session's creation and its incremental answers walk its partitions a slice at a time too
    (a Java consumer's session of 100,000 partitions is walked at each of its Fetch requests)."""
    from kafkalog.server.fetch_session import INITIAL_EPOCH, FetchSessionCache
    n = 10
    cache = FetchSessionCache(slots=10)
    wanted: list[Any] = [_Wanted("t", "t", i, 0, 1 << 20) for i in range(n)]
    ctx = cache.new_context(0, INITIAL_EPOCH, False, wanted, [])
    pairs: list[Any] = []
    steps = ctx.respond_steps(_results(n, 5), pairs, 2)
    yields = 0
    try:
        while True:
            next(steps)
            yields += 1
    except StopIteration as done:
        sid = done.value
    assert sid != 0 and yields >= n // 2 + n // 2      # the pairs, then the session's partitions
    assert [p.index for _w, p in pairs] == list(range(n))
    again = cache.new_context(sid, 1, False, [], [])           # incremental: nothing new asked
    moved = _results(n, 5)
    moved[3] = PartitionData(3, 0, 6, 6, 0, None, b"")         # one high watermark moved
    answered: list[Any] = []
    steps = again.respond_steps(moved, answered, 2)
    assert sum(1 for _ in steps) == n // 2
    assert [p.index for _w, p in answered] == [3]


def test_a_session_made_in_slices_asks_for_its_slot_once_made() -> None:
    """Another session took the cache's last slot while this one's partitions were being made:
    this fetch gets no session (id 0), and the cache holds one."""
    from kafkalog.server.fetch_session import INITIAL_EPOCH, FetchSessionCache
    cache = FetchSessionCache(slots=1)
    wanted: list[Any] = [_Wanted("t", "t", i, 0, 1 << 20) for i in range(6)]
    slow = cache.new_context(0, INITIAL_EPOCH, False, list(wanted), [])
    steps = slow.respond_steps(_results(6, 1), [], 2)
    next(steps)                                                 # half made
    quick = cache.new_context(0, INITIAL_EPOCH, False, wanted[:1], [])
    assert quick.respond(_results(1, 1))[0] != 0
    with pytest.raises(StopIteration) as done:
        while True:
            next(steps)
    assert done.value.value == 0 and len(cache) == 1


def test_a_requests_objects_are_released_a_slice_at_a_time() -> None:
    """What a Fetch of many partitions held (its partition list, what each read found) is freed
    :data:`ENTRIES_PER_SLICE` objects at a time, the loop turning between two: freed at once, 100,000
    partitions' objects held it 25-37 ms after the answer was made. Each object is freed (its
    finalizer runs) and the list is left empty."""
    import asyncio
    import weakref

    from kafkalog.server.handlers.slices import release_in_slices
    from tests.server.loop_turns import loop_turns_during

    class Held:
        pass
    items = [Held() for _ in range(10 * ENTRIES_PER_SLICE + 3)]
    refs = [weakref.ref(o) for o in items[::100]]

    assert asyncio.run(loop_turns_during(release_in_slices(items))) >= 10
    assert items == [] and all(r() is None for r in refs)
