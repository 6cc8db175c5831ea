"""The differential harness (issue 25): the same request session against Apache Kafka 4.4 and
``kafkalog serve``, each answer decoded by kio into plain values, normalised, and compared field by
field.

A *session* is a function of one :class:`Conn`; it runs once per broker, so it can use what each
broker answered (a producer id, a member id) in its next requests. Every answer it records lands in
the connection's transcript under a label (``"CreatePartitions v3: fewer partitions"``). The two
transcripts are then normalised (:func:`normalise`: cluster, topic, member and producer ids become
tokens in order of first appearance; hosts, ports, wall-clock timestamps and throttle times are
left out; unordered result lists sorted by name) and compared (:func:`differences`).

A difference is either fixed in kafkalog or listed, with its reason, in the table of
``docs/kafka-compatibility.md`` between the ``differential`` markers (:func:`allowed_differences`):
each row is a label pattern and a field-path pattern (``*`` and ``?`` as in a shell glob, brackets
literal). The test fails on a difference
no row covers, and on a row that covers nothing (so the list cannot outlive what it explains).
"""

from __future__ import annotations

import contextlib
import datetime
import enum
import functools
import os
import re
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields, is_dataclass
from typing import Any

from tests.server import raw

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMPATIBILITY_DOC = os.path.join(ROOT, "docs", "kafka-compatibility.md")
TABLE_BEGIN = "<!-- differential: begin -->"
TABLE_END = "<!-- differential: end -->"

#: the node id of both brokers of a pair (Kafka's fixture is node 1), so replica assignments compare
PAIR_NODE = 1
#: errors Kafka answers while its controller or coordinators catch up (a topic just created, a
#: coordinator loading, markers being written): retried as clients retry them, the last answer kept
TRANSIENT = frozenset({5, 6, 14, 15, 16, 51})
#: how long a connection waits for an answer (a request Kafka never answers is recorded closed)
REPLY_TIMEOUT_S = 60
#: id-like fields: values become tokens per transcript, in order of first appearance
ID_FIELDS = frozenset({"cluster_id", "topic_id", "member_id", "leader", "producer_id", "session_id",
                       "member_assignment_id"})
#: sentinels an id field keeps as they are
ID_SENTINELS = ("", None, -1, 0, "00000000-0000-0000-0000-000000000000")
#: and the machine's: a log directory's path and its file system's sizes (DescribeLogDirs)
DROPPED_FIELDS = frozenset({"throttle_time", "throttle_time_ms", "host", "port", "log_dir", "total_bytes",
                            "usable_bytes"})
#: a timestamp field holding a wall-clock time (ms) is compared as "<now>"
WALL_CLOCK_MS = 1_500_000_000_000
CLOSED = "<connection closed>"


