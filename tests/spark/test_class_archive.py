"""Spark's drivers map one class-data-sharing archive (``tests.spark.class_archive``): made once in the
background, mapped by a driver ``spark-submit`` starts with the suite's options, and never waited for:
a process that finds another making it leaves at once, making nothing."""

from __future__ import annotations

import fcntl
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests import class_data_sharing
from tests.spark import class_archive
from tests.spark.spark_processes import spark_home

pytest.importorskip("pyspark")


def test_a_driver_spark_submit_starts_maps_the_archive(tmp_path: Path) -> None:
    archive = class_archive.archive_path()
    assert archive is not None
    class_data_sharing.wait_for_maker(archive)            # another worker's session may be making it
    maker = class_archive.make_in_background()
    if maker is not None:                                 # a cold cache: made here, once
        class_archive.finish(maker)
    assert archive.exists(), "the maker made no archive"
    log = tmp_path / "classes.log"
    env = dict(os.environ, SPARK_SUBMIT_OPTS=f"{class_archive.options()} -Xlog:class+load=info:file={log}")
    env.pop("SPARK_CONF_DIR", None)
    r = subprocess.run([str(spark_home() / "bin" / "spark-submit"), "--version"], capture_output=True,
                       text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "version" in r.stderr + r.stdout
    assert "[cds" not in r.stdout + r.stderr                # what the JVM says of the archive is silenced
    shared = [line for line in log.read_text().splitlines() if "source: shared objects file (top)" in line]
    assert any("org.apache.spark." in line for line in shared), log.read_text()[-2000:]


def test_a_process_that_finds_the_archive_being_made_leaves_at_once(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKALOG_MAVEN_CACHE", str(tmp_path))
    archive = class_archive.archive_path()
    assert archive is not None and archive.parent == tmp_path
    with open(archive.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        started = time.monotonic()
        maker = class_archive.make_in_background()
        assert maker is not None
        assert maker.wait(60) == 0
        assert time.monotonic() - started < 30               # no session was started
    assert [p.name for p in tmp_path.iterdir()] == [archive.with_suffix(".lock").name]   # nothing made

