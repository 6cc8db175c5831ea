"""The oracle itself: a Kafka 4.4 broker starts, serves a real client, and its DumpLogSegments reads
what it wrote, the same text ``kafkalog dump`` prints for that segment."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kafkalog.errors import LogDirError
from kafkalog.log.manager import LogManager
from tests import kafka44


def test_kafka44_serves_a_client_and_dumps_its_segment_as_kafkalog_does(kafka44_broker: kafka44.KafkaBroker) -> None:
    admin = AdminClient({"bootstrap.servers": kafka44_broker.bootstrap})
    for f in admin.create_topics([NewTopic("smoke", 1, 1)]).values():
        f.result(30)
    p = Producer({"bootstrap.servers": kafka44_broker.bootstrap, "compression.type": "gzip",
                  "linger.ms": 50, "enable.idempotence": True})
    for i in range(100):
        p.produce("smoke", key=b"k%d" % (i % 7), value=b"v%d" % i, headers=[("h", b"x")])
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": kafka44_broker.bootstrap, "group.id": "g", "auto.offset.reset": "earliest"})
    c.subscribe(["smoke"])
    got: list[bytes | None] = []
    while len(got) < 100:
        m = c.poll(30)
        assert m is not None, f"consumed {len(got)} of 100"
        assert m.error() is None, m.error()
        got.append(m.value())
    c.close()
    assert got == [b"v%d" % i for i in range(100)]

    segment = kafka44_broker.log_dir / "smoke-0" / ("0" * 20 + ".log")
    flags = ["--deep-iteration", "--print-data-log"]
    theirs = kafka44.dump_log_segments([segment], *flags)
    assert "baseOffset: 0" in theirs and "compresscodec: gzip" in theirs, theirs
    ours = subprocess.run([sys.executable, "-m", "kafkalog.cli.main", "dump", str(segment), *flags],
                          capture_output=True, text=True, timeout=60)
    assert ours.returncode == 0, ours.stderr
    assert ours.stdout == theirs


def test_kafka44_and_kafkalog_keep_each_other_out_of_a_directory(
        kafka44_broker: kafka44.KafkaBroker, tmp_path: Path) -> None:
    """One lock, Kafka's (a POSIX record lock on ``.lock``, FileChannel.tryLock): a directory a
    Kafka 4.4 broker runs on is refused by kafkalog's LogManager and by ``kafkalog recover``; a
    directory kafkalog holds is refused by a Kafka 4.4 broker starting on it."""
    admin = AdminClient({"bootstrap.servers": kafka44_broker.bootstrap})
    for f in admin.create_topics([NewTopic("locked", 1, 1)]).values():
        f.result(30)
    with pytest.raises(LogDirError, match="Failed to acquire lock on file .lock"):
        LogManager(str(kafka44_broker.log_dir), background=False)
    for extra in (["--dry-run"], []):
        r = subprocess.run([sys.executable, "-m", "kafkalog.cli.main", "recover", *extra,
                            str(kafka44_broker.log_dir)], capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and "in use (its .lock is held)" in r.stdout + r.stderr, (extra, r.stdout, r.stderr)

    other = kafka44.KafkaBroker(tmp_path / "other")
    other.format()
    try:
        with LogManager(str(other.log_dir), background=False):
            try:               # its controller may say it started before its log manager gives up
                other.start(timeout=120)
            except kafka44.Kafka44Error:
                pass
            deadline = time.monotonic() + 120
            while other.alive() and time.monotonic() < deadline:
                time.sleep(0.2)
            assert not other.alive(), "Kafka 4.4 runs on a directory kafkalog holds"
    finally:
        if other.alive():
            other.kill()
    assert f"Failed to acquire lock on file .lock in {other.log_dir}" in other.log_text(), other.log_tail()
