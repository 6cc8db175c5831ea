"""kafkalog.spark: the ``kafkalog`` PySpark data source (Spark's Kafka source/sink over a data
directory of Kafka logs) and distributed jobs.

Importing this package registers the source with the active SparkSession when there is one; the
top-level module ``pyspark_kafkalog`` lets Spark find it on its own. :func:`register` does it
explicitly and turns on Python filter pushdown.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from kafkalog.spark.source import FORMAT_NAME, KafkalogDataSource

__all__ = ["KafkalogDataSource", "FORMAT_NAME", "register"]

FILTER_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
WORKER_PYTHON_CONF = "spark.pyspark.python"

_log = logging.getLogger("kafkalog.spark")


def register(spark: Any) -> None:
    """Register the ``kafkalog`` format with ``spark`` (unless Spark already has it: found on its
    own through ``pyspark_kafkalog``, or registered before) and enable Python filter pushdown.
    Registering again would replace it with itself, and Spark warns of each replacement.

    A local session whose workers' Python is not chosen (neither ``PYSPARK_PYTHON`` nor
    ``spark.pyspark.python`` set) gets this interpreter (``sys.executable``) for its workers, as
    ``pyspark`` from a shell gets the shell's: Spark would start ``python3`` from ``PATH``, which,
    for a script run with a virtualenv's python that is not activated, is another interpreter,
    without kafkalog (``ModuleNotFoundError: kafkalog`` in every task). Spark reads the choice when
    a Python function or data source is registered, so it holds for what is registered after this
    call (the source, and the session's own UDFs)."""
    _use_this_python_for_local_workers(spark)
    spark.conf.set(FILTER_PUSHDOWN_CONF, "true")
    if not _registered(spark):
        spark.dataSource.register(KafkalogDataSource)


def _use_this_python_for_local_workers(spark: Any) -> None:
    """Set the workers' Python of a local classic session to ``sys.executable`` when unset."""
    try:
        sc = spark.sparkContext
        master = sc.master
        chosen = sc.getConf().get(WORKER_PYTHON_CONF, None)
    except Exception:  # Spark Connect: the server's workers are the server's business
        return
    if (not str(master).startswith("local") or "PYSPARK_PYTHON" in os.environ or chosen
            or getattr(sc, "pythonExec", None) != "python3"      # pyspark-private: may be gone
            or not sys.executable):
        return
    sc.pythonExec = sys.executable
    _log.info("kafkalog: this local Spark session's Python workers run %s (PYSPARK_PYTHON is not set)",
              sys.executable)


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
