"""The embedded share consumer (KIP-932's queue semantics on a data directory)::

    # several processes, each:
    with kafkalog.open(path, read_only=True) as dl:          # or the writable owner itself
        with dl.share_consumer("jobs", group_id="workers") as c:
            for rec in c.poll(1000):
                handle(rec.value)              # implicit mode: accepted by the next poll / close

Every consumer of a share group takes records from every partition of its topics; a record goes to
one consumer at a time, under an acquisition lock of ``share.record.lock.duration.ms``. Explicit
acknowledgement (``share.acknowledgement.mode=explicit``): :meth:`ShareConsumer.acknowledge` each
record ``accept`` (done), ``release`` (delivered again, to anyone) or ``reject`` (never again), then
:meth:`ShareConsumer.commit_sync` (or the next poll sends them). A record not acknowledged before
its lock expires (a consumer killed, stuck) is delivered again; its delivery count goes up, and
at ``share.delivery.count.limit`` it is archived instead. The rules are the broker's own
(:class:`~kafkalog.coordinator.share_partition.SharePartition`: Kafka's acquisition, throttling near
the limit, read_committed archiving aborted batches).

The group's configs are the data directory's group configs (:data:`~kafkalog.coordinator.
group_config.GROUP_CONFIGS_FILE`, the ones ``kafkalog serve`` answers DescribeConfigs from;
``group_config=`` sets them, checked as Kafka checks them). The share-partition state of the
embedded consumers is the JSON file :data:`SHARE_STATE_FILE` of the data directory, changed under an
exclusive ``flock`` of :data:`SHARE_LOCK_FILE` and replaced atomically (fsync + rename), so
consumers in several processes (the directory's owner and read-only openers) share it and a crash
loses nothing acknowledged. It is not ``__share_group_state`` (a read-only process cannot append to
a log): a group used through ``kafkalog serve`` and through the embedded client keeps two states.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple, Self

from kafkalog.client.config import client_config
from kafkalog.client.consumer import FILE_POLL_INTERVAL_MS, IllegalStateError, _Source, batch_records
from kafkalog.coordinator.group_config import GroupConfigStore
from kafkalog.coordinator.share_partition import (
    ACCEPT,
    ACQUIRED,
    REJECT,
    RELEASE,
    InvalidAcknowledgementError,
    InvalidRecordStateError,
    SharePartition,
    _InFlight,
    reset_start_offset,
)
from kafkalog.errors import InvalidConfigError, InvalidTopicError, KafkalogError, LogDirError
from kafkalog.log import fsutil
from kafkalog.log.naming import TopicPartition
from kafkalog.record.constants import IsolationLevel

__all__ = ["SHARE_CONSUMER_DEFAULTS", "SHARE_LOCK_FILE", "SHARE_STATE_FILE", "ShareConsumer", "ShareRecord"]

SHARE_STATE_FILE = "kafkalog-share-state.json"
SHARE_LOCK_FILE = "kafkalog-share-state.lock"

#: Kafka's share consumer keys (``ShareConsumerConfig``) the embedded share consumer honours
SHARE_CONSUMER_DEFAULTS: dict[str, Any] = {
    "group.id": None,
    "share.acknowledgement.mode": "implicit",
    "max.poll.records": 500,
    "max.partition.fetch.bytes": 1048576,
    "key.deserializer": None,
    "value.deserializer": None,
}

_TYPES = {"accept": ACCEPT, "release": RELEASE, "reject": REJECT}
#: the longest a waiting poll sleeps before it looks at the shared state again (a release or an
#: expired lock in another process is seen within this)
_STATE_POLL_S = 0.2


class ShareRecord(NamedTuple):
    """A record delivered to a share consumer, with its delivery count (1 the first time)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: Any
    value: Any
    headers: Any
    delivery_count: int


def _now_ms() -> int:
    return int(time.time() * 1000)


