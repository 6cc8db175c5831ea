"""Topic-level log configuration with Kafka's keys, defaults and validation (spec §4.13;
Kafka's ``LogConfig``, ``ServerTopicConfigSynonyms``, ``ServerLogConfigs``, ``CleanerConfig``).

``LogConfig(overrides, broker)`` resolves every topic key: the topic override if present, else the
broker-level synonym (``log.segment.bytes``, ``log.roll.ms``/``log.roll.hours``,
``log.retention.ms``/``minutes``/``hours`` ...; the first one present wins, with unit conversion),
else Kafka's default. Values are typed attributes: ``cfg.segment_bytes``, ``cfg.retention_ms``,
``cfg.cleanup_policy``, ``cfg.compact``, ``cfg.delete`` ...

Broker-only settings (``log.cleaner.*``, ``log.retention.check.interval.ms``, checkpoint intervals,
``producer.id.expiration.ms`` ...) live in :class:`BrokerConfig`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple

from kafkalog.errors import InvalidConfigError
from kafkalog.record.constants import DOUBLE_MAX, INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, TOPIC_COMPRESSION_TYPES

# --- value types ----------------------------------------------------------------------------------

INT, LONG, DOUBLE, BOOLEAN, STRING, LIST = "int", "long", "double", "boolean", "string", "list"
SHORT = "short"

DELETE = "delete"
COMPACT = "compact"
CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"


@dataclass(frozen=True)
class ConfigDef:
    """One configuration key: name, type, default, validator (raises ValueError with a reason)."""
    name: str
    type: str
    default: Any
    validator: Optional[Callable[[Any], None]] = None
    doc: str = ""


def at_least(lo: float) -> Callable[[Any], None]:
    def check(v: Any) -> None:
        if v < lo:
            raise ValueError(f"Value must be at least {lo}")
    return check


def between(lo: float, hi: float) -> Callable[[Any], None]:
    """Kafka's ``Range.between``: the bound a value passes names the message."""
    def check(v: Any) -> None:
        if v < lo:
            raise ValueError(f"Value must be at least {lo}")
        if v > hi:
            raise ValueError(f"Value must be no more than {hi}")
    return check


def one_of(*allowed: str) -> Callable[[Any], None]:
    def check(v: Any) -> None:
        if v not in allowed:
            raise ValueError(f"String must be one of: {', '.join(allowed)}")
    return check


def _gzip_level(v: int) -> None:
    if v != -1 and not 1 <= v <= 9:
        raise ValueError("Value must be between 1 and 9 or equal to -1")


def _cleanup_policy(v: List[str]) -> None:
    for p in v:
        if p not in (DELETE, COMPACT):
            raise ValueError("String must be one of: compact, delete")
    if len(set(v)) != len(v):
        raise ValueError("Configuration 'cleanup.policy' values must not be duplicated.")


