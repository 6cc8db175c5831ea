"""Kafka Connect's distributed worker against ``kafkalog serve`` (issue 28): its config, offset
and status topics created compacted on kafkalog, the file connectors (``FileStreamSource`` a file
into a topic, ``FileStreamSink`` the topic into another file) created through its REST API, and a
worker restart (SIGTERM, then a new worker) that keeps its place: the lines appended while it was
down are copied once, none twice. Connect is 4.3.1 (``connect-pom.xml``: Maven Central has no
``connect-file`` 4.4.0, and the 4.3.1 connectors do not run in a 4.4 worker)."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests import kafka44
from tests.ecosystem import CONNECT_POM, log4j2_properties
from tests.kafka44 import free_port
from tests.server.broker_process import BrokerProcess

pytestmark = pytest.mark.kafka

INTERNAL = ("connect-configs", "connect-offsets", "connect-status")


def _classpath() -> str:
    try:
        return kafka44.classpath(CONNECT_POM)
    except kafka44.Kafka44Unavailable as e:
        kafka44._unavailable(str(e))


class Worker:
    """``connect-distributed.sh worker.properties`` as a JVM of its own."""

    def __init__(self, workdir: Path, bootstrap: str) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        props = {
            "bootstrap.servers": bootstrap, "group.id": "kafkalog-connect",
            "config.storage.topic": INTERNAL[0], "offset.storage.topic": INTERNAL[1],
            "status.storage.topic": INTERNAL[2], "config.storage.replication.factor": "1",
            "offset.storage.replication.factor": "1", "status.storage.replication.factor": "1",
            "offset.storage.partitions": "2", "status.storage.partitions": "1",
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "org.apache.kafka.connect.storage.StringConverter",
            "listeners": self.url, "offset.flush.interval.ms": "1000",
        }
        (workdir / "worker.properties").write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        (workdir / "log4j2.properties").write_text(log4j2_properties(workdir / "connect.log"))
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 180) -> Worker:
        cmd = kafka44.java_command("org.apache.kafka.connect.cli.ConnectDistributed",
                                   str(self.workdir / "worker.properties"), cp=_classpath(), heap="512m",
                                   jvm_args=[f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}"])
        with open(self.workdir / "stdout", "ab") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc.poll() is None, self.log_tail()
            try:
                if isinstance(self.rest("GET", "/connectors"), list):
                    return self
            except (urllib.error.URLError, ConnectionError, json.JSONDecodeError):
                pass
            assert time.monotonic() < deadline, f"the worker did not start: {self.log_tail()}"
            time.sleep(0.5)

    def rest(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            text = r.read()
        return json.loads(text) if text else None

    def log_tail(self) -> str:
        return "".join((self.workdir / f).read_text(errors="replace")[-3000:]
                       for f in ("connect.log", "stdout") if (self.workdir / f).exists())

    def stop(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(120)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(60)


def _wait_lines(path: Path, expected: list[str], worker: Worker, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while True:
        got = path.read_text().splitlines() if path.exists() else []
        if len(got) >= len(expected):
            assert got == expected, (len(got), len(expected))
            return
        assert time.monotonic() < deadline, f"{len(got)} of {len(expected)} lines: {worker.log_tail()}"
        time.sleep(0.3)


def _running(worker: Worker, name: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            s = worker.rest("GET", f"/connectors/{name}/status")
            if s["connector"]["state"] == "RUNNING" and s["tasks"] and all(
                    t["state"] == "RUNNING" for t in s["tasks"]):
                return
        except urllib.error.HTTPError:
            pass
        assert time.monotonic() < deadline, f"{name} is not running: {worker.log_tail()}"
        time.sleep(0.3)


def _listed(worker: Worker, names: list[str], timeout: float = 120) -> None:
    """Wait until the worker lists ``names``: its REST server answers before its herder has read
    the config topic to its end (an empty list, seen once under load)."""
    deadline = time.monotonic() + timeout
    got: Any = None
    while time.monotonic() < deadline:
        try:
            got = sorted(worker.rest("GET", "/connectors"))
        except urllib.error.HTTPError as e:
            got = e
        if got == names:
            return
        time.sleep(0.3)
    raise AssertionError(f"the worker lists {got!r}, not {names}: {worker.log_tail()}")


def test_file_connectors_through_a_worker_restart(tmp_path: Path) -> None:
    _classpath()
    broker = BrokerProcess(str(tmp_path / "data"), configs=["group.initial.rebalance.delay.ms=0"]).start()
    source, sink = tmp_path / "in.txt", tmp_path / "out.txt"
    lines = [f"line {i} " + "x" * (i % 17) for i in range(200)]
    source.write_text("\n".join(lines[:120]) + "\n")
    (tmp_path / "worker").mkdir()
    worker = Worker(tmp_path / "worker", broker.bootstrap)
    try:
        worker.start()
        worker.rest("POST", "/connectors", {"name": "file-in", "config": {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
            "file": str(source), "topic": "connect-lines", "tasks.max": "1"}})
        worker.rest("POST", "/connectors", {"name": "file-out", "config": {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
            "file": str(sink), "topics": "connect-lines", "tasks.max": "1"}})
        _running(worker, "file-in")
        _running(worker, "file-out")
        _wait_lines(sink, lines[:120], worker)

        assert worker.stop() in (0, 130, 143), worker.log_tail()
        with open(source, "a") as f:             # written while no worker runs
            f.write("\n".join(lines[120:]) + "\n")
        worker = Worker(tmp_path / "worker", broker.bootstrap)
        worker.start()                           # the connectors come back from connect-configs
        _listed(worker, ["file-in", "file-out"])
        _running(worker, "file-in")
        _running(worker, "file-out")
        _wait_lines(sink, lines, worker)         # each line once: the offsets were kept
        time.sleep(2)
        assert sink.read_text().splitlines() == lines
        assert worker.stop() in (0, 130, 143)
        _assert_compacted(broker.bootstrap)
    finally:
        worker.kill()
        assert broker.stop() == 0, broker.stderr()


def _assert_compacted(bootstrap: str) -> None:
    """Connect created its three topics compacted, as it requires."""
    from confluent_kafka.admin import AdminClient, ConfigResource
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for topic in INTERNAL:
        cfg: Any = next(iter(admin.describe_configs([ConfigResource("TOPIC", topic)]).values())).result(60)
        assert cfg["cleanup.policy"].value == "compact", topic