class _State:
    """The share-partition state file of a data directory, under its lock."""

    def __init__(self, data_dir: str) -> None:
        self.path = os.path.join(data_dir, SHARE_STATE_FILE)
        self.lock_path = os.path.join(data_dir, SHARE_LOCK_FILE)
        self._fd: int | None = None

    def __enter__(self) -> dict[str, Any]:
        try:
            self._fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise LogDirError(f"cannot open the share state lock: {e.strerror}", file=self.lock_path) from None
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            with open(self.path, "rb") as f:
                data = json.loads(f.read().decode("utf-8"))
        except FileNotFoundError:
            data = {}
        except (OSError, ValueError, UnicodeDecodeError) as e:
            self._release()
            raise LogDirError(f"cannot read the share state: {e}", file=self.path) from None
        if not isinstance(data, dict):
            self._release()
            raise LogDirError("the share state is not a JSON object", file=self.path)
        return data

    def save(self, data: dict[str, Any]) -> None:
        fsutil.atomic_write(self.path, json.dumps(data, sort_keys=True, separators=(",", ":")).encode("utf-8"))

    def _release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)          # closing the descriptor drops the flock
            self._fd = None

    def __exit__(self, *exc: object) -> None:
        self._release()


def _load(entry: Mapping[str, Any] | None, start: int, config: Any) -> SharePartition:
    if entry is None:
        return SharePartition(start, config)
    sp = SharePartition(int(entry["start"]), config)
    for off, state, count, member, deadline in entry["records"]:
        sp.records[int(off)] = _InFlight(int(state), int(count), str(member), int(deadline))
    return sp


def _dump(sp: SharePartition) -> dict[str, Any]:
    return {"start": sp.start_offset,
            "records": [[o, r.state, r.count, r.member, r.deadline] for o, r in sorted(sp.records.items())]}


