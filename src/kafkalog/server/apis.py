"""The dispatch table: API key -> served version range and handler. ApiVersions advertises exactly
this table; the ranges run from Kafka 4's floors (KIP-896) to what kio and the clients reach."""

from __future__ import annotations

from kafkalog.server.acls import handle_create_acls, handle_delete_acls, handle_describe_acls
from kafkalog.server.api_versions import ADVERTISED_MIN_VERSION, handle_api_versions
from kafkalog.server.config_admin import (
    handle_alter_configs,
    handle_describe_configs,
    handle_incremental_alter_configs,
)
from kafkalog.server.consumer_group_heartbeat import (
    handle_consumer_group_describe,
    handle_consumer_group_heartbeat,
)
from kafkalog.server.fetch import handle_fetch
from kafkalog.server.groups import (
    handle_delete_groups,
    handle_describe_groups,
    handle_find_coordinator,
    handle_heartbeat,
    handle_join_group,
    handle_leave_group,
    handle_list_groups,
    handle_sync_group,
)
from kafkalog.server.handler import Handler
from kafkalog.server.init_producer_id import handle_init_producer_id
from kafkalog.server.list_offsets import handle_list_offsets
from kafkalog.server.log_dirs import handle_describe_log_dirs
from kafkalog.server.metadata import handle_describe_cluster, handle_describe_topic_partitions, handle_metadata
from kafkalog.server.offset_commit import (
    handle_offset_commit,
    handle_offset_delete,
    handle_offset_fetch,
)
from kafkalog.server.produce import handle_produce
from kafkalog.server.sasl import handle_sasl_authenticate, handle_sasl_handshake
from kafkalog.server.scram_admin import handle_alter_user_scram_credentials, handle_describe_user_scram_credentials
from kafkalog.server.share_fetch import handle_share_acknowledge, handle_share_fetch
from kafkalog.server.share_group_heartbeat import handle_share_group_describe, handle_share_group_heartbeat
from kafkalog.server.share_group_offsets import (
    handle_alter_share_group_offsets,
    handle_delete_share_group_offsets,
    handle_describe_share_group_offsets,
)
from kafkalog.server.streams_group_heartbeat import handle_streams_group_describe, handle_streams_group_heartbeat
from kafkalog.server.telemetry import handle_get_telemetry_subscriptions, handle_push_telemetry
from kafkalog.server.topics import (
    handle_create_partitions,
    handle_create_topics,
    handle_delete_records,
    handle_delete_topics,
)
from kafkalog.server.transaction_describe import (
    handle_describe_producers,
    handle_describe_transactions,
    handle_list_transactions,
    handle_write_txn_markers,
)
from kafkalog.server.transactions import (
    handle_add_offsets_to_txn,
    handle_add_partitions_to_txn,
    handle_end_txn,
    handle_txn_offset_commit,
)