def parse_value(name: str, type_: str, raw: Any) -> Any:
    """Parse ``raw`` (a Python value or its Java-properties string form) as ``type_``.

    Raises :class:`InvalidConfigError` naming ``name``.
    """
    def bad(reason: str = "") -> InvalidConfigError:
        # Kafka's ConfigException text: the value as given, unquoted
        return InvalidConfigError(f"Invalid value {raw} for configuration {name}"
                                  + (f": {reason}" if reason else ""))
    if raw is None:
        raise bad("Value must not be null")
    if type_ in (SHORT, INT, LONG):
        if isinstance(raw, bool):
            raise bad("Expected value to be a number")
        if isinstance(raw, int):
            v = raw
        elif isinstance(raw, str):
            s = raw.strip()
            if not s or not (s.lstrip("+-").isdigit() and s.isascii()):
                raise bad("Not a number of type " + type_.upper())
            v = int(s)
        else:
            raise bad("Expected value to be a number")
        lo, hi = {SHORT: (-32768, 32767), INT: (INT32_MIN, INT32_MAX)}.get(type_, (INT64_MIN, INT64_MAX))
        if not lo <= v <= hi:
            raise bad("Not a number of type " + type_.upper())
        return v
    if type_ == DOUBLE:
        if isinstance(raw, bool):
            raise bad("Expected value to be a double")
        if isinstance(raw, (int, float)):
            d = float(raw)
        elif isinstance(raw, str):
            try:
                d = float(raw.strip())
            except ValueError:
                raise bad("Not a number of type DOUBLE") from None
        else:
            raise bad("Expected value to be a double")
        if d != d:
            raise bad("Not a number of type DOUBLE")
        return d
    if type_ == BOOLEAN:
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str):
            s = raw.strip().lower()
            if s in ("true", "false"):
                return s == "true"
        raise bad("Expected value to be either true or false")
    if type_ == STRING:
        if not isinstance(raw, str):
            raise bad("Expected value to be a string")
        return raw.strip()
    if type_ == LIST:
        if isinstance(raw, str):
            s = raw.strip()
            return [p.strip() for p in s.split(",")] if s else []
        if isinstance(raw, (list, tuple)):
            if not all(isinstance(p, str) for p in raw):
                raise bad("Expected a list of strings")
            return [p.strip() for p in raw]
        raise bad("Expected a comma separated list")
    raise InvalidConfigError(f"Unknown type {type_} for configuration {name}")  # pragma: no cover


def format_value(type_: str, value: Any) -> str:
    """The Java-properties string form of a typed value."""
    if type_ == BOOLEAN:
        return "true" if value else "false"
    if type_ == LIST:
        return ",".join(value)
    if type_ == DOUBLE:
        return repr(float(value))
    return str(value)


def _d(name: str, type_: str, default: Any, validator: Optional[Callable[[Any], None]] = None) -> ConfigDef:
    return ConfigDef(name, type_, default, validator)


#: Every topic-level key (spec §4.13) with Kafka's type, default and validator.
TOPIC_CONFIGS: Dict[str, ConfigDef] = {c.name: c for c in [
    _d("segment.bytes", INT, 1024 * 1024 * 1024, at_least(14)),
    _d("segment.ms", LONG, 168 * 60 * 60 * 1000, at_least(1)),
    _d("segment.jitter.ms", LONG, 0, at_least(0)),
    _d("segment.index.bytes", INT, 10 * 1024 * 1024, at_least(4)),
    _d("index.interval.bytes", INT, 4096, at_least(0)),
    _d("flush.messages", LONG, INT64_MAX, at_least(1)),
    _d("flush.ms", LONG, INT64_MAX, at_least(0)),
    _d("retention.bytes", LONG, -1),
    _d("retention.ms", LONG, 168 * 60 * 60 * 1000, at_least(-1)),
    _d("max.message.bytes", INT, 1024 * 1024 + 12, at_least(0)),
    _d("file.delete.delay.ms", LONG, 60000, at_least(0)),
    _d("delete.retention.ms", LONG, 24 * 60 * 60 * 1000, at_least(0)),
    _d("min.compaction.lag.ms", LONG, 0, at_least(0)),
    _d("max.compaction.lag.ms", LONG, INT64_MAX, at_least(1)),
    _d("min.cleanable.dirty.ratio", DOUBLE, 0.5, between(0, 1)),
    _d("cleanup.policy", LIST, [DELETE], _cleanup_policy),
    _d("compression.type", STRING, "producer", one_of(*TOPIC_COMPRESSION_TYPES)),
    _d("compression.gzip.level", INT, -1, _gzip_level),
    _d("compression.lz4.level", INT, 9, between(1, 17)),
    _d("compression.zstd.level", INT, 3, between(-131072, 22)),
    _d("preallocate", BOOLEAN, False),
    _d("message.timestamp.type", STRING, CREATE_TIME, one_of(CREATE_TIME, LOG_APPEND_TIME)),
    _d("message.timestamp.difference.max.ms", LONG, INT64_MAX, at_least(0)),
    _d("message.timestamp.before.max.ms", LONG, INT64_MAX, at_least(0)),
    _d("message.timestamp.after.max.ms", LONG, INT64_MAX, at_least(0)),
    _d("message.format.version", STRING, "3.0-IV1"),
    _d("message.downconversion.enable", BOOLEAN, True),
    _d("min.insync.replicas", INT, 1, at_least(1)),
    _d("unclean.leader.election.enable", BOOLEAN, False),
    _d("local.retention.ms", LONG, -2, at_least(-2)),
    _d("local.retention.bytes", LONG, -2, at_least(-2)),
    _d("remote.storage.enable", BOOLEAN, False),
    _d("remote.log.copy.disable", BOOLEAN, False),
    _d("remote.log.delete.on.disable", BOOLEAN, False),
    _d("leader.replication.throttled.replicas", LIST, []),
    _d("follower.replication.throttled.replicas", LIST, []),
    # kafkalog extensions (kafkalog.log.retention): not Kafka keys
    _d("retention.future.timestamp.policy", STRING, "warn", one_of("warn", "mtime")),
    _d("retention.future.timestamp.tolerance.ms", LONG, 3600000, at_least(0)),
]}

