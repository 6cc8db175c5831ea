"""CreateTopics, CreatePartitions, DeleteTopics and DeleteRecords."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Optional

from kafkalog.errors import InvalidTopicError, KafkalogError
from kafkalog.log.config import LogConfig, check_kafka_minimums
from kafkalog.log.naming import TopicPartition, validate_topic
from kafkalog.server import error_codes, heap
from kafkalog.server.broker import INTERNAL_TOPICS
from kafkalog.server.error_codes import error_code
from kafkalog.server.handlers.config_admin import topic_config_entries
from kafkalog.server.handlers.throttling import mutation_quota
from kafkalog.server.requests.protocol import Request
from kafkalog.server.security.acl_operations import ALTER, CLUSTER, CREATE, DELETE, DESCRIBE, DESCRIBE_CONFIGS, TOPIC
from kafkalog.server.security.authorizer import CLUSTER_NAME

if TYPE_CHECKING:      # the state owner that dispatches to this handler
    from kafkalog.server.broker import Broker

logger = logging.getLogger("kafkalog.server")

#: a topic CreateTopics makes: its partition count, its configs and their LogConfig
_ToMake = tuple[int, dict[str, Any], LogConfig]


def _check_one(broker: Broker, t: Any, permit: Callable[[int], bool]) -> tuple[dict[str, Any], Optional[_ToMake]]:
    """The answer of a topic that is not made (an error, or refused by ``permit``: the
    controller_mutation_rate of :mod:`.throttling`), or the answer to complete and what to make (its
    partition count, configs and their LogConfig)."""
    res: dict[str, Any] = {"name": t.name, "topic_id": None, "error_code": 0, "error_message": None,
                           "topic_config_error_code": 0, "num_partitions": -1,
                           "replication_factor": -1, "configs": []}
    try:
        validate_topic(t.name)
    except InvalidTopicError as e:
        res.update(error_code=error_codes.INVALID_TOPIC_EXCEPTION, error_message=e.message)
        return res, None
    if broker.manager.has_topic(t.name):
        res.update(error_code=error_codes.TOPIC_ALREADY_EXISTS,
                   error_message=f"Topic '{t.name}' already exists.")
        return res, None
    if t.assignments:
        if t.num_partitions != -1 or t.replication_factor != -1:
            res.update(error_code=error_codes.INVALID_REQUEST,
                       error_message="Both numPartitions or replicationFactor and replicasAssignments "
                                     "were set. Both cannot be used at the same time.")
            return res, None
        partitions = len(t.assignments)
        if any(list(a.broker_ids) != [broker.node_id] for a in t.assignments):
            res.update(error_code=error_codes.INVALID_REPLICATION_FACTOR,
                       error_message=f"replicas must be exactly [{broker.node_id}] on this one-node broker")
            return res, None
    else:
        partitions = broker.config.num_partitions if t.num_partitions == -1 else t.num_partitions
    if partitions < 1:
        res.update(error_code=error_codes.INVALID_PARTITIONS,
                   error_message="Number of partitions was set to an invalid non-positive value.")
        return res, None
    if t.replication_factor not in (-1, 1):
        res.update(error_code=error_codes.INVALID_REPLICATION_FACTOR,
                   error_message=f"Unable to replicate the partition {t.replication_factor} time(s): The "
                                 f"target replication factor of {t.replication_factor} cannot be reached "
                                 f"because only 1 broker(s) are registered or some brokers have all "
                                 f"their log directories cordoned." if t.replication_factor > 1 else
                                 "Replication factor must be larger than 0, or -1 to use the default value.")
        return res, None
    configs = {c.name: c.value for c in t.configs if c.value is not None}
    try:
        cfg = LogConfig(configs, broker.manager.broker_config)
        check_kafka_minimums(configs)
    except KafkalogError as e:
        res.update(error_code=error_codes.INVALID_CONFIG, error_message=e.message)
        return res, None
    if not permit(partitions):          # controller_mutation_rate (:mod:`.throttling`)
        res.update(error_code=error_codes.THROTTLING_QUOTA_EXCEEDED, error_message=None)
        return res, None
    return res, (partitions, configs, cfg)


def _made(broker: Broker, res: dict[str, Any], make: _ToMake, topic_id: uuid.UUID) -> None:
    partitions, _configs, cfg = make
    res.update(topic_id=topic_id, num_partitions=partitions, replication_factor=1,
               configs=topic_config_entries(broker, cfg))


async def handle_create_topics(broker: Broker, request: Request) -> Any:
    body = request.body
    counts = Counter(t.name for t in body.topics)
    # as Kafka's controller: a name given twice is answered once, INVALID_REQUEST, and not created
    results: list[dict[str, Any]] = [
        {"name": name, "topic_id": None, "error_code": error_codes.INVALID_REQUEST,
         "error_message": "Duplicate topic name.", "topic_config_error_code": 0, "num_partitions": -1,
         "replication_factor": -1, "configs": []}
        for name in dict.fromkeys(t.name for t in body.topics if counts[t.name] > 1)]
    unique = [t for t in body.topics if counts[t.name] == 1]
    if broker.authorizer is not None and not broker.authorize(CREATE, CLUSTER, CLUSTER_NAME):
        # Kafka's controller: CREATE on the cluster or on each topic, the others answered last
        denied = [t for t in unique if not broker.authorize(CREATE, TOPIC, t.name)]
        unique = [t for t in unique if t not in denied]
    else:
        denied = []
    permit = mutation_quota(broker, request)
    checked = [_check_one(broker, t, permit) for t in unique]
    to_make = [(t.name, make[0], make[1]) for t, (_res, make) in zip(unique, checked) if make is not None]
    outcomes: list[uuid.UUID | KafkalogError] = []
    if to_make and not body.validate_only:
        # as Kafka's controller, answered once the topics are committed (their records on disk,
        # one wait on a worker thread for every topic of the request); their partitions are made
        # afterwards on the log manager's thread (10,000 partitions take seconds)
        outcomes = await asyncio.get_running_loop().run_in_executor(None, broker.commit_topics, to_make)
        broker.consumer_groups.topics_changed(
            [name for (name, _n, _c), o in zip(to_make, outcomes) if not isinstance(o, KafkalogError)])
    made = iter(outcomes)
    for t, (res, make) in zip(unique, checked):
        if make is not None and body.validate_only:
            _made(broker, res, make, uuid.uuid4())  # as Kafka's controller: the id it would get
        elif make is not None:
            outcome = next(made)
            if isinstance(outcome, KafkalogError):
                res.update(error_code=error_code(outcome), error_message=outcome.message)
            else:
                _made(broker, res, make, outcome)
        if res["error_code"] == 0 and broker.authorizer is not None and \
                not broker.authorize(DESCRIBE_CONFIGS, TOPIC, t.name):
            res.update(topic_config_error_code=error_codes.TOPIC_AUTHORIZATION_FAILED, configs=[],
                       num_partitions=-1, replication_factor=-1)
        results.append(res)
    results += [{"name": t.name, "topic_id": None, "error_code": error_codes.TOPIC_AUTHORIZATION_FAILED,
                 "error_message": "Authorization failed.", "topic_config_error_code": 0, "num_partitions": -1,
                 "replication_factor": -1, "configs": []} for t in denied]
    return broker.response(request, {"throttle_time": 0, "topics": results})


def handle_delete_topics(broker: Broker, request: Request) -> Any:
    body = request.body
    if request.api_version >= 6:
        targets = [(t.name, t.topic_id) for t in body.topics]
    else:
        targets = [(name, None) for name in body.topic_names]
    permit = mutation_quota(broker, request)
    results: list[dict[str, Any]] = []
    for name, tid in targets:
        res: dict[str, Any] = {"name": name, "topic_id": tid, "error_code": 0, "error_message": None}
        results.append(res)
        if name is None and tid is not None:
            name = broker.topic_ids.name_of(tid)
            if name is None:
                res.update(error_code=error_codes.UNKNOWN_TOPIC_ID,
                           error_message=error_codes.message(error_codes.UNKNOWN_TOPIC_ID))
                continue
            res["name"] = name
        if not broker.config.delete_topic_enable:
            res.update(error_code=error_codes.TOPIC_DELETION_DISABLED)
            continue
        # Kafka's controller: DESCRIBE on the topic, then its existence, then DELETE
        if name is not None and broker.authorizer is not None and not broker.authorize(DESCRIBE, TOPIC, name):
            res.update(error_code=error_codes.TOPIC_AUTHORIZATION_FAILED,
                       error_message=error_codes.message(error_codes.TOPIC_AUTHORIZATION_FAILED))
            continue
        if name is None or not broker.manager.has_topic(name):
            res.update(error_code=error_codes.UNKNOWN_TOPIC_OR_PARTITION,
                       error_message=error_codes.message(error_codes.UNKNOWN_TOPIC_OR_PARTITION))
            continue
        if broker.authorizer is not None and not broker.authorize(DELETE, TOPIC, name):
            res.update(error_code=error_codes.TOPIC_AUTHORIZATION_FAILED,
                       error_message=error_codes.message(error_codes.TOPIC_AUTHORIZATION_FAILED))
            continue
        if not permit(len(broker.manager.partitions_of(name))):     # controller_mutation_rate
            res.update(error_code=error_codes.THROTTLING_QUOTA_EXCEEDED, error_message=None)
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
        allowed = broker.authorizer is None or broker.authorize(DELETE, TOPIC, t.name)
        for p in t.partitions:
            if not allowed:
                parts.append({"partition_index": p.partition_index, "low_watermark": -1,
                              "error_code": error_codes.TOPIC_AUTHORIZATION_FAILED})
                continue
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


#: Kafka's controller refuses a CreatePartitions that adds more partitions than this in total
#: (``ReplicationControlManager.MAX_PARTITIONS_PER_BATCH``)
MAX_ADDITIONAL_PARTITIONS = 10_000


def _new_partitions_error(broker: Broker, name: str, count: int, current: int,
                          assignments: Any) -> tuple[int, str] | None:
    """Kafka's controller's check of growing ``name`` from ``current`` to ``count`` partitions
    (manual ``assignments`` must name this node once each), else None."""
    if count == current:
        return error_codes.INVALID_PARTITIONS, f"Topic already has {current} partition(s)."
    if count < current:
        return (error_codes.INVALID_PARTITIONS,
                f"The topic {name} currently has {current} partition(s); {count} would not be an increase.")
    if assignments is not None:
        additional = count - current
        if len(assignments) != additional:
            return (error_codes.INVALID_REPLICA_ASSIGNMENT,
                    f"Attempted to add {additional} additional partition(s), but only "
                    f"{len(assignments)} assignment(s) were specified.")
        for a in assignments:
            replicas = list(a.broker_ids)
            if not replicas:
                return (error_codes.INVALID_REPLICA_ASSIGNMENT,
                        "The manual partition assignment includes an empty replica list.")
            seen: set[int] = set()
            for r in replicas:
                if r in seen:
                    return (error_codes.INVALID_REPLICA_ASSIGNMENT,
                            f"The manual partition assignment includes the broker {r} more than once.")
                seen.add(r)
                if r != broker.node_id:
                    return (error_codes.INVALID_REPLICA_ASSIGNMENT,
                            f"The manual partition assignment includes broker {r}, but no such "
                            f"broker is registered.")
    if name in INTERNAL_TOPICS:
        # the coordinators map groups and transactional ids onto these partitions by their count
        return (error_codes.INVALID_REQUEST,
                f"kafkalog does not add partitions to the internal topic {name}: its coordinator "
                f"maps keys onto its partitions by their count")
    return None


def handle_create_partitions(broker: Broker, request: Request) -> Any:
    """CreatePartitions (API 37), answered as Kafka 4.4's controller does: duplicate names first
    (INVALID_REQUEST), then topics that do not exist (UNKNOWN_TOPIC_OR_PARTITION), then the others
    in request order; more than :data:`MAX_ADDITIONAL_PARTITIONS` new partitions in one request
    fail it whole (POLICY_VIOLATION). New partitions are empty logs with the topic's configuration
    and ID; nothing else (committed offsets, the existing partitions) changes."""
    body = request.body
    counts = Counter(t.name for t in body.topics)
    results: list[dict[str, Any]] = []
    for name in dict.fromkeys(t.name for t in body.topics if counts[t.name] > 1):
        results.append({"name": name, "error_code": error_codes.INVALID_REQUEST,
                        "error_message": "Duplicate topic name."})
    todo = [t for t in body.topics if counts[t.name] == 1]
    if broker.authorizer is not None:          # Kafka's controller: ALTER on each topic
        for t in todo:
            if not broker.authorize(ALTER, TOPIC, t.name):
                results.append({"name": t.name, "error_code": error_codes.TOPIC_AUTHORIZATION_FAILED,
                                "error_message": None})
        todo = [t for t in todo if broker.authorize(ALTER, TOPIC, t.name)]
    for t in todo:
        if not broker.manager.has_topic(t.name):
            results.append({"name": t.name, "error_code": error_codes.UNKNOWN_TOPIC_OR_PARTITION,
                            "error_message": None})
    todo = [t for t in todo if broker.manager.has_topic(t.name)]
    current = {t.name: len(broker.manager.partitions_of(t.name)) for t in todo}
    if sum(max(t.count - current[t.name], 0) for t in todo) > MAX_ADDITIONAL_PARTITIONS:
        results += [{"name": t.name, "error_code": error_codes.POLICY_VIOLATION,
                     "error_message": "Excessively large number of additional partitions per request."}
                    for t in todo]
        return broker.response(request, {"throttle_time": 0, "results": results})
    for t in todo:
        res: dict[str, Any] = {"name": t.name, "error_code": 0, "error_message": None}
        results.append(res)
        failed = _new_partitions_error(broker, t.name, t.count, current[t.name], t.assignments)
        if failed is not None:
            res.update(error_code=failed[0], error_message=failed[1])
            continue
        if body.validate_only:
            continue
        try:
            for log in broker.manager.add_partitions(t.name, t.count):
                broker.lead(log)
        except KafkalogError as e:
            res.update(error_code=error_code(e), error_message=e.message)
            continue
        logger.info("topic %s grew from %d to %d partition(s)", t.name, current[t.name], t.count)
    heap.settle()                   # the new partitions' objects leave the collector's walks
    return broker.response(request, {"throttle_time": 0, "results": results})
