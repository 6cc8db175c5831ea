"""Automatic registration of the ``kafkalog`` PySpark data source.

Spark registers, on its own, the ``DefaultSource`` of every installed top-level module named
``pyspark_*``, so ``spark.read.format("kafkalog")`` works without a ``register`` call. Filter
pushdown still needs ``spark.sql.python.filterPushdown.enabled=true`` (or the option
``pushFilters=false``); ``kafkalog.spark.register(spark)`` sets it.
"""

from kafkalog.spark.source import KafkalogDataSource as DefaultSource

__all__ = ["DefaultSource"]