#: Kafka 4.4's minimums where the embedded API takes smaller values (small segments in tests and small
#: embedded logs): what ``kafkalog serve`` refuses over the wire (:func:`check_kafka_minimums`)
KAFKA_MINIMUMS: Dict[str, int] = {"segment.bytes": 1024 * 1024}


def check_kafka_minimums(overrides: Mapping[str, Any]) -> None:
    """Refuse, as Kafka 4.4 does, a topic override below :data:`KAFKA_MINIMUMS` (the values already
    passed :class:`LogConfig`)."""
    for key, lo in KAFKA_MINIMUMS.items():
        raw = overrides.get(key)
        if raw is not None and parse_value(key, TOPIC_CONFIGS[key].type, raw) < lo:
            raise InvalidConfigError(f"Invalid value {raw} for configuration {key}: Value must be at least {lo}")


_H = 60 * 60 * 1000
_M = 60 * 1000

#: topic key -> broker synonyms in precedence order, with the multiplier to milliseconds/bytes.
BROKER_SYNONYMS: Dict[str, Tuple[Tuple[str, int], ...]] = {
    "segment.bytes": (("log.segment.bytes", 1),),
    "segment.ms": (("log.roll.ms", 1), ("log.roll.hours", _H)),
    "segment.jitter.ms": (("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", _H)),
    "segment.index.bytes": (("log.index.size.max.bytes", 1),),
    "index.interval.bytes": (("log.index.interval.bytes", 1),),
    "flush.messages": (("log.flush.interval.messages", 1),),
    "flush.ms": (("log.flush.interval.ms", 1), ("log.flush.scheduler.interval.ms", 1)),
    "retention.bytes": (("log.retention.bytes", 1),),
    "retention.ms": (("log.retention.ms", 1), ("log.retention.minutes", _M), ("log.retention.hours", _H)),
    "max.message.bytes": (("message.max.bytes", 1),),
    "file.delete.delay.ms": (("log.segment.delete.delay.ms", 1),),
    "delete.retention.ms": (("log.cleaner.delete.retention.ms", 1),),
    "min.compaction.lag.ms": (("log.cleaner.min.compaction.lag.ms", 1),),
    "max.compaction.lag.ms": (("log.cleaner.max.compaction.lag.ms", 1),),
    "min.cleanable.dirty.ratio": (("log.cleaner.min.cleanable.ratio", 1),),
    "cleanup.policy": (("log.cleanup.policy", 1),),
    "compression.type": (("compression.type", 1),),
    "compression.gzip.level": (("compression.gzip.level", 1),),
    "compression.lz4.level": (("compression.lz4.level", 1),),
    "compression.zstd.level": (("compression.zstd.level", 1),),
    "preallocate": (("log.preallocate", 1),),
    "message.timestamp.type": (("log.message.timestamp.type", 1),),
    "message.timestamp.difference.max.ms": (("log.message.timestamp.difference.max.ms", 1),),
    "message.timestamp.before.max.ms": (("log.message.timestamp.before.max.ms", 1),),
    "message.timestamp.after.max.ms": (("log.message.timestamp.after.max.ms", 1),),
    "message.format.version": (("log.message.format.version", 1),),
    "message.downconversion.enable": (("log.message.downconversion.enable", 1),),
    "min.insync.replicas": (("min.insync.replicas", 1),),
    "unclean.leader.election.enable": (("unclean.leader.election.enable", 1),),
    "local.retention.ms": (("log.local.retention.ms", 1),),
    "local.retention.bytes": (("log.local.retention.bytes", 1),),
}

