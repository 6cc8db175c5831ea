"""Client telemetry (KIP-714) with a receiver: Kafka's ``ClientMetricsManager`` semantics, the pushed
metrics kept per client instance for the metrics endpoint (:mod:`.telemetry_export`).

Only while the broker's metrics endpoint is on (otherwise :mod:`.telemetry` answers as Kafka 4.4
without a plugin). One subscription for every client, from the broker's keys (docs/server.md):
``client.metrics.subscription.metrics`` (metric name prefixes; ``*`` for all) and
``client.metrics.subscription.interval.ms`` (Kafka's default 5 minutes, 100 ms to 1 hour), with
``telemetry.max.bytes`` (Kafka's key and default).

Kafka's rules, request by request:

* GetTelemetrySubscriptions: a zero or null ``client_instance_id`` gets a new one; the subscription
  id is Kafka's (CRC32C of the metrics and the interval, XOR the instance id's hash). A second
  request within the push interval of the instance's last request gets THROTTLING_QUOTA_EXCEEDED,
  unless its last push failed with UNKNOWN_SUBSCRIPTION_ID or UNSUPPORTED_COMPRESSION_TYPE.
* PushTelemetry, checked in Kafka's order: a reserved instance id (zero, one) INVALID_REQUEST; a
  push after a terminating one INVALID_REQUEST; within the push interval of the last accepted push
  (the first push after a GetTelemetrySubscriptions is always on time) THROTTLING_QUOTA_EXCEEDED,
  unless terminating; another subscription id UNKNOWN_SUBSCRIPTION_ID; an unknown codec
  UNSUPPORTED_COMPRESSION_TYPE; a payload over ``telemetry.max.bytes`` TELEMETRY_TOO_LARGE (also
  when it decompresses to more); a payload that does not decompress or parse INVALID_RECORD (what
  Kafka answers when its exporter plugin throws).
* An instance not heard from for ``max(client.metrics.cache.expiry.ms, 3 x push interval)``
  (Kafka's 60 s cache expiry) is forgotten with its series: one timer per instance, moved on each
  request (no periodic sweep). At most 16384 instances are kept (Kafka's cache size), the least
  recently heard from forgotten first, and at most ``client.metrics.max.series`` series in all (a
  push beyond it keeps its instance's previous series and is logged).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kafkalog.record.crc import crc32c
from kafkalog.server import error_codes as ec
from kafkalog.server.metrics.telemetry_payload import InvalidTelemetry, Series, TelemetryTooLarge, decode, series_of

logger = logging.getLogger("kafkalog.server.metrics.client_metrics")

THROTTLING_QUOTA_EXCEEDED = 89
UNKNOWN_SUBSCRIPTION_ID = 117
TELEMETRY_TOO_LARGE = 118
#: the names of the codes a push is answered with (Kafka's ``Errors``)
ERROR_NAMES = {ec.NONE: "NONE", ec.INVALID_REQUEST: "INVALID_REQUEST",
               ec.UNSUPPORTED_COMPRESSION_TYPE: "UNSUPPORTED_COMPRESSION_TYPE", ec.INVALID_RECORD: "INVALID_RECORD",
               THROTTLING_QUOTA_EXCEEDED: "THROTTLING_QUOTA_EXCEEDED",
               UNKNOWN_SUBSCRIPTION_ID: "UNKNOWN_SUBSCRIPTION_ID", TELEMETRY_TOO_LARGE: "TELEMETRY_TOO_LARGE"}
#: Kafka's ``SUPPORTED_COMPRESSION_TYPES``: zstd, lz4, gzip, snappy (the client takes the first it has)
ACCEPTED_COMPRESSION_TYPES = (4, 3, 1, 2)
#: Kafka's ``CompressionType`` ids (none, gzip, snappy, lz4, zstd)
KNOWN_COMPRESSION_TYPES = frozenset(range(5))
#: Kafka's ``CACHE_MAX_SIZE``
MAX_INSTANCES = 16384
ALL_METRICS = "*"
_RESERVED = (uuid.UUID(int=0), uuid.UUID(int=1))


def uuid_hash(u: uuid.UUID) -> int:
    """Kafka's ``Uuid.hashCode``: the two halves XORed, then the int halves of that."""
    h = (u.int >> 64) ^ (u.int & 0xFFFFFFFFFFFFFFFF)
    return ((h >> 32) ^ h) & 0xFFFFFFFF


def _int32(x: int) -> int:
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x >= 1 << 31 else x


def subscription_id(metrics: tuple[str, ...], push_interval_ms: int, instance: uuid.UUID) -> int:
    """Kafka's ``computeSubscriptionId``: CRC32C of the metric set's text and the interval, XOR the
    instance id's hash (the set printed as Java prints it, its names sorted here)."""
    text = ("[" + ", ".join(sorted(metrics)) + "]" + str(push_interval_ms)).encode()
    return _int32(crc32c(text) ^ uuid_hash(instance))


