"""The workers' Python of a local session (issue 36, item 7): a script run with an interpreter that is
not the ``python3`` on ``PATH`` (a virtualenv's python, not activated) reads through kafkalog, because
``kafkalog.spark.register`` gives the workers this interpreter when nothing chose one; Spark alone
starts ``python3`` from ``PATH`` and every task fails with ``ModuleNotFoundError: kafkalog``."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import venv
from pathlib import Path

import kafkalog

SCRIPT = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[1])   # kafkalog for this interpreter only (PYTHONPATH would reach the workers)
    from pyspark.sql import SparkSession
    import kafkalog.spark
    spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
    kafkalog.spark.register(spark)
    df = spark.read.format("kafkalog").option("subscribe", "t").load(sys.argv[2])
    print("COUNT", df.count(), df.where("offset >= 1").count())
    spark.stop()
""")


def test_a_local_session_runs_its_workers_on_this_python(tmp_path):
    with kafkalog.open(tmp_path / "data", background=False) as dl:
        dl.create_topic("t", partitions=1)
        dl.produce_many("t", [b"a", b"b", b"c"], partition=0)
    # PATH's python3: a fresh virtualenv of the same version, without kafkalog
    bare = tmp_path / "bare"
    venv.create(bare, with_pip=False)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON",
                                                               "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV")}
    env.update(PATH=f"{bare / 'bin'}{os.pathsep}{env.get('PATH', '')}", SPARK_LOCAL_IP="127.0.0.1")
    assert subprocess.run(["python3", "-c", "import kafkalog"], env=env, capture_output=True).returncode
    src = str(Path(kafkalog.__file__).resolve().parents[1])
    proc = subprocess.run([sys.executable, "-c", SCRIPT, src, str(tmp_path / "data")], capture_output=True,
                          text=True, env=env, timeout=600, check=False)
    assert "ModuleNotFoundError" not in proc.stderr, proc.stderr[-3000:]
    assert "COUNT 3 2" in proc.stdout.splitlines(), proc.stderr[-3000:]
