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
    """Register the ``kafkalog`` format with ``spark`` (unless Spark already has it: found on its
    own through ``pyspark_kafkalog``, or registered before) and enable Python filter pushdown.
    Registering again would replace it with itself, and Spark warns of each replacement."""
    spark.conf.set(FILTER_PUSHDOWN_CONF, "true")
    if not _registered(spark):
        spark.dataSource.register(KafkalogDataSource)


def _registered(spark: Any) -> bool:
    """Whether ``spark`` knows the ``kafkalog`` format (False when it cannot tell: Spark Connect)."""
    try:
        manager = spark._jsparkSession.sessionState().dataSourceManager()
        return bool(manager.dataSourceExists(FORMAT_NAME))
    except Exception:
        return False


def _register_active_session() -> None:
    try:
        from pyspark.sql import SparkSession
        spark = SparkSession.getActiveSession()
        if spark is not None:
            register(spark)
    except Exception:
        pass


_register_active_session()
