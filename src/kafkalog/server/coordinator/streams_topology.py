"""A streams group's topology (KIP-1071): the checks Kafka 4.4 makes of a StreamsGroupHeartbeat
before it reaches the group (:func:`validate`), the topology as its StreamsGroupTopology record
holds it, and its configuration against the topics (Kafka's ``InternalTopicManager``): the tasks of
each subtopology, or the status to answer and the internal topics to create."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from kafkalog.server import error_codes as ec
from kafkalog.server.coordinator.consumer_group import LEAVE_GROUP_STATIC_EPOCH, GroupError

# StreamsGroupHeartbeatResponse.Status
STALE_TOPOLOGY, MISSING_SOURCE_TOPICS, INCORRECTLY_PARTITIONED_TOPICS, MISSING_INTERNAL_TOPICS = 0, 1, 2, 3
SHUTDOWN_APPLICATION, ASSIGNMENT_DELAYED = 4, 5


class ConfiguredTopology(NamedTuple):
    #: subtopology id -> number of tasks; None when not ready
    tasks: dict[str, int] | None
    status: tuple[int, str] | None
    creatable: dict[str, tuple[int, int, dict[str, str]]]


def configure_topology(topology: Mapping[str, Any], partitions_of: Callable[[str], int | None]
                       ) -> ConfiguredTopology:
    """Kafka's ``InternalTopicManager.configureTopics``: the tasks of each subtopology once every
    topic is there with the right partition count, else the status to answer (and the internal
    topics to create)."""
    subs = topology["subtopologies"]
    missing = sorted({t for s in subs for t in s["source_topics"] if partitions_of(t) is None})
    if missing:
        return ConfiguredTopology(None, (MISSING_SOURCE_TOPICS, f"Source topics {', '.join(missing)} are missing."),
                                  {})
    repartition: dict[str, int] = {}
    fixed_count = set()
    for s in subs:
        for info in s["repartition_source_topics"]:
            if info["partitions"] > 0:
                repartition[info["name"]] = info["partitions"]
                fixed_count.add(info["name"])
    changed = True
    while changed:                        # a repartition topic without a count: its writers' maximum
        changed = False
        for s in subs:
            counts = [partitions_of(t) or 0 for t in s["source_topics"]]
            counts += [repartition[r["name"]] for r in s["repartition_source_topics"] if r["name"] in repartition]
            if not counts:
                continue
            for sink in s["repartition_sink_topics"]:
                if sink not in fixed_count and repartition.get(sink, -1) < max(counts):
                    repartition[sink] = max(counts)
                    changed = True
    for s in subs:                        # copartitioned repartition topics follow their group's maximum
        for cg in s["copartition_groups"]:
            if any(not 0 <= i < len(s["source_topics"]) for i in cg["source_topics"]) or any(
                    not 0 <= i < len(s["repartition_source_topics"]) for i in cg["repartition_source_topics"]):
                # an index outside its array: Kafka 4.4 fails on it with an unexpected exception
                raise GroupError(ec.UNKNOWN_SERVER_ERROR)
            topics = [s["source_topics"][i] for i in cg["source_topics"]]
            topics += [s["repartition_source_topics"][i]["name"] for i in cg["repartition_source_topics"]]
            fixed = {partitions_of(t) or 0 for t in topics if t in s["source_topics"]}
            if len(fixed) > 1:
                return ConfiguredTopology(None, (INCORRECTLY_PARTITIONED_TOPICS,
                                                 f"Following topics do not have the same number of partitions: "
                                                 f"[{', '.join(sorted(topics))}]"), {})
            n = max(fixed) if fixed else max((repartition.get(t, 0) for t in topics), default=0)
            for t in topics:
                if t in repartition:
                    repartition[t] = n
    tasks: dict[str, int] = {}
    creatable: dict[str, tuple[int, int, dict[str, str]]] = {}
    wrong: list[str] = []
    for s in subs:
        counts = [partitions_of(t) or 0 for t in s["source_topics"]]
        counts += [repartition.get(r["name"], 0) for r in s["repartition_source_topics"]]
        n = max(counts, default=0)
        tasks[s["subtopology_id"]] = n
        internal = [(r, repartition.get(r["name"], 0)) for r in s["repartition_source_topics"]]
        internal += [(c, n) for c in s["state_changelog_topics"]]
        for info, count in internal:
            have = partitions_of(info["name"])
            if have is None:
                creatable[info["name"]] = (count, info["replication_factor"],
                                           {kv["key"]: kv["value"] for kv in info["topic_configs"]})
            elif have != count:
                wrong.append(info["name"])
    if creatable:
        return ConfiguredTopology(None, (MISSING_INTERNAL_TOPICS,
                                         f"Internal topics are missing: {', '.join(sorted(creatable))}"), creatable)
    if wrong:
        return ConfiguredTopology(None, (INCORRECTLY_PARTITIONED_TOPICS,
                                         f"Internal topics have the wrong number of partitions: "
                                         f"[{', '.join(sorted(wrong))}]"), {})
    return ConfiguredTopology(tasks, None, {})


def topology_record_value(t: Any) -> dict[str, Any]:
    """A heartbeat's topology (a kio entity) as the StreamsGroupTopology record value."""
    def info(i: Any) -> dict[str, Any]:
        return {"name": i.name, "partitions": int(i.partitions), "replication_factor": int(i.replication_factor),
                "topic_configs": [{"key": kv.key, "value": kv.value} for kv in i.topic_configs]}
    return {"epoch": int(t.epoch), "subtopologies": [{
        "subtopology_id": s.subtopology_id, "source_topics": list(s.source_topics),
        "source_topic_regex": list(s.source_topic_regex),
        "state_changelog_topics": [info(i) for i in s.state_changelog_topics],
        "repartition_sink_topics": list(s.repartition_sink_topics),
        "repartition_source_topics": [info(i) for i in s.repartition_source_topics],
        "copartition_groups": [{"source_topics": [int(x) for x in c.source_topics],
                                "source_topic_regex": [int(x) for x in c.source_topic_regex],
                                "repartition_source_topics": [int(x) for x in c.repartition_source_topics]}
                               for c in s.copartition_groups]} for s in t.subtopologies]}


