"""A Produce of more than one slice appends on the appending thread, not on the event loop (issue
35): at 100,000 partitions strace showed single writes, opens and closes of the appends waiting
10-20 ms in the file system (a journal commit, a page under write-back), several in one slice, and
every other client of the broker waited with them (another client's ApiVersions: 85-145 ms).

The wait here is a real one of the same kind: the partition's lock held by another thread, as the
cleaner's swap or a retention deletion holds it. Over real sockets to a broker in this process:
while one partition of a 130-partition Produce cannot be appended to, another client is answered,
a small Produce to another partition is appended and answered, the Produce's earlier slice is
appended and its answer waits; once the lock is let go, every partition is appended once, in
order. Before, the event loop itself waited for the lock and nobody was answered."""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kafkalog.record.builder import build_batch
from kafkalog.server.handlers.slices import PARTITIONS_PER_SLICE
from kafkalog.testing import LocalBroker
from tests.server.raw import connect, recv_frame, request_frame, response_of

PARTITIONS = 2 * PARTITIONS_PER_SLICE + 2
#: the partition whose lock the test holds (in the second slice)
HELD = PARTITIONS_PER_SLICE + 10


@pytest.fixture
def broker() -> Iterator[LocalBroker]:
    with LocalBroker("thread", {"auto.create.topics.enable": "false"}) as b:
        b.create_topic("wide", PARTITIONS)
        yield b


def _produce(correlation_id: int, partitions: range, value: bytes) -> bytes:
    records = build_batch([(b"k", value, 1_700_000_000_000)])
    return request_frame(0, 9, correlation_id, {"transactional_id": None, "acks": -1, "timeout": 30000,
                                                "topic_data": [{"name": "wide", "partition_data": [
                                                    {"index": p, "records": records} for p in partitions]}]})


def _api_versions(correlation_id: int) -> bytes:
    return request_frame(18, 3, correlation_id, {"client_software_name": "b", "client_software_version": "1"})


def _nothing_arrived(s: socket.socket) -> bool:
    return not select.select([s], [], [], 0)[0]


def _log(broker: LocalBroker, partition: int) -> Any:
    return broker._runner._runtime.broker.log("wide", partition)    # type: ignore[union-attr]


def test_others_are_answered_while_an_append_of_a_large_produce_waits(broker: LocalBroker) -> None:
    held = _log(broker, HELD)
    lock: threading.RLock = held._lock
    with connect(broker.port, timeout=30) as a, connect(broker.port, timeout=10) as b:
        assert lock.acquire(timeout=10)
        try:
            a.sendall(_produce(1, range(PARTITIONS), b"wide"))
            # another client's request: answered while the append waits (before: a timeout here)
            b.sendall(_api_versions(2))
            versions: Any = response_of(recv_frame(b) or b"", 18, 3)
            assert versions.error_code == 0
            # the large Produce's partitions before the held one are appended (the thread's work
            # goes on meanwhile), the held one and those after it are not, and it is not answered
            deadline = time.monotonic() + 30
            while _log(broker, HELD - 1).log_end_offset == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert [_log(broker, p).log_end_offset for p in (1, HELD - 1, HELD, HELD + 1)] == [1, 1, 0, 0]
            # a small Produce (one slice: appended on the event loop) to a partition the large one
            # has appended to: answered meanwhile, after the large one's record
            b.sendall(_produce(3, range(1), b"small"))
            small: Any = response_of(recv_frame(b) or b"", 0, 9)
            assert [(p.index, p.error_code, p.base_offset) for t in small.responses
                    for p in t.partition_responses] == [(0, 0, 1)]
            assert _nothing_arrived(a)
        finally:
            lock.release()
        answer: Any = response_of(recv_frame(a) or b"", 0, 9)
    assert [(p.index, p.error_code, p.base_offset) for t in answer.responses
            for p in t.partition_responses] == [(p, 0, 0) for p in range(PARTITIONS)]
    assert [broker.values("wide", p) for p in (0, HELD, PARTITIONS - 1)] == \
        [[b"wide", b"small"], [b"wide"], [b"wide"]]
    assert all(_log(broker, p).log_end_offset == 1 for p in range(1, PARTITIONS))


def test_a_refused_partition_keeps_its_place_among_the_appended(broker: LocalBroker) -> None:
    """The answers of a sliced Produce come back in the request's order, those refused before the
    append (an unknown partition, a batch not at offset 0) among those appended on the thread."""
    good = build_batch([(b"k", b"v", 1_700_000_000_000)])
    bad = bytearray(good)
    bad[7] = 1                                  # base offset 1: Kafka's INVALID_RECORD
    order = list(range(PARTITIONS)) + [PARTITIONS + 5]
    frame = request_frame(0, 9, 7, {"transactional_id": None, "acks": 1, "timeout": 30000, "topic_data": [
        {"name": "wide", "partition_data": [{"index": p, "records": bytes(bad) if p == 70 else good}
                                            for p in order]}]})
    with connect(broker.port, timeout=30) as s:
        s.sendall(frame)
        answer: Any = response_of(recv_frame(s) or b"", 0, 9)
    got = [(p.index, p.error_code) for t in answer.responses for p in t.partition_responses]
    assert got == [(p, 87 if p == 70 else 3 if p >= PARTITIONS else 0) for p in order]
    assert _log(broker, 70).log_end_offset == 0 and _log(broker, 71).log_end_offset == 1


def test_a_small_produce_to_a_partition_whose_file_is_closed_appends_off_the_event_loop(
        broker: LocalBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Produce of one slice appends on the event loop, unless a partition's file must be opened
    first (its descriptor evicted by the process's bound, or not opened since a load): that open
    may evict another descriptor and wait for the disk's fsyncs, so the append runs on the
    appending thread (a producer writing to 100,000 partitions made the loop do both for each of
    its appends).
    Here the partition's lock is held as well: another client is answered meanwhile (before, the
    event loop waited for the lock and nobody was)."""
    from kafkalog.log.file_handles import HANDLES

    held = _log(broker, HELD)
    held.flush()                                    # (clean: the bound closes it at once)
    monkeypatch.setattr(HANDLES, "limit", 1)
    deadline = time.monotonic() + 10
    while held.active_descriptor_open and time.monotonic() < deadline:
        with HANDLES.lock:
            HANDLES._evict()
        time.sleep(0.01)
    monkeypatch.undo()
    assert not held.active_descriptor_open
    lock: threading.RLock = held._lock
    with connect(broker.port, timeout=30) as a, connect(broker.port, timeout=10) as b:
        assert lock.acquire(timeout=10)
        try:
            a.sendall(_produce(1, range(HELD, HELD + 1), b"cold"))
            b.sendall(_api_versions(2))
            versions: Any = response_of(recv_frame(b) or b"", 18, 3)
            assert versions.error_code == 0
            assert _nothing_arrived(a)
        finally:
            lock.release()
        answer: Any = response_of(recv_frame(a) or b"", 0, 9)
    assert [(p.index, p.error_code, p.base_offset) for t in answer.responses
            for p in t.partition_responses] == [(HELD, 0, 0)]
    assert broker.values("wide", HELD) == [b"cold"]
    assert held.active_descriptor_open
