"""The broker's configuration: Kafka's broker keys and defaults for what ``kafkalog serve`` does
(listeners, topic auto-creation, request and connection limits), plus every storage key
:class:`~kafkalog.log.config.BrokerConfig` knows (``log.*``, ``message.max.bytes`` ...), which go to
the ``LogManager``. Unknown keys are refused, not ignored."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kafkalog.errors import InvalidConfigError
from kafkalog.log.config import (
    BOOLEAN,
    INT,
    LIST,
    LONG,
    STRING,
    BrokerConfig,
    ConfigDef,
    parse_value,
)

#: Broker keys the server itself uses, with Kafka's types and defaults.
SERVER_CONFIGS: dict[str, ConfigDef] = {c.name: c for c in [
    ConfigDef("listeners", LIST, [], None),
    ConfigDef("advertised.listeners", LIST, [], None),
    ConfigDef("num.partitions", INT, 1, None),
    ConfigDef("auto.create.topics.enable", BOOLEAN, True, None),
    ConfigDef("socket.request.max.bytes", INT, 100 * 1024 * 1024, None),
    ConfigDef("max.connections", INT, 2**31 - 1, None),
    ConfigDef("connections.max.idle.ms", LONG, 600000, None),
    ConfigDef("delete.topic.enable", BOOLEAN, True, None),
    ConfigDef("fetch.max.bytes", INT, 55 * 1024 * 1024, None),
    ConfigDef("max.incremental.fetch.session.cache.slots", INT, 1000, None),
    ConfigDef("cluster.id", STRING, "", None),
    ConfigDef("group.min.session.timeout.ms", INT, 6000, None),
    ConfigDef("group.max.session.timeout.ms", INT, 1800000, None),
    ConfigDef("group.initial.rebalance.delay.ms", INT, 3000, None),
    ConfigDef("group.max.size", INT, 2**31 - 1, None),
    ConfigDef("offsets.topic.num.partitions", INT, 50, None),
    ConfigDef("offset.metadata.max.bytes", INT, 4096, None),
]}


@dataclass(frozen=True)
class Listener:
    host: str
    port: int


def parse_listener(text: str, key: str) -> Listener:
    """``PLAINTEXT://host:port`` (only PLAINTEXT is served)."""
    name, sep, rest = text.partition("://")
    if not sep or name.upper() != "PLAINTEXT":
        raise InvalidConfigError(f"Invalid value {text!r} for configuration {key}: only PLAINTEXT://"
                                 f"host:port listeners are served")
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise InvalidConfigError(f"Invalid value {text!r} for configuration {key}: expected host:port")
    return Listener(host.strip("[]"), int(port))


class ServerConfig:
    """Server keys (attributes with ``_`` for ``.``) plus the storage keys as a ``BrokerConfig``."""

    def __init__(self, values: Mapping[str, Any] | None = None) -> None:
        values = dict(values or {})
        server: dict[str, Any] = {}
        storage: dict[str, Any] = {}
        for k, v in values.items():
            (server if k in SERVER_CONFIGS else storage)[k] = v
        # unknown keys are refused here (strict): an option is honoured or refused
        self.broker = BrokerConfig(storage, strict=True)
        resolved: dict[str, Any] = {}
        for k, d in SERVER_CONFIGS.items():
            raw = server.get(k)
            resolved[k] = parse_value(k, d.type, raw) if raw is not None else d.default
        self.values = resolved
        self.num_partitions: int = resolved["num.partitions"]
        if self.num_partitions < 1:
            raise InvalidConfigError(f"Invalid value {self.num_partitions} for configuration "
                                     f"num.partitions: must be at least 1")
        self.auto_create_topics_enable: bool = resolved["auto.create.topics.enable"]
        self.socket_request_max_bytes: int = resolved["socket.request.max.bytes"]
        if self.socket_request_max_bytes < 1:
            raise InvalidConfigError("socket.request.max.bytes must be at least 1")
        self.max_connections: int = resolved["max.connections"]
        if self.max_connections < 0:
            raise InvalidConfigError("max.connections must be at least 0")
        self.connections_max_idle_ms: int = resolved["connections.max.idle.ms"]
        self.delete_topic_enable: bool = resolved["delete.topic.enable"]
        self.fetch_max_bytes: int = resolved["fetch.max.bytes"]
        if self.fetch_max_bytes < 0:
            raise InvalidConfigError("fetch.max.bytes must be at least 0")
        self.max_incremental_fetch_session_cache_slots: int = \
            resolved["max.incremental.fetch.session.cache.slots"]
        if self.max_incremental_fetch_session_cache_slots < 0:
            raise InvalidConfigError("max.incremental.fetch.session.cache.slots must be at least 0")
        self.listeners: list[Listener] = [parse_listener(s, "listeners") for s in resolved["listeners"]]
        self.advertised_listeners: list[Listener] = [parse_listener(s, "advertised.listeners")
                                                     for s in resolved["advertised.listeners"]]
        node_id, broker_id = self.broker.get("node.id"), self.broker.get("broker.id")
        node = node_id if node_id >= 0 else broker_id
        self.node_id: int = max(node, 0)
        self.storage_values: dict[str, Any] = storage
        for key in ("group.min.session.timeout.ms", "group.max.session.timeout.ms", "group.max.size",
                    "offsets.topic.num.partitions"):
            if resolved[key] < 1:
                raise InvalidConfigError(f"Invalid value {resolved[key]} for configuration {key}: "
                                         f"must be at least 1")
        for key in ("group.initial.rebalance.delay.ms", "offset.metadata.max.bytes"):
            if resolved[key] < 0:
                raise InvalidConfigError(f"Invalid value {resolved[key]} for configuration {key}: "
                                         f"must be at least 0")

    def bind_address(self, host: str | None, port: int | None) -> tuple[str, int]:
        """The address to listen on: ``--host``/``--port`` win over ``listeners``; loopback and
        9092 by default."""
        lst = self.listeners[0] if self.listeners else Listener("127.0.0.1", 9092)
        return (host if host is not None else (lst.host or "127.0.0.1"),
                port if port is not None else lst.port)

    def advertised(self, bound_host: str, bound_port: int) -> Listener:
        """What Metadata tells clients to connect to."""
        if self.advertised_listeners:
            a = self.advertised_listeners[0]
            return Listener(a.host or bound_host, a.port or bound_port)
        host = bound_host if bound_host not in ("0.0.0.0", "::", "") else "127.0.0.1"
        return Listener(host, bound_port)