def plain(value: Any) -> Any:
    """kio's entities as plain values: dicts, lists, ints, strings, bytes."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, enum.Enum):
        return int(value.value) if isinstance(value.value, int) else value.value
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1000)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, (tuple, list)):
        return [plain(v) for v in value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return int(value)
    return value


def decode_records(data: bytes | None) -> Any:
    """A record set as plain batches (no CRC: it covers the producer id, which is a token here)."""
    if not data:
        return data
    from kafkalog.record.records import iter_batches
    out = []
    for b in iter_batches(data):
        batch: dict[str, Any] = {"base_offset": b.base_offset, "last_offset": b.last_offset,
                                 "magic": b.magic, "attributes": b.attributes,
                                 "max_timestamp": b.max_timestamp, "valid": b.is_valid()}
        if b.magic == 2:
            batch.update(partition_leader_epoch=b.partition_leader_epoch, producer_id=b.producer_id,
                         producer_epoch=b.producer_epoch, base_sequence=b.base_sequence,
                         records=[{"offset": r.offset, "timestamp": r.timestamp, "key": r.key,
                                   "value": r.value, "headers": [list(h) for h in r.headers]}
                                  for r in b.records()])
        out.append(batch)
    return out


_SORT_KEYS = ("name", "group_id", "resource_name", "partition_index", "partition", "api_key",
              "topic", "key", "node_id", "broker_id", "member_id")


def _sort_key(item: dict[str, Any]) -> tuple[str, ...]:
    return tuple(repr(item.get(k)) for k in _SORT_KEYS if k in item)


def normalise(transcript: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """Ids as tokens, hosts/ports/throttle left out, wall-clock timestamps as ``<now>``, lists of
    named results sorted (Kafka answers some of them in hash order)."""
    tokens: dict[tuple[str, Any], str] = {}

    def walk(v: Any, key: str = "") -> Any:
        if isinstance(v, dict):
            return {k: walk(x, k) for k, x in v.items() if k not in DROPPED_FIELDS}
        if isinstance(v, list):
            items = [walk(x, key) for x in v]
            if items and all(isinstance(x, dict) for x in items) and any(
                    k in items[0] for k in _SORT_KEYS):
                items.sort(key=_sort_key)
                names = [x.get("name") for x in items]
                if all(isinstance(n, str) for n in names) and len(set(names)) == len(names):
                    return dict(zip(names, items, strict=True))       # paths by name
            return items
        if key in ID_FIELDS and v not in ID_SENTINELS:
            kind = "topic_id" if key == "topic_id" else "member" if key in ("member_id", "leader") else key
            return tokens.setdefault((kind, v), f"<{kind}-{sum(1 for k in tokens if k[0] == kind) + 1}>")
        if ("timestamp" in key or key in ("log_append_time", "log_append_time_ms", "transaction_start_time")) \
                and isinstance(v, int) \
                and v > WALL_CLOCK_MS:
            return "<now>"
        return v

    return [(label, walk(resp)) for label, resp in transcript]


def differences(kafka: list[tuple[str, Any]], ours: list[tuple[str, Any]]) -> list[tuple[str, str, Any, Any]]:
    """(label, field path, Kafka's value, kafkalog's) of every field that differs."""
    out: list[tuple[str, str, Any, Any]] = []

    def walk(label: str, path: str, a: Any, b: Any) -> None:
        if isinstance(a, dict) and isinstance(b, dict):
            for k in list(a) + [k for k in b if k not in a]:
                walk(label, f"{path}.{k}" if path else k, a.get(k, "<absent>"), b.get(k, "<absent>"))
        elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            for i, (x, y) in enumerate(zip(a, b, strict=True)):
                walk(label, f"{path}[{i}]", x, y)
        elif a != b:
            out.append((label, path, a, b))

    labels_k = [lab for lab, _ in kafka]
    labels_o = [lab for lab, _ in ours]
    if labels_k != labels_o:
        out.append(("<session>", "labels", labels_k, labels_o))
        return out
    for (label, a), (_l, b) in zip(kafka, ours, strict=True):
        walk(label, "", a, b)
    return out


@dataclass(frozen=True)
class Allowed:
    """One row of the table of intended differences."""
    case: str
    field: str
    reason: str

    def covers(self, label: str, path: str) -> bool:
        return (glob_pattern(self.case).fullmatch(label) is not None
                and glob_pattern(self.field).fullmatch(path) is not None)


@functools.cache
def glob_pattern(pattern: str) -> re.Pattern[str]:
    """``*`` any text, ``?`` one character; everything else literal (field paths hold brackets)."""
    return re.compile("".join(".*" if ch == "*" else "." if ch == "?" else re.escape(ch) for ch in pattern))


def allowed_differences(path: str = COMPATIBILITY_DOC) -> list[Allowed]:
    """The rows of the differential table of ``docs/kafka-compatibility.md``: ``| `case` | `field` |
    reason |``."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        table = text[text.index(TABLE_BEGIN) + len(TABLE_BEGIN):text.index(TABLE_END)]
    except ValueError:
        raise AssertionError(f"{path} has no table between {TABLE_BEGIN} and {TABLE_END}") from None
    rows = []
    for line in table.splitlines():
        m = re.match(r"^\|\s*`([^`]+)`\s*\|\s*`([^`]+)`\s*\|\s*(.+?)\s*\|\s*$", line)
        if m:
            rows.append(Allowed(m.group(1), m.group(2), m.group(3)))
    if not rows:
        raise AssertionError(f"the differential table of {path} has no rows")
    return rows


