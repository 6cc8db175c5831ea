"""Producer-id expiry as Kafka runs it (``PeriodicProducerExpirationCheck``): every
``producer.id.expiration.check.interval.ms`` the data directory forgets the producers whose last
batch is older than ``producer.id.expiration.ms`` (and that have no transaction open), in the
producer state that the next ``.snapshot`` holds."""

from __future__ import annotations

import os
import time

import kafkalog
from kafkalog.log.naming import PRODUCER_SNAPSHOT_FILE_SUFFIX
from kafkalog.log.producer_state import read_snapshot

HOUR_MS = 3_600_000


def _snapshot_producers(partition_dir: str) -> set[int]:
    """The producer ids of the latest ``.snapshot`` of a partition (written at a clean close)."""
    snaps = sorted(n for n in os.listdir(partition_dir) if n.endswith(PRODUCER_SNAPSHOT_FILE_SUFFIX))
    assert snaps, "a clean close writes a producer snapshot"
    return {e.producer_id for e in read_snapshot(os.path.join(partition_dir, snaps[-1]))}


def test_idle_producers_expire_on_the_check_interval(tmp_path):
    d = str(tmp_path / "d")
    cfg = {"producer.id.expiration.ms": 10 * 60_000,
           "producer.id.expiration.check.interval.ms": 50, "log.initial.task.delay.ms": 0}
    now = int(time.time() * 1000)
    with kafkalog.open(d, cfg) as dl:
        dl.create_topic("t", 1)
        pids = []
        for ts in (now - HOUR_MS, now):          # an idle producer, and one that just wrote
            with dl.producer(enable_idempotence=True) as p:
                p.send("t", b"v", partition=0, timestamp_ms=ts).get(timeout=30)
            pids.append(p.producer_id)
        log = dl.manager.get_log("t", 0)
        deadline = time.monotonic() + 60
        while pids[0] in log.producer_state_manager.producers and time.monotonic() < deadline:
            time.sleep(0.02)
    assert _snapshot_producers(os.path.join(d, "t-0")) == {pids[1]}


def test_the_check_interval_keeps_producers_until_they_expire(tmp_path):
    """With Kafka's default interval (10 minutes) nothing is forgotten early: the idle producer of
    the test above is still in the snapshot."""
    d = str(tmp_path / "d")
    now = int(time.time() * 1000)
    with kafkalog.open(d, {"producer.id.expiration.ms": 10 * 60_000}) as dl:
        dl.create_topic("t", 1)
        with dl.producer(enable_idempotence=True) as p:
            p.send("t", b"v", partition=0, timestamp_ms=now - HOUR_MS).get(timeout=30)
        pid = p.producer_id
        time.sleep(0.5)
    assert _snapshot_producers(os.path.join(d, "t-0")) == {pid}
