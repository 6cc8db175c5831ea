"""Client telemetry (KIP-714, issue 39) from the outside: ``kafkalog serve`` with its metrics endpoint
on, the genuine Java client 4.4 and librdkafka (confluent-kafka) pushing their metrics with
``enable.metrics.push``, raw GetTelemetrySubscriptions/PushTelemetry requests (tests/server/raw.py)
for Kafka's rules and hostile payloads, and the endpoint scraped and read with ``prometheus_client``'s
text parser. With the endpoint off, the answers are compared with a real Kafka 4.4 without a
telemetry plugin."""

from __future__ import annotations

import gzip
import os
import socket
import struct
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server.broker_process import BrokerProcess
from tests.server.raw import api_versions_v0, connect, recv_frame, request_frame, response_of

INTERVAL_MS = 500
EXPIRY_MS = 3000
GET, PUSH = 71, 72
NONE, INVALID_REQUEST, UNSUPPORTED_COMPRESSION_TYPE, INVALID_RECORD = 0, 42, 76, 87
THROTTLING_QUOTA_EXCEEDED, UNKNOWN_SUBSCRIPTION_ID, TELEMETRY_TOO_LARGE = 89, 117, 118
ZERO = uuid.UUID(int=0)


class TelemetryBroker:
    def __init__(self, broker: BrokerProcess, metrics_url: str) -> None:
        self.broker = broker
        self.metrics_url = metrics_url

    @property
    def port(self) -> int:
        return self.broker.port

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap


@pytest.fixture(scope="module")
def telemetry_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TelemetryBroker]:
    data = str(tmp_path_factory.mktemp("telemetry") / "data")
    configs = [f"client.metrics.subscription.interval.ms={INTERVAL_MS}",
               f"client.metrics.cache.expiry.ms={EXPIRY_MS}", "num.partitions=1",
               "group.initial.rebalance.delay.ms=0"]
    with BrokerProcess(data, configs, extra_args=["--metrics-port", "0"]).running() as broker:
        assert broker.metrics_url is not None
        yield TelemetryBroker(broker, broker.metrics_url)
    assert "Traceback" not in broker.stderr(), broker.stderr()[-3000:]


def scrape(url: str) -> dict[str, list]:
    """family name -> its samples, parsed by prometheus_client."""
    from prometheus_client.parser import text_string_to_metric_families
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def samples_of(url: str, **labels: str) -> list:
    return [s for samples in scrape(url).values() for s in samples
            if all(s.labels.get(k) == v for k, v in labels.items())]


def _call(s: socket.socket, api: int, values: dict, corr: int = 1) -> object:
    s.sendall(request_frame(api, 0, corr, values))
    frame = recv_frame(s)
    assert frame is not None, "the broker closed the connection"
    return response_of(frame, api, 0)


def get_subscriptions(s: socket.socket, instance: uuid.UUID | None = ZERO) -> object:
    return _call(s, GET, {"client_instance_id": instance})


def push(s: socket.socket, instance: uuid.UUID, subscription: int, payload: bytes | None, compression: int = 0,
         terminating: bool = False) -> int:
    resp = _call(s, PUSH, {"client_instance_id": instance, "subscription_id": subscription,
                           "terminating": terminating, "compression_type": compression, "metrics": payload})
    return int(resp.error_code)       # type: ignore[attr-defined]


def otlp(gauge: float = 3.5, total: int = 42, prefix: str = "org.apache.kafka.test.") -> bytes:
    """An OTLP MetricsData (opentelemetry-proto's classes): a gauge with a data point attribute and a
    cumulative monotonic sum, as a client's push holds them."""
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue
    from opentelemetry.proto.metrics.v1.metrics_pb2 import AGGREGATION_TEMPORALITY_CUMULATIVE, MetricsData
    md = MetricsData()
    rm = md.resource_metrics.add()
    rm.resource.attributes.add(key="client_rack", value=AnyValue(string_value="rack-a"))
    sm = rm.scope_metrics.add()
    g = sm.metrics.add(name=prefix + "fetch.latency.avg")
    p = g.gauge.data_points.add(as_double=gauge)
    p.attributes.add(key="node.id", value=AnyValue(string_value="1"))
    c = sm.metrics.add(name=prefix + "records.consumed.total")
    c.sum.is_monotonic = True
    c.sum.aggregation_temporality = AGGREGATION_TEMPORALITY_CUMULATIVE
    c.sum.data_points.add(as_int=total)
    return md.SerializeToString()


def zstd(data: bytes) -> bytes:
    import zstandard
    return zstandard.ZstdCompressor().compress(data)


