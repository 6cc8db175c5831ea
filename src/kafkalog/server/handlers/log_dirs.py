"""DescribeLogDirs (v1-v5, what ``kafka-log-dirs.sh`` and ``Admin.describeLogDirs`` send): the data
directory as Kafka's one log directory, the size of each partition's log in it, and the file
system's total and usable bytes (v4), as Kafka's ``ReplicaManager.describeLogDirs`` answers. This
node has no future (reassigning) logs and leads every partition, so ``offset_lag`` is 0 and
``is_future_key`` false, as Kafka answers for a partition whose high watermark is its log end."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from kafkalog.server import error_codes as ec
from kafkalog.server.requests.protocol import Request
from kafkalog.server.security.acl_operations import CLUSTER, DESCRIBE
from kafkalog.server.security.authorizer import CLUSTER_NAME

if TYPE_CHECKING:      # the state owner that dispatches to this handler
    from kafkalog.server.broker import Broker


def handle_describe_log_dirs(broker: Broker, request: Request) -> Any:
    if broker.authorizer is not None and not broker.authorize(DESCRIBE, CLUSTER, CLUSTER_NAME):
        return broker.response(request, {"throttle_time": 0, "error_code": ec.CLUSTER_AUTHORIZATION_FAILED,
                                         "results": []})
    wanted: dict[str, set[int]] | None = None
    if request.body.topics is not None:           # null: every partition
        wanted = {}
        for t in request.body.topics:
            wanted.setdefault(t.topic, set()).update(t.partitions)
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for tp, log in sorted(broker.manager.logs(), key=lambda x: (x[0].topic, x[0].partition)):
        if wanted is not None and tp.partition not in wanted.get(tp.topic, ()):
            continue
        by_topic.setdefault(tp.topic, []).append({"partition_index": tp.partition, "partition_size": log.size,
                                                  "offset_lag": 0, "is_future_key": False})
    if broker.log_dir_failure is not None:        # an offline directory: Kafka's KAFKA_STORAGE_ERROR entry
        error, topics, total, usable = ec.KAFKA_STORAGE_ERROR, [], -1, -1
    else:
        st = os.statvfs(broker.manager.data_dir)
        error, total, usable = ec.NONE, st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
        topics = [{"name": name, "partitions": parts} for name, parts in by_topic.items()]
    return broker.response(request, {"throttle_time": 0, "error_code": ec.NONE, "results": [
        {"error_code": error, "log_dir": broker.manager.data_dir, "topics": topics,
         "total_bytes": total, "usable_bytes": usable, "is_cordoned": False}]})
