"""The per-group configs of the GROUP config resource (Kafka's ``GroupConfig``): a consumer
group's ``consumer.session.timeout.ms``, ``consumer.heartbeat.interval.ms`` and
``consumer.assignment.interval.ms``, a streams group's ``streams.session.timeout.ms``,
``streams.heartbeat.interval.ms``, ``streams.num.standby.replicas``, ``streams.assignment.interval.ms``
and ``streams.initial.rebalance.delay.ms``,
a share group's ``share.*`` keys (``share.record.lock.duration.ms``, ``share.auto.offset.reset`` ...),
set by IncrementalAlterConfigs and checked as Kafka checks them (each within the broker's bounds);
and the broker's ``group.share.*`` defaults and bounds (Kafka's ``ShareGroupConfig`` /
``GroupCoordinatorConfig`` keys and defaults).

Kafka keeps group configs in its metadata log; here they are the JSON file :data:`GROUP_CONFIGS_FILE`
of the data directory (atomic replace + fsync).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kafkalog.coordinator.share_partition import SharePartitionConfig, parse_duration_ms
from kafkalog.coordinator.share_partition_manager import ShareGroupSettings
from kafkalog.errors import InvalidConfigError
from kafkalog.log import fsutil
from kafkalog.record.constants import IsolationLevel

__all__ = ["GROUP_CONFIGS_FILE", "GROUP_CONFIG_KEYS", "GroupBounds", "GroupConfigStore",
           "ShareGroupBrokerConfig", "parse_duration_ms"]

GROUP_CONFIGS_FILE = "kafkalog-group-configs.json"

@dataclass(frozen=True)
class ShareGroupBrokerConfig:
    """The broker's ``group.share.*`` keys (validated in :mod:`kafkalog.server.config`)."""

    session_timeout_ms: int = 45000
    min_session_timeout_ms: int = 45000
    max_session_timeout_ms: int = 60000
    heartbeat_interval_ms: int = 5000
    min_heartbeat_interval_ms: int = 5000
    max_heartbeat_interval_ms: int = 15000
    max_size: int = 200
    assignment_interval_ms: int = 1000
    min_assignment_interval_ms: int = 0
    max_assignment_interval_ms: int = 15000
    record_lock_duration_ms: int = 30000
    min_record_lock_duration_ms: int = 15000
    max_record_lock_duration_ms: int = 60000
    delivery_count_limit: int = 5
    min_delivery_count_limit: int = 2
    max_delivery_count_limit: int = 10
    partition_max_record_locks: int = 2000
    min_partition_max_record_locks: int = 100
    max_partition_max_record_locks: int = 4000
    max_share_sessions: int = 2000


@dataclass(frozen=True)
class GroupBounds:
    """The broker's ``group.consumer.*`` / ``group.streams.*`` defaults and bounds of the consumer and
    streams group keys (validated in :mod:`kafkalog.server.config`); Kafka's defaults."""

    consumer_session_timeout_ms: tuple[int, int, int] = (45000, 45000, 60000)   # default, min, max
    consumer_heartbeat_interval_ms: tuple[int, int, int] = (5000, 5000, 15000)
    streams_session_timeout_ms: tuple[int, int, int] = (45000, 45000, 60000)
    streams_heartbeat_interval_ms: tuple[int, int, int] = (5000, 5000, 15000)
    streams_num_standby_replicas: tuple[int, int, int] = (0, 0, 2)
    consumer_assignment_interval_ms: tuple[int, int, int] = (1000, 0, 15000)
    streams_assignment_interval_ms: tuple[int, int, int] = (1000, 0, 15000)
    streams_initial_rebalance_delay_ms: int = 3000


def _invalid(key: str, raw: Any, why: str) -> InvalidConfigError:
    """Kafka's ``ConfigException(name, value, message)``."""
    return InvalidConfigError(f"Invalid value {raw} for configuration {key}: {why}")


#: ``share.isolation.level``'s values, as Kafka lists them
_ISOLATION_NAMES = (IsolationLevel.READ_COMMITTED.config_name, IsolationLevel.READ_UNCOMMITTED.config_name)
#: the group config keys served (Kafka's ``GroupConfig`` share keys) -> (type, at least)
_KEYS: dict[str, tuple[str, int]] = {
    "consumer.session.timeout.ms": ("int", 1), "consumer.heartbeat.interval.ms": ("int", 1),
    "streams.session.timeout.ms": ("int", 1), "streams.heartbeat.interval.ms": ("int", 1),
    "streams.num.standby.replicas": ("int", 0), "consumer.assignment.interval.ms": ("int", 0),
    "streams.assignment.interval.ms": ("int", 0), "streams.initial.rebalance.delay.ms": ("int", 0),
    "share.session.timeout.ms": ("int", 1), "share.heartbeat.interval.ms": ("int", 1),
    "share.record.lock.duration.ms": ("int", 1000), "share.delivery.count.limit": ("int", 2),
    "share.partition.max.record.locks": ("int", 100), "share.auto.offset.reset": ("reset", 0),
    "share.isolation.level": ("isolation", 0), "share.renew.acknowledge.enable": ("bool", 0),
    "share.assignment.interval.ms": ("int", 0)}
