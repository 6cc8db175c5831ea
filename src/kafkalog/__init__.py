"""kafkalog: Apache Kafka's log storage engine in Python, byte-compatible with Kafka's on-disk files."""

__version__ = "0.1.0"

_CLIENT_NAMES = ("open", "DataLog", "Producer", "ConsumerRecord", "RecordMetadata", "ProduceResult")


def __getattr__(name: str):
    """Lazy re-exports of the Python API (:mod:`kafkalog.client`): ``kafkalog.open`` etc."""
    if name in _CLIENT_NAMES:
        from kafkalog import client
        return getattr(client, name)
    raise AttributeError(f"module 'kafkalog' has no attribute {name!r}")
