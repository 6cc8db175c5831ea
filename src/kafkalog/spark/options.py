"""Parsing and validation of the ``kafkalog`` source and sink options.

Option names are those of Spark's Kafka source and sink (``subscribe``, ``startingOffsets``,
``failOnDataLoss``, ...). Spark hands options over as a case-insensitive mapping of strings; every
parser here takes that mapping (or any ``Mapping[str, str]``) and looks keys up case-insensitively.
Invalid values raise :class:`InvalidOptionError` naming the option.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from kafkalog.errors import InvalidConfigError, InvalidOptionError
from kafkalog.log.fsutil import local_path, refuse_remote_write
from kafkalog.record.constants import PRODUCER_COMPRESSION_TYPES, IsolationLevel
from kafkalog.spark.log_view import configure_tiered
from kafkalog.tiered.filesystem import FS_OPTIONS, files_for
from kafkalog.tiered.remote_segments import RemoteStorage, remote_storage_from_options

_log = logging.getLogger("kafkalog.spark")

TopicPartition = tuple[str, int]

EARLIEST = -2
LATEST = -1

#: Options that only make sense against a broker (where to connect, how to authenticate, how the
#: Kafka consumer/producer polls, which consumer group it joins): a job moved from a broker to a
#: directory of logs keeps them, and they have nothing to act on here. Any other option that is
#: not one of the source's or sink's is refused (:func:`check_option_names`).
BROKER_ONLY_OPTIONS = (
    "kafka.bootstrap.servers", "kafkaconsumer.polltimeoutms", "fetchoffset.numretries",
    "fetchoffset.retryintervalms", "groupidprefix", "kafka.group.id", "kafka.client.id",
    "kafka.security.protocol", "kafka.session.timeout.ms", "kafka.request.timeout.ms",
    "kafka.default.api.timeout.ms", "kafka.acks", "kafka.linger.ms", "kafka.retries",
    "kafka.delivery.timeout.ms", "kafka.max.poll.records", "kafka.fetch.max.bytes",
    "kafka.max.partition.fetch.bytes", "kafka.receive.buffer.bytes", "kafka.send.buffer.bytes",
)
#: Prefixes of broker-only options (TLS and SASL settings of the connection).
BROKER_ONLY_PREFIXES = ("kafka.ssl.", "kafka.sasl.")

#: Options of ``spark.read`` / ``spark.readStream`` ``.format("kafkalog")`` (lower case).
SOURCE_OPTIONS = (
    "path", "subscribe", "subscribePattern", "assign", "startingOffsets", "endingOffsets",
    "startingTimestamp", "startingOffsetsByTimestamp", "endingTimestamp",
    "endingOffsetsByTimestamp", "startingOffsetsByTimestampStrategy", "minPartitions",
    "maxRecordsPerPartition", "maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay",
    "maxBytesPerTrigger", "failOnDataLoss", "includeHeaders", "kafka.isolation.level",
    "isolation.level", "maxRecordsPerBatch", "pushFilters",
    # Kafka's tiered storage (kafkalog.tiered.remote_segments)
    "remoteStorage", "remoteStorage.layout", "remoteStorage.topicId",
    "remoteStorage.privateKeyFile",
)
#: Options of ``df.write`` / ``writeStream`` ``.format("kafkalog")`` besides ``topic.<config>``.
SINK_OPTIONS = (
    "path", "topic", "partitions", "kafka.compression.type", "compression.type",
    "kafka.batch.size", "batch.size", "includeHeaders", "sinkId", "checkpointLocation",
)

#: Kafka consumer settings Spark's Kafka source refuses, with Spark's messages
#: (``KafkaSourceProvider.validateGeneralOptions``).
FORBIDDEN_SOURCE_OPTIONS = {
    "kafka.auto.offset.reset": (
        "Kafka option 'auto.offset.reset' is not supported.\n"
        "Instead set the source option 'startingoffsets' to 'earliest' or 'latest'\n"
        "to specify where to start. Structured Streaming manages which offsets are consumed\n"
        "internally, rather than relying on the kafkaConsumer to do it. This will ensure that no\n"
        "data is missed when new topics/partitions are dynamically subscribed. Note that\n"
        "'startingoffsets' only applies when a new Streaming query is started, and\n"
        "that resuming will always pick up from where the query left off. See the docs for more\n"
        "details."),
    "kafka.key.deserializer": (
        "Kafka option 'key.deserializer' is not supported as keys are deserialized as byte "
        "arrays with ByteArrayDeserializer. Use DataFrame operations to explicitly deserialize "
        "the keys."),
    "kafka.value.deserializer": (
        "Kafka option 'value.deserializer' is not supported as values are deserialized as byte "
        "arrays with ByteArrayDeserializer. Use DataFrame operations to explicitly deserialize "
        "the values."),
    "kafka.enable.auto.commit": "Kafka option 'enable.auto.commit' is not supported",
    "kafka.interceptor.classes": "Kafka option 'interceptor.classes' is not supported",
}
#: Kafka producer settings Spark's Kafka sink refuses (``kafkaParamsForProducer``), and the
#: partitioner, which cannot run here (kafkalog places keyed rows with Kafka's default one).
FORBIDDEN_SINK_OPTIONS = {
    "kafka.key.serializer": ("Kafka option 'key.serializer' is not supported as keys are "
                             "serialized with ByteArraySerializer."),
    "kafka.value.serializer": ("Kafka option 'value.serializer' is not supported as value are "
                               "serialized with ByteArraySerializer."),
    "kafka.partitioner.class": (
        "Kafka option 'partitioner.class' is not supported: kafkalog places rows with a key and "
        "no partition with Kafka's default partitioner (murmur2 of the key); give rows a "
        "'partition' column to place them otherwise."),
    "kafka.interceptor.classes": "Kafka option 'interceptor.classes' is not supported",
}


def check_option_names(opts: Mapping[str, str], names: tuple[str, ...],
                       forbidden: Mapping[str, str], what: str, *,
                       prefixes: tuple[str, ...] = ()) -> None:
    """Refuse a ``forbidden`` option with its message and any option that is neither one of
    ``names`` (case-insensitive), under one of ``prefixes``, nor broker-only. ``opts`` has
    lower-case keys."""
    known = {n.lower() for n in names}
    for name in sorted(opts):
        if name in forbidden:
            raise InvalidOptionError(forbidden[name])
    for name in sorted(opts):
        if (name in known or name in BROKER_ONLY_OPTIONS or name.startswith(prefixes)
                or name.startswith(BROKER_ONLY_PREFIXES)):
            continue
        raise InvalidOptionError(
            f"unknown option '{name}' for the kafkalog {what}: the options are "
            f"{', '.join(n for n in names if n != 'path')}"
            f"{''.join(', ' + p + '<name>' for p in prefixes)} and broker-only options such as "
            "kafka.bootstrap.servers (see docs/spark.md)")


def _remote_storage(opts: Mapping[str, str]) -> RemoteStorage | None:
    """``remoteStorage*`` options (:class:`InvalidOptionError` when refused)."""
    try:
        return remote_storage_from_options(opts)
    except InvalidConfigError as err:
        raise InvalidOptionError(err.message) from None


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): ("" if v is None else str(v)) for k, v in options.items()}


def _get(opts: dict[str, str], name: str) -> str | None:
    value = opts.get(name.lower())
    if value is None or value.strip() == "":
        return None
    return value.strip()


def _bool(opts: dict[str, str], name: str, default: bool) -> bool:
    value = _get(opts, name)
    if value is None:
        return default
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise InvalidOptionError(f"option '{name}' must be 'true' or 'false', got {value!r}")


def _int(opts: dict[str, str], name: str, *, minimum: int | None = None) -> int | None:
    value = _get(opts, name)
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        raise InvalidOptionError(f"option '{name}' must be an integer, got {value!r}") from None
    if minimum is not None and number < minimum:
        raise InvalidOptionError(f"option '{name}' must be >= {minimum}, got {number}")
    return number


_TIME_UNITS_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000,
                  "d": 86_400_000}
_BYTE_UNITS = {"b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "g": 1 << 30,
               "gb": 1 << 30, "t": 1 << 40, "tb": 1 << 40}


def _with_unit(opts: dict[str, str], name: str, units: Mapping[str, float], default_unit: str,
               kind: str) -> int | None:
    """A number with an optional unit suffix, as Spark's ``timeStringAsMs`` /
    ``byteStringAsBytes`` read them (``15m``, ``500ms``, ``64m``, ``1g``; no unit means
    ``default_unit``), converted to that unit's base (ms, bytes)."""
    value = _get(opts, name)
    if value is None:
        return None
    match = re.fullmatch(r"([0-9]+)\s*([a-z]*)", value.lower())
    if match is None or (match.group(2) or default_unit) not in units:
        raise InvalidOptionError(f"option '{name}' must be a {kind} such as "
                                 f"{'15m, 30s or 500ms' if kind == 'duration' else '64m, 1g or 1048576'}"
                                 f" (units {', '.join(units)}), got {value!r}")
    return int(int(match.group(1)) * units[match.group(2) or default_unit])


def _json_obj(name: str, value: str) -> dict:
    try:
        obj = json.loads(value)
    except json.JSONDecodeError as err:
        raise InvalidOptionError(f"option '{name}' is not valid JSON ({err.msg} at char {err.pos}): "
                                 f"{value!r}") from None
    if not isinstance(obj, dict):
        raise InvalidOptionError(f"option '{name}' must be a JSON object, got {value!r}")
    return obj


def parse_partition_offsets(name: str, value: str) -> dict[TopicPartition, int]:
    """Parse Kafka-source JSON ``{"topicA":{"0":23,"1":-1}}`` into ``{(topic, partition): n}``."""
    result: dict[TopicPartition, int] = {}
    for topic, parts in _json_obj(name, value).items():
        if not isinstance(parts, dict):
            raise InvalidOptionError(f"option '{name}': topic {topic!r} must map to an object of "
                                     f"partition -> offset, got {parts!r}")
        for p, off in parts.items():
            try:
                partition = int(p)
            except (TypeError, ValueError):
                raise InvalidOptionError(f"option '{name}': partition {p!r} of topic {topic!r} "
                                         "is not an integer") from None
            if isinstance(off, bool) or not isinstance(off, int):
                raise InvalidOptionError(f"option '{name}': value for {topic}-{partition} must be "
                                         f"an integer, got {off!r}")
            result[(topic, partition)] = off
    return result


def parse_assign(value: str) -> list[TopicPartition]:
    """Parse ``assign`` JSON ``{"topicA":[0,1],"topicB":[2,4]}``."""
    result: list[TopicPartition] = []
    for topic, parts in _json_obj("assign", value).items():
        if not isinstance(parts, list) or not all(isinstance(p, int) and not isinstance(p, bool)
                                                  for p in parts):
            raise InvalidOptionError(f"option 'assign': topic {topic!r} must map to a list of "
                                     f"partition numbers, got {parts!r}")
        result.extend((topic, p) for p in parts)
    return result


@dataclass(frozen=True)
class OffsetSpec:
    """One of: ``earliest``, ``latest``, per-partition offsets, a global timestamp, per-partition
    timestamps. ``kind`` is ``"earliest" | "latest" | "offsets" | "timestamp" | "timestamps"``."""
    kind: str
    offsets: dict[TopicPartition, int] = field(default_factory=dict)
    timestamp: int | None = None

    def for_partition(self, tp: TopicPartition, default_kind: str) -> tuple[str, int]:
        """``("offset", n)`` / ``("timestamp", ts)`` for one partition; -2/-1 mean earliest/latest."""
        if self.kind == "earliest":
            return ("offset", EARLIEST)
        if self.kind == "latest":
            return ("offset", LATEST)
        if self.kind == "timestamp":
            return ("timestamp", self.timestamp or 0)
        if tp in self.offsets:
            return ("timestamp" if self.kind == "timestamps" else "offset", self.offsets[tp])
        return ("offset", EARLIEST if default_kind == "earliest" else LATEST)


def _offset_spec(opts: dict[str, str], prefix: str, default: str, *, streaming: bool) -> OffsetSpec:
    ts = _get(opts, f"{prefix}Timestamp")
    if ts is not None:
        number = _int(opts, f"{prefix}Timestamp", minimum=0)
        return OffsetSpec("timestamp", timestamp=number)
    by_ts = _get(opts, f"{prefix}OffsetsByTimestamp")
    if by_ts is not None:
        parsed = parse_partition_offsets(f"{prefix}OffsetsByTimestamp", by_ts)
        for tp, t in parsed.items():
            if t < 0:
                raise InvalidOptionError(f"option '{prefix}OffsetsByTimestamp': timestamp for "
                                         f"{tp[0]}-{tp[1]} must be >= 0, got {t}")
        return OffsetSpec("timestamps", offsets=parsed)
    name = f"{prefix}Offsets"
    value = _get(opts, name)
    if value is None:
        return OffsetSpec(default)
    if value.lower() in ("earliest", "latest"):
        return OffsetSpec(value.lower())
    parsed = parse_partition_offsets(name, value)
    for tp, off in parsed.items():
        if off < EARLIEST:
            raise InvalidOptionError(f"option '{name}': offset {off} for {tp[0]}-{tp[1]} is invalid "
                                     "(use >= 0, -2 for earliest or -1 for latest)")
    return OffsetSpec("offsets", offsets=parsed)


#: Spark's default ``maxTriggerDelay`` (15m).
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000

#: Options Spark's Kafka source accepts in batch queries and ignores with a warning.
STREAMING_ONLY_OPTIONS = ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay",
                          "maxBytesPerTrigger")


@dataclass(frozen=True)
class ReadOptions:
    """Validated options of a batch or streaming read."""
    path: str
    subscribe: tuple[str, ...] | None = None
    subscribe_pattern: str | None = None
    assign: tuple[TopicPartition, ...] | None = None
    starting: OffsetSpec = OffsetSpec("earliest")
    ending: OffsetSpec = OffsetSpec("latest")
    starting_by_timestamp_strategy: str = "error"
    min_partitions: int | None = None
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    read_committed: bool = False
    max_records_per_batch: int = 65536
    max_records_per_partition: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    max_bytes_per_trigger: int | None = None
    fs_options: tuple[tuple[str, str], ...] = ()
    remote_storage: RemoteStorage | None = None

    def configure_files(self) -> None:
        """Configure the file system of a URI :attr:`path` from the ``fs.*`` options, and the
        tiered storage of its partitions (each process of the read: the planner, the streaming
        driver, every task)."""
        files_for(self.path, dict(self.fs_options))
        configure_tiered(self.path, self.remote_storage, self.fail_on_data_loss)

    def matches_topic(self, topic: str) -> bool:
        """True if ``topic`` is selected by ``subscribe`` / ``subscribePattern`` / ``assign``."""
        if self.subscribe is not None:
            return topic in self.subscribe
        if self.subscribe_pattern is not None:
            return re.fullmatch(self.subscribe_pattern, topic) is not None
        return any(t == topic for t, _ in (self.assign or ()))


def parse_read_options(options: Mapping[str, str], *, streaming: bool = False) -> ReadOptions:
    """Validate the options of ``spark.read`` / ``spark.readStream`` ``.format("kafkalog")``."""
    opts = _lower(options)
    check_option_names(opts, SOURCE_OPTIONS + FS_OPTIONS, FORBIDDEN_SOURCE_OPTIONS, "source")
    path = _get(opts, "path")
    if path is None:
        raise InvalidOptionError("no data directory: use .load(DATA_DIR) or .option('path', DATA_DIR)")
    path = local_path(path)
    chosen = [n for n in ("subscribe", "subscribePattern", "assign") if _get(opts, n) is not None]
    if len(chosen) != 1:
        raise InvalidOptionError("exactly one of the options 'subscribe', 'subscribePattern' or "
                                 f"'assign' must be given, got {chosen or 'none'}")
    subscribe = pattern = assign = None
    strategy_value = _get(opts, chosen[0]) or ""
    if chosen[0] == "subscribe":
        subscribe = tuple(t.strip() for t in strategy_value.split(",") if t.strip())
        if not subscribe:
            raise InvalidOptionError("option 'subscribe' names no topic")
    elif chosen[0] == "subscribePattern":
        pattern = strategy_value
        try:
            re.compile(pattern)
        except re.error as err:
            raise InvalidOptionError(f"option 'subscribePattern' is not a valid pattern: {err}") from None
    else:
        assign = tuple(parse_assign(strategy_value))

    starting = _offset_spec(opts, "starting", "latest" if streaming else "earliest", streaming=streaming)
    ending = _offset_spec(opts, "ending", "latest", streaming=streaming)
    if not streaming:
        if starting.kind == "latest" or (starting.kind == "offsets"
                                         and LATEST in starting.offsets.values()):
            raise InvalidOptionError("option 'startingOffsets': latest (-1) is not allowed for batch "
                                     "queries")
        if ending.kind == "earliest" or (ending.kind == "offsets"
                                         and EARLIEST in ending.offsets.values()):
            raise InvalidOptionError("option 'endingOffsets': earliest (-2) is not allowed for batch "
                                     "queries")
    else:
        for name in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
            if _get(opts, name) is not None:
                raise InvalidOptionError(f"option '{name}' is not supported by streaming queries")
    strategy = (_get(opts, "startingOffsetsByTimestampStrategy") or "error").lower()
    if strategy not in ("error", "latest"):
        raise InvalidOptionError("option 'startingOffsetsByTimestampStrategy' must be 'error' or "
                                 f"'latest', got {strategy!r}")
    isolation_name = _get(opts, "kafka.isolation.level") or _get(opts, "isolation.level")
    try:
        isolation = IsolationLevel.of(isolation_name or IsolationLevel.READ_UNCOMMITTED)
    except ValueError:
        names = " or ".join(f"'{level.config_name}'" for level in IsolationLevel)
        raise InvalidOptionError(f"option 'kafka.isolation.level' must be {names}, "
                                 f"got {isolation_name!r}") from None
    if not streaming:
        check_offset_limits(starting, ending)
    min_partitions = _int(opts, "minPartitions", minimum=1)
    max_per_trigger = _int(opts, "maxOffsetsPerTrigger", minimum=1)
    min_per_trigger = _int(opts, "minOffsetsPerTrigger", minimum=1)
    if min_per_trigger is not None and max_per_trigger is not None \
            and min_per_trigger > max_per_trigger:
        raise InvalidOptionError(f"The value of minOffsetPerTrigger({min_per_trigger}) is higher "
                                 f"than the maxOffsetsPerTrigger({max_per_trigger}).")
    delay = _with_unit(opts, "maxTriggerDelay", _TIME_UNITS_MS, "ms", "duration")
    max_bytes = _with_unit(opts, "maxBytesPerTrigger", _BYTE_UNITS, "b", "size in bytes")
    if max_bytes == 0:
        raise InvalidOptionError("option 'maxBytesPerTrigger' must be > 0")
    if not streaming:
        for name in STREAMING_ONLY_OPTIONS:
            if _get(opts, name) is not None:
                _log.warning("%s option ignored in batch queries", name)
    batch_rows = _int(opts, "maxRecordsPerBatch", minimum=1) or 65536
    fs_options = tuple(sorted((k, v) for k, v in opts.items() if k in FS_OPTIONS))
    read = ReadOptions(
        path=path, subscribe=subscribe, subscribe_pattern=pattern, assign=assign,
        starting=starting, ending=ending, starting_by_timestamp_strategy=strategy,
        min_partitions=min_partitions, max_offsets_per_trigger=max_per_trigger,
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        include_headers=_bool(opts, "includeHeaders", False),
        read_committed=isolation is IsolationLevel.READ_COMMITTED, max_records_per_batch=batch_rows,
        max_records_per_partition=_int(opts, "maxRecordsPerPartition", minimum=1),
        min_offsets_per_trigger=min_per_trigger,
        max_trigger_delay_ms=DEFAULT_MAX_TRIGGER_DELAY_MS if delay is None else delay,
        max_bytes_per_trigger=max_bytes, fs_options=fs_options,
        remote_storage=_remote_storage(opts),
    )
    read.configure_files()
    return read


def _tp_set(tps) -> str:
    return "[" + ", ".join(f"{t}-{p}" for t, p in sorted(tps)) + "]"


def check_offset_limits(starting: OffsetSpec, ending: OffsetSpec) -> None:
    """Spark's ``checkOffsetLimitValidity``: per-partition start and end offsets (or start and end
    timestamps) must name the same topic-partitions, and no start may exceed its end (-2/-1 are
    not compared)."""
    pairs = (("offsets", "offset", "OFFSET"), ("timestamps", "timestamp", "TIMESTAMP"))
    for kind, word, upper in pairs:
        if starting.kind != kind or ending.kind != kind:
            continue
        if set(starting.offsets) != set(ending.offsets):
            raise InvalidOptionError(
                "[MISMATCHED_TOPIC_PARTITIONS_BETWEEN_START_OFFSET_AND_END_OFFSET] The specified "
                "start offset and end offset should have the same topic-partitions. "
                f"Topic-partitions for start offset: {_tp_set(starting.offsets)}, "
                f"topic-partitions for end offset: {_tp_set(ending.offsets)}.")
        for (topic, partition), start in sorted(starting.offsets.items()):
            end = ending.offsets[(topic, partition)]
            if start > end and start >= 0 and end >= 0:
                raise InvalidOptionError(
                    f"[UNRESOLVED_START_{upper}_GREATER_THAN_END_{upper}] The specified start "
                    f"{word} {start} is greater than the end {word} {end} for topic {topic} "
                    f"partition {partition}.")


_CODECS = PRODUCER_COMPRESSION_TYPES + ("producer", "uncompressed")


#: ``kafka.batch.size`` of the sink: as big as the topic accepts (capped by its
#: ``max.message.bytes``, 1 MiB by default). Kafka's producer default (16384) trades throughput
#: for latency; a bulk write has no latency to save, and bigger batches mean fewer headers to
#: write, rewrite (offsets at commit) and read, and better compression.
DEFAULT_BATCH_SIZE = 1 << 20


@dataclass(frozen=True)
class WriteOptions:
    """Validated options of ``df.write`` / ``writeStream`` ``.format("kafkalog")``."""
    path: str
    topic: str | None = None
    partitions: int = 1
    compression_type: str = "none"
    batch_size: int = DEFAULT_BATCH_SIZE
    topic_config: tuple[tuple[str, str], ...] = ()
    include_headers: bool = True

    @property
    def topic_config_dict(self) -> dict[str, str]:
        return dict(self.topic_config)


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    """Validate sink options: ``topic``, ``partitions`` (count for a topic this write creates),
    ``kafka.compression.type`` (or ``compression.type``), ``kafka.batch.size`` (bytes of records per
    batch, default :data:`DEFAULT_BATCH_SIZE`), and ``topic.<key>`` topic configs (e.g. ``topic.cleanup.policy``)."""
    opts = _lower(options)
    check_option_names(opts, SINK_OPTIONS, FORBIDDEN_SINK_OPTIONS, "sink", prefixes=("topic.",))
    path = _get(opts, "path")
    if path is None:
        raise InvalidOptionError("no data directory: use .save(DATA_DIR) or .option('path', DATA_DIR)")
    refuse_remote_write(path, "the kafkalog sink (a Spark write)")
    path = local_path(path)
    codec = (_get(opts, "kafka.compression.type") or _get(opts, "compression.type") or "none").lower()
    if codec not in _CODECS:
        raise InvalidOptionError(f"option 'kafka.compression.type' must be one of "
                                 f"{', '.join(_CODECS[:5])}, got {codec!r}")
    if codec in ("producer", "uncompressed"):
        codec = "none"
    batch_size = _int(opts, "kafka.batch.size", minimum=1)
    if batch_size is None:
        batch_size = _int(opts, "batch.size", minimum=1) or DEFAULT_BATCH_SIZE
    config = tuple(sorted((k[len("topic."):], v) for k, v in opts.items()
                          if k.startswith("topic.") and len(k) > len("topic.")))
    return WriteOptions(
        path=path, topic=_get(opts, "topic"), partitions=_int(opts, "partitions", minimum=1) or 1,
        compression_type=codec, batch_size=batch_size, topic_config=config,
        include_headers=_bool(opts, "includeHeaders", True),
    )
