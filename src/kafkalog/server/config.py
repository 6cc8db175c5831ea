"""The broker's configuration: Kafka's broker keys and defaults for what ``kafkalog serve`` does
(listeners and their security protocols, TLS, SASL, topic auto-creation, request and connection
limits), plus every storage key
:class:`~kafkalog.log.config.BrokerConfig` knows (``log.*``, ``message.max.bytes`` ...), which go to
the ``LogManager``. Unknown keys are refused, not ignored."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from kafkalog.errors import InvalidConfigError
from kafkalog.log.config import (
    BOOLEAN,
    INT,
    LIST,
    LONG,
    SHORT,
    STRING,
    BrokerConfig,
    ConfigDef,
    at_least,
    between,
    one_of,
    parse_value,
)
from kafkalog.record.constants import INT32_MAX


def _session_keys(p: str) -> list[ConfigDef]:
    """A modern group protocol's session and heartbeat keys (``p``: ``group.consumer.``,
    ``group.streams.``, ``group.share.``): Kafka gives the three protocols the same defaults."""
    return [ConfigDef(p + "session.timeout.ms", INT, 45000, at_least(1)),
            ConfigDef(p + "min.session.timeout.ms", INT, 45000, at_least(1)),
            ConfigDef(p + "max.session.timeout.ms", INT, 60000, at_least(1)),
            ConfigDef(p + "heartbeat.interval.ms", INT, 5000, at_least(1)),
            ConfigDef(p + "min.heartbeat.interval.ms", INT, 5000, at_least(1)),
            ConfigDef(p + "max.heartbeat.interval.ms", INT, 15000, at_least(1))]


#: Broker keys the server itself uses, with Kafka's types and defaults.
SERVER_CONFIGS: dict[str, ConfigDef] = {c.name: c for c in [
    ConfigDef("listeners", LIST, [], None),
    ConfigDef("advertised.listeners", LIST, [], None),
    ConfigDef("num.partitions", INT, 1, None),
    ConfigDef("auto.create.topics.enable", BOOLEAN, True, None),
    ConfigDef("socket.request.max.bytes", INT, 100 * 1024 * 1024, None),
    ConfigDef("max.connections", INT, INT32_MAX, None),
    ConfigDef("max.connections.per.ip", INT, INT32_MAX, at_least(0)),
    ConfigDef("max.connections.per.ip.overrides", STRING, "", None),
    ConfigDef("max.connection.creation.rate", INT, INT32_MAX, at_least(0)),
    ConfigDef("connections.max.idle.ms", LONG, 600000, None),
    ConfigDef("queued.max.requests", INT, 500, None),
    ConfigDef("quota.window.num", INT, 11, None),
    ConfigDef("quota.window.size.seconds", INT, 1, None),
    ConfigDef("delete.topic.enable", BOOLEAN, True, None),
    ConfigDef("fetch.max.bytes", INT, 55 * 1024 * 1024, None),
    ConfigDef("max.incremental.fetch.session.cache.slots", INT, 1000, None),
    ConfigDef("cluster.id", STRING, "", None),
    ConfigDef("group.min.session.timeout.ms", INT, 6000, None),
    ConfigDef("group.max.session.timeout.ms", INT, 1800000, None),
    ConfigDef("group.initial.rebalance.delay.ms", INT, 3000, None),
    ConfigDef("group.max.size", INT, INT32_MAX, None),
    ConfigDef("offset.metadata.max.bytes", INT, 4096, None),
    # --- replication of a one-node cluster: Kafka's keys every quick-start and CI config sets. One
    # replica always; a factor above 1 fails where Kafka fails, when the internal topic would be
    # created (FindCoordinator, :func:`internal_topic_unavailable`). The defaults are a one-node
    # cluster's, where Kafka's are 3 and 2 (docs/kafka-compatibility.md)
    ConfigDef("default.replication.factor", INT, 1, None),
    ConfigDef("offsets.topic.replication.factor", SHORT, 1, at_least(1)),
    ConfigDef("transaction.state.log.replication.factor", SHORT, 1, at_least(1)),
    ConfigDef("transaction.state.log.min.isr", INT, 1, at_least(1)),
    ConfigDef("share.coordinator.state.topic.replication.factor", SHORT, 1, at_least(1)),
    ConfigDef("share.coordinator.state.topic.min.isr", SHORT, 1, at_least(1)),
    # the node's rack (Metadata, DescribeCluster) and the preferred read replica's selector: with one
    # replica, Kafka's selectors (:data:`REPLICA_SELECTORS`) both choose the leader
    ConfigDef("broker.rack", STRING, None, None),
    ConfigDef("replica.selector.class", STRING, None, None),
    # the group protocols served besides classic (Kafka 4.4's GroupCoordinatorConfig; share groups
    # follow share.version only): :data:`REBALANCE_PROTOCOLS`, checked in :class:`ServerConfig`
    ConfigDef("group.coordinator.rebalance.protocols", LIST, ["classic", "consumer", "streams"], None),
    # --- the consumer group protocol (KIP-848): Kafka's GroupCoordinatorConfig keys and defaults ---
    *_session_keys("group.consumer."),
    ConfigDef("group.consumer.max.size", INT, INT32_MAX, at_least(1)),
    ConfigDef("group.consumer.assignors", LIST, ["uniform", "range"], None),
    ConfigDef("group.consumer.migration.policy", STRING, "bidirectional", None),
    ConfigDef("group.consumer.assignment.interval.ms", INT, 1000, at_least(0)),
    ConfigDef("group.consumer.min.assignment.interval.ms", INT, 0, at_least(0)),
    ConfigDef("group.consumer.max.assignment.interval.ms", INT, 15000, at_least(0)),
    # --- streams groups (KIP-1071): Kafka's GroupCoordinatorConfig keys and defaults ---
    *_session_keys("group.streams."),
    ConfigDef("group.streams.max.size", INT, INT32_MAX, at_least(1)),
    ConfigDef("group.streams.num.standby.replicas", INT, 0, at_least(0)),
    ConfigDef("group.streams.max.standby.replicas", INT, 2, at_least(0)),
    ConfigDef("group.streams.initial.rebalance.delay.ms", INT, 3000, at_least(0)),
    ConfigDef("group.streams.assignment.interval.ms", INT, 1000, at_least(0)),
    ConfigDef("group.streams.min.assignment.interval.ms", INT, 0, at_least(0)),
    ConfigDef("group.streams.max.assignment.interval.ms", INT, 15000, at_least(0)),
    ConfigDef("group.streams.rack.aware.assignment.tags", LIST, [], None),
    # internal in Kafka: the task offsets' interval and the lag a member may have to take a task
    ConfigDef("group.streams.task.offset.interval.ms", INT, 60000, at_least(1)),
    ConfigDef("group.streams.min.task.offset.interval.ms", INT, 15000, at_least(1)),
    ConfigDef("group.streams.acceptable.recovery.lag", LONG, 10000, at_least(0)),
    # internal in Kafka; the assignor runs on the event loop here, so offloading has no effect
    ConfigDef("group.consumer.assignor.offload.enable", BOOLEAN, True, None),
    ConfigDef("group.consumer.regex.refresh.interval.ms", INT, 600000, at_least(10000)),
    # --- share groups (KIP-932): Kafka's GroupCoordinatorConfig / ShareGroupConfig keys and defaults ---
    *_session_keys("group.share."),
    ConfigDef("group.share.max.size", INT, 200, at_least(1)),
    ConfigDef("group.share.assignors", LIST, ["simple"], None),
    ConfigDef("group.share.assignment.interval.ms", INT, 1000, at_least(0)),
    ConfigDef("group.share.min.assignment.interval.ms", INT, 0, at_least(0)),
    ConfigDef("group.share.max.assignment.interval.ms", INT, 15000, at_least(0)),
    ConfigDef("group.share.record.lock.duration.ms", INT, 30000, at_least(1000)),
    ConfigDef("group.share.min.record.lock.duration.ms", INT, 15000, at_least(1000)),
    ConfigDef("group.share.max.record.lock.duration.ms", INT, 60000, at_least(1000)),
    ConfigDef("group.share.delivery.count.limit", INT, 5, at_least(2)),
    ConfigDef("group.share.min.delivery.count.limit", INT, 2, at_least(2)),
    ConfigDef("group.share.max.delivery.count.limit", INT, 10, at_least(2)),
    ConfigDef("group.share.partition.max.record.locks", INT, 2000, at_least(100)),
    ConfigDef("group.share.min.partition.max.record.locks", INT, 100, at_least(100)),
    ConfigDef("group.share.max.partition.max.record.locks", INT, 4000, at_least(100)),
    ConfigDef("group.share.max.share.sessions", INT, 2000, at_least(1)),
    ConfigDef("share.coordinator.state.topic.num.partitions", INT, 50, at_least(1)),
    ConfigDef("share.coordinator.snapshot.update.records.per.snapshot", INT, 500, at_least(0)),
    # --- client telemetry (KIP-714), while the metrics endpoint is on (docs/server.md): Kafka's
    # telemetry.max.bytes; kafkalog's one subscription (Kafka's metrics / interval.ms of a
    # client-metrics resource) and its bounds (Kafka's 60 s instance cache expiry)
    ConfigDef("telemetry.max.bytes", INT, 1048576, at_least(1)),
    ConfigDef("client.metrics.subscription.metrics", LIST, ["org.apache.kafka."], None),
    ConfigDef("client.metrics.subscription.interval.ms", INT, 300000, between(100, 3600000)),
    ConfigDef("client.metrics.cache.expiry.ms", INT, 60000, at_least(1)),
    ConfigDef("client.metrics.max.series", INT, 100000, at_least(0)),
    # --- security (docs/server.md "TLS and SASL") ---
    ConfigDef("listener.security.protocol.map", LIST,
              ["PLAINTEXT:PLAINTEXT", "SSL:SSL", "SASL_PLAINTEXT:SASL_PLAINTEXT", "SASL_SSL:SASL_SSL"],
              None),
    ConfigDef("ssl.keystore.type", STRING, "JKS", one_of("JKS", "PKCS12", "PEM")),
    ConfigDef("ssl.keystore.location", STRING, None, None),
    ConfigDef("ssl.keystore.password", STRING, None, None),
    ConfigDef("ssl.keystore.certificate.chain", STRING, None, None),
    ConfigDef("ssl.keystore.key", STRING, None, None),
    ConfigDef("ssl.key.password", STRING, None, None),
    ConfigDef("ssl.truststore.type", STRING, "JKS", one_of("JKS", "PKCS12", "PEM")),
    ConfigDef("ssl.truststore.location", STRING, None, None),
    ConfigDef("ssl.truststore.password", STRING, None, None),
    ConfigDef("ssl.truststore.certificates", STRING, None, None),
    ConfigDef("ssl.client.auth", STRING, "none", one_of("none", "requested", "required")),
    ConfigDef("ssl.enabled.protocols", LIST, ["TLSv1.2", "TLSv1.3"], None),
    ConfigDef("sasl.enabled.mechanisms", LIST, ["GSSAPI"], None),
    ConfigDef("sasl.server.max.receive.size", INT, 524288, None),
    ConfigDef("connection.failed.authentication.delay.ms", INT, 100, None),
    ConfigDef("connections.max.reauth.ms", LONG, 0, None),
    #: kafkalog's own key (Kafka takes users from JAAS and the metadata log): docs/server.md
    ConfigDef("sasl.credentials.file", STRING, None, None),
    # --- authorization (Kafka's StandardAuthorizer; kafkalog.server.security.authorizer) ---
    ConfigDef("authorizer.class.name", STRING, "", None),
    ConfigDef("super.users", STRING, None, None),
    ConfigDef("allow.everyone.if.no.acl.found", BOOLEAN, False, None),
    ConfigDef("ssl.principal.mapping.rules", STRING, "DEFAULT", None),
    #: kafkalog's own key (Kafka exports JMX): the Prometheus endpoint, http://HOST:PORT, off when empty
    ConfigDef("metrics.listener", STRING, "", None),
]}

#: the SASL/OAUTHBEARER keys, listener-prefixed or not: :mod:`kafkalog.server.security.oauthbearer_config` reads
#: (and checks) them, DescribeConfigs does not list them
OAUTHBEARER_KEY = re.compile(r"(?:listener\.name\.[^.]+\.(?:oauthbearer\.)?)?sasl\.oauthbearer\..+"
                             r"|listener\.name\.[^.]+\.oauthbearer\.sasl\.(?:jaas\.config|server\.callback\.handler\.class)"
                             r"|org\.apache\.kafka\.sasl\.oauthbearer\.allowed\.urls")
#: the listener-prefixed connection keys (Kafka's ``listener.name.<listener>.`` prefix, and for
#: ``connections.max.reauth.ms`` also the SASL mechanism in lower case): kept as given in
#: :attr:`ServerConfig.listener_values`, read by the SASL configuration and the connection quotas
LISTENER_KEY = re.compile(r"listener\.name\.(?P<listener>[^.]+)\.(?:(?P<mechanism>[a-z0-9-]+)\.)?"
                          r"(?P<key>connections\.max\.reauth\.ms)"
                          r"|listener\.name\.(?P<l2>[^.]+)\.(?P<k2>max\.connections|max\.connection\.creation\.rate)")

#: the values of ``group.coordinator.rebalance.protocols`` (Kafka's ``Group.GroupType``, in its order)
REBALANCE_PROTOCOLS = ("consumer", "classic", "share", "streams")

#: the security protocols of Kafka's ``SecurityProtocol``
PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL = "PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"
SECURITY_PROTOCOLS = (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)


@dataclass(frozen=True)
class Listener:
    """One endpoint: ``NAME://host:port`` and the security protocol its name maps to."""
    host: str
    port: int
    name: str = PLAINTEXT
    protocol: str = PLAINTEXT

    @property
    def tls(self) -> bool:
        return self.protocol in (SSL, SASL_SSL)

    @property
    def sasl(self) -> bool:
        return self.protocol in (SASL_PLAINTEXT, SASL_SSL)