#: broker key -> (topic key, multiplier)
_SYNONYM_OF: Dict[str, Tuple[str, int]] = {b: (t, mult) for t, syns in BROKER_SYNONYMS.items()
                                           for b, mult in syns}

#: Broker-only storage settings (spec §4.13) with their types and defaults.
BROKER_ONLY_CONFIGS: Dict[str, ConfigDef] = {c.name: c for c in [
    _d("log.dirs", LIST, []),
    _d("log.dir", STRING, "/tmp/kafka-logs"),
    _d("log.retention.check.interval.ms", LONG, 300000, at_least(1)),
    _d("log.flush.offset.checkpoint.interval.ms", INT, 60000, at_least(0)),
    _d("log.flush.start.offset.checkpoint.interval.ms", INT, 60000, at_least(0)),
    _d("replica.high.watermark.checkpoint.interval.ms", LONG, 5000, at_least(0)),
    _d("num.recovery.threads.per.data.dir", INT, 2, at_least(1)),    # (log/read_ahead.py)
    _d("log.initial.task.delay.ms", LONG, 30000, at_least(0)),
    _d("log.cleaner.enable", BOOLEAN, True),
    _d("log.cleaner.threads", INT, 1, at_least(0)),
    _d("log.cleaner.dedupe.buffer.size", LONG, 128 * 1024 * 1024),
    _d("log.cleaner.io.buffer.size", INT, 512 * 1024, at_least(0)),
    _d("log.cleaner.io.buffer.load.factor", DOUBLE, 0.9),
    _d("log.cleaner.io.max.bytes.per.second", DOUBLE, DOUBLE_MAX),
    _d("log.cleaner.backoff.ms", LONG, 15000, at_least(0)),
    _d("producer.id.expiration.ms", INT, 86400000, at_least(1)),
    _d("producer.id.expiration.check.interval.ms", INT, 600000, at_least(1)),
    _d("transaction.max.timeout.ms", INT, 900000, at_least(1)),
    # the transaction coordinator's (kafkalog.coordinator.transaction_coordinator)
    _d("transaction.state.log.num.partitions", INT, 50, at_least(1)),
    # the group coordinator's (kafkalog.coordinator.offsets): for a new __consumer_offsets
    _d("offsets.topic.num.partitions", INT, 50, at_least(1)),
    _d("transaction.abort.timed.out.transaction.cleanup.interval.ms", INT, 10000, at_least(1)),
    _d("broker.id", INT, -1),
    _d("node.id", INT, -1),
]}

#: Types of the broker synonyms (same as their topic key, except the hours/minutes forms).
_BROKER_SYNONYM_DEFS: Dict[str, ConfigDef] = {}
for _b, (_t, _mult) in _SYNONYM_OF.items():
    _td = TOPIC_CONFIGS[_t]
    _type = INT if _mult != 1 else _td.type
    _BROKER_SYNONYM_DEFS[_b] = ConfigDef(_b, _type, None, None)


def _attr(name: str) -> str:
    return name.replace(".", "_")


