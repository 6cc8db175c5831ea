"""``kafkalog serve --metrics-port``'s Prometheus endpoint (docs/server.md, "Metrics"), scraped with
prometheus_client's own text parser while real clients over real sockets produce, consume, commit
(a classic group, a consumer group of KIP-848, a share group) and a compacted topic is cleaned: the
counters match what the workload did (bytes, records, requests), each group's lag reaches 0 once it
has caught up, and every name is the one docs/server.md's table gives. The embedded snippet of
docs/server.md runs as written. The per-request cost of metrics is counted, not timed: the Python
calls metrics make per request are the same with 10 partitions as with 400, and no collector runs
between scrapes."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families

from tests.server.broker_process import BrokerProcess
from tests.server.group_members import wait_until
from tests.server.share_raw import SHARE_SETTINGS

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "server.md"


def scrape(url: str) -> dict[str, Any]:
    """``{family name: family}`` parsed by prometheus_client."""
    with urllib.request.urlopen(url, timeout=30) as r:
        text = r.read().decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def value(families: dict[str, Any], sample: str, **labels: str) -> float | None:
    """A sample's value by its full name and exact labels (None when absent)."""
    for fam in families.values():
        for s in fam.samples:
            if s.name == sample and s.labels == labels:
                return float(s.value)
    return None


def documented_names() -> set[str]:
    """The first column of docs/server.md's Metrics table."""
    text = DOC.read_text()
    section = text[text.index("## Metrics"):text.index("## Layers")]
    return set(re.findall(r"^\| `([a-z_]+)` \|", section, re.M))


def exposed_name(fam: Any) -> str:
    return fam.name + "_total" if fam.type == "counter" else fam.name


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    d = str(tmp_path_factory.mktemp("metrics") / "data")
    configs = ["group.initial.rebalance.delay.ms=0", "log.cleaner.backoff.ms=200",
               *[f"{k}={v}" for k, v in SHARE_SETTINGS.items()]]
    with BrokerProcess(d, configs, extra_args=["--metrics-port", "0", "--format", "json"]).running() as b:
        yield b


def test_metrics_are_off_by_default(tmp_path: Path) -> None:
    b = BrokerProcess(str(tmp_path / "data"), extra_args=["--format", "json"]).start()
    try:
        assert "metrics" not in b.listening
        assert "metrics:" not in b.stderr()
    finally:
        assert b.stop() == 0, b.stderr()


def test_a_bad_metrics_listener_is_refused_before_the_data_directory_is_made(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "kafkalog.cli.main", "serve", str(tmp_path / "d"), "--port", "0",
                        "--config", "metrics.listener=127.0.0.1:9404"], capture_output=True, text=True, timeout=60)
    out = r.stdout + r.stderr        # the error as JSON on stdout (not a terminal)
    assert r.returncode != 0
    assert "metrics.listener" in out and "http://HOST:PORT" in out, out
    assert out.count("Invalid value") == 1, out      # said once
    assert not (tmp_path / "d").exists()