def parse_protocol_map(entries: list[str]) -> dict[str, str]:
    """``listener.security.protocol.map``: ``NAME:PROTOCOL`` pairs."""
    out: dict[str, str] = {}
    for e in entries:
        name, sep, proto = e.partition(":")
        name, proto = name.strip().upper(), proto.strip().upper()
        if not sep or not name or proto not in SECURITY_PROTOCOLS:
            raise InvalidConfigError(f"Invalid value {e!r} for configuration "
                                     f"listener.security.protocol.map: expected NAME:PROTOCOL with "
                                     f"PROTOCOL one of {', '.join(SECURITY_PROTOCOLS)}")
        if name in out:
            raise InvalidConfigError(f"listener.security.protocol.map: listener name {name} twice")
        out[name] = proto
    return out


def parse_listener(text: str, key: str,
                   protocols: dict[str, str] | None = None) -> Listener:
    """``NAME://host:port``, NAME a key of ``listener.security.protocol.map``."""
    protocols = protocols if protocols is not None else parse_protocol_map(
        SERVER_CONFIGS["listener.security.protocol.map"].default)
    name, sep, rest = text.partition("://")
    name = name.strip().upper()
    if not sep or name not in protocols:
        raise InvalidConfigError(f"Invalid value {text!r} for configuration {key}: expected NAME://"
                                 f"host:port with NAME in listener.security.protocol.map "
                                 f"({', '.join(sorted(protocols))})")
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise InvalidConfigError(f"Invalid value {text!r} for configuration {key}: expected host:port")
    return Listener(host.strip("[]"), int(port), name, protocols[name])


