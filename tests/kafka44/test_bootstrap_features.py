"""Finalized feature levels, handed over both ways (issue 38).

1. ``kafkalog serve``'s levels changed by UpdateFeatures (``kafkalog-features.json``);
   ``kafka-storage.sh format`` + ``kafkalog bootstrap-topics`` write them into the new cluster's bootstrap
   snapshot as ``FeatureLevelRecord`` s; Kafka 4.4 started on the directory finalizes the same levels
   (ApiVersions) and refuses ConsumerGroupHeartbeat at group.version 0 as kafkalog did.
2. The ``FeatureLevelRecord`` written is byte for byte the one ``kafka-storage.sh format --feature``
   writes; a feature file finalizing another metadata.version than the snapshot is refused naming it, a
   damaged one too (nothing written); without the file nothing is added.
3. A directory Kafka 4.4 wrote (formatted with ``--feature group.version=0``, a level changed while it ran)
   is served by ``kafkalog serve`` with Kafka's finalized levels, no file written until a level changes.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from kafkalog.log.cluster_metadata import METADATA_PARTITION
from kafkalog.record.records import iter_batches
from kafkalog.server.features import FEATURES_FILE
from tests import kafka44
from tests.kafka44.test_bootstrap_security import _directory, _formatted, _meta, _records_of, _snapshot
from tests.server import differential as d
from tests.server.broker_process import BrokerProcess

pytestmark = pytest.mark.kafka

UPGRADE, SAFE_DOWNGRADE = 1, 2
#: the levels both sides change: group.version off, transactions v1, share groups v1
CHANGES = [("group.version", 0), ("transaction.version", 1), ("share.version", 1)]
HEARTBEAT = {"group_id": "handover-g", "member_id": "", "member_epoch": 0, "instance_id": None, "rack_id": None,
             "rebalance_timeout_ms": 30000, "subscribed_topic_names": ["handover-t"],
             "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": []}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kafkalog.cli.main", *args], capture_output=True, text=True,
                          timeout=300, check=False)


def _finalized(c: d.Conn) -> dict[str, int]:
    r = c.request(18, 4, {"client_software_name": "handover", "client_software_version": "1"})
    return {f.name: int(f.max_version_level) for f in r.finalized_features}


def _await_finalized(c: d.Conn, expect: dict[str, int]) -> dict[str, int]:
    """ApiVersions' finalized levels once they are ``expect`` (a Kafka broker learns them from its
    controller a moment after it starts or answers UpdateFeatures), or as they are after 30 s."""
    deadline = time.monotonic() + 30
    got = _finalized(c)
    while got != expect and time.monotonic() < deadline:
        time.sleep(0.1)
        got = _finalized(c)
    return got


def _change(c: d.Conn, changes: list[tuple[str, int]], upgrade_type: int = SAFE_DOWNGRADE) -> None:
    r = c.request(57, 2, {"timeout": 30000, "validate_only": False, "feature_updates": [
        {"feature": f, "max_version_level": level, "upgrade_type": upgrade_type, "allow_downgrade": True}
        for f, level in changes]})
    assert int(r.error_code) == 0, r           # v2 answers without per-feature results


def _gated(c: d.Conn) -> dict[str, Any]:
    """What group.version gates: ConsumerGroupHeartbeat v0 and v1's error codes."""
    return {f"ConsumerGroupHeartbeat v{v}": int(c.request(68, v, HEARTBEAT).error_code) for v in (0, 1)}


def _expected(levels: dict[str, int], changes: list[tuple[str, int]]) -> dict[str, int]:
    out = {**levels, **dict(changes)}
    return {k: v for k, v in out.items() if v > 0}