def test_produce_consume_commit_figures(broker: BrokerProcess) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.structs import OffsetAndMetadata

    url = broker.listening["metrics"]
    topic, group, n = "m-" + uuid.uuid4().hex[:6], "g-" + uuid.uuid4().hex[:6], 40
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic(topic, 2, 1)])
    admin.close()
    before = scrape(url)
    produce_before = value(before, "kafka_network_requestmetrics_requests_total", request="Produce", version="9") \
        or 0.0
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", linger_ms=0, api_version=(3, 0))
    for i in range(n):       # one request per record: the counts are known exactly
        producer.send(topic, b"value-%d" % i, key=b"k%d" % i, partition=i % 2).get(timeout=30)
    producer.close()

    after = scrape(url)
    sizes = [value(after, "kafka_log_log_size", topic=topic, partition=str(p)) for p in (0, 1)]
    ends = [value(after, "kafka_log_log_logendoffset", topic=topic, partition=str(p)) for p in (0, 1)]
    assert ends == [n / 2, n / 2]
    assert value(after, "kafka_log_log_numlogsegments", topic=topic, partition="0") == 1
    # every byte appended came in by Produce: BytesIn is the partitions' size
    assert value(after, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic) == sum(sizes) > 0
    assert value(after, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == n
    assert value(after, "kafka_server_brokertopicmetrics_totalproducerequests_total", topic=topic) == n
    # (a topic's meter appears with its first mark, as Kafka's MeterWrapper makes it)
    assert value(after, "kafka_server_brokertopicmetrics_failedproducerequests_total", topic=topic) is None
    assert value(after, "kafka_network_requestmetrics_requests_total", request="Produce", version="9") \
        == produce_before + n
    assert value(after, "kafka_network_requestmetrics_totaltimems_count", request="Produce") >= n
    assert value(after, "kafka_network_requestmetrics_totaltimems", request="Produce", quantile="0.99") > 0
    total_in = value(after, "kafka_server_brokertopicmetrics_bytesin_total")
    assert total_in is not None and total_in >= sum(sizes)
    assert value(after, "kafka_server_replicamanager_partitioncount") >= 2
    assert value(after, "kafka_server_replicamanager_offlinereplicacount") == 0

    # a classic group committed at 0: its lag is the whole partition
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False,
                             auto_offset_reset="earliest", api_version=(3, 0))
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    consumer.assign(tps)
    consumer.commit({tp: OffsetAndMetadata(0, "", -1) for tp in tps})
    lagging = scrape(url)
    for p in ("0", "1"):
        labels = {"consumergroup": group, "topic": topic, "partition": p}
        assert value(lagging, "kafka_consumergroup_lag", **labels) == n / 2
        assert value(lagging, "kafkalog_consumergroup_lag_stable", **labels) == n / 2
        assert value(lagging, "kafka_consumergroup_current_offset", **labels) == 0
    assert value(lagging, "kafka_consumergroup_lag_sum", consumergroup=group, topic=topic) == n

    got = 0
    deadline = time.monotonic() + 60
    while got < n and time.monotonic() < deadline:
        got += sum(len(v) for v in consumer.poll(timeout_ms=500).values())
    assert got == n
    consumer.commit()
    consumer.close()
    caught_up = scrape(url)
    for p in ("0", "1"):
        labels = {"consumergroup": group, "topic": topic, "partition": p}
        assert value(caught_up, "kafka_consumergroup_lag", **labels) == 0
        assert value(caught_up, "kafka_consumergroup_current_offset", **labels) == n / 2
    # every batch went out once to the one consumer that read the topic
    assert value(caught_up, "kafka_server_brokertopicmetrics_bytesout_total", topic=topic) == sum(sizes)
    fetches = value(caught_up, "kafka_server_brokertopicmetrics_totalfetchrequests_total", topic=topic)
    assert fetches is not None and fetches >= 2
    consumer_fetches = sum(s.value for s in caught_up["kafka_network_requestmetrics_requests"].samples
                           if s.labels["request"] == "FetchConsumer")
    all_fetches = sum(s.value for s in caught_up["kafka_network_requestmetrics_requests"].samples
                      if s.labels["request"] == "Fetch")
    assert consumer_fetches == all_fetches > 0
    assert value(caught_up, "kafka_server_group_coordinator_metrics_group_count", protocol="classic") >= 1


def test_consumer_group_protocol_lag_reaches_zero(broker: BrokerProcess) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    url = broker.listening["metrics"]
    topic, group, n = "c-" + uuid.uuid4().hex[:6], "cg-" + uuid.uuid4().hex[:6], 30
    p = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(n):
        p.produce(topic, b"v%d" % i)
    assert p.flush(30) == 0
    c = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                                  "group.protocol": "consumer", "auto.offset.reset": "earliest",
                                  "enable.auto.commit": False})
    try:
        c.subscribe([topic])
        got = 0
        deadline = time.monotonic() + 90
        while got < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got += 1
        assert got == n
        c.commit(asynchronous=False)
        fams = scrape(url)
        labels = {"consumergroup": group, "topic": topic, "partition": "0"}
        assert value(fams, "kafka_consumergroup_lag", **labels) == 0
        assert value(fams, "kafka_consumergroup_current_offset", **labels) == n
        assert value(fams, "kafka_server_group_coordinator_metrics_group_count", protocol="consumer") >= 1
        assert value(fams, "kafka_server_group_coordinator_metrics_consumer_group_count", state="stable") >= 1
        assert value(fams, "kafka_consumergroup_members", consumergroup=group) == 1
    finally:
        c.close()


