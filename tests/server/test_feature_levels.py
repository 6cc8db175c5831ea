"""UpdateFeatures changes the finalized feature levels (issue 38): the same sequence of updates against
Apache Kafka 4.4 and ``kafkalog serve`` (valid and refused ones, ``validate_only``, each upgrade type,
v0's ``allow_downgrade``, unknown features, levels out of range, kraft.version and metadata.version's
own rules, a dependency on metadata.version), answered equally on both, with ApiVersions' finalized
features after each; what a level gates answers as Kafka does (ConsumerGroupHeartbeat with
group.version 0, ShareGroupHeartbeat with share.version 0, StreamsGroupHeartbeat with streams.version
0); a restart of both keeps the changed levels; Kafka's ``kafka-features`` tool (describe, upgrade,
downgrade, disable, their dry runs and refusals) prints the same on both.

ApiVersions' ``finalized_features_epoch`` is compared by what it does (it grows with each change that
is applied, and stays with one that is not), not by value: Kafka's is its metadata log's offset."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kafkalog.server.handlers.feature_gates import GATED
from tests import kafka44
from tests.ecosystem import ToolSession
from tests.ecosystem.test_tools import Flow, _tokens
from tests.server import differential as d
from tests.server.broker_process import BrokerProcess

Pair = tuple[kafka44.KafkaBroker, BrokerProcess]
UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3
USED: set[d.Allowed] = set()

#: the finalized levels of a new Kafka 4.4 cluster
INITIAL = {"eligible.leader.replicas.version": 1, "group.version": 1, "kraft.version": 1,
           "metadata.version": 33, "share.version": 2, "streams.version": 1, "transaction.version": 2}

#: the levels the restart test leaves changed (group.version 0 is not finalized)
CHANGED = {**{k: v for k, v in INITIAL.items() if k != "group.version"}, "transaction.version": 1, "share.version": 1}


class Epochs:
    """A session's view of ApiVersions: the finalized features recorded, the epoch checked to grow
    exactly when the levels changed."""

    def __init__(self, c: d.Conn) -> None:
        self.c = c
        self.epoch: int | None = None
        self.levels: dict[str, int] | None = None

    def finalized(self) -> tuple[int, dict[str, int]]:
        r = self.c.request(18, 4, {"client_software_name": "kafkalog-features", "client_software_version": "1"})
        return int(r.finalized_features_epoch), {f.name: int(f.max_version_level) for f in r.finalized_features}

    def record(self, label: str, expect: dict[str, int] | None = None) -> None:
        """ApiVersions v4 and v3 under ``label`` once the levels are ``expect`` (Kafka's broker
        learns a change from its controller a moment after the answer)."""
        deadline = time.monotonic() + 30
        epoch, levels = self.finalized()
        while expect is not None and levels != expect and time.monotonic() < deadline:
            time.sleep(0.05)
            epoch, levels = self.finalized()
        # (a wrong expectation failed silently before, after 30 s: six of them made this file 3 min)
        assert expect is None or levels == expect, (self.c.name, label, levels, expect)
        if self.levels is not None and self.epoch is not None:
            changed = levels != self.levels
            assert (epoch > self.epoch) if changed else (epoch >= self.epoch), (self.c.name, label, epoch,
                                                                               self.epoch)
        self.epoch, self.levels = epoch, levels
        for v in (3, 4):
            self.c.call(f"ApiVersions v{v} {label}", 18, v, {
                "client_software_name": "kafkalog-features", "client_software_version": "1"},
                transform=_features_only)


def _features_only(p: Any) -> Any:
    """The features of an ApiVersions answer, and which of the APIs a feature gates it lists (all,
    whatever their feature's level)."""
    return {"error_code": p["error_code"], "supported_features": p.get("supported_features"),
            "finalized_features": p.get("finalized_features"),
            "gated api_keys": sorted(k["api_key"] for k in p["api_keys"] if k["api_key"] in GATED)}


def _update(c: d.Conn, label: str, version: int, updates: list[tuple[str, int, int]],
            validate_only: bool = False) -> Any:
    return c.call(f"UpdateFeatures v{version}: {label}", 57, version, {
        "timeout": 30000, "validate_only": validate_only, "feature_updates": [
            {"feature": f, "max_version_level": level, "upgrade_type": upgrade,
             "allow_downgrade": upgrade != UPGRADE} for f, level, upgrade in updates]})


def s_feature_updates(c: d.Conn) -> None:
    e = Epochs(c)
    levels = dict(INITIAL)
    e.record("at the start", levels)

    def step(label: str, version: int, updates: list[tuple[str, int, int]], validate_only: bool = False,
             applied: bool = False) -> None:
        _update(c, label, version, updates, validate_only)
        if applied:
            for f, level, _ in updates:
                levels[f] = level
        e.record(f"after {label}", {k: v for k, v in levels.items() if v > 0})

    # group.version: the consumer group protocol
    step("group.version 0, validated", 2, [("group.version", 0, SAFE_DOWNGRADE)], validate_only=True)
    step("group.version 0 as an upgrade", 2, [("group.version", 0, UPGRADE)])
    step("group.version 0", 2, [("group.version", 0, SAFE_DOWNGRADE)], applied=True)
    heartbeat = {"group_id": "features-g", "member_id": "", "member_epoch": 0, "instance_id": None,
                 "rack_id": None, "rebalance_timeout_ms": 30000, "subscribed_topic_names": ["features-t"],
                 "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": []}
    for v in (0, 1):
        c.call(f"ConsumerGroupHeartbeat v{v} with group.version 0", 68, v, heartbeat)
        c.call(f"ConsumerGroupDescribe v{v} with group.version 0", 69, v, {
            "group_ids": ["features-g"], "include_authorized_operations": False})
    step("group.version 1 as a downgrade", 2, [("group.version", 1, SAFE_DOWNGRADE)])
    step("group.version 1", 1, [("group.version", 1, UPGRADE)], applied=True)
    c.call("ConsumerGroupHeartbeat v1 with group.version 1", 68, 1, heartbeat)
    # transaction.version: each upgrade type
    step("transaction.version 1, unsafe", 2, [("transaction.version", 1, UNSAFE_DOWNGRADE)], applied=True)
    # refused by Kafka 4.4 (INVALID_UPDATE_VERSION: "Can't downgrade ... without setting the upgrade
    # type"), v0's allow_downgrade notwithstanding, and by kafkalog
    step("transaction.version 0 (allow_downgrade)", 0, [("transaction.version", 0, SAFE_DOWNGRADE)])
    step("transaction.version 2, validated", 1, [("transaction.version", 2, UPGRADE)], validate_only=True)
    step("transaction.version 3", 2, [("transaction.version", 3, UPGRADE)])
    step("transaction.version 2 (v0)", 0, [("transaction.version", 2, UPGRADE)], applied=True)
    step("transaction.version 2 again", 2, [("transaction.version", 2, UPGRADE)])
    # share.version and streams.version
    step("share.version 0 and streams.version 0", 2,
         [("share.version", 0, SAFE_DOWNGRADE), ("streams.version", 0, UNSAFE_DOWNGRADE)], applied=True)
    c.call("ShareGroupHeartbeat v1 with share.version 0", 76, 1, {
        "group_id": "features-s", "member_id": "c2hhcmUtbWVtYmVyLWZlYXR1cmU", "member_epoch": 0, "rack_id": None,
        "subscribed_topic_names": ["features-t"]})
    c.call("StreamsGroupHeartbeat v0 with streams.version 0", 88, 0, {
        "group_id": "features-st", "member_id": "streams-member", "member_epoch": 0, "endpoint_information_epoch": 0,
        "instance_id": None, "rack_id": None, "rebalance_timeout_ms": 30000, "topology": None,
        "active_tasks": None, "standby_tasks": None, "warmup_tasks": None, "process_id": "p",
        "user_endpoint": None, "client_tags": None, "task_offsets": None, "task_end_offsets": None,
        "shutdown_application": False})
    c.call("ShareGroupDescribe v1 with share.version 0", 77, 1, {"group_ids": ["features-s"],
                                                                 "include_authorized_operations": False})
    c.call("ShareFetch v1 with share.version 0", 78, 1, {
        "group_id": "features-s", "member_id": "c2hhcmUtbWVtYmVyLWZlYXR1cmU", "share_session_epoch": 0,
        "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 10, "batch_size": 10,
        "topics": [], "forgotten_topics_data": []})
    c.call("ShareAcknowledge v1 with share.version 0", 79, 1, {
        "group_id": "features-s", "member_id": "c2hhcmUtbWVtYmVyLWZlYXR1cmU", "share_session_epoch": 1,
        "topics": []})
    c.call("DescribeShareGroupOffsets v0 with share.version 0", 90, 0, {"groups": [
        {"group_id": "features-s", "topics": None}]})
    c.call("AlterShareGroupOffsets v0 with share.version 0", 91, 0, {"group_id": "features-s", "topics": []})
    c.call("DeleteShareGroupOffsets v0 with share.version 0", 92, 0, {"group_id": "features-s", "topics": []})
    c.call("StreamsGroupDescribe v0 with streams.version 0", 89, 0, {"group_ids": ["features-st"],
                                                                     "include_authorized_operations": False})
    step("share.version 1", 2, [("share.version", 1, UPGRADE)], applied=True)
    step("share.version 2 and streams.version 1", 2,
         [("share.version", 2, UPGRADE), ("streams.version", 1, UPGRADE)], applied=True)
    # eligible.leader.replicas.version, and its dependency on metadata.version
    step("eligible.leader.replicas.version 0", 2, [("eligible.leader.replicas.version", 0, SAFE_DOWNGRADE)],
         applied=True)
    step("eligible.leader.replicas.version 1 with metadata.version 22", 2,
         [("eligible.leader.replicas.version", 1, UPGRADE), ("metadata.version", 22, SAFE_DOWNGRADE)])
    step("eligible.leader.replicas.version 1", 2, [("eligible.leader.replicas.version", 1, UPGRADE)], applied=True)
    # metadata.version and kraft.version
    for label, level, upgrade in (("metadata.version 32", 32, SAFE_DOWNGRADE),
                                  ("metadata.version 32, unsafe", 32, UNSAFE_DOWNGRADE),
                                  ("metadata.version 34", 34, UPGRADE), ("metadata.version 6", 6, SAFE_DOWNGRADE),
                                  ("metadata.version 33", 33, UPGRADE), ("metadata.version 0", 0, UNSAFE_DOWNGRADE)):
        step(label, 2, [("metadata.version", level, upgrade)])
    for label, level, upgrade in (("kraft.version 0", 0, SAFE_DOWNGRADE), ("kraft.version 0 unsafe", 0,
                                  UNSAFE_DOWNGRADE), ("kraft.version 1", 1, UPGRADE), ("kraft.version 2", 2, UPGRADE)):
        step(label, 2, [("kraft.version", level, upgrade)])
    # refusals: the whole request fails on its first bad update
    step("an unknown feature", 2, [("group.version", 0, SAFE_DOWNGRADE), ("features.nosuch", 1, UPGRADE)])
    step("too high a level", 1, [("share.version", 3, UPGRADE)])
    step("a negative level", 2, [("streams.version", -1, SAFE_DOWNGRADE)])
    step("an unknown upgrade type", 2, [("streams.version", 0, 9)])
    step("three features, one refused", 2, [("group.version", 0, SAFE_DOWNGRADE), ("transaction.version", 1,
         SAFE_DOWNGRADE), ("share.version", 7, UPGRADE)])
    step("two refused: Kafka's controller checks group.version first", 2,
         [("transaction.version", 5, UPGRADE), ("group.version", 9, UPGRADE)])
    step("a feature twice", 2, [("group.version", 0, SAFE_DOWNGRADE), ("group.version", 1, UPGRADE)])
    step("three features, validated", 2, [("group.version", 0, SAFE_DOWNGRADE), ("transaction.version", 1,
         SAFE_DOWNGRADE), ("share.version", 1, SAFE_DOWNGRADE)], validate_only=True)
    step("nothing", 2, [])


SESSIONS: dict[str, Callable[[d.Conn], None]] = {"feature_updates": s_feature_updates}


def _run(pair: Pair, session: Callable[[d.Conn], None]) -> None:
    kafka, ours = d.run_pair(session, pair[0].port, pair[1].port)
    bad = list(d.uncovered(d.differences(kafka, ours), d.allowed_differences(), USED))
    report = "\n".join(f"{label} | {path} | kafka={a!r} | kafkalog={b!r}" for label, path, a, b in bad[:80])
    assert not bad, f"{len(bad)} difference(s) from Kafka 4.4 not listed in docs/kafka-compatibility.md:\n{report}"


def test_feature_updates_answer_as_kafka(kafka_pair: Pair) -> None:
    _run(kafka_pair, s_feature_updates)


def _levels_after_restart(c: d.Conn) -> None:
    e = Epochs(c)
    e.record("after the restart", CHANGED)
    c.call("ConsumerGroupHeartbeat v1 after the restart", 68, 1, {
        "group_id": "features-r", "member_id": "", "member_epoch": 0, "instance_id": None, "rack_id": None,
        "rebalance_timeout_ms": 30000, "subscribed_topic_names": ["features-t"], "subscribed_topic_regex": None,
        "server_assignor": None, "topic_partitions": []})
    _update(c, "back to the start", 2, [("group.version", 1, UPGRADE), ("transaction.version", 2, UPGRADE),
                                       ("share.version", 2, UPGRADE)])
    e.record("back at the start", INITIAL)


def test_a_restart_keeps_the_levels(kafka_pair: Pair) -> None:
    """Changed levels outlive a restart: Kafka 4.4 stopped and started, kafkalog killed (SIGKILL: the
    change was stored before it was acknowledged) and started."""
    kafka, ours = kafka_pair
    for port in (kafka.port, ours.port):
        c = d.Conn("setup", port)
        try:
            r = _update(c, "", 2, [("group.version", 0, SAFE_DOWNGRADE), ("transaction.version", 1, SAFE_DOWNGRADE),
                                   ("share.version", 1, SAFE_DOWNGRADE)])
            assert int(r.error_code) == 0, r
            Epochs(c).record("", CHANGED)
        finally:
            c.close()
    kafka.stop()
    ours.kill()
    kafka.start()
    ours.start()
    _run(kafka_pair, _levels_after_restart)


# --- kafka-features ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with ToolSession(tmp_path_factory.mktemp("tools")) as s:
        yield s


def _kafka_features(f: Flow) -> None:
    run = f.run
    run("kafka-features", "describe")
    run("kafka-features", "upgrade", "--feature", "group.version=1")
    run("kafka-features", "downgrade", "--feature", "transaction.version=1", "--dry-run")
    run("kafka-features", "describe")
    run("kafka-features", "downgrade", "--feature", "transaction.version=1")
    run("kafka-features", "disable", "--feature", "group.version")
    run("kafka-features", "describe")
    run("kafka-features", "downgrade", "--feature", "group.version=1")
    run("kafka-features", "upgrade", "--feature", "group.version=1", "--feature", "transaction.version=2")
    run("kafka-features", "downgrade", "--feature", "share.version=1", "--unsafe")
    run("kafka-features", "upgrade", "--feature", "share.version=3")
    run("kafka-features", "upgrade", "--feature", "features.nosuch=1")
    run("kafka-features", "upgrade", "--feature", "transaction.version=1")
    run("kafka-features", "disable", "--feature", "kraft.version")
    run("kafka-features", "disable", "--feature", "eligible.leader.replicas.version", "--dry-run")
    run("kafka-features", "downgrade", "--metadata", "4.3-IV0")
    run("kafka-features", "downgrade", "--metadata", "4.3-IV0", "--unsafe")
    run("kafka-features", "upgrade", "--metadata", "4.4-IV2")
    run("kafka-features", "upgrade", "--release-version", "4.4-IV2")
    run("kafka-features", "upgrade", "--feature", "share.version=2")
    run("kafka-features", "describe")


def test_kafka_features_tool(kafka_pair: Pair, tools: ToolSession, tmp_path: Path) -> None:
    """Kafka's ``kafka-features`` against both: every printed line equal (the epoch column is the
    metadata log's offset on Kafka: left out, as a time is); each broker's levels back at the start."""
    out = []
    for name, bootstrap, log_dir in (("kafka", kafka_pair[0].bootstrap, str(kafka_pair[0].log_dir)),
                                     ("kafkalog", kafka_pair[1].bootstrap, kafka_pair[1].data_dir)):
        f = Flow(tools, bootstrap, log_dir, tmp_path / name)
        f.workdir.mkdir()
        _kafka_features(f)
        out.append(_tokens(f.transcript))
    bad = list(d.uncovered(d.differences(*out), d.allowed_differences(), USED))
    report = "\n".join(f"{lab} | {path} | kafka={x!r} | kafkalog={y!r}" for lab, path, x, y in bad[:60])
    assert not bad, f"kafka-features saw Kafka 4.4 and kafkalog differ:\n{report}"
    describe = dict(out[1])["tool kafka-features describe"]["stdout"]
    assert any(line.startswith("Feature: transaction.version") and "FinalizedVersionLevel: 2" in line
               for line in describe), describe


@pytest.mark.parametrize("content, message", [
    ("{not json", "cannot read the feature levels"),
    ('{"epoch": 3, "levels": {"group.version": 7}}', "'group.version' at level 7"),
    ('{"epoch": 3, "levels": {"features.nosuch": 1}}', "'features.nosuch'"),
    ('[1, 2]', 'JSON object with an "epoch" and "levels"'),
])
def test_a_damaged_feature_file_is_refused(tmp_path: Path, content: str, message: str) -> None:
    """A feature file that is not one kafkalog wrote: ``serve`` exits 2 naming it, and leaves it be."""
    data = tmp_path / "data"
    BrokerProcess(str(data)).start().stop()
    path = data / "kafkalog-features.json"
    path.write_text(content)
    r = subprocess.run([sys.executable, "-m", "kafkalog.cli.main", "serve", str(data), "--port", "0"],
                       capture_output=True, text=True, timeout=120, check=False)
    err = json.loads(r.stdout.strip().splitlines()[-1])
    assert r.returncode == 2 and err["error"] == "InvalidConfigError", (r.stdout, r.stderr)
    assert message in err["message"] and str(path) in json.dumps(err), err
    assert path.read_text() == content
