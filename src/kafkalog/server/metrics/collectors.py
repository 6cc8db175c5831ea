"""The broker's figures read at scrape time, from the scraper's thread (copies of the broker's
dicts, no lock of the event loop's): Kafka's ReplicaManager gauges, the network's connection count
and idle share, the group coordinator's groups per protocol and state, the transactions per state,
and each group's consumer lag under kafka-exporter's names. Nothing here runs between scrapes; a
scrape costs O(partitions + committed offsets)."""

from __future__ import annotations

import re
from collections import Counter as Tally
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from kafkalog.log.metrics import Family, Sample

if TYPE_CHECKING:
    from kafkalog.server.broker import Broker
    from kafkalog.server.metrics.loop_idle import IdleMeter
    from kafkalog.server.metrics.metered_server import MeteredServer

__all__ = ["broker_families", "lag_families", "network_families"]

_GCM = "kafka_server_group_coordinator_metrics_"
_GMM = "kafka_coordinator_group_groupmetadatamanager_"


def _gauge(name: str, help: str, samples: Iterable[tuple[dict[str, str], float]]) -> Family:
    return Family(name, "gauge", help, [Sample("", labels, v) for labels, v in samples])


def _snake(state: str) -> str:
    """Kafka's state tag of a group state (``PreparingRebalance`` -> ``preparing_rebalance``)."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", state).lower()


def network_families(server: MeteredServer, idle: IdleMeter | None) -> list[Family]:
    """Connections per listener (``socket-server-metrics`` ``connection-count``) and the event
    loop's idle share (``NetworkProcessorAvgIdlePercent``, 0 to 1 as Kafka's)."""
    out = [_gauge("kafka_server_socket_server_metrics_connection_count",
                  "Open connections per listener (kafka.server:type=socket-server-metrics,listener=...,"
                  "networkProcessor=0: connection-count)",
                  [({"listener": name, "networkProcessor": "0"}, n)
                   for name, n in list(server.connections.items())])]
    ratio = idle.idle_ratio() if idle is not None else None
    if ratio is not None:
        out.append(_gauge("kafka_network_socketserver_networkprocessoravgidlepercent",
                          "The share of time the event loop waited for I/O since the previous scrape, 0 to 1 "
                          "(kafka.network:type=SocketServer,name=NetworkProcessorAvgIdlePercent)",
                          [({}, ratio)]))
    return out


def broker_families(broker: Broker) -> list[Family]:
    """ReplicaManager's partition gauges, the groups per protocol and state, the transactions."""
    partitions = len(broker.manager.partitions())
    offline = partitions if broker.log_dir_failure is not None else 0
    rm = "kafka_server_replicamanager_"
    out = [
        _gauge(rm + "partitioncount", "Partitions on this broker (ReplicaManager PartitionCount)",
               [({}, partitions)]),
        _gauge(rm + "leadercount", "Partitions this broker leads (ReplicaManager LeaderCount)",
               [({}, partitions - offline)]),
        _gauge(rm + "offlinereplicacount", "Partitions of an offline data directory "
               "(ReplicaManager OfflineReplicaCount)", [({}, offline)]),
        _gauge(rm + "underreplicatedpartitions", "Always 0 on one node (ReplicaManager UnderReplicatedPartitions)",
               [({}, 0)]),
    ]
    classic_groups = dict(broker.groups.groups)
    consumer_groups = dict(broker.consumer_groups.groups)
    share_groups = dict(broker.share_groups.groups)
    classic = Tally(_snake(g.state) for g in classic_groups.values())
    consumer = Tally(_snake(g.state) for g in consumer_groups.values())
    share = Tally(_snake(g.state) for g in share_groups.values())
    # a group that only commits offsets (no member ever joined) is an empty classic group, as in Kafka
    known = classic_groups.keys() | consumer_groups.keys() | share_groups.keys()
    classic["empty"] += sum(1 for g in broker.offsets.groups() if g not in known)
    out.append(_gauge(_GCM + "group_count", "Groups per protocol (group-coordinator-metrics group-count)",
                      [({"protocol": "classic"}, sum(classic.values())),
                       ({"protocol": "consumer"}, sum(consumer.values())),
                       ({"protocol": "share"}, sum(share.values()))]))
    for name, states, tally in (
            ("classic_group_count", ("preparing_rebalance", "completing_rebalance", "stable", "dead", "empty"),
             classic),
            ("consumer_group_count", ("empty", "assigning", "reconciling", "stable", "dead"), consumer),
            ("share_group_count", ("empty", "stable", "dead"), share)):
        out.append(_gauge(_GCM + name, f"Groups per state (group-coordinator-metrics {name.replace('_', '-')})",
                          [({"state": s}, tally.get(s, 0)) for s in states]))
    out.append(_gauge(_GMM + "numgroups", "Classic and consumer groups (GroupMetadataManager NumGroups)",
                      [({}, sum(classic.values()) + sum(consumer.values()))]))
    for state in ("preparing_rebalance", "completing_rebalance", "stable", "dead", "empty"):
        out.append(_gauge(_GMM + "numgroups" + state.replace("_", ""),
                          f"Classic groups in state {state} (GroupMetadataManager)", [({}, classic.get(state, 0))]))
    txns = Tally(m.state.name for m in _transactions(broker))
    out.append(_gauge("kafkalog_transaction_coordinator_transactions",
                      "Transactional ids per transaction state (kafkalog's; Kafka has no such MBean)",
                      [({"state": s}, n) for s, n in sorted(txns.items())]))
    return out


