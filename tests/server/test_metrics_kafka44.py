"""kafkalog serve's metrics against Kafka 4.4's MBeans for the same workload: Kafka 4.4 runs as a
real process with JMX on 127.0.0.1, and Kafka's own ``JmxTool`` (kafka-tools 4.4) reads its
BrokerTopicMetrics; kafkalog's endpoint is scraped with prometheus_client's parser. Where both
count the same thing (bytes in, bytes out, messages in, produce requests per partition) the counts
are the same."""

from __future__ import annotations

import os
import re
import time
import uuid
from typing import Any

import pytest

from tests import kafka44
from tests.server.broker_process import BrokerProcess
from tests.server.test_metrics import scrape, value

pytestmark = pytest.mark.slow
pytest.importorskip("prometheus_client")

N = 25
#: Kafka's meter -> the JMX exporter's name of kafkalog's counter
METERS = {"BytesInPerSec": "kafka_server_brokertopicmetrics_bytesin_total",
          "BytesOutPerSec": "kafka_server_brokertopicmetrics_bytesout_total",
          "MessagesInPerSec": "kafka_server_brokertopicmetrics_messagesin_total",
          "TotalProduceRequestsPerSec": "kafka_server_brokertopicmetrics_totalproducerequests_total"}


def workload(bootstrap: str, topic: str) -> None:
    """One partition: N single-record produce requests, then one consumer reads them all from 0."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0, api_version=(3, 0))
    deadline = time.monotonic() + 60
    while True:         # Kafka: the partition's leader is elected a moment after CreateTopics
        try:
            producer.send(topic, b"value-0", key=b"k0", partition=0).get(timeout=10)
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    for i in range(1, N):
        producer.send(topic, b"value-%d" % i, key=b"k%d" % i, partition=0).get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, api_version=(3, 0))
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek(TopicPartition(topic, 0), 0)
    got = 0
    deadline = time.monotonic() + 60
    while got < N and time.monotonic() < deadline:
        got += sum(len(v) for v in consumer.poll(timeout_ms=500).values())
    consumer.close()
    assert got == N


def jmx_count(url: str, mbean: str) -> float:
    """An MBean's ``Count`` as Kafka's JmxTool reads it."""
    r = kafka44.run_tool("org.apache.kafka.tools.JmxTool", "--jmx-url", url, "--object-name", mbean,
                         "--attributes", "Count", "--one-time", "true", "--report-format", "properties",
                         timeout=120)
    found = re.search(r"Count=([0-9.E]+)", r.stdout)
    assert found is not None, (mbean, r.stdout, r.stderr[-2000:])
    return float(found.group(1))


@pytest.fixture
def kafka_with_jmx(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    kafka44.require()
    port = kafka44.free_port()
    broker = kafka44.KafkaBroker(tmp_path / "kafka44")
    broker.format()
    # the JVM's JMX agent, on 127.0.0.1 only, without authentication (a test's broker); only the
    # broker's JVM gets it (JmxTool's would take the same port)
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", " ".join([
        "-Dcom.sun.management.jmxremote", f"-Dcom.sun.management.jmxremote.port={port}",
        f"-Dcom.sun.management.jmxremote.rmi.port={port}", "-Dcom.sun.management.jmxremote.host=127.0.0.1",
        "-Djava.rmi.server.hostname=127.0.0.1", "-Dcom.sun.management.jmxremote.authenticate=false",
        "-Dcom.sun.management.jmxremote.ssl=false"]))
    broker.start()
    monkeypatch.delenv("JAVA_TOOL_OPTIONS")
    try:
        yield broker, f"service:jmx:rmi:///jndi/rmi://127.0.0.1:{port}/jmxrmi"
    finally:
        if broker.alive():
            broker.stop()


def test_broker_topic_metrics_count_as_kafka_44s(kafka_with_jmx: Any, tmp_path: Any) -> None:
    kafka, jmx_url = kafka_with_jmx
    topic = "jmx-" + uuid.uuid4().hex[:6]
    workload(kafka.bootstrap, topic)
    theirs = {m: jmx_count(jmx_url, f"kafka.server:type=BrokerTopicMetrics,name={m},topic={topic}")
              for m in METERS}
    ours = BrokerProcess(str(tmp_path / "kafkalog" / "data"), ["group.initial.rebalance.delay.ms=0"],
                         extra_args=["--metrics-port", "0", "--format", "json"])
    os.makedirs(tmp_path / "kafkalog")
    with ours.running():
        workload(ours.bootstrap, topic)
        fams = scrape(ours.listening["metrics"])
        mine = {m: value(fams, name, topic=topic) for m, name in METERS.items()}
    assert theirs["MessagesInPerSec"] == N
    assert theirs["BytesInPerSec"] > 0 and theirs["BytesOutPerSec"] > 0
    assert mine == theirs, f"Kafka 4.4: {theirs}, kafkalog: {mine}"