def _per_ip_overrides(text: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: ``address:count`` pairs, comma-separated (Kafka's
    ``getMap``). kafkalog takes IP addresses only: resolving a host name would block the event loop."""
    out: dict[str, int] = {}
    key = "max.connections.per.ip.overrides"
    for entry in (e.strip() for e in (text or "").split(",")):
        if not entry:
            continue
        host, sep, count = entry.rpartition(":")
        host = host.strip().strip("[]")
        try:
            address = str(ipaddress.ip_address(host))
            n = int(count.strip())
        except ValueError:
            raise InvalidConfigError(f"Invalid value {text!r} for configuration {key}: expected "
                                     f"IP:count pairs (kafkalog does not resolve host names), got {entry!r}") from None
        if not sep:
            raise InvalidConfigError(f"Invalid value {text!r} for configuration {key}: {entry!r} has no count")
        out[address] = n
    return out


def _at_least(values: dict[str, Any], key: str, minimum: int) -> int:
    """The value of ``key``, refused below ``minimum``."""
    value: int = values[key]
    if value < minimum:
        raise InvalidConfigError(f"{key} must be at least {minimum}")
    return value


def _refuse_below(values: dict[str, Any], keys: tuple[str, ...], minimum: int, must: str = "Value must") -> None:
    """Refuse the first of ``keys`` whose value is below ``minimum``, in Kafka's words
    ("Invalid value ... for configuration ...: Value must be at least ...")."""
    for key in keys:
        if values[key] < minimum:
            raise InvalidConfigError(f"Invalid value {values[key]} for configuration {key}: "
                                     f"{must} be at least {minimum}")


class ServerConfig:
    """Server keys (attributes with ``_`` for ``.``) plus the storage keys as a ``BrokerConfig``."""

    def __init__(self, values: Mapping[str, Any] | None = None) -> None:
        values = dict(values or {})
        #: the OAUTHBEARER keys as given (:data:`OAUTHBEARER_KEY`)
        self.oauth_values: dict[str, str] = {k: str(values.pop(k)) for k in list(values)
                                             if OAUTHBEARER_KEY.fullmatch(k) and values[k] is not None}
        #: the listener-prefixed connection keys (:data:`LISTENER_KEY`): (listener, mechanism or None,
        #: key) -> value
        self.listener_values: dict[tuple[str, str | None, str], int] = {}
        for k in [k for k in values if LISTENER_KEY.fullmatch(k) and values[k] is not None]:
            m = LISTENER_KEY.fullmatch(k)
            assert m is not None
            raw = values.pop(k)
            name = (m["listener"] or m["l2"]).upper()
            key = m["key"] or m["k2"]
            try:
                value = int(str(raw).strip())
            except ValueError:
                raise InvalidConfigError(f"Invalid value {raw!r} for configuration {k}: Not a number of "
                                         f"type {'LONG' if m['key'] else 'INT'}") from None
            if m["k2"] and value < 0:
                raise InvalidConfigError(f"Invalid value {raw!r} for configuration {k}: Value must be at "
                                         f"least 0")
            self.listener_values[(name, m["mechanism"], key)] = value
        server: dict[str, Any] = {}
        storage: dict[str, Any] = {}
        for k, v in values.items():
            (server if k in SERVER_CONFIGS else storage)[k] = v
        # unknown keys are refused here (strict): an option is honoured or refused
        self.broker = BrokerConfig(storage, strict=True)
        #: the server keys given (DescribeConfigs: STATIC_BROKER_CONFIG, the others DEFAULT_CONFIG)
        self.explicit = frozenset(k for k, v in server.items() if v is not None)
        resolved: dict[str, Any] = {}
        for k, d in SERVER_CONFIGS.items():
            raw = server.get(k)
            resolved[k] = parse_value(k, d.type, raw) if raw is not None else d.default
            if raw is not None and d.validator is not None:
                try:
                    d.validator(resolved[k])
                except ValueError as e:
                    raise InvalidConfigError(f"Invalid value {raw!r} for configuration {k}: {e}") \
                        from None
        self.values = resolved
        _refuse_below(resolved, ("num.partitions",), 1, "must")
        self.num_partitions: int = resolved["num.partitions"]
        self.auto_create_topics_enable: bool = resolved["auto.create.topics.enable"]
        self.socket_request_max_bytes: int = _at_least(resolved, "socket.request.max.bytes", 1)
        self.max_connections: int = _at_least(resolved, "max.connections", 0)
        self.connections_max_idle_ms: int = resolved["connections.max.idle.ms"]
        #: ``max.connections.per.ip.overrides``: IP address -> its maximum (names are not resolved)
        self.max_connections_per_ip_overrides = _per_ip_overrides(resolved["max.connections.per.ip.overrides"])
        if resolved["max.connections.per.ip"] == 0 and not self.max_connections_per_ip_overrides:
            raise InvalidConfigError("requirement failed: max.connections.per.ip can be set to zero only if "
                                     "max.connections.per.ip.overrides property is set.")
        _refuse_below(resolved, ("queued.max.requests", "quota.window.num", "quota.window.size.seconds"), 1)
        self.delete_topic_enable: bool = resolved["delete.topic.enable"]
        self.fetch_max_bytes: int = _at_least(resolved, "fetch.max.bytes", 0)
        self.max_incremental_fetch_session_cache_slots: int = \
            _at_least(resolved, "max.incremental.fetch.session.cache.slots", 0)
        self.protocol_map = parse_protocol_map(resolved["listener.security.protocol.map"])
        self.listeners: list[Listener] = [parse_listener(s, "listeners", self.protocol_map)
                                          for s in resolved["listeners"]]
        self.advertised_listeners: list[Listener] = [
            parse_listener(s, "advertised.listeners", self.protocol_map)
            for s in resolved["advertised.listeners"]]
        _check_listeners(self.listeners, self.advertised_listeners)
        node_id, broker_id = self.broker.get("node.id"), self.broker.get("broker.id")
        node = node_id if node_id >= 0 else broker_id
        self.node_id: int = max(node, 0)
        self.storage_values: dict[str, Any] = storage
        _refuse_below(resolved, ("group.min.session.timeout.ms", "group.max.session.timeout.ms", "group.max.size"),
                      1, "must")
        _refuse_below(resolved, ("group.initial.rebalance.delay.ms", "offset.metadata.max.bytes"), 0, "must")
        #: ``group.coordinator.rebalance.protocols``: ConsumerGroup*/StreamsGroup* requests are answered
        #: UNSUPPORTED_VERSION without ``consumer``/``streams`` (:mod:`kafkalog.server.handlers.feature_gates`)
        self.rebalance_protocols = _rebalance_protocols(resolved["group.coordinator.rebalance.protocols"])
        #: the consumer group protocol's settings (a ``ConsumerGroupConfig``)
        self.consumer_group = _consumer_group_config(resolved)
        #: share groups' settings (a ``ShareGroupBrokerConfig``)
        self.share_group = _share_group_config(resolved)
        #: streams groups' settings (a ``StreamsGroupConfig``)
        self.streams_group = _streams_group_config(resolved)
        #: the consumer and streams group keys' defaults and bounds for per-group configs (a ``GroupBounds``)
        self.group_bounds = _group_bounds(resolved)
        #: ``broker.rack``: the node's rack in Metadata and DescribeCluster (None: no rack)
        self.rack: str | None = resolved["broker.rack"]
        selector = resolved["replica.selector.class"]
        _require(selector is None or selector in REPLICA_SELECTORS,
                 f"Invalid value {selector} for configuration replica.selector.class: Class {selector} "
                 f"could not be found (kafkalog takes Kafka's own: {', '.join(REPLICA_SELECTORS)})")

    def bind_address(self, host: str | None, port: int | None) -> tuple[str, int]:
        """The address of the first listener: ``--host``/``--port`` win over ``listeners``;
        loopback and 9092 by default."""
        first = self.bind_listeners(host, port)[0]
        return first.host, first.port

    def bind_listeners(self, host: str | None, port: int | None) -> list[Listener]:
        """Every listener to bind; ``--host``/``--port`` replace the first one's address."""
        listeners = list(self.listeners) or [Listener("127.0.0.1", 9092)]
        first = listeners[0]
        listeners[0] = Listener(host if host is not None else (first.host or "127.0.0.1"),
                                port if port is not None else first.port, first.name, first.protocol)
        return [Listener(lst.host or "127.0.0.1", lst.port, lst.name, lst.protocol)
                for lst in listeners]

    def advertised(self, bound_host: str, bound_port: int, name: str = PLAINTEXT) -> Listener:
        """What Metadata tells a client connected on listener ``name`` (bound at
        ``bound_host:bound_port``) to connect to: its ``advertised.listeners`` entry, else the
        bound address (loopback for a wildcard)."""
        for a in self.advertised_listeners:
            if a.name == name:
                return Listener(a.host or bound_host, a.port or bound_port, a.name, a.protocol)
        if not self.listeners and self.advertised_listeners:    # legacy: one unnamed listener
            a = self.advertised_listeners[0]
            return Listener(a.host or bound_host, a.port or bound_port, name, a.protocol)
        host = bound_host if bound_host not in ("0.0.0.0", "::", "") else "127.0.0.1"
        return Listener(host, bound_port, name, self.protocol_map.get(name, PLAINTEXT))


#: the ``ReplicaSelector`` classes of Kafka's clients jar: on one replica each selects the leader, so a
#: Fetch's preferred read replica is always -1 (none), as Kafka's one-node broker answers
REPLICA_SELECTORS = ("org.apache.kafka.common.replica.RackAwareReplicaSelector",
                     "org.apache.kafka.common.replica.LeaderSelector")

#: Kafka's ``ConsumerGroupMigrationPolicy`` values (matched case-insensitively)
MIGRATION_POLICIES = ("disabled", "upgrade", "downgrade", "bidirectional")


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise InvalidConfigError(message)


def _rebalance_protocols(values: list[str]) -> frozenset[str]:
    """``group.coordinator.rebalance.protocols`` checked as Kafka 4.4 checks it (its messages)."""
    key = "group.coordinator.rebalance.protocols"
    names = [v.strip() for v in values if v.strip()]
    _require(bool(names), f"Configuration '{key}' must not be empty. Valid values include: "
                          f"[{', '.join(REBALANCE_PROTOCOLS)}]")
    for name in names:
        _require(name in REBALANCE_PROTOCOLS, f"Invalid value {name} for configuration {key}: String must be one "
                                              f"of: {', '.join(REBALANCE_PROTOCOLS)}")
    _require("classic" in names, "Disabling the 'classic' protocol is not supported.")
    return frozenset(names)


def _group_timeouts(v: dict[str, Any], p: str) -> tuple[int, int]:
    """The heartbeat interval and session timeout of ``p`` (``group.consumer.``,
    ``group.streams.``) checked against their bounds as Kafka's ``GroupCoordinatorConfig`` does."""
    hb, hb_min, hb_max = (v[p + "heartbeat.interval.ms"], v[p + "min.heartbeat.interval.ms"],
                          v[p + "max.heartbeat.interval.ms"])
    st, st_min, st_max = (v[p + "session.timeout.ms"], v[p + "min.session.timeout.ms"],
                          v[p + "max.session.timeout.ms"])
    ge, le, lt = "must be greater than or equal to", "must be less than or equal to", "must be less than"
    _require(hb_max >= hb_min, f"{p}max.heartbeat.interval.ms {ge} {p}min.heartbeat.interval.ms")
    _require(hb >= hb_min, f"{p}heartbeat.interval.ms {ge} {p}min.heartbeat.interval.ms")
    _require(hb <= hb_max, f"{p}heartbeat.interval.ms {le} {p}max.heartbeat.interval.ms")
    _require(st_max >= st_min, f"{p}max.session.timeout.ms {ge} {p}min.session.timeout.ms")
    _require(st >= st_min, f"{p}session.timeout.ms {ge} {p}min.session.timeout.ms")
    _require(st <= st_max, f"{p}session.timeout.ms {le} {p}max.session.timeout.ms")
    _require(hb < st, f"{p}heartbeat.interval.ms {lt} {p}session.timeout.ms")
    return hb, st


def _assignment_interval(v: dict[str, Any], p: str) -> int:
    """``p``'s assignment interval (``group.consumer.``, ``group.streams.``) checked against its bounds."""
    ai, ai_min, ai_max = (v[p + "assignment.interval.ms"], v[p + "min.assignment.interval.ms"],
                          v[p + "max.assignment.interval.ms"])
    ge, le = "must be greater than or equal to", "must be less than or equal to"
    _require(ai_max >= ai_min, f"{p}max.assignment.interval.ms {ge} {p}min.assignment.interval.ms")
    _require(ai >= ai_min, f"{p}assignment.interval.ms {ge} {p}min.assignment.interval.ms")
    _require(ai <= ai_max, f"{p}assignment.interval.ms {le} {p}max.assignment.interval.ms")
    return ai


def _streams_group_config(v: dict[str, Any]) -> Any:
    """The ``group.streams.*`` settings, checked as Kafka checks them."""
    from kafkalog.server.coordinator.streams_group import StreamsGroupConfig
    hb, st = _group_timeouts(v, "group.streams.")
    _assignment_interval(v, "group.streams.")
    _require(v["group.streams.task.offset.interval.ms"] >= v["group.streams.min.task.offset.interval.ms"],
             "group.streams.task.offset.interval.ms must be greater than or equal to "
             "group.streams.min.task.offset.interval.ms")
    tags = [t.strip() for t in v["group.streams.rack.aware.assignment.tags"] if t.strip()]
    _require(len(set(tags)) == len(tags),
             "group.streams.rack.aware.assignment.tags must not contain duplicate tag keys.")
    return StreamsGroupConfig(
        session_timeout_ms=st, heartbeat_interval_ms=hb, max_size=v["group.streams.max.size"],
        num_standby_replicas=v["group.streams.num.standby.replicas"],
        initial_rebalance_delay_ms=v["group.streams.initial.rebalance.delay.ms"],
        assignment_interval_ms=v["group.streams.assignment.interval.ms"],
        task_offset_interval_ms=v["group.streams.task.offset.interval.ms"],
        acceptable_recovery_lag=v["group.streams.acceptable.recovery.lag"],
        rack_aware_assignment_tags=tuple(tags))


def _consumer_group_config(v: dict[str, Any]) -> Any:
    """The ``group.consumer.*`` settings checked as Kafka's ``GroupCoordinatorConfig`` checks them."""
    from kafkalog.server.coordinator.assignors import BUILTIN_ASSIGNORS
    from kafkalog.server.coordinator.consumer_group import ConsumerGroupConfig

    require = _require
    p = "group.consumer."
    hb, st = _group_timeouts(v, p)
    ai = _assignment_interval(v, p)
    assignors = [a.strip() for a in v[p + "assignors"]]
    for a in assignors:
        if a not in BUILTIN_ASSIGNORS:
            raise InvalidConfigError(f"Invalid value {a} for configuration {p}assignors: Class cannot be found "
                                     f"(the built-in assignors are {', '.join(BUILTIN_ASSIGNORS)}; custom "
                                     f"assignor classes need a JVM)")
    require(len(set(assignors)) == len(assignors),
            f"Invalid value {','.join(assignors)} for configuration {p}assignors: duplicate values")
    require(bool(assignors), f"Invalid value for configuration {p}assignors: Empty list")
    policy = str(v[p + "migration.policy"]).strip().lower()
    require(policy in MIGRATION_POLICIES, f"Invalid value {v[p + 'migration.policy']} for configuration "
                                          f"{p}migration.policy: String must be one of (case insensitive): "
                                          f"{', '.join(p.upper() for p in MIGRATION_POLICIES)}")
    return ConsumerGroupConfig(session_timeout_ms=st, heartbeat_interval_ms=hb, max_size=v[p + "max.size"],
                               assignors=tuple(assignors), migration_policy=policy, assignment_interval_ms=ai,
                               regex_refresh_interval_ms=v[p + "regex.refresh.interval.ms"],
                               classic_max_size=v["group.max.size"])


def _share_group_config(v: dict[str, Any]) -> Any:
    """The ``group.share.*`` settings checked as Kafka's ``GroupCoordinatorConfig`` and
    ``ShareGroupConfig`` check them (each default between its minimum and maximum)."""
    from kafkalog.coordinator.group_config import ShareGroupBrokerConfig
    p = "group.share."
    for name in ("session.timeout.ms", "heartbeat.interval.ms", "assignment.interval.ms", "record.lock.duration.ms",
                 "delivery.count.limit", "partition.max.record.locks"):
        value, lo, hi = v[p + name], v[p + "min." + name], v[p + "max." + name]
        if hi < lo:
            raise InvalidConfigError(f"{p}max.{name} must be greater than or equal to {p}min.{name}")
        if value < lo:
            raise InvalidConfigError(f"{p}{name} must be greater than or equal to {p}min.{name}")
        if value > hi:
            raise InvalidConfigError(f"{p}{name} must be less than or equal to {p}max.{name}")
    if v[p + "heartbeat.interval.ms"] >= v[p + "session.timeout.ms"]:
        raise InvalidConfigError(f"{p}heartbeat.interval.ms must be less than {p}session.timeout.ms")
    assignors = [a.strip() for a in v[p + "assignors"]]
    if assignors != ["simple"]:
        raise InvalidConfigError(f"Invalid value {','.join(assignors)} for configuration {p}assignors: the "
                                 f"built-in share group assignor is simple (custom assignor classes need a JVM)")
    # each setting's field is its key below group.share. (min_session_timeout_ms: group.share.min.session.timeout.ms)
    return ShareGroupBrokerConfig(**{f.name: v[p + f.name.replace("_", ".")] for f in fields(ShareGroupBrokerConfig)})


def _group_bounds(v: dict[str, Any]) -> Any:
    """The broker's ``group.consumer.*`` / ``group.streams.*`` default, minimum and maximum of each
    per-group config key Kafka's ``GroupConfig`` checks against them (already validated)."""
    from kafkalog.coordinator.group_config import GroupBounds

    def bounds(p: str, name: str) -> tuple[int, int, int]:
        return v[p + name], v[p + "min." + name], v[p + "max." + name]
    return GroupBounds(
        consumer_session_timeout_ms=bounds("group.consumer.", "session.timeout.ms"),
        consumer_heartbeat_interval_ms=bounds("group.consumer.", "heartbeat.interval.ms"),
        streams_session_timeout_ms=bounds("group.streams.", "session.timeout.ms"),
        streams_heartbeat_interval_ms=bounds("group.streams.", "heartbeat.interval.ms"),
        streams_num_standby_replicas=(v["group.streams.num.standby.replicas"], 0,
                                      v["group.streams.max.standby.replicas"]),
        consumer_assignment_interval_ms=bounds("group.consumer.", "assignment.interval.ms"),
        streams_assignment_interval_ms=bounds("group.streams.", "assignment.interval.ms"),
        streams_initial_rebalance_delay_ms=v["group.streams.initial.rebalance.delay.ms"])


def _check_listeners(listeners: list[Listener], advertised: list[Listener]) -> None:
    names = [lst.name for lst in listeners]
    for n in set(names):
        if names.count(n) > 1:
            raise InvalidConfigError(f"listeners: listener name {n} appears more than once")
    ports = [lst.port for lst in listeners if lst.port]
    for p in set(ports):
        if ports.count(p) > 1:
            raise InvalidConfigError(f"listeners: port {p} appears more than once")
    for a in advertised:
        if listeners and a.name not in names:
            raise InvalidConfigError(f"advertised.listeners: {a.name} is not one of listeners "
                                     f"({', '.join(names)})")
