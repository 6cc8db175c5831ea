"""The broker's Prometheus metrics (docs/server.md, "Metrics"): Kafka's MBeans under the names the
Prometheus JMX exporter's standard Kafka rules give them, in one
:class:`~kafkalog.log.metrics.MetricsRegistry` (``Broker.metrics.registry``) served by
:mod:`.endpoint`. :mod:`.broker_metrics` counts on the request path (BrokerTopicMetrics,
RequestMetrics); :mod:`.collectors` reads the broker's state at scrape time (partitions, groups,
transactions, consumer lag); :mod:`.metered_server` times each request and counts connections;
:mod:`.loop_idle` measures how idle the event loop is; :mod:`.enable` puts them together for
``kafkalog serve``."""
