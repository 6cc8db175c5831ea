"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topic configurations (and the
broker's own keys, read-only), with Kafka's config sources: a topic override is
DYNAMIC_TOPIC_CONFIG, a broker-level synonym STATIC_BROKER_CONFIG, else DEFAULT_CONFIG.

AlterConfigs (API 33) replaces a topic's overrides with exactly the configs given (Kafka's legacy,
non-incremental semantics); IncrementalAlterConfigs (API 44) changes the keys named. Both answer
errors as Kafka 4.4 does (its ``ConfigAdminManager`` and controller): an unknown resource type,
a null value or a key given twice is INVALID_REQUEST, an unknown key or an invalid value
INVALID_CONFIG, an unknown topic UNKNOWN_TOPIC_OR_PARTITION, an invalid name
INVALID_TOPIC_EXCEPTION, a broker resource not naming this node INVALID_REQUEST. The broker's own
configuration is static here (set at start): a BROKER resource with keys to change is refused with
Kafka's answer for a key it cannot change at run time, "Cannot update these configs dynamically"
(docs/kafka-compatibility.md lists it)."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from kafkalog.errors import InvalidConfigError, InvalidTopicError, KafkalogError
from kafkalog.log.config import BROKER_SYNONYMS, TOPIC_CONFIGS, LogConfig, check_kafka_minimums, format_value
from kafkalog.log.naming import validate_topic
from kafkalog.server import error_codes
from kafkalog.server.config import SERVER_CONFIGS
from kafkalog.server.config_docs import BROKER_DOCS, TOPIC_DOCS
from kafkalog.server.requests.protocol import Request
from kafkalog.server.security.acl_operations import ALTER_CONFIGS, CLUSTER, DESCRIBE_CONFIGS, GROUP, TOPIC
from kafkalog.server.security.authorizer import CLUSTER_NAME

if TYPE_CHECKING:      # the state owner that dispatches to this handler
    from kafkalog.server.broker import Broker

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
#: KIP-848/932 group configs (share.*: :mod:`kafkalog.server.handlers.group_configs`)
RESOURCE_GROUP = 32
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3
#: DescribeConfigs ``config_type`` (v3+)
_CONFIG_TYPES = {"boolean": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6, "list": 7}


#: Kafka's defaults of the broker synonyms that are not their topic key's default in the broker's
#: unit, or have none (``KafkaConfig``'s ``ConfigDef``: null for the ``.ms`` forms)
_SYNONYM_DEFAULTS: dict[str, str | None] = {
    "log.roll.ms": None, "log.roll.hours": "168", "log.roll.jitter.ms": None, "log.roll.jitter.hours": "0",
    "log.retention.ms": None, "log.retention.minutes": None, "log.retention.hours": "168",
    "log.flush.interval.ms": None, "log.flush.scheduler.interval.ms": "9223372036854775807",
}


