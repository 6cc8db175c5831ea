"""The ``kafkalog`` PySpark data source: Spark's Kafka source and sink over a data directory."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource, DataSourceReader, DataSourceStreamReader, DataSourceStreamWriter, DataSourceWriter,
)
from pyspark.sql.types import StructType

from kafkalog.spark.options import InvalidOptionError, _bool, _lower
from kafkalog.spark.schema import source_schema

FORMAT_NAME = "kafkalog"


class KafkalogDataSource(DataSource):
    """``spark.read.format("kafkalog").option("subscribe", "orders").load(DATA_DIR)``.

    Options are those of Spark's Kafka source/sink; see ``docs/spark.md``. The extra option
    ``pushFilters`` (default true) picks the reader with filter pushdown, which needs
    ``spark.sql.python.filterPushdown.enabled=true`` (set by :func:`kafkalog.spark.register`).
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
        if _bool(_lower(self.options), "pushFilters", True):
            return KafkalogPushdownReader(self.options, schema)
        return KafkalogBatchReader(self.options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from kafkalog.spark.writer import KafkalogArrowWriter
        if overwrite:
            raise InvalidOptionError("the kafkalog sink only appends: use mode('append')")
        return KafkalogArrowWriter(self.options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from kafkalog.spark.stream_reader import KafkalogStreamReader
        self._check_schema(schema)
        return KafkalogStreamReader(self.options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from kafkalog.spark.stream_writer import KafkalogStreamWriter
        return KafkalogStreamWriter(self.options, schema)