@dataclass(frozen=True)
class ClientMetricsConfig:
    metrics: tuple[str, ...]
    push_interval_ms: int
    telemetry_max_bytes: int
    cache_expiry_ms: int
    max_series: int

    @classmethod
    def from_values(cls, v: Mapping[str, Any]) -> ClientMetricsConfig:
        metrics = tuple(m.strip() for m in v["client.metrics.subscription.metrics"])
        if ALL_METRICS in metrics:
            metrics = (ALL_METRICS,)
        return cls(metrics, v["client.metrics.subscription.interval.ms"], v["telemetry.max.bytes"],
                   v["client.metrics.cache.expiry.ms"], v["client.metrics.max.series"])


@dataclass
class ClientInstance:
    """Kafka's ``ClientMetricsInstance``, with the series of its last accepted push."""
    instance_id: uuid.UUID
    client_id: str
    subscription_id: int
    #: the last accepted GetTelemetrySubscriptions and PushTelemetry (none yet: minus infinity)
    last_get_ms: float = float("-inf")
    last_push_ms: float = float("-inf")
    terminating: bool = False
    last_error: int = ec.NONE
    series: dict[tuple[str, str, tuple[tuple[str, str], ...]], Series] = field(default_factory=dict)
    expiry: asyncio.TimerHandle | None = None


