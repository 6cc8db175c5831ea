"""Spark and Arrow schemas of the ``kafkalog`` source and sink.

The read schema is exactly the one of Spark's own Kafka source (``KafkaRecordToRowConverter``):
all fields nullable, ``headers`` only with ``includeHeaders=true``. The Arrow schema is what
``pyspark.sql.pandas.types.to_arrow_schema(schema, timezone="UTC")`` gives, which Spark checks
for equality on every batch a reader yields (``binary`` not ``large_binary``, ``timestamp[us, UTC]``,
nullable fields).
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

HEADER_TYPE = StructType([StructField("key", StringType()), StructField("value", BinaryType())])

_BASE_FIELDS = [
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
]

ARROW_HEADER_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))

_ARROW_BASE_FIELDS = [
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("timestampType", pa.int32()),
]


def source_schema(include_headers: bool = False) -> StructType:
    """The Spark schema of Spark's Kafka source, with ``headers`` when ``include_headers``."""
    fields = list(_BASE_FIELDS)
    if include_headers:
        fields.append(StructField("headers", ArrayType(HEADER_TYPE)))
    return StructType(fields)


def source_arrow_schema(include_headers: bool = False) -> pa.Schema:
    """The Arrow schema Spark expects from a reader of :func:`source_schema`."""
    fields = list(_ARROW_BASE_FIELDS)
    if include_headers:
        fields.append(pa.field("headers", ARROW_HEADER_TYPE))
    return pa.schema(fields)


SOURCE_COLUMNS = tuple(f.name for f in _BASE_FIELDS) + ("headers",)

#: Columns of Spark's Kafka sink schema (``KafkaWriter.validateQuery``) and their allowed types.
SINK_COLUMNS = {
    "key": ("binary", "string"),
    "value": ("binary", "string"),
    "headers": ("array<struct<key:string,value:binary>>",),
    "topic": ("string",),
    "partition": ("int",),
    "timestamp": ("timestamp",),
}