GROUP_CONFIG_KEYS = tuple(_KEYS)


def _parse(key: str, raw: Any) -> Any:
    """One key as Kafka's ``GroupConfig.CONFIG_DEF`` parses it (type, then its validator)."""
    kind, at_least = _KEYS[key]
    text = str(raw).strip()
    if kind == "int":
        try:
            v = int(text)
        except ValueError:
            raise _invalid(key, raw, "Not a number of type INT") from None
        if v < at_least:
            raise _invalid(key, raw, f"Value must be at least {at_least}")
        return v
    if kind == "bool":
        if text.lower() not in ("true", "false"):
            raise _invalid(key, raw, "Expected value to be either true or false")
        return text.lower() == "true"
    if kind == "isolation":
        if text not in _ISOLATION_NAMES:      # case-sensitive, as Kafka's ValidString
            raise _invalid(key, raw, f"String must be one of: {', '.join(_ISOLATION_NAMES)}")
        return text
    low = text.lower()
    if low in ("earliest", "latest"):
        return low
    if low.startswith("by_duration:"):
        try:
            parse_duration_ms(text[len("by_duration:"):])
        except InvalidConfigError:
            pass
        else:
            return "by_duration:" + text[len("by_duration:"):]
    raise _invalid(key, raw, f"Invalid value `{text}` for configuration {key}. The value must be either "
                             f"'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'.")


def _check_ranges(parsed: Mapping[str, Any], b: ShareGroupBrokerConfig, g: GroupBounds) -> None:
    """Kafka's ``GroupConfig.validateValues`` against the broker's bounds."""
    ranges = (("consumer.heartbeat.interval.ms", *g.consumer_heartbeat_interval_ms[1:]),
              ("consumer.session.timeout.ms", *g.consumer_session_timeout_ms[1:]),
              ("streams.heartbeat.interval.ms", *g.streams_heartbeat_interval_ms[1:]),
              ("streams.session.timeout.ms", *g.streams_session_timeout_ms[1:]),
              ("consumer.assignment.interval.ms", *g.consumer_assignment_interval_ms[1:]),
              ("streams.assignment.interval.ms", *g.streams_assignment_interval_ms[1:]),
              ("share.heartbeat.interval.ms", b.min_heartbeat_interval_ms, b.max_heartbeat_interval_ms),
              ("share.session.timeout.ms", b.min_session_timeout_ms, b.max_session_timeout_ms),
              ("share.record.lock.duration.ms", b.min_record_lock_duration_ms, b.max_record_lock_duration_ms),
              ("share.delivery.count.limit", b.min_delivery_count_limit, b.max_delivery_count_limit),
              ("share.partition.max.record.locks", b.min_partition_max_record_locks,
               b.max_partition_max_record_locks),
              ("share.assignment.interval.ms", b.min_assignment_interval_ms, b.max_assignment_interval_ms))
    for key, lo, hi in ranges:
        if key in parsed and not lo <= parsed[key] <= hi:
            raise InvalidConfigError(f"{key} must be in the range {lo} to {hi} inclusive.")
    standby_max = g.streams_num_standby_replicas[2]
    if parsed.get("streams.num.standby.replicas", 0) > standby_max:
        raise InvalidConfigError(f"streams.num.standby.replicas must be less than or equal to {standby_max}")
    base = defaults(b, g)
    for p in ("consumer.", "streams.", "share."):
        session, heartbeat = p + "session.timeout.ms", p + "heartbeat.interval.ms"
        if (session in parsed or heartbeat in parsed) and \
                parsed.get(session, base[session]) <= parsed.get(heartbeat, base[heartbeat]):
            raise InvalidConfigError(f"{session} must be greater than {heartbeat}")


