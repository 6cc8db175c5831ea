"""``broker.rack`` and ``replica.selector.class`` (issue 38: confluent-kafka-go's test broker sets both,
and kafkalog refused them as unknown keys). Both brokers of the pair run with the keys of that test
broker; the node's rack is answered in Metadata and DescribeCluster, a Fetch naming a rack (the
client's ``client.rack``) is answered by the leader with no preferred read replica (one replica: Kafka's
RackAwareReplicaSelector picks it), and DescribeConfigs shows both keys as static broker configs:
every answer equal to Kafka 4.4's (with the synonyms of broker keys, which kafkalog answered empty
before). A selector class Kafka's clients jar does not have stops the start
with Kafka's message, nothing created."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests import kafka44
from tests.server import differential as d
from tests.server.broker_process import BrokerProcess
from tests.server.test_differential import _batch, _fetch, _now, _produce

RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
PAIR_CONFIGS = {"broker.rack": "RACK1", "replica.selector.class": RACK_AWARE}


def s_rack(c: d.Conn) -> None:
    c.create_topic("rack-t", 1)
    _produce(c, "", 9, "rack-t", _batch([b"r"] * 2, _now()), record=False)
    for v in (1, 4, 9, 12, 13):
        c.call(f"Metadata v{v}", 3, v, {"topics": [{"name": "rack-t", "topic_id": None}],
                                        "allow_auto_topic_creation": False,
                                        "include_cluster_authorized_operations": False,
                                        "include_topic_authorized_operations": False}, retry=frozenset())
    for v in (0, 1, 2):
        c.call(f"DescribeCluster v{v}", 60, v, {"include_cluster_authorized_operations": False,
                                                 "endpoint_type": 1, "include_fenced_brokers": False},
               retry=frozenset())
    for v in (11, 12, 17):
        for rack in ("RACK1", "RACK2"):
            r = _fetch(c, f"Fetch v{v} rack {rack}", v, "rack-t", rack=rack)
            assert int(r.responses[0].partitions[0].preferred_read_replica) == -1
    c.call("DescribeConfigs v4: broker rack and selector", 32, 4, {"resources": [{
        "resource_type": 4, "resource_name": "1",
        "configuration_keys": ["broker.rack", "replica.selector.class", "num.partitions",
                               "delete.topic.enable", "group.initial.rebalance.delay.ms"]}],
        "include_synonyms": True, "include_documentation": True}, retry=frozenset())


def test_rack_and_selector_answered_as_kafka(kafka_pair: tuple[kafka44.KafkaBroker, BrokerProcess]) -> None:
    kafka, ours = d.run_pair(s_rack, kafka_pair[0].port, kafka_pair[1].port)
    assert ours == kafka, d.differences(kafka, ours)
    brokers = dict(ours)["Metadata v12"]["brokers"]
    assert [b["rack"] for b in (brokers.values() if isinstance(brokers, dict) else brokers)] == ["RACK1"]


def test_an_unknown_selector_class_stops_the_start(tmp_path: os.PathLike[str]) -> None:
    data = os.path.join(tmp_path, "data")
    r = subprocess.run([sys.executable, "-m", "kafkalog.cli.main", "serve", data, "--port", "0",
                        "--config", "replica.selector.class=com.example.NearestReplica"],
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 2, (r.stdout, r.stderr)
    err = json.loads(r.stdout.strip().splitlines()[-1])
    assert err["error"] == "InvalidConfigError"
    assert "Class com.example.NearestReplica could not be found" in err["message"], err
    assert not os.path.exists(data)
