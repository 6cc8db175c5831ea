"""Client quota administration: AlterClientQuotas and DescribeClientQuotas (Kafka's controller
``ClientQuotaControlManager`` and ``ClientQuotasImage.describe``).

An entity is a set of ``user``, ``client-id`` (or ``ip``) names, a null name being the type's
``<default>``. Alter needs ALTER_CONFIGS on the cluster, Describe DESCRIBE_CONFIGS. Alter checks each
entry as Kafka does: a quota key twice in one entry, an entity twice in one request, an empty entity,
an unknown entity type, an empty name, ``ip`` combined with another type, a key the entity's types do
not have, a value not above 0, a fractional or too large value of an integral key are INVALID_REQUEST;
the other entries apply (unless ``validate_only``) and are stored (:mod:`.quota_store`) before the
answer. Describe matches entities against its filter: exact names, defaults and any name, ``strict``
excluding entities with more types than the filter names. The quotas in force: :mod:`.quotas`
(checked against Kafka 4.4 by tests/server/test_client_quotas.py)."""

from __future__ import annotations

import ipaddress
import logging
import math
from typing import TYPE_CHECKING, Any

from kafkalog.errors import KafkalogError
from kafkalog.server.error_codes import (
    CLUSTER_AUTHORIZATION_FAILED,
    INVALID_REQUEST,
    UNKNOWN_SERVER_ERROR,
    UNSUPPORTED_VERSION,
)
from kafkalog.server.quota.quota_store import Entity, Quotas, entity_of
from kafkalog.server.requests.protocol import Request
from kafkalog.server.security.acl_operations import ALTER_CONFIGS, CLUSTER, DESCRIBE_CONFIGS

if TYPE_CHECKING:      # the state owner that dispatches to these handlers
    from kafkalog.server.broker import Broker

logger = logging.getLogger("kafkalog.server")

USER, CLIENT_ID, IP = "user", "client-id", "ip"
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"
#: Kafka's ``QuotaConfig``: the keys of user and client-id entities and their types
CLIENT_KEYS = {PRODUCER_BYTE_RATE: "LONG", CONSUMER_BYTE_RATE: "LONG", REQUEST_PERCENTAGE: "DOUBLE",
               CONTROLLER_MUTATION_RATE: "DOUBLE"}
IP_KEYS = {CONNECTION_CREATION_RATE: "INT"}
_LIMITS = {"LONG": 2.0 ** 63 - 1, "INT": 2.0 ** 31 - 1, "SHORT": 2.0 ** 15 - 1}
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


