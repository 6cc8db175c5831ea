"""Apache Kafka 4.4 as a real process: the oracle the suite compares kafkalog with (issue 25).

Maven brings the jars of ``pom.xml`` (the broker ``kafka_2.13``, ``kafka-tools``, their clients) into
``~/.m2``; :func:`classpath` asks Maven for the classpath once per pom and caches the answer beside
the jars it names, so a second run starts no Maven at all. Nothing is built and no jar is copied.

:class:`KafkaBroker` formats a data directory (``kafka.tools.StorageTool format --standalone``) and
runs a single-node KRaft broker (combined broker and controller) on free ports of 127.0.0.1 with a
small heap; it is ready when its log says ``Transition from STARTING to STARTED``. :func:`run_tool`
runs any of Kafka's command-line classes (``org.apache.kafka.tools.DumpLogSegments`` and the rest of
kafka-tools, ``kafka.tools.StorageTool``) on the same classpath. Every JVM on that classpath maps one
class-data-sharing archive of the classes Kafka's broker loads to start (:func:`class_archive`, made
once beside the cached classpath): a broker's format, start and stop take 4.1 CPU-s instead of 6.9.

Without ``java`` or ``mvn``, or when Maven cannot resolve the pom, the tests that need Kafka skip
with the reason (:func:`require`); where ``KAFKALOG_REQUIRE_KAFKA44=1`` (``.ci/run`` sets it) they
fail instead, so CI cannot pass without the oracle.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NoReturn

import pytest

from tests import class_data_sharing

HERE = Path(__file__).resolve().parent
POM = HERE / "pom.xml"
KAFKA_VERSION = "4.4.0"
#: a broker on 2 shared cores and a cold JVM: seconds, not minutes; the margin is for CI
START_TIMEOUT_S = 180
STOP_TIMEOUT_S = 60
READY_LINE = "Transition from STARTING to STARTED"
REQUIRE_ENV = "KAFKALOG_REQUIRE_KAFKA44"


class Kafka44Unavailable(Exception):
    """No JDK or Maven here, or Maven could not resolve Kafka 4.4's jars."""


class Kafka44Error(Exception):
    """Kafka 4.4 was there but failed: a broker that did not start, a tool that exited non-zero."""


def require() -> str:
    """The classpath, or the test skips (fails where ``KAFKALOG_REQUIRE_KAFKA44=1``) saying why."""
    try:
        return classpath()
    except Kafka44Unavailable as e:
        _unavailable(str(e))


def _unavailable(why: str) -> NoReturn:
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"Apache Kafka {KAFKA_VERSION} is required here ({REQUIRE_ENV}=1): {why}")
    pytest.skip(f"Apache Kafka {KAFKA_VERSION} is not available: {why}")


def cache_dir() -> Path:
    return Path(os.environ.get("KAFKALOG_MAVEN_CACHE") or Path.home() / ".cache" / "kafkalog-maven")