class LogConfig:
    """The effective topic configuration of one log.

    Args:
        overrides: topic-level overrides by Kafka topic key (``{"segment.bytes": 1024}``; values
            may be strings as read from a properties file).
        broker: broker-level defaults by broker key (``{"log.retention.hours": 24}``) or a
            :class:`BrokerConfig`.

    Every topic key is available as an attribute with ``.`` replaced by ``_``; unknown keys or
    invalid values raise :class:`InvalidConfigError` naming the key.
    """

    segment_bytes: int
    segment_ms: int
    segment_jitter_ms: int
    segment_index_bytes: int
    index_interval_bytes: int
    flush_messages: int
    flush_ms: int
    retention_bytes: int
    retention_ms: int
    max_message_bytes: int
    file_delete_delay_ms: int
    delete_retention_ms: int
    min_compaction_lag_ms: int
    max_compaction_lag_ms: int
    min_cleanable_dirty_ratio: float
    cleanup_policy: List[str]
    compression_type: str
    compression_gzip_level: int
    compression_lz4_level: int
    compression_zstd_level: int
    preallocate: bool
    message_timestamp_type: str
    message_timestamp_difference_max_ms: int
    message_timestamp_before_max_ms: int
    message_timestamp_after_max_ms: int
    message_format_version: str
    message_downconversion_enable: bool
    min_insync_replicas: int
    unclean_leader_election_enable: bool
    local_retention_ms: int
    local_retention_bytes: int
    remote_storage_enable: bool
    remote_log_copy_disable: bool
    remote_log_delete_on_disable: bool
    leader_replication_throttled_replicas: List[str]
    follower_replication_throttled_replicas: List[str]
    retention_future_timestamp_policy: str
    retention_future_timestamp_tolerance_ms: int

    def __init__(self, overrides: Optional[Mapping[str, Any]] = None,
                 broker: Optional[Mapping[str, Any] | BrokerConfig] = None) -> None:
        overrides = dict(overrides or {})
        if isinstance(broker, BrokerConfig):
            broker_values = broker.synonym_values()
        else:
            broker_values = _resolve_broker_synonyms(broker or {}, strict=False)
        self._overrides: Dict[str, Any] = {}
        for key, raw in overrides.items():
            d = TOPIC_CONFIGS.get(key)
            if d is None:
                raise InvalidConfigError(f"Unknown topic config name: {key}")
            self._overrides[key] = _validated(d, raw)
        values: Dict[str, Any] = {}
        for key, d in TOPIC_CONFIGS.items():
            if key in self._overrides:
                values[key] = self._overrides[key]
            elif key in broker_values:
                values[key] = broker_values[key]
            else:
                values[key] = list(d.default) if isinstance(d.default, list) else d.default
        # message.timestamp.before.max.ms falls back to the deprecated difference.max.ms
        explicit_before = ("message.timestamp.before.max.ms" in self._overrides
                           or "message.timestamp.before.max.ms" in broker_values)
        explicit_diff = ("message.timestamp.difference.max.ms" in self._overrides
                         or "message.timestamp.difference.max.ms" in broker_values)
        if not explicit_before and explicit_diff:
            values["message.timestamp.before.max.ms"] = values["message.timestamp.difference.max.ms"]
        if values["min.compaction.lag.ms"] > values["max.compaction.lag.ms"]:
            raise InvalidConfigError(
                f"conflict topic config setting min.compaction.lag.ms "
                f"({values['min.compaction.lag.ms']}) > max.compaction.lag.ms "
                f"({values['max.compaction.lag.ms']})")
        self._values = values
        for key, v in values.items():
            object.__setattr__(self, _attr(key), v)

    # --- access ---------------------------------------------------------------------------------

    def get(self, key: str) -> Any:
        """The effective value of a topic key."""
        if key not in self._values:
            raise InvalidConfigError(f"Unknown topic config name: {key}")
        return self._values[key]

    def __getitem__(self, key: str) -> Any:
        return self.get(key)

    def values(self) -> Dict[str, Any]:
        """All effective values by topic key."""
        return {k: (list(v) if isinstance(v, list) else v) for k, v in self._values.items()}

    def to_dict(self) -> Dict[str, Any]:
        """The explicit topic overrides (typed), as given to the constructor."""
        return {k: (list(v) if isinstance(v, list) else v) for k, v in self._overrides.items()}

    def overridden(self, key: str) -> bool:
        """True when ``key`` was given as a topic override."""
        return key in self._overrides

    def with_overrides(self, more: Mapping[str, Any]) -> LogConfig:
        """A new config with ``more`` added to this one's overrides (broker defaults kept)."""
        new = dict(self._overrides)
        new.update(more)
        base = {k: v for k, v in self._values.items() if k not in self._overrides}
        # re-resolve: defaults/broker values of this config act as broker values
        broker_like = _TopicValues({k: v for k, v in base.items() if v != TOPIC_CONFIGS[k].default})
        return LogConfig(new, broker_like)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LogConfig) and self._values == other._values

    def __repr__(self) -> str:
        return f"LogConfig({self._overrides!r})"

    # --- derived --------------------------------------------------------------------------------

    @property
    def compact(self) -> bool:
        """``compact`` is in ``cleanup.policy``."""
        return COMPACT in self._values["cleanup.policy"]

    @property
    def delete(self) -> bool:
        """``delete`` is in ``cleanup.policy``."""
        return DELETE in self._values["cleanup.policy"]

    @property
    def max_segment_ms(self) -> int:
        """``segment.ms``, or ``min(max.compaction.lag.ms, segment.ms)`` for compacted topics with
        ``max.compaction.lag.ms > 0`` (Kafka's ``LogConfig.maxSegmentMs``)."""
        if self.compact and self.max_compaction_lag_ms > 0:
            return min(self.max_compaction_lag_ms, self.segment_ms)
        return self.segment_ms

    def random_segment_jitter(self, rng: Optional[random.Random] = None) -> int:
        """``abs(random int) % min(segment.jitter.ms, segment.ms)``, 0 when jitter is 0."""
        if self.segment_jitter_ms == 0:
            return 0
        r = (rng or random).randint(INT32_MIN, INT32_MAX)
        r = 0 if r == INT32_MIN else abs(r)  # Kafka's Utils.abs maps MIN_VALUE to 0
        return r % min(self.segment_jitter_ms, self.segment_ms)

    @property
    def init_file_size(self) -> int:
        """``segment.bytes`` when ``preallocate`` else 0."""
        return self.segment_bytes if self.preallocate else 0

    @property
    def log_append_time(self) -> bool:
        """``message.timestamp.type`` is ``LogAppendTime``."""
        return self.message_timestamp_type == LOG_APPEND_TIME

    @property
    def remote_log_enabled(self) -> bool:
        return self.remote_storage_enable

    # --- properties text ------------------------------------------------------------------------

    def to_properties(self) -> str:
        """The explicit overrides as ``key=value`` lines (sorted)."""
        return format_properties({k: format_value(TOPIC_CONFIGS[k].type, v)
                                  for k, v in self._overrides.items()})

    @classmethod
    def from_properties(cls, text: str, broker: Optional[Mapping[str, Any] | BrokerConfig] = None
                        ) -> LogConfig:
        """Parse ``key=value`` text (see :func:`parse_properties`) as topic overrides."""
        return cls(parse_properties(text), broker)


