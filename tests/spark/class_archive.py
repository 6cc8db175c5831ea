"""Spark's driver classes in one class-data-sharing archive (AppCDS), as ``tests.kafka44.class_archive``
keeps Kafka's: a Spark driver that maps it skips loading, parsing and verifying the classes a session
loads to start and run a job. A local session's start, one job and stop took 22 CPU-s (19 s) without
it and 15 (12 s) with it; the suite starts Spark's drivers dozens of times a run (each xdist worker's
session, the sessions tests start in subprocesses, the README's and the documents' jobs).

The suite's children get :func:`options` in ``SPARK_SUBMIT_OPTS`` from the start (``tests/conftest.py``):
a JVM finds the archive there once it exists and starts without one before (a missing archive, or
one made by another build of ``java``, is ignored silently). The first worker to start its session
makes the archive in the background (:func:`make_in_background`, this module run as a script: a
session started with ``-XX:ArchiveClassesAtExit`` in a temporary directory, one job, stopped, the
archive renamed into place once its JVM has exited), beside the cached Maven classpaths.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.kafka44 import QUIET_CDS, cache_dir


def archive_path() -> Path | None:
    """Where the archive of this ``java`` and this pyspark is kept (``None``: no ``java``, no pyspark)."""
    java = shutil.which("java")
    spark = importlib.util.find_spec("pyspark")          # not imported: every test process asks
    if java is None or spark is None or spark.origin is None:
        return None
    java = os.path.realpath(java)
    stamp = f"{java}\0{os.stat(java).st_mtime_ns}\0{spark.origin}\0{os.stat(spark.origin).st_mtime_ns}"
    return cache_dir() / f"spark-{hashlib.sha256(stamp.encode()).hexdigest()[:16]}.jsa"


def options() -> str:
    """The driver's JVM options mapping the archive (``SPARK_SUBMIT_OPTS``), or none."""
    archive = archive_path()
    return "" if archive is None else " ".join([f"-XX:SharedArchiveFile={archive}", *QUIET_CDS])


def make_in_background() -> subprocess.Popen[bytes] | None:
    """Start making the archive unless it exists (the maker exits at once when another is at it):
    the process, to stop at the end of the run if it is still going, else ``None``."""
    archive = archive_path()
    if archive is None or archive.exists():
        return None
    return subprocess.Popen([sys.executable, "-m", "tests.spark.class_archive", str(archive)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            cwd=Path(__file__).resolve().parents[2], start_new_session=True)


def finish(maker: subprocess.Popen[bytes], timeout: float = 180) -> None:
    """Wait for a maker :func:`make_in_background` started (a short run ends before it does); one
    that does not finish in ``timeout`` is killed with its JVM, and its unfinished archive removed."""
    try:
        maker.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(maker.pid, signal.SIGKILL)
        maker.wait()
        archive = archive_path()
        if archive is not None:
            archive.with_suffix(f".{maker.pid}.tmp").unlink(missing_ok=True)


def _make(archive: Path) -> None:
    archive.parent.mkdir(parents=True, exist_ok=True)
    with open(archive.with_suffix(".lock"), "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return                                        # another process is making it
        if archive.exists():
            return
        made = archive.with_suffix(f".{os.getpid()}.tmp")
        try:
            with tempfile.TemporaryDirectory(prefix="kafkalog-spark-archive-") as d:
                _train(made, Path(d))
            if made.exists():
                os.replace(made, archive)
        finally:
            made.unlink(missing_ok=True)


def _train(made: Path, workdir: Path) -> None:
    """A session as the suite's (tests/conftest.py), one job with a shuffle and a Python UDF, then
    its JVM's exit, which writes the archive."""
    opts = os.environ.get("SPARK_SUBMIT_OPTS", "").split()
    opts = [o for o in opts if not o.startswith("-XX:SharedArchiveFile=") and o not in QUIET_CDS]
    os.environ["SPARK_SUBMIT_OPTS"] = " ".join([*opts, *QUIET_CDS, f"-XX:ArchiveClassesAtExit={made}"])
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession
    from pyspark.sql.functions import udf

    session = (SparkSession.builder.master("local[2]").appName("kafkalog-class-archive")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.sql.warehouse.dir", str(workdir / "warehouse"))
               .getOrCreate())
    jvm = session.sparkContext._gateway.proc  # type: ignore[union-attr]
    plus_one = udf(lambda v: v + 1, "long")
    session.range(1000).select(plus_one("id").alias("v")).groupBy((plus_one("v") % 7).alias("k")).count().collect()
    session.stop()
    jvm.stdin.close()                                     # the gateway exits at its end of input
    jvm.wait(120)


if __name__ == "__main__":
    _make(Path(sys.argv[1]))
