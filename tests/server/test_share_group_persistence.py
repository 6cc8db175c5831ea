"""Share groups survive restarts in Kafka 4.4's own records. The same requests against Kafka 4.4
and ``kafkalog serve`` (records accepted, released, rejected, one still acquired when the broker is
SIGKILLed with the member's connection open), then a restart: kafkalog restores the share-partition
state from ``__share_group_state`` (ShareSnapshot/ShareUpdate) and the group from
``__consumer_offsets``; Kafka 4.4 started on a copy of kafkalog's directory adopts both; the answers
after the restart (start offset and lag, the group, the records delivered again with their delivery
counts) are the same from Kafka's own restart, kafkalog's, and Kafka's adoption of kafkalog's files,
which Kafka's DumpLogSegments decodes."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests import kafka44
from tests.server.broker_process import BrokerProcess
from tests.server.share_raw import SHARE_SETTINGS, ShareClient

#: member sessions long enough to outlive a restart
SETTINGS = dict(SHARE_SETTINGS, **{"group.share.session.timeout.ms": "45000",
                                   "group.share.max.session.timeout.ms": "60000",
                                   "group.share.record.lock.duration.ms": "15000"})


def _before_crash(port: int, sfx: str) -> tuple[ShareClient, list[Any]]:
    """Five records; m1 acquires them, accepts 0-1, releases 2, rejects 3; 4 stays acquired. The
    client is returned open: the broker dies under its connection."""
    c = ShareClient(port, "g" + sfx, sfx)
    c.known_topic("t" + sfx)
    c.produce_values("t" + sfx, [b"a", b"b", b"c", b"d", b"e"])
    c.alter_config({"share.auto.offset.reset": "earliest"})
    c.heartbeat("m1", 0, ["t" + sfx])
    c.settle(["m1"], "t" + sfx, 1)
    c.fetch_until("m1", "t" + sfx, [0])
    c.acknowledge("m1", "t" + sfx, {0: [(0, 1, [1]), (2, 2, [2]), (3, 3, [3])]})
    return c, list(c.transcript)


def _after_restart(port: int, sfx: str, labels: dict[str, str]) -> list[Any]:
    topic = "t" + sfx
    c = ShareClient(port, "g" + sfx, sfx)
    try:
        c.known_topic(topic)
        c.members = dict(labels)
        c.describe_offsets(topic, [0])
        c.describe()
        c.heartbeat("m2", 0, [topic])
        c.settle(["m2"], topic, 1)
        c.fetch_until("m2", topic, [0])
        c.acknowledge("m2", topic, {0: [(2, 2, [1]), (4, 4, [1])]})
        c.describe_offsets(topic, [0])
        return c.transcript
    finally:
        c.close()


def _state_records(dumped: str, group: str) -> list[tuple[Any, Any]]:
    """The ``__share_group_state`` records of ``group`` as DumpLogSegments decodes them, in log order
    (one partition holds a group's records), without their timestamps and ids. Kafka's leader epoch
    moves at a restart and its share coordinator then records the new one (an update with no
    batches); a single kafkalog node keeps leader epoch 0: those records are left out, and of the
    epoch only whether it is known."""
    out = []
    for line in dumped.splitlines():
        if '"groupId":"' + group + '"' not in line or " key: " not in line:
            continue
        key = json.loads(line.split(" key: ", 1)[1].split(" payload: ", 1)[0])
        payload = json.loads(line.split(" payload: ", 1)[1])
        for k in ("groupId", "topicId"):
            key["data"].pop(k, None)
        if isinstance(payload, dict):
            for k in ("createTimestamp", "writeTimestamp"):
                payload["data"].pop(k, None)
            payload["data"]["leaderEpoch"] = payload["data"]["leaderEpoch"] >= 0       # known or not
            if key["type"] == "1" and not payload["data"]["stateBatches"] and out \
                    and out[-1][1]["data"]["startOffset"] == payload["data"]["startOffset"]:
                continue
        out.append((key, payload))
    return out


def _same(theirs: list[Any], mine: list[Any], who: str) -> None:
    for i, (a, b) in enumerate(zip(theirs, mine, strict=False)):
        assert a == b, f"step {i}: {who} answered {a}, kafkalog {b}\n{who}: {theirs}\nkafkalog: {mine}"
    assert len(theirs) == len(mine)


@pytest.mark.slow                # two SIGKILLed brokers and Kafka 4.4 started on a copy (~40 s)
def test_share_state_survives_a_restart_and_kafka_adopts_it(tmp_path: Path) -> None:
    kafka44.require()
    kafka = kafka44.KafkaBroker(tmp_path / "kafka", SETTINGS)
    kafka.format()
    kafka.start()
    native, adopt = uuid.uuid4().hex[:6], uuid.uuid4().hex[:6]
    try:
        # Kafka creates the topics (their ids are in its metadata), __consumer_offsets and, for
        # another share group, __share_group_state
        setup = ShareClient(kafka.port, "setup" + native)
        setup.topic("t" + native, 1)
        setup.topic("t" + adopt, 1)
        setup.heartbeat("s", 0, ["t" + native])
        setup.settle(["s"], "t" + native, 1)
        setup.heartbeat("s", -1)
        setup.close()
        # Kafka's own crash and restart
        c, kafka_before = _before_crash(kafka.port, native)
        kafka.kill()
        c.close()
        kafka.start()
        kafka_after = _after_restart(kafka.port, native, dict(c.members))
    finally:
        kafka.stop()

    data = kafka.log_dir
    configs = [f"{k}={v}" for k, v in SETTINGS.items()]
    ours = BrokerProcess(str(data), configs).start()
    try:
        c, mine_before = _before_crash(ours.port, adopt)
        ours.stop(sig=signal.SIGKILL)             # a crash: nothing flushed at shutdown
        c.close()
        copy = tmp_path / "adopted"
        shutil.copytree(data, copy)
        ours = BrokerProcess(str(data), configs).start()
        mine_after = _after_restart(ours.port, adopt, dict(c.members))
        assert ours.stop() == 0, ours.stderr()
    finally:
        if ours.alive():
            ours.kill()
    _same(kafka_before, mine_before, "Kafka 4.4")
    _same(kafka_after, mine_after, "Kafka 4.4 after its restart")
    # the released record and the one acquired at the crash come again
    fetched = [step for step in mine_after if step[0] == "ShareFetch"][-1]
    assert fetched[3] == [(("t", 0), (0, 0, [(2, 2, 2), (4, 4, 1)]))], fetched

    # the __share_group_state segments kafkalog wrote read as Kafka reads them
    segments = sorted(data.glob("__share_group_state-*/*.log"))
    dumped = kafka44.dump_log_segments(segments, "--share-group-state-decoder")
    assert '"groupId":"g' + adopt + '"' in dumped and "stateBatches" in dumped, dumped[-3000:]
    assert "Could not" not in dumped and "Exception" not in dumped, dumped[-3000:]
    # record by record as Kafka's own for the same requests (timestamps, names and ids aside)
    assert _state_records(dumped, "g" + adopt) == _state_records(dumped, "g" + native)
    # kafkalog dump --share-group-state-decoder prints what DumpLogSegments prints
    for segment in (s for s in segments if s.stat().st_size > 0):
        theirs = kafka44.dump_log_segments([segment], "--share-group-state-decoder")
        mine = subprocess.run([sys.executable, "-m", "kafkalog.cli.main", "dump", str(segment),
                               "--share-group-state-decoder"], capture_output=True, text=True, timeout=120)
        assert mine.returncode == 0, mine.stderr
        assert mine.stdout == theirs

    kafka.properties["log.dirs"] = str(copy)
    kafka._write_config()
    kafka.start()
    try:
        adopted = _after_restart(kafka.port, adopt, dict(c.members))
    finally:
        kafka.stop()
    _same(adopted, mine_after, "Kafka 4.4 adopting kafkalog's directory")
