"""Share groups (KIP-932) request by request, against ``kafkalog serve`` and Kafka 4.4 in the same test:
the same ShareGroupHeartbeat, ShareGroupDescribe, ShareFetch, ShareAcknowledge, share group offset
and group config requests; the normalised transcripts (member ids as labels, topic ids as names)
must be equal: epochs and assignments (the simple assignor, partitions shared once members outnumber
them), Kafka's errors and messages, share sessions (not found, wrong epoch, acknowledgements in an
opening fetch, closing releases), acquired ranges with their delivery counts, accept/release/reject,
locks expiring and renewed, the delivery limit archiving a record, ``read_committed`` skipping an
aborted transaction, the start offset and lag of DescribeShareGroupOffsets, Alter/Delete refused for
a group with members."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Producer

from tests import kafka44
from tests.server.broker_process import BrokerProcess
from tests.server.share_raw import SHARE_SETTINGS, ShareClient
from tests.server.side_by_side import assert_same, run_side_by_side


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(str(tmp_path_factory.mktemp("kafkalog-share") / "data"),
                      [f"{k}={v}" for k, v in SHARE_SETTINGS.items()]).start()
    try:
        yield b
    finally:
        if b.alive():
            assert b.stop() == 0, b.stderr()


Scenario = Callable[[ShareClient, str], None]


def both(kafka: kafka44.KafkaBroker, ours: BrokerProcess, scenario: Scenario) -> list[list[Any]]:
    """Run ``scenario`` against both brokers at once; the two transcripts, Kafka's first."""
    def open_client(port: int) -> tuple[ShareClient, str]:
        suffix = uuid.uuid4().hex[:6]
        return ShareClient(port, "g" + suffix, suffix), suffix
    return run_side_by_side(kafka.port, ours.port, open_client, scenario)


def members_and_errors(c: ShareClient, sfx: str) -> None:
    t = "s" + sfx
    c.topic(t, 2)
    c.alter_config({"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": "2000"})
    c.alter_config({"share.record.lock.duration.ms": "500"})
    c.alter_config({"share.record.lock.duration.ms": "70000"})
    c.alter_config({"share.auto.offset.reset": "sometimes"})
    c.alter_config({"share.isolation.level": "READ_COMMITTED"})
    c.alter_config({"share.isolation.level": "committed"})
    c.alter_config({"share.isolation.level": "read_committed", "share.delivery.count.limit": "3"})
    c.alter_config({"no.such.key": "1"})
    c.heartbeat("m1", 0, [t])                   # a new group: epoch 2, nothing assignable yet
    c.settle(["m1"], t, 2)
    c.heartbeat("m2", 0, [t])
    c.settle(["m1", "m2"], t, 2)
    c.heartbeat("m3", 0, [t])                   # more members than partitions: shared
    c.settle(["m1", "m2", "m3"], t, 2)
    c.heartbeat("m1", 99)
    c.heartbeat("nobody", 3)
    c.heartbeat("x", 0, None)
    c.heartbeat("x", -2)
    c.heartbeat("x", 1, member_id="")
    c.heartbeat("m3", -1)
    c.heartbeat("m3", -1)
    c.settle(["m1", "m2"], t, 2)            # which member had two partitions follows Java's hash order
    c.describe_offsets(t, [0, 1])
    c.describe_offsets("missing" + sfx, [0])


def fetch_and_acknowledge(c: ShareClient, sfx: str) -> None:
    t = "f" + sfx
    c.topic(t, 1)
    c.alter_config({"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": "2000"})
    c.produce_values(t, [b"a", b"b", b"c", b"d"])
    c.heartbeat("m1", 0, [t])
    c.settle(["m1"], t, 1)
    c.fetch("m1", t, [0], epoch=1)                                   # no session
    c.acknowledge("m1", t, {0: [(0, 0, [1])]}, epoch=0)              # acknowledge needs a session
    c.fetch("m1", t, [0], acks={0: [(0, 0, [1])]}, epoch=0)          # no acknowledgements when opening
    c.fetch_until("m1", t, [0])
    c.acknowledge("m1", t, {0: [(0, 0, [1]), (1, 1, [2])]})           # accept, release
    c.acknowledge("m1", t, {0: [(0, 0, [1])]})                        # already acknowledged
    c.acknowledge("m1", t, {0: [(2, 3, [3, 1])]}, epoch=77)
    c.acknowledge("m1", t, {0: [(2, 3, [3, 1])]})                     # reject, accept
    c.fetch_until("m1", t, [0])                                       # the released one again
    c.describe_offsets(t, [0])
    c.fetch("m1", t, [0], epoch=-1)                                   # closing releases it
    c.heartbeat("m2", 0, [t])
    c.settle(["m1", "m2"], t, 1)
    c.fetch_until("m2", t, [0])
    c.produce_values(t, [b"e", b"f"])
    c.fetch_until("m1", t, [0])                                       # one at a time: m1 the new ones
    time.sleep(3)                                                     # m2's lock expires
    c.fetch_until("m2", t, [0])
    c.acknowledge("m2", t, {0: [(1, 1, [1]), (4, 5, [2])]})           # 4-5 are m1's
    c.fetch_until("m1", t, [0])
    c.describe_offsets(None)
    c.alter_offsets(t, {0: 0})
    c.delete_offsets([t])


