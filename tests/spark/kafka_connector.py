"""Spark's own Kafka source and sink (``format("kafka")``, spark-sql-kafka-0-10) for the test session.

Maven resolves ``spark-sql-kafka/pom.xml`` into ``~/.m2`` once (``tests.kafka44.classpath`` caches the
answer per pom); the session fixture hands the jars to Spark as ``spark.jars``. The pom already leaves
out what pyspark ships (Spark, Scala, Hadoop, logging, codecs); jars whose artifact pyspark has anyway
are dropped here too, so the session never holds two versions of one library.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests import kafka44

POM = Path(__file__).resolve().parent / "spark-sql-kafka" / "pom.xml"


def _artifact(jar: str) -> str:
    """``kafka-clients-3.9.2.jar`` -> ``kafka-clients``."""
    return re.sub(r"-\d[^/]*\.jar$", "", os.path.basename(jar))


def jars() -> list[str]:
    """The connector's jars under ``~/.m2`` (raises :class:`kafka44.Kafka44Unavailable`)."""
    import pyspark
    own = {_artifact(name) for name in os.listdir(Path(pyspark.__file__).parent / "jars")}
    return [jar for jar in kafka44.classpath(POM).split(os.pathsep) if _artifact(jar) not in own]


def require(spark) -> None:
    """The test skips (fails where ``KAFKALOG_REQUIRE_KAFKA44=1``) when the session has no connector."""
    if "spark-sql-kafka-0-10" in spark.sparkContext.getConf().get("spark.jars", ""):
        return
    try:
        jars()
    except kafka44.Kafka44Unavailable as e:
        kafka44._unavailable(f"Spark's Kafka connector: {e}")
    pytest.fail("the Spark session was started without Spark's Kafka connector (spark.jars)")