#: the documentation of the keys Kafka 4.4 does not answer (kafkalog's own, and those Kafka 4.0 removed
#: or keeps internal); Kafka's own are its doc strings (:mod:`kafkalog.server.config_docs`)
KAFKALOG_DOCS: dict[str, str] = {
    "retention.future.timestamp.policy": (
        "kafkalog's: how time retention treats a segment whose largest timestamp is in the future: 'warn' "
        "keeps it and logs (Kafka's behaviour), 'mtime' uses the segment file's modification time."),
    "retention.future.timestamp.tolerance.ms": (
        "kafkalog's: how far in the future a segment's largest timestamp may be before "
        "retention.future.timestamp.policy applies."),
    "message.format.version": "Removed in Kafka 4.0 (kafkalog reads it from older topics' configs and ignores it).",
    "message.downconversion.enable": "Removed in Kafka 4.0 (kafkalog accepts it and ignores it).",
    "message.timestamp.difference.max.ms": (
        "Removed in Kafka 4.0 in favour of message.timestamp.before.max.ms and message.timestamp.after.max.ms "
        "(kafkalog accepts it for older topics' configs)."),
    "cluster.id": "The cluster id of a data directory formatted without meta.properties' one (kafkalog's use).",
    "group.consumer.assignor.offload.enable": (
        "Kafka's internal key: whether assignors run off the coordinator thread (no effect in kafkalog)."),
    "group.consumer.regex.refresh.interval.ms": (
        "Kafka's internal key: how often the coordinator resolves consumer-protocol regular expression "
        "subscriptions against the topics."),
    "group.streams.task.offset.interval.ms": (
        "Kafka's internal key: the interval in which streams group members send their task changelog offsets."),
    "group.streams.min.task.offset.interval.ms": (
        "Kafka's internal key: the minimum allowed value of streams.task.offset.interval.ms."),
    "group.streams.acceptable.recovery.lag": (
        "Kafka's internal key: the maximum acceptable lag (number of offsets to catch up) for a client to be "
        "considered caught-up enough to receive an active task assignment (sent to streams group members)."),
    "sasl.credentials.file": "kafkalog's: the SCRAM and PLAIN users file (docs/server.md, TLS and SASL).",
    "telemetry.max.bytes": ("The maximum size (after compression if compression is used) of telemetry metrics "
                            "pushed from a client to the broker. The default value is 1048576 (1 MB)."),
    "client.metrics.subscription.metrics": (
        "kafkalog's: the metric name prefixes (* for all) every client is asked to push while the metrics "
        "endpoint is on (docs/server.md, Client telemetry)."),
    "client.metrics.subscription.interval.ms": "kafkalog's: the clients' telemetry push interval (100 to 3600000).",
    "client.metrics.cache.expiry.ms": (
        "kafkalog's: a client instance not heard from for this long (at least 3 push intervals) is forgotten "
        "with its re-exported series."),
    "client.metrics.max.series": "kafkalog's: the most client telemetry series re-exported at once.",
    "metrics.listener": ("kafkalog's: the Prometheus endpoint, http://HOST:PORT (empty: off; docs/server.md, "
                         "Metrics)."),
    "super.users": "Principals (User:name) allowed every operation, separated by ';'.",
    "allow.everyone.if.no.acl.found": "Whether a resource without any ACL is open to every principal.",
}


def _documentation(docs: dict[str, str], key: str, asked: bool) -> str | None:
    """A key's ``documentation`` answer, when asked: Kafka's doc string (a broker synonym Kafka
    documents as its topic key: the topic key's), else kafkalog's."""
    if not asked:
        return None
    topic_key = _TOPIC_KEY_OF.get(key) if docs is BROKER_DOCS else None
    return docs.get(key) or (TOPIC_DOCS.get(topic_key) if topic_key else None) or KAFKALOG_DOCS.get(key)


#: a broker synonym -> its topic key (``log.cleanup.policy`` -> ``cleanup.policy``)
_TOPIC_KEY_OF = {b: t for t, syns in BROKER_SYNONYMS.items() for b, _mult in syns}


def _synonyms(broker: Broker, key: str, cfg: LogConfig) -> list[dict[str, Any]]:
    """Kafka's ``ConfigHelper.createTopicConfigEntry`` synonyms: the topic's override
    (DYNAMIC_TOPIC_CONFIG), then each broker synonym set in the broker's configuration
    (STATIC_BROKER_CONFIG), then each with a default (DEFAULT_CONFIG), the broker ones from the first
    naming the key's main broker synonym on (Kafka drops those before it)."""
    d = TOPIC_CONFIGS[key]
    brokers = BROKER_SYNONYMS.get(key, ())
    found: list[dict[str, Any]] = []
    bc = broker.manager.broker_config
    for name, _mult in brokers:
        raw = bc.explicit_value(name)
        if raw is not None:
            found.append({"name": name, "value": str(raw), "source": SOURCE_STATIC_BROKER})
    for name, _mult in brokers:
        default = _SYNONYM_DEFAULTS[name] if name in _SYNONYM_DEFAULTS else format_value(d.type, d.default)
        if default is not None:
            found.append({"name": name, "value": default, "source": SOURCE_DEFAULT})
    while found and brokers and found[0]["name"] != brokers[0][0]:
        found.pop(0)
    if cfg.overridden(key):
        found.insert(0, {"name": key, "value": format_value(d.type, cfg.get(key)), "source": SOURCE_DYNAMIC_TOPIC})
    return found