def wait_interval() -> None:
    time.sleep(INTERVAL_MS / 1000 + 0.1)


def test_api_versions_advertises_the_telemetry_apis(telemetry_broker: TelemetryBroker) -> None:
    """As Kafka with a telemetry receiver: GetTelemetrySubscriptions and PushTelemetry v0 advertised."""
    with connect(telemetry_broker.port) as s:
        s.sendall(api_versions_v0(3))
        resp = recv_frame(s)
    assert resp is not None
    _corr, error, n = struct.unpack_from(">ihi", resp, 0)
    ranges = {struct.unpack_from(">h", resp, 10 + 6 * i)[0]: struct.unpack_from(">hh", resp, 12 + 6 * i)
              for i in range(n)}
    assert error == 0 and ranges[GET] == (0, 0) and ranges[PUSH] == (0, 0)


def _kafka_subscription_id(metrics: list[str], interval: int, instance: uuid.UUID) -> int:
    """Kafka's computeSubscriptionId: CRC32C of the metric set as Java prints it and the interval, XOR
    Uuid.hashCode()."""
    import crc32c
    crc = crc32c.crc32c(("[" + ", ".join(sorted(metrics)) + "]" + str(interval)).encode())
    h = (instance.int >> 64) ^ (instance.int & (2**64 - 1))
    x = (crc ^ ((h >> 32) ^ h)) & 0xFFFFFFFF
    return x - 2**32 if x >= 2**31 else x


def test_a_push_is_re_exported_per_client_instance(telemetry_broker: TelemetryBroker) -> None:
    with connect(telemetry_broker.port) as s:
        sub = get_subscriptions(s)
        instance = sub.client_instance_id       # type: ignore[attr-defined]
        assert sub.error_code == NONE and instance != ZERO       # type: ignore[attr-defined]
        assert list(sub.requested_metrics) == ["org.apache.kafka."]         # type: ignore[attr-defined]
        assert sub.push_interval.total_seconds() * 1000 == INTERVAL_MS      # type: ignore[attr-defined]
        assert sub.telemetry_max_bytes == 1048576                           # type: ignore[attr-defined]
        assert list(sub.accepted_compression_types) == [4, 3, 1, 2]         # type: ignore[attr-defined]
        assert sub.subscription_id == _kafka_subscription_id(["org.apache.kafka."], INTERVAL_MS,  # type: ignore[attr-defined]
                                                             instance)
        assert push(s, instance, sub.subscription_id, zstd(otlp()), compression=4) == NONE  # type: ignore[attr-defined]
    got = {s.name: s for s in samples_of(telemetry_broker.metrics_url, client_instance_id=str(instance))}
    gauge = got["org_apache_kafka_test_fetch_latency_avg"]
    assert gauge.value == 3.5
    assert gauge.labels == {"client_instance_id": str(instance), "client_id": "raw", "client_rack": "rack-a",
                            "node_id": "1"}
    assert got["org_apache_kafka_test_records_consumed_total"].value == 42


def _other_kinds(delta: int) -> bytes:
    """A histogram, a summary, a delta sum, an exponential histogram and a metric named as the broker's."""
    from opentelemetry.proto.metrics.v1.metrics_pb2 import AGGREGATION_TEMPORALITY_DELTA, MetricsData
    md = MetricsData()
    sm = md.resource_metrics.add().scope_metrics.add()
    h = sm.metrics.add(name="org.apache.kafka.test.latency")
    hp = h.histogram.data_points.add(count=6, sum=21.0)
    hp.explicit_bounds.extend([1.0, 5.0])
    hp.bucket_counts.extend([1, 2, 3])
    q = sm.metrics.add(name="org.apache.kafka.test.size").summary.data_points.add(count=4, sum=10.0)
    q.quantile_values.add(quantile=0.5, value=2.0)
    d = sm.metrics.add(name="org.apache.kafka.test.sent.total")
    d.sum.is_monotonic = True
    d.sum.aggregation_temporality = AGGREGATION_TEMPORALITY_DELTA
    d.sum.data_points.add(as_int=delta)
    sm.metrics.add(name="org.apache.kafka.test.exp").exponential_histogram.data_points.add(count=1)
    sm.metrics.add(name="kafka.server.brokertopicmetrics.bytesin").gauge.data_points.add(as_double=1e9)
    return md.SerializeToString()


