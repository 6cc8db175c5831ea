"""The clients' pushed metrics (KIP-714) on the broker's metrics endpoint: :func:`enable_client_telemetry`
turns :mod:`.client_metrics` on (GetTelemetrySubscriptions and PushTelemetry then advertised in
ApiVersions, as Kafka advertises them with a telemetry plugin) and adds a collector to the metrics
registry that exposes each client instance's latest series, labelled ``client_instance_id`` and
``client_id``, plus the receiver's own figures (Kafka's ``client-metrics`` group:
``kafka_server_clientmetrics_instance_count``, pushes by error).

The collector runs on the scraper's thread: it reads copies (an instance's series are replaced
whole by each push, never changed in place). A name used by two kinds (a gauge here, a counter
there) is exposed as the kind seen first."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from kafkalog.log.metrics import Family, MetricsRegistry, Sample
from kafkalog.server.metrics.client_metrics import ERROR_NAMES, ClientMetricsConfig, ClientMetricsManager
from kafkalog.server.metrics.telemetry_payload import Series

if TYPE_CHECKING:
    from kafkalog.server.broker import Broker

#: GetTelemetrySubscriptions, PushTelemetry: advertised while the receiver is on
TELEMETRY_APIS = {71: (0, 0), 72: (0, 0)}


def enable_client_telemetry(broker: Broker, registry: MetricsRegistry) -> ClientMetricsManager:
    """Receive the clients' telemetry and re-export it through ``registry``."""
    manager = ClientMetricsManager(ClientMetricsConfig.from_values(broker.config.values))
    broker.client_metrics = manager
    broker.api_versions = {**broker.api_versions, **TELEMETRY_APIS}
    registry.add_collector(collector(manager))
    return manager


def _samples(s: Series, labels: dict[str, str]) -> tuple[str, list[Sample]]:
    """(family kind, samples) of one series."""
    if s.kind == "counter":
        return "counter", [Sample("_total", labels, s.value)]
    if s.kind == "gauge":
        return "gauge", [Sample("", labels, s.value)]
    if s.kind == "histogram":
        out = [Sample("_bucket", {**labels, "le": _le(b)}, c) for b, c in s.buckets]
        return "histogram", [*out, Sample("_count", labels, s.count), Sample("_sum", labels, s.sum)]
    out = [Sample("", {**labels, "quantile": repr(q)}, v) for q, v in s.quantiles]
    return "summary", [*out, Sample("_count", labels, s.count), Sample("_sum", labels, s.sum)]


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))


def collector(manager: ClientMetricsManager) -> Callable[[], list[Family]]:
    def collect() -> list[Family]:
        families: dict[str, Family] = {}
        for inst in list(manager.instances.values()):
            for s in list(inst.series.values()):
                name = s.name[:-len("_total")] if s.kind == "counter" and s.name.endswith("_total") else s.name
                kind, samples = _samples(s, dict(s.labels))
                fam = families.get(name)
                if fam is None:
                    fam = families[name] = Family(name, kind, f"client telemetry (KIP-714): {s.name}", [])
                elif fam.kind != kind:
                    continue
                fam.samples.extend(samples)
        families["kafka_server_clientmetrics_instance_count"] = Family(
            "kafka_server_clientmetrics_instance_count", "gauge",
            "The client instances whose telemetry the broker keeps (Kafka's client-metrics instance-count)",
            [Sample("", {}, float(len(manager.instances)))])
        families["kafkalog_client_telemetry_pushes"] = Family(
            "kafkalog_client_telemetry_pushes", "counter", "PushTelemetry requests by their error",
            [Sample("_total", {"error": ERROR_NAMES.get(code, str(code))}, float(n))
             for code, n in sorted(manager.outcomes.items())])
        families["kafkalog_client_telemetry_series"] = Family(
            "kafkalog_client_telemetry_series", "gauge", "The client telemetry series re-exported",
            [Sample("", {}, float(manager.series_count))])
        return list(families.values())
    return collect
