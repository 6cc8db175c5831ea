"""kafkalog.spark: the ``kafkalog`` PySpark data source (Spark's Kafka source/sink over a data
directory of Kafka logs) and distributed jobs.

Importing this package registers the source with the active SparkSession when there is one; the
top-level module ``pyspark_kafkalog`` lets Spark find it on its own. :func:`register` does it
explicitly and turns on Python filter pushdown.
"""

from __future__ import annotations

from typing import Any

from kafkalog.spark.source import FORMAT_NAME, KafkalogDataSource

__all__ = ["KafkalogDataSource", "FORMAT_NAME", "register"]

FILTER_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def register(spark: Any) -> None:
    """Register the ``kafkalog`` format with ``spark`` and enable Python filter pushdown."""
    spark.conf.set(FILTER_PUSHDOWN_CONF, "true")
    spark.dataSource.register(KafkalogDataSource)


def _register_active_session() -> None:
    try:
        from pyspark.sql import SparkSession
        spark = SparkSession.getActiveSession()
        if spark is not None:
            register(spark)
    except Exception:
        pass


_register_active_session()