def test_histograms_summaries_and_delta_sums_are_re_exported(telemetry_broker: TelemetryBroker) -> None:
    """An explicit-bounds histogram as Prometheus' cumulative buckets, a summary with its quantiles, a
    delta sum added up into a counter; an exponential histogram and a name in the broker's namespace
    left out."""
    with connect(telemetry_broker.port) as s:
        sub = get_subscriptions(s)
        instance, sid = sub.client_instance_id, sub.subscription_id         # type: ignore[attr-defined]
        assert push(s, instance, sid, _other_kinds(5), compression=0) == NONE
        wait_interval()
        assert push(s, instance, sid, zstd(_other_kinds(7)), compression=4) == NONE
    got = samples_of(telemetry_broker.metrics_url, client_instance_id=str(instance))
    by = {(x.name, x.labels.get("le"), x.labels.get("quantile")): x.value for x in got}
    assert by[("org_apache_kafka_test_latency_bucket", "1.0", None)] == 1
    assert by[("org_apache_kafka_test_latency_bucket", "5.0", None)] == 3
    assert by[("org_apache_kafka_test_latency_bucket", "+Inf", None)] == 6
    assert by[("org_apache_kafka_test_latency_count", None, None)] == 6
    assert by[("org_apache_kafka_test_latency_sum", None, None)] == 21.0
    assert by[("org_apache_kafka_test_size", None, "0.5")] == 2.0
    assert by[("org_apache_kafka_test_size_count", None, None)] == 4
    assert by[("org_apache_kafka_test_sent_total", None, None)] == 12            # 5 + 7
    assert not any("exp" in x.name or x.name.startswith("kafka_") for x in got), got


def _many_series(n: int) -> bytes:
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue
    from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData
    md = MetricsData()
    sm = md.resource_metrics.add().scope_metrics.add()
    for i in range(n):
        p = sm.metrics.add(name=f"org.apache.kafka.test.many.m{i}").gauge.data_points.add(as_double=i)
        p.attributes.add(key="node.id", value=AnyValue(string_value=str(i)))
    return md.SerializeToString()


def test_a_large_push_is_decoded_off_the_event_loop(telemetry_broker: TelemetryBroker) -> None:
    """A push near telemetry.max.bytes (12,000 series: a few hundred milliseconds of decoding) does
    not hold the broker up: another client's ApiVersions is answered while it is decoded (an order,
    not a time: the other answer arrives first)."""
    import select
    payload = zstd(_many_series(12000))
    with connect(telemetry_broker.port) as a, connect(telemetry_broker.port) as b:
        sub = get_subscriptions(a)
        a.sendall(request_frame(PUSH, 0, 5, {"client_instance_id": sub.client_instance_id,  # type: ignore[attr-defined]
                                             "subscription_id": sub.subscription_id,    # type: ignore[attr-defined]
                                             "terminating": False, "compression_type": 4, "metrics": payload}))
        b.sendall(api_versions_v0(11))
        frame = recv_frame(b)
        assert frame is not None and struct.unpack_from(">ih", frame, 0) == (11, 0)
        readable, _, _ = select.select([a], [], [], 0)
        assert readable == [], "the push was answered before another client's ApiVersions"
        answer = recv_frame(a)
        assert answer is not None and response_of(answer, PUSH, 0).error_code == NONE   # type: ignore[attr-defined]
    got = samples_of(telemetry_broker.metrics_url, client_instance_id=str(sub.client_instance_id))  # type: ignore[attr-defined]
    assert len([x for x in got if x.name.startswith("org_apache_kafka_test_many_")]) == 12000


