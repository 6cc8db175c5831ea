"""ListOffsets: earliest (-2), latest (-1: the high watermark, or the last stable offset under
read_committed, with the partition's leader epoch), max timestamp (-3), earliest local (-4),
latest tiered (-5), and by timestamp through the ``.timeindex`` (the epoch of the batch found)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafkalog.errors import KafkalogError
from kafkalog.record.constants import IsolationLevel
from kafkalog.server import error_codes
from kafkalog.server.error_codes import error_code
from kafkalog.server.requests.protocol import Request
from kafkalog.server.security.acl_operations import DESCRIBE, TOPIC

if TYPE_CHECKING:      # the state owner that dispatches to this handler
    from kafkalog.server.broker import Broker

LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3


def _one(broker: Broker, topic: str, p: Any, committed: bool) -> dict[str, Any]:
    res: dict[str, Any] = {"partition_index": p.partition_index, "error_code": 0, "timestamp": -1,
                           "offset": -1, "leader_epoch": -1}
    if not broker.authorize(DESCRIBE, TOPIC, topic):
        res["error_code"] = error_codes.TOPIC_AUTHORIZATION_FAILED
        return res
    log = broker.log(topic, p.partition_index)
    if log is None:
        res["error_code"] = broker.missing_partition_error(topic, p.partition_index)
        return res
    ts = p.timestamp
    if ts == LATEST:
        # Kafka answers the partition's current leader epoch here (Partition.fetchOffsetForTimestamp),
        # not the epoch of a batch
        res.update(offset=log.last_stable_offset if committed else log.high_watermark,
                   leader_epoch=broker.leader_epoch(log))
        return res
    try:
        found = log.offset_for_timestamp(ts)
    except KafkalogError as e:
        res["error_code"] = error_code(e)
        return res
    if found is not None:
        res.update(timestamp=found.timestamp, offset=found.offset,
                   leader_epoch=found.leader_epoch if found.leader_epoch is not None else -1)
        if ts == EARLIEST:
            res["timestamp"] = -1
    return res


def handle_list_offsets(broker: Broker, request: Request) -> Any:
    body = request.body
    committed = request.api_version >= 2 and body.isolation_level == IsolationLevel.READ_COMMITTED  # v2+
    topics = [{"name": t.name, "partitions": [_one(broker, t.name, p, committed) for p in t.partitions]}
              for t in body.topics]
    return broker.response(request, {"throttle_time": 0, "topics": topics})