def topic_config_entries(broker: Broker, cfg: LogConfig, synonyms: bool = False,
                         documentation: bool = False) -> list[dict[str, Any]]:
    """Every topic key's effective value, source and type (CreateTopics v5+, DescribeConfigs), with
    its synonyms and documentation when asked."""
    broker_set = broker.manager.broker_config.synonym_values()
    out = []
    for key, d in TOPIC_CONFIGS.items():
        if cfg.overridden(key):
            source = SOURCE_DYNAMIC_TOPIC
        elif key in broker_set:
            source = SOURCE_STATIC_BROKER
        else:
            source = SOURCE_DEFAULT
        out.append({"name": key, "value": format_value(d.type, cfg.get(key)), "read_only": False,
                    "config_source": source, "is_sensitive": False, "is_default": source == SOURCE_DEFAULT,
                    "synonyms": _synonyms(broker, key, cfg) if synonyms else [],
                    "config_type": _CONFIG_TYPES.get(d.type, 0),
                    "documentation": _documentation(TOPIC_DOCS, key, documentation)})
    return out


def _broker_entries(broker: Broker, documentation: bool = False,
                    synonyms: bool = False) -> list[dict[str, Any]]:
    out = []
    for key, d in SERVER_CONFIGS.items():
        value = broker.config.values[key]
        static = key in broker.config.explicit
        source = SOURCE_STATIC_BROKER if static else SOURCE_DEFAULT
        out.append({"name": key, "value": format_value(d.type, value), "read_only": True,
                    "config_source": source, "is_sensitive": False,
                    "is_default": value == d.default,
                    "synonyms": _broker_synonyms(key, d, value, static) if synonyms else [],
                    "config_type": _CONFIG_TYPES.get(d.type, 0),
                    "documentation": _documentation(BROKER_DOCS, key, documentation)})
    return out


def _broker_synonyms(key: str, d: Any, value: Any, static: bool) -> list[dict[str, Any]]:
    """Kafka's ``ConfigHelper.createBrokerConfigEntry`` synonyms of a broker key that has no other
    name: its static value (STATIC_BROKER_CONFIG), then its default when it has one (DEFAULT_CONFIG).
    The keys that are a topic key's broker synonyms (``log.retention.hours``...) are answered
    without (docs/kafka-compatibility.md)."""
    if key in _TOPIC_KEY_OF:
        return []
    found = [{"name": key, "value": format_value(d.type, value), "source": SOURCE_STATIC_BROKER}] if static else []
    if d.default is not None:
        found.append({"name": key, "value": format_value(d.type, d.default), "source": SOURCE_DEFAULT})
    return found


def _describe_one(broker: Broker, rtype: int, name: str, keys: tuple | None,
                  synonyms: bool = False, documentation: bool = False) -> dict[str, Any]:
    result: dict[str, Any] = {"error_code": 0, "error_message": "", "resource_type": rtype,
                              "resource_name": name, "configs": []}
    if rtype == RESOURCE_TOPIC:
        if not broker.manager.has_topic(name):
            # Kafka's answer carries no message here
            result.update(error_code=error_codes.UNKNOWN_TOPIC_OR_PARTITION, error_message="")
            return result
        entries = topic_config_entries(broker, broker.manager.topic_config(name), synonyms, documentation)
    elif rtype == RESOURCE_BROKER:
        if name not in ("", str(broker.node_id)):
            result.update(error_code=error_codes.INVALID_REQUEST,
                          error_message=f"Unexpected broker id, expected {broker.node_id} or empty string, "
                                        f"but received {name}")
            return result
        entries = _broker_entries(broker, documentation, synonyms)
    elif rtype == RESOURCE_GROUP:
        from kafkalog.server.handlers.group_configs import group_config_entries
        entries = group_config_entries(broker, name, synonyms)
    else:
        result.update(error_code=error_codes.INVALID_REQUEST,
                      error_message=error_codes.message(error_codes.INVALID_REQUEST))
        return result
    if keys is not None:
        wanted = set(keys)
        entries = [e for e in entries if e["name"] in wanted]
    result["configs"] = entries
    return result


