"""``kafkalog bootstrap-topics DATA_DIR``: hand a data directory kafkalog wrote to a new Kafka cluster.

A KRaft broker serves only the topics its metadata log names, with the IDs of their
``partition.metadata`` (a partition directory it does not know is renamed ``...-stray`` and set
aside). After ``kafka-storage.sh format`` wrote the cluster's bootstrap snapshot (``--cluster-id``
and ``node.id`` those of DATA_DIR's ``meta.properties``), this command adds DATA_DIR's topics to it
(:mod:`kafkalog.log.cluster_metadata`): the cluster's first start then knows every topic, partition
and topic config, and serves every record. The directory's ACLs, SCRAM credentials and client quotas
(the stores ``kafkalog serve`` keeps beside the logs) go along as Kafka's records of them, so the new
cluster's authorizer, SASL/SCRAM and quotas enforce them. The feature levels UpdateFeatures changed
(``kafkalog-features.json``) go along as ``FeatureLevelRecord`` s after those ``kafka-storage.sh format``
wrote (the later record wins); ``metadata.version`` and ``kraft.version`` are the format's, and a file
finalizing others is refused. Output: one JSON line per topic, then a summary with the counts.
"""

from __future__ import annotations

import os
import uuid as _uuid
from typing import TYPE_CHECKING

import click

from kafkalog.cli.output import emit, format_option, handle_errors, resolve_format, use_format
from kafkalog.errors import LogDirError
from kafkalog.log.naming import (
    LEADER_EPOCH_CHECKPOINT_FILE,
    META_PROPERTIES_FILE,
    PARTITION_METADATA_FILE,
    parse_partition_dir_name,
    topic_config_file,
)

if TYPE_CHECKING:       # the log layer's files are imported when the command runs
    from kafkalog.log.checkpoint import MetaProperties
    from kafkalog.log.cluster_metadata import SecurityMetadata, TopicMetadata

#: Kafka creates its coordinators' topics compacted; a directory kafkalog wrote may not say so
_INTERNAL_TOPIC_CONFIGS = {"__consumer_offsets": {"cleanup.policy": "compact"},
                           "__transaction_state": {"cleanup.policy": "compact"}}


def _meta(dir_: str) -> MetaProperties:
    from kafkalog.log.checkpoint import MetaProperties
    path = os.path.join(dir_, META_PROPERTIES_FILE)
    if not os.path.exists(path):
        raise LogDirError("no meta.properties: not a formatted log directory", file=dir_)
    mp = MetaProperties.read(path)
    if mp.version != 1 or mp.cluster_id is None or mp.node_id is None or mp.directory_id is None:
        raise LogDirError("a KRaft log directory needs meta.properties version 1 with cluster.id, node.id "
                          "and directory.id", file=path)
    return mp


def _topics(data_dir: str) -> list[TopicMetadata]:
    from kafkalog.log.checkpoint import LeaderEpochCheckpointFile, PartitionMetadataFile, uuid_to_kafka_string
    from kafkalog.log.cluster_metadata import METADATA_PARTITION, TopicMetadata
    from kafkalog.log.config import parse_properties
    parts: dict[str, dict[int, str]] = {}
    for name in sorted(os.listdir(data_dir)):
        path = os.path.join(data_dir, name)
        if not os.path.isdir(path) or name == METADATA_PARTITION:
            continue
        parsed = parse_partition_dir_name(name)
        if parsed.kind:
            raise LogDirError(f"a {parsed.kind} partition directory: finish or remove it first", file=path)
        parts.setdefault(parsed.topic, {})[parsed.partition] = path
    out = []
    for topic, dirs in sorted(parts.items()):
        if sorted(dirs) != list(range(len(dirs))):
            raise LogDirError(f"topic {topic!r} has partitions {sorted(dirs)}, not 0..{len(dirs) - 1}",
                              file=data_dir)
        ids = set()
        for d in dirs.values():
            pm = PartitionMetadataFile(os.path.join(d, PARTITION_METADATA_FILE))
            if pm.exists():
                ids.add(pm.read().topic_id)
        if len(ids) > 1:
            raise LogDirError(f"the partitions of {topic!r} name different topic IDs: "
                              f"{', '.join(sorted(map(uuid_to_kafka_string, ids)))}", file=data_dir)
        topic_id = ids.pop() if ids else _uuid.uuid4()
        for d in dirs.values():     # a partition without partition.metadata gets the topic's ID
            pm = PartitionMetadataFile(os.path.join(d, PARTITION_METADATA_FILE))
            if not pm.exists():
                pm.write(topic_id)
        epochs = []
        for p in range(len(dirs)):
            entries = LeaderEpochCheckpointFile(os.path.join(dirs[p], LEADER_EPOCH_CHECKPOINT_FILE),
                                                create=False).read()
            epochs.append(max((e.epoch for e in entries), default=0))
        configs = dict(_INTERNAL_TOPIC_CONFIGS.get(topic, {}))
        cfg_path = topic_config_file(data_dir, topic)
        if os.path.exists(cfg_path):
            with open(cfg_path, encoding="utf-8") as f:
                configs.update(parse_properties(f.read(), file=cfg_path))
        out.append(TopicMetadata(topic, topic_id, len(dirs), epochs, configs))
    return out