def limits_renewal_and_isolation(c: ShareClient, sfx: str) -> None:
    t = "l" + sfx
    c.topic(t, 1)
    c.alter_config({"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": "8000",
                    "share.delivery.count.limit": "3", "share.isolation.level": "read_committed"})
    p = Producer({"bootstrap.servers": f"127.0.0.1:{c.port}", "transactional.id": "tx" + sfx, "linger.ms": 0})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(t, b"aborted", partition=0)
    p.flush(30)
    p.abort_transaction(30)
    c.produce_values(t, [b"x", b"y"])
    c.heartbeat("m1", 0, [t])
    c.settle(["m1"], t, 1)
    got = c.fetch_until("m1", t, [0])                                 # the aborted batch archived
    for _ in range(4):                                                # released up to the limit
        ranges = got["partitions"].get((t, 0), (0, 0, []))[2]
        c.acknowledge("m1", t, {0: [(a, b, [2]) for a, b, _n in ranges]})
        got = c.fetch_until("m1", t, [0], timeout=3)
    c.describe_offsets(t, [0])                                        # all archived: the SPSO at the end
    c.produce_values(t, [b"z"])
    got = c.fetch_until("m1", t, [0])
    held = got["partitions"].get((t, 0), (0, 0, []))[2]
    c.acknowledge("m1", t, {0: [(9, 9, [1])]})                        # past the acquired records
    c.acknowledge("m1", t, {0: [(a, b, [4]) for a, b, _n in held]})   # renew needs is_renew_ack
    time.sleep(5)                                                      # locks of 8 s: room for a slow machine
    c.fetch("m1", t, [0], acks={0: [(a, b, [4]) for a, b, _n in held]}, renew=True)   # renewed (v2)
    time.sleep(4)                                                      # past the first lock
    c.heartbeat("m2", 0, [t])
    c.settle(["m1", "m2"], t, 1)
    c.fetch("m2", t, [0], max_wait_ms=300)                            # still m1's
    c.acknowledge("m1", t, {0: [(a, b, [1]) for a, b, _n in held]})
    c.acknowledge("m1", t, {0: [(2, 1, [1])]})                        # first > last
    c.describe_offsets(t, [0])


def connection_closed(c: ShareClient, sfx: str) -> None:
    """A member's connection closes with records acquired (locks of 30 s): its share session ends and
    they are released at once (Kafka's ShareSessionCache disconnect listener), delivered again."""
    t = "c" + sfx
    c.topic(t, 1)
    c.alter_config({"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": "30000"})
    c.produce_values(t, [b"a", b"b"])
    other = ShareClient(c.port, c.group, c.suffix)
    other.transcript, other.members, other.topic_ids, other.names = c.transcript, c.members, c.topic_ids, c.names
    try:
        other.heartbeat("m2", 0, [t])
        other.settle(["m2"], t, 1)
        other.fetch_until("m2", t, [0])
    finally:
        other.close()
    c.heartbeat("m1", 0, [t])
    c.settle(["m1"], t, 1)
    c.fetch_until("m1", t, [0], timeout=10)                          # at once, not after 30 s
    c.describe_offsets(t, [0])


SCENARIOS: dict[str, Scenario] = {
    "members-and-errors": members_and_errors,
    "fetch-and-acknowledge": fetch_and_acknowledge,
    "limits-renewal-isolation": limits_renewal_and_isolation,
    "connection-closed": connection_closed,
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_share_groups_request_by_request_as_kafka(kafka44_share: kafka44.KafkaBroker, ours: BrokerProcess,
                                                  name: str) -> None:
    mine = assert_same(both(kafka44_share, ours, SCENARIOS[name]))
    assert any(step[0] == "ShareGroupHeartbeat" and step[3] == 0 for step in mine), mine


def _groups_list(data_dir: str) -> list[Any]:
    import json
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "kafkalog.cli.main", "groups", data_dir, "--list"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in r.stdout.splitlines()]


def test_kafkalog_groups_lists_share_groups(ours: BrokerProcess) -> None:
    """``kafkalog groups --list`` on the running broker's directory: a share group with a member is
    a Stable share group, Empty once it left (it listed it as an empty classic group)."""
    sfx = uuid.uuid4().hex[:6]
    c = ShareClient(ours.port, "lg" + sfx, sfx)
    try:
        c.topic("lt" + sfx, 1)
        assert c.heartbeat("m1", 0, ["lt" + sfx])["error"] == 0
        assert {"group": "lg" + sfx, "state": "Stable", "type": "share"} in _groups_list(ours.data_dir)
        assert c.heartbeat("m1", -1)["error"] == 0
        assert {"group": "lg" + sfx, "state": "Empty", "type": "share"} in _groups_list(ours.data_dir)
    finally:
        c.close()