def test_share_group_lag_reaches_zero(broker: BrokerProcess) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    share_consumer = getattr(confluent_kafka, "ShareConsumer", None)
    if share_consumer is None:
        pytest.skip("this confluent-kafka has no ShareConsumer")
    from tests.server.test_share_group_clients import _group
    url = broker.listening["metrics"]
    topic = "s-" + uuid.uuid4().hex[:6]
    group = _group(broker.bootstrap, topic, {}, [b"a", b"b", b"c"])
    c = share_consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                        "share.acknowledgement.mode": "explicit"})
    try:
        c.subscribe([topic])
        taken: set[int] = set()
        deadline = time.monotonic() + 90
        while taken != {0, 1, 2} and time.monotonic() < deadline:
            for m in c.poll(0.5):
                if m.error() is None:
                    taken.add(m.offset())
                    c.acknowledge(m, confluent_kafka.AcknowledgeType.ACCEPT)
            c.commit_sync(30)
        assert taken == {0, 1, 2}
        labels = {"consumergroup": group, "topic": topic, "partition": "0"}
        # the records accepted are settled: no lag (as DescribeShareGroupOffsets v1 says, whose start
        # offset trails the last write by one write, Kafka's too)
        wait_until(lambda: value(scrape(url), "kafka_consumergroup_lag", **labels) == 0, "the share group's lag 0")
        fams = scrape(url)
        assert 0 <= value(fams, "kafka_consumergroup_current_offset", **labels) <= 3
        assert value(fams, "kafka_server_group_coordinator_metrics_group_count", protocol="share") >= 1
    finally:
        c.close()


def test_cleaner_figures_after_a_compaction(broker: BrokerProcess) -> None:
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic
    url = broker.listening["metrics"]
    topic = "compact-" + uuid.uuid4().hex[:6]
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1, topic_configs={
        "cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01", "segment.ms": "100"})])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=0, api_version=(3, 0))
    for i in range(200):        # ten segments (segment.ms) of the same five keys
        producer.send(topic, b"x" * 50, key=b"k%d" % (i % 5)).get(timeout=30)
        if i % 20 == 19:
            time.sleep(0.15)
    producer.close()
    labels = {"topic": topic, "partition": "0"}
    written = value(scrape(url), "kafka_server_brokertopicmetrics_bytesin_total", topic=topic)
    wait_until(lambda: (value(scrape(url), "kafka_log_logcleaner_max_clean_time_secs") or 0) > 0
             and value(scrape(url), "kafka_log_log_size", **labels) < written, "a cleaning")
    fams = scrape(url)
    assert 0 < value(fams, "kafka_log_logcleaner_cleaner_recopy_percent") < 100
    assert 0 < value(fams, "kafka_log_logcleaner_max_buffer_utilization_percent") <= 100
    assert value(fams, "kafka_log_logcleanermanager_uncleanable_partitions_count",
                 logDirectory=broker.data_dir.rstrip("/")) is not None
    assert value(fams, "kafka_log_logcleaner_deadthreadcount") == 0
    assert value(fams, "kafka_log_logflushstats_logflushrateandtimems_count") > 0
    assert value(fams, "kafka_log_log_numlogsegments", **labels) >= 1


def test_every_name_is_the_documented_one(broker: BrokerProcess) -> None:
    # after the workloads above (this module's order): every family the endpoint serves
    fams = scrape(broker.listening["metrics"])
    exposed = {exposed_name(f) for f in fams.values()
               if f.name.startswith(("kafka_", "kafkalog_"))}
    documented = documented_names()
    assert exposed - documented == set(), "served but not in docs/server.md's table"
    assert documented - exposed == set(), "in docs/server.md's table but not served"
    idle = value(fams, "kafka_network_socketserver_networkprocessoravgidlepercent")
    assert idle is not None and 0 <= idle <= 1
    assert value(fams, "kafka_server_socket_server_metrics_connection_count",
                 listener="PLAINTEXT", networkProcessor="0") is not None