def _security(data_dir: str) -> SecurityMetadata:
    """The ACLs, SCRAM credentials and client quotas ``kafkalog serve`` stored in ``data_dir`` (a
    damaged store is refused, naming its file)."""
    from kafkalog.log.cluster_metadata import SecurityMetadata
    from kafkalog.server.quota.quota_store import QuotaStore
    from kafkalog.server.security.acl_store import AclStore
    from kafkalog.server.security.scram_store import ScramStore
    scram = ScramStore(data_dir).load()
    return SecurityMetadata(
        acls=list(dict.fromkeys((b.resource_type, b.name, b.pattern_type, b.principal, b.host, b.operation,
                                 b.permission) for b in AclStore(data_dir).load())),
        scram={(mech, user): (c.salt, c.stored_key, c.server_key, c.iterations)
               for mech, users in scram.items() for user, c in users.items()},
        quotas={e: v for e, v in QuotaStore(data_dir).load().items() if v})


def _features(data_dir: str, snapshot: str) -> dict[str, int]:
    """The feature levels of ``data_dir``'s feature file other than metadata.version and kraft.version,
    empty without the file; refused (naming the file) when those two differ from the snapshot's."""
    from kafkalog.log.cluster_metadata import snapshot_feature_levels
    from kafkalog.server.features import KRAFT_VERSION, METADATA_VERSION, FeatureLevels
    levels = FeatureLevels(data_dir)
    if not levels.stored:
        return {}
    formatted = snapshot_feature_levels(snapshot)
    for name in (METADATA_VERSION, KRAFT_VERSION):
        if levels.level(name) != formatted.get(name, 0):
            raise LogDirError(f"the directory finalizes {name} {levels.level(name)}, the bootstrap snapshot "
                              f"{snapshot} {formatted.get(name, 0)}: format with the directory's {name}",
                              file=levels.path)
    return {k: v for k, v in levels.levels.items() if k not in (METADATA_VERSION, KRAFT_VERSION)}


@click.command("bootstrap-topics")
@click.argument("data_dir", type=click.Path())
@click.option("--metadata-log-dir", default=None, type=click.Path(),
              help="The cluster's metadata.log.dir, formatted by kafka-storage.sh (default: DATA_DIR).")
@format_option()
@handle_errors()
def bootstrap_topics(data_dir: str, metadata_log_dir: str | None, fmt: str | None) -> None:
    """Add the topics of DATA_DIR (topic IDs, partitions, configs), its ACLs, SCRAM credentials,
    client quotas and changed feature levels to the bootstrap metadata that `kafka-storage.sh format`
    wrote, so the new Kafka cluster's first start serves and enforces them. Run it with kafkalog stopped,
    after formatting the metadata log directory with DATA_DIR's cluster.id and node.id and before the
    cluster's first start."""
    from kafkalog.log.checkpoint import uuid_from_kafka_string, uuid_to_kafka_string
    from kafkalog.log.cluster_metadata import BOOTSTRAP_SNAPSHOT, METADATA_PARTITION, add_topics
    use_format(resolve_format(fmt))
    if not os.path.isdir(data_dir):
        raise LogDirError("no such directory", file=data_dir)
    meta_dir = metadata_log_dir or data_dir
    data_meta, cluster_meta = _meta(data_dir), _meta(meta_dir)
    if (data_meta.cluster_id, data_meta.node_id) != (cluster_meta.cluster_id, cluster_meta.node_id):
        raise LogDirError(f"meta.properties says cluster.id={cluster_meta.cluster_id} node.id="
                          f"{cluster_meta.node_id}, the data directory cluster.id={data_meta.cluster_id} "
                          f"node.id={data_meta.node_id}: format with the data directory's", file=meta_dir)
    mdir = os.path.join(meta_dir, METADATA_PARTITION)
    snapshot = os.path.join(mdir, BOOTSTRAP_SNAPSHOT)
    if not os.path.exists(snapshot):
        raise LogDirError(f"no bootstrap snapshot {METADATA_PARTITION}/{BOOTSTRAP_SNAPSHOT}: format the "
                          f"metadata log directory with kafka-storage.sh format first", file=meta_dir)
    if any(n.endswith(".log") and os.path.getsize(os.path.join(mdir, n)) > 0 for n in os.listdir(mdir)):
        raise LogDirError("the cluster has started already (its metadata log has records): create the "
                          "topics through it", file=mdir)
    security = _security(data_dir)          # before _topics, which may write partition.metadata
    features = _features(data_dir, snapshot)
    topics = _topics(data_dir)
    assert data_meta.directory_id is not None and data_meta.node_id is not None
    added = add_topics(snapshot, data_meta.node_id, uuid_from_kafka_string(data_meta.directory_id), topics,
                       security, features)
    for t in topics:
        emit({"type": "topic", "topic": t.name, "topicId": uuid_to_kafka_string(t.topic_id),
              "partitions": t.partitions, "configs": t.configs})
    emit({"type": "summary", "snapshot": snapshot, "topics": len(topics), "acls": len(security.acls),
          "scramCredentials": len(security.scram),
          "clientQuotas": sum(len(v) for v in security.quotas.values()), "featureLevels": len(features),
          "records": added})