class Conn:
    """One broker's side of a session: a socket, a correlation id, a transcript."""

    def __init__(self, name: str, port: int) -> None:
        self.name = name
        self.port = port
        self.transcript: list[tuple[str, Any]] = []
        self._sock: socket.socket | None = None
        self._corr = 0
        self._topic_ids: dict[str, uuid.UUID] = {}

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _socket(self) -> socket.socket:
        if self._sock is None:
            self._sock = raw.connect(self.port, timeout=REPLY_TIMEOUT_S)
        return self._sock

    def send_frame(self, frame: bytes) -> bytes | None:
        """One request frame out, one response frame back (None: the broker closed the connection,
        which then reconnects on the next call)."""
        s = self._socket()
        try:
            s.sendall(frame)
            resp = raw.recv_frame(s)
        except OSError:
            resp = None
        if resp is None:
            self.close()
        return resp

    @contextlib.contextmanager
    def answered_within(self, seconds: float) -> Iterator[None]:
        """Calls inside wait ``seconds`` for an answer, not :data:`REPLY_TIMEOUT_S` (a request
        Kafka 4.4 never answers: recorded as the connection closed)."""
        self._socket().settimeout(seconds)
        try:
            yield
        finally:
            if self._sock is not None:
                self._sock.settimeout(REPLY_TIMEOUT_S)

    def request(self, key: int, version: int, values: dict[str, Any]) -> Any:
        """The decoded response of one request (kio), or None when the connection was closed."""
        self._corr += 1
        resp = self.send_frame(raw.request_frame(key, version, self._corr, values))
        return None if resp is None else raw.response_of(resp, key, version)

    def call(self, label: str, key: int, version: int, values: dict[str, Any], *,
             retry: frozenset[int] = TRANSIENT, timeout: float = 30.0, record: bool = True,
             transform: Callable[[Any], Any] | None = None) -> Any:
        """Send a request, retrying while the answer holds a transient error in ``retry``; record
        the last answer (plain, through ``transform``) under ``label``; return it (kio)."""
        deadline = time.monotonic() + timeout
        while True:
            resp = self.request(key, version, values)
            p = _records_decoded(plain(resp)) if resp is not None else CLOSED
            if not (retry and resp is not None and _error_codes(p) & retry) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        if record:
            self.transcript.append((label, transform(p) if transform and p != CLOSED else p))
        return resp

    # --- helpers that are not part of the transcript ---------------------------------------------

    def create_topic(self, name: str, partitions: int = 1, configs: dict[str, str] | None = None) -> None:
        r = self.call("", 19, 7, {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                                            "assignments": [], "configs": [{"name": k, "value": v} for k, v in
                                                                           (configs or {}).items()]}],
                                 "timeout": 30000, "validate_only": False}, record=False)
        code = int(r.topics[0].error_code)
        assert code in (0, 36), f"{self.name}: CreateTopics {name}: {code} {r.topics[0].error_message}"
        self.wait_for_leaders(name, partitions)

    def wait_for_leaders(self, name: str, partitions: int) -> None:
        deadline = time.monotonic() + 30
        while True:
            md = self.metadata([name])
            t = md.topics[0]
            if int(t.error_code) == 0 and len(t.partitions) >= partitions and all(
                    int(p.error_code) == 0 and p.leader_id >= 0 for p in t.partitions):
                self._topic_ids[name] = t.topic_id
                return
            assert time.monotonic() < deadline, f"{self.name}: {name} has no leaders: {md}"
            time.sleep(0.05)

    def await_answer(self, api_key: int, version: int, body: dict[str, Any], seen: Callable[[Any], Any],
                     want: Any, timeout: float = 30.0) -> None:
        """Repeat a request until ``seen(answer) == want``: Kafka's broker learns an alteration (a
        configuration, a quota, a credential) from its controller a moment after answering it. A
        value that never comes fails at the deadline, naming both."""
        deadline = time.monotonic() + timeout
        while True:
            got = seen(self.request(api_key, version, body))
            if got == want:
                return
            assert time.monotonic() < deadline, \
                f"{self.name}: API {api_key} v{version} still shows {got!r} after {timeout:g} s, not {want!r}"
            time.sleep(0.05)

    def await_config(self, topic: str, key: str, value: str | None) -> None:
        """Until DescribeConfigs shows ``key`` of ``topic`` as ``value`` (None: not overridden)."""
        def overridden(r: Any) -> str | None:
            e = r.results[0].configs[0] if r.results and r.results[0].configs else None
            return None if e is None or int(e.config_source) != 1 else e.value
        self.await_answer(32, 4, {"resources": [{"resource_type": 2, "resource_name": topic,
                                                 "configuration_keys": [key]}],
                                  "include_synonyms": False, "include_documentation": False},
                          overridden, value)

    def metadata(self, names: list[str]) -> Any:
        return self.request(3, 12, {"topics": [{"name": n, "topic_id": None} for n in names],
                                    "allow_auto_topic_creation": False,
                                    "include_topic_authorized_operations": False})

    def topic_id(self, name: str) -> uuid.UUID:
        if name not in self._topic_ids:
            self._topic_ids[name] = self.metadata([name]).topics[0].topic_id
        return self._topic_ids[name]

    def coordinator_ready(self, key: str, key_type: int = 0) -> None:
        """Wait until the group (0) or transaction (1) coordinator of ``key`` answers."""
        self.call("", 10, 3, {"key": key, "key_type": key_type, "coordinator_keys": [key]}, record=False,
                  timeout=60)

    def group_loaded(self, group: str) -> None:
        """Wait until the coordinator of ``group`` (a group no member joined) has loaded its
        partition of ``__consumer_offsets``: while it loads, Kafka 4.4 answers a Heartbeat NONE
        (``GroupCoordinatorService`` answers COORDINATOR_LOAD_IN_PROGRESS "blindly"), then
        UNKNOWN_MEMBER_ID, as kafkalog does at once. FindCoordinator answers before the load ends."""
        self.coordinator_ready(group)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            r = self.request(12, 4, {"group_id": group, "generation_id": 1, "member_id": "m",
                                     "group_instance_id": None})
            if r is not None and int(r.error_code) != 0:
                return
            time.sleep(0.1)
        raise AssertionError(f"{self.name}: the coordinator of {group} still loading after 60 s")


