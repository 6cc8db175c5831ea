"""kafkalog: Apache Kafka's log storage engine in Python, byte-compatible with Kafka's on-disk files."""

__version__ = "0.1.0"