#: config resource type -> (the ACL resource type Kafka checks, its error)
_ACL_RESOURCE = {RESOURCE_TOPIC: (TOPIC, error_codes.TOPIC_AUTHORIZATION_FAILED),
                 RESOURCE_GROUP: (GROUP, error_codes.GROUP_AUTHORIZATION_FAILED)}


def _config_denied(broker: Broker, rtype: int, name: str, op: int) -> int:
    """With an authorizer: the error of a config resource the session may not ``op`` (DESCRIBE_CONFIGS
    or ALTER_CONFIGS: on the topic, the group, else the cluster), else 0."""
    if broker.authorizer is None:
        return 0
    acl_type, code = _ACL_RESOURCE.get(rtype, (CLUSTER, error_codes.CLUSTER_AUTHORIZATION_FAILED))
    return 0 if broker.authorize(op, acl_type, name if acl_type != CLUSTER else CLUSTER_NAME) else code


def _denied_last(results: list[dict[str, Any]], denied: list[tuple[Any, int]], extra: dict[str, Any]
                 ) -> list[dict[str, Any]]:
    """Kafka answers the resources it refused after the others, with the error's default message."""
    return results + [{"error_code": code, "error_message": error_codes.message(code), "resource_type": r.resource_type,
                       "resource_name": r.resource_name, **extra} for r, code in denied]


def handle_describe_configs(broker: Broker, request: Request) -> Any:
    synonyms = request.body.include_synonyms                                   # v1+: every version served
    documentation = request.api_version >= 3 and request.body.include_documentation  # v3+
    checked = [(r, _config_denied(broker, r.resource_type, r.resource_name, DESCRIBE_CONFIGS))
               for r in request.body.resources]
    results = [_describe_one(broker, r.resource_type, r.resource_name, r.configuration_keys, synonyms,
                             documentation) for r, code in checked if not code]
    results = _denied_last(results, [(r, code) for r, code in checked if code], {"configs": []})
    return broker.response(request, {"throttle_time": 0, "results": results})


def _altered(current: LogConfig, changes: tuple) -> dict[str, Any]:
    overrides = current.to_dict()
    for c in changes:
        d = TOPIC_CONFIGS.get(c.name)
        if d is None:
            raise InvalidConfigError(f"Unknown topic config name: {c.name}")
        op = c.config_operation
        if op == OP_SET:
            overrides[c.name] = c.value
        elif op == OP_DELETE:
            overrides.pop(c.name, None)
        elif op in (OP_APPEND, OP_SUBTRACT):
            if d.type != "list":
                raise InvalidConfigError(f"Can't {'APPEND' if op == OP_APPEND else 'SUBTRACT'} to key "
                                         f"{c.name} because its type is not LIST.")
            items = list(current.get(c.name))
            new = [v for v in (c.value or "").split(",") if v]
            if op == OP_APPEND:
                items += [v for v in new if v not in items]
            else:
                items = [v for v in items if v not in new]
            overrides[c.name] = ",".join(items)
        else:
            raise InvalidConfigError(f"Unknown config operation {op} for {c.name}")
    return overrides


def _resource_error(broker: Broker, rtype: int, name: str, changes: tuple,
                    duplicate: bool, incremental: bool) -> tuple[int, str | None] | None:
    """Kafka's answer to an alteration of resource ``(rtype, name)`` that fails before its values
    are looked at, else None (a topic that exists and may be altered)."""
    if duplicate:
        return error_codes.INVALID_REQUEST, "Each resource must appear at most once."
    if rtype == RESOURCE_BROKER:
        return _broker_alteration_error(broker, name, changes)
    if rtype != RESOURCE_TOPIC:
        return error_codes.INVALID_REQUEST, f"Unknown resource type {rtype}"
    try:
        validate_topic(name)
    except InvalidTopicError as e:
        return error_codes.INVALID_TOPIC_EXCEPTION, e.message
    seen = Counter(c.name for c in changes)
    for c in changes:
        if c.value is None and (c.config_operation if incremental else OP_SET) != OP_DELETE:
            return error_codes.INVALID_REQUEST, f"Null value not supported for : {c.name}"
    if any(n > 1 for n in seen.values()):
        return error_codes.INVALID_REQUEST, "Error due to duplicate config keys"
    if not broker.manager.has_topic(name):
        return error_codes.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist."
    return None


