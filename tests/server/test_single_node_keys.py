"""Kafka's single-node broker keys at ``kafkalog serve`` start (issue 34, defect 7): the replication keys
every quick-start and client CI config sets are taken from a server.properties file, and a replication
factor the one node cannot meet fails where a one-node Kafka 4.4 fails: its coordinators stay
unavailable while the internal topic cannot be created (compared side by side, ``kafka_pair`` with
this module's ``PAIR_CONFIGS``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests import kafka44
from tests.server import differential as d
from tests.server.broker_process import BrokerProcess

#: both brokers of the pair: internal topics with three replicas on one node
PAIR_CONFIGS = {"offsets.topic.replication.factor": "3", "transaction.state.log.replication.factor": "3",
                "share.coordinator.state.topic.replication.factor": "3"}

#: what franz-go's and Confluent's single-node CI configs set (Kafka's keys and a one-node cluster's values)
CI_KEYS = {
    "offsets.topic.replication.factor": "1", "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1", "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1", "group.initial.rebalance.delay.ms": "0",
    "auto.create.topics.enable": "true", "num.partitions": "3", "default.replication.factor": "1",
    "min.insync.replicas": "1",
}


def test_the_fixture_keys_are_kafkas_own() -> None:
    """The Kafka 4.4 fixture's single-node keys are among those kafkalog now takes (CI_KEYS)."""
    single_node = {k for k in kafka44.BASE_PROPERTIES if "replication" in k or ".isr" in k}
    assert single_node <= set(CI_KEYS)


def s_find_coordinator(c: d.Conn) -> None:
    for v in (1, 3):
        for key_type, key in ((0, "rf3-group"), (1, "rf3-txn")):
            c.call(f"FindCoordinator v{v} key type {key_type}", 10, v, {"key": key, "key_type": key_type},
                   retry=frozenset())
    for key_type, key in ((0, "rf3-group"), (1, "rf3-txn"), (2, "rf3-share:AAAAAAAAAAAAAAAAAAAAAA:0")):
        c.call(f"FindCoordinator v6 key type {key_type}", 10, 6, {"key_type": key_type, "coordinator_keys": [key]},
               retry=frozenset())


def test_a_replication_factor_above_one_node_fails_as_kafka(
        kafka_pair: tuple[kafka44.KafkaBroker, BrokerProcess]) -> None:
    kafka, ours = d.run_pair(s_find_coordinator, kafka_pair[0].port, kafka_pair[1].port)
    assert ours == kafka, d.differences(kafka, ours)
    assert dict(kafka)["FindCoordinator v3 key type 0"]["error_code"] == 15


def test_serve_takes_kafkas_single_node_keys_from_a_properties_file(tmp_path: os.PathLike[str]) -> None:
    props = os.path.join(tmp_path, "server.properties")
    with open(props, "w", encoding="utf-8") as f:
        f.write("".join(f"{k}={v}\n" for k, v in CI_KEYS.items()))
    broker = BrokerProcess(os.path.join(tmp_path, "data"), extra_args=["--config-file", props]).start()
    try:
        c = d.Conn("kafkalog", broker.port)
        try:
            for key_type in (0, 1):
                r = c.request(10, 3, {"key": "ci", "key_type": key_type})
                assert int(r.error_code) == 0, r
            c.create_topic("ci-t", 3)
            r = c.request(3, 12, {"topics": [{"name": "ci-auto", "topic_id": None}],
                                  "allow_auto_topic_creation": True, "include_topic_authorized_operations": False})
            assert int(r.topics[0].error_code) == 3                 # created after the answer, as Kafka
            c.wait_for_leaders("ci-auto", 3)                        # with num.partitions
        finally:
            c.close()
    finally:
        assert broker.stop() == 0, broker.stderr()


@pytest.mark.parametrize("key, value, message", [
    ("offsets.topic.replication.factor", "0", "Value must be at least 1"),
    ("transaction.state.log.replication.factor", "40000", "Not a number of type SHORT"),
])
def test_serve_refuses_a_value_kafka_refuses(tmp_path: os.PathLike[str], key: str, value: str, message: str) -> None:
    data = os.path.join(tmp_path, "data")
    r = subprocess.run([sys.executable, "-m", "kafkalog.cli.main", "serve", data, "--port", "0",
                        "--config", f"{key}={value}"], capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 2, (r.stdout, r.stderr)
    err = json.loads(r.stdout.strip().splitlines()[-1])
    assert err["error"] == "InvalidConfigError" and key in err["message"] and message in err["message"]
    assert not os.path.exists(data)