class ShareConsumer:
    """One member of a share group on an embedded data directory (see the module's text)."""

    def __init__(self, dl: Any, *topics: str, conf: Mapping[str, Any] | None = None,
                 group_config: Mapping[str, Any] | None = None, **config: Any) -> None:
        cfg = client_config(SHARE_CONSUMER_DEFAULTS, conf, **config)
        group = cfg["group.id"]
        if not isinstance(group, str) or not group.strip():
            raise InvalidConfigError("a share consumer needs a group.id")
        mode = str(cfg["share.acknowledgement.mode"]).lower()
        if mode not in ("implicit", "explicit"):
            raise InvalidConfigError(f"Invalid value {cfg['share.acknowledgement.mode']} for configuration "
                                     f"share.acknowledgement.mode: String must be one of: implicit, explicit")
        self._max_poll = int(cfg["max.poll.records"])
        if self._max_poll < 1:
            raise InvalidConfigError(f"max.poll.records must be at least 1, got {self._max_poll}")
        self._max_bytes = int(cfg["max.partition.fetch.bytes"])
        self._key_de, self._value_de = cfg["key.deserializer"], cfg["value.deserializer"]
        data_dir = dl.manager.data_dir
        if "://" in str(data_dir):
            raise LogDirError("a share consumer needs a local data directory", file=str(data_dir))
        self.group_id = group
        self.member_id = uuid.uuid4().hex[:22]
        self.explicit = mode == "explicit"
        self._dl = dl
        self._state = _State(str(data_dir))
        self._configs = GroupConfigStore(str(data_dir))
        if group_config:
            with self._state:
                self._configs.reload()
                self._configs.alter(group, dict(group_config))
        self._source = _Source(dl.manager, FILE_POLL_INTERVAL_MS)
        self._topics: list[str] = []
        #: the records of the last poll not acknowledged yet: (topic, partition, offset)
        self._delivered: dict[tuple[str, int, int], ShareRecord] = {}
        #: acknowledgements to send: (topic, partition) -> offset -> type
        self._pending: dict[tuple[str, int], dict[int, int]] = {}
        self._closed = False
        if topics:
            self.subscribe(topics)

    # --- subscription ---------------------------------------------------------------------------

    def subscribe(self, topics: Iterable[str]) -> None:
        self._check_open()
        wanted = list(dict.fromkeys(topics))
        for t in wanted:
            if not isinstance(t, str) or not t:
                raise InvalidTopicError(f"invalid topic {t!r}")
        self._topics = wanted

    def subscription(self) -> set[str]:
        return set(self._topics)

    def unsubscribe(self) -> None:
        self._check_open()
        self._release_held()
        self._topics = []

    def _partitions(self) -> list[TopicPartition]:
        m = self._source.manager
        return [TopicPartition(t, p) for t in self._topics if m.has_topic(t) for p in m.partitions_of(t)]

    # --- acknowledgement --------------------------------------------------------------------------

    def acknowledge(self, record: ShareRecord, type: str = "accept") -> None:
        """Mark a delivered record ``accept``, ``release`` or ``reject`` (explicit mode); sent by
        :meth:`commit_sync` or the next :meth:`poll`."""
        self._check_open()
        if not self.explicit:
            raise IllegalStateError("acknowledge() needs share.acknowledgement.mode=explicit")
        kind = _TYPES.get(str(type).lower())
        if kind is None:
            raise InvalidConfigError(f"unknown acknowledge type {type!r}: accept, release or reject")
        key = (record.topic, record.partition, record.offset)
        if key not in self._delivered:
            raise IllegalStateError(f"the record {record.topic}-{record.partition}@{record.offset} is not "
                                    f"in flight with this consumer")
        del self._delivered[key]
        self._pending.setdefault((record.topic, record.partition), {})[record.offset] = kind

    def _implicit_accept(self) -> None:
        for (t, p, o) in list(self._delivered):
            self._pending.setdefault((t, p), {})[o] = ACCEPT
        self._delivered.clear()

    def commit_sync(self) -> dict[TopicPartition, KafkalogError | None]:
        """Send the acknowledgements made (implicit mode: the last poll's records accepted); per
        partition None, or the error (a record whose lock had expired and went to another member)."""
        self._check_open()
        if not self.explicit:
            self._implicit_accept()
        with self._state as data:
            out = self._send_acks(data)
            self._state.save(data)
        return out

    def _send_acks(self, data: dict[str, Any]) -> dict[TopicPartition, KafkalogError | None]:
        out: dict[TopicPartition, KafkalogError | None] = {}
        group = data.setdefault(self.group_id, {})
        config = self._configs.settings(self.group_id).partition
        now = _now_ms()
        for (t, p), acks in self._pending.items():
            key = f"{t}:{p}"
            sp = _load(group.get(key), 0, config)
            sp.expire_locks(now)
            try:
                sp.acknowledge(self.member_id, [(o, o, [k]) for o, k in sorted(acks.items())], now)
                out[TopicPartition(t, p)] = None
            except (InvalidRecordStateError, InvalidAcknowledgementError) as e:
                out[TopicPartition(t, p)] = e
                # what can still be acknowledged is (Kafka answers per partition; the client's
                # batches are per record here)
                for o, k in sorted(acks.items()):
                    try:
                        sp.acknowledge(self.member_id, [(o, o, [k])], now)
                    except (InvalidRecordStateError, InvalidAcknowledgementError):
                        pass
            sp.advance()
            group[key] = _dump(sp)
        self._pending.clear()
        return out

    # --- poll ---------------------------------------------------------------------------------------

    def poll(self, timeout_ms: float = 0, max_records: int | None = None) -> list[ShareRecord]:
        """The records acquired for this consumer (at most ``max_records``, default
        ``max.poll.records``, ending on a log batch boundary as Kafka's batch-optimized fetch does);
        waits up to ``timeout_ms`` while none is available. Implicit mode accepts the previous
        poll's records first; explicit mode refuses to poll while some are unacknowledged."""
        self._check_open()
        if timeout_ms < 0:
            raise InvalidConfigError(f"Timeout must not be negative, got {timeout_ms!r}")
        if not self._topics:
            raise IllegalStateError("Consumer is not subscribed to any topics.")
        if self.explicit and self._delivered:
            raise IllegalStateError("All records must be acknowledged in explicit acknowledgement mode.")
        if not self.explicit:
            self._implicit_accept()
        budget = self._max_poll if max_records is None else max_records
        if budget < 1:
            raise InvalidConfigError(f"max_records must be at least 1, got {budget!r}")
        return self._source.poll(lambda: self._acquire(budget), time.monotonic() + timeout_ms / 1000.0,
                                 lambda: self._closed, _STATE_POLL_S)

    def _acquire(self, budget: int) -> list[ShareRecord]:
        self._configs.reload()
        settings = self._configs.settings(self.group_id)
        committed = settings.isolation_level is IsolationLevel.READ_COMMITTED
        out: list[ShareRecord] = []
        with self._state as data:
            self._send_acks(data)
            group = data.setdefault(self.group_id, {})
            now = _now_ms()
            for tp in self._partitions():
                log = self._source.log(tp)
                key = f"{tp.topic}:{tp.partition}"
                entry = group.get(key)
                sp = _load(entry, self._reset_offset(log, settings.auto_offset_reset) if entry is None else 0,
                           settings.partition)
                sp.move_start(log.log_start_offset)
                sp.expire_locks(now)
                if budget - len(out) > 0:
                    out.extend(self._acquire_from(sp, tp, log, committed, budget - len(out), now))
                sp.advance()
                group[key] = _dump(sp)
            self._state.save(data)
        for r in out:
            self._delivered[(r.topic, r.partition, r.offset)] = r
        return out

    @staticmethod
    def _reset_offset(log: Any, reset: str) -> int:
        """``share.auto.offset.reset`` for a partition the group has no state of."""
        return reset_start_offset(reset, log.log_start_offset, log.high_watermark, log.offset_for_timestamp,
                                  _now_ms())

    def _acquire_from(self, sp: SharePartition, tp: TopicPartition, log: Any, committed: bool, budget: int,
                      now: int) -> list[ShareRecord]:
        start = sp.next_fetch_offset()
        iso = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
        reader = log.reader(start)
        end = reader.stable_end(iso)
        if start >= end:
            return []
        batches: list[tuple[int, int]] = []
        hidden: list[tuple[int, int]] = []
        views: list[Any] = []
        size = 0
        for batch, visible in reader.read(start, end, iso):
            rng = (batch.base_offset, batch.last_offset)
            batches.append(rng)
            views.append(batch)
            if not visible:                  # control records and aborted batches: never delivered
                hidden.append(rng)
            size += batch.size_in_bytes
            if size >= self._max_bytes:
                break
        acquired = sp.acquire(self.member_id, batches, budget, now, excluded=hidden)
        if not acquired:
            return []
        counts = {o: n for a, b, n in acquired for o in range(a, b + 1)}
        out: list[ShareRecord] = []
        kd, vd = self._key_de, self._value_de
        for batch in views:
            if batch.last_offset < min(counts) or batch.base_offset > max(counts):
                continue
            try:
                recs = batch_records(batch, tp.topic, tp.partition, batch.base_offset, batch.last_offset + 1)
            except KafkalogError as e:
                raise (e.at(reader.log_path_of(batch.last_offset), 0) if e.file is None else e) from None
            rows = [(r.offset, r.timestamp, r.timestamp_type, r.key, r.value, r.headers) for r in recs]
            for off, ts, tst, k, v, h in rows:
                if off in counts and sp.records[off].state == ACQUIRED:
                    out.append(ShareRecord(tp.topic, tp.partition, off, ts, tst,
                                           k if kd is None or k is None else kd(k),
                                           v if vd is None or v is None else vd(v), h, counts[off]))
        # offsets acquired with no record (compacted away): accepted at once, as the client's GAP
        present = {r.offset for r in out}
        gaps = [o for o in counts if o not in present]
        if gaps:
            sp.acknowledge(self.member_id, [(o, o, [0]) for o in sorted(gaps)], now)
        return out

    # --- closing --------------------------------------------------------------------------------------

    def _release_held(self) -> None:
        """Send what is acknowledged, release the rest this consumer holds."""
        if not self.explicit:
            self._implicit_accept()
        with self._state as data:
            self._send_acks(data)
            group = data.get(self.group_id, {})
            config = self._configs.settings(self.group_id).partition
            for key, entry in list(group.items()):
                sp = _load(entry, 0, config)
                if sp.release_member(self.member_id):
                    sp.advance()
                    group[key] = _dump(sp)
            self._state.save(data)
        self._delivered.clear()

    def close(self) -> None:
        """Acknowledge (implicit mode: accept) and release what is held; leave."""
        if self._closed:
            return
        try:
            self._release_held()
        finally:
            self._closed = True
            self._source.close()

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("This share consumer has already been closed.")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ShareConsumer(group_id={self.group_id!r}, member_id={self.member_id!r}, topics={self._topics!r})"
