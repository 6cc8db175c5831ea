"""CreateTopics, DeleteTopics and DeleteRecords."""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

from kafkalog.errors import InvalidTopicError, KafkalogError
from kafkalog.log.config import LogConfig
from kafkalog.log.naming import TopicPartition, validate_topic
from kafkalog.server import error_codes
from kafkalog.server.broker import Broker
from kafkalog.server.configs import topic_config_entries
from kafkalog.server.error_codes import error_code
from kafkalog.server.protocol import Request

logger = logging.getLogger("kafkalog.server")


def _create_one(broker: Broker, t: Any, validate_only: bool, duplicate: bool) -> dict[str, Any]:
    res: dict[str, Any] = {"name": t.name, "topic_id": None, "error_code": 0, "error_message": None,
                           "topic_config_error_code": 0, "num_partitions": -1,
                           "replication_factor": -1, "configs": []}
    if duplicate:
        res.update(error_code=error_codes.INVALID_REQUEST,
                   error_message=f"Create topics request from client contains multiple entries "
                                 f"for the following topic: {t.name}")
        return res
    try:
        validate_topic(t.name)
    except InvalidTopicError as e:
        res.update(error_code=error_codes.INVALID_TOPIC_EXCEPTION, error_message=e.message)
        return res
    if broker.manager.has_topic(t.name):
        res.update(error_code=error_codes.TOPIC_ALREADY_EXISTS,
                   error_message=f"Topic '{t.name}' already exists.")
        return res
    if t.assignments:
        if t.num_partitions != -1 or t.replication_factor != -1:
            res.update(error_code=error_codes.INVALID_REQUEST,
                       error_message="Both numPartitions or replicationFactor and replicasAssignments "
                                     "were set. Both cannot be used at the same time.")
            return res
        partitions = len(t.assignments)
        if any(list(a.broker_ids) != [broker.node_id] for a in t.assignments):
            res.update(error_code=error_codes.INVALID_REPLICATION_FACTOR,
                       error_message=f"replicas must be exactly [{broker.node_id}] on this one-node broker")
            return res
    else:
        partitions = broker.config.num_partitions if t.num_partitions == -1 else t.num_partitions
    if partitions < 1:
        res.update(error_code=error_codes.INVALID_PARTITIONS,
                   error_message="Number of partitions must be larger than 0.")
        return res
    if t.replication_factor not in (-1, 1):
        res.update(error_code=error_codes.INVALID_REPLICATION_FACTOR,
                   error_message=f"Replication factor: {t.replication_factor} larger than available "
                                 f"brokers: 1." if t.replication_factor > 1 else
                                 "Replication factor must be larger than 0, or -1 to use the default value.")
        return res
    configs = {c.name: c.value for c in t.configs if c.value is not None}
    try:
        cfg = LogConfig(configs, broker.manager.broker_config)
    except KafkalogError as e:
        res.update(error_code=error_codes.INVALID_CONFIG, error_message=e.message)
        return res
    if not validate_only:
        try:
            res["topic_id"] = broker.create_topic(t.name, partitions, configs)
        except KafkalogError as e:
            res.update(error_code=error_code(e), error_message=e.message)
            return res
    res.update(num_partitions=partitions, replication_factor=1,
               configs=topic_config_entries(broker, cfg))
    return res


def handle_create_topics(broker: Broker, request: Request) -> Any:
    body = request.body
    counts = Counter(t.name for t in body.topics)
    results = [_create_one(broker, t, body.validate_only, counts[t.name] > 1) for t in body.topics]
    return broker.response(request, {"throttle_time": 0, "topics": results})


def handle_delete_topics(broker: Broker, request: Request) -> Any:
    body = request.body
    if request.api_version >= 6:
        targets = [(t.name, t.topic_id) for t in body.topics]
    else:
        targets = [(name, None) for name in body.topic_names]
    results: list[dict[str, Any]] = []
    for name, tid in targets:
        res: dict[str, Any] = {"name": name, "topic_id": tid, "error_code": 0, "error_message": None}
        results.append(res)
        if name is None and tid is not None:
            name = broker.topic_ids.name_of(tid)
            if name is None:
                res.update(error_code=error_codes.UNKNOWN_TOPIC_ID)
                continue
            res["name"] = name
        if not broker.config.delete_topic_enable:
            res.update(error_code=error_codes.TOPIC_DELETION_DISABLED)
            continue
        if name is None or not broker.manager.has_topic(name):
            res.update(error_code=error_codes.UNKNOWN_TOPIC_OR_PARTITION)
            continue
        res["topic_id"] = broker.topic_ids.of(name)
        broker.manager.delete_topic(name)
        broker.topic_ids.forget(name)
        broker.consumer_groups.topics_changed([name])
        logger.info("deleted topic %s", name)
    return broker.response(request, {"throttle_time": 0, "responses": results})


def handle_delete_records(broker: Broker, request: Request) -> Any:
    topics = []
    for t in request.body.topics:
        parts = []
        for p in t.partitions:
            log = broker.log(t.name, p.partition_index)
            if log is None:
                parts.append({"partition_index": p.partition_index, "low_watermark": -1,
                              "error_code": error_codes.UNKNOWN_TOPIC_OR_PARTITION})
                continue
            target = log.high_watermark if p.offset == -1 else p.offset
            if target < 0 or target > log.high_watermark:
                parts.append({"partition_index": p.partition_index, "low_watermark": -1,
                              "error_code": error_codes.OFFSET_OUT_OF_RANGE})
                continue
            log.maybe_increment_log_start_offset(target, "client delete records request")
            broker.manager.checkpoint_log_start_offsets()
            parts.append({"partition_index": p.partition_index,
                          "low_watermark": log.log_start_offset, "error_code": 0})
            broker.notify_append(TopicPartition(t.name, p.partition_index))
        topics.append({"name": t.name, "partitions": parts})
    return broker.response(request, {"throttle_time": 0, "topics": topics})
