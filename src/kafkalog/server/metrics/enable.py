"""Metrics on for a broker: its :class:`~.broker_metrics.BrokerMetrics` (``Broker.metrics``), the
storage figures of its data directory (:func:`kafkalog.cleaner.metrics.register_storage_metrics`),
the scrape-time collectors (:mod:`.collectors`) and the :class:`~.metered_server.MeteredServer` that
times its requests; and the clients' telemetry (KIP-714) received and re-exported
(:func:`kafkalog.server.metrics.telemetry_export.enable_client_telemetry`)."""

from __future__ import annotations

from typing import Any

from kafkalog.cleaner.metrics import register_storage_metrics
from kafkalog.server.broker import Broker
from kafkalog.server.metrics.broker_metrics import BrokerMetrics
from kafkalog.server.metrics.collectors import broker_families, lag_families, network_families
from kafkalog.server.metrics.loop_idle import IdleMeter
from kafkalog.server.metrics.metered_server import MeteredServer
from kafkalog.server.metrics.telemetry_export import enable_client_telemetry

__all__ = ["metered_server"]


def metered_server(broker: Broker, idle: IdleMeter | None = None, **server_args: Any) -> MeteredServer:
    """The server of ``broker`` with metrics on (``server_args`` as :class:`Server`'s): every
    figure registered in ``broker.metrics.registry``, which the endpoint serves."""
    metrics = BrokerMetrics()
    registry = metrics.registry
    register_storage_metrics(registry, broker.manager)
    registry.add_collector(lambda: broker_families(broker))
    registry.add_collector(lambda: lag_families(broker))
    server = MeteredServer(broker, metrics=metrics, **server_args)
    registry.add_collector(lambda: network_families(server, idle))
    broker.metrics = metrics
    enable_client_telemetry(broker, registry)
    return server