class ClientMetricsManager:
    """The client instances and their series; handlers call :meth:`get_subscriptions` and
    :meth:`push` from the event loop (the timers run there too)."""

    def __init__(self, config: ClientMetricsConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self._clock = clock
        #: in the order they were last heard from (a plain dict: the scraper's thread copies its values
        #: in one step, which an OrderedDict, whose iteration hashes the keys, would not allow)
        self.instances: dict[uuid.UUID, ClientInstance] = {}
        self.series_count = 0
        #: pushes by outcome (error code), for the broker's own metrics
        self.outcomes: dict[int, int] = {}

    def _now_ms(self) -> float:
        return self._clock() * 1000.0

    def _instance(self, instance_id: uuid.UUID, client_id: str) -> ClientInstance:
        inst = self.instances.get(instance_id)
        if inst is None:
            cfg = self.config
            inst = ClientInstance(instance_id, client_id,
                                  subscription_id(cfg.metrics, cfg.push_interval_ms, instance_id))
            self.instances[instance_id] = inst
            while len(self.instances) > MAX_INSTANCES:
                self.forget(next(iter(self.instances)))
        else:
            del self.instances[instance_id]         # to the end: the most recently heard from
            self.instances[instance_id] = inst
        self._schedule_expiry(inst)
        return inst

    def _schedule_expiry(self, inst: ClientInstance) -> None:
        if inst.expiry is not None:
            inst.expiry.cancel()
        delay_ms = max(self.config.cache_expiry_ms, 3 * self.config.push_interval_ms)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            inst.expiry = None
            return
        inst.expiry = loop.call_later(delay_ms / 1000.0, self.forget, inst.instance_id)

    def forget(self, instance_id: uuid.UUID) -> None:
        """Drop an instance and its series (expired, or evicted by the cache bound)."""
        inst = self.instances.pop(instance_id, None)
        if inst is None:
            return
        if inst.expiry is not None:
            inst.expiry.cancel()
        self.series_count -= len(inst.series)
        logger.debug("client instance %s (client_id %r) forgotten with its %d series", instance_id,
                     inst.client_id, len(inst.series))

    def close(self) -> None:
        for instance_id in list(self.instances):
            self.forget(instance_id)

    # --- requests ---------------------------------------------------------------------------------

    def get_subscriptions(self, instance_id: uuid.UUID | None, client_id: str | None) -> dict[str, Any]:
        """The GetTelemetrySubscriptions response values."""
        now = self._now_ms()
        if instance_id is None or instance_id == _RESERVED[0]:
            instance_id = uuid.uuid4()
            while instance_id in self.instances:
                instance_id = uuid.uuid4()
        inst = self._instance(instance_id, client_id or "")
        cfg = self.config
        # Kafka's maybeUpdateGetRequestTimestamp: the interval counts from the last request of either kind
        if now - max(inst.last_get_ms, inst.last_push_ms) >= cfg.push_interval_ms:
            inst.last_get_ms = now
        elif inst.last_error not in (UNKNOWN_SUBSCRIPTION_ID, ec.UNSUPPORTED_COMPRESSION_TYPE):
            return {"throttle_time": 0, "error_code": THROTTLING_QUOTA_EXCEEDED,
                    "client_instance_id": uuid.UUID(int=0), "subscription_id": 0,
                    "accepted_compression_types": (), "push_interval": 0, "telemetry_max_bytes": 0,
                    "delta_temporality": False, "requested_metrics": ()}
        inst.last_error = ec.NONE
        return {"throttle_time": 0, "error_code": ec.NONE, "client_instance_id": instance_id,
                "subscription_id": inst.subscription_id, "accepted_compression_types": ACCEPTED_COMPRESSION_TYPES,
                "push_interval": cfg.push_interval_ms, "telemetry_max_bytes": cfg.telemetry_max_bytes,
                # cumulative sums: a lost or refused push loses nothing of a re-exported counter
                "delta_temporality": False, "requested_metrics": cfg.metrics}

    async def push(self, instance_id: uuid.UUID | None, client_id: str | None, subscription: int,
                   terminating: bool, compression_type: int, metrics: bytes | None) -> int:
        """A PushTelemetry's error code (its series kept when NONE). Kafka's checks run at once; the
        payload is decompressed and decoded on a worker thread (a 1 MiB push of ~12,000 series takes
        a few hundred milliseconds of Python), so the event loop keeps serving meanwhile."""
        code, inst = self._check(instance_id, client_id, subscription, terminating, compression_type, metrics)
        if code == ec.NONE and metrics and inst is not None:
            labels = {"client_instance_id": str(inst.instance_id), "client_id": inst.client_id}
            try:
                series = await asyncio.to_thread(_decode, compression_type, bytes(metrics),
                                                 self.config.telemetry_max_bytes, labels)
            except TelemetryTooLarge as e:
                logger.info("PushTelemetry of client instance %s: %s", inst.instance_id, e)
                code = TELEMETRY_TOO_LARGE
            except InvalidTelemetry as e:
                logger.info("PushTelemetry of client instance %s: %s", inst.instance_id, e)
                code = ec.INVALID_RECORD
            else:
                if self.instances.get(inst.instance_id) is inst:      # (not forgotten meanwhile)
                    self._keep(inst, series)
            inst.last_error = code
        self.outcomes[code] = self.outcomes.get(code, 0) + 1
        return code

    def _check(self, instance_id: uuid.UUID | None, client_id: str | None, subscription: int, terminating: bool,
               compression_type: int, metrics: bytes | None) -> tuple[int, ClientInstance | None]:
        if instance_id is None or instance_id in _RESERVED:
            return ec.INVALID_REQUEST, None
        now = self._now_ms()
        inst = self._instance(instance_id, client_id or "")
        code = self._validate(inst, now, subscription, terminating, compression_type, metrics)
        inst.terminating = terminating
        inst.last_error = code
        return code, inst

    def _validate(self, inst: ClientInstance, now: float, subscription: int, terminating: bool,
                  compression_type: int, metrics: bytes | None) -> int:
        if inst.terminating:
            return ec.INVALID_REQUEST
        # Kafka's maybeUpdatePushRequestTimestamp: the first push after a GetTelemetrySubscriptions is on time
        on_time = inst.last_get_ms > inst.last_push_ms or now - inst.last_push_ms >= self.config.push_interval_ms
        if on_time:
            inst.last_push_ms = now
        elif not terminating:
            return THROTTLING_QUOTA_EXCEEDED
        if subscription != inst.subscription_id:
            return UNKNOWN_SUBSCRIPTION_ID
        if compression_type not in KNOWN_COMPRESSION_TYPES:
            return ec.UNSUPPORTED_COMPRESSION_TYPE
        if metrics is not None and len(metrics) > self.config.telemetry_max_bytes:
            return TELEMETRY_TOO_LARGE
        return ec.NONE

    def _keep(self, inst: ClientInstance, series: list[Series]) -> None:
        new: dict[tuple[str, str, tuple[tuple[str, str], ...]], Series] = {}
        for s in series:
            key = (s.name, s.kind, s.labels)
            if s.delta:         # a delta counter adds to its previous value
                before = new.get(key) or inst.series.get(key)
                if before is not None:
                    s = Series(s.name, s.kind, s.labels, before.value + s.value, delta=True)
            new[key] = s
        total = self.series_count - len(inst.series) + len(new)
        if total > self.config.max_series:
            logger.warning("client instance %s pushed %d series: over client.metrics.max.series=%d in all; "
                           "its previous series are kept", inst.instance_id, len(new), self.config.max_series)
            return
        self.series_count = total
        inst.series = new


def _decode(compression_type: int, data: bytes, max_bytes: int, labels: dict[str, str]) -> list[Series]:
    """A payload's series (on a worker thread)."""
    return series_of(decode(compression_type, data, max_bytes), labels)