def classpath(pom: Path = POM) -> str:
    """The classpath of ``pom``'s dependencies (jars under ``~/.m2``), resolved by Maven once."""
    digest = hashlib.sha256(pom.read_bytes()).hexdigest()[:16]
    cached = cache_dir() / f"{pom.parent.name}-{digest}.classpath"
    if cached.exists():
        cp = cached.read_text().strip()
        if cp and all(os.path.exists(jar) for jar in cp.split(os.pathsep)):
            return cp
    for tool in ("java", "mvn"):
        if shutil.which(tool) is None:
            raise Kafka44Unavailable(f"`{tool}` is not on PATH")
    cached.parent.mkdir(parents=True, exist_ok=True)
    out = cached.with_suffix(f".{os.getpid()}.tmp")
    cmd = ["mvn", "-q", "-B", "-f", str(pom), "dependency:build-classpath", f"-Dmdep.outputFile={out}"]
    try:
        # offline first: once the jars are in ~/.m2, Maven needs no network at all
        r = subprocess.run(cmd + ["-o"], capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    except subprocess.TimeoutExpired as e:
        raise Kafka44Unavailable(f"Maven did not resolve {pom} in {e.timeout:.0f} s") from None
    if r.returncode != 0 or not out.exists():
        raise Kafka44Unavailable(f"Maven could not resolve {pom}: {(r.stdout + r.stderr)[-800:]}")
    os.replace(out, cached)
    return cached.read_text().strip()


#: every port free_port handed out in this process
_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A port of 127.0.0.1 free now, never one this process was handed before: two calls in a row
    could otherwise get the same one from the kernel (a broker's PLAINTEXT and CONTROLLER listeners
    on one port fail Kafka's StorageTool)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


#: ``java`` as the tests start it (Kafka's tools and broker, the Java clients): the quick compiler
#: only and the serial collector. A test's JVM lives seconds to a minute, and on two cores the
#: optimizing compiler's work and G1's threads were most of the CPU it took.
JAVA = ("java", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")


def java_command(main_class: str, *args: str, heap: str = "256m", jvm_args: Sequence[str] = (),
                 cp: str | None = None, share_classes: bool = True) -> list[str]:
    """``java`` running ``main_class`` of Kafka 4.4 with ``args``. On a classpath that begins with
    Kafka 4.4's (``cp``, else Kafka's own) the JVM maps :func:`class_archive`'s classes, unless
    ``share_classes`` is false (a benchmark's Kafka, run as in production)."""
    cp = cp or require()
    shared = shared_classes(cp) if share_classes else ()
    return [*JAVA, f"-Xmx{heap}", *shared, *jvm_args, "-cp", cp, main_class, *args]


def shared_classes(cp: str) -> tuple[str, ...]:
    """The JVM options mapping :func:`class_archive` where ``cp`` begins with Kafka 4.4's classpath
    (the JVM takes an archive whose classpath is a prefix of its own: a client's classes go after
    Kafka's jars), else none."""
    try:
        kafka = classpath()
    except Kafka44Unavailable:
        return ()
    if cp != kafka and not cp.startswith(kafka + os.pathsep):
        return ()
    archive = class_archive(kafka)
    return () if archive is None else class_data_sharing.options(archive)


def archive_path(cp: str) -> Path | None:
    """Where :func:`class_archive` keeps the archive of ``cp``."""
    return class_data_sharing.archive_path(cache_dir(), "kafka44", cp)


#: set while this process makes the archive (its own broker's JVMs start without one)
_archiving = False


def class_archive(cp: str) -> Path | None:
    """Kafka 4.4's classes as its broker loads them to start, in a class-data-sharing archive
    (:mod:`tests.class_data_sharing`): a broker's start and stop took 5.0 CPU-s without it and 3.1
    with it, its format 1.9 and 1.0; the suite starts Kafka's JVMs hundreds of times a run. The
    first process to need it makes it once for this ``java`` and classpath (a broker formatted,
    started and stopped in a temporary directory: ~16 CPU-s); while it does, the others (xdist's
    workers) start their JVMs without one. ``None`` when there is none to map: the JVM loads its
    classes as before."""
    global _archiving
    archive = archive_path(cp)
    if archive is None or _archiving:
        return None
    _archiving = True
    try:
        made = class_data_sharing.make_once(archive, _train)
    except (Kafka44Error, OSError, subprocess.SubprocessError):
        made = False                                      # the tests' JVMs start without one
    finally:
        _archiving = False
    return archive if made else None


def _train(made: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="kafkalog-kafka44-archive-") as d, KafkaBroker(d) as broker:
        broker.format()
        broker.jvm_args.append(f"-XX:ArchiveClassesAtExit={made}")
        broker.start()
        broker.stop()                                     # the JVM writes the archive as it exits


def run_tool(main_class: str, *args: str, timeout: float = 300, check: bool = True,
             input: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run one of Kafka's command-line classes to its end (``check``: non-zero exit is an error)."""
    r = subprocess.run(java_command(main_class, *args), capture_output=True, text=True,
                       timeout=timeout, input=input)
    if check and r.returncode != 0:
        raise Kafka44Error(f"{main_class} {' '.join(args)} exited {r.returncode}: {r.stderr[-2000:]}")
    return r


def dump_log_segments(files: Sequence[str | os.PathLike[str]], *flags: str) -> str:
    """What ``kafka-dump-log.sh --files FILES FLAGS`` prints (``org.apache.kafka.tools.DumpLogSegments``)."""
    return run_tool("org.apache.kafka.tools.DumpLogSegments", "--files", ",".join(map(str, files)), *flags).stdout


#: the settings a single-node broker needs, Kafka's own keys; a test overrides any of them
BASE_PROPERTIES: dict[str, str] = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.listener.names": "CONTROLLER",
    "inter.broker.listener.name": "PLAINTEXT",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "50",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    "num.partitions": "1",
}

_LOG4J2 = """\
Configuration:
  Appenders:
    File:
      name: server
      fileName: "{log}"
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: INFO
      AppenderRef:
        - ref: server
"""


class KafkaBroker:
    """A single-node KRaft Kafka 4.4 broker under ``workdir`` (its data in ``workdir/data``).

    ``properties`` override :data:`BASE_PROPERTIES` (and ``log.dirs``, to adopt a directory kafkalog
    wrote). ``fast_start`` runs the JVM with its quick compiler only (tests); the benchmark turns it
    off so Kafka runs as it does in production.
    """

    def __init__(self, workdir: str | os.PathLike[str], properties: Mapping[str, str] | None = None,
                 heap: str = "512m", fast_start: bool = True) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.controller_port = free_port()
        self.properties = dict(BASE_PROPERTIES)
        self.properties.update({
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.quorum.bootstrap.servers": f"127.0.0.1:{self.controller_port}",
            "log.dirs": str(self.workdir / "data"),
        })
        self.properties.update(properties or {})
        self.heap = heap
        self.fast_start = fast_start
        #: more JVM arguments (system properties: ``-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls=...``)
        self.jvm_args: list[str] = []
        self.proc: subprocess.Popen[bytes] | None = None
        self.cluster_id: str | None = None
        self.properties_path = self.workdir / "server.properties"
        self.server_log = self.workdir / "server.log"
        self._write_config()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_dir(self) -> Path:
        return Path(self.properties["log.dirs"].split(",")[0])

    def _write_config(self) -> None:
        self.properties_path.write_text("".join(f"{k}={v}\n" for k, v in self.properties.items()))
        (self.workdir / "log4j2.yaml").write_text(_LOG4J2.format(log=self.server_log))

    def format(self, cluster_id: str | None = None, *extra: str) -> str:
        """``kafka-storage.sh format --standalone``: a new cluster (``cluster_id``, else a random one)."""
        self.cluster_id = cluster_id or _random_cluster_id()
        run_tool("kafka.tools.StorageTool", "format", "-t", self.cluster_id, "-c", str(self.properties_path),
                 "--standalone", *extra)
        return self.cluster_id

    def start(self, timeout: float = START_TIMEOUT_S) -> KafkaBroker:
        """Start ``kafka.Kafka`` and return once it serves (its log says it started)."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        jvm = [f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.yaml'}", "-Xms128m", *self.jvm_args]
        cmd = java_command("kafka.Kafka", str(self.properties_path), heap=self.heap, jvm_args=jvm,
                           share_classes=self.fast_start)
        if not self.fast_start:
            cmd.remove("-XX:TieredStopAtLevel=1")
        start_at = self.server_log.stat().st_size if self.server_log.exists() else 0
        with open(self.workdir / "stdout", "ab") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while READY_LINE not in self.log_since(start_at):
            if self.proc.poll() is not None:
                raise Kafka44Error(f"Kafka 4.4 exited {self.proc.returncode} while starting: {self.log_tail()}")
            if time.monotonic() > deadline:
                self.kill()
                raise Kafka44Error(f"Kafka 4.4 did not start in {timeout:.0f} s: {self.log_tail()}")
            time.sleep(0.1)
        return self

    def log_since(self, position: int) -> str:
        """What the broker logged from byte ``position`` of its ``server.log`` (a size taken before a
        start: that start's lines)."""
        try:
            with open(self.server_log, encoding="utf-8", errors="replace") as f:
                f.seek(position)
                return f.read()
        except FileNotFoundError:
            return ""

    def log_text(self) -> str:
        """Everything the broker logged (its ``server.log``), all starts."""
        return self.log_since(0)

    def log_tail(self, chars: int = 4000) -> str:
        text = self.log_since(0)
        stdout = self.workdir / "stdout"
        if stdout.exists():
            text += stdout.read_text(errors="replace")
        return text[-chars:]

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int:
        """A clean shutdown (SIGTERM, as ``kafka-server-stop.sh``); SIGKILL after ``timeout``."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise Kafka44Error(f"Kafka 4.4 did not stop in {timeout:.0f} s: {self.log_tail()}") from None
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL, as a crash: the next start recovers the log as after an unclean shutdown."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(STOP_TIMEOUT_S)

    def __enter__(self) -> KafkaBroker:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.alive():
            try:
                self.stop()
            except Kafka44Error:
                pass


def _random_cluster_id() -> str:
    """A cluster id as ``kafka-storage.sh random-uuid`` prints it (base64url of 16 bytes, no padding),
    never starting with ``-`` (Kafka's ``Uuid.randomUuid`` draws again: the tools would read it as an
    option; one start in 64 failed so)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid
