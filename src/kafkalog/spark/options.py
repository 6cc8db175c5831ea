"""Parsing and validation of the ``kafkalog`` source and sink options.

Option names are those of Spark's Kafka source and sink (``subscribe``, ``startingOffsets``,
``failOnDataLoss``, ...). Spark hands options over as a case-insensitive mapping of strings; every
parser here takes that mapping (or any ``Mapping[str, str]``) and looks keys up case-insensitively.
Invalid values raise :class:`InvalidOptionError` naming the option.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Tuple

from kafkalog.errors import InvalidConfigError
from kafkalog.record.constants import PRODUCER_COMPRESSION_TYPES

TopicPartition = Tuple[str, int]

EARLIEST = -2
LATEST = -1

#: Options that only make sense against a broker; accepted and ignored, as a job moved from a
#: broker to a directory of logs keeps them.
BROKER_ONLY_OPTIONS = (
    "kafka.bootstrap.servers", "kafkaconsumer.polltimeoutms", "fetchoffset.numretries",
    "fetchoffset.retryintervalms", "groupidprefix", "kafka.group.id",
)


class InvalidOptionError(InvalidConfigError):
    """An option of the kafkalog Spark source or sink has an invalid value or combination."""


def _lower(options: Mapping[str, str]) -> Dict[str, str]:
    return {str(k).lower(): ("" if v is None else str(v)) for k, v in options.items()}


def _get(opts: Dict[str, str], name: str) -> Optional[str]:
    value = opts.get(name.lower())
    if value is None or value.strip() == "":
        return None
    return value.strip()


def _bool(opts: Dict[str, str], name: str, default: bool) -> bool:
    value = _get(opts, name)
    if value is None:
        return default
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise InvalidOptionError(f"option '{name}' must be 'true' or 'false', got {value!r}")


def _int(opts: Dict[str, str], name: str, *, minimum: Optional[int] = None) -> Optional[int]:
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


def _json_obj(name: str, value: str) -> dict:
    try:
        obj = json.loads(value)
    except json.JSONDecodeError as err:
        raise InvalidOptionError(f"option '{name}' is not valid JSON ({err.msg} at char {err.pos}): "
                                 f"{value!r}") from None
    if not isinstance(obj, dict):
        raise InvalidOptionError(f"option '{name}' must be a JSON object, got {value!r}")
    return obj


def parse_partition_offsets(name: str, value: str) -> Dict[TopicPartition, int]:
    """Parse Kafka-source JSON ``{"topicA":{"0":23,"1":-1}}`` into ``{(topic, partition): n}``."""
    result: Dict[TopicPartition, int] = {}
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


def parse_assign(value: str) -> List[TopicPartition]:
    """Parse ``assign`` JSON ``{"topicA":[0,1],"topicB":[2,4]}``."""
    result: List[TopicPartition] = []
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
    offsets: Dict[TopicPartition, int] = field(default_factory=dict)
    timestamp: Optional[int] = None

    def for_partition(self, tp: TopicPartition, default_kind: str) -> Tuple[str, int]:
        """``("offset", n)`` / ``("timestamp", ts)`` for one partition; -2/-1 mean earliest/latest."""
        if self.kind == "earliest":
            return ("offset", EARLIEST)
        if self.kind == "latest":
            return ("offset", LATEST)
        if self.kind == "timestamp":
            return ("timestamp", int(self.timestamp))
        if tp in self.offsets:
            return ("timestamp" if self.kind == "timestamps" else "offset", self.offsets[tp])
        return ("offset", EARLIEST if default_kind == "earliest" else LATEST)


def _offset_spec(opts: Dict[str, str], prefix: str, default: str, *, streaming: bool) -> OffsetSpec:
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


@dataclass(frozen=True)
class ReadOptions:
    """Validated options of a batch or streaming read."""
    path: str
    subscribe: Optional[Tuple[str, ...]] = None
    subscribe_pattern: Optional[str] = None
    assign: Optional[Tuple[TopicPartition, ...]] = None
    starting: OffsetSpec = OffsetSpec("earliest")
    ending: OffsetSpec = OffsetSpec("latest")
    starting_by_timestamp_strategy: str = "error"
    min_partitions: Optional[int] = None
    max_offsets_per_trigger: Optional[int] = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    read_committed: bool = False
    max_records_per_batch: int = 65536

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
    path = _get(opts, "path")
    if path is None:
        raise InvalidOptionError("no data directory: use .load(DATA_DIR) or .option('path', DATA_DIR)")
    chosen = [n for n in ("subscribe", "subscribePattern", "assign") if _get(opts, n) is not None]
    if len(chosen) != 1:
        raise InvalidOptionError("exactly one of the options 'subscribe', 'subscribePattern' or "
                                 f"'assign' must be given, got {chosen or 'none'}")
    subscribe = pattern = assign = None
    if chosen[0] == "subscribe":
        subscribe = tuple(t.strip() for t in _get(opts, "subscribe").split(",") if t.strip())
        if not subscribe:
            raise InvalidOptionError("option 'subscribe' names no topic")
    elif chosen[0] == "subscribePattern":
        pattern = _get(opts, "subscribePattern")
        try:
            re.compile(pattern)
        except re.error as err:
            raise InvalidOptionError(f"option 'subscribePattern' is not a valid pattern: {err}") from None
    else:
        assign = tuple(parse_assign(_get(opts, "assign")))

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
    isolation = (_get(opts, "kafka.isolation.level") or _get(opts, "isolation.level")
                 or "read_uncommitted").lower()
    if isolation not in ("read_committed", "read_uncommitted"):
        raise InvalidOptionError("option 'kafka.isolation.level' must be 'read_committed' or "
                                 f"'read_uncommitted', got {isolation!r}")
    min_partitions = _int(opts, "minPartitions", minimum=1)
    max_per_trigger = _int(opts, "maxOffsetsPerTrigger", minimum=1)
    batch_rows = _int(opts, "maxRecordsPerBatch", minimum=1) or 65536
    return ReadOptions(
        path=path, subscribe=subscribe, subscribe_pattern=pattern, assign=assign,
        starting=starting, ending=ending, starting_by_timestamp_strategy=strategy,
        min_partitions=min_partitions, max_offsets_per_trigger=max_per_trigger,
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        include_headers=_bool(opts, "includeHeaders", False),
        read_committed=isolation == "read_committed", max_records_per_batch=batch_rows,
    )


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
    topic: Optional[str] = None
    partitions: int = 1
    compression_type: str = "none"
    batch_size: int = DEFAULT_BATCH_SIZE
    topic_config: Tuple[Tuple[str, str], ...] = ()
    include_headers: bool = True

    @property
    def topic_config_dict(self) -> Dict[str, str]:
        return dict(self.topic_config)


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    """Validate sink options: ``topic``, ``partitions`` (count for a topic this write creates),
    ``kafka.compression.type`` (or ``compression.type``), ``kafka.batch.size`` (bytes of records per
    batch, default :data:`DEFAULT_BATCH_SIZE`), and ``topic.<key>`` topic configs (e.g. ``topic.cleanup.policy``)."""
    opts = _lower(options)
    path = _get(opts, "path")
    if path is None:
        raise InvalidOptionError("no data directory: use .save(DATA_DIR) or .option('path', DATA_DIR)")
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