def defaults(b: ShareGroupBrokerConfig, g: GroupBounds) -> dict[str, Any]:
    """Each key's value when the group does not set it: the broker's ``group.*`` key."""
    return {"consumer.session.timeout.ms": g.consumer_session_timeout_ms[0],
            "consumer.heartbeat.interval.ms": g.consumer_heartbeat_interval_ms[0],
            "streams.session.timeout.ms": g.streams_session_timeout_ms[0],
            "streams.heartbeat.interval.ms": g.streams_heartbeat_interval_ms[0],
            "streams.num.standby.replicas": g.streams_num_standby_replicas[0],
            "consumer.assignment.interval.ms": g.consumer_assignment_interval_ms[0],
            "streams.assignment.interval.ms": g.streams_assignment_interval_ms[0],
            "streams.initial.rebalance.delay.ms": g.streams_initial_rebalance_delay_ms,
            "share.session.timeout.ms": b.session_timeout_ms,
            "share.heartbeat.interval.ms": b.heartbeat_interval_ms,
            "share.record.lock.duration.ms": b.record_lock_duration_ms,
            "share.delivery.count.limit": b.delivery_count_limit,
            "share.partition.max.record.locks": b.partition_max_record_locks,
            "share.auto.offset.reset": "latest", "share.isolation.level": IsolationLevel.READ_UNCOMMITTED.config_name,
            "share.renew.acknowledge.enable": True,
            "share.assignment.interval.ms": b.assignment_interval_ms}


class GroupConfigStore:
    """The per-group configs of one data directory."""

    def __init__(self, data_dir: str, broker: ShareGroupBrokerConfig | None = None,
                 bounds: GroupBounds | None = None) -> None:
        self.path = os.path.join(data_dir, GROUP_CONFIGS_FILE)
        self.broker = broker or ShareGroupBrokerConfig()
        self.bounds = bounds or GroupBounds()
        self._lock = threading.Lock()
        self._configs: dict[str, dict[str, Any]] = self._read()

    def _read(self) -> dict[str, dict[str, Any]]:
        data = fsutil.read_json(self.path, "group configs")
        if data is None:
            return {}
        if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
            raise InvalidConfigError("the group configs file is not a JSON object of objects", file=self.path)
        return data

    def reload(self) -> None:
        with self._lock:
            self._configs = self._read()

    def overrides(self, group: str) -> dict[str, Any]:
        with self._lock:
            return dict(self._configs.get(group, {}))

    def get(self, group: str, key: str, default: Any) -> Any:
        """The group's override of ``key``, else ``default`` (the coordinators' per-heartbeat look-up)."""
        with self._lock:
            return self._configs.get(group, {}).get(key, default)

    def effective(self, group: str) -> dict[str, Any]:
        out = defaults(self.broker, self.bounds)
        out.update(self.overrides(group))
        return out

    def validate(self, group: str, updates: Mapping[str, Any]) -> dict[str, Any]:
        """The group's overrides after ``updates`` (a None value deletes the key), checked as
        Kafka's ``GroupConfig.validate`` checks the group's whole new config."""
        raw: dict[str, Any] = dict(self.overrides(group))
        for key, value in updates.items():
            if value is None:           # (as Kafka: deleting a key is not checked, the group's new config is)
                raw.pop(key, None)
            elif key not in _KEYS:
                raise InvalidConfigError(f"Unknown group config name: {key}")
            else:
                raw[key] = value
        parsed = {key: _parse(key, str(value).lower() if isinstance(value, bool) else value)
                  for key, value in raw.items()}
        _check_ranges(parsed, self.broker, self.bounds)
        return parsed

    def alter(self, group: str, updates: Mapping[str, Any]) -> None:
        new = self.validate(group, updates)
        with self._lock:
            configs = dict(self._configs)
            if new:
                configs[group] = new
            else:
                configs.pop(group, None)
            fsutil.atomic_write(self.path, json.dumps(configs, sort_keys=True, indent=1).encode("utf-8"))
            self._configs = configs

    def delete(self, group: str) -> None:
        with self._lock:
            if group not in self._configs:
                return
        self.alter(group, dict.fromkeys(self.overrides(group)))

    def settings(self, group: str) -> ShareGroupSettings:
        """What the share partitions of ``group`` run with."""
        v = self.effective(group)
        return ShareGroupSettings(
            SharePartitionConfig(record_lock_duration_ms=v["share.record.lock.duration.ms"],
                                 delivery_count_limit=v["share.delivery.count.limit"],
                                 max_record_locks=v["share.partition.max.record.locks"],
                                 renew_enabled=v["share.renew.acknowledge.enable"]),
            auto_offset_reset=v["share.auto.offset.reset"],
            isolation_level=IsolationLevel.of(v["share.isolation.level"]))
