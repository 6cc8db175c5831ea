"""A broker killed with SIGKILL under acks=all load loses no acknowledged record, and the data
directory it leaves passes ``kafkalog verify``; committed offsets of the partitions restart dense.
The slow soak kills it 200 times under two idempotent producers (tests/server/kill_soak.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.server.broker_process import BrokerProcess

TOPIC = "durable"
PARTITIONS = 3
ACKED_BEFORE_KILL = 20_000


def _verify(data: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kafkalog.cli.main", "verify", "--no-progress", data],
                          capture_output=True, text=True, timeout=300, check=False)


def test_sigkill_under_acks_all_loses_no_acknowledged_record(tmp_path: os.PathLike[str]) -> None:
    data = os.path.join(str(tmp_path), "data")
    b = BrokerProcess(data, [f"num.partitions={PARTITIONS}"]).start()
    acked: dict[tuple[int, int], bytes] = {}

    def on_delivery(err, msg) -> None:
        if err is None:
            acked[(msg.partition(), msg.offset())] = msg.value()

    p = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True, "acks": "all",
                  "linger.ms": 2, "message.timeout.ms": 5000, "reconnect.backoff.max.ms": 200})
    i = 0
    deadline = time.monotonic() + 120
    while len(acked) < ACKED_BEFORE_KILL and time.monotonic() < deadline:
        try:
            p.produce(TOPIC, value=b"record-%08d" % i, partition=i % PARTITIONS, on_delivery=on_delivery)
            i += 1
        except BufferError:
            p.poll(0.05)
        p.poll(0)
    b.kill()                                # in the middle of the stream: more requests in flight
    p.flush(10)                             # what is still queued fails: not acknowledged
    acked_at_kill = dict(acked)
    assert len(acked_at_kill) >= ACKED_BEFORE_KILL
    left = _verify(data)                    # the directory as the kill left it: only a crash's tails
    assert left.returncode == 0, left.stdout[-3000:] + left.stderr[-3000:]
    findings = [f for f in map(json.loads, left.stdout.splitlines()) if f["type"] == "finding"]
    assert {(f["check"], f["level"]) for f in findings} <= {("zero-filled-tail", "warning"),
                                                           ("partial-tail", "warning")}, findings

    b2 = BrokerProcess(data).start()
    try:
        c = Consumer({"bootstrap.servers": b2.bootstrap, "group.id": "unused",
                      "enable.auto.commit": False})
        c.assign([TopicPartition(TOPIC, p_, 0) for p_ in range(PARTITIONS)])
        ends = {p_: c.get_watermark_offsets(TopicPartition(TOPIC, p_), timeout=30)[1]
                for p_ in range(PARTITIONS)}
        got: dict[tuple[int, int], bytes] = {}
        limit = time.monotonic() + 120
        while len(got) < sum(ends.values()) and time.monotonic() < limit:
            for m in c.consume(1000, 1.0):
                assert m.error() is None, m.error()
                got[(m.partition(), m.offset())] = m.value()
        c.close()
    finally:
        assert b2.stop() == 0, b2.stderr()
    missing = {k: v for k, v in acked_at_kill.items() if got.get(k) != v}
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {sorted(missing)[:5]}"
    verify = _verify(data)
    assert verify.returncode == 0, verify.stdout[-3000:] + verify.stderr[-3000:]


@pytest.mark.slow
def test_broker_kill_soak(tmp_path: os.PathLike[str]) -> None:
    """``KAFKALOG_BROKER_KILLS`` SIGKILLs (default 200) under acks=all idempotent load from two
    producers with random codecs: every acknowledged record read back once at its acknowledged
    offset, ``kafkalog verify`` clean after every kill (a crash's tails as warnings) and after the
    final clean stop. Figures in docs/reliability.md."""
    from tests.server import kill_soak
    kills = int(os.environ.get("KAFKALOG_BROKER_KILLS", "200"))
    report = kill_soak.run(os.path.join(str(tmp_path), "data"), kills,
                           seed=int(os.environ.get("KAFKALOG_SEED", "7")), progress=20)
    print(report.summary())
    assert report.kills == kills
    assert report.acknowledged > 10 * kills
    assert len(report.codecs) >= 3