class _TopicValues(Dict[str, Any]):
    """Internal: already-resolved topic values passed as the 'broker' layer."""


def java_double(d: float) -> str:
    """``Double.toString``: Kafka names a refused double by its parsed value (``-3.0``, ``2.147483648E9``)."""
    if d != d or d in (float("inf"), float("-inf")):
        return "NaN" if d != d else ("Infinity" if d > 0 else "-Infinity")
    if d == 0 or 1e-3 <= abs(d) < 1e7:
        return repr(float(d))
    _sign, digits, exp = Decimal(repr(abs(d))).normalize().as_tuple()
    text = "".join(map(str, digits))
    return f"{'-' if d < 0 else ''}{text[0]}.{text[1:] or '0'}E{len(text) + int(exp) - 1}"


def _validated(d: ConfigDef, raw: Any) -> Any:
    v = parse_value(d.name, d.type, raw)
    if d.validator is not None:
        try:
            d.validator(v)
        except ValueError as e:
            shown = java_double(v) if d.type == DOUBLE else raw
            raise InvalidConfigError(f"Invalid value {shown} for configuration {d.name}: {e}") from None
    return v


def _resolve_broker_synonyms(broker: Mapping[str, Any], strict: bool) -> Dict[str, Any]:
    """topic key -> value from broker-level synonyms (first present synonym wins)."""
    if isinstance(broker, _TopicValues):
        return dict(broker)
    out: Dict[str, Any] = {}
    for key in broker:
        if key not in _SYNONYM_OF and key not in BROKER_ONLY_CONFIGS and strict:
            raise InvalidConfigError(f"Unknown broker config name: {key}")
    for topic_key, syns in BROKER_SYNONYMS.items():
        for bkey, mult in syns:
            if bkey in broker and broker[bkey] is not None:
                d = TOPIC_CONFIGS[topic_key]
                if mult == 1:
                    v = _validated(ConfigDef(bkey, d.type, None, d.validator), broker[bkey])
                else:
                    n = parse_value(bkey, INT, broker[bkey])
                    v = n * mult
                    if d.validator is not None:
                        try:
                            d.validator(v)
                        except ValueError as e:
                            raise InvalidConfigError(
                                f"Invalid value {broker[bkey]!r} for configuration {bkey}: {e}") from None
                out[topic_key] = v
                break
    return out