def _records_decoded(p: Any) -> Any:
    """Every ``records`` field (Produce requests never come back; Fetch answers) as plain batches."""
    if isinstance(p, dict):
        return {k: decode_records(v) if k == "records" and isinstance(v, bytes) else _records_decoded(v)
                for k, v in p.items()}
    if isinstance(p, list):
        return [_records_decoded(x) for x in p]
    return p


def _error_codes(p: Any) -> set[int]:
    out: set[int] = set()

    def walk(v: Any) -> None:
        if isinstance(v, dict):
            for k, x in v.items():
                if k == "error_code" and isinstance(x, int):
                    out.add(x)
                else:
                    walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(p)
    return out


def run_pair(session: Callable[[Conn], None], kafka_port: int, ours_port: int
             ) -> tuple[list[tuple[str, Any]], list[tuple[str, Any]]]:
    """``session`` against Kafka 4.4, then against kafkalog serve: both normalised transcripts."""
    out = []
    for name, port in (("kafka", kafka_port), ("kafkalog", ours_port)):
        c = Conn(name, port)
        try:
            session(c)
        finally:
            c.close()
        out.append(normalise(c.transcript))
    return out[0], out[1]


def uncovered(diffs: list[tuple[str, str, Any, Any]], allowed: list[Allowed], used: set[Allowed]
              ) -> Iterator[tuple[str, str, Any, Any]]:
    """The differences no row covers; the rows that cover one are added to ``used``."""
    for d in diffs:
        rows = [a for a in allowed if a.covers(d[0], d[1])]
        used.update(rows)
        if not rows:
            yield d
