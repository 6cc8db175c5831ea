"""Kafka Streams 4.4 with the streams rebalance protocol (KIP-1071, ``group.protocol=streams``)
against ``kafkalog serve`` and Kafka 4.4 in the same test (issue 40): the exactly-once v2 word
count of ``java/KafkalogWordCount.java`` run as three instances, each with an endpoint for
interactive queries; one is SIGKILLed and another added. On both brokers every word's final count
is exact, the group (StreamsGroupDescribe) has the same number of members, the same task counts per
member and every member's endpoint, and the broker created the internal topics (repartition,
changelog) the topology named."""

from __future__ import annotations

import subprocess
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests import kafka44
from tests.ecosystem import log4j2_properties
from tests.ecosystem.test_streams import App, _classpath, _counts, _lines
from tests.kafka44 import free_port
from tests.server.broker_process import BrokerProcess
from tests.server.raw import connect, recv_frame, request_frame, response_of

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

APP = "kafkalog-wordcount"
#: a SIGKILLed member's session ends after 10 s (Kafka's minimum is 45 s)
PAIR_CONFIGS = {"group.streams.initial.rebalance.delay.ms": "0", "group.streams.session.timeout.ms": "10000",
                "group.streams.min.session.timeout.ms": "10000", "group.streams.heartbeat.interval.ms": "2000",
                "group.streams.min.heartbeat.interval.ms": "2000"}
STATIC = "wordcount-static"


class StreamsApp(App):
    """The word count as one instance of the streams-protocol application (``extra``: more
    Streams properties, such as a static member's ``group.instance.id``)."""

    def __init__(self, workdir: Path, bootstrap: str, port: int, extra: tuple[str, ...] = ()) -> None:
        super().__init__(workdir, bootstrap)
        self.port = port
        self.extra = extra

    def start(self) -> StreamsApp:
        log4j = self.workdir / "log4j2.properties"
        log4j.write_text(log4j2_properties(self.workdir / "streams.log", "WARN"))
        cmd = kafka44.java_command("KafkalogWordCount", self.bootstrap, APP, str(self.workdir / "state"),
                                   "words-in", "counts-out", "group.protocol=streams",
                                   f"application.server=localhost:{self.port}", *self.extra,
                                   cp=_classpath(), heap="256m", jvm_args=[f"-Dlog4j2.configurationFile={log4j}"])
        self.lines = []
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=open(self.workdir / "stderr", "ab"),
                                     text=True, start_new_session=True)
        threading.Thread(target=self._read, args=(self.proc,), daemon=True).start()
        return self


def _produce(bootstrap: str, lines: list[str]) -> None:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i, line in enumerate(lines):
        p.produce("words-in", key=b"%d" % i, value=line.encode())
    assert p.flush(120) == 0


def describe(port: int) -> Any:
    """StreamsGroupDescribe v0 of the application's group, raw."""
    s = connect(port)
    try:
        s.sendall(request_frame(89, 0, 1, {"group_ids": [APP], "include_authorized_operations": False}))
        frame = recv_frame(s)
        assert frame is not None
        return response_of(frame, 89, 0).groups[0]         # type: ignore[attr-defined]
    finally:
        s.close()


