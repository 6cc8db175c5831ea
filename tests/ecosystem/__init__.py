"""Kafka's own ecosystem against ``kafkalog serve`` and Apache Kafka 4.4 (issue 28): its command-line
tools, run in one JVM per session by ``java/KafkalogTools.java`` (:class:`ToolSession`), and the
frameworks of ``pom.xml`` (Kafka Streams, Connect, MirrorMaker 2)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import IO, Any

from tests import kafka44
from tests.server.java_client import JavaUnavailable, compile_java

HERE = Path(__file__).resolve().parent
TOOLS = HERE / "java" / "KafkalogTools.java"
#: Kafka Streams 4.4; the tools come from tests/kafka44/pom.xml
POM = HERE / "pom.xml"
#: Kafka Connect and MirrorMaker 2, 4.3.1 (connect-pom.xml says why)
CONNECT_POM = HERE / "connect-pom.xml"

#: kafka-<tool>.sh -> the class it runs (Kafka 4.4's bin/ scripts)
TOOL_CLASSES = {
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    "kafka-configs": "org.apache.kafka.tools.ConfigCommand",
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-streams-groups": "org.apache.kafka.tools.streams.StreamsGroupCommand",
    "kafka-get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "kafka-delete-records": "org.apache.kafka.tools.DeleteRecordsCommand",
    "kafka-transactions": "org.apache.kafka.tools.TransactionsCommand",
    "kafka-log-dirs": "org.apache.kafka.tools.LogDirsCommand",
    "kafka-features": "org.apache.kafka.tools.FeatureCommand",
    "kafka-console-producer": "org.apache.kafka.tools.ConsoleProducer",
    "kafka-console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "kafka-verifiable-producer": "org.apache.kafka.tools.VerifiableProducer",
    "kafka-verifiable-consumer": "org.apache.kafka.tools.VerifiableConsumer",
    "kafka-producer-perf-test": "org.apache.kafka.tools.ProducerPerformance",
    "kafka-consumer-perf-test": "org.apache.kafka.tools.ConsumerPerformance",
}

#: tools that end through ``System.exit`` and ``Runtime.addShutdownHook`` (not Kafka's ``Exit``, which
#: the in-process driver traps): each runs in a JVM of its own, as its script runs it
OWN_JVM = frozenset({"kafka-verifiable-producer", "kafka-verifiable-consumer"})

_LOG4J2 = """\
Configuration:
  Appenders:
    File:
      name: tools
      fileName: "{log}"
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: WARN
      AppenderRef:
        - ref: tools
"""


def log4j2_properties(log: str | os.PathLike[str], level: str = "INFO") -> str:
    """A log4j2 configuration (properties: the frameworks' classpaths have no YAML parser) writing
    everything at ``level`` and above to ``log``."""
    return (f"appender.file.type=File\nappender.file.name=file\nappender.file.fileName={log}\n"
            "appender.file.layout.type=PatternLayout\nappender.file.layout.pattern=[%d] %p %m (%c)%n\n"
            f"rootLogger.level={level}\nrootLogger.appenderRef.file.ref=file\n")


def tools_classpath() -> str:
    """Kafka 4.4's tools (tests/kafka44/pom.xml) and the compiled driver; the test skips (fails
    where KAFKALOG_REQUIRE_KAFKA44=1) without them."""
    cp = kafka44.require()
    try:
        classes = compile_java([str(TOOLS)], "kafka-tools", [cp])
    except JavaUnavailable as e:
        kafka44._unavailable(str(e))
    return os.pathsep.join([cp, classes])             # Kafka's jars first: kafka44.shared_classes


class ToolSession:
    """One JVM running Kafka's tools one after another (``kafka-topics --create ...``), as the
    ``bin/kafka-*.sh`` scripts would each run them; the tools' log goes to ``workdir/tools.log``."""

    def __init__(self, workdir: str | os.PathLike[str]) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        log4j = self.workdir / "tools-log4j2.yaml"
        log4j.write_text(_LOG4J2.format(log=self.workdir / "tools.log"))
        cmd = kafka44.java_command("KafkalogTools", heap="512m", cp=tools_classpath(),
                                   jvm_args=[f"-Dlog4j2.configurationFile={log4j}"])
        self.jvm_args = [f"-Dlog4j2.configurationFile={log4j}"]
        self.stderr = open(self.workdir / "tools.stderr", "ab")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
                                     text=True, start_new_session=True)

    def run(self, tool: str, *args: str, stdin: str = "", label: str | None = None,
            timeout: float = 600) -> dict[str, Any]:
        """``tool`` (``kafka-topics``, or a class name) with ``args``; its exit status, stdout and stderr.
        A tool of its own JVM still running after ``timeout`` seconds is killed: its exit status is
        then ``"killed after N s"``, with what it printed until then."""
        if tool in OWN_JVM:
            cmd = kafka44.java_command(TOOL_CLASSES[tool], *args, cp=tools_classpath(), jvm_args=self.jvm_args)
            name = label or f"{tool} {' '.join(args)}"
            try:
                r = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout)
            except subprocess.TimeoutExpired as e:     # its output so far is bytes, even with text=True
                out, err = (x.decode(errors="replace") if isinstance(x, bytes) else (x or "")
                            for x in (e.stdout, e.stderr))
                return {"label": name, "exit": f"killed after {timeout:g} s", "stdout": out, "stderr": err}
            return {"label": name, "exit": r.returncode, "stdout": r.stdout, "stderr": r.stderr}
        assert self.proc.stdin is not None and self.proc.stdout is not None
        step = {"label": label or f"{tool} {' '.join(args)}", "main": TOOL_CLASSES.get(tool, tool),
                "args": list(args), "stdin": stdin}
        self.proc.stdin.write(json.dumps(step) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise kafka44.Kafka44Error(f"the tools' JVM exited {self.proc.wait()} during {step['label']}: "
                                       f"{(self.workdir / 'tools.stderr').read_text()[-3000:]}")
        return dict(json.loads(line))

    def close(self) -> None:
        if self.proc.poll() is None:
            stdin: IO[str] | None = self.proc.stdin
            if stdin is not None:
                stdin.close()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.stderr.close()

    def __enter__(self) -> ToolSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
