"""The HTTP endpoint Prometheus scrapes: ``prometheus_client``'s own server (the ``server`` extra) on
a thread of its own, serving a :class:`~kafkalog.log.metrics.MetricsRegistry` in Prometheus' text
format at any path (``/metrics``). A scrape runs the registry's collectors on that thread, never on
the event loop: serving metrics never delays a request."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlsplit

from kafkalog.errors import InvalidConfigError, KafkalogError
from kafkalog.log.metrics import MetricsRegistry, PrometheusCollector

__all__ = ["MetricsEndpoint", "parse_metrics_listener"]

KEY = "metrics.listener"


def parse_metrics_listener(value: str) -> tuple[str, int] | None:
    """``metrics.listener`` (``http://HOST:PORT``; port 0 picks a free one) as (host, port); None
    when empty (metrics off, the default)."""
    value = (value or "").strip()
    if not value:
        return None
    try:
        url = urlsplit(value)
        port = url.port
    except ValueError as e:
        raise InvalidConfigError(f"Invalid value {value!r} for configuration {KEY}: {e}") from None
    if url.scheme.lower() != "http" or port is None or url.hostname is None or url.path not in ("", "/"):
        raise InvalidConfigError(f"Invalid value {value!r} for configuration {KEY}: expected http://HOST:PORT "
                                 f"(e.g. http://127.0.0.1:9404; port 0 picks a free one)")
    return url.hostname, port


class MetricsEndpoint:
    """Serves ``registry`` over HTTP from :meth:`start` to :meth:`stop`."""

    def __init__(self, registry: MetricsRegistry) -> None:
        from prometheus_client import CollectorRegistry
        self.registry = registry
        self.prometheus = CollectorRegistry(auto_describe=False)
        self.prometheus.register(PrometheusCollector(registry))
        self._httpd: Any = None
        self.host, self.port = "", 0

    def start(self, host: str, port: int) -> tuple[str, int]:
        """Listen on ``host:port`` (0: a free port); returns the bound address."""
        from prometheus_client import start_http_server
        try:
            self._httpd, _thread = start_http_server(port, addr=host, registry=self.prometheus)
        except OSError as e:
            why = os.strerror(e.errno) if e.errno else str(e)
            raise KafkalogError(f"{KEY} http://{host}:{port}: cannot bind: {why}") from None
        self.host, self.port = host, self._httpd.server_port
        return self.host, self.port

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
