"""Kafka Streams 4.4 with exactly-once v2 against ``kafkalog serve`` (issue 28): the word count of
``java/KafkalogWordCount.java`` (a repartition topic Streams purges with DeleteRecords, a
persistent state store whose changelog topic is compacted, every input offset, store update and
output record of a task in one transaction). Lines are produced in three parts; between them the
application is killed (SIGKILL) and started again, and the broker is stopped and started again
on the same port under the running application. At the end every word's last count in the
output topic, read committed, is exact, and no count was ever written twice."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import kafka44
from tests.ecosystem import HERE, POM, log4j2_properties
from tests.kafka44 import free_port
from tests.server.broker_process import BrokerProcess
from tests.server.java_client import JavaUnavailable, compile_java

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

APP = "kafkalog-wordcount"
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]


def _classpath() -> str:
    try:
        cp = kafka44.classpath(POM)
    except kafka44.Kafka44Unavailable as e:
        kafka44._unavailable(str(e))
    try:
        classes = compile_java([str(HERE / "java" / "KafkalogWordCount.java")], "wordcount", [cp])
    except JavaUnavailable as e:
        kafka44._unavailable(str(e))
    return os.pathsep.join([classes, cp])


class App:
    """The word count application as a JVM of its own; its state lines collected."""

    def __init__(self, workdir: Path, bootstrap: str) -> None:
        self.workdir = workdir
        self.bootstrap = bootstrap
        self.lines: list[str] = []
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> App:
        log4j = self.workdir / "log4j2.properties"
        log4j.write_text(log4j2_properties(self.workdir / "streams.log", "WARN"))
        cmd = kafka44.java_command("KafkalogWordCount", self.bootstrap, APP, str(self.workdir / "state"),
                                   "words-in", "counts-out", cp=_classpath(), heap="384m",
                                   jvm_args=[f"-Dlog4j2.configurationFile={log4j}"])
        self.lines = []
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=open(self.workdir / "stderr", "ab"),
                                     text=True, start_new_session=True)
        threading.Thread(target=self._read, args=(self.proc,), daemon=True).start()
        return self

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.lines.append(line.strip())

    def wait_for(self, line: str, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while line not in self.lines:
            assert self.proc is not None and self.proc.poll() is None, (self.lines, self.stderr())
            assert time.monotonic() < deadline, f"no {line!r} in {timeout} s: {self.lines} {self.stderr()}"
            time.sleep(0.2)

    def stderr(self) -> str:
        return (self.workdir / "stderr").read_text(errors="replace")[-3000:]

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(60)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(120)


@pytest.fixture
def app_dir(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "app").mkdir()
    yield tmp_path / "app"


def _produce(bootstrap: str, lines: list[str]) -> None:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i, line in enumerate(lines):
        p.produce("words-in", key=b"%d" % i, value=line.encode())
    assert p.flush(120) == 0


def _counts(bootstrap: str, expected_words: int, timeout: float = 240) -> tuple[dict[str, int], dict[str, list[int]]]:
    """Every word's counts in the output topic, read committed, once it holds ``expected``."""
    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.monotonic_ns()}",
                  "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                  "enable.auto.commit": False})
    c.subscribe(["counts-out"])
    history: dict[str, list[int]] = {}
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is None or m.error() is not None:
                if sum(v[-1] for v in history.values()) >= expected_words:
                    break
                continue
            history.setdefault(m.key().decode(), []).append(int.from_bytes(m.value(), "big", signed=True))
    finally:
        c.close()
    return {w: v[-1] for w, v in history.items()}, history


def _lines(start: int, n: int) -> list[str]:
    return [" ".join(WORDS[(start + i + j) % len(WORDS)] for j in range(1 + (start + i) % 4)) for i in range(n)]


def test_word_count_exactly_once_through_restarts(tmp_path: Path, app_dir: Path) -> None:
    _classpath()
    data = str(tmp_path / "data")
    broker = BrokerProcess(data, configs=["group.initial.rebalance.delay.ms=0"], port=free_port()).start()
    app = App(app_dir, broker.bootstrap)
    try:
        from confluent_kafka.admin import AdminClient, NewTopic
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for f in admin.create_topics([NewTopic("words-in", 2, 1), NewTopic("counts-out", 2, 1)]).values():
            f.result(60)
        parts = [_lines(0, 300), _lines(300, 300), _lines(600, 300)]
        expected: Counter[str] = Counter()
        app.start().wait_for("state RUNNING")
        _produce(broker.bootstrap, parts[0])
        expected.update(w for line in parts[0] for w in line.split())
        counts, _ = _counts(broker.bootstrap, sum(expected.values()))
        assert counts == dict(expected)

        # the application crashes mid-stream and starts again: its store comes back from the changelog
        _produce(broker.bootstrap, parts[1])
        expected.update(w for line in parts[1] for w in line.split())
        time.sleep(0.5)
        app.kill()
        app.start().wait_for("state RUNNING")

        # the broker stops and starts again on its port under the running application
        assert broker.stop() == 0, broker.stderr()
        broker = BrokerProcess(data, configs=["group.initial.rebalance.delay.ms=0"], port=broker.port).start()
        _produce(broker.bootstrap, parts[2])
        expected.update(w for line in parts[2] for w in line.split())
        counts, history = _counts(broker.bootstrap, sum(expected.values()))
        assert counts == dict(expected), (counts, dict(expected), app.lines)
        for word, seq in history.items():         # exactly once: no count written twice or going back
            assert seq == sorted(set(seq)), (word, seq)

        app.stop()
        assert "closed" in app.lines
        changelog = f"{APP}-counts-changelog"
        repartition = f"{APP}-words-repartition"
        _assert_topics(broker.bootstrap, changelog, repartition)
    finally:
        app.kill()
        if broker.alive():
            broker.stop()


def _assert_topics(bootstrap: str, changelog: str, repartition: str) -> None:
    """The changelog is compacted; the repartition topic was purged (its log start offset moved)."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient, ConfigResource
    admin = AdminClient({"bootstrap.servers": bootstrap})
    cfg: Any = next(iter(admin.describe_configs([ConfigResource("TOPIC", changelog)]).values())).result(60)
    assert cfg["cleanup.policy"].value == "compact"
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "check-purge"})
    try:
        starts = [c.get_watermark_offsets(TopicPartition(repartition, p), timeout=30) for p in range(2)]
    finally:
        c.close()
    assert any(low > 0 for low, _high in starts), starts
