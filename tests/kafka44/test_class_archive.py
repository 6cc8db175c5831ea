"""Kafka 4.4's JVMs map one class-data-sharing archive (``kafka44.class_archive``): made once, used by
the broker, its tools and the Java clients whose classpath begins with Kafka's, and never in the way:
an archive the JVM cannot use prints nothing, and a process that finds another making it goes on
without one."""

from __future__ import annotations

import fcntl
import os
import subprocess
from pathlib import Path

import pytest

from tests import class_data_sharing, kafka44
from tests.server import java_client

#: the line class loading logs for a class taken from the dynamic archive
FROM_ARCHIVE = "source: shared objects file (top)"


def _loaded_from_archive(cmd: list[str]) -> list[str]:
    """The classes a JVM started with ``cmd`` (``-Xlog:class+load`` added) took from the archive."""
    i = cmd.index("-cp")
    r = subprocess.run([*cmd[:i], "-Xlog:class+load=info", *cmd[i:]], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return [line.split()[1] for line in r.stdout.splitlines() if FROM_ARCHIVE in line]


def _archive(cp: str) -> Path | None:
    """The archive, once another worker making it (if one is) is done."""
    path = kafka44.archive_path(cp)
    assert path is not None
    class_data_sharing.wait_for_maker(path)
    return kafka44.class_archive(cp)


def test_kafkas_tools_and_the_clients_map_the_archive() -> None:
    cp = kafka44.require()
    archive = _archive(cp)
    assert archive is not None and archive.stat().st_size > 0
    tool = _loaded_from_archive(kafka44.java_command("kafka.tools.StorageTool", "random-uuid"))
    assert any(c.startswith("org.apache.kafka.") for c in tool), tool[:20]
    # a client's classes go after Kafka's jars, so its JVM maps the archive too
    try:
        client_cp = java_client.classpath(java_client.MAVEN_CLIENTS[0])
    except java_client.JavaUnavailable as e:
        kafka44._unavailable(str(e))
    assert client_cp.startswith(cp)
    client = _loaded_from_archive(kafka44.java_command("kafka.tools.StorageTool", "random-uuid", cp=client_cp))
    assert any(c.startswith("org.apache.kafka.") for c in client), client[:20]
    # a benchmark's Kafka runs as in production: no archive
    assert not any(a.startswith("-XX:SharedArchiveFile") for a in
                   kafka44.java_command("kafka.Kafka", "x.properties", share_classes=False))


def test_an_archive_the_jvm_cannot_use_changes_nothing_it_prints() -> None:
    """The JVM refuses an archive made on another classpath (or by another build of it), and says
    so on standard output unless told not to: the options :func:`kafka44.shared_classes` gives
    keep a tool's output as it is."""
    cp = kafka44.require()
    _archive(cp)
    options = kafka44.shared_classes(cp)
    assert any(o.startswith("-XX:SharedArchiveFile=") for o in options)
    uuid = kafka44.run_tool("kafka.tools.StorageTool", "random-uuid").stdout
    reordered = os.pathsep.join(reversed(cp.split(os.pathsep)))         # the same jars, not the same path
    r = subprocess.run([*kafka44.JAVA, *options, "-cp", reordered, "kafka.tools.StorageTool", "random-uuid"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert (r.stderr, len(r.stdout), r.stdout.count("\n")) == ("", len(uuid), 1), r.stdout


def test_a_process_that_finds_the_archive_being_made_goes_on_without_it(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    cp = kafka44.require()
    monkeypatch.setenv("KAFKALOG_MAVEN_CACHE", str(tmp_path))
    archive = kafka44.archive_path(cp)
    assert archive is not None and archive.parent == tmp_path
    # the lock as the process making the archive holds it (flock: another open file conflicts)
    with open(archive.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert kafka44.class_archive(cp) is None
    assert [p.name for p in tmp_path.iterdir()] == [archive.with_suffix(".lock").name]   # nothing made
