"""The API handlers (Kafka's ``KafkaApis``): one module per API group, each
``handler(broker, request) -> response`` over the broker's state (:mod:`kafkalog.server.broker`),
and the dispatch table that serves them (:mod:`.kafka_apis`)."""
