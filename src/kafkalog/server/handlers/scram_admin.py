"""SCRAM credential administration: DescribeUserScramCredentials and AlterUserScramCredentials (Kafka's
``KafkaApis`` and the controller's ``ScramControlManager``, ``ScramImage.describe``).

With an authorizer, Describe needs DESCRIBE and Alter ALTER on the cluster, else every result is
CLUSTER_AUTHORIZATION_FAILED. An upsertion carries what the client computed: salt, iterations and the
salted password (``Hi(password, salt, i)``); the broker keeps the stored and server keys derived from it
(RFC 5802), stores them (:mod:`.scram_store`) before answering, and the next SASL SCRAM handshake uses
them. Kafka's checks, entry by entry (deletions, then upsertions), one result per user, its first error:
an empty name UNACCEPTABLE_CREDENTIAL, a mechanism not SCRAM-SHA-256 (1) / SCRAM-SHA-512 (2)
UNSUPPORTED_SASL_MECHANISM, deleting a credential that does not exist RESOURCE_NOT_FOUND, iterations
outside 4096..16384 UNACCEPTABLE_CREDENTIAL, an empty salted password UNKNOWN_SERVER_ERROR; a valid
entry for a user already altered in the request makes it DUPLICATE_RESOURCE. The other users' changes
apply (checked against Kafka 4.4 by tests/server/test_scram_admin.py)."""

from __future__ import annotations

import hashlib
import hmac
import logging
from typing import TYPE_CHECKING, Any

from kafkalog.errors import KafkalogError
from kafkalog.server.error_codes import (
    CLUSTER_AUTHORIZATION_FAILED,
    DUPLICATE_RESOURCE,
    RESOURCE_NOT_FOUND,
    UNACCEPTABLE_CREDENTIAL,
    UNKNOWN_SERVER_ERROR,
    UNSUPPORTED_SASL_MECHANISM,
)
from kafkalog.server.requests.protocol import Request
from kafkalog.server.security.acl_operations import ALTER, CLUSTER, DESCRIBE
from kafkalog.server.security.authorizer import CLUSTER_NAME, current_session
from kafkalog.server.security.sasl_credentials import MAX_ITERATIONS, MIN_ITERATIONS, SCRAM_HASHES, ScramCredential

if TYPE_CHECKING:      # the state owner that dispatches to these handlers
    from kafkalog.server.broker import Broker

logger = logging.getLogger("kafkalog.server")

#: Kafka's ``ScramMechanism`` codes
MECHANISM_CODES = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
CODE_OF = {name: code for code, name in MECHANISM_CODES.items()}
_TWICE = "A user credential cannot be altered twice in the same request"


def _refused(broker: Broker, request: Request, op: int) -> str | None:
    """Kafka's message when the session may not do ``op`` on the cluster; None to go on."""
    auth = broker.authorizer
    if auth is None or auth.authorize(current_session.get(), op, CLUSTER, CLUSTER_NAME):
        return None
    verb = "is not authorized" if op == DESCRIBE else "needs ALTER permission"
    return f"Request {request.describe()} {verb}."


def credential(mechanism: str, salt: bytes, salted_password: bytes, iterations: int) -> ScramCredential:
    """RFC 5802's keys from the client's salted password: StoredKey = H(HMAC(SaltedPassword, "Client Key")),
    ServerKey = HMAC(SaltedPassword, "Server Key")."""
    h = SCRAM_HASHES[mechanism]
    client_key = hmac.digest(salted_password, b"Client Key", h)
    return ScramCredential(salt, hashlib.new(h, client_key).digest(),
                           hmac.digest(salted_password, b"Server Key", h), iterations)


def _check(name: str, mechanism: int) -> tuple[int, str | None] | None:
    if not name:
        return UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if mechanism not in MECHANISM_CODES:
        return UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    return None