def topology_topics(topology: Mapping[str, Any]) -> set[str]:
    """Every topic a topology needs: source, repartition and changelog topics."""
    out: set[str] = set()
    for s in topology["subtopologies"]:
        out |= set(s["source_topics"])
        out |= {r["name"] for r in s["repartition_source_topics"]}
        out |= {c["name"] for c in s["state_changelog_topics"]}
    return out



def validate(b: Any) -> None:
    """Kafka's ``throwIfStreamsGroupHeartbeatRequestIsUsingUnsupportedFeatures`` then
    ``throwIfStreamsGroupHeartbeatRequestIsInvalid`` (GroupError with the first failure)."""
    def bad(message: str) -> GroupError:
        return GroupError(ec.INVALID_REQUEST, message)
    if b.topology is not None:
        for s in b.topology.subtopologies:
            if s.source_topic_regex:
                raise bad("Regular expressions for source topics are not supported yet.")
    for value, name in ((b.member_id, "MemberId"), (b.group_id, "GroupId"), (b.instance_id, "InstanceId"),
                        (b.rack_id, "RackId")):
        if value is not None and not value.strip():
            raise bad(f"{name} can't be empty.")
    tasks = (b.active_tasks, b.standby_tasks, b.warmup_tasks)
    if b.member_epoch == 0:
        if int(b.rebalance_timeout.total_seconds() * 1000) == -1:
            raise bad("RebalanceTimeoutMs must be provided in first request.")
        for t, name in zip(tasks, ("ActiveTasks", "StandbyTasks", "WarmupTasks"), strict=True):
            if t is None or t:
                raise bad(f"{name} must be empty when (re-)joining.")
        if b.topology is None:
            raise bad("Topology must be non-null when (re-)joining.")
        for s in b.topology.subtopologies:
            for info in s.state_changelog_topics:
                if info.partitions != 0:
                    raise GroupError(ec.STREAMS_INVALID_TOPOLOGY,
                                     f"Changelog topic {info.name} must have an undefined partition count, "
                                     f"but it is set to {info.partitions}.")
    elif b.member_epoch == LEAVE_GROUP_STATIC_EPOCH:
        if b.instance_id is None:
            raise bad("InstanceId can't be null.")
    elif b.member_epoch < LEAVE_GROUP_STATIC_EPOCH:
        raise bad(f"MemberEpoch is {b.member_epoch}, but must be greater than or equal to -2.")
    if any(t is not None for t in tasks) and any(t is None for t in tasks):
        raise bad("If one task-type is non-null, all must be non-null.")
    if b.member_epoch != 0 and b.topology is not None:
        raise bad("Topology can only be provided when (re-)joining.")
