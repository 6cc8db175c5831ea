"""A raw client of the share group protocol (KIP-932) for the differential tests: ShareGroupHeartbeat,
ShareGroupDescribe, ShareFetch, ShareAcknowledge, the share group offset APIs and group configs, sent
to kafkalog and to Kafka 4.4; every answer written into a *transcript* with the random parts
normalised (member ids as the labels the test gave them, topic ids as topic names), so two
transcripts compare with ``==``."""

from __future__ import annotations

import time
import uuid
from typing import Any

from confluent_kafka import Producer

from tests.server.txn_raw import TxnClient

#: both brokers: short sessions and heartbeats, assignments at once, locks from 1 s
SHARE_SETTINGS = {
    "group.share.min.record.lock.duration.ms": "1000",
    "group.share.record.lock.duration.ms": "5000",
    "group.share.min.session.timeout.ms": "6000",
    "group.share.session.timeout.ms": "6000",
    "group.share.min.heartbeat.interval.ms": "500",
    "group.share.heartbeat.interval.ms": "500",
    "group.share.assignment.interval.ms": "0",
}


class ShareClient(TxnClient):
    """One connection to one broker for one share group."""

    def __init__(self, port: int, group: str, suffix: str = "") -> None:
        super().__init__(port, suffix)
        self.group = group
        self.members: dict[str, str] = {}       # label -> member id
        self.epochs: dict[str, int] = {}
        self.sessions: dict[str, int] = {}      # label -> next share session epoch
        self.assigned: dict[str, set[tuple[str, int]]] = {}  # label -> its partitions, as last answered
        self.topic_ids: dict[str, uuid.UUID] = {}
        self.names: dict[uuid.UUID, str] = {}
        self._coordinator_found = False

    def note(self, *entry: Any) -> None:
        """The entry with the suffix and member ids (also inside strings and structures) replaced."""
        def norm(v: Any) -> Any:
            if isinstance(v, str):
                for label, mid in self.members.items():
                    v = v.replace(mid, label)
                return v.replace(self.suffix, "") if self.suffix else v
            if isinstance(v, dict):
                return {norm(k): norm(x) for k, x in v.items()}
            if isinstance(v, (list, tuple)):
                return type(v)(norm(x) for x in v)
            return v
        self.transcript.append(tuple(norm(e) for e in entry))

    def call(self, api_key: int, version: int, values: dict[str, Any], retry: bool = True) -> Any:
        if not self._coordinator_found and api_key in (76, 77, 78, 79, 90, 91, 92):
            self._coordinator_found = True
            self.find_coordinator(self.group, 0)       # Kafka creates __consumer_offsets then
        return super().call(api_key, version, values, retry)

    # --- setup ----------------------------------------------------------------------------------------

    def topic(self, name: str, partitions: int) -> None:
        self.create_topic(name, partitions)
        m = self.call(3, 12, {"topics": [{"topic_id": None, "name": name}], "allow_auto_topic_creation": False,
                              "include_topic_authorized_operations": False})
        self.topic_ids[name] = m.topics[0].topic_id
        self.names[m.topics[0].topic_id] = name

    def known_topic(self, name: str) -> None:
        """Learn the id of an existing topic (Metadata)."""
        m = self.call(3, 12, {"topics": [{"topic_id": None, "name": name}], "allow_auto_topic_creation": False,
                              "include_topic_authorized_operations": False})
        self.topic_ids[name] = m.topics[0].topic_id
        self.names[m.topics[0].topic_id] = name

    def produce_values(self, topic: str, values: list[bytes], partition: int = 0) -> None:
        p = Producer({"bootstrap.servers": f"127.0.0.1:{self.port}", "linger.ms": 0})
        for v in values:
            p.produce(topic, v, partition=partition)
            p.flush(30)                 # one batch per record: the same batches on both brokers
        p.flush(30)

    def alter_config(self, configs: dict[str, str | None]) -> Any:
        r = self.call(44, 1, {"resources": [{"resource_type": 32, "resource_name": self.group, "configs": [
            {"name": k, "config_operation": 0 if v is not None else 1, "value": v} for k, v in configs.items()]}],
            "validate_only": False})
        out = [(int(x.error_code), x.error_message) for x in r.responses]
        self.note("IncrementalAlterConfigs", out)
        return out

    # --- ShareGroupHeartbeat / Describe ------------------------------------------------------------------

    def _assignment(self, a: Any) -> Any:
        if a is None:
            return None
        return {self.names.get(t.topic_id, "?"): sorted(t.partitions) for t in a.topic_partitions}

    @staticmethod
    def shape(a: Any) -> Any:
        """An assignment as whether it holds partitions: which partitions (and how many, when they
        are shared) go to which member follows Java's hash order in Kafka's SimpleAssignor."""
        return None if a is None else ("assigned" if any(a.values()) else "empty")

    def heartbeat(self, label: str, epoch: int | None = None, topics: list[str] | None = None,
                  member_id: str | None = None, note: bool = True) -> dict[str, Any]:
        mid = member_id if member_id is not None else self.members.setdefault(label, uuid.uuid4().hex[:22])
        e = self.epochs.get(label, 0) if epoch is None else epoch
        r = self.call(76, 1, {"group_id": self.group, "member_id": mid, "member_epoch": e, "rack_id": None,
                              "subscribed_topic_names": topics})
        out = {"error": int(r.error_code), "message": r.error_message, "epoch": int(r.member_epoch),
               "assignment": self._assignment(r.assignment)}
        if out["error"] == 0:
            self.epochs[label] = out["epoch"]
            if out["assignment"] is not None:
                self.assigned[label] = {(t, p) for t, ps in out["assignment"].items() for p in ps}
        if note:
            self.note("ShareGroupHeartbeat", label, e, out["error"], out["message"], out["epoch"],
                      self.shape(out["assignment"]))
        return out

    def settle(self, labels: list[str], topic: str, partitions: int, timeout: float = 60) -> None:
        """Heartbeat every member until every partition of ``topic`` is assigned (Kafka initializes
        the share partitions' state in the background); then the group described."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for label in labels:
                self.heartbeat(label, note=False)
            owned = set().union(*(self.assigned.get(label, set()) for label in labels))
            if owned == {(topic, p) for p in range(partitions)}:
                break
            time.sleep(0.1)
        self.describe()

    def describe(self) -> Any:
        r = self.call(77, 1, {"group_ids": [self.group], "include_authorized_operations": False})
        g = r.groups[0]
        labels = {v: k for k, v in self.members.items()}
        members = sorted((labels.get(m.member_id, "?"), int(m.member_epoch), sorted(m.subscribed_topic_names))
                         for m in g.members)
        counts = sorted(sum(len(t.partitions) for t in m.assignment.topic_partitions) for m in g.members)
        out = (int(g.error_code), g.group_state, int(g.group_epoch), int(g.assignment_epoch), g.assignor_name, members,
               counts)
        self.note("ShareGroupDescribe", *out)
        return out

    # --- ShareFetch / ShareAcknowledge ---------------------------------------------------------------------

    def fetch(self, label: str, topic: str, partitions: list[int],
              acks: dict[int, list[tuple[int, int, list[int]]]] | None = None, epoch: int | None = None,
              max_records: int = 500, max_wait_ms: int = 1000, version: int = 2, forget: list[int] | None = None,
              renew: bool = False, note: bool = True) -> dict[str, Any]:
        mid = self.members.setdefault(label, uuid.uuid4().hex[:22])
        e = self.sessions.get(label, 0) if epoch is None else epoch
        tid = self.topic_ids[topic]
        parts = sorted(set(partitions) | set(acks or {}))
        values: dict[str, Any] = {
            "group_id": self.group, "member_id": mid, "share_session_epoch": e,
            "max_wait": 0 if renew else max_wait_ms, "min_bytes": 0 if renew else 1,
            "max_bytes": 0 if renew else 1 << 20, "max_records": 0 if renew else max_records, "batch_size": 500,
            "topics": [{"topic_id": tid, "partitions": [
                {"partition_index": p, "acknowledgement_batches": [
                    {"first_offset": a, "last_offset": b, "acknowledge_types": ts}
                    for a, b, ts in (acks or {}).get(p, [])]}
                for p in parts]}] if parts else [],
            "forgotten_topics_data": [{"topic_id": tid, "partitions": forget}] if forget else []}
        if version >= 2:
            values.update({"share_acquire_mode": 0, "is_renew_ack": renew})
        r = self.call(78, version, values, retry=False)
        out: dict[str, Any] = {"error": int(r.error_code), "partitions": {}}
        for t in r.responses:
            for p in t.partitions:
                out["partitions"][(self.names.get(t.topic_id, "?"), int(p.partition_index))] = (
                    int(p.error_code), int(p.acknowledge_error_code),
                    [(int(a.first_offset), int(a.last_offset), int(a.delivery_count)) for a in p.acquired_records])
        if out["error"] == 0 and e != -1:
            self.sessions[label] = 1 if e == 0 else e + 1
        elif e == -1 and out["error"] == 0:
            self.sessions.pop(label, None)
        if note:
            self.note("ShareFetch", label, e, out["error"], sorted(out["partitions"].items()))
        return out

    def fetch_until(self, label: str, topic: str, partitions: list[int], timeout: float = 30,
                    acks: dict[int, list[tuple[int, int, list[int]]]] | None = None) -> dict[str, Any]:
        """ShareFetch until records come (the first answers may be empty while Kafka loads); only
        the one with records is written down (acknowledgements go with the first request)."""
        deadline = time.monotonic() + timeout
        out = self.fetch(label, topic, partitions, acks=acks, note=False)
        while out["error"] == 0 and not any(v[2] for v in out["partitions"].values()) and time.monotonic() < deadline:
            out = self.fetch(label, topic, partitions, note=False)
        self.note("ShareFetch", label, out["error"], sorted(out["partitions"].items()))
        return out

    def acknowledge(self, label: str, topic: str, acks: dict[int, list[tuple[int, int, list[int]]]],
                    epoch: int | None = None, version: int = 2) -> Any:
        mid = self.members.setdefault(label, uuid.uuid4().hex[:22])
        e = self.sessions.get(label, 0) if epoch is None else epoch
        values: dict[str, Any] = {"group_id": self.group, "member_id": mid, "share_session_epoch": e,
                                  "topics": [{"topic_id": self.topic_ids[topic], "partitions": [
                                      {"partition_index": p, "acknowledgement_batches": [
                                          {"first_offset": a, "last_offset": b, "acknowledge_types": ts}
                                          for a, b, ts in batches]} for p, batches in acks.items()]}]}
        if version >= 2:
            values["is_renew_ack"] = False
        r = self.call(79, version, values, retry=False)
        out = (int(r.error_code), sorted((self.names.get(t.topic_id, "?"), int(p.partition_index), int(p.error_code))
                                         for t in r.responses for p in t.partitions))
        if out[0] == 0 and e not in (0, -1):
            self.sessions[label] = e + 1
        elif e == -1 and out[0] == 0:
            self.sessions.pop(label, None)
        self.note("ShareAcknowledge", label, e, *out)
        return out

    # --- offsets -----------------------------------------------------------------------------------------

    def describe_offsets(self, topic: str | None, partitions: list[int] | None = None) -> Any:
        topics = None if topic is None else [{"topic_name": topic, "partitions": partitions or []}]
        r = self.call(90, 1, {"groups": [{"group_id": self.group, "topics": topics}]})
        g = r.groups[0]
        out = (int(g.error_code), sorted((t.topic_name, int(p.partition_index), int(p.start_offset), int(p.lag),
                                          int(p.error_code)) for t in g.topics for p in t.partitions))
        self.note("DescribeShareGroupOffsets", *out)
        return out

    def alter_offsets(self, topic: str, starts: dict[int, int]) -> Any:
        r = self.call(91, 0, {"group_id": self.group, "topics": [{"topic_name": topic, "partitions": [
            {"partition_index": p, "start_offset": o} for p, o in starts.items()]}]})
        out = (int(r.error_code), sorted((t.topic_name, int(p.partition_index), int(p.error_code))
                                         for t in r.responses for p in t.partitions))
        self.note("AlterShareGroupOffsets", *out)
        return out

    def delete_offsets(self, topics: list[str]) -> Any:
        r = self.call(92, 0, {"group_id": self.group, "topics": [{"topic_name": t} for t in topics]})
        out = (int(r.error_code), sorted((t.topic_name, int(t.error_code)) for t in r.responses))
        self.note("DeleteShareGroupOffsets", *out)
        return out