#: key: (name, min version, max version, handler)
APIS: dict[int, tuple[str, int, int, Handler]] = {
    0: ("Produce", 3, 13, handle_produce),
    1: ("Fetch", 4, 18, handle_fetch),
    2: ("ListOffsets", 1, 11, handle_list_offsets),
    3: ("Metadata", 0, 13, handle_metadata),
    8: ("OffsetCommit", 2, 10, handle_offset_commit),
    9: ("OffsetFetch", 1, 10, handle_offset_fetch),
    10: ("FindCoordinator", 0, 6, handle_find_coordinator),
    11: ("JoinGroup", 0, 9, handle_join_group),
    12: ("Heartbeat", 0, 4, handle_heartbeat),
    13: ("LeaveGroup", 0, 5, handle_leave_group),
    14: ("SyncGroup", 0, 5, handle_sync_group),
    15: ("DescribeGroups", 0, 6, handle_describe_groups),
    16: ("ListGroups", 0, 5, handle_list_groups),
    17: ("SaslHandshake", 0, 1, handle_sasl_handshake),
    18: ("ApiVersions", 0, 4, handle_api_versions),
    19: ("CreateTopics", 2, 7, handle_create_topics),
    20: ("DeleteTopics", 1, 6, handle_delete_topics),
    21: ("DeleteRecords", 0, 2, handle_delete_records),
    22: ("InitProducerId", 0, 5, handle_init_producer_id),
    # transactions v1 and v2 (KIP-890, transaction.version 2: EndTxn v5, TxnOffsetCommit v5); the
    # client versions of AddPartitionsToTxn (v4+ is broker-to-broker)
    24: ("AddPartitionsToTxn", 0, 3, handle_add_partitions_to_txn),
    25: ("AddOffsetsToTxn", 0, 4, handle_add_offsets_to_txn),
    26: ("EndTxn", 0, 5, handle_end_txn),
    27: ("WriteTxnMarkers", 1, 2, handle_write_txn_markers),
    28: ("TxnOffsetCommit", 0, 5, handle_txn_offset_commit),
    29: ("DescribeAcls", 1, 3, handle_describe_acls),
    30: ("CreateAcls", 1, 3, handle_create_acls),
    31: ("DeleteAcls", 1, 3, handle_delete_acls),
    32: ("DescribeConfigs", 1, 4, handle_describe_configs),
    33: ("AlterConfigs", 0, 2, handle_alter_configs),
    35: ("DescribeLogDirs", 1, 5, handle_describe_log_dirs),
    36: ("SaslAuthenticate", 0, 2, handle_sasl_authenticate),
    37: ("CreatePartitions", 0, 3, handle_create_partitions),
    42: ("DeleteGroups", 0, 2, handle_delete_groups),
    44: ("IncrementalAlterConfigs", 0, 1, handle_incremental_alter_configs),
    47: ("OffsetDelete", 0, 0, handle_offset_delete),
    50: ("DescribeUserScramCredentials", 0, 0, handle_describe_user_scram_credentials),
    51: ("AlterUserScramCredentials", 0, 0, handle_alter_user_scram_credentials),
    60: ("DescribeCluster", 0, 2, handle_describe_cluster),
    61: ("DescribeProducers", 0, 0, handle_describe_producers),
    65: ("DescribeTransactions", 0, 0, handle_describe_transactions),
    66: ("ListTransactions", 0, 2, handle_list_transactions),
    # the consumer group protocol (KIP-848; group.version 1)
    68: ("ConsumerGroupHeartbeat", 0, 1, handle_consumer_group_heartbeat),
    69: ("ConsumerGroupDescribe", 0, 1, handle_consumer_group_describe),
    # share groups (KIP-932; share.version 2)
    76: ("ShareGroupHeartbeat", 1, 1, handle_share_group_heartbeat),
    77: ("ShareGroupDescribe", 1, 1, handle_share_group_describe),
    78: ("ShareFetch", 1, 2, handle_share_fetch),
    79: ("ShareAcknowledge", 1, 2, handle_share_acknowledge),
    # streams groups (KIP-1071; streams.version 1)
    88: ("StreamsGroupHeartbeat", 0, 0, handle_streams_group_heartbeat),
    89: ("StreamsGroupDescribe", 0, 0, handle_streams_group_describe),
    90: ("DescribeShareGroupOffsets", 0, 1, handle_describe_share_group_offsets),
    91: ("AlterShareGroupOffsets", 0, 0, handle_alter_share_group_offsets),
    92: ("DeleteShareGroupOffsets", 0, 0, handle_delete_share_group_offsets),
    # client telemetry (KIP-714): answered, not advertised (as Kafka 4.4 without a metrics plugin)
    71: ("GetTelemetrySubscriptions", 0, 0, handle_get_telemetry_subscriptions),
    72: ("PushTelemetry", 0, 0, handle_push_telemetry),
    75: ("DescribeTopicPartitions", 0, 0, handle_describe_topic_partitions),
}
#: served but left out of ApiVersions, as Kafka leaves them out
UNADVERTISED = frozenset({71, 72})

VERSIONS: dict[int, tuple[int, int]] = {k: (lo, hi) for k, (_n, lo, hi, _h) in APIS.items()}
#: what ApiVersions lists: the served APIs less the unadvertised ones, with
#: :data:`~kafkalog.server.api_versions.ADVERTISED_MIN_VERSION` applied
ADVERTISED: dict[int, tuple[int, int]] = {k: (ADVERTISED_MIN_VERSION.get(k, lo), hi)
                                          for k, (lo, hi) in VERSIONS.items() if k not in UNADVERTISED}
HANDLERS: dict[int, Handler] = {k: h for k, (_n, _lo, _hi, h) in APIS.items()}
