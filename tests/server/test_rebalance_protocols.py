"""``group.coordinator.rebalance.protocols`` as Kafka 4.4 takes it (issue 38: confluent-kafka-go's test
broker sets ``classic,consumer``; kafkalog refused the key as unknown and did not start).

The same raw requests to Kafka 4.4 and ``kafkalog serve`` started with the same value: without
``consumer`` ConsumerGroupHeartbeat and ConsumerGroupDescribe are answered UNSUPPORTED_VERSION (every
group named), without ``streams`` StreamsGroupHeartbeat and StreamsGroupDescribe, the protocol listed is
served; DescribeConfigs shows the value. A value Kafka refuses (not a protocol, an empty list, one
without ``classic``) stops kafkalog at start with Kafka's message, before any directory is made."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests import kafka44
from tests.server.broker_process import BrokerProcess
from tests.server.test_group_configs import consumer_heartbeat, find_coordinator
from tests.server.test_streams_group_protocol import _call, heartbeat, topology

pytestmark = pytest.mark.kafka

KEY = "group.coordinator.rebalance.protocols"


def _answers(port: int) -> dict[str, Any]:
    """A consumer group member's join and a streams group member's join, then both describes (a group
    that exists and one that does not)."""
    find_coordinator(port, "cg")
    find_coordinator(port, "sg")
    cg = consumer_heartbeat(port, "cg", str(uuid.uuid4()), 0, "t")
    sg = heartbeat(port, "sg", str(uuid.uuid4()), 0, topology("src"))
    cgd = _call(port, 69, 1, {"group_ids": ["cg", "no-cg"], "include_authorized_operations": False})
    sgd = _call(port, 89, 0, {"group_ids": ["sg", "no-sg"], "include_authorized_operations": False})
    cfg = _call(port, 32, 4, {"resources": [{"resource_type": 4, "resource_name": "1", "configuration_keys": [KEY]}],
                              "include_synonyms": False, "include_documentation": False})
    refused = int(cg.error_code) != 0
    return {
        # a refusal's every field; a served join by its error code and heartbeat interval
        "consumer_heartbeat": (int(cg.error_code), cg.error_message, cg.member_epoch, cg.heartbeat_interval,
                               None if cg.assignment is None else "assignment") if refused
        else (int(cg.error_code), cg.heartbeat_interval),
        "consumer_describe": sorted((g.group_id, int(g.error_code), g.error_message, g.group_state, len(g.members))
                                    for g in cgd.groups),
        "streams_heartbeat": (sg["error_code"], sg if sg["error_code"] else sg["heartbeat_interval"]),
        "streams_describe": sorted((g.group_id, int(g.error_code), g.error_message, g.group_state, len(g.members))
                                   for g in sgd.groups),
        "describe_configs": [(c.name, c.value, int(c.config_source), c.read_only, int(c.config_type))
                             for r in cfg.results for c in r.configs],
    }


@pytest.mark.parametrize("protocols", ["classic,consumer", "classic,streams"])
def test_rebalance_protocols_gate_the_group_apis_as_kafka(tmp_path: Path, protocols: str) -> None:
    kafka44.require()
    with kafka44.KafkaBroker(tmp_path / "kafka44", {KEY: protocols}) as k:
        k.format()
        k.start()
        want = _answers(k.port)
    ours = BrokerProcess(str(tmp_path / "data"), configs=["node.id=1", "num.partitions=1",
                                                          "group.streams.initial.rebalance.delay.ms=0",
                                                          f"{KEY}={protocols}"])
    with ours.running():
        got = _answers(ours.port)
    assert got == want
    refused = "consumer" if "consumer" not in protocols else "streams"
    assert want[f"{refused}_heartbeat"][0] == 35 and {g[1] for g in want[f"{refused}_describe"]} == {35}
    served = "streams" if refused == "consumer" else "consumer"
    assert want[f"{served}_heartbeat"][0] == 0


@pytest.mark.parametrize("value", ["classic,bogus", "CLASSIC,consumer", "consumer,streams", ""])
def test_a_value_kafka_refuses_stops_the_start(tmp_path: Path, value: str) -> None:
    kafka44.require()
    k = kafka44.KafkaBroker(tmp_path / "kafka44", {KEY: value})
    with pytest.raises(kafka44.Kafka44Error) as e:
        k.format()
    m = re.search(r"ConfigException: (.*)", str(e.value))
    assert m, str(e.value)
    data = tmp_path / "data"
    r = subprocess.run([sys.executable, "-m", "kafkalog.cli.main", "serve", str(data), "--port", "0",
                        "--config", f"{KEY}={value}"], capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode != 0
    line = json.loads(r.stdout.splitlines()[0])
    assert (line["type"], line["message"]) == ("error", m.group(1).strip())
    assert not data.exists()
