"""The main job on a Spark standalone cluster (issue 28): a master and two workers started from the
installed pyspark's own classes on 127.0.0.1; ``examples/pipeline.py`` runs unchanged as an
application of it, submitted with ``spark-submit --master spark://...`` and launched with
``SPARK_MASTER`` set. The executors (on the workers, not in the driver) write, compact and read the data
directory, which the workers share with the driver (one machine)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import kafkalog
from tests.spark.spark_processes import StandaloneCluster, spark_home

PIPELINE = Path(__file__).resolve().parents[2] / "examples" / "pipeline.py"
JOB_TIMEOUT_S = 900


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    c = StandaloneCluster(tmp_path_factory.mktemp("standalone"), workers=2, cores=1, memory="1g").start()
    try:
        yield c
    finally:
        c.stop()


def _summary(stdout: str, name: str) -> str:
    m = re.search(rf"^  {name} +(.*)$", stdout, re.M)
    assert m, stdout[-3000:]
    return m.group(1)


def _ran_on_the_workers(cluster: StandaloneCluster, stdout: str) -> None:
    """The application ran on ``cluster``: one executor per worker, each with tasks it ran."""
    spark_line = _summary(stdout, "spark")
    assert spark_line.startswith(cluster.url + " "), spark_line
    app_id = re.search(r"application (app-\S+)\)", spark_line).group(1)
    logs = cluster.executor_logs(app_id)
    assert all(len(files) == 1 for files in logs.values()), logs
    for worker, (stderr,) in logs.items():
        finished = re.findall(r"Finished task \S+ in stage \S+ \(TID \d+\)", stderr.read_text(errors="replace"))
        assert finished, f"{worker}'s executor ran no task"


def _records(data_dir: Path) -> int:
    with kafkalog.open(str(data_dir), read_only=True) as dl:
        return sum(1 for _ in dl.consume("user-profiles"))


@pytest.mark.slow
def test_the_main_job_runs_unchanged_on_a_standalone_cluster(cluster: StandaloneCluster, tmp_path: Path) -> None:
    data = tmp_path / "data"
    args = [str(data), "--events", "60000", "--users", "2000"]
    # README's command, its master and directory replaced (tests/test_readme.py)
    from tests.test_readme import snippet
    (line,) = [ln for ln in snippet("Spark on a cluster and through Spark Connect", "bash").code.splitlines()
               if ln.startswith("spark-submit")]
    words = shlex.split(line.split("#")[0])
    assert words == ["spark-submit", "--master", "spark://host:7077", "examples/pipeline.py", "/mnt/kafka"]
    submitted = subprocess.run([str(spark_home() / "bin" / "spark-submit"), "--master", cluster.url,
                                "--executor-memory", "512m", str(PIPELINE), *args],
                               env=cluster.env, capture_output=True, text=True, timeout=JOB_TIMEOUT_S)
    assert submitted.returncode == 0, submitted.stderr[-5000:]
    _ran_on_the_workers(cluster, submitted.stdout)
    out = submitted.stdout
    # the executors wrote every event, compaction (on the executors) rewrote the rolled segments
    assert "written          60,000 events of 2,000 users this run" in out, out
    compacted = int(re.search(r"compacted +([\d,]+) records left", out).group(1).replace(",", ""))
    assert 2000 <= compacted < 60000, out
    assert _records(data) == compacted
    assert "Kafka layout     ok" in out
    verify = subprocess.run([sys.executable, "-m", "kafkalog.cli.main", "verify", str(data)],
                            capture_output=True, text=True, timeout=300)
    assert verify.returncode == 0, verify.stdout[-3000:] + verify.stderr[-3000:]

    # again, as a plain Python program with SPARK_MASTER naming the cluster: appended to the same directory
    env = dict(cluster.env, SPARK_MASTER=cluster.url)
    launched = subprocess.run([sys.executable, str(PIPELINE), *args], env=env, capture_output=True, text=True,
                              timeout=JOB_TIMEOUT_S)
    assert launched.returncode == 0, launched.stderr[-5000:]
    _ran_on_the_workers(cluster, launched.stdout)
    assert f"before this run  {compacted:,} records" in launched.stdout
    assert _records(data) == int(re.search(r"compacted +([\d,]+) records left", launched.stdout)
                                 .group(1).replace(",", ""))
