"""Kafka's ``KafkaApis``: the dispatch table (API key -> served version range and handler) and
:class:`KafkaApis`, which serves a broker's state (:class:`kafkalog.server.broker.Broker`) with it.
ApiVersions advertises exactly this table; the ranges run from Kafka 4's floors (KIP-896) to what
kio and the clients reach."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Coroutine, Mapping
from typing import Any, cast

from kafkalog.server.broker import Broker
from kafkalog.server.handlers.acls import handle_create_acls, handle_delete_acls, handle_describe_acls
from kafkalog.server.handlers.api_versions import ADVERTISED_MIN_VERSION, handle_api_versions
from kafkalog.server.handlers.client_quotas import handle_alter_client_quotas, handle_describe_client_quotas
from kafkalog.server.handlers.config_admin import (
    handle_alter_configs,
    handle_describe_configs,
    handle_incremental_alter_configs,
)
from kafkalog.server.handlers.consumer_group_heartbeat import (
    handle_consumer_group_describe,
    handle_consumer_group_heartbeat,
)
from kafkalog.server.handlers.feature_gates import gated
from kafkalog.server.handlers.feature_updates import handle_update_features
from kafkalog.server.handlers.fetch import handle_fetch
from kafkalog.server.handlers.groups import (
    handle_delete_groups,
    handle_describe_groups,
    handle_find_coordinator,
    handle_heartbeat,
    handle_join_group,
    handle_leave_group,
    handle_list_groups,
    handle_sync_group,
)
from kafkalog.server.handlers.handler import Handler, Response
from kafkalog.server.handlers.init_producer_id import handle_init_producer_id
from kafkalog.server.handlers.list_offsets import handle_list_offsets
from kafkalog.server.handlers.log_dirs import handle_describe_log_dirs
from kafkalog.server.handlers.metadata import handle_describe_cluster, handle_describe_topic_partitions, handle_metadata
from kafkalog.server.handlers.offset_commit import (
    handle_offset_commit,
    handle_offset_delete,
    handle_offset_fetch,
)
from kafkalog.server.handlers.produce import handle_produce
from kafkalog.server.handlers.replica_admin import (
    handle_alter_partition_reassignments,
    handle_elect_leaders,
    handle_list_partition_reassignments,
)
from kafkalog.server.handlers.sasl_handshake import handle_sasl_authenticate, handle_sasl_handshake
from kafkalog.server.handlers.scram_admin import (
    handle_alter_user_scram_credentials,
    handle_describe_user_scram_credentials,
)
from kafkalog.server.handlers.share_fetch import handle_share_acknowledge, handle_share_fetch
from kafkalog.server.handlers.share_group_heartbeat import handle_share_group_describe, handle_share_group_heartbeat
from kafkalog.server.handlers.share_group_offsets import (
    handle_alter_share_group_offsets,
    handle_delete_share_group_offsets,
    handle_describe_share_group_offsets,
)
from kafkalog.server.handlers.streams_group_heartbeat import (
    handle_streams_group_describe,
    handle_streams_group_heartbeat,
)
from kafkalog.server.handlers.telemetry import handle_get_telemetry_subscriptions, handle_push_telemetry
from kafkalog.server.handlers.throttling import throttle
from kafkalog.server.handlers.topics import (
    handle_create_partitions,
    handle_create_topics,
    handle_delete_records,
    handle_delete_topics,
)
from kafkalog.server.handlers.transaction_describe import (
    handle_describe_producers,
    handle_describe_transactions,
    handle_list_transactions,
    handle_write_txn_markers,
)
from kafkalog.server.handlers.transactions import (
    handle_add_offsets_to_txn,
    handle_add_partitions_to_txn,
    handle_end_txn,
    handle_txn_offset_commit,
)
from kafkalog.server.requests.protocol import Request, encode_response

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
    43: ("ElectLeaders", 0, 2, handle_elect_leaders),
    44: ("IncrementalAlterConfigs", 0, 1, handle_incremental_alter_configs),
    45: ("AlterPartitionReassignments", 0, 1, handle_alter_partition_reassignments),
    46: ("ListPartitionReassignments", 0, 0, handle_list_partition_reassignments),
    47: ("OffsetDelete", 0, 0, handle_offset_delete),
    48: ("DescribeClientQuotas", 0, 1, handle_describe_client_quotas),
    49: ("AlterClientQuotas", 0, 1, handle_alter_client_quotas),
    50: ("DescribeUserScramCredentials", 0, 0, handle_describe_user_scram_credentials),
    51: ("AlterUserScramCredentials", 0, 0, handle_alter_user_scram_credentials),
    57: ("UpdateFeatures", 0, 2, handle_update_features),
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
    88: ("StreamsGroupHeartbeat", 0, 1, handle_streams_group_heartbeat),
    89: ("StreamsGroupDescribe", 0, 1, handle_streams_group_describe),
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
#: :data:`~kafkalog.server.handlers.api_versions.ADVERTISED_MIN_VERSION` applied
ADVERTISED: dict[int, tuple[int, int]] = {k: (ADVERTISED_MIN_VERSION.get(k, lo), hi)
                                          for k, (lo, hi) in VERSIONS.items() if k not in UNADVERTISED}
HANDLERS: dict[int, Handler] = {k: gated(k, h) for k, (_n, _lo, _hi, h) in APIS.items()}


class KafkaApis:
    """Serves ``broker``'s state with the APIs' handlers: hands each parsed request to its API's
    handler (:meth:`dispatch`). Sets the broker's advertised version ranges (ApiVersions)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        broker.api_versions = ADVERTISED
        self._handlers: Mapping[int, Handler] = HANDLERS

    def api_keys(self) -> frozenset[int]:
        return frozenset(self._handlers)

    def handler(self, api_key: int) -> Handler:
        """The handler serving ``api_key`` (KeyError: not served)."""
        return self._handlers[api_key]

    def set_handler(self, api_key: int, handler: Handler | None) -> None:
        """Serve ``api_key`` with ``handler`` from the next request on (None: with its own handler
        again): the hook of :mod:`.request_control`, which costs nothing while no API is controlled."""
        handlers = dict(self._handlers)
        handlers[api_key] = HANDLERS[api_key] if handler is None else handler
        self._handlers = handlers

    def dispatch(self, request: Request) -> Response | Coroutine[Any, Any, Response]:
        """The response of ``request`` when its handler answers at once (no coroutine, nothing
        awaited: the network layer sends it from the readable callback), else a coroutine that
        finishes it."""
        broker = self.broker
        broker.start_timers()
        if broker.client_quotas.active:       # nothing measured while no quota is set
            return self._dispatch_throttled(request)
        try:
            result = self._handlers[request.api_key](broker, request)
            kind = type(result)
            if kind is list or kind is bytes:       # Fetch and Produce answer with frame parts
                return cast(Response, result)
            if asyncio.iscoroutine(result):
                return self._finish(request, result)
            return _response(request, result)
        except Exception as e:      # a handler's bug: the log's traceback names the request
            e.add_note(f"while handling {request.describe()}")
            raise

    async def _finish(self, request: Request, pending: Awaitable[Any]) -> Response:
        try:
            return _response(request, await pending)
        except Exception as e:
            e.add_note(f"while handling {request.describe()}")
            raise

    def _dispatch_throttled(self, request: Request) -> Response | Coroutine[Any, Any, Response]:
        """:meth:`dispatch` with the request's quotas counted and its throttle time applied
        (:mod:`.throttling`)."""
        started = time.perf_counter()
        try:
            result = self._handlers[request.api_key](self.broker, request)
            if asyncio.iscoroutine(result):
                return self._finish_throttled(request, result, time.perf_counter() - started)
            return _response(request, throttle(self.broker, request, result, time.perf_counter() - started))
        except Exception as e:
            e.add_note(f"while handling {request.describe()}")
            raise

    async def _finish_throttled(self, request: Request, pending: Awaitable[Any], handling_s: float) -> Response:
        try:
            return _response(request, throttle(self.broker, request, await pending, handling_s))
        except Exception as e:
            e.add_note(f"while handling {request.describe()}")
            raise


def _response(request: Request, result: Any) -> Response:
    """A handler's result as a response: frame bytes or parts as they are (None: no response),
    a kio entity encoded."""
    if result is None or type(result) is list or type(result) is bytes:
        return result
    return encode_response(request, result)
