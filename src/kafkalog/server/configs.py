"""DescribeConfigs and IncrementalAlterConfigs for topic configurations (and the broker's own
keys, read-only), with Kafka's config sources: a topic override is DYNAMIC_TOPIC_CONFIG, a
broker-level synonym STATIC_BROKER_CONFIG, else DEFAULT_CONFIG."""

from __future__ import annotations

from typing import Any

from kafkalog.errors import InvalidConfigError, KafkalogError
from kafkalog.log.config import TOPIC_CONFIGS, LogConfig, format_value
from kafkalog.server import error_codes
from kafkalog.server.broker import Broker
from kafkalog.server.config import SERVER_CONFIGS
from kafkalog.server.protocol import Request

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3
#: DescribeConfigs ``config_type`` (v3+)
_CONFIG_TYPES = {"boolean": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6, "list": 7}


def topic_config_entries(broker: Broker, cfg: LogConfig) -> list[dict[str, Any]]:
    """Every topic key's effective value, source and type (CreateTopics v5+, DescribeConfigs)."""
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
                    "synonyms": [], "config_type": _CONFIG_TYPES.get(d.type, 0),
                    "documentation": None})
    return out


def _broker_entries(broker: Broker) -> list[dict[str, Any]]:
    out = []
    for key, d in SERVER_CONFIGS.items():
        value = broker.config.values[key]
        out.append({"name": key, "value": format_value(d.type, value), "read_only": True,
                    "config_source": SOURCE_STATIC_BROKER, "is_sensitive": False,
                    "is_default": value == d.default, "synonyms": [],
                    "config_type": _CONFIG_TYPES.get(d.type, 0), "documentation": None})
    return out


def _describe_one(broker: Broker, rtype: int, name: str, keys: tuple | None) -> dict[str, Any]:
    result: dict[str, Any] = {"error_code": 0, "error_message": None, "resource_type": rtype,
                              "resource_name": name, "configs": []}
    if rtype == RESOURCE_TOPIC:
        if not broker.manager.has_topic(name):
            result.update(error_code=error_codes.UNKNOWN_TOPIC_OR_PARTITION,
                          error_message=f"Topic {name} does not exist")
            return result
        entries = topic_config_entries(broker, broker.manager.topic_config(name))
    elif rtype == RESOURCE_BROKER:
        if name not in ("", str(broker.node_id)):
            result.update(error_code=error_codes.INVALID_REQUEST,
                          error_message=f"Unexpected broker id {name}")
            return result
        entries = _broker_entries(broker)
    else:
        result.update(error_code=error_codes.INVALID_REQUEST,
                      error_message=f"Unsupported resource type {rtype}")
        return result
    if keys is not None:
        wanted = set(keys)
        entries = [e for e in entries if e["name"] in wanted]
    result["configs"] = entries
    return result


def handle_describe_configs(broker: Broker, request: Request) -> Any:
    results = [_describe_one(broker, r.resource_type, r.resource_name, r.configuration_keys)
               for r in request.body.resources]
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
                raise InvalidConfigError(f"Config value append/subtract is not allowed for config "
                                         f"key {c.name} (not a list)")
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


def handle_incremental_alter_configs(broker: Broker, request: Request) -> Any:
    body = request.body
    responses = []
    for r in body.resources:
        res: dict[str, Any] = {"error_code": 0, "error_message": None,
                               "resource_type": r.resource_type, "resource_name": r.resource_name}
        responses.append(res)
        if r.resource_type != RESOURCE_TOPIC:
            res.update(error_code=error_codes.INVALID_REQUEST,
                       error_message="only topic configurations can be altered")
            continue
        if not broker.manager.has_topic(r.resource_name):
            res.update(error_code=error_codes.UNKNOWN_TOPIC_OR_PARTITION,
                       error_message=f"Topic {r.resource_name} does not exist")
            continue
        try:
            overrides = _altered(broker.manager.topic_config(r.resource_name), r.configs)
            LogConfig(overrides, broker.manager.broker_config)      # validate
            if not body.validate_only:
                current = broker.manager.topic_config(r.resource_name).to_dict()
                deletes = tuple(k for k in current if k not in overrides)
                broker.manager.alter_topic_config(r.resource_name, overrides, deletes)
        except KafkalogError as e:
            res.update(error_code=error_codes.INVALID_CONFIG, error_message=e.message)
    return broker.response(request, {"throttle_time": 0, "responses": responses})