@pytest.mark.slow
def test_kafka_adopts_the_feature_levels_kafkalog_changed(tmp_path: Path) -> None:
    kafka44.require()
    data = tmp_path / "data"
    ours = BrokerProcess(str(data)).start()
    try:
        c = d.Conn("kafkalog", ours.port)
        initial = _finalized(c)
        _change(c, CHANGES)
        served = _finalized(c)
        gated = _gated(c)
        c.close()
    finally:
        if ours.alive():
            assert ours.stop() == 0, ours.stderr()
    assert served == _expected(initial, CHANGES) and "group.version" not in served, served
    assert gated == {"ConsumerGroupHeartbeat v0": 35, "ConsumerGroupHeartbeat v1": 35}, gated
    meta = _meta(data)
    kafka = kafka44.KafkaBroker(tmp_path / "kafka", {"log.dirs": str(data), "node.id": meta["node.id"],
                                                     "metadata.log.dir": str(tmp_path / "metadata")})
    kafka.format(meta["cluster.id"], "--ignore-formatted")
    res = _cli("bootstrap-topics", str(data), "--metadata-log-dir", str(tmp_path / "metadata"))
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout.splitlines()[-1])
    # every feature of the file but metadata.version and kraft.version
    assert summary["featureLevels"] == 5, summary
    assert not (tmp_path / "metadata" / FEATURES_FILE).exists()
    try:
        kafka.start()
        c = d.Conn("kafka", kafka.port)
        adopted = _await_finalized(c, served)
        assert adopted == served
        assert _gated(c) == gated
        c.close()
        kafka.stop()
    finally:
        if kafka.alive():
            kafka.kill()


# --- the record is Kafka's; careless paths --------------------------------------------------------

def _write_levels(data: Path, levels: dict[str, int]) -> None:
    base = {"eligible.leader.replicas.version": 1, "group.version": 1, "kraft.version": 1,
            "metadata.version": 33, "share.version": 2, "streams.version": 1, "transaction.version": 2}
    (data / FEATURES_FILE).write_text(json.dumps({"version": 1, "epoch": 4, "levels": {**base, **levels}}))


def test_the_feature_record_is_the_one_kafka_storage_format_writes(tmp_path: Path) -> None:
    """transaction.version 1 in the feature file: bootstrap-topics appends a ``FeatureLevelRecord`` byte for
    byte the one ``kafka-storage.sh format --feature transaction.version=1`` writes, after the format's
    own (transaction.version 2); group.version 0 is a record at level 0 (it removes the feature)."""
    kafka44.require()
    data = _directory(tmp_path)
    theirs = _formatted(tmp_path, data, "theirs", "--feature", "transaction.version=1")
    kafkas = [r for r in _records_of(theirs, 12) if b"transaction.version" in r]
    assert len(kafkas) == 1
    ours = _formatted(tmp_path, data, "ours")
    formatted = _records_of(ours, 12)
    _write_levels(data, {"transaction.version": 1, "group.version": 0})
    res = _cli("bootstrap-topics", str(data), "--metadata-log-dir", str(ours))
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout.splitlines()[-1])["featureLevels"] == 5
    added = _records_of(ours, 12)
    assert added[:len(formatted)] == formatted
    assert kafkas[0] in added[len(formatted):]
    zero = [r for r in added[len(formatted):] if b"group.version" in r]
    assert len(zero) == 1 and zero[0].endswith(b"\x00\x00\x00"), zero       # level 0, no tagged fields
    assert not any(b"metadata.version" in r or b"kraft.version" in r for r in added[len(formatted):])