def _stable(port: int, members: int, timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        g = describe(port)
        if g.group_state == "Stable" and len(g.members) == members:
            return g
        assert time.monotonic() < deadline, g
        time.sleep(1)


def _task_counts(g: Any) -> list[tuple[int, int]]:
    return sorted((sum(len(t.partitions) for t in m.assignment.active_tasks),
                   sum(len(t.partitions) for t in m.assignment.standby_tasks)) for m in g.members)


def _hosts(apps: list[StreamsApp], live: list[StreamsApp], timeout: float = 120) -> None:
    """Every live instance knows every live instance's endpoint (interactive queries)."""
    want = f"hosts {sorted(a.port for a in live)}".replace("'", "")
    for a in live:
        a.wait_for(want, timeout)
    del apps


def _add(bootstrap: str, expected: Counter[str], lines: list[str]) -> None:
    _produce(bootstrap, lines)
    expected.update(w for line in lines for w in line.split())
    counts, history = _counts(bootstrap, sum(expected.values()))
    assert counts == dict(expected)
    for word, seq in history.items():       # exactly once: no count written twice or going back
        assert seq == sorted(set(seq)), (word, seq)


def _run(tmp: Path, bootstrap: str, port: int) -> dict[str, Any]:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic("words-in", 4, 1), NewTopic("counts-out", 2, 1)]).values():
        f.result(60)
    apps = [StreamsApp(tmp / f"app{i}", bootstrap, free_port(), (f"group.instance.id={STATIC}",) if i == 0 else ())
            for i in range(4)]
    for a in apps:
        a.workdir.mkdir(parents=True)
    out: dict[str, Any] = {}
    expected: Counter[str] = Counter()
    try:
        for a in apps[:3]:
            a.start()
        for a in apps[:3]:
            a.wait_for("state RUNNING")
        g = _stable(port, 3)
        out["three"] = _task_counts(g)
        out["static"] = sorted(m.instance_id or "" for m in g.members)
        assert sorted(m.user_endpoint.port for m in g.members) == sorted(a.port for a in apps[:3])
        _hosts(apps, apps[:3])
        _add(bootstrap, expected, _lines(0, 300))

        apps[1].kill()                                        # a crash: its session times out
        apps[3].start().wait_for("state RUNNING")
        live = [apps[0], apps[2], apps[3]]
        _add(bootstrap, expected, _lines(300, 300))
        g = _stable(port, 3, timeout=180)
        out["after_kill"] = _task_counts(g)
        _hosts(apps, live)

        apps[0].stop()                                        # the static member restarts
        assert "closed" in apps[0].lines
        apps[0].start().wait_for("state RUNNING")
        _add(bootstrap, expected, _lines(600, 300))
        g = _stable(port, 3, timeout=180)
        out["after_restart"] = _task_counts(g)
        out["static_after"] = sorted(m.instance_id or "" for m in g.members)
        _hosts(apps, live)
        topics = set(admin.list_topics(timeout=30).topics)
        out["internal"] = sorted(t for t in topics if t.startswith(APP))
        return out
    finally:
        for a in apps:
            a.kill()


def _heartbeat_versions(metrics_url: str) -> dict[str, float]:
    """The StreamsGroupHeartbeat requests kafkalog served, by version (its RequestsPerSec metric)."""
    from tests.server.test_metrics import scrape
    out: dict[str, float] = {}
    for fam in scrape(metrics_url).values():
        for sample in fam.samples:
            if sample.name == "kafka_network_requestmetrics_requests_total" \
                    and sample.labels.get("request") == "StreamsGroupHeartbeat":
                out[sample.labels["version"]] = float(sample.value)
    return out


def test_streams_protocol_word_count_against_both(tmp_path: Path, kafka44_broker: Any) -> None:
    _classpath()
    metrics = f"http://127.0.0.1:{free_port()}"
    ours = BrokerProcess(str(tmp_path / "data"), configs=["group.initial.rebalance.delay.ms=0",
                                                          f"metrics.listener={metrics}",
                                                          *(f"{k}={v}" for k, v in PAIR_CONFIGS.items())],
                         port=free_port()).start()
    try:
        got = _run(tmp_path / "kafkalog", ours.bootstrap, ours.port)
        versions = _heartbeat_versions(metrics + "/metrics")
    finally:
        ours.stop()
    # Kafka Streams 4.4 heartbeats with StreamsGroupHeartbeat v1, the version both brokers advertise
    assert set(versions) == {"1"} and versions["1"] > 10, versions
    want = _run(tmp_path / "kafka", kafka44_broker.bootstrap, kafka44_broker.port)
    assert got["internal"] == want["internal"] == [f"{APP}-counts-changelog", f"{APP}-words-repartition"]
    for key in ("three", "static", "after_kill", "after_restart", "static_after"):
        assert got[key] == want[key], (key, got, want)
    assert want["static"] == want["static_after"] == ["", "", f"{STATIC}-1"]      # (its thread: -1)
