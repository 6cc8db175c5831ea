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
    from tests import kafka44
    from tests.spark import kafka_connector

    builder = SparkSession.builder
    try:  # Spark's own format("kafka") (test_kafka_connector.py), when Maven has it
        builder = builder.config("spark.jars", ",".join(kafka_connector.jars()))
    except kafka44.Kafka44Unavailable:
        pass                                      # those tests skip (or fail on CI) saying why
    session = (builder.master("local[2]")
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
