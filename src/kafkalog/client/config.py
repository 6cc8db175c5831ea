"""Client configuration: Kafka's producer and consumer keys and defaults, taken as confluent-kafka takes
them (a dict of dotted keys, ``{"linger.ms": 5}``) and as kafka-python takes them (keyword arguments
with underscores, ``linger_ms=5``), so settings move between kafkalog and those clients intact.

Unknown keys are refused (a typo is an error, never a silently ignored option); keys that a broker
client needs but an embedded log has no use for (``bootstrap.servers``, ``client.id``, security
settings, ...) are accepted and have no effect, as listed in :data:`ACCEPTED_WITHOUT_EFFECT`.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

from kafkalog.errors import InvalidConfigError

__all__ = ["PRODUCER_DEFAULTS", "CONSUMER_DEFAULTS", "ACCEPTED_WITHOUT_EFFECT", "client_config"]

#: Kafka's producer configuration keys and defaults (ProducerConfig) that the embedded producer honours.
PRODUCER_DEFAULTS: Dict[str, Any] = {
    "acks": "all",
    "batch.size": 16384,
    "linger.ms": 5,
    "max.request.size": 1048576,
    "compression.type": "none",
    "compression.level": None,          # codec default (KIP-390: compression.<codec>.level)
    "enable.idempotence": True,
    "transactional.id": None,
    "transaction.timeout.ms": 60000,
    "partitioner.class": None,          # None: Kafka's built-in (murmur2 for keys, sticky without)
    "partitioner.ignore.keys": False,
    "delivery.timeout.ms": 120000,
    "max.block.ms": 60000,
    "buffer.memory": 33554432,
    "request.timeout.ms": 30000,
}

#: Kafka's consumer configuration keys and defaults (ConsumerConfig) that the embedded consumer honours.
CONSUMER_DEFAULTS: Dict[str, Any] = {
    "group.id": None,
    "enable.auto.commit": True,
    "auto.commit.interval.ms": 5000,
    "auto.offset.reset": "latest",
    "isolation.level": "read_uncommitted",
    "max.poll.records": 500,
    "fetch.max.bytes": 52428800,
    "max.partition.fetch.bytes": 1048576,
    "fetch.min.bytes": 1,
    "fetch.max.wait.ms": 500,
    "check.crcs": True,
    "key.deserializer": None,
    "value.deserializer": None,
    "client.rack": "",
    "exclude.internal.topics": True,
    "consumer.timeout.ms": None,        # kafka-python's: iteration ends after this long without data
}

#: Keys a network client needs that have no meaning for an embedded log: accepted, without effect.
ACCEPTED_WITHOUT_EFFECT = frozenset({
    "bootstrap.servers", "client.id", "security.protocol", "sasl.mechanism", "sasl.mechanisms",
    "sasl.username", "sasl.password", "ssl.ca.location", "retries", "retry.backoff.ms",
    "reconnect.backoff.ms", "metadata.max.age.ms", "socket.timeout.ms", "api.version.request",
    "session.timeout.ms", "heartbeat.interval.ms", "max.poll.interval.ms", "max.in.flight.requests.per.connection",
    "receive.buffer.bytes", "send.buffer.bytes", "connections.max.idle.ms",
})


def client_config(defaults: Mapping[str, Any], conf: Optional[Mapping[str, Any]] = None,
                  **kwargs: Any) -> Dict[str, Any]:
    """Kafka's defaults overlaid with ``conf`` (dotted keys) and then ``kwargs`` (underscored keys,
    ``linger_ms`` for ``linger.ms``). Returns a dict keyed by Kafka's dotted names, with every key of
    ``defaults``. An unknown key raises :class:`InvalidConfigError` naming it."""
    out = dict(defaults)
    given: Dict[str, Any] = {}
    for key, value in (conf or {}).items():
        if not isinstance(key, str):
            raise InvalidConfigError(f"configuration keys are strings, got {key!r}")
        given[key] = value
    for key, value in kwargs.items():
        given[key.replace("_", ".")] = value
    for key, value in given.items():
        if key in defaults:
            out[key] = value
        elif key not in ACCEPTED_WITHOUT_EFFECT:
            raise InvalidConfigError(f"unknown configuration {key!r}; known: {', '.join(sorted(defaults))}")
    return out
