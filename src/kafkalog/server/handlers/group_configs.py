"""The GROUP config resource (Kafka's ``GroupConfig``) of DescribeConfigs and IncrementalAlterConfigs:
a group's ``consumer.*``, ``streams.*`` and ``share.*`` configs (:mod:`kafkalog.coordinator.group_config`), SET and
DELETE, checked against the broker's ``group.*`` bounds as Kafka checks them (INVALID_CONFIG
with Kafka's message otherwise)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafkalog.coordinator.group_config import GROUP_CONFIG_KEYS, defaults
from kafkalog.errors import KafkalogError
from kafkalog.server import error_codes
from kafkalog.server.config import SERVER_CONFIGS

if TYPE_CHECKING:      # the state owner that dispatches to this handler
    from kafkalog.server.broker import Broker

#: DescribeConfigs config sources: a group override, the broker's configuration, Kafka's default
SOURCE_DYNAMIC_GROUP, SOURCE_STATIC_BROKER, SOURCE_DEFAULT = 8, 4, 5
OP_SET, OP_DELETE = 0, 1
_TYPES = {bool: 1, str: 2, int: 3}


def _text(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


#: the group keys without a ``group.``-prefixed broker key: Kafka gives the key itself as its broker synonym
_OWN_SYNONYM = ("share.auto.offset.reset", "share.isolation.level", "share.renew.acknowledge.enable")


def _synonyms(broker: Broker, key: str, override: Any, overridden: bool, configured: Any) -> list[dict[str, Any]]:
    """Kafka's synonyms of a group key: the group's override, then the broker's key as its configuration
    sets it (STATIC_BROKER_CONFIG), then with Kafka's default (DEFAULT_CONFIG)."""
    out = [{"name": key, "value": _text(override), "source": SOURCE_DYNAMIC_GROUP}] if overridden else []
    broker_key = key if key in _OWN_SYNONYM else "group." + key
    if broker_key in broker.config.explicit:
        out.append({"name": broker_key, "value": _text(configured), "source": SOURCE_STATIC_BROKER})
    d = SERVER_CONFIGS.get(broker_key)
    default = configured if d is None else d.default
    return [*out, {"name": broker_key, "value": _text(default), "source": SOURCE_DEFAULT}]


def group_config_entries(broker: Broker, group: str, synonyms: bool = False) -> list[dict[str, Any]]:
    """Every served group key of ``group``: its value and source (and synonyms when asked)."""
    overrides = broker.group_configs.overrides(group)
    base = defaults(broker.group_configs.broker, broker.group_configs.bounds)
    out = []
    for key in GROUP_CONFIG_KEYS:
        overridden = key in overrides
        value = overrides[key] if overridden else base[key]
        static = not overridden and "group." + key in broker.config.explicit
        source = SOURCE_DYNAMIC_GROUP if overridden else SOURCE_STATIC_BROKER if static else SOURCE_DEFAULT
        out.append({"name": key, "value": _text(value), "read_only": False, "config_source": source,
                    "is_sensitive": False, "is_default": source == SOURCE_DEFAULT,
                    "synonyms": _synonyms(broker, key, value, overridden, base[key]) if synonyms else [],
                    "config_type": _TYPES.get(type(value), 0), "documentation": None})
    return out


def alter_group_configs(broker: Broker, resource: Any, validate_only: bool, result: dict[str, Any]) -> None:
    """One GROUP resource of an IncrementalAlterConfigs; its outcome written into ``result``."""
    group = resource.resource_name
    if not group:
        result.update(error_code=error_codes.INVALID_REQUEST, error_message="Group name can't be empty.")
        return
    updates: dict[str, Any] = {}
    for c in resource.configs:
        if c.config_operation == OP_SET:
            updates[c.name] = c.value
        elif c.config_operation == OP_DELETE:
            updates[c.name] = None
        else:
            result.update(error_code=error_codes.INVALID_CONFIG,
                          error_message=f"Config value append/subtract is not allowed for config key {c.name}")
            return
    try:
        if validate_only:
            broker.group_configs.validate(group, updates)
        else:
            broker.group_configs.alter(group, updates)
    except KafkalogError as e:
        result.update(error_code=error_codes.INVALID_CONFIG, error_message=e.message)
