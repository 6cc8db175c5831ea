"""One local SparkSession for the whole test run (starting one takes 10-20 s)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", __import__("sys").executable)

pyspark = pytest.importorskip("pyspark")



@pytest.fixture(scope="session")
def spark():
    from pyspark.sql import SparkSession

    import kafkalog.spark

    session = (SparkSession.builder.master("local[2]")
               .appName("kafkalog-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.sql.python.filterPushdown.enabled", "true")
               .getOrCreate())
    kafkalog.spark.register(session)
    yield session
    session.stop()


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/spark" in str(item.fspath):
            item.add_marker(pytest.mark.spark)
