"""``kafkalog serve`` as a command: configuration keys honoured or refused, a server.properties
file, clean shutdown on SIGINT and SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from confluent_kafka.admin import AdminClient
from kafka import KafkaProducer

from tests.server.broker_process import BrokerProcess


def _serve(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kafkalog.cli.main", "serve", *args],
                          capture_output=True, text=True, timeout=120, check=False)


def _error(r: subprocess.CompletedProcess) -> dict:
    """The JSON error line ``serve`` prints on stdout (its output is JSON lines)."""
    line = json.loads(r.stdout.strip().splitlines()[-1])
    assert line["type"] == "error"
    return line


def test_unknown_config_key_is_refused(tmp_path: os.PathLike[str]) -> None:
    d = os.path.join(str(tmp_path), "data")
    r = _serve(d, "--port", "0", "--config", "log.retention.hourz=5")
    assert r.returncode == 2
    err = _error(r)
    assert err["error"] == "InvalidConfigError" and "log.retention.hourz" in err["message"]
    assert not os.path.exists(d)                    # nothing created by mistake


def test_malformed_config_is_refused(tmp_path: os.PathLike[str]) -> None:
    d = os.path.join(str(tmp_path), "data")
    r = _serve(d, "--port", "0", "--config", "num.partitions")
    assert r.returncode == 2 and "key=value" in _error(r)["message"]
    r = _serve(d, "--port", "0", "--config", "num.partitions=zero")
    assert r.returncode == 2 and "num.partitions" in _error(r)["message"]
    assert not os.path.exists(d)


def test_config_file_and_sigint(tmp_path: os.PathLike[str]) -> None:
    props = os.path.join(str(tmp_path), "server.properties")
    with open(props, "w") as f:
        f.write("# a server.properties\nnum.partitions=4\nlog.segment.bytes=1048576\n")
    d = os.path.join(str(tmp_path), "data")
    b = BrokerProcess(d, extra_args=["--config-file", props]).start()
    try:
        producer = KafkaProducer(bootstrap_servers=b.bootstrap)
        producer.send("auto", b"x").get(60)             # auto-created with num.partitions
        assert producer.partitions_for("auto") == {0, 1, 2, 3}
        producer.close()
    finally:
        assert b.stop(sig=signal.SIGINT) == 0, b.stderr()
    assert os.path.exists(os.path.join(d, ".kafka_cleanshutdown"))
    assert "stopped" in b.stderr()


def test_auto_create_disabled(tmp_path: os.PathLike[str]) -> None:
    b = BrokerProcess(os.path.join(str(tmp_path), "data"), ["auto.create.topics.enable=false"]).start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        md = admin.list_topics("nope", timeout=30)
        assert md.topics["nope"].error is not None
        assert md.topics["nope"].error.code() == 3          # UNKNOWN_TOPIC_OR_PARTITION
        assert "nope" not in admin.list_topics(timeout=30).topics
    finally:
        assert b.stop() == 0


def test_an_unrelated_directory_is_refused(tmp_path: os.PathLike[str]) -> None:
    d = os.path.join(str(tmp_path), "stuff")
    os.makedirs(d)
    with open(os.path.join(d, "notes.txt"), "w") as f:
        f.write("not Kafka data\n")
    r = _serve(d, "--port", "0")
    assert r.returncode == 2 and "not a Kafka data directory" in _error(r)["message"]
    assert sorted(os.listdir(d)) == ["notes.txt"]


def test_consumer_group_settings_are_checked_as_kafka_checks_them(tmp_path: os.PathLike[str]) -> None:
    """The ``group.consumer.*`` keys (KIP-848) with Kafka's rules and messages; nothing created."""
    d = os.path.join(str(tmp_path), "data")
    cases = {
        ("group.consumer.heartbeat.interval.ms=20000",):
            "group.consumer.heartbeat.interval.ms must be less than or equal to "
            "group.consumer.max.heartbeat.interval.ms",
        ("group.consumer.session.timeout.ms=5000",):
            "group.consumer.session.timeout.ms must be greater than or equal to "
            "group.consumer.min.session.timeout.ms",
        ("group.consumer.min.heartbeat.interval.ms=100", "group.consumer.heartbeat.interval.ms=50000",
         "group.consumer.max.heartbeat.interval.ms=60000"):
            "group.consumer.heartbeat.interval.ms must be less than group.consumer.session.timeout.ms",
        ("group.consumer.assignors=uniform,uniform",): "duplicate",
        ("group.consumer.assignors=sticky",): "sticky",
        ("group.consumer.migration.policy=sideways",): "BIDIRECTIONAL",
        ("group.consumer.regex.refresh.interval.ms=5",): "group.consumer.regex.refresh.interval.ms",
        ("group.consumer.max.size=0",): "group.consumer.max.size",
    }
    for configs, message in cases.items():
        r = _serve(d, "--port", "0", *[a for c in configs for a in ("--config", c)])
        assert r.returncode == 2, (configs, r.stdout, r.stderr)
        err = _error(r)
        assert err["error"] == "InvalidConfigError" and message in err["message"], (configs, err)
    assert not os.path.exists(d)
    ok = _serve(d, "--port", "0", "--config", "group.consumer.migration.policy=UPGRADE", "--config",
                "group.consumer.assignors=range,uniform", "--config", "nonexistent.key=1")
    assert "nonexistent.key" in _error(ok)["message"]      # the group keys themselves were accepted


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        return next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS:")) / 1024


def test_the_dedupe_buffer_is_allocated_when_a_cleaning_needs_it(tmp_path: os.PathLike[str]) -> None:
    """An idle broker holds none of log.cleaner.dedupe.buffer.size (it allocated and touched the
    whole buffer at start: 174 MiB idle at the default 128 MiB); a compacted topic with something
    to clean gets it (issue 24, item 7)."""
    import time

    import kafkalog
    buffer = ["log.cleaner.dedupe.buffer.size=268435456"]            # 256 MiB: unmistakable
    idle = BrokerProcess(os.path.join(str(tmp_path), "idle"), buffer).start()
    try:
        time.sleep(2.0)                    # the cleaner thread has looked and found nothing
        assert _rss_mib(idle.proc.pid) < 128, _rss_mib(idle.proc.pid)   # type: ignore[union-attr]
    finally:
        assert idle.stop() == 0
    d = os.path.join(str(tmp_path), "dirty")
    with kafkalog.open(d, background=False) as dl:
        dl.create_topic("c", 1, {"cleanup.policy": "compact", "segment.bytes": 4096})
        for i in range(400):
            dl.produce("c", b"v%d" % i, key=b"k%d" % (i % 10), partition=0)
    busy = BrokerProcess(d, buffer).start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and _rss_mib(busy.proc.pid) < 256:   # type: ignore[union-attr]
            time.sleep(0.2)
        assert _rss_mib(busy.proc.pid) >= 256                                 # type: ignore[union-attr]
    finally:
        assert busy.stop() == 0