class BrokerConfig:
    """Broker-level storage settings: the broker-only keys of spec §4.13 (``log.cleaner.*``,
    ``log.retention.check.interval.ms`` ...) plus the broker synonyms of topic keys
    (``log.segment.bytes`` ...), which become the defaults of every :class:`LogConfig`.

    Attributes use the key with ``.`` replaced by ``_`` (``cfg.log_cleaner_threads``).
    ``strict=False`` ignores keys kafkalog does not know (a full ``server.properties``).
    """

    log_dirs: List[str]
    log_dir: str
    log_retention_check_interval_ms: int
    log_flush_offset_checkpoint_interval_ms: int
    log_flush_start_offset_checkpoint_interval_ms: int
    replica_high_watermark_checkpoint_interval_ms: int
    num_recovery_threads_per_data_dir: int
    log_initial_task_delay_ms: int
    log_cleaner_enable: bool
    log_cleaner_threads: int
    log_cleaner_dedupe_buffer_size: int
    log_cleaner_io_buffer_size: int
    log_cleaner_io_buffer_load_factor: float
    log_cleaner_io_max_bytes_per_second: float
    log_cleaner_backoff_ms: int
    producer_id_expiration_ms: int
    producer_id_expiration_check_interval_ms: int
    transaction_max_timeout_ms: int
    broker_id: int
    node_id: int
    log_flush_scheduler_interval_ms: int

    def __init__(self, values: Optional[Mapping[str, Any]] = None, *, strict: bool = True) -> None:
        values = dict(values or {})
        self._synonyms = _resolve_broker_synonyms(values, strict=strict)
        self._raw = values
        resolved: Dict[str, Any] = {}
        for key, d in BROKER_ONLY_CONFIGS.items():
            if key in values and values[key] is not None:
                resolved[key] = _validated(d, values[key])
            else:
                resolved[key] = list(d.default) if isinstance(d.default, list) else d.default
        if not resolved["log.dirs"]:
            resolved["log.dirs"] = [resolved["log.dir"]]
        self._values = resolved
        for k, v in resolved.items():
            object.__setattr__(self, _attr(k), v)
        ms = values.get("log.flush.scheduler.interval.ms")
        self.log_flush_scheduler_interval_ms = (parse_value("log.flush.scheduler.interval.ms", LONG, ms)
                                                if ms is not None else INT64_MAX)

    def synonym_values(self) -> Dict[str, Any]:
        """Topic key -> broker-level value for every topic key the broker sets."""
        return dict(self._synonyms)

    def explicit_value(self, key: str) -> Any:
        """The value this broker's configuration gives ``key`` as written (None when not set)."""
        return self._raw.get(key)

    def log_config(self, overrides: Optional[Mapping[str, Any]] = None) -> LogConfig:
        """A :class:`LogConfig` of ``overrides`` on top of this broker's defaults."""
        return LogConfig(overrides, self)

    def get(self, key: str) -> Any:
        """The value of a broker-only key."""
        if key not in self._values:
            raise InvalidConfigError(f"Unknown broker config name: {key}")
        return self._values[key]


