"""A PushTelemetry payload (KIP-714) as series to re-export: the bytes decompressed with the codec the
client named (zstd, lz4, gzip, snappy or none, Kafka's framings through
:mod:`kafkalog.record.compression`, bounded by ``telemetry.max.bytes``), parsed as OTLP
``MetricsData`` by the ``opentelemetry-proto`` classes, and flattened into :class:`Series`.

Names and labels become Prometheus ones: every character outside ``[a-zA-Z0-9_:]`` becomes ``_``
(``org.apache.kafka.consumer.fetch.manager.fetch.latency.avg`` is
``org_apache_kafka_consumer_fetch_manager_fetch_latency_avg``). A gauge and a non-monotonic sum are
gauges, a monotonic sum a counter (a delta sum is added to the value before it, so a client that
sends deltas all the same still gives a counter), an explicit-bounds histogram a histogram and a
summary a summary; exponential histograms are left out (Prometheus' text format has no such type).
The resource's attributes and the data point's are the labels. Names in the broker's own namespaces
(``kafka_``, ``kafkalog_``) are left out, so a client cannot shadow a broker metric.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from kafkalog.errors import CompressionError, UnsupportedCompressionTypeError
from kafkalog.record.compression import decompress

__all__ = ["Series", "TelemetryTooLarge", "InvalidTelemetry", "decode", "series_of"]

_NOT_NAME = re.compile(r"[^a-zA-Z0-9_:]")
_NOT_LABEL = re.compile(r"[^a-zA-Z0-9_]")
#: the broker's own families: a client metric of these names is not re-exported
RESERVED_PREFIXES = ("kafka_", "kafkalog_")
#: OTLP AggregationTemporality
_DELTA = 1

Labels = tuple[tuple[str, str], ...]


class TelemetryTooLarge(Exception):
    """The payload decompresses to more than ``telemetry.max.bytes`` (TELEMETRY_TOO_LARGE)."""


class InvalidTelemetry(Exception):
    """The payload does not decompress or is not OTLP ``MetricsData`` (INVALID_RECORD, as Kafka
    answers when its exporter plugin fails)."""


@dataclass(frozen=True, slots=True)
class Series:
    """One re-exported series: a gauge's or counter's ``value``; a histogram's cumulative
    ``buckets`` ((upper bound, count)..., +Inf last), ``count`` and ``sum``; a summary's
    ``quantiles``, ``count`` and ``sum``. ``delta``: a counter's value is an increment."""
    name: str
    kind: str          # "gauge" | "counter" | "histogram" | "summary"
    labels: Labels
    value: float = 0.0
    count: float = 0.0
    sum: float = 0.0
    buckets: tuple[tuple[float, float], ...] = ()
    quantiles: tuple[tuple[float, float], ...] = ()
    delta: bool = False


def decode(compression_type: int, data: bytes, max_bytes: int) -> Any:
    """The OTLP ``MetricsData`` of a pushed payload."""
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData
    try:
        raw = decompress(compression_type, data, magic=2, max_size=max_bytes)
    except UnsupportedCompressionTypeError as e:
        raise InvalidTelemetry(str(e)) from None
    except CompressionError as e:
        if "exceeds the limit" in str(e):
            raise TelemetryTooLarge(f"the payload decompresses to more than telemetry.max.bytes="
                                    f"{max_bytes}") from None
        raise InvalidTelemetry(f"cannot decompress the payload: {e}") from None
    try:
        return MetricsData.FromString(raw)
    except (DecodeError, ValueError, RecursionError) as e:
        raise InvalidTelemetry(f"the payload is not OTLP MetricsData: {e}") from None


def _value(v: Any) -> str:
    which = v.WhichOneof("value")
    if which is None:
        return ""
    if which == "bool_value":
        return "true" if v.bool_value else "false"
    if which == "string_value":
        return str(v.string_value)
    if which == "int_value":
        return str(v.int_value)
    if which == "double_value":
        return str(v.double_value)
    other = {"array_value": v.array_value, "kvlist_value": v.kvlist_value, "bytes_value": v.bytes_value}[which]
    return str(other).replace("\n", " ")


def label_name(key: str) -> str:
    """A Prometheus label name (``__`` starts the names Prometheus reserves: one ``_`` is kept)."""
    name = _NOT_LABEL.sub("_", key)
    if not name or name[0].isdigit():
        name = "_" + name
    return "_" + name.lstrip("_") if name.startswith("__") else name


def metric_name(name: str) -> str:
    out = _NOT_NAME.sub("_", name)
    return "_" + out if not out or out[0].isdigit() else out


def _labels(fixed: dict[str, str], attributes: Any) -> Labels:
    out = {}
    for kv in attributes:
        out[label_name(kv.key)] = _value(kv.value)
    out.update(fixed)        # the broker's labels win over a client's attribute of the same name
    return tuple(sorted(out.items()))


def _number(p: Any) -> float:
    which = p.WhichOneof("value")
    return float(p.as_int) if which == "as_int" else float(p.as_double)


def series_of(data: Any, fixed: dict[str, str]) -> list[Series]:
    """Every series of a ``MetricsData``, each labelled with ``fixed`` (``client_instance_id``,
    ``client_id``) and its resource's and data point's attributes."""
    out: list[Series] = []
    for rm in data.resource_metrics:
        resource = {label_name(kv.key): _value(kv.value) for kv in rm.resource.attributes}
        base = {**resource, **fixed}
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                name = metric_name(m.name)
                if name.startswith(RESERVED_PREFIXES):
                    continue
                which = m.WhichOneof("data")
                if which == "gauge":
                    out.extend(Series(name, "gauge", _labels(base, p.attributes), _number(p))
                               for p in m.gauge.data_points)
                elif which == "sum":
                    s = m.sum
                    kind = "counter" if s.is_monotonic else "gauge"
                    delta = s.is_monotonic and s.aggregation_temporality == _DELTA
                    out.extend(Series(name, kind, _labels(base, p.attributes), _number(p), delta=delta)
                               for p in s.data_points)
                elif which == "histogram":
                    for p in m.histogram.data_points:
                        bounds = [*p.explicit_bounds, float("inf")]
                        counts = list(p.bucket_counts)
                        if len(counts) != len(bounds):
                            continue        # malformed: bounds and counts do not pair up
                        acc, buckets = 0.0, []
                        for b, c in zip(bounds, counts):
                            acc += c
                            buckets.append((b, acc))
                        out.append(Series(name, "histogram", _labels(base, p.attributes), count=float(p.count),
                                          sum=p.sum, buckets=tuple(buckets)))
                elif which == "summary":
                    out.extend(Series(name, "summary", _labels(base, p.attributes), count=float(p.count),
                                      sum=p.sum, quantiles=tuple((q.quantile, q.value)
                                                                 for q in p.quantile_values))
                               for p in m.summary.data_points)
    return out
