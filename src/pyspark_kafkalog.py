"""Automatic registration of the ``kafkalog`` PySpark data source.

Spark registers, on its own, the ``DefaultSource`` of every installed top-level module named
``pyspark_*``, so ``spark.read.format("kafkalog")`` works without a ``register`` call, in any
session: the reader pushes filters down only when the session sets
``spark.sql.python.filterPushdown.enabled=true`` (``kafkalog.spark.register(spark)`` sets it) and
reads without pushdown otherwise.
"""

from kafkalog.spark.source import KafkalogDataSource as DefaultSource

__all__ = ["DefaultSource"]
