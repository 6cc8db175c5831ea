"""Spark's driver classes in one class-data-sharing archive (:mod:`tests.class_data_sharing`), as
``tests.kafka44.class_archive`` keeps Kafka's: a Spark driver that maps it skips loading, parsing and
verifying the classes a session loads to start and run a job. A local session's start, one job and
stop took 22 CPU-s (19 s) without it and 15 (12 s) with it; the suite starts Spark's drivers dozens
of times a run (each xdist worker's session, the sessions tests start in subprocesses, the README's
and the documents' jobs).

The suite's children get :func:`options` in ``SPARK_SUBMIT_OPTS`` from the start (``tests/conftest.py``):
a JVM finds the archive there once it exists and starts without one before (a missing archive, or
one made by another build of ``java``, is ignored silently). The first worker to start its session
makes the archive in the background (:func:`make_in_background`, this module run as a script: a
session started with ``-XX:ArchiveClassesAtExit`` in a temporary directory, one job, stopped, the
archive renamed into place once its JVM has exited), beside the cached Maven classpaths.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from tests import class_data_sharing
from tests.kafka44 import cache_dir


def archive_path() -> Path | None:
    """Where the archive of this ``java`` and this pyspark is kept (``None``: no ``java``, no pyspark)."""
    spark = importlib.util.find_spec("pyspark")          # not imported: every test process asks
    if spark is None or spark.origin is None:
        return None
    return class_data_sharing.archive_path(cache_dir(), "spark", spark.origin,
                                           str(os.stat(spark.origin).st_mtime_ns))


def options() -> str:
    """The driver's JVM options mapping the archive (``SPARK_SUBMIT_OPTS``), or none."""
    archive = archive_path()
    return "" if archive is None else " ".join(class_data_sharing.options(archive))


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
            class_data_sharing.unfinished(archive, maker.pid).unlink(missing_ok=True)


def _train(made: Path) -> None:
    """A session as the suite's (tests/conftest.py), one job with a shuffle and a Python UDF, then
    its JVM's exit, which writes the archive."""
    opts = os.environ.get("SPARK_SUBMIT_OPTS", "").split()
    opts = [o for o in opts if not o.startswith("-XX:SharedArchiveFile=") and o not in class_data_sharing.QUIET]
    os.environ["SPARK_SUBMIT_OPTS"] = " ".join([*opts, *class_data_sharing.QUIET, f"-XX:ArchiveClassesAtExit={made}"])
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession
    from pyspark.sql.functions import udf

    with tempfile.TemporaryDirectory(prefix="kafkalog-spark-archive-") as workdir:
        session = (SparkSession.builder.master("local[2]").appName("kafkalog-class-archive")
                   .config("spark.ui.enabled", "false")
                   .config("spark.sql.shuffle.partitions", "4")
                   .config("spark.sql.warehouse.dir", str(Path(workdir) / "warehouse"))
                   .getOrCreate())
        jvm = session.sparkContext._gateway.proc  # type: ignore[union-attr]
        plus_one = udf(lambda v: v + 1, "long")
        session.range(1000).select(plus_one("id").alias("v")).groupBy((plus_one("v") % 7).alias("k")).count().collect()
        session.stop()
        jvm.stdin.close()                                 # the gateway exits at its end of input
        jvm.wait(120)


if __name__ == "__main__":
    class_data_sharing.make_once(Path(sys.argv[1]), _train)