def test_the_embedded_snippet_runs_as_documented(tmp_path: Path) -> None:
    text = DOC.read_text()
    section = text[text.index("### The registry, for components and applications"):text.index("## Layers")]
    snippet = re.search(r"```python\n(.*?)```", section, re.S)
    assert snippet is not None
    code = snippet.group(1).replace("start_http_server(9404,", "start_http_server(0,")
    code += ("\nimport urllib.request\n"
             "text = urllib.request.urlopen(f'http://127.0.0.1:{server.server_port}/metrics').read().decode()\n"
             "print(text)\nserver.shutdown()\nlog.close()\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    fams = {f.name: f for f in text_string_to_metric_families(r.stdout)}
    assert value(fams, "kafka_log_log_logendoffset", topic="events", partition="0") == 1
    assert value(fams, "kafkalog_log_append_records_total") == 1
    assert value(fams, "kafka_log_log_size", topic="events", partition="0") > 0
    assert "kafka_log_logflushstats_logflushrateandtimems" in fams
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]      # only what the snippet named


# --- the cost of metrics, counted ----------------------------------------------------------------

_METRICS_MODULES = ("kafkalog/log/metrics.py", "kafkalog/log/log_metrics.py", "kafkalog/cleaner/metrics.py")


class _InProcessBroker:
    """``kafkalog serve`` with metrics on, in this process (its event loop on a thread), so the
    Python calls it makes can be counted."""

    def __init__(self, data_dir: str, topics: dict[str, int]) -> None:
        from kafkalog.cleaner import LogCleaner
        from kafkalog.log.manager import LogManager
        from kafkalog.server.broker import Broker
        from kafkalog.server.config import ServerConfig
        from kafkalog.server.metrics.enable import metered_server
        cfg = ServerConfig({"group.initial.rebalance.delay.ms": "0"})
        self.manager = LogManager(data_dir, cfg.broker, cleaner_factory=LogCleaner)
        self.broker = Broker(self.manager, cfg, cfg.advertised("127.0.0.1", 0))
        for name, partitions in topics.items():
            self.broker.create_topic(name, partitions, {})
        self.server = metered_server(self.broker, port=0)
        self.loop = asyncio.new_event_loop()
        self.calls: dict[str, int] = {}
        self.counting = False
        started = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            self.loop.run_until_complete(self.server.start())
            self.broker.set_endpoints({b.name: cfg.advertised(b.host, b.port, b.name) for b in self.server.bound})
            started.set()
            sys.setprofile(self._profile)
            self.loop.run_forever()
            sys.setprofile(None)

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        assert started.wait(60)
        self.bootstrap = f"127.0.0.1:{self.server.port}"

    def _profile(self, frame: Any, event: str, _arg: Any) -> None:
        if event == "call" and self.counting:
            where = frame.f_code.co_filename
            key = "metrics" if where.endswith(_METRICS_MODULES) or "/kafkalog/server/metrics/" in where \
                else "other"
            self.calls[key] = self.calls.get(key, 0) + 1

    def close(self) -> None:
        async def stop() -> None:
            await self.server.stop()
        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(60)
        self.loop.close()
        self.manager.close()


def _calls_per_produce(tmp_path: Path, partitions: int, requests: int = 30) -> dict[str, int]:
    from kafka import KafkaProducer
    b = _InProcessBroker(str(tmp_path / f"data-{partitions}"), {"idle": partitions, "busy": 1})
    try:
        producer = KafkaProducer(bootstrap_servers=b.bootstrap, linger_ms=0, api_version=(3, 0))
        producer.send("busy", b"warm-up").get(timeout=30)
        b.calls.clear()
        b.counting = True
        for i in range(requests):
            producer.send("busy", b"v%d" % i, partition=0).get(timeout=30)
        b.counting = False
        producer.close()
        assert b.broker.metrics is not None
        assert b.broker.metrics.bytes_in.labels("busy").value > 0
        return dict(b.calls)
    finally:
        b.close()


def test_metrics_cost_per_request_does_not_grow_with_partitions(tmp_path: Path) -> None:
    few = _calls_per_produce(tmp_path, 10)
    many = _calls_per_produce(tmp_path, 400)
    # the calls metrics make for the same 30 produce requests do not grow with the idle partitions
    # (a scan of them would add 400 calls a request, 12,000 here; a client's metadata refreshes
    # make the counts differ by a few requests' worth)
    assert few["metrics"] > 30 * 5, (few, many)        # counted: a few calls per request
    assert many["metrics"] < few["metrics"] * 1.2, (few, many)
    assert many["other"] < few["other"] * 1.2, (few, many)
