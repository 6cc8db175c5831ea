"""Kafka's ACL operations and resource types (``AclOperation``, ``ResourceType`` codes) and the
operations each resource type supports (``AclEntry.supportedOperations``): the bit sets a broker
answers as ``authorized_operations`` (Metadata's topics and cluster, DescribeCluster, DescribeGroups,
DescribeTopicPartitions).

Kafka 4.4 without an authorizer answers every operation the resource type supports (a topic 3576,
the cluster 8096, a group 3400, checked against its answers by tests/server/test_admin_answers.py),
and ``-2147483648`` ("omitted") when the request did not ask. An authorizer narrows the set to the
operations it allows: :func:`authorized_operations` takes its ``allowed`` predicate."""

from __future__ import annotations

from collections.abc import Callable

#: Kafka's "no authorized operations requested" sentinel (``Integer.MIN_VALUE``)
AUTHORIZED_OPERATIONS_OMITTED = -2147483648

# --- AclOperation codes ----------------------------------------------------------------------------
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 3, 4, 5, 6, 7, 8
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = 9, 10, 11, 12
CREATE_TOKENS, DESCRIBE_TOKENS, TWO_PHASE_COMMIT = 13, 14, 15

# --- ResourceType codes ----------------------------------------------------------------------------
TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID, DELEGATION_TOKEN, USER = 2, 3, 4, 5, 6, 7

#: resource type -> the operations an ACL on it may name (``AclEntry.supportedOperations``)
SUPPORTED_OPERATIONS: dict[int, frozenset[int]] = {
    TOPIC: frozenset({READ, WRITE, CREATE, DESCRIBE, DELETE, ALTER, DESCRIBE_CONFIGS, ALTER_CONFIGS}),
    GROUP: frozenset({READ, DESCRIBE, DELETE, DESCRIBE_CONFIGS, ALTER_CONFIGS}),
    CLUSTER: frozenset({CREATE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, ALTER,
                        DESCRIBE}),
    TRANSACTIONAL_ID: frozenset({DESCRIBE, WRITE, TWO_PHASE_COMMIT}),
    DELEGATION_TOKEN: frozenset({DESCRIBE}),
    USER: frozenset({CREATE_TOKENS, DESCRIBE_TOKENS}),
}


def bits(operations: frozenset[int] | set[int]) -> int:
    """Operations as Kafka's ``Utils.to32BitField``: bit ``code`` set for each."""
    out = 0
    for op in operations:
        out |= 1 << op
    return out


def authorized_operations(resource_type: int, requested: bool,
                          allowed: Callable[[int], bool] | None = None) -> int:
    """The ``authorized_operations`` field for one resource of ``resource_type``: "omitted" unless
    ``requested``; else the supported operations ``allowed`` permits (every one without an
    authorizer)."""
    if not requested:
        return AUTHORIZED_OPERATIONS_OMITTED
    ops = SUPPORTED_OPERATIONS[resource_type]
    return bits(ops if allowed is None else {op for op in ops if allowed(op)})
