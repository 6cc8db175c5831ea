"""No client waits for another's work on thousands of partitions (issue 35): a Produce to every
partition, a consumer's Fetch of all it is assigned, and a producer's pipeline of requests are
done a slice at a time, the broker answering the other connections in between.

No timing is asserted: the tests check an order. On connection A a long-polling Fetch (200 ms on an
empty partition) goes first, pipelined with the work under test, so that the broker is on that work
when A's first answer arrives; then connection B asks ApiVersions, and B's answer must come while A
still waits for the answer to that work. Before (the previous main): the whole Produce or Fetch ran
in one step of the event loop, and the connection's task answered a pipeline's requests one after
the other without letting go of it, so B's request was read only after A had been answered whole."""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kafkalog.record.builder import build_batch
from tests.server.broker_process import BrokerProcess
from tests.server.raw import connect, fetch_frame, fetch_response, recv_frame, request_frame, response_of

#: partitions of the topic every test works on: 32 slices of kafkalog.server.handlers.slices' 64
PARTITIONS = 2048
#: Produce requests of one partition each pipelined behind the long poll
PIPELINED = 300


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(str(tmp_path_factory.mktemp("fair") / "data")).running() as b:
        with connect(b.port, timeout=300) as s:
            s.sendall(request_frame(19, 7, 1, {"topics": [
                {"name": name, "num_partitions": n, "replication_factor": 1, "assignments": [], "configs": []}
                for name, n in (("wide", PARTITIONS), ("idle", 1))], "timeout": 300000, "validate_only": False}))
            created: Any = response_of(recv_frame(s) or b"", 19, 7)
            assert [t.error_code for t in created.topics] == [0, 0]
            # answered once committed: the partitions are made afterwards (NOT_LEADER_OR_FOLLOWER
            # until then, as Kafka answers); the tests start once the last one is made
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                s.sendall(request_frame(2, 7, 2, {"replica_id": -1, "isolation_level": 0, "topics": [
                    {"name": "wide", "partitions": [{"partition_index": PARTITIONS - 1,
                                                     "current_leader_epoch": -1, "timestamp": -2}]}]}))
                listed: Any = response_of(recv_frame(s) or b"", 2, 7)
                if listed.topics[0].partitions[0].error_code == 0:
                    break
                time.sleep(0.1)
        yield b


def _long_poll(correlation_id: int) -> bytes:
    """A Fetch that waits 200 ms for a record that does not come (the empty topic 'idle')."""
    return fetch_frame(12, correlation_id, [("idle", [(0, 0, 1 << 20)])], max_wait_ms=200, min_bytes=1)


def _produce(correlation_id: int, partitions: range) -> bytes:
    records = build_batch([(b"k", b"v", 1_700_000_000_000)])
    return request_frame(0, 9, correlation_id, {"transactional_id": None, "acks": 1, "timeout": 30000,
                                                "topic_data": [{"name": "wide", "partition_data": [
                                                    {"index": p, "records": records} for p in partitions]}]})


def _api_versions(correlation_id: int) -> bytes:
    return request_frame(18, 3, correlation_id, {"client_software_name": "b", "client_software_version": "1"})


def _frames_ready(s: socket.socket) -> int:
    """Whole response frames that have arrived on ``s`` (read, not waited for)."""
    data = b""
    while select.select([s], [], [], 0)[0]:
        chunk = s.recv(1 << 20)
        if not chunk:
            break
        data += chunk
    n = 0
    while len(data) >= 4:
        size = int.from_bytes(data[:4], "big", signed=True)
        if len(data) < 4 + size:
            break
        data = data[4 + size:]
        n += 1
    return n


def _b_answered_while_a_works(broker: BrokerProcess, work: list[bytes]) -> int:
    """A sends the long poll and ``work`` in one write; once A's long poll is answered, B asks
    ApiVersions. Returns how many of A's answers to ``work`` had arrived when B had its answer."""
    with connect(broker.port, timeout=120) as a, connect(broker.port, timeout=120) as b:
        a.sendall(_long_poll(1) + b"".join(work))
        polled: Any = fetch_response(recv_frame(a) or b"", 12)
        assert [p.error_code for t in polled.responses for p in t.partitions] == [0]
        b.sendall(_api_versions(99))
        versions: Any = response_of(recv_frame(b) or b"", 18, 3)
        assert versions.error_code == 0
        arrived = _frames_ready(a)
        a.settimeout(120)
        rest = len(work) - arrived
        for _ in range(rest):           # A's work is answered whole afterwards
            assert recv_frame(a) is not None
        return arrived


def test_a_produce_to_every_partition_lets_others_in(broker: BrokerProcess) -> None:
    arrived = _b_answered_while_a_works(broker, [_produce(2, range(PARTITIONS))])
    assert arrived == 0, "a Produce to 2,048 partitions was answered before another client's " \
                         "ApiVersions: it held the event loop"


def test_a_fetch_of_every_partition_lets_others_in(broker: BrokerProcess) -> None:
    fetch_all = fetch_frame(12, 2, [("wide", [(p, 0, 1 << 20) for p in range(PARTITIONS)])])
    arrived = _b_answered_while_a_works(broker, [fetch_all])
    assert arrived == 0, "a Fetch of 2,048 partitions was answered before another client's " \
                         "ApiVersions: it held the event loop"


def test_a_pipeline_of_produce_requests_lets_others_in(broker: BrokerProcess) -> None:
    work = [_produce(10 + i, range(i, i + 1)) for i in range(PIPELINED)]
    arrived = _b_answered_while_a_works(broker, work)
    assert arrived < PIPELINED, "every one of a pipeline's 300 Produce requests was answered " \
                                "before another client's ApiVersions: they held the event loop"


def test_a_receive_of_pipelined_produce_requests_lets_others_in(broker: BrokerProcess) -> None:
    """Nothing waits on A this time: its 1,200 Produce requests (one partition each, ~190 KB, one
    receive of the broker's 256 KiB) were all answered in the readable callback that received them,
    one step of the event loop (librdkafka at 10,000 partitions: 830 ms), before B's ApiVersions
    sent right after them was read. Now 16 at most are answered there, the rest by A's task, which
    lets B in between two of them."""
    work = b"".join(_produce(10 + i, range(i, i + 1)) for i in range(1200))
    assert len(work) < 256 * 1024
    with connect(broker.port, timeout=120) as a, connect(broker.port, timeout=120) as b:
        a.sendall(work)
        b.sendall(_api_versions(99))
        versions: Any = response_of(recv_frame(b) or b"", 18, 3)
        assert versions.error_code == 0
        arrived = _frames_ready(a)
        a.settimeout(120)
        for _ in range(1200 - arrived):
            assert recv_frame(a) is not None
    assert arrived < 1200, "every one of 1,200 pipelined Produce requests received at once was " \
                           "answered before another client's ApiVersions: they held the event loop"
