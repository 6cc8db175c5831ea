"""The ACL APIs: DescribeAcls, CreateAcls, DeleteAcls (Kafka's ``AclApis`` and the controller's
``AclControlManager``). Each first needs DESCRIBE (DescribeAcls) or ALTER (the others) on the
cluster, else the whole request is answered CLUSTER_AUTHORIZATION_FAILED; without an authorizer
they answer SECURITY_DISABLED. A creation or filter Kafka refuses gets its INVALID_REQUEST and
message in its own result; the others are applied and stored before the answer goes out."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from kafkalog.errors import KafkalogError
from kafkalog.server.error_codes import (
    CLUSTER_AUTHORIZATION_FAILED,
    INVALID_REQUEST,
    SECURITY_DISABLED,
    UNKNOWN_SERVER_ERROR,
)
from kafkalog.server.requests.protocol import InvalidRequestError, Request
from kafkalog.server.security.acl_operations import ALTER, CLUSTER, DESCRIBE
from kafkalog.server.security.authorizer import (
    ALLOW,
    ANY,
    CLUSTER_NAME,
    DENY,
    LITERAL,
    MATCH,
    OPERATION_NAMES,
    PATTERN_TYPE_NAMES,
    PERMISSION_NAMES,
    PREFIXED,
    RESOURCE_TYPE_NAMES,
    UNKNOWN,
    AclBinding,
    AclBindingFilter,
    current_session,
    known,
)

if TYPE_CHECKING:      # the state owner that dispatches to these handlers
    from kafkalog.server.broker import Broker

logger = logging.getLogger("kafkalog.server")

_NO_AUTHORIZER = "No Authorizer is configured."


def _refusal(broker: Broker, request: Request, op: int, no_authorizer: str) -> tuple[int, str] | None:
    """The error and message of the whole request: CLUSTER_AUTHORIZATION_FAILED when the session may not
    do ``op`` on the cluster (Kafka's ``authorizeClusterOperation``), SECURITY_DISABLED without an
    authorizer; None to go on."""
    auth = broker.authorizer
    if auth is None:
        return SECURITY_DISABLED, no_authorizer
    if auth.authorize(current_session.get(), op, CLUSTER, CLUSTER_NAME):
        return None
    # Kafka's broker answers DescribeAcls itself; its controller answers the alterations it is forwarded
    verb = "is not authorized" if op == DESCRIBE else "needs ALTER permission"
    return CLUSTER_AUTHORIZATION_FAILED, f"Request {request.describe()} {verb}."


def _refuse_unknown(request: Request, items: Any, codes: Any) -> None:
    """Kafka refuses a request whose filter or creation has the UNKNOWN code (0) for a resource type,
    pattern type, operation or permission when it parses it: the connection is closed."""
    for i, item in enumerate(items):
        if UNKNOWN in codes(item):
            raise InvalidRequestError(f"{request.describe()}: element {i} contains UNKNOWN elements "
                                      f"(code 0 for a resource type, pattern type, operation or permission)")


def _filter_codes(body: Any) -> tuple[int, ...]:
    return (body.resource_type_filter, body.pattern_type_filter, body.operation, body.permission_type)


def _filter(body: Any) -> AclBindingFilter:
    return AclBindingFilter(known(body.resource_type_filter, RESOURCE_TYPE_NAMES), body.resource_name_filter,
                            known(body.pattern_type_filter, PATTERN_TYPE_NAMES), body.principal_filter,
                            body.host_filter, known(body.operation, OPERATION_NAMES),
                            known(body.permission_type, PERMISSION_NAMES))


def handle_describe_acls(broker: Broker, request: Request) -> Any:
    _refuse_unknown(request, [request.body], _filter_codes)
    refused = _refusal(broker, request, DESCRIBE, "No Authorizer is configured on the broker")
    if refused is not None or broker.authorizer is None:
        code, msg = refused or (0, "")
        return broker.response(request, {"throttle_time": 0, "error_code": code, "error_message": msg,
                                         "resources": []})
    grouped: dict[tuple[int, str, int], list[AclBinding]] = {}
    for b in broker.authorizer.acls(_filter(request.body)):
        grouped.setdefault((b.resource_type, b.name, b.pattern_type), []).append(b)
    resources = [{"resource_type": t, "resource_name": n, "pattern_type": p,
                  "acls": [{"principal": b.principal, "host": b.host, "operation": b.operation,
                            "permission_type": b.permission} for b in acls]}
                 for (t, n, p), acls in grouped.items()]
    return broker.response(request, {"throttle_time": 0, "error_code": 0, "error_message": "",
                                     "resources": resources})


def _creation_error(b: AclBinding) -> str | None:
    """Why Kafka refuses to create ``b`` (``AclApis.handleCreateAcls``, ``AclControlManager.validateNewAcl``)."""
    if b.resource_type == CLUSTER and b.name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if not b.name:
        return "Invalid empty resource name"
    if b.resource_type in (UNKNOWN, ANY):
        return f"Invalid resourceType {RESOURCE_TYPE_NAMES[b.resource_type]}"
    if b.pattern_type not in (LITERAL, PREFIXED):
        return f"Invalid patternType {PATTERN_TYPE_NAMES[b.pattern_type]}"
    if b.operation in (UNKNOWN, ANY):
        return f"Invalid operation {OPERATION_NAMES[b.operation]}"
    if b.permission not in (ALLOW, DENY):
        return f"Invalid permissionType {PERMISSION_NAMES[b.permission]}"
    if ":" not in b.principal:
        return (f"Could not parse principal from `{b.principal}` (no colon is present separating the "
                f"principal type from the principal name)")
    return None


def handle_create_acls(broker: Broker, request: Request) -> Any:
    creations = request.body.creations
    _refuse_unknown(request, creations, lambda c: (c.resource_type, c.resource_pattern_type, c.operation,
                                                   c.permission_type))
    refused = _refusal(broker, request, ALTER, _NO_AUTHORIZER)
    auth = broker.authorizer
    if refused is not None or auth is None:
        code, msg = refused or (0, "")
        return broker.response(request, {"throttle_time": 0, "results": [
            {"error_code": code, "error_message": msg} for _ in creations]})
    if any(c.resource_type == ANY or c.resource_pattern_type in (ANY, MATCH) or c.operation == ANY
           or c.permission_type == ANY for c in creations):
        # Kafka cannot make an ACL binding of a filter's ANY or MATCH: the whole request fails
        return broker.response(request, {"throttle_time": 0, "results": [
            {"error_code": UNKNOWN_SERVER_ERROR, "error_message": None} for _ in creations]})
    results, new = [], []
    for c in creations:
        b = AclBinding(known(c.resource_type, RESOURCE_TYPE_NAMES), c.resource_name or "",
                       known(c.resource_pattern_type, PATTERN_TYPE_NAMES), c.principal or "", c.host or "",
                       known(c.operation, OPERATION_NAMES), known(c.permission_type, PERMISSION_NAMES))
        err = _creation_error(b)
        results.append({"error_code": INVALID_REQUEST if err else 0, "error_message": err or ""})
        if err is None:
            new.append(b)
    if new:
        try:
            broker.change_acls(add=new)
        except KafkalogError as e:
            logger.error("CreateAcls: the ACLs could not be stored, nothing changed: %s", e)
            results = [{"error_code": UNKNOWN_SERVER_ERROR, "error_message": None} for _ in creations]
    return broker.response(request, {"throttle_time": 0, "results": results})


def handle_delete_acls(broker: Broker, request: Request) -> Any:
    filters = request.body.filters
    _refuse_unknown(request, filters, _filter_codes)
    refused = _refusal(broker, request, ALTER, _NO_AUTHORIZER)
    auth = broker.authorizer
    if refused is not None or auth is None:
        code, msg = refused or (0, "")
        return broker.response(request, {"throttle_time": 0, "filter_results": [
            {"error_code": code, "error_message": msg, "matching_acls": []} for _ in filters]})
    results, gone = [], set()
    for body in filters:
        f = _filter(body)
        if UNKNOWN in (f.resource_type, f.pattern_type):
            results.append({"error_code": INVALID_REQUEST, "error_message": "Unknown patternFilter.",
                            "matching_acls": []})
            continue
        if UNKNOWN in (f.operation, f.permission):
            results.append({"error_code": INVALID_REQUEST, "error_message": "Unknown entryFilter.",
                            "matching_acls": []})
            continue
        matching = [b for b in auth.acls(f) if b not in gone]
        gone.update(matching)
        results.append({"error_code": 0, "error_message": None, "matching_acls": [
            {"error_code": 0, "error_message": None, "resource_type": b.resource_type, "resource_name": b.name,
             "pattern_type": b.pattern_type, "principal": b.principal, "host": b.host,
             "operation": b.operation, "permission_type": b.permission} for b in matching]})
    if gone:
        try:
            broker.change_acls(remove=gone)
        except KafkalogError as e:
            logger.error("DeleteAcls: the ACLs could not be stored, nothing changed: %s", e)
            results = [{"error_code": UNKNOWN_SERVER_ERROR, "error_message": None, "matching_acls": []}
                       for _ in filters]
    return broker.response(request, {"throttle_time": 0, "filter_results": results})