def handle_describe_user_scram_credentials(broker: Broker, request: Request) -> Any:
    users = request.body.users
    refused = _refused(broker, request, DESCRIBE)
    if refused is not None:
        # Kafka's error response: no message, one nameless result per user asked for (Kafka 4.4 closes the
        # connection when every user was asked for: docs/kafka-compatibility.md)
        return broker.response(request, {
            "throttle_time": 0, "error_code": CLUSTER_AUTHORIZATION_FAILED, "error_message": None,
            "results": [{"user": "", "error_code": CLUSTER_AUTHORIZATION_FAILED, "error_message": None,
                         "credential_infos": []} for _ in users or ()]})
    stored = broker.scram_credentials
    twice: dict[str, bool] = {}
    if users:
        for u in users:
            twice[u.name] = u.name in twice
    else:
        for creds in stored.values():
            twice.update(dict.fromkeys(creds, False))
    results = []
    for user, dup in twice.items():
        if dup:
            results.append({"user": user, "error_code": DUPLICATE_RESOURCE, "credential_infos": [],
                            "error_message": "Cannot describe SCRAM credentials for the same user twice in a "
                                             f"single request: {user}"})
            continue
        infos = [{"mechanism": CODE_OF[mech], "iterations": stored[mech][user].iterations}
                 for mech in sorted(stored) if user in stored[mech]]
        if infos:
            results.append({"user": user, "error_code": 0, "error_message": "", "credential_infos": infos})
        else:
            results.append({"user": user, "error_code": RESOURCE_NOT_FOUND, "credential_infos": [],
                            "error_message": f"Attempt to describe a user credential that does not exist: {user}"})
    return broker.response(request, {"throttle_time": 0, "error_code": 0, "error_message": "",
                                     "results": results})


def handle_alter_user_scram_credentials(broker: Broker, request: Request) -> Any:
    body = request.body
    refused = _refused(broker, request, ALTER)
    if refused is not None:
        names = list(dict.fromkeys([x.name for x in body.deletions] + [x.name for x in body.upsertions]))
        return broker.response(request, {"throttle_time": 0, "results": [
            {"user": n, "error_code": CLUSTER_AUTHORIZATION_FAILED, "error_message": refused} for n in names]})
    stored = broker.scram_credentials
    pending: dict[str, tuple[str, ScramCredential | None]] = {}    # user -> (mechanism, None: deleted)
    errors: dict[str, tuple[int, str | None]] = {}
    for x, deleting in [(x, True) for x in body.deletions] + [(x, False) for x in body.upsertions]:
        if x.name in errors:
            continue                    # Kafka answers a user once: its first error
        err = _check(x.name, x.mechanism)
        mech = MECHANISM_CODES.get(x.mechanism, "")
        if err is None and deleting and x.name not in stored.get(mech, {}):
            err = RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"
        elif err is None and not deleting:
            if x.iterations < MIN_ITERATIONS:
                err = UNACCEPTABLE_CREDENTIAL, "Too few iterations"
            elif x.iterations > MAX_ITERATIONS:
                err = UNACCEPTABLE_CREDENTIAL, "Too many iterations"
            elif not x.salted_password:
                err = UNKNOWN_SERVER_ERROR, None     # Kafka's HMAC refuses an empty key
        if err is None and pending.pop(x.name, None) is not None:
            err = DUPLICATE_RESOURCE, _TWICE
        if err is not None:
            pending.pop(x.name, None)
            errors[x.name] = err
        else:
            pending[x.name] = (mech, None if deleting else
                               credential(mech, x.salt, x.salted_password, x.iterations))
    results = [{"user": n, "error_code": 0, "error_message": None} for n in pending]
    results += [{"user": n, "error_code": c, "error_message": m} for n, (c, m) in errors.items()]
    remove = [(mech, n) for n, (mech, cred) in pending.items() if cred is None]
    add = [(mech, n, cred) for n, (mech, cred) in pending.items() if cred is not None]
    if remove or add:
        try:
            broker.change_scram_credentials(add, remove)
        except KafkalogError as e:
            logger.error("AlterUserScramCredentials: the credentials could not be stored, nothing changed: %s", e)
            results = [{"user": r["user"], "error_code": UNKNOWN_SERVER_ERROR, "error_message": None}
                       for r in results]
    return broker.response(request, {"throttle_time": 0, "results": results})