def _one_error(res: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    lines = (res.stdout + res.stderr).splitlines()
    assert res.returncode == 2 and len(lines) == 1, lines        # printed once
    return dict(json.loads(lines[0]))


def test_another_metadata_version_or_a_damaged_file_is_refused(tmp_path: Path) -> None:
    """A snapshot formatted for another metadata.version than the directory finalizes, and a damaged
    feature file: exit 2, one typed error naming the feature file, snapshot and directory unchanged."""
    kafka44.require()
    data = _directory(tmp_path)
    _write_levels(data, {"group.version": 0})
    older = _formatted(tmp_path, data, "older", "--release-version", "4.3-IV0")
    before, listing = _snapshot(older).read_bytes(), sorted(p.name for p in data.rglob("*"))
    error = _one_error(_cli("bootstrap-topics", str(data), "--metadata-log-dir", str(older)))
    assert (error["error"], error["file"]) == ("LogDirError", str(data / FEATURES_FILE)), error
    assert "metadata.version 33" in error["message"], error
    assert _snapshot(older).read_bytes() == before and sorted(p.name for p in data.rglob("*")) == listing
    pristine = _formatted(tmp_path, data, "pristine")
    before = _snapshot(pristine).read_bytes()
    for damage in ("{not json", '{"epoch": 2, "levels": {"group.version": 9}}'):
        (data / FEATURES_FILE).write_text(damage)
        error = _one_error(_cli("bootstrap-topics", str(data), "--metadata-log-dir", str(pristine)))
        assert (error["error"], error["file"]) == ("InvalidConfigError", str(data / FEATURES_FILE)), error
        assert _snapshot(pristine).read_bytes() == before
    (data / FEATURES_FILE).unlink()
    res = _cli("bootstrap-topics", str(data), "--metadata-log-dir", str(pristine))
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout.splitlines()[-1])
    assert (summary["featureLevels"], summary["records"]) == (0, 2), summary
    batches = list(iter_batches(_snapshot(pristine).read_bytes()))
    assert len(batches) == len(list(iter_batches(before))) + 1       # one batch: the topic's two records


# --- the other way: Kafka's metadata log to kafkalog serve ------------------------------------------

@pytest.mark.slow
def test_kafkalog_serves_the_feature_levels_of_a_kafka_directory(tmp_path: Path) -> None:
    """Kafka 4.4 formatted with group.version 0, transaction.version and share.version changed while it
    ran (FeatureLevelRecords in its log after the snapshot's) and share.version changed back up: kafkalog
    serve on its directory finalizes the same levels, refuses ConsumerGroupHeartbeat as Kafka did, and
    writes the feature file only when UpdateFeatures changes a level."""
    kafka44.require()
    kafka = kafka44.KafkaBroker(tmp_path / "kafka", {})
    kafka.format(None, "--feature", "group.version=0")
    try:
        kafka.start()
        c = d.Conn("kafka", kafka.port)
        initial = _finalized(c)
        assert "group.version" not in initial, initial
        _change(c, [("transaction.version", 1), ("share.version", 0)])
        _change(c, [("share.version", 1)], UPGRADE)
        expect = _expected(initial, [("transaction.version", 1), ("share.version", 1)])
        theirs = _await_finalized(c, expect)
        gated = _gated(c)
        c.close()
        kafka.stop()
    finally:
        if kafka.alive():
            kafka.kill()
    assert theirs == expect, theirs
    assert (kafka.log_dir / METADATA_PARTITION).is_dir() and not (kafka.log_dir / FEATURES_FILE).exists()
    ours = BrokerProcess(str(kafka.log_dir)).start()
    try:
        c = d.Conn("kafkalog", ours.port)
        assert _finalized(c) == theirs
        assert _gated(c) == gated
        assert not (kafka.log_dir / FEATURES_FILE).exists()         # read, not copied
        _change(c, [("group.version", 1)], UPGRADE)
        assert _finalized(c) == {**theirs, "group.version": 1}
        c.close()
    finally:
        if ours.alive():
            assert ours.stop() == 0, ours.stderr()
    stored = json.loads((kafka.log_dir / FEATURES_FILE).read_text())["levels"]
    assert {k: v for k, v in stored.items() if v > 0} == {**theirs, "group.version": 1}
    shutil.rmtree(kafka.log_dir / METADATA_PARTITION)      # the file, not Kafka's log, from now on
    ours = BrokerProcess(str(kafka.log_dir)).start()
    try:
        c = d.Conn("kafkalog", ours.port)
        assert _finalized(c) == {**theirs, "group.version": 1}
        c.close()
    finally:
        if ours.alive():
            assert ours.stop() == 0, ours.stderr()