def _transactions(broker: Broker) -> list[Any]:
    coord = broker.transactions
    with coord._lock:
        return list(coord._txns.values())


def lag_families(broker: Broker) -> list[Family]:
    """kafka-exporter's consumer-group and topic figures: each group's committed offset and lag per
    partition (classic and consumer groups' committed offsets; a share group's share-partition start
    offset, whose lag leaves out the records settled above it, as DescribeShareGroupOffsets v1's),
    their sums per topic, the members per group, and each partition's offsets. The lag is
    against the log end offset (the high watermark of one node), as kafka-exporter's; kafkalog's
    ``kafkalog_consumergroup_lag_stable`` is against the last stable offset (what a read_committed
    consumer can reach)."""
    log_of: Callable[[str, int], Any] = broker.log
    current, lag, stable = [], [], []
    sums: dict[tuple[str, str], list[int]] = {}
    #: (group, topic, partition, committed offset, records settled above it: a share group's)
    committed: list[tuple[str, str, int, int, int]] = []
    offsets = broker.offsets
    with offsets._lock:
        snapshot = [(g, list(tps.items())) for g, tps in offsets._offsets.items()]
    for group, tps in snapshot:
        for tp, om in tps:
            committed.append((group, tp.topic, tp.partition, om.offset, 0))
    store = broker.share_state
    with store._lock:
        shares = list(store._states.items())
    name_of = broker.topic_ids.name_of
    for (group, topic_id, partition), state in shares:
        topic = name_of(topic_id)
        if topic is not None and state.start_offset >= 0:
            # as DescribeShareGroupOffsets v1's lag: the records settled above the start offset too
            committed.append((group, topic, partition, state.start_offset, max(state.delivery_complete_count, 0)))
    for group, topic, partition, offset, settled in committed:
        log = log_of(topic, partition)
        if log is None:
            continue
        _start, hw, lso = log.fetch_offset_snapshot()
        labels = {"consumergroup": group, "topic": topic, "partition": str(partition)}
        behind = max(hw - offset - settled, 0)
        current.append((labels, offset))
        lag.append((labels, behind))
        stable.append((labels, max(lso - offset - settled, 0)))
        s = sums.setdefault((group, topic), [0, 0])
        s[0] += offset
        s[1] += behind
    coordinators: tuple[Any, ...] = (broker.groups, broker.consumer_groups, broker.share_groups)
    members = [({"consumergroup": g}, len(grp.members)) for coord in coordinators
               for g, grp in list(coord.groups.items())]
    topics: list[tuple[dict[str, str], float]] = []
    newest, oldest = [], []
    for tp, log in broker.manager.logs():
        start, hw, _lso = log.fetch_offset_snapshot()
        labels = {"topic": tp.topic, "partition": str(tp.partition)}
        newest.append((labels, hw))
        oldest.append((labels, start))
    for topic in broker.manager.topics():
        topics.append(({"topic": topic}, len(broker.manager.partitions_of(topic))))
    return [
        _gauge("kafka_consumergroup_current_offset", "A group's committed offset of a partition", current),
        _gauge("kafka_consumergroup_lag", "A group's lag on a partition: log end offset - committed offset", lag),
        _gauge("kafkalog_consumergroup_lag_stable",
               "A group's lag on a partition against its last stable offset (read_committed)", stable),
        _gauge("kafka_consumergroup_current_offset_sum", "A group's committed offsets of a topic, summed",
               [({"consumergroup": g, "topic": t}, s[0]) for (g, t), s in sums.items()]),
        _gauge("kafka_consumergroup_lag_sum", "A group's lag on a topic, summed over its partitions",
               [({"consumergroup": g, "topic": t}, s[1]) for (g, t), s in sums.items()]),
        _gauge("kafka_consumergroup_members", "A group's members", members),
        _gauge("kafka_topic_partitions", "A topic's partitions", topics),
        _gauge("kafka_topic_partition_current_offset", "A partition's log end offset", newest),
        _gauge("kafka_topic_partition_oldest_offset", "A partition's log start offset", oldest),
    ]
