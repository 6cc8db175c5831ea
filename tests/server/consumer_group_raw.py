"""A raw client of the consumer group protocol (KIP-848) for the differential tests: the same
sequence of ConsumerGroupHeartbeat, ConsumerGroupDescribe, ListGroups, DescribeGroups, OffsetCommit
and OffsetFetch requests sent to kafkalog and to Kafka 4.4, every answer written down in a
*transcript* with the random parts normalised (member ids as the labels the test gave them, topic ids
as topic names, member ids inside answers as labels), so two transcripts compare with ``==``."""

from __future__ import annotations

import socket
import time
import uuid
from typing import Any

from tests.server.raw import connect, recv_frame, request_frame, response_of

#: the settings both brokers run the differential tests with (Kafka's keys): short sessions and
#: heartbeats, every assignment computed at once (no assignment interval), no initial delay
FAST_CONSUMER_GROUPS = {
    "group.consumer.session.timeout.ms": "6000",
    "group.consumer.min.session.timeout.ms": "6000",
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.min.heartbeat.interval.ms": "500",
    "group.consumer.assignment.interval.ms": "0",
    "group.initial.rebalance.delay.ms": "0",
}
RETRIABLE = (14, 15, 16)        # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR


class RawClient:
    """One connection; ``transcript`` collects normalised answers."""

    def __init__(self, port: int, group: str) -> None:
        self.sock: socket.socket = connect(port)
        self.group = group
        self.correlation = 0
        self.labels: dict[str, str] = {}          # member id -> label
        self.members: dict[str, str] = {}         # label -> member id
        self.topic_ids: dict[str, uuid.UUID] = {}
        self.topic_names: dict[uuid.UUID, str] = {}
        self.epochs: dict[str, int] = {}
        self.owned: dict[str, dict[str, list[int]]] = {}
        self.transcript: list[Any] = []

    def close(self) -> None:
        self.sock.close()

    def call(self, api_key: int, version: int, values: dict[str, Any], retry: bool = True) -> Any:
        for _ in range(200):
            self.correlation += 1
            self.sock.sendall(request_frame(api_key, version, self.correlation, values))
            frame = recv_frame(self.sock)
            assert frame is not None, f"the broker closed the connection on api {api_key} v{version}"
            r = response_of(frame, api_key, version)
            code = getattr(r, "error_code", 0)
            if not retry or code not in RETRIABLE:
                return r
            time.sleep(0.2)
        raise AssertionError(f"api {api_key}: the coordinator never became available")

    # --- setup ----------------------------------------------------------------------------------

    def find_coordinator(self) -> None:
        for _ in range(200):
            self.correlation += 1
            self.sock.sendall(request_frame(10, 4, self.correlation, {"key_type": 0, "coordinator_keys": [self.group]}))
            frame = recv_frame(self.sock)
            assert frame is not None
            if response_of(frame, 10, 4).coordinators[0].error_code == 0:
                return
            time.sleep(0.2)
        raise AssertionError("no coordinator")

    def create_topic(self, name: str, partitions: int) -> None:
        r = self.call(19, 7, {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                                          "assignments": [], "configs": []}],
                              "timeout": 30000, "validate_only": False})
        t = r.topics[0]
        assert t.error_code == 0, t
        self.topic_ids[name] = t.topic_id
        self.topic_names[t.topic_id] = name
        # a topic is known to the coordinator once its metadata is (Kafka: the next metadata image)
        for _ in range(100):
            m = self.call(3, 12, {"topics": [{"topic_id": None, "name": name}], "allow_auto_topic_creation": False,
                                  "include_topic_authorized_operations": False})
            if m.topics[0].error_code == 0 and len(m.topics[0].partitions) == partitions:
                # Kafka's group coordinator sees a new topic when its metadata image is published,
                # a little after Metadata answers with it
                time.sleep(1.5)
                return
            time.sleep(0.1)
        raise AssertionError(f"topic {name} never showed up")

    # --- normalisation --------------------------------------------------------------------------

    def label(self, member_id: str | None) -> str | None:
        if member_id is None or member_id == "":
            return member_id
        return self.labels.get(member_id, "?" + member_id[:0])

    def scrub(self, text: str | None) -> str | None:
        """``text`` with the member ids in it replaced by their labels."""
        if text is None:
            return None
        for mid, label in self.labels.items():
            text = text.replace(mid, label)
        return text

    def named(self, topic_partitions: Any) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for t in topic_partitions:
            out[self.topic_names.get(t.topic_id, "?")] = sorted(t.partitions)
        return dict(sorted(out.items()))

    def member(self, label: str) -> str:
        if label not in self.members:
            mid = str(uuid.uuid4())
            self.members[label] = mid
            self.labels[mid] = label
        return self.members[label]

    # --- ConsumerGroupHeartbeat -----------------------------------------------------------------

    def heartbeat(self, label: str, epoch: int | None = None, *, topics: list[str] | None = None,
                  regex: str | None = None, instance: str | None = None, assignor: str | None = None,
                  rebalance_timeout: int | None = -1, owned: dict[str, list[int]] | None | str = "auto",
                  member_id: str | None = None, record: bool = True) -> dict[str, Any]:
        """A heartbeat of member ``label`` (epoch: its last known one unless given); ``owned``:
        "auto" sends what it was last assigned (None: unchanged, not sent)."""
        mid = self.member(label) if member_id is None else member_id
        if epoch is None:
            epoch = self.epochs.get(label, 0)
        if owned == "auto":
            owned = {} if epoch == 0 else self.owned.get(label, {})
        if rebalance_timeout is None:           # sent as is: -1, "unchanged"
            rebalance_timeout = -1
        elif epoch == 0 and rebalance_timeout == -1:
            rebalance_timeout = 300000
        tps = None if owned is None else [{"topic_id": self.topic_ids[t], "partitions": ps}
                                          for t, ps in sorted(owned.items())]
        r = self.call(68, 1, {"group_id": self.group, "member_id": mid, "member_epoch": epoch,
                              "instance_id": instance, "rack_id": None, "rebalance_timeout": rebalance_timeout,
                              "subscribed_topic_names": topics, "subscribed_topic_regex": regex,
                              "server_assignor": assignor, "topic_partitions": tps})
        out: dict[str, Any] = {"member": label, "error": int(r.error_code)}
        if r.error_code:
            out["message"] = self.scrub(r.error_message)
        else:
            out["epoch"] = r.member_epoch
            out["interval_ms"] = int(r.heartbeat_interval.total_seconds() * 1000)
            self.epochs[label] = r.member_epoch
            if r.assignment is not None:
                got = self.named(r.assignment.topic_partitions)
                out["assignment"] = got
                self.owned[label] = got
        if record:
            self.transcript.append(("heartbeat", out))
        return out

    def until(self, label: str, condition: Any, timeout: float = 60, **kw: Any) -> dict[str, Any]:
        """Heartbeat every 0.5 s until ``condition(answer)``; records only the last answer."""
        deadline = time.monotonic() + timeout
        while True:
            out = self.heartbeat(label, record=False, **kw)
            if condition(out):
                self.transcript.append(("heartbeat", out))
                return out
            assert time.monotonic() < deadline, f"{label}: condition not reached, last answer {out}"
            time.sleep(0.5)

    def settle(self, labels: list[str], rounds: int = 6) -> None:
        """Heartbeat every member (owning what it was given) until nothing changes for a round."""
        previous = None
        for _ in range(rounds * 4):
            state = [self.heartbeat(lb, record=False) for lb in labels]
            snap = [(s.get("epoch"), str(self.owned.get(s["member"]))) for s in state]
            if snap == previous:
                break
            previous = snap
        self.transcript.append(("settled", {lb: (self.epochs.get(lb), self.owned.get(lb)) for lb in labels}))

    # --- the other APIs -------------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        for _ in range(200):
            r = self.call(69, 1, {"group_ids": [self.group], "include_authorized_operations": False})
            g = r.groups[0]
            if g.error_code not in RETRIABLE:
                break
            time.sleep(0.2)
        out: dict[str, Any] = {"error": int(g.error_code)}
        if g.error_code == 0:
            members = [(self.label(m.member_id), m.instance_id, m.member_epoch, sorted(m.subscribed_topic_names),
                        m.subscribed_topic_regex, self.named(m.assignment.topic_partitions),
                        self.named(m.target_assignment.topic_partitions), m.member_type) for m in g.members]
            out.update(state=g.group_state, group_epoch=g.group_epoch, assignment_epoch=g.assignment_epoch,
                       assignor=g.assignor_name, members=sorted(members, key=repr))
        else:
            out["message"] = self.scrub(g.error_message)
        self.transcript.append(("describe", out))
        return out

    def list_groups(self) -> None:
        r = self.call(16, 5, {"states_filter": [], "types_filter": []})
        mine = [(g.group_id == self.group, g.protocol_type, g.group_state, g.group_type)
                for g in r.groups if g.group_id == self.group]
        self.transcript.append(("list_groups", mine))

    def describe_groups(self, version: int = 5) -> None:
        r = self.call(15, version, {"groups": [self.group], "include_authorized_operations": False})
        g = r.groups[0]
        self.transcript.append(("describe_groups", (int(g.error_code), g.group_state, g.protocol_type,
                                                    len(g.members))))

    def commit(self, label: str | None, epoch: int, offsets: dict[str, dict[int, int]], version: int = 9) -> None:
        mid = "" if label is None else self.member(label)
        r = self.call(8, version, {"group_id": self.group, "generation_id_or_member_epoch": epoch,
                                   "member_id": mid, "group_instance_id": None, "retention_time": -1,
                                   "topics": [{"name": t, "partitions": [
                                       {"partition_index": p, "committed_offset": o, "committed_leader_epoch": -1,
                                        "committed_metadata": ""} for p, o in sorted(ps.items())]}
                                       for t, ps in sorted(offsets.items())]})
        self.transcript.append(("commit", label, epoch, version, sorted(
            (t.name, p.partition_index, int(p.error_code)) for t in r.topics for p in t.partitions)))

    def fetch(self, label: str | None, epoch: int, topics: dict[str, list[int]]) -> None:
        mid = None if label is None else self.member(label)
        r = self.call(9, 9, {"groups": [{"group_id": self.group, "member_id": mid, "member_epoch": epoch,
                                         "topics": [{"name": t, "partition_indexes": ps}
                                                    for t, ps in sorted(topics.items())]}],
                             "require_stable": False})
        g = r.groups[0]
        rows = sorted((t.name, p.partition_index, p.committed_offset, int(p.error_code))
                      for t in g.topics for p in t.partitions)
        self.transcript.append(("fetch", label, epoch, int(g.error_code), rows))
