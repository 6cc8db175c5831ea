"""The ``kafkalog`` PySpark data source: Spark's Kafka source and sink over a data directory."""

from __future__ import annotations

import sys
from types import FrameType

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from kafkalog.spark.options import InvalidOptionError, _bool, _lower
from kafkalog.spark.schema import source_schema

FORMAT_NAME = "kafkalog"

#: The PySpark worker that plans a read without filter pushdown receives
#: ``spark.sql.python.filterPushdown.enabled`` as its local ``enable_pushdown`` and refuses a
#: reader that implements ``pushFilters`` when it is false (``DATA_SOURCE_PUSHDOWN_DISABLED``);
#: the worker that pushes filters runs only when it is true.
_PLAN_READ_WORKER = "plan_data_source_read.py"


def filter_pushdown_enabled(frame: FrameType | None = None) -> bool:
    """Whether the session that asks for a reader lets Python sources push filters: False only
    when called (through ``DataSource.reader``) by PySpark's read-planning worker with
    ``spark.sql.python.filterPushdown.enabled`` off, the one place a Python worker learns that
    conf. A reader built anywhere else may push filters."""
    frame = frame or sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename.endswith(_PLAN_READ_WORKER):
            enabled = frame.f_locals.get("enable_pushdown")
            return True if enabled is None else bool(enabled)
        frame = frame.f_back
    return True


class KafkalogDataSource(DataSource):
    """``spark.read.format("kafkalog").option("subscribe", "orders").load(DATA_DIR)``.

    Options are those of Spark's Kafka source/sink; see ``docs/spark.md``. The reader pushes
    filters down when the session lets Python sources do so
    (``spark.sql.python.filterPushdown.enabled=true``, set by :func:`kafkalog.spark.register`)
    and reads without pushdown otherwise, so the source Spark registers on its own
    (``pyspark_kafkalog``) reads in any session. The extra option ``pushFilters`` (``true`` /
    ``false``) forces the choice.
    """

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> StructType:
        return source_schema(_bool(_lower(self.options), "includeHeaders", False))

    def _check_schema(self, schema: StructType) -> None:
        expected = self.schema()
        if [(f.name, f.dataType) for f in schema.fields] != \
                [(f.name, f.dataType) for f in expected.fields]:
            raise InvalidOptionError("the kafkalog source has a fixed schema (Spark's Kafka source "
                                     f"schema); got a user schema {schema.simpleString()}, expected "
                                     f"{expected.simpleString()}")

    def reader(self, schema: StructType) -> DataSourceReader:
        from kafkalog.spark.reader import KafkalogBatchReader, KafkalogPushdownReader
        self._check_schema(schema)
        if _bool(_lower(self.options), "pushFilters", filter_pushdown_enabled()):
            return KafkalogPushdownReader(self.options, schema)
        return KafkalogBatchReader(self.options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from kafkalog.spark.writer import KafkalogArrowWriter
        if overwrite:
            raise InvalidOptionError(
                "the kafkalog sink only appends, like Spark's Kafka sink: use .mode('append') "
                "(Spark itself refuses the default mode, ErrorIfExists, for every Python data "
                "source before kafkalog is called, so .mode('append') is always needed)")
        return KafkalogArrowWriter(self.options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from kafkalog.spark.stream_reader import KafkalogStreamReader
        self._check_schema(schema)
        return KafkalogStreamReader(self.options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from kafkalog.spark.stream_writer import KafkalogStreamWriter
        return KafkalogStreamWriter(self.options, schema)