def _java_hash(s: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units), unsigned."""
    h = 0
    units = s.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i:i + 2], "big")) & 0xFFFFFFFF
    return h


def java_map(pairs: list[tuple[str, str | None]]) -> str:
    """``HashMap.toString`` of a map built with ``new HashMap<>(n)`` then ``put`` in this order (Kafka's
    messages name an entity so)."""
    cap = 1
    while cap < len(pairs):
        cap *= 2
    table: dict[str, str | None] = {}
    for k, v in pairs:
        table[k] = v
        while len(table) > cap * 0.75:
            cap *= 2

    def bucket(k: str) -> int:
        h = _java_hash(k)
        return (h ^ (h >> 16)) & (cap - 1)

    order = sorted(range(len(table)), key=lambda i: bucket(list(table)[i]))
    keys = list(table)
    return "{" + ", ".join(f"{keys[i]}={'null' if table[keys[i]] is None else table[keys[i]]}" for i in order) + "}"


def _entity_text(pairs: list[tuple[str, str | None]]) -> str:
    return f"ClientQuotaEntity(entries={java_map(pairs)})"


def _valid_ip(name: str | None) -> bool:
    if name is None:
        return True
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


def _keys_of(entity: dict[str, str | None]) -> tuple[dict[str, str] | None, str]:
    """The config keys the entity's types take, else None and Kafka's message."""
    has_user, has_client, has_ip = USER in entity, CLIENT_ID in entity, IP in entity
    if has_ip:
        if has_user or has_client:
            return None, "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"
        if not _valid_ip(entity[IP]):
            return None, f"{entity[IP]} is not a valid IP or resolvable host."
        return IP_KEYS, ""
    if has_user or has_client:
        return CLIENT_KEYS, ""
    return None, "Invalid empty client quota entity"


def _check_value(keys: dict[str, str], key: str, value: float) -> tuple[int, str] | None:
    kind = keys.get(key)
    if kind is None:
        return INVALID_REQUEST, f"Invalid configuration key {key}"
    if not math.isfinite(value):
        return INVALID_REQUEST, f"Quota {key} must be a finite number"
    if value <= 0.0:
        return INVALID_REQUEST, f"Quota {key} must be greater than 0"
    if kind == "DOUBLE":
        return None
    if value > _LIMITS[kind]:
        article = "an" if kind == "INT" else "a"
        return INVALID_REQUEST, f"Proposed value for {key} is too large for {article} {kind}."
    if value - math.floor(value) > 1e-16:
        return INVALID_REQUEST, f"{key} cannot be a fractional value."
    return None


def _alter_entity(entity: dict[str, str | None], ops: dict[str, float | None], current: dict[str, float]
                  ) -> tuple[int, str | None, dict[str, float] | None]:
    """(error, message, the entity's quotas after the change)."""
    if not entity:
        return INVALID_REQUEST, "Invalid empty client quota entity", None
    for etype, name in entity.items():
        if etype not in (USER, CLIENT_ID, IP):
            return INVALID_REQUEST, f"Unhandled client quota entity type: {etype}", None
        if name is not None and not name:
            return INVALID_REQUEST, f"Empty {etype} not supported", None
    keys, why = _keys_of(entity)
    if keys is None:
        return INVALID_REQUEST, why, None
    new = dict(current)
    for key, value in ops.items():
        if value is None:
            new.pop(key, None)
            continue
        err = _check_value(keys, key, value)
        if err is not None:
            return err[0], err[1], None
        new[key] = value
    return 0, None, new


def handle_alter_client_quotas(broker: Broker, request: Request) -> Any:
    body = request.body
    # Kafka's ``AlterClientQuotasRequest.entries``: each entry's types in a map (a type twice: the last)
    entries = []
    for e in body.entries:
        pairs: dict[str, str | None] = {}
        for x in e.entity:
            pairs[x.entity_type] = x.entity_name
        entries.append((pairs, [(x.entity_type, x.entity_name) for x in e.entity],
                        [(op.key, None if op.remove else float(op.value)) for op in e.ops]))
    if not broker.authorize(ALTER_CONFIGS, CLUSTER, "kafka-cluster"):
        # Kafka's error response: one result per entry of the request
        return broker.response(request, {"throttle_time": 0, "entries": [
            {"error_code": CLUSTER_AUTHORIZATION_FAILED, "error_message": "Cluster authorization failed.",
             "entity": [{"entity_type": t, "entity_name": n} for t, n in pairs.items()]}
            for pairs, _r, _o in entries]})
    quotas: Quotas = broker.client_quotas.quotas
    results: dict[Entity, tuple[dict[str, str | None], int, str | None]] = {}
    changed: Quotas = {}
    for pairs, raw_pairs, ops in entries:
        key = entity_of(pairs)
        alterations: dict[str, float | None] = {}
        dup_key = None
        for k, v in ops:
            if k not in alterations:
                alterations[k] = v
            elif dup_key is None:
                dup_key = k
        text = _entity_text(raw_pairs_dedup(raw_pairs))
        if dup_key is not None:
            results[key] = (pairs, INVALID_REQUEST,
                            f"Duplicate quota key {dup_key} not updating quota for this entity {text}")
        if key in results:
            # (as Kafka's controller: a first alteration of the entity in the request stays applied)
            results[key] = (pairs, INVALID_REQUEST, f"Ignoring duplicate entity {text}")
            continue
        current = changed.get(key, quotas.get(key, {}))
        code, message, new = _alter_entity(pairs, alterations, current)
        results[key] = (pairs, code, message)
        if code == 0 and new is not None and new != current:
            changed[key] = new
    if changed and not body.validate_only:
        try:
            broker.client_quotas.change(changed)
        except KafkalogError as e:
            logger.error("AlterClientQuotas: the quotas could not be stored, nothing changed: %s", e)
            results = {k: (p, UNKNOWN_SERVER_ERROR, None) for k, (p, _c, _m) in results.items()}
    return broker.response(request, {"throttle_time": 0, "entries": [
        {"error_code": code, "error_message": message,
         "entity": [{"entity_type": t, "entity_name": n} for t, n in pairs.items()]}
        for pairs, code, message in results.values()]})


def raw_pairs_dedup(raw: list[tuple[str, str | None]]) -> list[tuple[str, str | None]]:
    """The request's (type, name) pairs as Kafka's map holds them: a type twice keeps its first place
    and its last name."""
    out: dict[str, str | None] = {}
    for t, n in raw:
        out[t] = n
    return list(out.items())


def _filter(components: Any) -> tuple[dict[str, str | None], set[str]] | tuple[int, str]:
    """Kafka's exact and type matches of a filter, else its (error, message)."""
    exact: dict[str, str | None] = {}
    typed: set[str] = set()
    for c in components:
        etype = c.entity_type
        if not etype:
            return INVALID_REQUEST, "Invalid empty entity type."
        if etype in exact or etype in typed:
            return INVALID_REQUEST, f"Entity type {etype} cannot appear more than once in the filter."
        if etype not in (USER, CLIENT_ID, IP):
            return UNSUPPORTED_VERSION, f"Unsupported entity type {etype}"
        if c.match_type == MATCH_EXACT:
            if c.match is None:
                return INVALID_REQUEST, "Request specified MATCH_TYPE_EXACT, but set match string to null."
            exact[etype] = c.match
        elif c.match_type == MATCH_DEFAULT:
            if c.match is not None:
                return INVALID_REQUEST, "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."
            exact[etype] = None
        elif c.match_type == MATCH_SPECIFIED:
            if c.match is not None:
                return INVALID_REQUEST, "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."
            typed.add(etype)
        else:
            return INVALID_REQUEST, f"Unknown match type {c.match_type}"
    if (IP in exact or IP in typed) and (USER in exact or USER in typed or CLIENT_ID in exact or CLIENT_ID in typed):
        return INVALID_REQUEST, ("Invalid entity filter component combination. IP filter component should not be "
                                 "used with user or clientId filter component.")
    return exact, typed


def _matches(entity: dict[str, str | None], exact: dict[str, str | None], typed: set[str], strict: bool) -> bool:
    if strict and len(entity) != len(exact) + len(typed):
        return False
    return all(t in entity and entity[t] == n for t, n in exact.items()) and all(t in entity for t in typed)


def handle_describe_client_quotas(broker: Broker, request: Request) -> Any:
    body = request.body
    if not broker.authorize(DESCRIBE_CONFIGS, CLUSTER, "kafka-cluster"):
        return broker.response(request, {"throttle_time": 0, "error_code": CLUSTER_AUTHORIZATION_FAILED,
                                         "error_message": None, "entries": None})
    f = _filter(body.components)
    if isinstance(f[0], int):
        return broker.response(request, {"throttle_time": 0, "error_code": f[0], "error_message": f[1],
                                         "entries": None})
    exact, typed = f
    entries = []
    for entity, values in broker.client_quotas.quotas.items():
        pairs = dict(entity)
        if values and _matches(pairs, exact, typed, body.strict):
            entries.append({"entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                            "values": [{"key": k, "value": v} for k, v in sorted(values.items())]})
    return broker.response(request, {"throttle_time": 0, "error_code": 0, "error_message": "",
                                     "entries": entries})