# --- properties text ------------------------------------------------------------------------------

def _escape(s: str, key: bool) -> str:
    out = []
    for i, ch in enumerate(s):
        if ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ch in "=:#!" or (ch == " " and (key or i == 0)):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def format_properties(values: Mapping[str, str], comments: Iterable[str] = ()) -> str:
    """``key=value`` lines (keys sorted, Java-properties escaping), preceded by ``#`` comments."""
    lines = [f"#{c}" for c in comments]
    lines += [f"{_escape(k, True)}={_escape(str(v), False)}" for k, v in sorted(values.items())]
    return "\n".join(lines) + ("\n" if lines else "")


def parse_properties(text: str, *, file: Optional[str] = None) -> Dict[str, str]:
    """Parse Java ``.properties`` text: ``#``/``!`` comments, blank lines, ``key=value`` or
    ``key:value`` or ``key value``, backslash escapes and line continuations.

    Raises :class:`InvalidConfigError` (with the byte position) on a dangling escape.
    """
    out: Dict[str, str] = {}
    logical: List[Tuple[str, int]] = []
    pos = 0
    buf = ""
    start = 0
    for raw in text.splitlines(keepends=True):
        line = raw.rstrip("\r\n")
        if not buf:
            start = pos
            stripped = line.lstrip(" \t\f")
            if not stripped or stripped[0] in "#!":
                pos += len(raw.encode("utf-8"))
                continue
            line = stripped
        else:
            line = line.lstrip(" \t\f")
        pos += len(raw.encode("utf-8"))
        # odd number of trailing backslashes -> continuation
        n = len(line) - len(line.rstrip("\\"))
        if n % 2 == 1:
            buf += line[:-1]
            continue
        logical.append((buf + line, start))
        buf = ""
    if buf:
        logical.append((buf, start))
    for line, at in logical:
        key, i = _read_escaped(line, 0, "=: \t\f", file, at)
        while i < len(line) and line[i] in " \t\f":
            i += 1
        if i < len(line) and line[i] in "=:":
            i += 1
        while i < len(line) and line[i] in " \t\f":
            i += 1
        out[key], _ = _read_escaped(line, i, "", file, at)
    return out


def _read_escaped(line: str, i: int, stops: str, file: Optional[str], at: int) -> tuple[str, int]:
    """The characters of ``line`` from ``i`` up to an unescaped one of ``stops`` (or the end), with
    Java's escapes (``\\uxxxx``, ``\\n``...) undone, and where it stopped."""
    chars: List[str] = []
    while i < len(line):
        ch = line[i]
        if ch == "\\":
            i += 1
            if i >= len(line):
                break
            if line[i] == "u":
                hexs = line[i + 1:i + 5]
                if len(hexs) != 4 or not all(c in "0123456789abcdefABCDEF" for c in hexs):
                    raise InvalidConfigError("Malformed \\uxxxx encoding", file=file, position=at)
                chars.append(chr(int(hexs, 16)))
                i += 5
                continue
            chars.append(_unescape_char(line[i]))
        elif ch in stops:
            break
        else:
            chars.append(ch)
        i += 1
    return "".join(chars), i


def _unescape_char(ch: str) -> str:
    return {"n": "\n", "r": "\r", "t": "\t", "f": "\f"}.get(ch, ch)


def as_log_config(config: LogConfig | Mapping[str, Any] | None) -> LogConfig:
    """The :class:`LogConfig` of what a public entry point was given: a ``LogConfig`` itself, topic
    overrides by Kafka key (validated; an unknown key raises :class:`InvalidConfigError`), or None
    (Kafka's defaults). Inside the log layer only ``LogConfig`` travels."""
    if isinstance(config, LogConfig):
        return config
    return LogConfig(config)