def _broker_alteration_error(broker: Broker, name: str, changes: tuple) -> tuple[int, str | None]:
    """A BROKER resource: Kafka's checks of the node id, then this broker's static configuration
    (nothing to change is accepted)."""
    if name != "":
        try:
            node = int(name)
        except ValueError:
            return error_codes.INVALID_REQUEST, f"Node id must be an integer, but it is: {name}"
        if node != broker.node_id:
            return (error_codes.INVALID_REQUEST,
                    f"Unexpected broker id, expected {broker.node_id}, but received {name}")
    if not changes:
        return error_codes.NONE, None
    keys = ", ".join(dict.fromkeys(c.name for c in changes))
    return error_codes.INVALID_REQUEST, f"Cannot update these configs dynamically: [{keys}]"


def _duplicates(resources: tuple) -> set[tuple[int, str]]:
    counts = Counter((r.resource_type, r.resource_name) for r in resources)
    return {k for k, n in counts.items() if n > 1}


def _alter(broker: Broker, resources: tuple, validate_only: bool, incremental: bool) -> list[dict[str, Any]]:
    dups = _duplicates(resources)
    responses = []
    for r in resources:
        res: dict[str, Any] = {"error_code": 0, "error_message": None,
                               "resource_type": r.resource_type, "resource_name": r.resource_name}
        responses.append(res)
        if r.resource_type == RESOURCE_GROUP and (r.resource_type, r.resource_name) not in dups:
            from kafkalog.server.handlers.group_configs import alter_group_configs
            alter_group_configs(broker, r, validate_only, res)
            continue
        failed = _resource_error(broker, r.resource_type, r.resource_name, r.configs,
                                 (r.resource_type, r.resource_name) in dups, incremental)
        if failed is not None:
            res.update(error_code=failed[0], error_message=failed[1])
            continue
        try:
            current = broker.manager.topic_config(r.resource_name)
            overrides = (_altered(current, r.configs) if incremental
                         else _replaced(r.configs))
            LogConfig(overrides, broker.manager.broker_config)      # validate
            check_kafka_minimums({c.name: overrides.get(c.name) for c in r.configs})   # the keys given
            if not validate_only:
                deletes = tuple(k for k in current.to_dict() if k not in overrides)
                broker.manager.alter_topic_config(r.resource_name, overrides, deletes)
        except KafkalogError as e:
            res.update(error_code=error_codes.INVALID_CONFIG, error_message=e.message)
    return responses


def _replaced(configs: tuple) -> dict[str, Any]:
    """AlterConfigs' new overrides of a topic: exactly ``configs`` (unknown keys refused)."""
    for c in configs:
        if c.name not in TOPIC_CONFIGS:
            raise InvalidConfigError(f"Unknown topic config name: {c.name}")
    return {c.name: c.value for c in configs}


def _alter_authorized(broker: Broker, request: Request, incremental: bool) -> Any:
    body = request.body
    checked = [(r, _config_denied(broker, r.resource_type, r.resource_name, ALTER_CONFIGS)) for r in body.resources]
    responses = _alter(broker, tuple(r for r, code in checked if not code), body.validate_only, incremental)
    responses = _denied_last(responses, [(r, code) for r, code in checked if code], {})
    return broker.response(request, {"throttle_time": 0, "responses": responses})


def handle_alter_configs(broker: Broker, request: Request) -> Any:
    return _alter_authorized(broker, request, incremental=False)


def handle_incremental_alter_configs(broker: Broker, request: Request) -> Any:
    return _alter_authorized(broker, request, incremental=True)
