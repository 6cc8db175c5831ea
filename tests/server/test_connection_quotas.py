"""Kafka's ``ConnectionQuotas`` on ``kafkalog serve`` and on Apache Kafka 4.4 side by side (issue 38):
``max.connections.per.ip`` (the excess connection closed at once), ``max.connections`` (the listener
accepts nothing more until a connection closes: the extra connection waits, then is served),
``max.connection.creation.rate`` (accepting paused for the throttle time) and the IP quotas'
``connection_creation_rate`` (KIP-612, set with AlterClientQuotas: the connection over it closed after
the throttle time): the same burst of connections from 127.0.0.1 on both brokers is accepted at the
same rate, as Kafka's ``Rate`` of the quota allows."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests import kafka44
from tests.server import raw
from tests.server.broker_process import BrokerProcess

MAX_PER_IP = 10
PAIR_CONFIGS = {"max.connections.per.ip": str(MAX_PER_IP)}


def _pair_ports(pair: tuple[Any, BrokerProcess]) -> dict[str, int]:
    k, ours = pair
    return {"kafka": k.port, "kafkalog": ours.port}


def _served(s: socket.socket, timeout: float = 5.0) -> bool | None:
    """ApiVersions v0 on ``s``: True answered, False closed, None no answer within ``timeout``."""
    s.settimeout(timeout)
    try:
        s.sendall(raw.api_versions_v0())
        return raw.recv_frame(s) is not None
    except TimeoutError:
        return None
    except OSError:
        return False


def test_max_connections_per_ip(kafka_pair: tuple[Any, BrokerProcess]) -> None:
    """The connection beyond ``max.connections.per.ip`` from 127.0.0.1 is closed; once one of the
    held ones closes, a new one is served. Kafka 4.4 and kafkalog the same."""
    got = {}
    for name, port in _pair_ports(kafka_pair).items():
        held = [raw.connect(port) for _ in range(MAX_PER_IP)]
        try:
            answers = [_served(s) for s in held]
            extra = raw.connect(port)
            with extra:
                answers.append(_served(extra))
            held.pop().close()
            time.sleep(0.5)
            again = raw.connect(port)
            with again:
                answers.append(_served(again))
        finally:
            for s in held:
                s.close()
        got[name] = answers
        time.sleep(0.5)
    assert got["kafka"] == got["kafkalog"] == [True] * MAX_PER_IP + [False, True], got


def _alter_ip_quota(port: int, rate: float | None) -> None:
    """AlterClientQuotas: 127.0.0.1's connection_creation_rate (None: removed), retried while the
    connection itself is refused by the quota."""
    deadline = time.monotonic() + 30
    while True:
        try:
            s = raw.connect(port)
            with s:
                s.sendall(raw.request_frame(49, 1, 1, {"entries": [{
                    "entity": [{"entity_type": "ip", "entity_name": "127.0.0.1"}],
                    "ops": [{"key": "connection_creation_rate", "value": rate or 0.0, "remove": rate is None}]}],
                    "validate_only": False}))
                frame = raw.recv_frame(s)
        except OSError:
            frame = None
        if frame is not None or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert frame is not None
    r = raw.response_of(frame, 49, 1)
    assert [int(e.error_code) for e in r.entries] == [0], r
    time.sleep(2.0)         # Kafka's broker applies it from its metadata log


def _burst(port: int, seconds: float, workers: int = 4) -> tuple[int, int]:
    """``workers`` threads connect, send ApiVersions and close, as fast as they can for ``seconds``:
    (connections answered, connections refused)."""
    counts = [0, 0]
    lock = threading.Lock()
    end = time.monotonic() + seconds

    def work() -> None:
        while time.monotonic() < end:
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=5)
            except OSError:
                continue
            with s:
                ok = _served(s, 5.0)
            with lock:
                counts[0 if ok else 1] += 1
    threads = [threading.Thread(target=work) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 30)
    return counts[0], counts[1]


@pytest.mark.slow
def test_connection_creation_rate(kafka_pair: tuple[Any, BrokerProcess]) -> None:
    """An IP quota of 5 connections a second for 127.0.0.1, then 15 s of connections as fast as four
    threads make them. Kafka's rate is measured over 11 windows of a second, the first ten counted as
    if full: about 50 are accepted at once, then none (each refused one closed after its throttle time,
    at most a second) until the first window leaves the measure at 11 s, when about 50 more are. Both
    brokers accept within 10% of each other, about 2 x 50 in all; without the quota many more are
    accepted."""
    quota, seconds = 5, 15.0
    got = {}
    for name, port in _pair_ports(kafka_pair).items():
        _alter_ip_quota(port, quota)
        try:
            got[name] = _burst(port, seconds)
        finally:
            _alter_ip_quota(port, None)
        time.sleep(1.0)
    ka, ko = got["kafka"][0], got["kafkalog"][0]
    print("connections accepted, refused in", seconds, "s at", quota, "a second:", got)
    assert abs(ka - ko) <= 0.1 * ka, got
    for accepted, refused in got.values():
        assert refused > seconds, got
        # two bursts of the quota over the ten padded windows
        assert 0.9 * 2 * quota * 10 <= accepted <= 1.15 * 2 * quota * 10, got
    unlimited = _burst(_pair_ports(kafka_pair)["kafkalog"], 3.0)
    assert unlimited[1] == 0 and unlimited[0] > quota * 30, unlimited


def _pair_with(root: Any, key: str, value: str) -> Iterator[dict[str, int]]:
    """Kafka 4.4 and kafkalog with the broker key ``key`` set: their ports."""
    try:
        kafka44.require()
    except kafka44.Kafka44Unavailable as e:
        pytest.skip(str(e))
    k = kafka44.KafkaBroker(root / "kafka", {key: value})
    k.format()
    k.start()
    ours = BrokerProcess(str(root / "kafkalog"), [f"{key}={value}"])
    try:
        ours.start()
        yield {"kafka": k.port, "kafkalog": ours.port}
    finally:
        if ours.alive():
            assert ours.stop() == 0, ours.stderr()
        k.stop()


@pytest.fixture(scope="module")
def capped_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, int]]:
    """Kafka 4.4 and kafkalog with ``max.connections=3``."""
    yield from _pair_with(tmp_path_factory.mktemp("capped"), "max.connections", "3")


def test_max_connections_waits_for_a_slot(capped_pair: dict[str, int]) -> None:
    """At ``max.connections`` the next connection is not served (nor closed) until one closes; then it
    is. Kafka 4.4 and kafkalog the same."""
    got = {}
    for name, port in capped_pair.items():
        held = [raw.connect(port) for _ in range(3)]
        try:
            answers: list[Any] = [_served(s) for s in held]
            extra = raw.connect(port)
            with extra:
                answers.append(_served(extra, 2.0))
                held.pop().close()
                extra.settimeout(10)
                try:
                    answers.append("answered after a close" if raw.recv_frame(extra) is not None else "closed")
                except OSError as e:
                    answers.append(type(e).__name__)
        finally:
            for s in held:
                s.close()
        got[name] = answers
    assert got["kafka"] == got["kafkalog"] == [True, True, True, None, "answered after a close"], got


@pytest.fixture(scope="module")
def rated_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, int]]:
    """Kafka 4.4 and kafkalog with ``max.connection.creation.rate=5``."""
    yield from _pair_with(tmp_path_factory.mktemp("rated"), "max.connection.creation.rate", "5")


@pytest.mark.slow
def test_max_connection_creation_rate(rated_pair: dict[str, int]) -> None:
    """``max.connection.creation.rate=5``, broker-wide: over it the listener stops accepting for the
    throttle time (the connections wait, none is closed). 15 s of connections as fast as four threads
    make them: about 50 at once (ten padded windows), then one a throttle time, then about 50 more once
    the first window leaves the measure; both brokers within 10% of each other, nothing refused."""
    got = {name: _burst(port, 15.0) for name, port in rated_pair.items()}
    print("connections accepted, refused in 15 s at max.connection.creation.rate=5:", got)
    (ka, kr), (oa, orf) = got["kafka"], got["kafkalog"]
    assert kr == orf == 0, got
    assert abs(ka - oa) <= 0.1 * ka, got
    assert 0.9 * 2 * 5 * 10 <= oa <= 1.3 * 2 * 5 * 10, got
