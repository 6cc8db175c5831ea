"""Client quotas in force (Kafka 2.0+ throttling, KIP-219): a Produce over ``producer_byte_rate`` and a
Fetch over ``consumer_byte_rate`` are answered at once with ``throttle_time_ms``, then their connection
is not read for that long (the next request's answer waits); a throttled Fetch is answered empty, as
Kafka's. Over 30 s a producer sending back to back is held to its quota, on Kafka 4.4 and kafkalog
alike (``slow``)."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import pytest

from kafkalog.record import build_batch
from tests.server import differential as d
from tests.server import raw
from tests.server.broker_process import BrokerProcess

RAW_CLIENT = "raw"          # the client id of tests.server.raw's requests


def _set_quota(c: d.Conn, client: str, key: str, value: float) -> None:
    r = c.request(49, 1, {"entries": [{"entity": [{"entity_type": "client-id", "entity_name": client}],
                                       "ops": [{"key": key, "value": value, "remove": False}]}],
                          "validate_only": False})
    assert int(r.entries[0].error_code) == 0, r


def _produce_frame(corr: int, topic: str, value: bytes) -> bytes:
    records = build_batch([(b"k", value, int(time.time() * 1000), [])])
    return raw.request_frame(0, 9, corr, {"transactional_id": None, "acks": 1, "timeout": 30000, "topic_data": [
        {"name": topic, "topic_id": None, "partition_data": [{"index": 0, "records": records}]}]})


def _api_versions(s: socket.socket, corr: int) -> None:
    s.sendall(raw.api_versions_v0(corr))


def _muted(s: socket.socket, throttle_ms: int) -> tuple[bool, bytes | None]:
    """Whether the next answer is held back for at least half the throttle time, and the answer."""
    s.settimeout(throttle_ms / 2000)
    try:
        first = s.recv(1, socket.MSG_PEEK)
        held = not first
    except TimeoutError:
        held = True
    s.settimeout(60)
    return held, raw.recv_frame(s)


@pytest.fixture
def quota_broker(tmp_path: Any) -> Any:
    b = BrokerProcess(str(tmp_path / "data"), []).start()
    try:
        yield b
    finally:
        if b.alive():
            assert b.stop() == 0, b.stderr()


def test_produce_and_fetch_over_quota_are_throttled_and_muted(quota_broker: BrokerProcess) -> None:
    """10 kB/s for the client: a 110 kB Produce gets throttle_time_ms of about a second (Kafka's
    (rate - quota) / quota x window) and the ApiVersions sent right after waits at least half of it; a
    Fetch whose answer would exceed consumer_byte_rate gets an empty answer with throttle_time_ms, and the
    connection is muted; a Metadata request over request_percentage carries a throttle time too."""
    admin = d.Conn("kafkalog", quota_broker.port)
    admin.create_topic("throttled")
    _set_quota(admin, RAW_CLIENT, "producer_byte_rate", 10_000)
    s = raw.connect(quota_broker.port)
    try:
        s.sendall(_produce_frame(1, "throttled", b"x" * 110_000))
        resp = raw.response_of(raw.recv_frame(s), 0, 9)
        throttle = int(resp.throttle_time.total_seconds() * 1000)
        assert resp.responses[0].partition_responses[0].error_code == 0, resp
        assert 500 <= throttle <= 2000, resp
        _api_versions(s, 2)
        held, answer = _muted(s, throttle)
        assert held and answer is not None, (held, answer)
        _set_quota(admin, RAW_CLIENT, "consumer_byte_rate", 10_000)
        fetch = {"replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
                 "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
                 "topics": [{"topic": "throttled", "partitions": [{"partition": 0, "fetch_offset": 0,
                             "log_start_offset": -1, "partition_max_bytes": 1 << 20, "current_leader_epoch": -1}]}]}
        # the 110 kB record makes the answer 11 kB/s over the 10 s window: answered empty, throttled
        s.sendall(raw.request_frame(1, 11, 3, fetch))
        second = raw.response_of(raw.recv_frame(s), 1, 11)
        fetch_throttle = int(second.throttle_time.total_seconds() * 1000)
        assert fetch_throttle > 0 and second.responses == () and second.error_code == 0, second
        _api_versions(s, 6)
        held, answer = _muted(s, fetch_throttle)
        assert held and answer is not None
        # request_percentage: a thousandth of a percent of a thread; any request's handling exceeds it
        _set_quota(admin, RAW_CLIENT, "request_percentage", 0.001)
        s.sendall(raw.request_frame(3, 12, 7, {"topics": None, "allow_auto_topic_creation": False,
                                                "include_topic_authorized_operations": False}))
        md = raw.response_of(raw.recv_frame(s), 3, 12)
        assert md.throttle_time.total_seconds() > 0 and md.topics, md
        assert md.throttle_time.total_seconds() <= 1.0, md        # at most one window (Kafka's cap)
    finally:
        s.close()
        admin.close()


def _produce_for(port: int, topic: str, seconds: float, out: dict[str, Any], name: str) -> None:
    """Produce 10 kB records back to back (each after the previous answer) for ``seconds``."""
    s = raw.connect(port)
    value = b"v" * 10_000
    sent, corr, throttled = 0, 0, 0
    start = time.monotonic()
    try:
        while time.monotonic() - start < seconds:
            corr += 1
            frame = _produce_frame(corr, topic, value)
            s.sendall(frame)
            resp = raw.response_of(raw.recv_frame(s), 0, 9)
            assert resp.responses[0].partition_responses[0].error_code == 0, resp
            sent += len(frame)
            throttled += resp.throttle_time.total_seconds() > 0
        out[name] = (sent / (time.monotonic() - start), throttled)
    finally:
        s.close()


@pytest.mark.slow
def test_a_producer_is_held_to_its_byte_rate(kafka_pair: Any) -> None:
    """A client id with producer_byte_rate 200 kB/s producing 10 kB requests back to back for 30 s, on Kafka
    4.4 and kafkalog in the same run: both hold it to the quota, kafkalog within 10% of Kafka's rate (the
    rate over the run; Kafka's first window lets a burst through, so the run is measured from its 10th
    second)."""
    k, ours = kafka_pair
    quota = 200_000
    out: dict[str, Any] = {}
    threads = []
    for name, port in (("kafka", k.port), ("kafkalog", ours.port)):
        c = d.Conn(name, port)
        c.create_topic("quota-held")
        _set_quota(c, RAW_CLIENT, "producer_byte_rate", quota)
        c.close()
    time.sleep(1)       # Kafka's broker learns the quota from its controller
    for name, port in (("kafka", k.port), ("kafkalog", ours.port)):
        # a first 10 s: Kafka's rate is measured over at least 10 windows, so it lets a burst through at first
        warm: dict[str, Any] = {}
        threads.append(threading.Thread(target=lambda p=port, n=name, w=warm: (
            _produce_for(p, "quota-held", 10, w, n), _produce_for(p, "quota-held", 30, out, n))))
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    kafka_rate, ours_rate = out["kafka"][0], out["kafkalog"][0]
    assert out["kafka"][1] > 0 and out["kafkalog"][1] > 0, out
    # each held to its quota; Kafka's Rate sums up to 11 one-second samples but divides by the time since
    # the oldest one began (10 to 11 s), so a client sending back to back gets about 10% over the quota on
    # Kafka 4.4 itself (219,839 B/s for 200,000 when this test was written): within 10% of Kafka's figure,
    # and within 15% of the quota
    assert abs(ours_rate - kafka_rate) <= 0.1 * kafka_rate, out
    for name, rate in (("kafka", kafka_rate), ("kafkalog", ours_rate)):
        assert abs(rate - quota) <= 0.15 * quota, f"{name}: {rate:.0f} B/s against a quota of {quota} ({out})"