def test_kafkas_rules_and_hostile_pushes_get_kafkas_errors(telemetry_broker: TelemetryBroker) -> None:
    """Each refused push is answered with Kafka's error on a connection that stays open; nothing of a
    refused push is exported."""
    good = otlp(gauge=7.0)
    with connect(telemetry_broker.port) as s:
        sub = get_subscriptions(s)
        instance, sid = sub.client_instance_id, sub.subscription_id         # type: ignore[attr-defined]
        assert push(s, instance, sid + 1, good) == UNKNOWN_SUBSCRIPTION_ID
        # after UNKNOWN_SUBSCRIPTION_ID a GetTelemetrySubscriptions is not throttled (Kafka's rule)
        assert get_subscriptions(s, instance).error_code == NONE              # type: ignore[attr-defined]
        # (that answer does not restart the push interval: a push now is still too early)
        assert push(s, instance, sid, good) == THROTTLING_QUOTA_EXCEEDED
        wait_interval()
        assert push(s, instance, sid, good, compression=7) == UNSUPPORTED_COMPRESSION_TYPE
        assert get_subscriptions(s, instance).error_code == NONE              # type: ignore[attr-defined]
        wait_interval()
        assert push(s, instance, sid, b"\x28\xb5\x2f\xfd garbage", compression=4) == INVALID_RECORD
        wait_interval()
        assert push(s, instance, sid, good[:-3]) == INVALID_RECORD          # a truncated protobuf
        wait_interval()
        assert push(s, instance, sid, os.urandom((1 << 20) + 1)) == TELEMETRY_TOO_LARGE
        wait_interval()
        bomb = gzip.compress(b"\0" * (8 << 20))                             # small, 8 MiB inflated
        assert len(bomb) < 1 << 20
        assert push(s, instance, sid, bomb, compression=1) == TELEMETRY_TOO_LARGE
        assert push(s, instance, sid, good) == THROTTLING_QUOTA_EXCEEDED    # within the push interval
        assert get_subscriptions(s, instance).error_code == THROTTLING_QUOTA_EXCEEDED   # type: ignore[attr-defined]
        assert samples_of(telemetry_broker.metrics_url, client_instance_id=str(instance)) == []
        # a terminating push is taken at any time, and is the last one
        assert push(s, instance, sid, good, terminating=True) == NONE
        assert push(s, instance, sid, good) == INVALID_REQUEST
        assert push(s, ZERO, sid, good) == INVALID_REQUEST                  # a reserved instance id
        s.sendall(api_versions_v0(9))
        frame = recv_frame(s)
        assert frame is not None and struct.unpack_from(">ih", frame, 0) == (9, 0)
    (gauge,) = [x for x in samples_of(telemetry_broker.metrics_url, client_instance_id=str(instance))
                if x.name == "org_apache_kafka_test_fetch_latency_avg"]
    assert gauge.value == 7.0
    families = scrape(telemetry_broker.metrics_url)
    pushes = {x.labels["error"]: x.value for x in families["kafkalog_client_telemetry_pushes"]
              if x.name.endswith("_total")}
    assert pushes["TELEMETRY_TOO_LARGE"] >= 2 and pushes["INVALID_RECORD"] >= 2


def test_a_client_not_heard_from_is_dropped_with_its_series(telemetry_broker: TelemetryBroker) -> None:
    """No unbounded growth: an instance silent for max(client.metrics.cache.expiry.ms, 3 intervals) is
    forgotten, its series leave the endpoint."""
    with connect(telemetry_broker.port) as s:
        sub = get_subscriptions(s)
        instance = sub.client_instance_id                                   # type: ignore[attr-defined]
        assert push(s, instance, sub.subscription_id, otlp()) == NONE       # type: ignore[attr-defined]
    assert samples_of(telemetry_broker.metrics_url, client_instance_id=str(instance)) != []
    deadline = time.monotonic() + EXPIRY_MS / 1000 + 10
    while samples_of(telemetry_broker.metrics_url, client_instance_id=str(instance)):
        assert time.monotonic() < deadline, "the silent instance's series are still exported"
        time.sleep(0.5)
    # and its next push is that of an instance the broker does not know: a new instance, its own id
    with connect(telemetry_broker.port) as s:
        assert push(s, instance, sub.subscription_id, otlp()) == NONE       # type: ignore[attr-defined]


def _wait_for_client(url: str, client_id: str, prefix: str, timeout: float = 60) -> list:
    deadline = time.monotonic() + timeout
    while True:
        found = [s for s in samples_of(url, client_id=client_id) if s.name.startswith(prefix)]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


def test_the_java_client_pushes_its_metrics(telemetry_broker: TelemetryBroker) -> None:
    """kafka-clients 4.4 (a consumer in a group, enable.metrics.push=true): its metrics on the endpoint,
    labelled with its client id and instance id."""
    from tests.kafka44 import java_command
    from tests.server.java_client import GROUP_MEMBER, JavaUnavailable, classpath
    assert GROUP_MEMBER
    try:
        cp = classpath("4.4.0")
    except JavaUnavailable as e:
        pytest.skip(str(e))
    from kafka import KafkaProducer
    p = KafkaProducer(bootstrap_servers=telemetry_broker.bootstrap)
    for _ in range(20):
        p.send("telemetry-java", b"v")
    p.flush(30)
    p.close()
    proc = subprocess.Popen(java_command("KafkalogGroupMember", telemetry_broker.bootstrap, "telemetry-java",
                                         "telemetry-group", "60000", "client.id=java-telemetry",
                                         "enable.metrics.push=true", cp=cp),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        found = _wait_for_client(telemetry_broker.metrics_url, "java-telemetry", "org_apache_kafka_consumer_")
    finally:
        assert proc.stdin is not None
        proc.stdin.write("stop\n")
        proc.stdin.close()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert found, f"no metric of the Java consumer; its stderr: {proc.stderr.read()[-3000:] if proc.stderr else ''}"
    assert all(uuid.UUID(s.labels["client_instance_id"]) != ZERO for s in found)


def test_librdkafka_pushes_its_metrics(telemetry_broker: TelemetryBroker) -> None:
    """confluent-kafka (librdkafka) with enable.metrics.push: its producer metrics on the endpoint."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    producer = confluent_kafka.Producer({"bootstrap.servers": telemetry_broker.bootstrap,
                                         "client.id": "rdkafka-telemetry", "enable.metrics.push": True})
    try:
        deadline = time.monotonic() + 60
        found: list = []
        while not found and time.monotonic() < deadline:
            producer.produce("telemetry-rdkafka", b"v")
            producer.flush(10)
            found = [s for s in samples_of(telemetry_broker.metrics_url, client_id="rdkafka-telemetry")
                     if s.name.startswith("org_apache_kafka_producer_")]
            if not found:
                time.sleep(0.5)
    finally:
        producer.flush(10)
    assert found, "no metric of the librdkafka producer"


def test_the_series_of_all_clients_are_bounded(tmp_path: Path) -> None:
    """client.metrics.max.series bounds the re-exported series of all clients together: a push that
    would go beyond it is accepted but not exported (its instance keeps what it had), and logged."""
    configs = ["client.metrics.max.series=30", f"client.metrics.subscription.interval.ms={INTERVAL_MS}"]
    with BrokerProcess(str(tmp_path / "data"), configs, extra_args=["--metrics-port", "0"]).running() as broker:
        assert broker.metrics_url is not None
        with connect(broker.port) as s:
            first = get_subscriptions(s)
            assert push(s, first.client_instance_id, first.subscription_id, _many_series(20)) == NONE  # type: ignore[attr-defined]
            second = get_subscriptions(s)
            assert push(s, second.client_instance_id, second.subscription_id, _many_series(20)) == NONE  # type: ignore[attr-defined]
        families = scrape(broker.metrics_url)
        assert [x.value for x in families["kafkalog_client_telemetry_series"]] == [20]
        assert [x.value for x in families["kafka_server_clientmetrics_instance_count"]] == [2]
        assert len(samples_of(broker.metrics_url, client_instance_id=str(first.client_instance_id))) == 20  # type: ignore[attr-defined]
        assert samples_of(broker.metrics_url, client_instance_id=str(second.client_instance_id)) == []  # type: ignore[attr-defined]
    assert "client.metrics.max.series=30" in broker.stderr()


# --- the endpoint off: as Kafka 4.4 without a telemetry plugin --------------------------------------

def _answers(port: int) -> tuple[tuple, int, int]:
    """(the subscription's fields but its ids, a push of it, a push of another subscription)."""
    with connect(port) as s:
        sub = get_subscriptions(s)
        fields = (int(sub.error_code), list(sub.requested_metrics), sub.push_interval,      # type: ignore[attr-defined]
                  sub.telemetry_max_bytes, list(sub.accepted_compression_types),           # type: ignore[attr-defined]
                  sub.delta_temporality, sub.client_instance_id != ZERO)                   # type: ignore[attr-defined]
        instance, sid = sub.client_instance_id, sub.subscription_id                        # type: ignore[attr-defined]
        ok = push(s, instance, sid, b"")
        wrong = push(s, instance, sid + 1, b"", terminating=True)
    return fields, ok, wrong


def test_without_the_endpoint_the_answers_are_kafkas_without_a_plugin(kafka_pair) -> None:
    kafka, ours = kafka_pair
    assert _answers(ours.port) == _answers(kafka.port)


def test_without_the_endpoint_nothing_is_kept(tmp_path: Path) -> None:
    """The broker without metrics: ApiVersions does not advertise the telemetry APIs (Kafka 4.4 without
    a plugin), a push is answered and dropped."""
    with BrokerProcess(str(tmp_path / "data")).running() as broker, connect(broker.port) as s:
        s.sendall(api_versions_v0(3))
        resp = recv_frame(s)
        assert resp is not None
        n = struct.unpack_from(">i", resp, 6)[0]
        keys = {struct.unpack_from(">h", resp, 10 + 6 * i)[0] for i in range(n)}
        assert GET not in keys and PUSH not in keys
        sub = get_subscriptions(s)
        assert list(sub.requested_metrics) == []                        # type: ignore[attr-defined]
        assert push(s, sub.client_instance_id, sub.subscription_id, zstd(otlp()), compression=4) == NONE  # type: ignore[attr-defined]
